//! What limited a run: the bottleneck verdict.

pub mod compare;
pub mod stats;
pub mod verdict;
