//! Stack sysctls: socket buffers against the bandwidth-delay product, congestion control,
//! busy polling, and the backlog that softnet drops point at.
//!
//! TCP autotuning grows a flow's buffers up to the third field of `net.ipv4.tcp_rmem` /
//! `tcp_wmem`; a flow cannot keep more than its buffer in flight, so a buffer below the
//! bandwidth-delay product caps the rate at buffer ÷ RTT whatever the NIC can do. The kernel
//! also keeps part of the buffer for overhead, hence the factor of two.

use super::facts::{BacklogFacts, BusyPollFacts, CongestionFacts, TcpBufferFacts};
use super::{sysctl, Check, Context, HostFs};
use crate::base::units::format_bits_per_second;
use crate::sys::hostinfo::softnet::parse_softnet_stat;

/// Bandwidth assumed when neither `--bandwidth`, a link speed nor a cloud cap says more.
pub(crate) const DEFAULT_BANDWIDTH_BPS: u64 = 25_000_000_000;
/// RTT assumed without `--target` (a path across a data centre or between zones).
pub(crate) const DEFAULT_RTT_US: f64 = 1000.0;

pub fn checks(ctx: &Context, fs: &dyn HostFs) -> Vec<Check> {
    vec![buffers(ctx, fs), congestion(fs), busy_poll(fs), backlog(fs)]
}

/// The three fields of `tcp_rmem`/`tcp_wmem`: min, default, max.
pub(crate) fn parse_triple(text: &str) -> Option<[u64; 3]> {
    let v: Vec<u64> = text.split_whitespace().map(|f| f.parse().ok()).collect::<Option<_>>()?;
    v.try_into().ok()
}

/// The bandwidth to plan buffers for, and where that figure comes from.
pub(crate) fn planned_bandwidth(ctx: &Context) -> (u64, String) {
    if let Some(b) = ctx.bandwidth_bps {
        return (b, "--bandwidth".into());
    }
    if let Some(s) = ctx.iface.as_ref().and_then(|l| l.speed_mbps) {
        return (u64::from(s) * 1_000_000, "link speed".into());
    }
    if let Some(cap) = ctx.cloud.and_then(|c| crate::sys::hostinfo::egress_cap(c, ctx.cpus)).and_then(|c| c.gbps) {
        return ((cap * 1e9) as u64, "cloud egress cap".into());
    }
    (DEFAULT_BANDWIDTH_BPS, "assumed; give --bandwidth".into())
}

fn buffers(ctx: &Context, fs: &dyn HostFs) -> Check {
    let id = "tcp.buffers";
    let (bw, bw_from) = planned_bandwidth(ctx);
    let (rtt_us, rtt_from) = match ctx.target.as_ref().and_then(|t| t.rtt_us) {
        Some(r) => (r, "measured handshake"),
        None => (DEFAULT_RTT_US, "assumed; give --target"),
    };
    let bdp = (bw as f64 / 8.0 * rtt_us / 1e6) as u64;
    let need = (2 * bdp).max(1 << 20).next_power_of_two();
    let read = |name: &str| sysctl(fs, name).ok();
    let rmem = read("net.ipv4.tcp_rmem").as_deref().and_then(parse_triple);
    let wmem = read("net.ipv4.tcp_wmem").as_deref().and_then(parse_triple);
    let rmem_max = read("net.core.rmem_max").and_then(|v| v.parse::<u64>().ok());
    let wmem_max = read("net.core.wmem_max").and_then(|v| v.parse::<u64>().ok());
    let facts = TcpBufferFacts {
        bandwidth_bps: bw,
        bandwidth_from: bw_from.clone(),
        rtt_us,
        rtt_from: rtt_from.into(),
        bdp_bytes: bdp,
        wanted_bytes: need,
        tcp_rmem: rmem,
        tcp_wmem: wmem,
        rmem_max,
        wmem_max,
    };
    let fix = format!(
        "sysctl -w net.core.rmem_max={need} net.core.wmem_max={need} net.ipv4.tcp_rmem='4096 131072 {need}' net.ipv4.tcp_wmem='4096 16384 {need}'   # or scripts/tune.sh apply"
    );
    let (Some(rmem), Some(wmem)) = (rmem, wmem) else {
        return Check::warn(id, "net.ipv4.tcp_rmem / tcp_wmem unreadable or not three numbers").fix(fix).facts(facts);
    };
    let plan = format!(
        "BDP {} KiB ({} {bw_from}, RTT {:.0} µs {rtt_from})",
        bdp >> 10,
        format_bits_per_second(bw as f64),
        rtt_us
    );
    let mut short = Vec::new();
    for (name, have) in [
        ("tcp_rmem max", Some(rmem[2])),
        ("tcp_wmem max", Some(wmem[2])),
        ("rmem_max", rmem_max),
        ("wmem_max", wmem_max),
    ] {
        if let Some(v) = have.filter(|&v| v < need) {
            short.push(format!("{name} {} KiB", v >> 10));
        }
    }
    if short.is_empty() {
        Check::pass(id, format!("tcp_rmem/tcp_wmem max {}/{} KiB cover 2x {plan}", rmem[2] >> 10, wmem[2] >> 10))
            .facts(facts)
    } else {
        Check::warn(
            id,
            format!("{} below {} KiB = 2x {plan}: flows stall on buffer space", short.join(", "), need >> 10),
        )
        .fix(fix)
        .facts(facts)
    }
}

