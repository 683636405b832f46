//! Plain data and helpers with no I/O: errors, units, the test spec.

pub mod error;
pub mod spec;
pub mod stop;
pub mod text;
pub mod units;
