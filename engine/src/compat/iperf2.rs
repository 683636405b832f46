//! iperf2 compatibility: uringbench against an unmodified iperf 2.1.8, one side
//! at a time, so users can compare a uringbench figure with the iperf2 baseline they already
//! have without installing uringbench on both hosts.
//!
//! ## Our sender, iperf2's receiver ([`run_send`])
//! - **TCP** to `iperf -s`: N plain connections, no control channel. The payload byte ('0')
//!   has none of iperf2's header flags in its first word ([`is_plain_tcp_first_word`]), so the
//!   server takes every byte as data and counts to EOF; we half-close at the end, so its byte
//!   count is exactly what we wrote less 4 bytes per connection (the first word, which its
//!   listener reads to classify the stream and leaves out of its count:
//!   [`Iperf2SendReport::iperf2_counts_bytes`]). The receiver's figures are in iperf2's own
//!   output.
//! - **UDP** to `iperf -s -u`: the io_uring UDP loop (GSO or one send per datagram) writes
//!   iperf2's datagram header, then the end-of-test FIN exchange ([`FinConfig::iperf2`]) asks
//!   the server for its report (bytes, lost/total, out-of-order, jitter), which we print as
//!   the receiver side. No report within the bound is an error.
//!
//! Both send for exactly `-t`, like `iperf -c -t`, and measure the whole test (iperf2 has no
//! warm-up or cool-down to exclude): the sender's rate is bytes written ÷ the time from the
//! first send to the last completion, which is what the iperf2 server measures on its side.
//!
//! ## iperf2's sender, our receiver ([`serve`])
//! One TCP listener and one UDP socket on the same port (5001 by default), served from one
//! thread that polls both, test after test.
//! - **TCP**: each accepted connection gets a thread. It classifies the first word
//!   ([`classify_tcp_first_word`]), reads the rest of the header, writes the ack when the
//!   client blocks for one (`-X`), refuses tests that need us to send (`-r`, `-d`, `-R`,
//!   `--full-duplex`: logged, then the connection is closed), and then counts bytes to EOF with
//!   the io_uring multishot receive loop ([`tcp_recv`]) — the header is read with plain
//!   blocking reads first, because it decides whether the test is served at all and the ring
//!   only counts bytes, never looks at them. The header bytes are counted too: an iperf2
//!   client counts them in its own total (captured: `iperf -c -y C` prints exactly the bytes
//!   a counter sees to EOF), and so does `iperf -s`.
//! - **UDP**: iperf2 gives each client port its own server socket (Listener.cpp: the
//!   listening socket is `connect`ed to the client and a new one is bound). We do the same:
//!   the listening socket is peeked, never read, for a new client's first datagram; it is
//!   then connected to that client, handed to a receive thread ([`udp_recv`]: GRO, exact
//!   sequence accounting with [`crate::metrics::seq::SeqTracker`], FINs answered with a
//!   [`crate::wire::iperf2::ServerReport`] the client prints), and a fresh listening socket is bound
//!   to the same port (`SO_REUSEADDR`; the kernel prefers the connected socket for its peer).
//!   Every datagram the client sent before the hand-over is still queued on the socket that
//!   now serves it, so none is lost to the hand-over. Datagrams of *another* new client that
//!   arrive in the microseconds between the two steps are lost to that client (counted as
//!   loss at its start), exactly as with `iperf -s -u`.
//!
//! Flows of one `iperf -c -P N` (same client address, the header says N threads) are one
//! test: one line when the last of them ends. Everything is bounded: header reads time out,
//! a test lasts at most its own `-t` plus a grace period (and never past `--max-time`),
//! concurrent flows are capped, and the serving loop wakes at least every 100 ms.

use crate::base::error::{Error, Result};
use crate::base::spec::{Proto, ZeroCopyMode};
use crate::base::units::{format_bits_per_second, format_bytes};
use crate::metrics::measure::{
    clock_ticks, nominal_cpu_hz, sample_window, QueueCounters, Sample, SampleSources, Window,
};
use crate::metrics::seq::SeqStats;
use crate::runtime::placement::{pin_current_thread, plan, resolve_cpus, BusyPoll};
use crate::runtime::threads::{deal_by_queue, QueueThreads};
use crate::sys::netpath::PathProbe;
use crate::sys::probe::KernelCaps;
use crate::sys::sockopt;
use crate::transport::tcp::recv::{self as tcp_recv, RecvFlow, RecvWorkerConfig};
use crate::transport::tcp::send::{self as tcp_send, SendFlow, SendWorkerConfig, ZeroCopyCounts};
use crate::transport::udp::recv::{self as udp_recv, UdpRecvConfig, UdpRecvFlow, GRO_PAYLOAD};
use crate::transport::udp::send::{self as udp_send, FinConfig, UdpSendConfig, UdpSendFlow};
use crate::uring::fastpath::FastPaths;
use crate::uring::ring::WaitMode;
use crate::uring::ring::WakeBatch;
use crate::wire::iperf2::{
    self, classify_tcp_first_word, is_plain_tcp_first_word, version_string, ClientHdrAck, ServerReport,
    TcpClientHeader, TcpClientKind, TestAmount, UdpClientHeader, HEADER32_SMALL_TRIPTIMES, HEADER_EXTEND,
    HEADER_VERSION1, IPERF2_PORT, IPERF_2_1_8_VERSION, SERVER_ACKFIN_SILENCE,
};
use crate::wire::udp_payload::{self as payload, WireTime};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::{self, Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, Shutdown, SocketAddr, TcpListener, TcpStream, ToSocketAddrs, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// How long a connect to the iperf2 server may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// How long in-flight sends may take to complete after the end.
const DRAIN_LIMIT: Duration = Duration::from_secs(5);
/// How long an accepted TCP client has to send its first word and header.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(5);
/// Flows of one `iperf -c -P N` that connect within this time of the first one are one test.
pub const JOIN_WINDOW: Duration = Duration::from_secs(1);
/// How long past a client's own `-t` we wait for its flows to end.
pub const END_GRACE: Duration = Duration::from_secs(10);
/// A UDP flow that received data and then nothing for this long is over (no FIN came).
pub const UDP_IDLE_END: Duration = Duration::from_secs(3);
/// The serving loop wakes at least this often to enforce deadlines.
const TICK: Duration = Duration::from_millis(100);
/// Receive buffers of a TCP flow thread: 64 x 32 KiB, as the stream receiver uses.
const TCP_RECV_BUFS: u16 = 64;
const TCP_RECV_BUF_SIZE: u32 = 32 * 1024;
/// Receive low-water mark of unpaced TCP flows (see `workload::stream::RECV_LOWAT`).
const TCP_RECV_LOWAT: u32 = 128 * 1024;
/// A sleeping receive thread is woken per 8 completions or 200 us.
const RECV_BATCH: WakeBatch = WakeBatch { want: 8, max_delay_us: 200 };
/// Buffers of a UDP flow's GRO ring (each up to 64 KiB of coalesced datagrams).
const UDP_RECV_BUFS: u16 = 64;
/// Peers whose UDP test was refused are remembered (to log once) this long after their last
/// datagram, and at most this many.
const REFUSED_MEMORY: Duration = Duration::from_secs(60);
const REFUSED_MAX: usize = 4096;
/// Datagrams the serving loop looks at per wake-up, so TCP accepts are never starved.
const UDP_PEEKS_PER_TICK: usize = 256;

// ---- sender ----------------------------------------------------------------------------

/// What `uringbench send --iperf2` asks for.
#[derive(Debug, Clone)]
pub struct Iperf2SendOptions {
    pub target: String,
    pub port: u16,
    pub proto: Proto,
    /// Queue threads' queues (`-P`); flows are `queues * flows_per_queue`.
    pub queues: u32,
    pub flows_per_queue: u32,
    /// How long to send (`-t`): the whole test.
    pub time: Duration,
    /// Bytes per send (TCP) or per datagram (UDP).
    pub len: u32,
    /// Total offered rate over all flows in bits/s; 0 = unlimited.
    pub rate_bps: u64,
    /// TCP sends in flight per flow.
    pub depth: u32,
    pub zerocopy: ZeroCopyMode,
    /// UDP: GSO batches (else one send per datagram).
    pub gso: bool,
    /// Sender-side interval lines; `None` for none.
    pub interval: Option<Duration>,
    pub cpus: Option<Vec<usize>>,
    pub busy_poll: BusyPoll,
    /// The fast paths the front end probed (`--sqpoll`, `--napi`).
    pub fast: FastPaths,
}

impl Default for Iperf2SendOptions {
    fn default() -> Self {
        Self {
            target: String::new(),
            port: IPERF2_PORT,
            proto: Proto::Tcp,
            queues: 1,
            flows_per_queue: 1,
            time: Duration::from_secs(10),
            len: 128 * 1024,
            rate_bps: 0,
            depth: 4,
            zerocopy: ZeroCopyMode::Auto,
            gso: true,
            interval: None,
            cpus: None,
            busy_poll: BusyPoll::Auto,
            fast: FastPaths::default(),
        }
    }
}

impl Iperf2SendOptions {
    /// Flows (TCP connections or UDP sockets) over all queues.
    pub fn flows(&self) -> u32 {
        self.queues.saturating_mul(self.flows_per_queue)
    }
}

/// What one flow of our sender did.
#[derive(Debug, Clone, Default)]
pub struct SentFlow {
    pub queue: u32,
    /// Payload bytes the kernel accepted over the whole test.
    pub bytes: u64,
    /// UDP: datagrams the kernel accepted.
    pub datagrams: u64,
    /// UDP: the sequence number the FIN carried (`last + 1`).
    pub next_seq: u64,
    /// UDP: sends refused with ECONNREFUSED (ICMP port unreachable: nothing listens there).
    pub refused: u64,
    /// UDP: FIN datagrams sent.
    pub fins: u32,
    /// UDP: the iperf2 server's report, when it came back.
    pub report: Option<ServerReport>,
    pub error: Option<String>,
}

/// One sender thread's CPU time over its whole run (`RUSAGE_THREAD`, read by the thread
/// itself before and after its loop, so a thread that ends with the test is still counted).
#[derive(Debug, Clone, Copy, Default)]
pub struct ThreadCpuTime {
    pub cpu: usize,
    pub user_seconds: f64,
    pub system_seconds: f64,
}

/// One host CPU's busy time (user+nice+system+irq+softirq+steal) inside the window.
#[derive(Debug, Clone, Default)]
pub struct HostCpuTime {
    pub cpu: usize,
    pub busy_seconds: f64,
}

/// CPU figures of the sending side.
#[derive(Debug, Clone, Default)]
pub struct SenderCpu {
    /// Per queue thread, over the whole test.
    pub threads: Vec<ThreadCpuTime>,
    /// Per host CPU, over the sampled window (start to `-t`).
    pub host: Vec<HostCpuTime>,
    pub nominal_hz: Option<f64>,
}

/// Bytes all flows offered between two samples (seconds since the start).
#[derive(Debug, Clone, Default)]
pub struct SendInterval {
    pub start: f64,
    pub end: f64,
    pub bytes: u64,
}

/// The sending side of a test against an iperf2 server, plus (UDP) that server's reports.
#[derive(Debug, Clone)]
pub struct Iperf2SendReport {
    pub proto: Proto,
    pub target: SocketAddr,
    pub queues: u32,
    pub len: u32,
    pub rate_bps: u64,
    pub flows: Vec<SentFlow>,
    /// First send to last send completion: the time the bytes took to leave.
    pub seconds: f64,
    /// The sampled window (start to `-t`), over which CPU is given.
    pub window_seconds: f64,
    pub intervals: Vec<SendInterval>,
    pub cpu: SenderCpu,
    /// Threads, CPUs and wait mode, in one line.
    pub placement: String,
    /// The data path used, in one line.
    pub path: String,
    /// TCP: what the kernel did with zero-copy sends (all zero when not used).
    pub zerocopy: ZeroCopyCounts,
    pub notes: Vec<String>,
    pub errors: Vec<String>,
}

/// iperf2's server reports of all flows, summed.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ServerSum {
    pub bytes: u64,
    pub datagrams: u64,
    pub lost: u64,
    pub out_of_order: u64,
    /// Mean of the flows' jitter weighted by datagrams, seconds.
    pub jitter_s: f64,
    /// Longest of the flows' durations, seconds.
    pub seconds: f64,
}

