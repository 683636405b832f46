//! The control channel both ends speak, the sender's session over it, and the receiver's
//! accept loop and limits.

pub mod auth;
pub mod control;
pub mod live;
pub mod logq;
pub mod server;
