//! The end of a UDP flow: FIN datagrams (the negated next sequence number, as an iperf2
//! client sends them), repeated until an iperf2 server's report comes back when one is awaited.

use super::MAX_DATAGRAM;
use crate::wire::iperf2::{ServerReport, CLIENT_FIN_RETRY_INTERVAL, CLIENT_REPORT_READ_LEN};
use crate::wire::udp_payload::{self as payload, WireTime, FIRST_SEQ, HEADER_LEN};
use std::net::UdpSocket;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

/// How the end of a flow is signalled (see [`send_fins`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FinConfig {
    /// FIN datagrams to send at least.
    pub copies: u32,
    /// Time between two FINs (and how long each wait for a report lasts).
    pub interval: Duration,
    /// How long to keep re-sending FINs while waiting for a server report (zero: do not wait).
    pub await_report: Duration,
}

impl FinConfig {
    /// What an iperf2 client does: one FIN, then one more every 10 ms
    /// until the server's report arrives, for at most about 2 s.
    pub fn iperf2() -> Self {
        Self { copies: 1, interval: CLIENT_FIN_RETRY_INTERVAL, await_report: Duration::from_secs(2) }
    }
}

impl Default for FinConfig {
    /// For a uringbench receiver, which reports over the control channel: a few FINs, no wait.
    fn default() -> Self {
        Self { copies: 5, interval: Duration::from_millis(2), await_report: Duration::ZERO }
    }
}

/// What [`send_fins`] did for one flow.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct FinOutcome {
    pub sent: u32,
    pub report: Option<ServerReport>,
}

/// Sends FIN datagrams (`-next_seq`, `len` bytes, like an iperf2 client's) on each connected
/// socket: at least `fin.copies` of them `fin.interval` apart, and while waiting for a server
/// report, one more every interval until it arrives or `fin.await_report` has passed. Every
/// FIN of a flow carries the same number, so repeats are never taken for lost data. Bounded:
/// at most `copies + await_report / interval + 1` FINs per flow. Blocking; call it after the
/// ring is gone.
pub(crate) fn send_fins(targets: &[(&UdpSocket, u64)], len: u32, fin: &FinConfig) -> Vec<FinOutcome> {
    let len = (len as usize).clamp(HEADER_LEN, MAX_DATAGRAM as usize);
    let interval = fin.interval.max(Duration::from_micros(100));
    let await_report = !fin.await_report.is_zero();
    let max_rounds = fin.copies.max(1) + (fin.await_report.as_micros() / interval.as_micros()) as u32 + 1;
    let mut out = vec![FinOutcome::default(); targets.len()];
    let mut buf = vec![0u8; len.max(CLIENT_REPORT_READ_LEN)];
    let started = Instant::now();
    for round in 0..max_rounds {
        let waiting = await_report && started.elapsed() < fin.await_report;
        let mut any = false;
        for (i, &(socket, next_seq)) in targets.iter().enumerate() {
            let answered = out[i].report.is_some();
            if round >= fin.copies && (answered || !waiting) {
                continue;
            }
            let frame = &mut buf[..len];
            frame.fill(0);
            if payload::encode_fin(frame, next_seq.max(FIRST_SEQ), WireTime::now()).is_ok()
                && socket.send(frame).is_ok()
            {
                out[i].sent += 1;
            }
            any = true;
        }
        if !any {
            break;
        }
        let deadline = Instant::now() + interval;
        if await_report {
            collect_reports(targets, &mut out, &mut buf, deadline);
        } else if round + 1 < fin.copies {
            std::thread::sleep(interval);
        }
        if await_report && out.iter().all(|o| o.report.is_some()) && round + 1 >= fin.copies {
            break;
        }
    }
    out
}

/// Reads whatever arrives on the sockets until `deadline`, keeping the first server report of
/// each (other datagrams, such as an echoed FIN, are ignored).
fn collect_reports(targets: &[(&UdpSocket, u64)], out: &mut [FinOutcome], buf: &mut [u8], deadline: Instant) {
    let mut fds: Vec<libc::pollfd> =
        targets.iter().map(|(s, _)| libc::pollfd { fd: s.as_raw_fd(), events: libc::POLLIN, revents: 0 }).collect();
    loop {
        let now = Instant::now();
        if now >= deadline || out.iter().all(|o| o.report.is_some()) {
            return;
        }
        let timeout_ms = (deadline - now).as_millis().clamp(1, 1000) as libc::c_int;
        // SAFETY: fds is a valid array of fds.len() pollfd entries for the whole call.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout_ms) };
        if n <= 0 {
            continue;
        }
        for (i, pfd) in fds.iter_mut().enumerate() {
            if pfd.revents == 0 {
                continue;
            }
            pfd.revents = 0;
            // SAFETY: a valid socket fd and a buffer of buf.len() writable bytes.
            let got = unsafe { libc::recv(pfd.fd, buf.as_mut_ptr().cast(), buf.len(), libc::MSG_DONTWAIT) };
            if got > 0 && out[i].report.is_none() {
                out[i].report = ServerReport::decode(&buf[..got as usize]);
            }
        }
    }
}
