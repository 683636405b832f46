//! Placement of queues on CPUs and the queue threads that run them.

pub mod placement;
pub mod threads;
