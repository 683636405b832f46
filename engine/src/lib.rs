//! # uringbench engine
//!
//! The traffic engine behind the `uringbench` command: it moves bytes with io_uring, one
//! pinned queue thread per CPU, and reports what the *receiver* counted, where the CPU went
//! and what the kernel really did (zero-copy or not).
//!
//! The crate is cut into layers; a layer imports only the layers above it in this table
//! (`layer_rules` enforces it, docs/architecture.md explains it):
//!
//! | layer | holds |
//! |---|---|
//! | [`base`] | errors, units, the test spec, the stop token |
//! | [`sys`] | socket options, TCP_INFO, probes, /proc and /sys, netlink, BPF, AF_XDP sockets, stop signals, host settings |
//! | [`doctor`] | host readiness checks |
//! | [`wire`] | byte formats: UDP payload header, iperf2, iperf3, HTTP/1.1, frames |
//! | [`uring`] | rings, waiting, registered memory, fast paths, zcrx |
//! | [`metrics`] | counters, sampling, sequence tracking, the figure types, statistics over runs |
//! | [`transport`] | per-thread loops: [`transport::tcp`], [`transport::udp`], [`transport::xdp`], [`transport::http`] |
//! | [`runtime`] | placement, queue threads, the one side every test runs (and a stream engine's halves in each direction), the side report built from them |
//! | [`session`] | the control channel, the live test, the sender's session, what the protocol adds to a stream's halves, the receiver's accept loop and limits |
//! | [`workload`] | stream, request/response, HTTP, sweep, rate search, experiments, what the receiver runs |
//! | [`compat`] | iperf2, iperf3 and NTttcp interoperability |
//! | [`analysis`] | the bottleneck verdict, A/B comparisons |
//! | [`report`] | text, JSON, CSV, charts, saved results |

// What is not part of the engine's API is `pub(crate)`, and the compiler keeps it so; every
// unsafe block says why it is sound, every unsafe fn what its caller must uphold.
#![warn(unreachable_pub)]
#![warn(clippy::undocumented_unsafe_blocks, clippy::missing_safety_doc)]

pub mod analysis;
pub mod base;
pub mod compat;
pub mod doctor;
pub mod metrics;
pub mod report;
pub mod runtime;
pub mod session;
pub mod sys;
pub mod transport;
pub mod uring;
pub mod wire;
pub mod workload;

#[cfg(test)]
mod layer_rules;

pub use crate::base::error::{Error, ErrorKind, Result};

// The engine's front door: what a program that runs tests and prints their results (the
// `uringbench` command is one) needs, named by what it is for rather than by the layer it lives
// in. The layers stay public for the engine's own tests and for readers of the architecture, but
// the command reaches the engine only through these names (cli/tests/front_door.rs fails
// otherwise), so a layer can be cut differently without touching the command.

// A test: described by a `TestSpec`, sent with `run_send`/`run_rr`/`run_http`, served by `serve`
// on a `ReceiverConfig` with the receiver's `Workloads`, ended early through a `StopToken`.
pub use crate::base::spec::{Direction, Proto, TestSpec, Tuning, Workload, ZeroCopyMode};
pub use crate::base::start_at::StartAt;
pub use crate::base::stop::StopToken;
pub use crate::metrics::xdp::AttachMode;
pub use crate::runtime::nic_queues::{parse_queue_list, PlacementMode};
pub use crate::runtime::placement::BusyPoll;
pub use crate::session::auth::Psk;
pub use crate::session::control::DEFAULT_PORT;
pub use crate::session::live::{Observer, Quiet, StartInfo};
pub use crate::session::progress::DEFAULT_NO_PROGRESS;
pub use crate::session::receiver::{ReceiverConfig, ServerEvent, ServerLimits};
pub use crate::session::sender::SendOptions;
pub use crate::session::server::{bind, serve};
pub use crate::sys::probe::KernelCaps;
pub use crate::sys::signals::StopSignals;
pub use crate::sys::sockopt::{check_congestion, LocalEnd};
pub use crate::uring::fastpath::{self, FastPaths};
pub use crate::uring::ring::{NapiPoll, SqPoll};
pub use crate::wire::rss::RssMap;
pub use crate::workload::http::{
    check_http, run_http, run_http_live, HttpInterval, HttpOptions, HttpReport, DEFAULT_INTERVAL,
    DEFAULT_REQUEST_RUN_LIMIT,
};
pub use crate::workload::receive::Workloads;
pub use crate::workload::rr::{run_rr, run_rr_live};
pub use crate::workload::stream::{run_send, run_send_live};
pub use crate::workload::xdp_stream::{run_send_xdp, XdpCount, XdpGen, XdpOptions};