impl ServerSum {
    pub fn bits_per_second(&self) -> f64 {
        rate(self.bytes, self.seconds)
    }
    pub fn loss_percent(&self) -> f64 {
        if self.datagrams == 0 {
            0.0
        } else {
            100.0 * self.lost as f64 / self.datagrams as f64
        }
    }
}

fn rate(bytes: u64, seconds: f64) -> f64 {
    if seconds > 0.0 {
        bytes as f64 * 8.0 / seconds
    } else {
        0.0
    }
}

impl Iperf2SendReport {
    /// Payload bytes written over the whole test.
    pub fn total_bytes(&self) -> u64 {
        self.flows.iter().map(|f| f.bytes).sum()
    }
    /// TCP: what `iperf -s` 2.1.8 prints as its byte count. Its listener reads the first word
    /// of every connection to classify it, and for a plain-data stream leaves those 4 bytes
    /// out of its count (checked: 1 000 000 bytes written to EOF print as 999 996).
    pub fn iperf2_counts_bytes(&self) -> u64 {
        self.flows.iter().map(|f| f.bytes.saturating_sub(4)).sum()
    }
    /// Datagrams sent (UDP).
    pub fn datagrams(&self) -> u64 {
        self.flows.iter().map(|f| f.datagrams).sum()
    }
    /// Offered rate: bytes written ÷ [`Self::seconds`].
    pub fn bits_per_second(&self) -> f64 {
        rate(self.total_bytes(), self.seconds)
    }
    /// UDP flows whose FIN the server did not answer.
    pub fn reports_missing(&self) -> usize {
        if self.proto == Proto::Udp {
            self.flows.iter().filter(|f| f.report.is_none()).count()
        } else {
            0
        }
    }
    /// The iperf2 server's reports summed (UDP, when at least one came back).
    pub fn server_sum(&self) -> Option<ServerSum> {
        let reports: Vec<&ServerReport> = self.flows.iter().filter_map(|f| f.report.as_ref()).collect();
        if reports.is_empty() {
            return None;
        }
        let mut sum = ServerSum::default();
        let mut weight = 0.0;
        for r in reports {
            sum.bytes += r.bytes;
            sum.datagrams += r.datagrams;
            sum.lost += r.lost;
            sum.out_of_order += r.out_of_order;
            sum.jitter_s += r.jitter_s * r.datagrams as f64;
            weight += r.datagrams as f64;
            sum.seconds = sum.seconds.max(r.stop.as_secs_f64());
        }
        sum.jitter_s = if weight > 0.0 { sum.jitter_s / weight } else { 0.0 };
        Some(sum)
    }
    /// Whether every flow ended cleanly (and, for UDP, every report came back).
    pub fn complete(&self) -> bool {
        self.errors.is_empty() && self.reports_missing() == 0
    }
    /// The first problem, as one line.
    pub fn first_error(&self) -> Option<String> {
        self.errors.first().cloned()
    }

    fn proto_name(&self) -> &'static str {
        match self.proto {
            Proto::Tcp => "TCP",
            Proto::Udp => "UDP",
        }
    }

    /// iperf2-like text: one line per flow, a `[SUM]` line, (UDP) the iperf2 server's report,
    /// CPU, notes and errors.
    pub fn render_text(&self) -> String {
        let mut out = String::new();
        let flows = self.flows.len();
        let _ = writeln!(
            out,
            "uringbench {}: {} to iperf2 server {}, {} flow{} on {} queue{}, {} {}, {:.1} s (whole test measured, as iperf2 does)",
            env!("CARGO_PKG_VERSION"),
            self.proto_name(),
            self.target,
            flows,
            if flows == 1 { "" } else { "s" },
            self.queues,
            if self.queues == 1 { "" } else { "s" },
            format_bytes(u64::from(self.len)),
            if self.proto == Proto::Udp { "datagrams" } else { "writes" },
            self.window_seconds,
        );
        let _ = writeln!(out, "sender: {} | {}", self.placement, self.path);
        if self.intervals.len() > 1 {
            let _ = writeln!(out, "[ ID] Interval           Offered (sender)");
            for i in &self.intervals {
                let _ = writeln!(
                    out,
                    "[SUM] {:5.2}-{:<5.2} sec  {:>12} {:>16}",
                    i.start,
                    i.end,
                    format_bytes(i.bytes),
                    format_bits_per_second(rate(i.bytes, i.end - i.start))
                );
            }
        }
        let udp = self.proto == Proto::Udp;
        let _ = writeln!(
            out,
            "[ ID] Interval           Offered (sender)              {}",
            if udp { "Received (iperf2 server report)" } else { "" }
        );
        for (i, f) in self.flows.iter().enumerate() {
            let received = match (&f.report, udp) {
                (Some(r), _) => {
                    server_columns(r.bytes, r.stop.as_secs_f64(), r.jitter_s, r.lost, r.datagrams, r.out_of_order)
                }
                (None, true) => "no report".into(),
                (None, false) => String::new(),
            };
            let _ = writeln!(
                out,
                "[{i:>3}] 0.00-{:<5.2} sec  {:>12} {:>16}   {received}",
                self.seconds,
                format_bytes(f.bytes),
                format_bits_per_second(rate(f.bytes, self.seconds)),
            );
        }
        let received = match self.server_sum() {
            Some(s) => server_columns(s.bytes, s.seconds, s.jitter_s, s.lost, s.datagrams, s.out_of_order),
            None if udp => "no report".into(),
            None => String::new(),
        };
        let _ = writeln!(
            out,
            "[SUM] 0.00-{:<5.2} sec  {:>12} {:>16}   {received}",
            self.seconds,
            format_bytes(self.total_bytes()),
            format_bits_per_second(self.bits_per_second()),
        );
        if udp {
            let fins: u32 = self.flows.iter().map(|f| f.fins).sum();
            let _ = writeln!(
                out,
                "total: sender wrote {} bytes in {} datagrams in {:.3} s; {} FIN{} sent; {}",
                self.total_bytes(),
                self.datagrams(),
                self.seconds,
                fins,
                if fins == 1 { "" } else { "s" },
                match self.server_sum() {
                    Some(s) => format!(
                        "server report: {} bytes, {} datagrams (iperf 2.1.8 counts our FIN among them), {} lost, {} out of order",
                        s.bytes, s.datagrams, s.lost, s.out_of_order
                    ),
                    None => "no iperf2 server report came back".into(),
                }
            );
        } else {
            let _ = writeln!(
                out,
                "total: sender wrote {} bytes in {:.3} s and half-closed; the receiver's figures are in iperf2's own output: \
                 `iperf -s` counts to EOF all but the first 4 bytes of each connection ({} bytes)",
                self.total_bytes(),
                self.seconds,
                self.iperf2_counts_bytes()
            );
        }
        let threads: Vec<String> = self
            .cpu
            .threads
            .iter()
            .map(|t| {
                format!(
                    "cpu{} {:.0}% (usr {:.2}s sys {:.2}s)",
                    t.cpu,
                    100.0 * (t.user_seconds + t.system_seconds) / self.seconds.max(1e-9),
                    t.user_seconds,
                    t.system_seconds
                )
            })
            .collect();
        let host: Vec<String> = self
            .cpu
            .host
            .iter()
            .map(|h| format!("cpu{} {:.0}%", h.cpu, 100.0 * h.busy_seconds / self.window_seconds.max(1e-9)))
            .collect();
        let _ = writeln!(
            out,
            "cpu sender: threads {} | host busy over the first {:.2} s: {}",
            threads.join(", "),
            self.window_seconds,
            host.join(" ")
        );
        if self.zerocopy.sends > 0 {
            let _ = writeln!(
                out,
                "zero-copy: {} sends, kernel copied {} of {} notified",
                self.zerocopy.sends, self.zerocopy.copied, self.zerocopy.notifications
            );
        }
        for note in &self.notes {
            let _ = writeln!(out, "note: {note}");
        }
        for err in &self.errors {
            let _ = writeln!(out, "error: {err}");
        }
        out
    }

    /// A JSON document with the docs/output.md keys that apply (`sum.sender.bytes`, ...).
    pub fn to_json(&self) -> Value {
        let report_json = |r: &ServerReport| {
            json!({"bytes": r.bytes, "seconds": r.stop.as_secs_f64(),
                   "bits_per_second": rate(r.bytes, r.stop.as_secs_f64()), "datagrams": r.datagrams,
                   "lost": r.lost, "out_of_order": r.out_of_order, "jitter_us": r.jitter_s * 1e6})
        };
        let flows: Vec<Value> = self
            .flows
            .iter()
            .enumerate()
            .map(|(i, f)| {
                json!({"id": i, "queue": f.queue,
                       "sender": {"bytes": f.bytes, "datagrams": f.datagrams, "next_seq": f.next_seq,
                                  "refused_sends": f.refused, "fins": f.fins},
                       "receiver": f.report.as_ref().map(report_json), "error": f.error})
            })
            .collect();
        let mut queues: Vec<Value> = Vec::new();
        for q in 0..self.queues {
            let bytes: u64 = self.flows.iter().filter(|f| f.queue == q).map(|f| f.bytes).sum();
            queues.push(json!({"id": q, "sender": {"bytes": bytes, "bits_per_second": rate(bytes, self.seconds)}}));
        }
        let cpu_threads: Vec<Value> = self
            .cpu
            .threads
            .iter()
            .map(|t| json!({"cpu": t.cpu, "user_seconds": t.user_seconds, "system_seconds": t.system_seconds}))
            .collect();
        let cpu_host: Vec<Value> =
            self.cpu.host.iter().map(|h| json!({"cpu": h.cpu, "busy_seconds": h.busy_seconds})).collect();
        let receiver = self.server_sum().map(|s| {
            json!({"source": "iperf2 server report", "bytes": s.bytes, "bits_per_second": s.bits_per_second(),
                   "seconds": s.seconds, "datagrams": s.datagrams, "lost": s.lost,
                   "out_of_order": s.out_of_order, "jitter_us": s.jitter_s * 1e6})
        });
        json!({
            "schema_version": crate::metrics::figures::SCHEMA_VERSION,
            "tool": {"name": "uringbench", "version": env!("CARGO_PKG_VERSION")},
            "mode": "iperf2",
            "test": {"proto": self.proto_name().to_lowercase(), "queues": self.queues, "flows": self.flows.len(),
                     "len": self.len, "rate_bps": self.rate_bps, "time_seconds": self.window_seconds},
            "target": self.target.to_string(),
            "complete": self.complete(),
            "error": self.first_error(),
            "queues": queues,
            "flows": flows,
            "sum": {
                "window_seconds": self.seconds,
                "sender": {"bytes": self.total_bytes(), "total_bytes": self.total_bytes(),
                           "bits_per_second": self.bits_per_second(), "datagrams": self.datagrams(),
                           "iperf2_counts_bytes": (self.proto == Proto::Tcp).then(|| self.iperf2_counts_bytes())},
                "receiver": receiver,
            },
            "intervals": self.intervals.iter().map(|i| json!({"start": i.start, "end": i.end, "bytes": i.bytes,
                           "bits_per_second": rate(i.bytes, i.end - i.start)})).collect::<Vec<_>>(),
            "cpu": {"sender": {"threads": cpu_threads, "host": cpu_host, "nominal_hz": self.cpu.nominal_hz,
                               "window_seconds": self.window_seconds}},
            "sender": {"placement": self.placement, "path": self.path, "notes": self.notes, "errors": self.errors},
        })
    }
}

