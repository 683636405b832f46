//! Placement of queues on CPUs, the queue threads that run them, the one skeleton every side
//! of a test runs over its threads, and the report each side assembles from them.

pub mod handoff;
pub mod nic_queues;
pub mod placement;
pub mod side;
pub mod side_report;
pub mod threads;
