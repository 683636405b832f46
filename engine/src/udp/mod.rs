//! UDP measurement pieces shared by the UDP transport loops and the iperf2 interop code.
//!
//! Every UDP datagram carries a 64-bit sequence number and a send timestamp, and the
//! receiver reports sent, received, lost, out-of-order, duplicates and jitter. The
//! datagram header ([`payload`]) is iperf2's, so iperf2 servers can account our datagrams and
//! we can account an iperf2 client's; the per-flow accounting ([`seq`]) is iperf2's too, made
//! exact where iperf2 guesses (duplicates, losses at the very end).
//!
//! Nothing here touches a socket: the io_uring loops are
//! [`crate::transport::udp_send`] and [`crate::transport::udp_recv`].

pub mod payload;
pub mod seq;

pub use payload::{decode, encode, encode_fin, Datagram, WireTime, HEADER_LEN};
pub use seq::{Arrival, DelayStats, SeqStats, SeqTracker};
