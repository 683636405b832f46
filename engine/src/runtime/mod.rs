//! Placement of queues on CPUs, the queue threads that run them, the one side every test runs
//! over its threads (`side`, with a stream engine's halves in each direction), and the report
//! each side assembles from them.

pub mod handoff;
pub mod nic_queues;
pub mod placement;
pub mod side;
pub mod side_report;
pub mod threads;
