//! The control channel both ends speak, the sender's session over it, and the one direction
//! driver every stream engine plugs its halves into.

pub mod control;
pub mod driver;
pub mod live;
pub mod sender;
