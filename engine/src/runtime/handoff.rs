//! The receiver's hand-off: each accepted flow served by the thread (engine queue) of the NIC
//! receive queue it arrived on, as far as that keeps every thread busy (docs/placement.md).

use crate::runtime::nic_queues::{join_and, landed_queue, TestQueues};
use std::os::fd::RawFd;
use std::time::Instant;

/// Where a receiver's accepted flows are served: each on the engine queue (thread) of the
/// receive queue it arrived on, as far as that keeps every thread busy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Handoff {
    /// The engine queue of each flow: (flow, engine queue), in the order given.
    pub engine_queues: Vec<(u32, u32)>,
    /// What was done and what could not be, in one line (the receiver's path line).
    pub line: String,
}

impl Handoff {
    /// The engine queue flow `flow` is served by; `flow % engine_queues` for one not handed.
    pub fn engine_queue_of(&self, flow: u32, engine_queues: u32) -> u32 {
        self.engine_queues.iter().find(|(f, _)| *f == flow).map_or(flow % engine_queues.max(1), |(_, e)| *e)
    }
}

/// Waits until every socket of `fds` has something queued (a UDP flow's first datagram, whose
/// arrival sets the socket's NAPI id and incoming CPU) or an error, at most until `until`;
/// returns how many did. A UDP receiver's sockets exist before any datagram, so their arrival
/// queue is known only then.
pub(crate) fn await_first_packets(fds: impl IntoIterator<Item = RawFd>, until: Instant) -> usize {
    let mut waiting: Vec<libc::pollfd> =
        fds.into_iter().map(|fd| libc::pollfd { fd, events: libc::POLLIN, revents: 0 }).collect();
    let all = waiting.len();
    while !waiting.is_empty() {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        let timeout_ms = left.as_millis().clamp(1, 1000) as libc::c_int;
        // SAFETY: `waiting` is a valid, initialised array of `waiting.len()` pollfd entries
        // that outlives the call; poll writes only their `revents`.
        let ready = unsafe { libc::poll(waiting.as_mut_ptr(), waiting.len() as libc::nfds_t, timeout_ms) };
        if ready < 0 && std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
            break;
        }
        // Data, or an error the receive will report (POLLERR, POLLNVAL): waited for enough.
        waiting.retain(|p| p.revents == 0);
    }
    all - waiting.len()
}

impl TestQueues {
    /// Reads, for each accepted flow, the receive queue it arrived on (its socket's
    /// SO_INCOMING_NAPI_ID, else SO_INCOMING_CPU: checked, not assumed) and hands it to the
    /// engine queue serving that queue ([`Self::hand_off`]).
    pub fn hand_off_sockets(&self, engine_queues: u32, flows: &[(u32, std::os::fd::RawFd)]) -> Handoff {
        use crate::sys::sockopt::{incoming_cpu, incoming_napi_id};
        let landed: Vec<(u32, Option<u32>)> = flows
            .iter()
            .map(|&(flow, fd)| (flow, landed_queue(&self.topology, incoming_napi_id(fd), incoming_cpu(fd))))
            .collect();
        self.hand_off(engine_queues, &landed)
    }

