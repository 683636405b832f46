//! The control channel both ends speak, and the sender's session over it.

pub mod control;
pub mod live;