fn congestion(fs: &dyn HostFs) -> Check {
    let id = "tcp.congestion";
    let cc = sysctl(fs, "net.ipv4.tcp_congestion_control");
    let available = sysctl(fs, "net.ipv4.tcp_available_congestion_control").unwrap_or_default();
    let qdisc = sysctl(fs, "net.core.default_qdisc").ok();
    let facts = CongestionFacts {
        congestion_control: cc.as_ref().ok().cloned(),
        available: available.split_whitespace().map(str::to_owned).collect(),
        default_qdisc: qdisc,
    };
    match cc.as_deref() {
        Err(e) => Check::skip(id, format!("congestion control unknown ({e})")).facts(facts),
        Ok("reno") => {
            Check::warn(id, "congestion control reno: halves its window on every loss, slow to regrow at high BDP")
                .fix("sysctl -w net.ipv4.tcp_congestion_control=cubic   # or bbr (modprobe tcp_bbr)")
                .facts(facts)
        }
        Ok(cc) => Check::pass(id, format!("congestion control {cc} (available: {available})")).facts(facts),
    }
}

fn busy_poll(fs: &dyn HostFs) -> Check {
    let id = "tcp.busy_poll";
    let (poll, read) = (sysctl(fs, "net.core.busy_poll"), sysctl(fs, "net.core.busy_read"));
    let facts = BusyPollFacts { busy_poll: poll.as_ref().ok().cloned(), busy_read: read.as_ref().ok().cloned() };
    match (poll, read) {
        (Ok(p), Ok(r)) => {
            let on = p.parse::<u64>().unwrap_or(0) > 0 || r.parse::<u64>().unwrap_or(0) > 0;
            let what = if on {
                "sockets spin in the kernel before sleeping (lower latency, more CPU)"
            } else {
                "kernel busy polling off (readers are woken by interrupts; uringbench spins in user space where --busy-poll says)"
            };
            Check::pass(id, format!("net.core.busy_poll {p} µs, busy_read {r} µs: {what}")).facts(facts)
        }
        _ => Check::skip(
            id,
            "net.core.busy_poll/busy_read not visible here (a network namespace shows only its own sysctls)",
        )
        .facts(facts),
    }
}

fn backlog(fs: &dyn HostFs) -> Check {
    let id = "tcp.backlog";
    let max = sysctl(fs, "net.core.netdev_max_backlog").ok().and_then(|v| v.parse::<u64>().ok());
    let drops: Option<u64> = fs
        .read("/proc/net/softnet_stat")
        .ok()
        .and_then(|t| parse_softnet_stat(&t).ok())
        .map(|cpus| cpus.iter().map(|c| u64::from(c.dropped)).sum());
    let facts = BacklogFacts { netdev_max_backlog: max, softnet_dropped_since_boot: drops };
    let Some(max) = max else {
        return Check::skip(id, "net.core.netdev_max_backlog not visible here (global sysctl)").facts(facts);
    };
    match drops {
        Some(d) if d > 0 => {
            Check::warn(id, format!("netdev_max_backlog {max}: softnet backlogs dropped {d} packets since boot"))
                .fix(format!("sysctl -w net.core.netdev_max_backlog={}", (max * 4).max(16384)))
                .facts(facts)
        }
        Some(_) => Check::pass(id, format!("netdev_max_backlog {max}, no softnet drops since boot")).facts(facts),
        None => Check::pass(id, format!("netdev_max_backlog {max} (/proc/net/softnet_stat unreadable)")).facts(facts),
    }
}

#[cfg(test)]
mod tests {
    use super::super::fake::FakeFs;
    use super::super::testctx::{nic_ctx, veth_ctx};
    use super::super::{Facts, Reach, Status, TargetFacts};
    use super::*;

    fn stack(rmem: &str, rmem_max: &str) -> FakeFs {
        FakeFs::new(&[
            ("/proc/sys/net/ipv4/tcp_rmem", rmem),
            ("/proc/sys/net/ipv4/tcp_wmem", "4096\t16384\t4194304\n"),
            ("/proc/sys/net/core/rmem_max", rmem_max),
            ("/proc/sys/net/core/wmem_max", "212992\n"),
        ])
    }

