//! The accept gate both receivers stand behind (`recv` and `recv --iperf2`). Every accepted
//! connection waits on one epoll in the serving thread until its protocol has classified it
//! from its first bytes, so an idle or dripping peer costs a descriptor, never a thread:
//! - a deadline of [`DEADLINE`] from the accept, however slowly the bytes come;
//! - a cap per source address and one in all ([`GateLimits`]); when the table is full, the
//!   source holding most closes its oldest connection for a newcomer from elsewhere;
//! - out of descriptors, memory or threads ([`out_of_resources`]), accepting pauses for
//!   [`PAUSE`], the source holding most loses its oldest stalled connection, it is said once
//!   per episode ([`Pause`]) and accepting resumes by itself;
//! - drops are logged a few per source address per window ([`RateLimit`]), the rest counted.
//!
//! A protocol supplies only its [`Classifier`]: how it reads and judges the bytes of a
//! pending connection, its events, and its own work on each wake.

use crate::base::error::{Error, Result};
use crate::session::logq::{RateLimit, WINDOW};
use crate::session::source::Source;
use crate::sys::epoll::Epoll;
use crate::sys::mptcp::StreamProtocol;
use std::collections::{HashMap, VecDeque};
use std::io::{self, Read};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

/// From its accept, a connection has this long to be classified.
pub(crate) const DEADLINE: Duration = Duration::from_secs(5);
/// Out of descriptors, only a connection at least this old is closed to make room: a real peer
/// sends its first bytes within a round trip, and the accept that found no descriptor may have
/// been the probe after the last connection (Linux reserves the descriptor before it looks
/// at the queue), so the newest one is as likely a data flow of a test as an attack.
const EVICT_MIN_AGE: Duration = Duration::from_secs(1);
/// After running out of descriptors, memory or threads: how long an intake pauses.
pub(crate) const PAUSE: Duration = Duration::from_millis(250);
/// Trouble is over after this long without another failure.
const TROUBLE_OVER: Duration = Duration::from_secs(2);
/// The loop wakes at least this often: deadlines, stop requests, the protocol's own work.
const TICK: Duration = Duration::from_millis(100);
/// Accepts per wake, so that reading the table is never starved.
const ACCEPTS_PER_WAKE: usize = 256;
/// Epoll tokens: the listener, the protocol's own descriptors below [`FIRST_CONN`], then
/// one per connection.
const LISTENER: u64 = 0;
const FIRST_CONN: u64 = 16;

/// What a protocol's gate holds, and how its messages name a pending connection.
#[derive(Debug, Clone, Copy)]
pub(crate) struct GateLimits {
    /// Connections on the table at once, from everyone.
    pub total: usize,
    /// From one source address (more with [`Classifier::extra_room`]).
    pub per_source: usize,
    /// What a connection sends before it is classified ("handshake").
    pub what: &'static str,
    /// What pending connections are doing ("in their handshake").
    pub doing: &'static str,
    /// The option that sets `per_source`, named when it refuses ("" for none).
    pub per_source_option: &'static str,
}

/// A connection on the gate, read exactly as far as its classifier asks (nothing sent after
/// its classification is consumed here).
pub(crate) struct Pending<S> {
    pub stream: TcpStream,
    pub peer: SocketAddr,
    pub accepted: Instant,
    /// `buf` is filled to this length before the classifier looks again.
    pub want: usize,
    pub buf: Vec<u8>,
    /// Bytes read in all.
    pub got: usize,
    pub state: S,
}