/// The receiver columns of a UDP line, as iperf2's client prints a server report.
fn server_columns(bytes: u64, seconds: f64, jitter_s: f64, lost: u64, total: u64, ooo: u64) -> String {
    let pct = if total == 0 { 0.0 } else { 100.0 * lost as f64 / total as f64 };
    let mut s = format!(
        "{:>12} {:>16} {:>7.3} ms {lost}/{total} ({pct:.2}%)",
        format_bytes(bytes),
        format_bits_per_second(rate(bytes, seconds)),
        jitter_s * 1e3
    );
    if ooo > 0 {
        let _ = write!(s, " {ooo} out-of-order");
    }
    s
}

/// Resolves `host:port` to the first address.
fn resolve(host: &str, port: u16) -> Result<SocketAddr> {
    let mut addrs =
        (host, port).to_socket_addrs().map_err(|e| Error::usage(format!("cannot resolve target '{host}': {e}")))?;
    addrs.next().ok_or_else(|| Error::usage(format!("target '{host}' has no address")))
}

/// Connects one TCP flow to the iperf2 server, with errors that say what to run there.
fn connect_tcp(addr: SocketAddr) -> Result<TcpStream> {
    let stream = TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT).map_err(|e| match e.raw_os_error() {
        Some(libc::ECONNREFUSED) => Error::peer(format!(
            "nothing listens on {addr} (connection refused): start `iperf -s{}` there",
            if addr.port() == IPERF2_PORT { String::new() } else { format!(" -p {}", addr.port()) }
        )),
        Some(libc::EHOSTUNREACH) | Some(libc::ENETUNREACH) => Error::peer(format!("{addr} is unreachable: {e}")),
        _ if matches!(e.kind(), io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock) => Error::peer(format!(
            "{addr} did not answer within {:.0} s (host down or filtered)",
            CONNECT_TIMEOUT.as_secs_f64()
        )),
        _ => Error::peer(format!("cannot connect to {addr}: {e}")),
    })?;
    let _ = stream.set_nodelay(true);
    Ok(stream)
}

/// Sample offsets of the sender's window: start, each interval boundary, `time`.
fn window_offsets(time: Duration, interval: Option<Duration>) -> Vec<Duration> {
    let mut offsets = vec![Duration::ZERO];
    if let Some(step) = interval.filter(|i| !i.is_zero()) {
        let mut at = step;
        while at < time {
            offsets.push(at);
            at += step;
        }
    }
    offsets.push(time);
    offsets
}

/// User and system CPU seconds the calling thread has used so far.
fn thread_cpu_seconds() -> (f64, f64) {
    // SAFETY: all-zero is a valid rusage, and getrusage only writes into it.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: a valid pointer to our rusage for the duration of the call.
    if unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut usage) } != 0 {
        return (0.0, 0.0);
    }
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    (secs(usage.ru_utime), secs(usage.ru_stime))
}

/// Runs `body` and returns its result with the CPU time it took on this thread.
fn timed<R>(cpu: usize, body: impl FnOnce() -> Result<R>) -> Result<(R, ThreadCpuTime)> {
    let (user0, sys0) = thread_cpu_seconds();
    let result = body()?;
    let (user1, sys1) = thread_cpu_seconds();
    Ok((result, ThreadCpuTime { cpu, user_seconds: user1 - user0, system_seconds: sys1 - sys0 }))
}

/// Busy time of each host CPU between two samples.
fn host_cpu_between(first: &Sample, last: &Sample) -> Vec<HostCpuTime> {
    let tick = clock_ticks();
    last.cpu
        .host
        .iter()
        .filter_map(|b| {
            let a = first.cpu.host.iter().find(|h| h.cpu == b.cpu)?;
            Some(HostCpuTime { cpu: b.cpu, busy_seconds: b.busy.saturating_sub(a.busy) as f64 / tick })
        })
        .collect()
}

/// Whether to use SEND_ZC, and why not when not (the stream workload's rule).
fn decide_zerocopy(mode: ZeroCopyMode, caps: &KernelCaps, path: &PathProbe, len: u32) -> Result<(bool, String)> {
    match mode {
        ZeroCopyMode::Off => Ok((false, "--zerocopy off".into())),
        ZeroCopyMode::On if !caps.send_zc => {
            Err(Error::unsupported("--zerocopy on: this kernel lacks IORING_OP_SEND_ZC (Linux 6.0 or newer)"))
        }
        ZeroCopyMode::On => Ok((true, "--zerocopy on".into())),
        ZeroCopyMode::Auto if !caps.send_zc => Ok((false, "auto: kernel lacks SEND_ZC".into())),
        ZeroCopyMode::Auto if path.local_delivery() => {
            Ok((false, format!("auto: egress {} delivers locally, the kernel would copy anyway", path.describe())))
        }
        ZeroCopyMode::Auto if len < 16 * 1024 => Ok((false, format!("auto: {len}-byte sends are too small"))),
        ZeroCopyMode::Auto => Ok((true, format!("auto: egress {} is a NIC", path.describe()))),
    }
}

/// Runs our sender against an unmodified iperf2 server (`iperf -s`, or `iperf -s -u` for
/// UDP) at `opts.target`. Errors before data flows (refused, unreachable, bad options) come
/// back as `Err`; afterwards problems are recorded in the report (`complete() == false`).
pub fn run_send(opts: &Iperf2SendOptions) -> Result<Iperf2SendReport> {
    if opts.queues == 0 || opts.flows_per_queue == 0 || opts.depth == 0 {
        return Err(Error::usage("--queues, --flows-per-queue and --depth must be at least 1"));
    }
    if opts.time.is_zero() {
        return Err(Error::usage("--time must be longer than 0"));
    }
    if opts.proto == Proto::Udp && !(payload::HEADER_LEN as u32..=udp_send::MAX_DATAGRAM).contains(&opts.len) {
        return Err(Error::usage(format!(
            "UDP datagram length {} is outside {}..={} bytes (iperf2's header takes {})",
            opts.len,
            payload::HEADER_LEN,
            udp_send::MAX_DATAGRAM,
            payload::HEADER_LEN
        )));
    }
    if opts.len == 0 {
        return Err(Error::usage("--len must be at least 1 byte"));
    }
    let caps = KernelCaps::detect()?;
    caps.require_tcp_stream()?;
    let cpus = resolve_cpus(opts.cpus.as_deref())?;
    let placement = plan(opts.queues, &cpus, opts.busy_poll, false, false, &opts.fast)?;
    let target = resolve(&opts.target, opts.port)?;
    let path = PathProbe::to(target.ip(), opts.flows());
    match opts.proto {
        Proto::Tcp => send_tcp(opts, target, &caps, &placement, &path),
        Proto::Udp => send_udp(opts, target, &placement),
    }
}

/// What both protocols' sending runs share after the threads are joined.
struct SendRun {
    t0: Instant,
    end: Instant,
    window: Window,
    window_complete: bool,
    intervals: Vec<SendInterval>,
}

impl SendRun {
    /// Samples the window while the queue threads run, then waits (bounded) for them to finish.
    fn watch<R: Send + 'static>(
        t0: Instant,
        opts: &Iperf2SendOptions,
        counters: &QueueCounters,
        threads: &QueueThreads<R>,
    ) -> SendRun {
        let src = SampleSources { counters, tids: &threads.tids, sockets: &[], iface: None, udp: &[] };
        let offsets = window_offsets(opts.time, opts.interval);
        let mut intervals = Vec::new();
        let window = sample_window(t0, offsets, &src, &|| threads.all_finished(), &mut |iv| {
            intervals.push(SendInterval { start: iv.start, end: iv.end, bytes: iv.sum() })
        });
        let window_complete = window.complete;
        // Every sending thread stops issuing at the deadline and gives up on in-flight sends
        // after DRAIN_LIMIT; this wait is a second bound.
        let hard = Instant::now() + DRAIN_LIMIT + Duration::from_secs(2);
        while !threads.all_finished() && Instant::now() < hard {
            std::thread::sleep(Duration::from_millis(1));
        }
        SendRun { t0, end: Instant::now(), window, window_complete, intervals }
    }

    fn intervals(&self) -> Vec<SendInterval> {
        self.intervals.clone()
    }

    fn cpu(&self, threads: Vec<ThreadCpuTime>) -> SenderCpu {
        let host = match (self.window.first.as_ref(), self.window.last.as_ref()) {
            (Some(a), Some(b)) => host_cpu_between(a, b),
            _ => Vec::new(),
        };
        SenderCpu { threads, host, nominal_hz: nominal_cpu_hz() }
    }

    fn window_seconds(&self) -> f64 {
        match (self.window.first.as_ref(), self.window.last.as_ref()) {
            (Some(a), Some(b)) => (b.at - a.at).as_secs_f64(),
            _ => 0.0,
        }
    }
}

