//! Placement of queues on CPUs, the queue threads that run them, and the one skeleton every
//! side of a test runs over its threads.

pub mod placement;
pub mod side;
pub mod threads;