/// What the classifier made of a connection.
pub(crate) enum Verdict<S> {
    /// Wants more bytes (its `want` says how many): it stays on the table.
    More(Pending<S>),
    /// Handed on, refused or dropped (the classifier said why).
    Done,
    /// Handing it on failed for lack of resources (`what` failed): accepting pauses, as when
    /// accept itself fails.
    Pause(&'static str, io::Error),
}

/// What the gate tells the operator, in the protocol's own events ([`Classifier::tell`]).
#[derive(Debug)]
pub(crate) enum GateEvent {
    Dropped {
        peer: SocketAddr,
        reason: String,
    },
    /// `what` failed with `error`; `open` connections were on the table.
    Paused {
        what: &'static str,
        error: io::Error,
        open: usize,
    },
    Resumed {
        paused: Duration,
    },
    /// `count` more drops about `source` (the unspecified address: the sources beyond the
    /// log's table) were not logged in the last `seconds`.
    Suppressed {
        source: IpAddr,
        count: u64,
        seconds: u64,
    },
}

/// One protocol behind the gate.
pub(crate) trait Classifier {
    /// A connection's place in its handshake.
    type State;
    /// What ends the serving loop.
    type Outcome;
    /// A new connection from `ip`: its first state and the bytes that state wants; `Err`
    /// closes it at once with the reason (`recv --allow`).
    fn open(&self, ip: IpAddr) -> std::result::Result<(Self::State, usize), String>;
    /// `conn.buf` holds the `conn.want` bytes asked for: the next step, or the verdict.
    fn classify(&mut self, conn: Pending<Self::State>) -> Verdict<Self::State>;
    /// Connections `source` may hold beyond the per-source cap.
    fn extra_room(&self, _source: Source) -> usize {
        0
    }
    /// Repeated drops, counted per source address.
    fn refusals(&self) -> &RateLimit;
    fn tell(&self, event: GateEvent);
    /// Logs a dropped connection, a few per source address per window.
    fn drop_conn(&self, peer: SocketAddr, reason: String) {
        if self.refusals().allow(peer.ip().to_canonical(), Instant::now()) {
            self.tell(GateEvent::Dropped { peer, reason });
        }
    }
    /// Before the loop: the protocol adds its own descriptors to `epoll`, with tokens from 1
    /// to 15 ([`Self::ready`]).
    fn start(&mut self, _epoll: &Epoll) -> io::Result<()> {
        Ok(())
    }
    /// On every wake, first: the protocol's own work; `Some` ends the loop.
    fn tick(&mut self, epoll: &Epoll, now: Instant) -> Option<Self::Outcome>;
    /// One of the protocol's own descriptors is ready.
    fn ready(&mut self, _token: u64, _epoll: &Epoll) {}
}

/// Accept errors that fail one connection only: the peer gave up between SYN and accept, or
/// a transient network error.
fn transient(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::Interrupted
        || matches!(
            e.raw_os_error(),
            Some(
                libc::ECONNABORTED
                    | libc::EPROTO
                    | libc::EPERM
                    | libc::ENETDOWN
                    | libc::ENETUNREACH
                    | libc::EHOSTUNREACH
                    | libc::EHOSTDOWN
                    | libc::ENONET
                    | libc::EOPNOTSUPP
                    | libc::ETIMEDOUT
            )
        )
}

/// Out of descriptors, memory or threads: pause the intake, never end the receiver.
pub(crate) fn out_of_resources(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM))
}

/// A listener for the gate on `addr` (on `device` only, when given). Its backlog is deep: a
/// flood of connections waits in it rather than in SYN-ACK retries. `other` names the
/// listener most likely to hold the port already (", an `iperf -s`?"), for the error.
pub(crate) fn listen(addr: SocketAddr, device: Option<&str>, other: &str) -> Result<TcpListener> {
    listen_as(addr, device, StreamProtocol::Tcp, other)
}

/// [`listen`] with a listener of `protocol`: an MPTCP listener accepts MPTCP connections and
/// hands a plain TCP client a plain TCP socket.
pub(crate) fn listen_as(
    addr: SocketAddr,
    device: Option<&str>,
    protocol: StreamProtocol,
    other: &str,
) -> Result<TcpListener> {
    use socket2::{Domain, Socket, Type};
    let bound = || -> io::Result<TcpListener> {
        let socket = Socket::new(Domain::for_address(addr), Type::STREAM.cloexec(), Some(protocol.socket2()))?;
        socket.set_reuse_address(true)?;
        if addr.is_ipv6() {
            // "::" serves IPv4 peers too (as v4-mapped addresses), as std's listener does.
            let _ = socket.set_only_v6(false);
        }
        if let Some(dev) = device {
            socket.bind_device(Some(dev.as_bytes()))?;
        }
        socket.bind(&addr.into())?;
        socket.listen(1024)?;
        Ok(socket.into())
    };
    bound().map_err(|e| bind_error("", addr, device, other, e))
}

