//! Renderers and exporters: text, JSON, CSV, charts, saved results.

pub mod chart;
pub mod compare;
pub mod export;
pub mod fleet;
pub mod rr;
pub mod saved;
pub mod stream;
pub mod sweep;
