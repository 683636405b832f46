//! AF_XDP plumbing: the steering program and the XSK sockets with their UMEM rings.

pub mod bpf_object;
pub mod kernel_count;
pub mod live_frames;
pub mod program;
pub mod socket;