/// Why binding a receiver's `what` socket ("UDP ", or "" for the listener) to `addr` failed,
/// said as what the user can change: another listener on the port, an address or device this
/// host does not have.
pub(crate) fn bind_error(what: &str, addr: SocketAddr, device: Option<&str>, other: &str, e: io::Error) -> Error {
    if e.raw_os_error() == Some(libc::ENODEV) {
        return Error::usage(format!("--bind-dev {}: no such device", device.unwrap_or("")));
    }
    match e.kind() {
        io::ErrorKind::AddrInUse => Error::usage(format!(
            "{what}port {} is already in use on {}: stop the other listener{other} or pick another --port",
            addr.port(),
            addr.ip()
        )),
        io::ErrorKind::AddrNotAvailable => {
            Error::usage(format!("cannot bind {addr}: no local interface has that address"))
        }
        _ => Error::io(format!("binding {what}{addr}"), e),
    }
}

/// The soft `RLIMIT_NOFILE`.
pub(crate) fn open_files_limit() -> u64 {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes one rlimit into our struct.
    let read = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0;
    soft_limit(read.then_some(lim.rlim_cur))
}

/// Unlimited (or unreadable) counts as 2^20 descriptors, above any cap derived from it.
fn soft_limit(cur: Option<libc::rlim_t>) -> u64 {
    cur.filter(|&c| c != libc::RLIM_INFINITY).map_or(1 << 20, u64::from)
}

/// How many of something each source address holds.
#[derive(Debug, Default)]
pub(crate) struct PerSource(HashMap<Source, usize>);

impl PerSource {
    pub(crate) fn held(&self, ip: Source) -> usize {
        self.0.get(&ip).copied().unwrap_or(0)
    }

    /// Takes one for `ip` unless it holds `limit` already.
    pub(crate) fn try_take(&mut self, ip: Source, limit: usize) -> bool {
        let n = self.0.entry(ip).or_insert(0);
        let free = *n < limit;
        *n += usize::from(free);
        if *n == 0 {
            self.0.remove(&ip);
        }
        free
    }

    pub(crate) fn give_back(&mut self, ip: Source) {
        if let Some(n) = self.0.get_mut(&ip) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.0.remove(&ip);
            }
        }
    }

    /// The source holding most, and how many.
    fn heaviest(&self) -> Option<(Source, usize)> {
        self.0.iter().max_by_key(|(_, n)| **n).map(|(&ip, &n)| (ip, n))
    }
}

/// An intake (accepting, or a UDP socket taking new clients) paused after running out of
/// resources: it retries after [`PAUSE`]; an episode is said once, and is over after
/// [`TROUBLE_OVER`] without another failure.
#[derive(Debug, Default)]
pub(crate) struct Pause {
    retry_at: Option<Instant>,
    /// The episode: since when, and its latest failure.
    trouble: Option<(Instant, Instant)>,
}

impl Pause {
    /// A failure at `now`; true when it starts an episode (to be said).
    pub(crate) fn failed(&mut self, now: Instant) -> bool {
        let first = self.trouble.is_none();
        self.trouble = Some((self.trouble.map_or(now, |(since, _)| since), now));
        self.retry_at = Some(now + PAUSE);
        first
    }

    /// Whether the paused intake may try again at `now`; it calls [`Self::retried`] then.
    pub(crate) fn due(&self, now: Instant) -> bool {
        self.retry_at.is_some_and(|at| now >= at)
    }

    pub(crate) fn retried(&mut self) {
        self.retry_at = None;
    }

    /// The episode's length, once, when it is over at `now`.
    pub(crate) fn over(&mut self, now: Instant) -> Option<Duration> {
        let (since, last) = self.trouble?;
        if self.retry_at.is_some() || now.duration_since(last) < TROUBLE_OVER {
            return None;
        }
        self.trouble = None;
        Some(last.duration_since(since))
    }
}