    #[test]
    fn triples() {
        assert_eq!(parse_triple("4096\t131072\t33554432\n"), Some([4096, 131072, 33554432]));
        assert_eq!(parse_triple("4096 131072"), None);
        assert_eq!(parse_triple("a b c"), None);
    }

    #[test]
    fn buffers_against_bdp() {
        let mut ctx = veth_ctx();
        // Default plan: 25 Gbit/s x 1 ms = 3125000 B BDP, 2x → 8 MiB wanted.
        let c = buffers(&ctx, &stack("4096\t131072\t6291456\n", "212992\n"));
        assert_eq!(c.status, Status::Warn);
        let Some(Facts::TcpBuffers(f)) = &c.facts else { panic!("{:?}", c.facts) };
        assert_eq!(f.bdp_bytes, 3_125_000);
        assert_eq!(f.wanted_bytes, 8 << 20);
        assert!(c.summary.contains("tcp_rmem max 6144 KiB") && c.summary.contains("wmem_max 208 KiB"), "{}", c.summary);
        assert!(c.fix.unwrap().contains("net.ipv4.tcp_rmem='4096 131072 8388608'"));
        // A measured 40 µs RTT (veth): tiny BDP; the 1 MiB floor stays.
        ctx.target = Some(TargetFacts {
            host: "10.77.0.2".into(),
            addr: "10.77.0.2".parse().unwrap(),
            port: 5300,
            reach: Reach::Listening,
            rtt_us: Some(40.0),
            path_mtu: Some(9000),
            local: false,
        });
        let fs = stack("4096 131072 33554432", "33554432").with("/proc/sys/net/core/wmem_max", "33554432");
        let fs = fs.with("/proc/sys/net/ipv4/tcp_wmem", "4096 16384 33554432");
        let c = buffers(&ctx, &fs);
        assert_eq!(c.status, Status::Pass, "{}", c.summary);
        let Some(Facts::TcpBuffers(f)) = &c.facts else { panic!("{:?}", c.facts) };
        assert_eq!(f.rtt_from, "measured handshake");
        let garbled = stack("lots", "x");
        assert_eq!(buffers(&ctx, &garbled).status, Status::Warn);
        assert_eq!(buffers(&ctx, &FakeFs::default()).status, Status::Warn, "unreadable");
        // A 100 Gbit/s link plans for the link.
        assert_eq!(planned_bandwidth(&nic_ctx("mlx5_core", 8, 8)), (100_000_000_000, "link speed".into()));
    }

    #[test]
    fn congestion_busy_poll_backlog() {
        let fs = FakeFs::new(&[
            ("/proc/sys/net/ipv4/tcp_congestion_control", "reno\n"),
            ("/proc/sys/net/core/busy_poll", "0\n"),
            ("/proc/sys/net/core/busy_read", "50\n"),
            ("/proc/sys/net/core/netdev_max_backlog", "1000\n"),
            ("/proc/net/softnet_stat", "000a0000 00000003 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000\n"),
        ]);
        assert_eq!(congestion(&fs).status, Status::Warn);
        assert_eq!(congestion(&fs.with("/proc/sys/net/ipv4/tcp_congestion_control", "bbr\n")).status, Status::Pass);
        assert_eq!(congestion(&FakeFs::default()).status, Status::Skip);
        let b =
            busy_poll(&FakeFs::new(&[("/proc/sys/net/core/busy_poll", "0"), ("/proc/sys/net/core/busy_read", "50")]));
        assert!(b.summary.contains("spin in the kernel"), "{}", b.summary);
        assert_eq!(busy_poll(&FakeFs::default()).status, Status::Skip, "inside a namespace");
        let fs = FakeFs::new(&[
            ("/proc/sys/net/core/netdev_max_backlog", "1000\n"),
            ("/proc/net/softnet_stat", "000a0000 00000003 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000\n"),
        ]);
        let c = backlog(&fs);
        assert_eq!(c.status, Status::Warn, "{}", c.summary);
        assert_eq!(c.fix.as_deref(), Some("sysctl -w net.core.netdev_max_backlog=16384"));
        let clean = fs.with("/proc/net/softnet_stat", "000a0000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000\n");
        assert_eq!(backlog(&clean).status, Status::Pass);
        let garbled =
            FakeFs::new(&[("/proc/sys/net/core/netdev_max_backlog", "1000"), ("/proc/net/softnet_stat", "zz")]);
        assert_eq!(backlog(&garbled).status, Status::Pass, "unreadable softnet: no evidence of drops");
        assert_eq!(backlog(&FakeFs::default()).status, Status::Skip);
    }
}
