//! Other tools' protocols over our loops.

pub mod iperf2;
pub mod limits;