/// The connections on the gate: by token, in accept order (so their deadlines are in order
/// too), counted per source address.
struct Table<V> {
    entries: HashMap<u64, (Source, V)>,
    order: VecDeque<(Instant, u64)>,
    per_source: PerSource,
    next_token: u64,
}

impl<V> Table<V> {
    fn new() -> Self {
        Self {
            entries: HashMap::new(),
            order: VecDeque::new(),
            per_source: PerSource::default(),
            next_token: FIRST_CONN,
        }
    }

    fn len(&self) -> usize {
        self.entries.len()
    }

    fn next_token(&mut self) -> u64 {
        self.next_token += 1;
        self.next_token - 1
    }

    fn insert(&mut self, token: u64, ip: Source, deadline: Instant, value: V) {
        self.per_source.try_take(ip, usize::MAX);
        self.order.push_back((deadline, token));
        // Classified connections leave their tokens behind until their deadline; under churn
        // they are dropped at once, so scans of the order stay as long as the table.
        if self.order.len() > 2 * self.entries.len() + 64 {
            let entries = &self.entries;
            self.order.retain(|(_, t)| *t == token || entries.contains_key(t));
        }
        self.entries.insert(token, (ip, value));
    }

    /// Takes an entry off to work on it: [`Self::put_back`] or [`Self::release`] follows.
    fn take(&mut self, token: u64) -> Option<(Source, V)> {
        self.entries.remove(&token)
    }

    fn put_back(&mut self, token: u64, ip: Source, value: V) {
        self.entries.insert(token, (ip, value));
    }

    fn release(&mut self, ip: Source) {
        self.per_source.give_back(ip);
    }

    fn next_deadline(&self) -> Option<Instant> {
        self.order.front().map(|(at, _)| *at)
    }

    /// The next entry whose deadline passed by `now`, off the table.
    fn expired(&mut self, now: Instant) -> Option<V> {
        while let Some(&(at, token)) = self.order.front() {
            if at > now {
                return None;
            }
            self.order.pop_front();
            if let Some((ip, value)) = self.entries.remove(&token) {
                self.release(ip);
                return Some(value);
            }
        }
        None
    }

    /// Closes the oldest entry of the source holding most, if that source holds more than
    /// `above` and the entry's deadline is at most `due_by`: (entry, source, what it held).
    fn evict(&mut self, above: usize, due_by: Instant) -> Option<(V, Source, usize)> {
        let (ip, n) = self.per_source.heaviest().filter(|&(_, n)| n > above)?;
        let token = self
            .order
            .iter()
            .take_while(|(at, _)| *at <= due_by)
            .map(|(_, t)| *t)
            .find(|t| self.entries.get(t).is_some_and(|(i, _)| *i == ip))?;
        let (_, value) = self.entries.remove(&token)?;
        self.release(ip);
        Some((value, ip, n))
    }
}

/// The serving loop's gate: the listener, its epoll and the table.
struct Gate<S> {
    listener: TcpListener,
    epoll: Epoll,
    limits: GateLimits,
    table: Table<Pending<S>>,
    pause: Pause,
    next_sweep: Instant,
}

/// Serves `listener` through the gate until the classifier's [`Classifier::tick`] ends it.
pub(crate) fn serve<C: Classifier>(listener: TcpListener, limits: GateLimits, c: &mut C) -> Result<C::Outcome> {
    listener.set_nonblocking(true).map_err(|e| Error::io("making the listener non-blocking", e))?;
    let epoll = Epoll::new().map_err(|e| Error::io("creating the accept loop's epoll", e))?;
    epoll.add(listener.as_raw_fd(), LISTENER).map_err(|e| Error::io("watching the listener", e))?;
    c.start(&epoll).map_err(|e| Error::io("watching the receiver's sockets", e))?;
    let mut gate =
        Gate { listener, epoll, limits, table: Table::new(), pause: Pause::default(), next_sweep: Instant::now() };
    let mut ready = Vec::new();
    loop {
        let now = Instant::now();
        if let Some(outcome) = c.tick(&gate.epoll, now) {
            return Ok(outcome);
        }
        gate.expire(now, c);
        gate.sweep(now, c);
        gate.resume_if_due(now, c);
        ready.clear();
        gate.epoll.wait(&mut ready, gate.wait_ms(now)).map_err(|e| Error::io("waiting for connections", e))?;
        for r in &ready {
            match r.token {
                LISTENER => gate.accept_all(c)?,
                t if t < FIRST_CONN => c.ready(t, &gate.epoll),
                t => gate.readable(t, r.hangup, c),
            }
        }
    }
}

