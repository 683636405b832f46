//! TCP loops: send, receive (copy and zero-copy), request/response, connect/request/response.

pub mod crr;
pub mod recv;
pub mod recv_zc;
pub mod rr;
mod rr_bell;
pub mod send;
pub(crate) mod trip;