fn send_tcp(
    opts: &Iperf2SendOptions,
    target: SocketAddr,
    caps: &KernelCaps,
    placement: &crate::runtime::placement::Placement,
    path: &PathProbe,
) -> Result<Iperf2SendReport> {
    debug_assert!(is_plain_tcp_first_word(u32::from_be_bytes([tcp_send::PAYLOAD_FILL; 4])));
    let (zerocopy, zc_reason) = decide_zerocopy(opts.zerocopy, caps, path, opts.len)?;
    let mut flows = Vec::with_capacity(opts.flows() as usize);
    for flow in 0..opts.flows() {
        let queue = flow % opts.queues;
        flows.push((queue, SendFlow { stream: connect_tcp(target)?, queue, budget: None }));
    }
    let t0 = Instant::now();
    let counters = Arc::new(QueueCounters::new(opts.queues as usize));
    let total_flows = u64::from(opts.flows());
    let inputs: Vec<(Vec<SendFlow>, SendWorkerConfig)> = deal_by_queue(&placement.threads, flows)
        .into_iter()
        .map(|flows| {
            let cfg = SendWorkerConfig {
                wait: placement.wait,
                ring: placement.fast.ring(),
                batch: WakeBatch { want: (flows.len() as u32 * opts.depth / 2).clamp(1, 4), max_delay_us: 200 },
                len: opts.len,
                depth: opts.depth,
                zerocopy,
                deadline: t0 + opts.time,
                halt: None,
                rate_bps: opts.rate_bps * flows.len() as u64 / total_flows,
                drain_limit: DRAIN_LIMIT,
            };
            (flows, cfg)
        })
        .collect();
    let worker_counters = Arc::clone(&counters);
    let inputs: Vec<_> = placement.threads.iter().map(|p| p.cpu).zip(inputs).collect();
    let threads = QueueThreads::spawn(&placement.threads, inputs, move |(cpu, (flows, cfg))| {
        timed(cpu, || tcp_send::run(flows, &worker_counters, &cfg))
    })?;
    let run = SendRun::watch(t0, opts, &counters, &threads);
    let (results, thread_cpu): (Vec<_>, Vec<_>) = threads.join()?.into_iter().unzip();

    let mut errors = Vec::new();
    let mut notes = vec![format!("zero-copy {} ({zc_reason})", if zerocopy { "on" } else { "off" })];
    let mut zc = ZeroCopyCounts::default();
    let mut sent = Vec::new();
    for r in &results {
        zc.merge(&r.zerocopy);
        if let Some(n) = &r.note {
            notes.push(n.clone());
        }
        for f in &r.flows {
            if let Some(e) = &f.error {
                if !errors.contains(e) {
                    errors.push(e.clone());
                }
            }
            sent.push(SentFlow { queue: f.queue, bytes: f.bytes, error: f.error.clone(), ..Default::default() });
        }
    }
    if !run.window_complete && errors.is_empty() {
        errors.push(format!("the flows to {target} ended before the {:.1} s test did", opts.time.as_secs_f64()));
    }
    Ok(Iperf2SendReport {
        proto: Proto::Tcp,
        target,
        queues: opts.queues,
        len: opts.len,
        rate_bps: opts.rate_bps,
        flows: sent,
        seconds: (run.end - run.t0).as_secs_f64(),
        window_seconds: run.window_seconds(),
        intervals: run.intervals(),
        cpu: run.cpu(thread_cpu),
        placement: placement.summary.clone(),
        path: format!(
            "io_uring {} of {} B, {} in flight per flow, plain data (iperf2 payload '0', no test header), half-close at the end",
            if zerocopy { "SEND_ZC" } else { "SEND (copy)" },
            opts.len,
            opts.depth
        ),
        zerocopy: zc,
        notes,
        errors,
    })
}

fn send_udp(
    opts: &Iperf2SendOptions,
    target: SocketAddr,
    placement: &crate::runtime::placement::Placement,
) -> Result<Iperf2SendReport> {
    let any: IpAddr = if target.is_ipv6() { Ipv6Addr::UNSPECIFIED.into() } else { Ipv4Addr::UNSPECIFIED.into() };
    let local = SocketAddr::new(any, 0);
    let mut sockets = Vec::with_capacity(opts.flows() as usize);
    let mut fin_sockets = Vec::with_capacity(opts.flows() as usize);
    for _ in 0..opts.flows() {
        let s = UdpSocket::bind(local).map_err(|e| Error::io("binding a UDP flow socket", e))?;
        s.connect(target).map_err(|e| Error::io(format!("connecting a UDP flow to {target}"), e))?;
        // The FIN exchange runs after the queue threads, which close their copies.
        fin_sockets.push(s.try_clone().map_err(|e| Error::io("duplicating a UDP flow socket", e))?);
        sockets.push(s);
    }
    let t0 = Instant::now();
    let counters = Arc::new(QueueCounters::new(opts.queues as usize));
    let total_flows = u64::from(opts.flows());
    let inflight = if opts.gso { 8 } else { 32 };
    let items: Vec<(u32, (usize, UdpSendFlow))> = sockets
        .into_iter()
        .enumerate()
        .map(|(i, socket)| {
            let queue = i as u32 % opts.queues;
            (queue, (i, UdpSendFlow { socket, queue }))
        })
        .collect();
    let dealt = deal_by_queue(&placement.threads, items);
    let order: Vec<Vec<usize>> = dealt.iter().map(|t| t.iter().map(|(i, _)| *i).collect()).collect();
    let inputs: Vec<(Vec<UdpSendFlow>, UdpSendConfig)> = dealt
        .into_iter()
        .map(|flows| {
            let n = flows.len() as u64;
            let cfg = UdpSendConfig {
                wait: placement.wait,
                ring: placement.fast.ring(),
                batch: WakeBatch { want: (inflight / 2).clamp(1, 4), max_delay_us: 200 },
                len: opts.len,
                gso: opts.gso,
                inflight,
                deadline: t0 + opts.time,
                halt: None,
                rate_bps: opts.rate_bps * n / total_flows,
                max_datagrams: 0,
                drain_limit: DRAIN_LIMIT,
                fin: None,
                refused: None,
            };
            (flows.into_iter().map(|(_, f)| f).collect(), cfg)
        })
        .collect();
    let worker_counters = Arc::clone(&counters);
    let inputs: Vec<_> = placement.threads.iter().map(|p| p.cpu).zip(inputs).collect();
    let threads = QueueThreads::spawn(&placement.threads, inputs, move |(cpu, (flows, cfg))| {
        timed(cpu, || udp_send::run(flows, &worker_counters, &cfg))
    })?;
    let run = SendRun::watch(t0, opts, &counters, &threads);
    let (results, thread_cpu): (Vec<_>, Vec<_>) = threads.join()?.into_iter().unzip();

    let mut sent = vec![SentFlow::default(); opts.flows() as usize];
    let mut notes = Vec::new();
    let mut paths = Vec::new();
    for (result, indices) in results.iter().zip(&order) {
        let desc = result.path.describe();
        if !paths.contains(&desc) {
            paths.push(desc);
        }
        if let Some(n) = &result.note {
            notes.push(n.clone());
        }
        for (flow, &i) in result.flows.iter().zip(indices) {
            sent[i] = SentFlow {
                queue: flow.queue,
                bytes: flow.bytes,
                datagrams: flow.datagrams,
                next_seq: flow.next_seq,
                refused: flow.refused,
                error: flow.error.clone(),
                ..Default::default()
            };
        }
    }
    let fin = FinConfig::iperf2();
    let targets: Vec<(&UdpSocket, u64)> = fin_sockets.iter().zip(&sent).map(|(s, f)| (s, f.next_seq)).collect();
    let outcomes = udp_send::send_fins(&targets, opts.len, &fin);
    for (flow, outcome) in sent.iter_mut().zip(outcomes) {
        flow.fins = outcome.sent;
        flow.report = outcome.report;
    }

    let mut errors: Vec<String> = Vec::new();
    for e in sent.iter().filter_map(|f| f.error.as_ref()) {
        if !errors.contains(e) {
            errors.push(e.clone());
        }
    }
    let missing = sent.iter().filter(|f| f.report.is_none()).count();
    if missing > 0 {
        let refused: u64 = sent.iter().map(|f| f.refused).sum();
        errors.insert(
            0,
            format!(
                "no iperf2 server report from {target} for {missing} of {} flow{} within {:.1} s of the end{}: \
                 is `iperf -s -u{}` running there? (iperf 2.1.8 answers only the first UDP test of a server \
                 process: restart it between tests)",
                sent.len(),
                if sent.len() == 1 { "" } else { "s" },
                fin.await_report.as_secs_f64(),
                if refused > 0 {
                    format!(" ({refused} sends were refused: ICMP port unreachable)")
                } else {
                    String::new()
                },
                if target.port() == IPERF2_PORT { String::new() } else { format!(" -p {}", target.port()) },
            ),
        );
    }
    if !run.window_complete && errors.is_empty() {
        errors.push(format!("the flows to {target} ended before the {:.1} s test did", opts.time.as_secs_f64()));
    }
    if opts.len > 1470 {
        notes.push(format!(
            "datagrams of {} bytes: start the server with `iperf -s -u -l {}` or it truncates them to 1470",
            opts.len, opts.len
        ));
    }
    Ok(Iperf2SendReport {
        proto: Proto::Udp,
        target,
        queues: opts.queues,
        len: opts.len,
        rate_bps: opts.rate_bps,
        flows: sent,
        seconds: (run.end - run.t0).as_secs_f64(),
        window_seconds: run.window_seconds(),
        intervals: run.intervals(),
        cpu: run.cpu(thread_cpu),
        placement: placement.summary.clone(),
        path: format!(
            "io_uring {} of {} B datagrams (iperf2 header, 64-bit sequence numbers), iperf2 FIN exchange at the end",
            paths.join(" / "),
            opts.len
        ),
        zerocopy: ZeroCopyCounts::default(),
        notes,
        errors,
    })
}

