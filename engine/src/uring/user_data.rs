//! An operation's `user_data`: the 64 bits io_uring hands back with its completion, the only
//! thing a loop has to find which operation ended. A loop that needs more than a flow's index
//! packs several fields into them (the flow, the connection's generation, a buffer slot, the
//! kind of operation, the bytes submitted). Every such layout is declared here once, as a
//! [`Layout`] of [`Field`]s, so no loop shifts or masks by hand, and each is checked at compile
//! time (no two fields overlap) and by a round-trip test.
//!
//! Packing is on the hot path of every completion: [`Layout::pack`] and [`Layout::unpack`] are
//! `const` and always inlined over constant layouts, so they fold to the shifts and masks the
//! loops wrote by hand (a field a layout lacks folds to nothing). Packing does not mask: a value
//! wider than its field is a bug in the loop, caught by a debug assertion.

/// Where one field sits in the 64 bits: its lowest bit and its width (0: the layout has none).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Field {
    shift: u32,
    bits: u32,
}

impl Field {
    const NONE: Self = Self { shift: 0, bits: 0 };

    const fn at(shift: u32, bits: u32) -> Self {
        Self { shift, bits }
    }

    /// The largest value the field holds (0 when the layout has no such field).
    pub(crate) const fn max(self) -> u64 {
        if self.bits == 0 {
            0
        } else {
            u64::MAX >> (64 - self.bits)
        }
    }

    #[inline(always)]
    const fn put(self, value: u64) -> u64 {
        debug_assert!(value <= self.max(), "a user_data field overflows its bits");
        value << self.shift
    }

    #[inline(always)]
    const fn get(self, raw: u64) -> u64 {
        (raw >> self.shift) & self.max()
    }

    const fn end(self) -> u32 {
        self.shift + self.bits
    }

    /// Whether the two fields share no bit (an absent field shares none).
    const fn apart(self, other: Self) -> bool {
        self.bits == 0 || other.bits == 0 || self.end() <= other.shift || other.end() <= self.shift
    }
}

/// What an operation's user_data says, unpacked. A layout carries only some of the fields;
/// the others pack from and unpack to 0.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct UserData {
    /// The flow, connection or listener the operation belongs to.
    pub index: usize,
    /// The connection's incarnation, so that a late completion for a socket already closed is
    /// not taken for its successor's.
    pub generation: u32,
    /// The buffer slot the operation uses (rr's stamped responses).
    pub slot: u32,
    /// The kind of operation, in the loop's own constants.
    pub op: u64,
    /// The bytes submitted (a TCP send, to account a short send).
    pub len: u32,
}

/// One loop's user_data: where each of [`UserData`]'s fields sits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Layout {
    pub index: Field,
    pub generation: Field,
    pub slot: Field,
    pub op: Field,
    pub len: Field,
}

impl Layout {
    const EMPTY: Self =
        Self { index: Field::NONE, generation: Field::NONE, slot: Field::NONE, op: Field::NONE, len: Field::NONE };

    #[inline(always)]
    pub(crate) const fn pack(&self, ud: UserData) -> u64 {
        self.index.put(ud.index as u64)
            | self.generation.put(ud.generation as u64)
            | self.slot.put(ud.slot as u64)
            | self.op.put(ud.op)
            | self.len.put(ud.len as u64)
    }

    #[inline(always)]
    pub(crate) const fn unpack(&self, raw: u64) -> UserData {
        UserData {
            index: self.index.get(raw) as usize,
            generation: self.generation.get(raw) as u32,
            slot: self.slot.get(raw) as u32,
            op: self.op.get(raw),
            len: self.len.get(raw) as u32,
        }
    }

    /// No two fields overlap, each fits in 64 bits, and none is wider than its type.
    const fn is_sound(&self) -> bool {
        let f = [self.index, self.generation, self.slot, self.op, self.len];
        let mut i = 0;
        while i < f.len() {
            if f[i].end() > 64 {
                return false;
            }
            let mut j = i + 1;
            while j < f.len() {
                if !f[i].apart(f[j]) {
                    return false;
                }
                j += 1;
            }
            i += 1;
        }
        self.generation.bits <= 32 && self.slot.bits <= 32 && self.len.bits <= 32
    }
}

/// TCP stream sender (`transport/tcp/send.rs`): the flow, and the length submitted above it.
pub(crate) const TCP_SEND: Layout = Layout { index: Field::at(0, 32), len: Field::at(32, 32), ..Layout::EMPTY };

/// TCP rr (`transport/tcp/rr.rs`): send or receive, the `--trip-times` stamped-response slot
/// (1,024 per flow), the flow.
pub(crate) const TCP_RR: Layout =
    Layout { op: Field::at(0, 1), slot: Field::at(1, 10), index: Field::at(11, 53), ..Layout::EMPTY };

/// TCP crr (`transport/tcp/crr.rs`): the operation (connect, send, receive, accept, close),
/// the connection's 16-bit generation, its slot. Its cancels carry a sentinel outside the
/// layout's operations (`crr::TIMEOUT_CANCEL`).
pub(crate) const TCP_CRR: Layout =
    Layout { op: Field::at(0, 4), generation: Field::at(4, 16), index: Field::at(20, 44), ..Layout::EMPTY };

