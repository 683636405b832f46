//! Placement of queues on CPUs, the queue threads that run them, and the report each side
//! assembles from them.

pub mod placement;
pub mod side_report;
pub mod threads;
