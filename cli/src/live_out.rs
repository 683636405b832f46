//! Output as a test runs: the header when it starts, each interval as it closes, the summary
//! at the end, flushed line by line (pipes too), to stdout or `--logfile` (through [`Sink`]), each text line
//! prefixed with `--title`. `--json-stream` writes the same moments as one JSON object per line.

use crate::sink::Sink;
use serde_json::Value;
use std::{
    path::Path,
    sync::{Arc, Mutex},
};
use uringbench::{
    output as rr,
    output::Detail,
    output::{self as report, interval_event, start_event},
    Direction, Error, IntervalFigures, LatencyInterval, Observer, StartInfo, StopToken, TestSpec,
};

/// Where a command's report goes: stdout, or `--logfile` (appended to, written beside it and
/// renamed over it at the end, see [`Sink`]).
pub struct Out {
    logfile: Option<Sink>,
    title: Option<String>,
}

impl Out {
    pub fn new(logfile: Option<&Path>, title: Option<String>) -> Result<Self, Error> {
        let logfile = logfile
            .map(|p| {
                Sink::file(p, true).map_err(|e| Error::usage(format!("cannot open --logfile {}: {e}", p.display())))
            })
            .transpose()?;
        Ok(Self { logfile, title })
    }

    /// The sink this report goes to.
    pub fn sink(&self) -> &Sink {
        self.logfile.as_ref().unwrap_or(Sink::stdout())
    }

    fn write(&self, bytes: &[u8]) {
        self.sink().write(bytes);
    }

    /// Ends `stop`'s test when a write of this report fails.
    pub fn stop_on_failure(&self, stop: &StopToken) {
        self.sink().stop_on_failure(stop);
    }

    /// Completes the report: the log file in place, or stdout flushed (see [`Sink::finish`]).
    pub fn finish(&self) -> Result<(), Error> {
        self.sink().finish()
    }

    /// Machine-readable text (CSV), as it is.
    pub fn raw(&self, text: &str) {
        self.write(text.as_bytes());
    }

    /// Text lines, each prefixed with the title when there is one.
    pub fn text(&self, text: &str) {
        match &self.title {
            Some(t) => {
                let prefixed: String = text.lines().map(|l| format!("{t}: {l}\n")).collect();
                self.write(prefixed.as_bytes());
            }
            None => self.write(text.as_bytes()),
        }
    }

    /// One JSON object on one line (`--json-stream`).
    pub fn json_line(&self, v: &Value) {
        self.write(format!("{v}\n").as_bytes());
    }

    /// One JSON document, indented (`-J`).
    pub fn json_doc(&self, v: &impl serde::Serialize) -> Result<(), Error> {
        self.sink().json_doc(v)
    }
}

/// What a live observer prints.
#[derive(Clone, Copy, PartialEq)]
pub enum Style {
    Text,
    JsonStream,
}

/// The live output of `send` (streams) and of `rr`/`crr` (transactions).
pub struct LiveOut {
    out: Arc<Out>,
    style: Style,
    /// Whether the placement lines are shown (`-v`).
    detail: Detail,
    /// The test as agreed, once it started.
    spec: Mutex<Option<TestSpec>>,
    /// rr and crr: an interval's line waits for its latency, told right after it.
    pending: Mutex<Option<(usize, IntervalFigures)>>,
    /// `--bidir`: each second's `rev` rows follow its `fwd` rows, whichever side's figures
    /// came first.
    bidir: Mutex<BidirOrder>,
}

/// The order of `--bidir`'s interval rows: a reverse interval that arrives before the
/// forward one of the same second waits for it, at most until the next reverse interval or
/// the end of the run ([`LiveOut::flush`]), so a stalled direction holds back one line only.
#[derive(Default)]
struct BidirOrder {
    /// The last forward interval shown.
    forward_shown: Option<usize>,
    /// A reverse interval's rows waiting for their second's forward rows.
    reverse_held: Option<(usize, String)>,
}

impl BidirOrder {
    /// The text to show now for interval `n` of `direction`, in order.
    fn take(&mut self, direction: Direction, n: usize, rows: String) -> String {
        if direction != Direction::Reverse {
            self.forward_shown = Some(n);
            return match self.reverse_held.take() {
                Some((m, held)) if m <= n => rows + &held,
                other => {
                    self.reverse_held = other;
                    rows
                }
            };
        }
        if self.forward_shown.is_some_and(|f| f >= n) {
            return rows;
        }
        let earlier = self.reverse_held.replace((n, rows)).map(|(_, t)| t);
        earlier.unwrap_or_default()
    }
}

