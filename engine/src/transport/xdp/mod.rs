//! AF_XDP loops: send and receive over XSK rings.

pub mod kernel_watch;
pub mod live_gen;
pub mod recv;
pub mod send;
