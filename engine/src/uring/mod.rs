//! io_uring: building and waiting on rings, registered memory, buffer rings, fast paths, zero-copy receive.

pub mod fastpath;
pub mod ring;
pub mod zcrx;
