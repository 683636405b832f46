//! io_uring: building and waiting on rings, registered memory, buffer rings, fast paths, zero-copy receive,
//! the layouts of an operation's user_data.

pub mod fastpath;
pub mod ring;
pub(crate) mod user_data;
pub mod zcrx;
