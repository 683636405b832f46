//! Other tools' protocols over our loops.

pub mod iperf2;
