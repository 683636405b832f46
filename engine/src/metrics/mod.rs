//! Counters, window sampling, CPU clocks, sequence tracking and the figure types.

pub mod figures;
pub mod measure;
pub mod seq;
pub mod summary;
pub mod xdp;