// ---- receiver --------------------------------------------------------------------------

/// What `uringbench recv --iperf2` serves.
#[derive(Debug, Clone)]
pub struct Iperf2RecvOptions {
    pub bind: IpAddr,
    pub port: u16,
    pub cpus: Option<Vec<usize>>,
    /// `--busy-poll on` spins the flow threads; otherwise they sleep.
    pub busy_poll: BusyPoll,
    /// Return after the first finished test.
    pub once: bool,
    /// Longest any test may last, whatever the client asks.
    pub max_time: Duration,
    /// Most flows (TCP connections and UDP client ports) served at once.
    pub max_flows: u32,
    /// Raised by the caller to stop serving (returns `Ok(true)`); `None`: serve until killed.
    pub shutdown: Option<Arc<AtomicBool>>,
    /// The fast paths the front end probed; the flow threads' rings use their ring part.
    pub fast: FastPaths,
}

/// The sockets `recv --iperf2` listens on: TCP and UDP on the same port.
pub struct Iperf2Listeners {
    pub tcp: TcpListener,
    pub udp: UdpSocket,
}

impl Iperf2Listeners {
    pub fn tcp_addr(&self) -> Option<SocketAddr> {
        self.tcp.local_addr().ok()
    }
}

/// Why a test ended before it was served.
#[derive(Debug, Clone)]
pub enum Iperf2Event {
    Listening {
        tcp: SocketAddr,
        udp: SocketAddr,
    },
    /// A client test (all its flows) ended.
    TestDone(Iperf2TestSummary),
    /// A client asked for something we do not do; TCP: the connection was closed, UDP: its
    /// datagrams are ignored.
    Refused {
        proto: Proto,
        peer: SocketAddr,
        reason: String,
    },
    /// A connection that never became a test (silent, closed early, too many flows).
    Dropped {
        peer: SocketAddr,
        reason: String,
    },
}

/// Receives the events of [`serve`]; called from several threads.
pub type Iperf2EventSink = Arc<dyn Fn(Iperf2Event) + Send + Sync>;

/// One finished client test, as `recv --iperf2` prints it.
#[derive(Debug, Clone)]
pub struct Iperf2TestSummary {
    pub id: u64,
    pub proto: Proto,
    pub peer: IpAddr,
    /// The client's iperf version, when its header said.
    pub client_version: Option<String>,
    /// Flows the client announced (`-P`), and flows that came.
    pub expected_flows: u32,
    pub flows: u32,
    /// Bytes received (TCP: everything to EOF, header included, as iperf2 counts).
    pub bytes: u64,
    /// First flow's start to last flow's end (UDP: first datagram to FIN of each flow; the
    /// longest).
    pub seconds: f64,
    /// UDP accounting summed over the flows.
    pub udp: Option<SeqStats>,
    /// UDP: server reports sent back in answer to FINs.
    pub reports_sent: u32,
    pub notes: Vec<String>,
    pub errors: Vec<String>,
}

impl Iperf2TestSummary {
    pub fn bits_per_second(&self) -> f64 {
        rate(self.bytes, self.seconds)
    }
    pub fn complete(&self) -> bool {
        self.errors.is_empty()
    }
}

/// Binds the TCP listener and the UDP socket on `opts.port` (port 0: any free port, the same
/// for both). Another listener on the port is a usage error.
pub fn bind_receiver(opts: &Iperf2RecvOptions) -> Result<Iperf2Listeners> {
    let addr = SocketAddr::new(opts.bind, opts.port);
    let in_use = |what: &str, port: u16, e: io::Error| {
        match e.kind() {
        io::ErrorKind::AddrInUse => Error::usage(format!(
            "{what} port {port} is already in use on {}: stop the other listener (an `iperf -s`?) or pick another --port",
            opts.bind
        )),
        io::ErrorKind::AddrNotAvailable => {
            Error::usage(format!("cannot bind {}: no local interface has that address", SocketAddr::new(opts.bind, port)))
        }
        _ => Error::io(format!("binding {what} {}", SocketAddr::new(opts.bind, port)), e),
    }
    };
    let tcp = TcpListener::bind(addr).map_err(|e| in_use("TCP", opts.port, e))?;
    let port = tcp.local_addr().map_err(|e| Error::io("reading the bound address", e))?.port();
    let udp = udp_listener(SocketAddr::new(opts.bind, port), true).map_err(|e| in_use("UDP", port, e))?;
    Ok(Iperf2Listeners { tcp, udp })
}

/// A UDP socket bound to `addr` that others of ours can share (`SO_REUSEADDR`), with GRO and
/// kernel receive timestamps on before any datagram arrives. `exclusive`: bind before
/// allowing reuse, so that any other socket already on the port (an `iperf -s -u`, another
/// `recv --iperf2`) makes the bind fail instead of silently sharing the port.
fn udp_listener(addr: SocketAddr, exclusive: bool) -> io::Result<UdpSocket> {
    let fd = sockopt::socket_for(&addr, libc::SOCK_DGRAM)?;
    if !exclusive {
        socket2::SockRef::from(&fd).set_reuse_address(true)?;
    }
    sockopt::bind(&fd, &addr)?;
    let socket = UdpSocket::from(fd);
    let fd = socket.as_raw_fd();
    if exclusive {
        socket2::SockRef::from(&socket).set_reuse_address(true)?;
    }
    // Root may size the buffer past rmem_max: a burst at the start of a fast test fits.
    if sockopt::set_int(fd, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, 8 << 20).is_err() {
        let _ = socket2::SockRef::from(&socket).set_recv_buffer_size(8 << 20);
    }
    udp_recv::prepare_socket(&socket, true, true)?;
    socket.set_nonblocking(true)?;
    Ok(socket)
}

/// What the serving loop knows about one running flow.
struct FlowSlot {
    deadline: Instant,
    stop: Arc<AtomicBool>,
    /// UDP flows: progress, to end a flow whose client went silent without a FIN.
    counters: Option<Arc<QueueCounters>>,
    last_bytes: u64,
    last_change: Instant,
}

/// One client test being served: the flows of one `iperf -c [-P N]`.
struct Group {
    id: u64,
    proto: Proto,
    peer: IpAddr,
    version: Option<String>,
    expected: u32,
    joined: u32,
    finished: u32,
    opened: Instant,
    first_start: Option<Instant>,
    last_end: Option<Instant>,
    bytes: u64,
    udp: Option<SeqStats>,
    udp_seconds: f64,
    reports_sent: u32,
    flows: HashMap<u64, FlowSlot>,
    notes: Vec<String>,
    errors: Vec<String>,
}

impl Group {
    fn done(&self, now: Instant) -> bool {
        self.finished == self.joined && (self.joined >= self.expected || now.duration_since(self.opened) >= JOIN_WINDOW)
    }

    fn summary(&self) -> Iperf2TestSummary {
        let seconds = match self.proto {
            Proto::Udp => self.udp_seconds,
            Proto::Tcp => match (self.first_start, self.last_end) {
                (Some(a), Some(b)) => b.saturating_duration_since(a).as_secs_f64(),
                _ => 0.0,
            },
        };
        let mut errors = self.errors.clone();
        if self.joined < self.expected {
            errors.push(format!(
                "{} of the {} flows the client announced arrived within {:.0} s",
                self.joined,
                self.expected,
                JOIN_WINDOW.as_secs_f64()
            ));
        }
        Iperf2TestSummary {
            id: self.id,
            proto: self.proto,
            peer: self.peer,
            client_version: self.version.clone(),
            expected_flows: self.expected,
            flows: self.joined,
            bytes: self.bytes,
            seconds,
            udp: self.udp,
            reports_sent: self.reports_sent,
            notes: self.notes.clone(),
            errors,
        }
    }
}

/// How one flow ended, handed back to its group.
struct FlowEnd {
    bytes: u64,
    start: Instant,
    end: Instant,
    udp: Option<(SeqStats, Duration, u32)>,
    notes: Vec<String>,
    errors: Vec<String>,
}

#[derive(Default)]
struct State {
    groups: Vec<Group>,
    next_group: u64,
    next_flow: u64,
    active_flows: u32,
    refused_udp: HashMap<SocketAddr, Instant>,
    /// Set once a test has ended with `--once`: whether it was complete.
    once_result: Option<bool>,
}

struct Shared {
    opts: Iperf2RecvOptions,
    caps: KernelCaps,
    cpus: Vec<usize>,
    next_cpu: AtomicUsize,
    events: Iperf2EventSink,
    state: Mutex<State>,
    /// Raised when serving ends: flow threads stop waiting.
    stopping: AtomicBool,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn wait_mode(&self) -> WaitMode {
        if self.opts.busy_poll == BusyPoll::On {
            WaitMode::Spin
        } else {
            WaitMode::Sleep
        }
    }

    /// Pins the calling flow thread to the next CPU of the list (best effort).
    fn pin(&self) {
        if self.cpus.is_empty() {
            return;
        }
        let i = self.next_cpu.fetch_add(1, Ordering::Relaxed) % self.cpus.len();
        let _ = pin_current_thread(self.cpus[i]);
    }

    /// The latest a flow of a test announcing `time` may end.
    fn deadline(&self, time: Option<Duration>) -> Instant {
        let limit = time.map_or(self.opts.max_time, |t| (t + END_GRACE).min(self.opts.max_time));
        Instant::now() + limit
    }

    /// Registers a new flow of `peer`, in the open test of that client or a new one; `None`
    /// when the flow limit is reached.
    fn join(
        &self,
        proto: Proto,
        peer: IpAddr,
        version: Option<String>,
        threads: u32,
        deadline: Instant,
        counters: Option<Arc<QueueCounters>>,
    ) -> Option<(u64, u64, Arc<AtomicBool>)> {
        let mut st = self.lock();
        if st.active_flows >= self.opts.max_flows {
            return None;
        }
        st.active_flows += 1;
        let now = Instant::now();
        let flow_id = st.next_flow;
        st.next_flow += 1;
        let stop = Arc::new(AtomicBool::new(self.stopping.load(Ordering::Relaxed)));
        let slot = FlowSlot { deadline, stop: Arc::clone(&stop), counters, last_bytes: 0, last_change: now };
        let open = st.groups.iter_mut().find(|g| {
            g.proto == proto && g.peer == peer && g.joined < g.expected && now.duration_since(g.opened) < JOIN_WINDOW
        });
        let group_id = match open {
            Some(g) => {
                g.joined += 1;
                g.flows.insert(flow_id, slot);
                g.id
            }
            None => {
                st.next_group += 1;
                let id = st.next_group;
                let mut flows = HashMap::new();
                flows.insert(flow_id, slot);
                st.groups.push(Group {
                    id,
                    proto,
                    peer,
                    version,
                    expected: threads.clamp(1, self.opts.max_flows.max(1)),
                    joined: 1,
                    finished: 0,
                    opened: now,
                    first_start: None,
                    last_end: None,
                    bytes: 0,
                    udp: None,
                    udp_seconds: 0.0,
                    reports_sent: 0,
                    flows,
                    notes: Vec::new(),
                    errors: Vec::new(),
                });
                id
            }
        };
        Some((group_id, flow_id, stop))
    }

