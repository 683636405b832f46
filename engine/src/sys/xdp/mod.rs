//! AF_XDP plumbing: the steering program and the XSK sockets with their UMEM rings.

pub mod program;
pub mod socket;
