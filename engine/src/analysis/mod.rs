//! What limited a run (the bottleneck verdict), and whether a change helped (A/B comparisons
//! and their statistics).

pub mod compare;
pub mod document;
pub mod stats;
pub mod verdict;