// Another tool on the other end: iperf3 (`send --iperf3`: `iperf3_send`, `iperf3_send_as` with
// RSA credentials; `recv --iperf3`: `iperf3_bind` + `iperf3_serve` with `PeerRecvOptions` and
// optionally `Iperf3ServerAuth`) and NTttcp's no-sync mode.
pub use crate::compat::iperf3::{
    bind_receiver as iperf3_bind, run_send as iperf3_send, run_send_as as iperf3_send_as, serve as iperf3_serve,
    ClientAuth as Iperf3ClientAuth, Iperf3Event, Iperf3EventSink, Iperf3Report, Iperf3TestSummary,
    RsaPadding as Iperf3RsaPadding, ServerAuth as Iperf3ServerAuth, ServerOutput as Iperf3ServerOutput,
};
// What `send --iperf3` asks of the server beyond the test (`--gsro`, `--get-server-output`).
pub use crate::compat::iperf3::{run_send_asking as iperf3_send_asking, Iperf3Asks};
pub use crate::compat::ntttcp::{
    bind_receiver as ntttcp_bind, bind_udp_receiver as ntttcp_bind_udp, run_send as ntttcp_send, serve as ntttcp_serve,
    serve_udp as ntttcp_serve_udp, NtttcpEvent, NtttcpEventSink, NtttcpReport, NtttcpTestSummary, NtttcpWindow,
    NTTTCP_PORT,
};
pub use crate::compat::{Caps as PeerCaps, Listening, PeerEvent, PeerEventSink, PeerRecvOptions};
pub use crate::report::receiver::PeerTest;
pub use crate::wire::iperf3::IPERF3_PORT;

// What a test reports, and the documents it is saved as (docs/output.md, docs/schema/).
pub use crate::metrics::document::{
    FailedRun, Kind, RepeatDocument, RunRecord, StreamDocument, Tool, TransactionDocument,
};
pub use crate::metrics::figures::{Host, IntervalFigures, Role, Roles, SideReport, StreamReport, SCHEMA_VERSION};
pub use crate::metrics::latency::{LatencyInterval, WorkingLatency};
pub use crate::metrics::run_figures::RunFigures;
pub use crate::metrics::summary::{RunsSummary, Stats, DEFAULT_SEED};

// Units and text as the command line takes and prints them.
pub use crate::base::text::{escape_controls, peer_text};
pub use crate::base::units;

/// The printers: live lines and events, CSV, saved results read back.
pub mod output {
    pub use crate::report::export::{csv_rows, CSV_HEADER};
    pub use crate::report::exported::{json_text, Exported, OutputFormat};
    pub use crate::report::html::render as html_page;
    pub use crate::report::latency::latency_interval_line;
    pub use crate::report::peer::{received_interval_event, received_start_event};
    pub use crate::report::rr::{rr_header, rr_interval_json, rr_interval_line, rr_interval_titles};
    pub use crate::report::saved::SavedResults;
    pub use crate::report::stream::{
        end_event, header_line, interval_event, interval_json, interval_lines, interval_titles, latency_event,
        placement_lines, start_event, Detail, INTERVAL_TITLES,
    };
}

/// `send --repeat N`: one stream test N times, summarised.
pub mod repeat {
    pub use crate::workload::repeat::{run, RepeatPlan, RepeatResult, RunDone};
}

/// `sweep`: one stream test over a series of values of one parameter.
pub mod sweep {
    pub use crate::report::sweep::{run_line, SWEEP_CSV_HEADER};
    pub use crate::workload::sweep::{run, RunDone, SweepDocument, SweepParam, SweepPlan, SweepResult, SweepRun};
}

/// `search`: the highest rate within a loss limit.
pub mod search {
    pub use crate::workload::search::{search, RateTrial, SearchDocument, SearchPlan, SearchResult};
}

/// `experiment`: settings variants applied, run interleaved, reverted and compared.
pub mod experiment {
    pub use crate::analysis::document::{experiment_document, ExperimentDocument};
    pub use crate::workload::experiment::{run, ExperimentResult, PeerTool, Plan, Progress};
}

/// `compare`: saved runs compared with their statistics.
pub mod compare {
    pub use crate::analysis::compare::{
        compare, compare_experiment, figures_of_value, rank_test_min_runs, CompareReport, Metric, PTest, ALL_METRICS,
    };
    pub use crate::analysis::document::{load_operand, CompareDocument};
}

/// `report --fleet`: what a fleet run collected, merged.
pub mod fleet {
    pub use crate::report::fleet::{csv, heatmap, FleetDocument, FleetReport, FmtIo};
}

/// Host settings changed for a test and reverted after it (`settings`, `experiment`,
/// `recv --variants`).
pub mod openmetrics {
    pub use crate::report::openmetrics::endpoint::{bind, start, MetricsLog};
    pub use crate::report::openmetrics::{MetricsExporter, DEFAULT_MAX_SENDERS, MAX_SENDERS};
    pub use crate::session::receiver::Tally;
}

pub mod settings {
    pub use crate::sys::settings::{default_state, register, revert_registered, Change, Journal, ReceiverVariants};
}

/// iperf2 on the other end: `send --iperf2`, `recv --iperf2`.
pub mod iperf2 {
    pub use crate::compat::iperf2::{
        bind_receiver, run_send, serve, Iperf2Event, Iperf2EventSink, Iperf2RecvOptions, Iperf2TestSummary,
    };
    pub use crate::wire::iperf2::IPERF2_PORT;
}

/// `doctor`: is this host ready for a test, and if not, what to change (`run_doctor` on
/// `DoctorOptions`, shown as text or as a `DoctorDocument`).
pub use crate::doctor::{run as run_doctor, DoctorOptions, DoctorReport};
pub use crate::report::doctor::DoctorDocument;