    /// Records the end of a flow; reports its test when it was the last.
    fn finish(&self, group_id: u64, flow_id: u64, end: FlowEnd) {
        let done = {
            let mut st = self.lock();
            st.active_flows = st.active_flows.saturating_sub(1);
            let Some(g) = st.groups.iter_mut().find(|g| g.id == group_id) else { return };
            g.flows.remove(&flow_id);
            g.finished += 1;
            g.bytes += end.bytes;
            g.first_start = Some(g.first_start.map_or(end.start, |s| s.min(end.start)));
            g.last_end = Some(g.last_end.map_or(end.end, |e| e.max(end.end)));
            if let Some((stats, duration, reports)) = end.udp {
                match &mut g.udp {
                    Some(sum) => sum.merge(&stats),
                    None => g.udp = Some(stats),
                }
                g.udp_seconds = g.udp_seconds.max(duration.as_secs_f64());
                g.reports_sent += reports;
            }
            for n in end.notes {
                if !g.notes.contains(&n) {
                    g.notes.push(n);
                }
            }
            for e in end.errors {
                if !g.errors.contains(&e) {
                    g.errors.push(e);
                }
            }
            Self::take_done(&mut st, Instant::now())
        };
        self.report(done);
    }

    /// Removes the tests that are over.
    fn take_done(st: &mut State, now: Instant) -> Vec<Iperf2TestSummary> {
        let mut done = Vec::new();
        let mut i = 0;
        while i < st.groups.len() {
            if st.groups[i].done(now) {
                done.push(st.groups.remove(i).summary());
            } else {
                i += 1;
            }
        }
        done
    }

    fn report(&self, done: Vec<Iperf2TestSummary>) {
        for summary in done {
            let complete = summary.complete();
            (self.events)(Iperf2Event::TestDone(summary));
            if self.opts.once {
                let mut st = self.lock();
                if st.once_result.is_none() {
                    st.once_result = Some(complete);
                }
            }
        }
    }

    /// Enforces deadlines and idle ends, and reports tests whose join window closed.
    fn tick(&self) {
        let now = Instant::now();
        let done = {
            let mut st = self.lock();
            for g in st.groups.iter_mut() {
                for slot in g.flows.values_mut() {
                    if now >= slot.deadline {
                        slot.stop.store(true, Ordering::Relaxed);
                    }
                    if let Some(c) = &slot.counters {
                        let bytes = c.snapshot().iter().sum::<u64>();
                        if bytes != slot.last_bytes {
                            slot.last_bytes = bytes;
                            slot.last_change = now;
                        } else if bytes > 0 && now.duration_since(slot.last_change) >= UDP_IDLE_END {
                            slot.stop.store(true, Ordering::Relaxed);
                        }
                    }
                }
            }
            st.refused_udp.retain(|_, seen| now.duration_since(*seen) < REFUSED_MEMORY);
            Self::take_done(&mut st, now)
        };
        self.report(done);
    }

    fn stop_all(&self) {
        self.stopping.store(true, Ordering::Relaxed);
        let st = self.lock();
        for g in &st.groups {
            for slot in g.flows.values() {
                slot.stop.store(true, Ordering::Relaxed);
            }
        }
    }
}

/// A peer address as users know it: IPv4 clients of a dual-stack socket without `::ffff:`.
fn shown(peer: SocketAddr) -> SocketAddr {
    SocketAddr::new(peer.ip().to_canonical(), peer.port())
}

/// What the header of a client test told us.
#[derive(Debug, Clone, Default)]
struct ClientTest {
    version: Option<String>,
    threads: u32,
    time: Option<Duration>,
    rate_bps: u64,
}

/// Names what a header asks the receiver to send, for the refusal message.
fn sending_mode(reverse: bool, full_duplex: bool, legacy_dual: bool, run_now: bool) -> &'static str {
    if full_duplex {
        "--full-duplex"
    } else if reverse {
        "-R (reverse)"
    } else if legacy_dual && run_now {
        "-d (dual test)"
    } else {
        "-r (trade-off test)"
    }
}

/// Why we do not serve a test that needs us to send.
fn refusal(mode: &str) -> String {
    format!(
        "{mode} needs the receiver to send; `uringbench recv --iperf2` only receives (run that test against \
         `iperf -s`, or use `uringbench send --iperf2` for our sending side)"
    )
}

/// Reads the first word and the header of an accepted TCP client. Returns the bytes read
/// (they count as received, as iperf2 counts them) and what the test asks, or why it is
/// not served (`Err(refused?, reason)`).
fn read_tcp_client(stream: &mut TcpStream) -> std::result::Result<(u64, ClientTest), (bool, String)> {
    let mut first = [0u8; 4];
    read_exact_timed(stream, &mut first)?;
    let word = u32::from_be_bytes(first);
    match classify_tcp_first_word(word) {
        TcpClientKind::BounceBack => Err((true, refusal("--bounceback"))),
        TcpClientKind::PlainData => Ok((4, ClientTest { threads: 1, ..Default::default() })),
        TcpClientKind::Header(word) => {
            let mut header = vec![0u8; word.len_bytes as usize];
            header[..4].copy_from_slice(&first);
            read_exact_timed(stream, &mut header[4..])?;
            let h = TcpClientHeader::parse(word, &header);
            if h.receiver_must_send() {
                let run_now = word.flags & iperf2::RUN_NOW != 0;
                return Err((true, refusal(sending_mode(h.reverse, h.full_duplex, word.legacy_dual, run_now))));
            }
            if word.permit_key {
                return Err((
                    true,
                    "the client sent a permit key (--permit-key), which this receiver does not check".into(),
                ));
            }
            let test = ClientTest {
                version: h.peer_version.map(|(u, l)| version_string(u, l)),
                threads: u32::try_from(h.num_threads).unwrap_or(1).max(1),
                time: match h.amount {
                    TestAmount::Time(t) => Some(t),
                    TestAmount::Bytes(_) => None,
                },
                rate_bps: h.rate_bps,
            };
            if word.needs_ack {
                // A 2.1.8 client without -X never reads the ack; one left unread in its socket
                // would turn its close into a reset, so only clients that wait for it get it.
                let now = WireTime::now();
                let times = h.trip_times.then_some(iperf2::AckTimes { sent: now, sent_rx: now, ack: now });
                let ack = ClientHdrAck { version: IPERF_2_1_8_VERSION, flags: 0, times }.encode();
                stream.write_all(&ack).map_err(|e| (false, format!("writing the header ack failed: {e}")))?;
            }
            Ok((u64::from(word.len_bytes), test))
        }
    }
}

fn read_exact_timed(stream: &mut TcpStream, buf: &mut [u8]) -> std::result::Result<(), (bool, String)> {
    stream.read_exact(buf).map_err(|e| match e.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => {
            (false, format!("sent no complete iperf2 header within {:.0} s", HEADER_TIMEOUT.as_secs_f64()))
        }
        io::ErrorKind::UnexpectedEof => (false, "closed before sending a test header".to_string()),
        _ => (false, format!("reading the header failed: {e}")),
    })
}

/// Serves one accepted TCP client: header, then bytes to EOF.
fn serve_tcp(shared: &Shared, mut stream: TcpStream, peer: SocketAddr, accepted: Instant) {
    let _ = stream.set_read_timeout(Some(HEADER_TIMEOUT));
    let _ = stream.set_write_timeout(Some(HEADER_TIMEOUT));
    let (prefix, test) = match read_tcp_client(&mut stream) {
        Ok(r) => r,
        Err((refused, reason)) => {
            let event = if refused {
                Iperf2Event::Refused { proto: Proto::Tcp, peer: shown(peer), reason }
            } else {
                Iperf2Event::Dropped { peer: shown(peer), reason }
            };
            (shared.events)(event);
            let _ = stream.shutdown(Shutdown::Both);
            return;
        }
    };
    let _ = stream.set_read_timeout(None);
    let _ = stream.set_write_timeout(None);
    let deadline = shared.deadline(test.time);
    let Some((group, flow, stop)) =
        shared.join(Proto::Tcp, peer.ip().to_canonical(), test.version.clone(), test.threads, deadline, None)
    else {
        (shared.events)(Iperf2Event::Dropped {
            peer: shown(peer),
            reason: format!("{} flows are being served already (--max-queues)", shared.opts.max_flows),
        });
        let _ = stream.shutdown(Shutdown::Both);
        return;
    };
    shared.pin();
    // Paced clients: at most 1 ms of their data per wake-up (as the stream receiver does).
    let rcvlowat = if test.rate_bps == 0 {
        Some(TCP_RECV_LOWAT)
    } else {
        let per_ms = (test.rate_bps / 8 / u64::from(test.threads.max(1)) / 1000).min(u64::from(TCP_RECV_LOWAT)) as u32;
        (per_ms >= 4096).then_some(per_ms)
    };
    let cfg = RecvWorkerConfig {
        wait: shared.wait_mode(),
        ring: shared.opts.fast.ring(),
        batch: RECV_BATCH,
        buf_count: TCP_RECV_BUFS,
        buf_size: TCP_RECV_BUF_SIZE,
        bundle: shared.caps.recvsend_bundle,
        rcvlowat,
        stop,
        skip_copy: false,
    };
    let counters = QueueCounters::new(1);
    let mut end =
        FlowEnd { bytes: prefix, start: accepted, end: accepted, udp: None, notes: Vec::new(), errors: Vec::new() };
    match tcp_recv::run(vec![RecvFlow { stream, queue: 0 }], &counters, &cfg) {
        Ok(result) => {
            for f in result.flows {
                end.bytes += f.bytes;
                if let Some(e) = f.error {
                    end.errors.push(e);
                }
            }
        }
        Err(e) => {
            end.bytes += counters.snapshot()[0];
            end.errors.push(e.to_string());
        }
    }
    end.end = Instant::now();
    shared.finish(group, flow, end);
}

