//! Counters, window sampling, CPU clocks, sequence tracking and the figure types.

pub mod data_path;
pub mod document;
pub mod figures;
pub mod latency;
pub mod live_latency;
pub mod measure;
pub mod retransmits;
pub mod run_figures;
pub mod seq;
pub mod summary;
pub mod transactions;
pub mod trip_times;
pub mod verdict;
pub mod xdp;
