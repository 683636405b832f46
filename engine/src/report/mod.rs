//! Renderers and exporters: text, JSON, CSV, charts, saved results; for stream, rr, sweep and
//! comparison results, doctor's checks, and the merged fleet report.

pub mod chart;
pub mod compare;
pub mod doctor;
pub mod export;
pub mod exported;
pub mod fleet;
pub mod html;
pub mod http;
mod interval_rows;
pub mod iperf2;
pub mod iperf3;
mod iperf3_server;
pub mod latency;
pub mod ntttcp;
pub mod openmetrics;
pub mod peer;
pub mod receiver;
pub mod rr;
pub mod saved;
pub mod search;
pub mod start;
pub mod stream;
pub mod sweep;