impl<S> Gate<S> {
    fn wait_ms(&self, now: Instant) -> i32 {
        let until =
            [self.table.next_deadline(), self.pause.retry_at].into_iter().flatten().fold(now + TICK, Instant::min);
        until.saturating_duration_since(now).as_millis().clamp(1, TICK.as_millis()) as i32
    }

    fn expire<C: Classifier<State = S>>(&mut self, now: Instant, c: &C) {
        while let Some(conn) = self.table.expired(now) {
            let secs = DEADLINE.as_secs();
            let reason = if conn.got == 0 {
                format!("sent nothing within {secs} s")
            } else {
                format!("{} not finished within {secs} s ({} bytes in)", self.limits.what, conn.got)
            };
            c.drop_conn(conn.peer, reason);
        }
    }

    /// The refusal log's windows are swept once a second, not on every wake.
    fn sweep<C: Classifier<State = S>>(&mut self, now: Instant, c: &C) {
        if now < self.next_sweep {
            return;
        }
        self.next_sweep = now + Duration::from_secs(1);
        for (source, count) in c.refusals().expired(now) {
            c.tell(GateEvent::Suppressed { source, count, seconds: WINDOW.as_secs() });
        }
    }

    fn resume_if_due<C: Classifier<State = S>>(&mut self, now: Instant, c: &C) {
        if self.pause.due(now) && self.epoll.add(self.listener.as_raw_fd(), LISTENER).is_ok() {
            self.pause.retried();
        }
        if let Some(paused) = self.pause.over(now) {
            c.tell(GateEvent::Resumed { paused });
        }
    }

    /// Accepts what the listener holds; running out of resources pauses accepting.
    fn accept_all<C: Classifier<State = S>>(&mut self, c: &mut C) -> Result<()> {
        for _ in 0..ACCEPTS_PER_WAKE {
            match self.listener.accept() {
                Ok((stream, peer)) => self.admit(stream, peer, c),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if out_of_resources(&e) => {
                    self.paused("accepting a connection", e, c);
                    return Ok(());
                }
                Err(e) if transient(&e) => continue,
                Err(e) => return Err(Error::io("accepting a connection", e)),
            }
        }
        Ok(())
    }

    /// Accepting pauses; room is made: the source holding most closes its oldest stalled
    /// connection (one older than [`EVICT_MIN_AGE`]).
    fn paused<C: Classifier<State = S>>(&mut self, what: &'static str, error: io::Error, c: &C) {
        let now = Instant::now();
        self.epoll.remove(self.listener.as_raw_fd());
        if self.pause.failed(now) {
            c.tell(GateEvent::Paused { what, error, open: self.table.len() });
        }
        self.evict(0, now + DEADLINE - EVICT_MIN_AGE, c);
    }

    fn evict<C: Classifier<State = S>>(&mut self, above: usize, due_by: Instant, c: &C) -> bool {
        let Some((conn, ip, n)) = self.table.evict(above, due_by) else { return false };
        c.drop_conn(conn.peer, format!("closed to make room: {n} connections from {ip} {}", self.limits.doing));
        true
    }

