//! The control channel both ends speak, the sender's session over it, the sender's one
//! sequence every workload runs through (`sequence`), what the control protocol adds to a
//! stream engine's halves (`driver`), the synchronized start (`--start-at`), the accept gate
//! both receivers stand behind, the receiver's handshake, and the tests it admits within its
//! limits.

pub mod admission;
pub mod auth;
pub mod control;
pub mod driver;
pub mod end_report;
mod first_answer;
pub mod gate;
pub mod live;
pub mod logq;
pub mod progress;
pub mod receiver;
pub mod sender;
pub mod sequence;
pub mod server;
pub mod source;
pub mod start;
