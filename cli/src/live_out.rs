//! Output as a test runs: the header when it starts, each interval as it closes, the summary
//! at the end, flushed line by line (pipes too), to stdout or `--logfile`, each text line
//! prefixed with `--title`. `--json-stream` writes the same moments as one JSON object per line.

use serde_json::Value;
use std::{
    io::Write,
    path::Path,
    sync::{Arc, Mutex},
};
use uringbench::{
    output as rr,
    output::Detail,
    output::{self as report, interval_event, start_event},
    Direction, Error, IntervalFigures, LatencyInterval, Observer, StartInfo, TestSpec,
};

/// Where a command's report goes.
pub struct Out {
    file: Option<Mutex<std::fs::File>>,
    title: Option<String>,
}

impl Out {
    pub fn new(logfile: Option<&Path>, title: Option<String>) -> Result<Self, Error> {
        let file = logfile
            .map(|p| {
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(p)
                    .map_err(|e| Error::usage(format!("cannot open --logfile {}: {e}", p.display())))
            })
            .transpose()?
            .map(Mutex::new);
        Ok(Self { file, title })
    }

    fn write(&self, bytes: &[u8]) {
        match &self.file {
            Some(f) => {
                let mut f = f.lock().unwrap_or_else(|p| p.into_inner());
                let _ = f.write_all(bytes);
                let _ = f.flush();
            }
            None => {
                let mut out = std::io::stdout().lock();
                let _ = out.write_all(bytes);
                let _ = out.flush();
            }
        }
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
        let text = serde_json::to_string_pretty(v).map_err(|e| Error::io("encoding JSON", std::io::Error::other(e)))?;
        self.write(format!("{text}\n").as_bytes());
        Ok(())
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
}

impl LiveOut {
    pub fn new(out: &Arc<Out>, style: Style, detail: Detail) -> Arc<Self> {
        Arc::new(Self { out: Arc::clone(out), style, detail, spec: Mutex::new(None), pending: Mutex::new(None) })
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
                t.push_str(&format!("client: {}\nserver: {}\n", start.sender_placement, start.receiver_placement));
            }
            if s.interval_ms > 0 {
                t.push_str(&rr::rr_interval_titles());
            }
            t
        } else {
            let mut t = report::header_line(s, &start.target);
            if placement {
                t.push_str(&format!("sender:   {}\nreceiver: {}\n", start.sender_placement, start.receiver_placement));
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
