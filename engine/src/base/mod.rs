//! Plain data and helpers with no I/O: errors, units, the test spec.

pub mod error;
pub mod spec;
pub mod start_at;
pub mod stop;
pub mod text;
pub mod units;

/// Version of every JSON document uringbench writes (`schema_version`), one number for all
/// kinds: bumped when a key of any document changes meaning (new keys are added freely).
pub const SCHEMA_VERSION: u32 = 1;