    fn admit<C: Classifier<State = S>>(&mut self, stream: TcpStream, peer: SocketAddr, c: &mut C) {
        let (state, want) = match c.open(peer.ip().to_canonical()) {
            Ok(first) => first,
            Err(reason) => return c.drop_conn(peer, reason),
        };
        // Counted per IPv4 address or IPv6 /64: rotating addresses within a /64 buys nothing.
        let ip = Source::of(peer.ip());
        let limits = self.limits;
        let mine = self.table.per_source.held(ip);
        if mine >= limits.per_source && mine >= limits.per_source + c.extra_room(ip) {
            let option = limits.per_source_option;
            let hint = if option.is_empty() { String::new() } else { format!(" ({option})") };
            return c.drop_conn(peer, format!("{mine} connections from {ip} still {}{hint}", limits.doing));
        }
        // The table is full: the source holding most closes its oldest, if it holds more
        // than the newcomer's source would with it.
        if self.table.len() >= limits.total && !self.evict(mine + 1, Instant::now() + DEADLINE, c) {
            return c.drop_conn(peer, format!("{} connections still {}", self.table.len(), limits.doing));
        }
        if let Err(e) = stream.set_nonblocking(true) {
            return c.drop_conn(peer, format!("cannot read it: {e}"));
        }
        let token = self.table.next_token();
        if let Err(e) = self.epoll.add(stream.as_raw_fd(), token) {
            return c.drop_conn(peer, format!("cannot watch the connection: {e}"));
        }
        let now = Instant::now();
        let conn = Pending { stream, peer, accepted: now, want, buf: Vec::with_capacity(want), got: 0, state };
        self.table.insert(token, ip, now + DEADLINE, conn);
    }

    /// Reads what a connection has for its classifier, and lets it judge as far as that goes.
    fn readable<C: Classifier<State = S>>(&mut self, token: u64, hangup: bool, c: &mut C) {
        let Some((ip, mut conn)) = self.table.take(token) else { return };
        let fd = conn.stream.as_raw_fd();
        loop {
            match fill(&mut conn, hangup, self.limits.what) {
                Ok(true) => {}
                Ok(false) => return self.table.put_back(token, ip, conn),
                Err(reason) => {
                    c.drop_conn(conn.peer, reason);
                    break;
                }
            }
            match c.classify(conn) {
                Verdict::More(next) => conn = next,
                Verdict::Done => break,
                Verdict::Pause(what, e) => {
                    self.paused(what, e, c);
                    break;
                }
            }
        }
        // A connection handed on stays open: it is no longer the gate's to watch.
        self.epoll.remove(fd);
        self.table.release(ip);
    }
}