impl LiveOut {
    pub fn new(out: &Arc<Out>, style: Style, detail: Detail) -> Arc<Self> {
        Arc::new(Self {
            out: Arc::clone(out),
            style,
            detail,
            spec: Mutex::new(None),
            pending: Mutex::new(None),
            bidir: Mutex::new(BidirOrder::default()),
        })
    }

    /// The run ended: rows still held for order are shown before its summary.
    pub fn flush(&self) {
        if let Some((_, rows)) = self.bidir.lock().unwrap_or_else(|p| p.into_inner()).reverse_held.take() {
            self.out.text(&rows);
        }
    }
}

impl Observer for LiveOut {
    fn started(&self, start: &StartInfo) {
        *self.spec.lock().unwrap_or_else(|p| p.into_inner()) = Some(start.spec.clone());
        if self.style == Style::JsonStream {
            return self.out.json_line(&start_event(start));
        }
        let s = &start.spec;
        let placement = self.detail.shows_data_path();
        let mut text = if s.workload.latency_bound() {
            let mut t = rr::rr_header(s, &start.target);
            if placement {
                t.push_str(&format!("client: {}\nserver: {}\n", start.this_placement, start.far_placement));
            }
            if s.interval_ms > 0 {
                t.push_str(&rr::rr_interval_titles());
            }
            t
        } else {
            let mut t = report::header_line(s, &start.target);
            if placement {
                t.push_str(&report::placement_lines(start));
            }
            if s.interval_ms > 0 {
                t.push_str(&report::interval_titles(s));
                t.push('\n');
            }
            t
        };
        if s.interval_ms == 0 && !s.workload.latency_bound() {
            text.push_str(&format!("running for {:.1} s...\n", (s.warmup_ms + s.time_ms) as f64 / 1e3));
        }
        self.out.text(&text);
    }

    fn interval(&self, direction: Direction, n: usize, received: &IntervalFigures, offered: Option<&IntervalFigures>) {
        let spec = self.spec.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let Some(spec) = spec else { return };
        let latency = spec.workload.latency_bound();
        if self.style == Style::JsonStream {
            let entry = if latency { rr::rr_interval_json(received) } else { report::interval_json(received, offered) };
            return self.out.json_line(&interval_event(direction, n, entry));
        }
        // Without --interval the one interval is the window, which the summary shows.
        if spec.interval_ms == 0 {
            return;
        }
        if latency {
            // Shown with its latency, which the run tells right after the interval.
            *self.pending.lock().unwrap_or_else(|p| p.into_inner()) = Some((n, received.clone()));
            return;
        }
        let mut text = report::interval_lines(&spec, n, received, offered);
        if spec.direction == Direction::Bidir {
            let tag = if direction == Direction::Reverse { "rev " } else { "fwd " };
            text = text.lines().map(|l| format!("{tag}{l}\n")).collect();
            text = self.bidir.lock().unwrap_or_else(|p| p.into_inner()).take(direction, n, text);
            if text.is_empty() {
                return;
            }
        }
        self.out.text(&text);
    }

    fn latency(&self, n: usize, figures: &LatencyInterval) {
        let spec = self.spec.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let Some(spec) = spec else { return };
        if self.style == Style::JsonStream {
            return self.out.json_line(&report::latency_event(n, figures));
        }
        if spec.interval_ms == 0 {
            return;
        }
        if spec.workload.latency_bound() {
            let pending = self.pending.lock().unwrap_or_else(|p| p.into_inner()).take();
            if let Some((_, received)) = pending.filter(|(m, _)| *m == n) {
                self.out.text(&rr::rr_interval_line(&spec, n, &received, Some(figures)));
            }
            return;
        }
        self.out.text(&format!("{}\n", report::latency_interval_line(figures)));
    }
}

#[cfg(test)]
mod tests {
    use super::BidirOrder;
    use uringbench::Direction;

    #[test]
    fn bidir_rows_come_forward_then_reverse_each_second() {
        let mut o = BidirOrder::default();
        assert_eq!(o.take(Direction::Reverse, 0, "rev0 ".into()), "", "held for its forward rows");
        assert_eq!(o.take(Direction::Forward, 0, "fwd0 ".into()), "fwd0 rev0 ");
        assert_eq!(o.take(Direction::Forward, 1, "fwd1 ".into()), "fwd1 ");
        assert_eq!(o.take(Direction::Reverse, 1, "rev1 ".into()), "rev1 ", "its forward rows were shown");
        // A forward side that stalls holds back one reverse line, no more.
        assert_eq!(o.take(Direction::Reverse, 2, "rev2 ".into()), "");
        assert_eq!(o.take(Direction::Reverse, 3, "rev3 ".into()), "rev2 ");
        assert_eq!(o.reverse_held.as_ref().map(|(n, _)| *n), Some(3));
    }
}