/// UDP rr (`transport/udp/rr.rs`): send or receive, the flow.
pub(crate) const UDP_RR: Layout = Layout { op: Field::at(0, 1), index: Field::at(1, 63), ..Layout::EMPTY };

/// HTTP load (the http workload's ring loop): send or receive, the connection (31 bits), its
/// 32-bit generation.
pub(crate) const HTTP: Layout =
    Layout { op: Field::at(0, 1), index: Field::at(1, 31), generation: Field::at(32, 32), ..Layout::EMPTY };

/// rr's doorbell loop (`transport/tcp/rr_bell.rs`): one flow per ring, so only the operation,
/// over all 64 bits (unpacking it is then no operation at all).
pub(crate) const RR_BELL: Layout = Layout { op: Field::at(0, 64), ..Layout::EMPTY };

const _: () = {
    assert!(TCP_SEND.is_sound());
    assert!(TCP_RR.is_sound());
    assert!(TCP_CRR.is_sound());
    assert!(UDP_RR.is_sound());
    assert!(HTTP.is_sound());
    assert!(RR_BELL.is_sound());
};

#[cfg(test)]
mod tests {
    use super::*;

    const LAYOUTS: [(&str, Layout); 6] = [
        ("tcp send", TCP_SEND),
        ("tcp rr", TCP_RR),
        ("tcp crr", TCP_CRR),
        ("udp rr", UDP_RR),
        ("http", HTTP),
        ("rr bell", RR_BELL),
    ];

    /// Every field at its largest value, or at 0, or one of each alternating.
    fn corners(l: &Layout) -> Vec<UserData> {
        let full = UserData {
            index: l.index.max() as usize,
            generation: l.generation.max() as u32,
            slot: l.slot.max() as u32,
            op: l.op.max(),
            len: l.len.max() as u32,
        };
        let zero = UserData::default();
        let mixed = UserData { index: full.index, slot: full.slot, len: full.len, ..zero };
        let other = UserData { generation: full.generation, op: full.op, ..zero };
        let ones = UserData {
            index: l.index.max().min(1) as usize,
            generation: l.generation.max().min(1) as u32,
            slot: l.slot.max().min(1) as u32,
            op: l.op.max().min(1),
            len: l.len.max().min(1) as u32,
        };
        vec![full, zero, mixed, other, ones]
    }

    #[test]
    fn every_layout_round_trips() {
        for (name, l) in LAYOUTS {
            for ud in corners(&l) {
                assert_eq!(l.unpack(l.pack(ud)), ud, "{name}: {ud:?}");
            }
            // Fields are independent: each alone unpacks to itself and nothing else.
            let full = corners(&l)[0];
            let alone = [
                UserData { index: full.index, ..UserData::default() },
                UserData { generation: full.generation, ..UserData::default() },
                UserData { slot: full.slot, ..UserData::default() },
                UserData { op: full.op, ..UserData::default() },
                UserData { len: full.len, ..UserData::default() },
            ];
            let mut seen = 0u64;
            for ud in alone {
                let raw = l.pack(ud);
                assert_eq!(l.unpack(raw), ud, "{name}: {ud:?}");
                assert_eq!(seen & raw, 0, "{name}: {ud:?} shares bits with another field");
                seen |= raw;
            }
        }
    }

    /// The layouts are the bit positions the loops packed by hand before this module (a
    /// completion in flight means the same thing after the change).
    #[test]
    fn layouts_keep_the_hand_packed_positions() {
        let (idx, slot, generation, len) = (0x12345usize, 0x2a5u32, 0xbeefu32, 0x8000_0001u32);
        assert_eq!(
            TCP_SEND.pack(UserData { index: idx, len, ..UserData::default() }),
            idx as u64 | (u64::from(len) << 32)
        );
        assert_eq!(
            TCP_RR.pack(UserData { index: idx, slot, op: 1, ..UserData::default() }),
            ((idx as u64) << 11) | (u64::from(slot) << 1) | 1
        );
        assert_eq!(
            TCP_CRR.pack(UserData { index: idx, generation, op: 4, ..UserData::default() }),
            ((idx as u64) << 20) | (u64::from(generation) << 4) | 4
        );
        assert_eq!(UDP_RR.pack(UserData { index: idx, op: 1, ..UserData::default() }), ((idx as u64) << 1) | 1);
        assert_eq!(
            HTTP.pack(UserData { index: idx, generation: 0xdead_beef, op: 1, ..UserData::default() }),
            (0xdead_beefu64 << 32) | ((idx as u64) << 1) | 1
        );
        assert_eq!(RR_BELL.pack(UserData { op: 2, ..UserData::default() }), 2);
    }

    #[test]
    fn an_overlap_is_unsound() {
        assert!(!Layout { op: Field::at(0, 2), index: Field::at(1, 8), ..Layout::EMPTY }.is_sound());
        assert!(!Layout { index: Field::at(8, 57), ..Layout::EMPTY }.is_sound());
        assert!(!Layout { len: Field::at(0, 33), ..Layout::EMPTY }.is_sound());
    }
}