/// Reads into `conn.buf` up to `conn.want` bytes: true when they are all in, false when the
/// peer sent no more yet; `Err`: why it is dropped.
fn fill<S>(conn: &mut Pending<S>, hangup: bool, what: &str) -> std::result::Result<bool, String> {
    while conn.buf.len() < conn.want {
        let start = conn.buf.len();
        let end = conn.want.min(start + 16 * 1024);
        conn.buf.resize(end, 0);
        let read = (&conn.stream).read(&mut conn.buf[start..end]);
        conn.buf.truncate(start + *read.as_ref().unwrap_or(&0));
        match read {
            Ok(0) => return Err(format!("closed before its {what} was complete")),
            Ok(n) => conn.got += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock && !hangup => return Ok(false),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(format!("reading its {what} failed: {e}")),
        }
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(last: u8) -> IpAddr {
        IpAddr::from([10, 0, 0, last])
    }

    fn src(last: u8) -> Source {
        Source::of(ip(last))
    }

    #[test]
    fn deadlines_expire_in_accept_order_on_a_simulated_clock() {
        let t0 = Instant::now();
        let mut t = Table::new();
        for (i, at) in [0u64, 100, 200].into_iter().enumerate() {
            let token = t.next_token();
            t.insert(token, src(1), t0 + Duration::from_millis(at) + DEADLINE, i);
        }
        assert_eq!(t.expired(t0 + DEADLINE - Duration::from_millis(1)), None, "nobody is late yet");
        assert_eq!(t.expired(t0 + DEADLINE + Duration::from_millis(150)), Some(0));
        assert_eq!(t.expired(t0 + DEADLINE + Duration::from_millis(150)), Some(1));
        assert_eq!(t.expired(t0 + DEADLINE + Duration::from_millis(150)), None, "the third has 50 ms left");
        assert_eq!(t.per_source.held(src(1)), 1, "the expired ones were given back");
        assert_eq!(t.next_deadline(), Some(t0 + Duration::from_millis(200) + DEADLINE));
    }

    #[test]
    fn a_finished_entry_leaves_no_deadline_behind_it() {
        let t0 = Instant::now();
        let mut t = Table::new();
        let token = t.next_token();
        t.insert(token, src(1), t0 + DEADLINE, "classified");
        let (source, _) = t.take(token).unwrap();
        t.release(source);
        assert_eq!(t.expired(t0 + DEADLINE), None, "its stale deadline closes nothing");
        assert_eq!(t.per_source.held(src(1)), 0);
    }

    #[test]
    fn the_heaviest_source_loses_its_oldest_and_only_when_it_holds_more() {
        let t0 = Instant::now();
        let mut t = Table::new();
        let add = |t: &mut Table<&str>, who: u8, ms: u64, name: &'static str| {
            let token = t.next_token();
            t.insert(token, src(who), t0 + Duration::from_millis(ms) + DEADLINE, name);
        };
        add(&mut t, 2, 0, "b-old");
        add(&mut t, 1, 10, "a-old");
        add(&mut t, 1, 20, "a-mid");
        add(&mut t, 1, 30, "a-new");
        assert!(t.evict(3, t0 + DEADLINE * 2).is_none(), "three is not more than three");
        assert_eq!(t.evict(2, t0 + DEADLINE * 2), Some(("a-old", src(1), 3)), "the oldest of the heaviest");
        assert_eq!(t.per_source.held(src(1)), 2);
        // Out of descriptors: only connections older than the minimum age go.
        let young = t0 + Duration::from_millis(15) + DEADLINE;
        assert!(t.evict(0, young).is_none(), "a-mid is too young to be closed");
        assert_eq!(t.evict(0, t0 + Duration::from_millis(25) + DEADLINE), Some(("a-mid", src(1), 2)));
    }

    #[test]
    fn per_source_counts_stop_at_the_limit_and_come_back() {
        let mut p = PerSource::default();
        assert!(p.try_take(src(1), 2) && p.try_take(src(1), 2));
        assert!(!p.try_take(src(1), 2), "a third is over the limit");
        assert!(p.try_take(src(2), 2), "another address has its own count");
        assert!(!p.try_take(src(3), 0) && p.held(src(3)) == 0, "a refused first take leaves nothing");
        p.give_back(src(1));
        assert_eq!(p.held(src(1)), 1);
        p.give_back(src(2));
        p.give_back(src(2));
        assert_eq!((p.held(src(2)), p.heaviest()), (0, Some((src(1), 1))), "never below zero");
    }

    #[test]
    fn a_pause_is_said_once_per_episode_and_resumes_on_a_simulated_clock() {
        let t0 = Instant::now();
        let ms = |n: u64| t0 + Duration::from_millis(n);
        let mut p = Pause::default();
        assert!(p.failed(t0), "the first failure is said");
        assert!(!p.due(ms(249)) && p.due(ms(250)), "retried after the pause");
        p.retried();
        assert!(!p.failed(ms(300)), "a failure within the episode is not said again");
        p.retried();
        assert_eq!(p.over(ms(2299)), None, "2 s without a failure have not passed");
        assert_eq!(p.over(ms(2300)), Some(Duration::from_millis(300)), "over, with its length");
        assert_eq!(p.over(ms(9000)), None, "said once");
        assert!(p.failed(ms(9000)), "a new episode is said again");
        assert_eq!(p.over(ms(20_000)), None, "not over while the intake is still paused");
    }

    #[test]
    fn an_unlimited_descriptor_limit_is_a_large_finite_one() {
        assert_eq!(soft_limit(Some(libc::RLIM_INFINITY)), 1 << 20);
        assert_eq!(soft_limit(None), 1 << 20, "unreadable: as unlimited");
        assert_eq!(soft_limit(Some(64)), 64);
        assert!(open_files_limit() >= 3, "this process has stdio open");
    }

    #[test]
    fn drops_are_logged_a_few_per_source_and_window_and_the_rest_counted() {
        let t0 = Instant::now();
        let log = RateLimit::new(1);
        assert!(log.allow(ip(1), t0), "the first is logged");
        assert_eq!((0..1234).filter(|_| log.allow(ip(1), t0)).count(), 0, "the rest of the window is counted");
        assert!(log.allow(ip(2), t0), "another source has its own window");
        assert!(log.expired(t0 + WINDOW / 2).is_empty(), "the window is still open");
        assert_eq!(log.expired(t0 + WINDOW), vec![(ip(1), 1234)]);
        assert!(log.allow(ip(1), t0 + WINDOW), "a new window logs again");
    }

    /// A classifier of 4-byte greetings ("OKAY" passes, anything else is dropped), keeping
    /// what the gate told it; it ends the loop once one passed and two drops were told.
    struct Greeting {
        log: RateLimit,
        told: std::cell::RefCell<Vec<String>>,
        passed: Vec<TcpStream>,
    }

    impl Classifier for Greeting {
        type State = ();
        type Outcome = ();
        fn open(&self, _: IpAddr) -> std::result::Result<((), usize), String> {
            Ok(((), 4))
        }
        fn classify(&mut self, conn: Pending<()>) -> Verdict<()> {
            if conn.buf == b"OKAY" {
                self.passed.push(conn.stream);
            } else {
                self.drop_conn(conn.peer, "bad greeting".into());
            }
            Verdict::Done
        }
        fn refusals(&self) -> &RateLimit {
            &self.log
        }
        fn tell(&self, event: GateEvent) {
            self.told.borrow_mut().push(format!("{event:?}"));
        }
        fn tick(&mut self, _: &Epoll, _: Instant) -> Option<()> {
            (!self.passed.is_empty() && self.told.borrow().len() >= 2).then_some(())
        }
    }

    #[test]
    fn the_gate_caps_a_source_classifies_and_hands_on_over_loopback() {
        let listener = listen("127.0.0.1:0".parse().unwrap(), None, "").unwrap();
        let addr = listener.local_addr().unwrap();
        let taken = listen(addr, None, " (an `iperf -s`?)").unwrap_err().message;
        assert_eq!(
            taken,
            format!("port {} is already in use on 127.0.0.1: stop the other listener (an `iperf -s`?) or pick another --port", addr.port())
        );
        let limits =
            GateLimits { total: 8, per_source: 2, what: "greeting", doing: "greeting", per_source_option: "--cap" };
        // Two idle connections fill the source's share; the third is dropped at once; a
        // greeting that is wrong is dropped, a right one (after the idle ones left) passes.
        let idle: Vec<TcpStream> = (0..2).map(|_| TcpStream::connect(addr).unwrap()).collect();
        let client = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            let mut third = TcpStream::connect(addr).unwrap();
            third.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            let closed = matches!(third.read(&mut [0u8; 1]), Ok(0) | Err(_));
            drop(idle);
            std::thread::sleep(Duration::from_millis(300));
            let mut bad = TcpStream::connect(addr).unwrap();
            std::io::Write::write_all(&mut bad, b"NOPE").unwrap();
            let mut good = TcpStream::connect(addr).unwrap();
            std::io::Write::write_all(&mut good, b"OKAY and then the test's own bytes").unwrap();
            (closed, good)
        });
        let mut c = Greeting { log: RateLimit::new(5), told: Default::default(), passed: Vec::new() };
        serve(listener, limits, &mut c).unwrap();
        let (third_closed, _good) = client.join().unwrap();
        assert!(third_closed, "the source's third connection was closed at once");
        let told = c.told.borrow().join("\n");
        assert!(told.contains("2 connections from 127.0.0.1 still greeting (--cap)"), "{told}");
        assert!(told.contains("bad greeting"), "{told}");
        let mut rest = [0u8; 9];
        (&c.passed[0]).read_exact(&mut rest).unwrap();
        assert_eq!(&rest, b" and then", "nothing after the greeting was consumed by the gate");
    }
}