/// What the first datagram of a UDP client says, beyond [`UdpClientHeader`]: threads and
/// time live in the `client_hdr_v1` part at offset 16 (flags, numThreads, mPort, mBufLen,
/// mWinBand, mAmount).
fn udp_client_test(datagram: &[u8], h: &UdpClientHeader) -> ClientTest {
    let headed = h.flags & (HEADER_VERSION1 | HEADER_EXTEND) != 0 && h.flags & HEADER32_SMALL_TRIPTIMES == 0;
    let word = |at: usize| datagram.get(at..at + 4).map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]));
    let (threads, time) = if headed {
        let threads = word(20).and_then(|t| u32::try_from(t as i32).ok()).unwrap_or(1).max(1);
        let amount = word(36).map(|a| a as i32).unwrap_or(0);
        let time = (amount < 0).then(|| Duration::from_millis(u64::from(amount.unsigned_abs()) * 10));
        (threads, time)
    } else {
        (1, None)
    };
    ClientTest { version: h.peer_version.map(|(u, l)| version_string(u, l)), threads, time, rate_bps: h.rate_bps }
}

/// Serves one UDP client port on the socket handed over to it (connected to that port).
fn serve_udp(shared: &Shared, socket: UdpSocket, peer: SocketAddr, test: ClientTest, no_fin: bool, trip_times: bool) {
    let counters = Arc::new(QueueCounters::new(1));
    let deadline = shared.deadline(test.time);
    let joined = shared.join(
        Proto::Udp,
        peer.ip().to_canonical(),
        test.version.clone(),
        test.threads,
        deadline,
        Some(Arc::clone(&counters)),
    );
    let Some((group, flow, stop)) = joined else {
        (shared.events)(Iperf2Event::Dropped {
            peer: shown(peer),
            reason: format!("{} flows are being served already (--max-queues)", shared.opts.max_flows),
        });
        return;
    };
    shared.pin();
    let cfg = UdpRecvConfig {
        wait: shared.wait_mode(),
        ring: shared.opts.fast.ring(),
        batch: RECV_BATCH,
        gro: true,
        buf_count: UDP_RECV_BUFS,
        max_payload: GRO_PAYLOAD,
        kernel_timestamps: true,
        one_way_delay: trip_times,
        answer_fin: true,
        fin_linger: SERVER_ACKFIN_SILENCE,
        stop,
        deadline,
    };
    let start = Instant::now();
    let mut end = FlowEnd { bytes: 0, start, end: start, udp: None, notes: Vec::new(), errors: Vec::new() };
    match udp_recv::run(vec![UdpRecvFlow { socket, queue: 0, live: None }], &counters, &cfg) {
        Ok(result) => {
            if let Some(n) = result.note {
                end.notes.push(n);
            }
            for f in result.flows {
                end.bytes += f.stats.bytes;
                if f.strangers > 0 {
                    end.notes.push(format!(
                        "{} datagrams of another client arrived on this client's socket while it was handed over (not counted)",
                        f.strangers
                    ));
                }
                if let Some(e) = f.error {
                    end.errors.push(e);
                }
                if !f.stats.fin && !no_fin {
                    end.errors.push(format!(
                        "no FIN from {}: the client stopped sending without ending its test (killed?)",
                        shown(peer)
                    ));
                }
                end.udp = Some((f.stats, f.duration, f.reports_sent));
            }
        }
        Err(e) => end.errors.push(e.to_string()),
    }
    end.end = Instant::now();
    shared.finish(group, flow, end);
}

/// Looks at the datagrams waiting on the UDP listening socket: a new client's first datagram
/// hands the socket over to that client and binds a new one; anything else is read away.
fn handle_udp(shared: &Arc<Shared>, listener: &mut UdpSocket, bind: SocketAddr) -> Result<()> {
    let mut head = [0u8; 128];
    for _ in 0..UDP_PEEKS_PER_TICK {
        let (n, peer) = match listener.peek_from(&mut head) {
            Ok(r) => r,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            // ICMP errors for earlier report datagrams (a client gone) surface here: skip.
            Err(e) if e.raw_os_error() == Some(libc::ECONNREFUSED) => continue,
            Err(e) => return Err(Error::io("reading the UDP listening socket", e)),
        };
        let datagram = &head[..n.min(head.len())];
        let now = Instant::now();
        let discard = |listener: &UdpSocket| {
            let mut sink = [0u8; 1];
            let _ = listener.recv_from(&mut sink);
        };
        let Some(d) = payload::decode(datagram) else {
            discard(listener);
            continue;
        };
        if d.fin {
            // A FIN whose flow is over (retries after our report, or from a refused client).
            discard(listener);
            continue;
        }
        let Some(header) = UdpClientHeader::parse(datagram) else {
            discard(listener);
            continue;
        };
        {
            let mut st = shared.lock();
            if let Some(seen) = st.refused_udp.get_mut(&peer) {
                *seen = now;
                drop(st);
                discard(listener);
                continue;
            }
            if header.receiver_must_send() {
                if st.refused_udp.len() >= REFUSED_MAX {
                    if let Some(oldest) = st.refused_udp.iter().min_by_key(|(_, t)| **t).map(|(p, _)| *p) {
                        st.refused_udp.remove(&oldest);
                    }
                }
                st.refused_udp.insert(peer, now);
                drop(st);
                discard(listener);
                let run_now = header.flags & iperf2::RUN_NOW != 0;
                let mode = sending_mode(header.reverse, header.full_duplex, header.legacy_dual, run_now);
                (shared.events)(Iperf2Event::Refused {
                    proto: Proto::Udp,
                    peer: shown(peer),
                    reason: format!("{}; its datagrams are ignored", refusal(mode)),
                });
                continue;
            }
        }
        // A new client port: this socket becomes its own (everything it sent so far is queued
        // here), and a fresh socket listens for the next client.
        if let Err(e) = listener.connect(peer) {
            discard(listener);
            (shared.events)(Iperf2Event::Dropped {
                peer: shown(peer),
                reason: format!("cannot connect a UDP socket to it: {e}"),
            });
            continue;
        }
        let next =
            udp_listener(bind, false).map_err(|e| Error::io(format!("binding a new UDP socket on {bind}"), e))?;
        let mine = std::mem::replace(listener, next);
        let _ = mine.set_nonblocking(false);
        let test = udp_client_test(datagram, &header);
        let shared = Arc::clone(shared);
        let (no_fin, trip) = (header.no_udp_fin, header.trip_times);
        let spawned = std::thread::Builder::new()
            .name("ub-iperf2-udp".into())
            .spawn(move || serve_udp(&shared, mine, peer, test, no_fin, trip));
        if let Err(e) = spawned {
            return Err(Error::io("starting a UDP flow thread", e));
        }
    }
    Ok(())
}

/// Serves iperf2 clients (`iperf -c`, TCP and UDP) until killed, or until the first test
/// ends with `once`. Returns whether that test was complete (always true without `once`).
pub fn serve(opts: Iperf2RecvOptions, listeners: Iperf2Listeners, events: Iperf2EventSink) -> Result<bool> {
    let caps = KernelCaps::detect()?;
    caps.require_tcp_stream()?;
    let mut cpus = resolve_cpus(opts.cpus.as_deref())?;
    if opts.cpus.is_none() {
        // Senders take CPUs from the bottom: on one host, start from the top (as `recv` does).
        cpus.reverse();
    }
    let Iperf2Listeners { tcp, mut udp } = listeners;
    tcp.set_nonblocking(true).map_err(|e| Error::io("setting the TCP listener non-blocking", e))?;
    let tcp_addr = tcp.local_addr().map_err(|e| Error::io("reading the bound address", e))?;
    let udp_addr = udp.local_addr().map_err(|e| Error::io("reading the bound address", e))?;
    (events)(Iperf2Event::Listening { tcp: tcp_addr, udp: udp_addr });
    let shared = Arc::new(Shared {
        opts,
        caps,
        cpus,
        next_cpu: AtomicUsize::new(0),
        events,
        state: Mutex::new(State::default()),
        stopping: AtomicBool::new(false),
    });
    let result = loop {
        if let Some(ok) = shared.lock().once_result {
            break Ok(ok);
        }
        if shared.opts.shutdown.as_ref().is_some_and(|s| s.load(Ordering::Relaxed)) {
            break Ok(true);
        }
        let mut fds = [
            libc::pollfd { fd: tcp.as_raw_fd(), events: libc::POLLIN, revents: 0 },
            libc::pollfd { fd: udp.as_raw_fd(), events: libc::POLLIN, revents: 0 },
        ];
        // SAFETY: fds is a valid array of two pollfd entries for the whole call.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), 2, TICK.as_millis() as libc::c_int) };
        if n > 0 && fds[0].revents != 0 {
            accept_all(&shared, &tcp);
        }
        if n > 0 && fds[1].revents != 0 {
            if let Err(e) = handle_udp(&shared, &mut udp, udp_addr) {
                break Err(e);
            }
        }
        shared.tick();
    };
    shared.stop_all();
    // Flow threads notice the stop within one wait (100 ms); give them a bounded moment.
    let until = Instant::now() + Duration::from_secs(2);
    while shared.lock().active_flows > 0 && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(10));
    }
    result
}