    /// Each flow (with the receive queue it arrived on, if known) to an engine queue: one
    /// serving its receive queue, at most ⌈flows ÷ engine queues⌉ flows each. A flow that
    /// cannot go there (its queue unknown, served by no thread, or its threads full) keeps
    /// `flow % engine_queues` when that has room, else the least loaded; then, while one thread
    /// has two flows and another none, one moves to the idle thread. Every such flow is named
    /// in the line: the thread it runs on is not its arrival queue's.
    pub fn hand_off(&self, engine_queues: u32, landed: &[(u32, Option<u32>)]) -> Handoff {
        let n = engine_queues.max(1) as usize;
        let cap = landed.len().div_ceil(n).max(1);
        let served_by = |e: usize| self.nic_queue[e % self.nic_queue.len()];
        let mut load = vec![0usize; n];
        let mut assigned: Vec<Option<usize>> = vec![None; landed.len()];
        for (i, &(flow, rx)) in landed.iter().enumerate() {
            let Some(rx) = rx else { continue };
            let own = flow as usize % n;
            let pick = (0..n).filter(|&e| served_by(e) == rx && load[e] < cap).min_by_key(|&e| (load[e], e != own, e));
            if let Some(e) = pick {
                load[e] += 1;
                assigned[i] = Some(e);
            }
        }
        let mut notes: Vec<String> = Vec::new();
        let mut unknown = Vec::new();
        for (i, &(flow, rx)) in landed.iter().enumerate() {
            if assigned[i].is_some() {
                continue;
            }
            let own = flow as usize % n;
            let e = if load[own] < cap { own } else { (0..n).min_by_key(|&e| (load[e], e)).unwrap_or(own) };
            load[e] += 1;
            assigned[i] = Some(e);
            match rx {
                None => unknown.push(flow),
                Some(rx) if !(0..n).any(|e| served_by(e) == rx) => notes.push(format!(
                    "flow {flow} arrived on rx queue {rx}, which no thread serves (recv --queues): thread of rx {}",
                    served_by(e)
                )),
                Some(rx) => notes.push(format!(
                    "flow {flow} arrived on rx queue {rx}, whose threads have their share: thread of rx {} so that no thread idles",
                    served_by(e)
                )),
            }
        }
        // A thread with two flows beside an idle one: the flow handed last moves over.
        while let (Some(idle), Some(busy)) = (
            (0..n).find(|&e| load[e] == 0 && landed.len() >= n),
            (0..n).filter(|&e| load[e] >= 2).max_by_key(|&e| (load[e], std::cmp::Reverse(e))),
        ) {
            let Some(i) = (0..landed.len()).rev().find(|&i| assigned[i] == Some(busy)) else { break };
            let (flow, rx) = landed[i];
            assigned[i] = Some(idle);
            load[busy] -= 1;
            load[idle] += 1;
            let from = rx.map_or("an unknown rx queue".to_string(), |q| format!("rx queue {q}"));
            notes.push(format!(
                "flow {flow} arrived on {from} with another flow: thread of rx {} so that no thread idles",
                served_by(idle)
            ));
        }
        let engine_queues: Vec<(u32, u32)> =
            landed.iter().zip(&assigned).map(|(&(flow, _), e)| (flow, e.unwrap_or(0) as u32)).collect();
        let handed =
            landed.iter().zip(&engine_queues).filter(|((_, rx), (_, e))| *rx == Some(served_by(*e as usize))).count();
        let mut line = format!(
            "{handed} of {} flows served by the thread of the rx queue they arrived on (its socket's NAPI id or incoming CPU)",
            landed.len()
        );
        if !unknown.is_empty() {
            notes.push(format!(
                "arrival queue unknown for flows {} (NAPI id 0, no single rx IRQ on its CPU): dealt by index",
                join_and(&unknown)
            ));
        }
        const SHOWN: usize = 8;
        for note in notes.iter().take(SHOWN) {
            line.push_str("; ");
            line.push_str(note);
        }
        if notes.len() > SHOWN {
            line.push_str(&format!("; and {} more flows off their arrival queue's thread", notes.len() - SHOWN));
        }
        Handoff { engine_queues, line }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn awaiting_first_packets_returns_when_each_socket_has_one_or_at_the_deadline() {
        use super::await_first_packets;
        use std::net::UdpSocket;
        use std::os::fd::AsRawFd;
        use std::time::{Duration, Instant};
        let (a, b) = (UdpSocket::bind("127.0.0.1:0").unwrap(), UdpSocket::bind("127.0.0.1:0").unwrap());
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let fds = [a.as_raw_fd(), b.as_raw_fd()];
        let start = Instant::now();
        assert_eq!(await_first_packets(fds, start + Duration::from_millis(80)), 0, "nothing came");
        assert!(start.elapsed() >= Duration::from_millis(80), "waited until the deadline");
        tx.send_to(b"1", a.local_addr().unwrap()).unwrap();
        let start = Instant::now();
        assert_eq!(await_first_packets(fds, start + Duration::from_millis(80)), 1, "one flow had a datagram");
        let late = b.local_addr().unwrap();
        let sender = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(30));
            tx.send_to(b"2", late).unwrap();
        });
        let start = Instant::now();
        assert_eq!(await_first_packets(fds, start + Duration::from_secs(10)), 2, "both flows had one");
        assert!(start.elapsed() < Duration::from_secs(5), "returned once both had, not at the deadline");
        sender.join().unwrap();
        let mut buf = [0u8; 4];
        assert_eq!(a.recv(&mut buf).unwrap(), 1, "the wait consumed nothing");
    }

    use crate::runtime::nic_queues::tests::topology;
    use crate::runtime::nic_queues::{PlacementMode, TestQueues};

    #[test]
    fn flows_go_to_the_thread_of_the_queue_they_arrived_on() {
        let tq = TestQueues::plan(topology(false), None, 4, Some(PlacementMode::Irq), true).unwrap().unwrap();
        // A permutation: each flow moves to the thread of its queue, none idles.
        let h = tq.hand_off(4, &[(0, Some(2)), (1, Some(3)), (2, Some(0)), (3, Some(1))]);
        assert_eq!(h.engine_queues, vec![(0, 2), (1, 3), (2, 0), (3, 1)]);
        assert!(h.line.starts_with("4 of 4 flows served by the thread of the rx queue they arrived on"), "{}", h.line);
        assert!(!h.line.contains("idles"), "{}", h.line);
    }

    #[test]
    fn two_flows_on_one_queue_keep_every_thread_busy_and_say_so() {
        // The 2-queue lab's case: both flows of `-P 2` arrive on rx queue 0.
        let tq = TestQueues::plan(topology(false), Some(&[0, 1]), 2, Some(PlacementMode::Irq), true).unwrap().unwrap();
        let h = tq.hand_off(2, &[(0, Some(0)), (1, Some(0))]);
        assert_eq!(h.engine_queues, vec![(0, 0), (1, 1)], "thread 1 is not left idle");
        assert!(
            h.line.contains("flow 1 arrived on rx queue 0, whose threads have their share: thread of rx 1"),
            "{}",
            h.line
        );
        // Both on rx queue 1: flow 0 goes there (handed), flow 1 to the idle thread of rx 0.
        let h = tq.hand_off(2, &[(0, Some(1)), (1, Some(1))]);
        assert_eq!(h.engine_queues, vec![(0, 1), (1, 0)]);
        assert!(h.line.starts_with("1 of 2 flows"), "{}", h.line);
        // More flows than threads: balanced, 2 each.
        let h = tq.hand_off(2, &[(0, Some(0)), (1, Some(0)), (2, Some(0)), (3, Some(1))]);
        let on = |e: u32| h.engine_queues.iter().filter(|(_, q)| *q == e).count();
        assert_eq!((on(0), on(1)), (2, 2), "{h:?}");
        assert_eq!(h.engine_queue_of(3, 2), 1, "flow 3 arrived on rx 1 and is served there");
    }

    #[test]
    fn unknown_or_unserved_arrivals_are_dealt_by_index_and_named() {
        let tq = TestQueues::plan(topology(false), Some(&[0, 1]), 2, Some(PlacementMode::Irq), true).unwrap().unwrap();
        let h = tq.hand_off(2, &[(0, None), (1, None)]);
        assert_eq!(h.engine_queues, vec![(0, 0), (1, 1)]);
        assert!(h.line.contains("arrival queue unknown for flows 0 and 1"), "{}", h.line);
        assert!(h.line.starts_with("0 of 2 flows"), "{}", h.line);
        let h = tq.hand_off(2, &[(0, Some(3)), (1, Some(0))]);
        assert_eq!(h.engine_queues, vec![(0, 1), (1, 0)], "flow 1 takes rx 0's thread, flow 0 the other");
        assert!(h.line.contains("flow 0 arrived on rx queue 3, which no thread serves"), "{}", h.line);
        // Many flows off their queue: the line stays short.
        let landed: Vec<(u32, Option<u32>)> = (0..40).map(|f| (f, Some(0))).collect();
        let h = tq.hand_off(2, &landed);
        assert!(h.line.contains("and 12 more flows off their arrival queue's thread"), "{}", h.line);
    }
}
