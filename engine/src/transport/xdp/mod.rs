//! AF_XDP loops: send and receive over XSK rings.

pub mod recv;
pub mod send;