/// Accepts every pending TCP connection, each served on a thread of its own.
fn accept_all(shared: &Arc<Shared>, tcp: &TcpListener) {
    loop {
        match tcp.accept() {
            Ok((stream, peer)) => {
                let accepted = Instant::now();
                let _ = stream.set_nonblocking(false);
                let worker = Arc::clone(shared);
                let spawned = std::thread::Builder::new()
                    .name("ub-iperf2-tcp".into())
                    .spawn(move || serve_tcp(&worker, stream, peer, accepted));
                if let Err(e) = spawned {
                    (shared.events)(Iperf2Event::Dropped {
                        peer: shown(peer),
                        reason: format!("no thread to serve it: {e}"),
                    });
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            // A connection reset before accept, or out of descriptors: try again next tick.
            Err(_) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::iperf2::{HEADER_LEN_BIT, HEADER_SEQNO64B, HEADER_VERSION2};

    #[test]
    fn our_tcp_payload_is_plain_data_for_iperf2() {
        let word = u32::from_be_bytes([tcp_send::PAYLOAD_FILL; 4]);
        assert_eq!(classify_tcp_first_word(word), TcpClientKind::PlainData, "iperf -s must count our bytes");
    }

    #[test]
    fn window_offsets_cover_the_test() {
        let secs = |v: Vec<Duration>| v.iter().map(|d| d.as_millis() as u64).collect::<Vec<_>>();
        assert_eq!(secs(window_offsets(Duration::from_secs(2), None)), vec![0, 2000]);
        assert_eq!(
            secs(window_offsets(Duration::from_secs(2), Some(Duration::from_millis(800)))),
            vec![0, 800, 1600, 2000]
        );
        assert_eq!(
            secs(window_offsets(Duration::from_secs(1), Some(Duration::ZERO))),
            vec![0, 1000],
            "0 = no intervals"
        );
    }

    fn udp_datagram(flags: u32, threads: i32, amount: i32, upper: u16) -> Vec<u8> {
        let mut d = vec![0u8; 200];
        d[0..4].copy_from_slice(&1u32.to_be_bytes());
        d[16..20].copy_from_slice(&flags.to_be_bytes());
        d[20..24].copy_from_slice(&threads.to_be_bytes());
        d[36..40].copy_from_slice(&amount.to_be_bytes());
        d[48..50].copy_from_slice(&upper.to_be_bytes());
        d[52..56].copy_from_slice(&IPERF_2_1_8_VERSION.0.to_be_bytes());
        d[56..60].copy_from_slice(&IPERF_2_1_8_VERSION.1.to_be_bytes());
        d
    }

    #[test]
    fn udp_client_threads_and_time() {
        // `iperf -c -u -P 4 -t 2` 2.1.8: flags 0x4801_0098, 4 threads, amount -200.
        let d = udp_datagram(0x4801_0098, 4, -200, 0);
        let h = UdpClientHeader::parse(&d).unwrap();
        let t = udp_client_test(&d, &h);
        assert_eq!((t.threads, t.time), (4, Some(Duration::from_secs(2))));
        assert_eq!(t.version.as_deref(), Some("2.1.8"));
        // Our own header (SEQNO64B only) says nothing: one flow, no time.
        let mut ours = [0u8; 64];
        payload::encode(&mut ours, 1, WireTime::default()).unwrap();
        let h = UdpClientHeader::parse(&ours).unwrap();
        let t = udp_client_test(&ours, &h);
        assert_eq!((t.threads, t.time, t.version), (1, None, None));
        // A nonsense thread count reads as one.
        let d = udp_datagram(HEADER_SEQNO64B | HEADER_EXTEND, -5, 100, 0);
        assert_eq!(udp_client_test(&d, &UdpClientHeader::parse(&d).unwrap()).threads, 1);
    }

    #[test]
    fn refusal_names_the_mode() {
        assert!(sending_mode(true, false, false, false).contains("-R"));
        assert!(sending_mode(false, true, false, false).contains("--full-duplex"));
        assert!(sending_mode(false, false, true, true).contains("-d"));
        assert!(sending_mode(false, false, true, false).contains("-r"));
        let d = udp_datagram(0x4C01_0098, 1, -100, iperf2::upper::FULLDUPLEX);
        let h = UdpClientHeader::parse(&d).unwrap();
        assert!(h.receiver_must_send() && h.full_duplex, "VERSION2 + FULLDUPLEX over UDP");
        assert!(refusal("--full-duplex").contains("only receives"));
    }

    #[test]
    fn udp_listener_binds_exclusively_or_shared() {
        let s = udp_listener("127.0.0.1:0".parse().unwrap(), true).expect("bind v4");
        let addr = s.local_addr().unwrap();
        assert!(addr.port() > 0);
        let again = udp_listener(addr, true);
        assert!(again.is_err(), "an exclusive bind on a taken port fails");
        let shared = udp_listener(addr, false).expect("a reuse bind next to ours succeeds");
        assert_eq!(shared.local_addr().unwrap(), addr);
        let v6 = udp_listener("[::1]:0".parse().unwrap(), true);
        if let Ok(v6) = v6 {
            assert!(v6.local_addr().unwrap().is_ipv6());
        }
    }

    fn collect_events() -> (Iperf2EventSink, Arc<Mutex<Vec<Iperf2Event>>>) {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let sink_seen = Arc::clone(&seen);
        let sink: Iperf2EventSink = Arc::new(move |e| sink_seen.lock().unwrap().push(e));
        (sink, seen)
    }

    fn loopback_opts() -> Iperf2RecvOptions {
        Iperf2RecvOptions {
            bind: "127.0.0.1".parse().unwrap(),
            port: 0,
            cpus: None,
            busy_poll: BusyPoll::Off,
            once: true,
            max_time: Duration::from_secs(20),
            max_flows: 16,
            shutdown: None,
            fast: FastPaths::default(),
        }
    }

    /// A 2.1.8-style TCP client header (plain `iperf -c`, or with upper flags).
    fn tcp_header(flags: u32, threads: i32, upper: u16) -> Vec<u8> {
        let mut h = vec![0u8; 60];
        h[0..4].copy_from_slice(&flags.to_be_bytes());
        h[4..8].copy_from_slice(&threads.to_be_bytes());
        h[20..24].copy_from_slice(&(-100i32).to_be_bytes());
        h[32..34].copy_from_slice(&upper.to_be_bytes());
        h[36..40].copy_from_slice(&IPERF_2_1_8_VERSION.0.to_be_bytes());
        h[40..44].copy_from_slice(&IPERF_2_1_8_VERSION.1.to_be_bytes());
        h
    }

    #[test]
    fn tcp_clients_counted_and_refused_on_loopback() {
        let listeners = bind_receiver(&loopback_opts()).expect("bind on loopback");
        let addr = listeners.tcp_addr().unwrap();
        let (sink, seen) = collect_events();
        let server = std::thread::spawn(move || serve(loopback_opts(), listeners, sink));

        // A reverse (-R) client is refused and its connection closed.
        let mut rev = TcpStream::connect(addr).unwrap();
        rev.write_all(&tcp_header(0x4401_0078, 1, iperf2::upper::REVERSE)).unwrap();
        rev.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut buf = [0u8; 16];
        assert!(matches!(rev.read(&mut buf), Ok(0) | Err(_)), "refused connection is closed");

        // Two flows of a -P 2 test: header + data, then half-close; one test, all bytes. The
        // first flow ends before the second one connects (as a loaded machine can schedule
        // it): the second must still join the same test.
        let mut flows = Vec::new();
        for n in 0..2u64 {
            let mut s = TcpStream::connect(addr).unwrap();
            s.write_all(&tcp_header(HEADER_EXTEND | HEADER_LEN_BIT | (60 << 1), 2, 0)).unwrap();
            let chunk = vec![b'0'; 64 * 1024];
            for _ in 0..(16 + n) {
                s.write_all(&chunk).unwrap();
            }
            s.shutdown(Shutdown::Write).unwrap();
            if n == 0 {
                std::thread::sleep(Duration::from_millis(300));
            }
            flows.push(s);
        }
        let ok = server.join().unwrap().expect("serve returns after one test");
        let events = seen.lock().unwrap();
        assert!(ok, "the test was complete: {events:?}");
        let refused = events.iter().any(|e| matches!(e, Iperf2Event::Refused { reason, .. } if reason.contains("-R")));
        assert!(refused, "the -R client was refused with a reason: {events:?}");
        let done: Vec<&Iperf2TestSummary> =
            events.iter().filter_map(|e| if let Iperf2Event::TestDone(s) = e { Some(s) } else { None }).collect();
        assert_eq!(done.len(), 1, "one test for both flows: {events:?}");
        let t = done[0];
        assert_eq!((t.flows, t.expected_flows), (2, 2));
        assert_eq!(t.bytes, 2 * 60 + (16 + 17) * 64 * 1024, "header bytes and data, every byte");
        assert_eq!(t.client_version.as_deref(), Some("2.1.8"));
        drop(flows);
    }

    #[test]
    fn udp_client_gets_our_report_on_loopback() {
        let listeners = bind_receiver(&loopback_opts()).expect("bind on loopback");
        let addr = listeners.udp.local_addr().unwrap();
        let (sink, seen) = collect_events();
        let server = std::thread::spawn(move || serve(loopback_opts(), listeners, sink));
        // Our own sender plays the iperf2 client: 2000 datagrams, FINs until the report.
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        tx.connect(addr).unwrap();
        let cfg = UdpSendConfig {
            wait: WaitMode::Sleep,
            ring: Default::default(),
            batch: WakeBatch { want: 1, max_delay_us: 0 },
            len: 1470,
            gso: true,
            inflight: 4,
            deadline: Instant::now() + Duration::from_secs(10),
            halt: None,
            rate_bps: 200_000_000,
            max_datagrams: 2000,
            drain_limit: Duration::from_secs(1),
            fin: Some(FinConfig::iperf2()),
            refused: None,
        };
        let sent = udp_send::run(vec![UdpSendFlow { socket: tx, queue: 0 }], &QueueCounters::new(1), &cfg).unwrap();
        let ok = server.join().unwrap().expect("serve returns after one test");
        let report = sent.flows[0].report.expect("our receiver answered the FIN");
        let events = seen.lock().unwrap();
        let done = events
            .iter()
            .find_map(|e| if let Iperf2Event::TestDone(s) = e { Some(s.clone()) } else { None })
            .expect("a finished test");
        assert!(ok, "complete: {done:?}");
        let stats = done.udp.expect("UDP figures");
        assert_eq!(stats.expected, 2000, "FIN told how many were sent");
        assert_eq!(report.datagrams, stats.expected, "the report carries our total");
        assert_eq!(report.lost, stats.lost, "and our loss");
        assert_eq!(report.bytes, done.bytes);
        assert_eq!(stats.received + stats.lost, 2000);
    }

    #[test]
    fn udp_reverse_client_is_ignored() {
        let mut opts = loopback_opts();
        opts.once = false;
        let shutdown = Arc::new(AtomicBool::new(false));
        opts.shutdown = Some(Arc::clone(&shutdown));
        let listeners = bind_receiver(&opts).expect("bind on loopback");
        let addr = listeners.udp.local_addr().unwrap();
        let (sink, seen) = collect_events();
        let server_opts = opts.clone();
        let server = std::thread::spawn(move || serve(server_opts, listeners, sink));
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        tx.connect(addr).unwrap();
        let d = udp_datagram(0x4C01_0098 | HEADER_VERSION2, 1, -100, iperf2::upper::REVERSE);
        for _ in 0..20 {
            tx.send(&d).unwrap();
        }
        let until = Instant::now() + Duration::from_secs(3);
        let refused = loop {
            let n = seen
                .lock()
                .unwrap()
                .iter()
                .filter(|e| matches!(e, Iperf2Event::Refused { proto: Proto::Udp, .. }))
                .count();
            if n > 0 || Instant::now() > until {
                break n;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        std::thread::sleep(Duration::from_millis(200));
        assert_eq!(refused, 1, "logged once for 20 datagrams: {:?}", seen.lock().unwrap());
        assert!(
            !seen.lock().unwrap().iter().any(|e| matches!(e, Iperf2Event::TestDone(_))),
            "no test is served for it"
        );
        shutdown.store(true, Ordering::Relaxed);
        assert!(server.join().unwrap().expect("serving ends when asked"));
    }
}
