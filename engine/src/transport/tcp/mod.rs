//! TCP loops: send, receive (copy and zero-copy), request/response, connect/request/response.

pub mod crr;
pub mod recv;
pub mod recv_zc;
pub mod rr;
mod rr_bell;
pub mod send;
pub(crate) mod trip;

/// One flow handed to an rr thread (both rr loops take it: the general one in [`rr`] and the
/// one-flow spinning one in `rr_bell`).
pub(crate) struct RrFlow {
    pub stream: std::net::TcpStream,
    pub queue: u32,
}
