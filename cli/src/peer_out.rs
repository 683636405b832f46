//! What `recv --iperf2`, `--iperf3` and `--ntttcp` write: one log line per event, and with
//! `-J` or `--json-stream` each test's document (and its events) on stdout, through the one
//! stdout [`Sink`], while the log lines go to stderr so that stdout stays JSON.

use crate::{args::RecvArgs, sink::Sink};
use std::{io::Write as _, sync::Arc};
use uringbench::{
    escape_controls,
    output::{end_event, received_interval_event, received_start_event},
    FailedRun, IntervalFigures, PeerEvent, PeerEventSink, PeerTest, Role, StartInfo, StopToken, StreamDocument,
};

/// The event sink of a peer receiver (`recv --iperf2`, `--iperf3`, `--ntttcp`): each event's
/// line (rendered in the engine's report), and with `-J` or `--json-stream` its events and
/// each finished test's document.
pub fn peer_events<T: PeerTest + 'static>(out: PeerOut) -> PeerEventSink<T> {
    Arc::new(move |event: PeerEvent<T>| match &event {
        PeerEvent::Started(start) => out.started(start, T::TOOL),
        PeerEvent::Interval { role, n, figures } => out.interval(*role, *n, figures),
        _ => {
            if let Some(line) = event.render_line() {
                out.log(&line);
            }
            if let PeerEvent::TestDone(test) = &event {
                if out.writes_json() {
                    out.done(test.document(), || test.error());
                }
            }
        }
    })
}

/// Where a peer receiver's output goes, chosen once from its flags.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum PeerOut {
    /// The log lines on stdout (the default).
    Text,
    /// `-J`: one document per finished test, one per line.
    Json,
    /// `--json-stream`: start, interval and end events, one per line.
    JsonStream,
}

impl PeerOut {
    /// The output `recv`'s flags ask for. With JSON on stdout, a reader that goes away stops
    /// the receiver (nothing more can be delivered); any failed write makes the exit 1.
    pub fn of(args: &RecvArgs, stop: &StopToken) -> Self {
        let out = if args.json {
            PeerOut::Json
        } else if args.json_stream {
            PeerOut::JsonStream
        } else {
            PeerOut::Text
        };
        if out != PeerOut::Text {
            Sink::stdout().stop_on_failure(stop);
        }
        out
    }

    /// Whether finished tests are written as documents (`-J`, `--json-stream`).
    pub fn writes_json(&self) -> bool {
        *self != PeerOut::Text
    }

    /// One log line: stdout in text, stderr beside JSON. Reasons and errors may quote what a
    /// peer sent, so control characters are escaped (one line each, whatever it sent).
    pub fn log(&self, line: &str) {
        let line = format!("{}\n", escape_controls(line));
        match self {
            PeerOut::Text => Sink::stdout().text(&line),
            // The log beside a document is for a person: a closed stderr loses only it.
            _ => drop(std::io::stderr().write_all(line.as_bytes())),
        }
    }

    /// A test began: `--json-stream`'s `start`, with `peer` (the tool that sends).
    pub fn started(&self, start: &StartInfo, peer: &str) {
        if *self == PeerOut::JsonStream {
            json_line(&received_start_event(start, peer));
        }
    }

    /// One interval of our side closed: `--json-stream`'s `interval`.
    pub fn interval(&self, role: Role, n: usize, figures: &IntervalFigures) {
        if *self == PeerOut::JsonStream {
            json_line(&received_interval_event(role, n, figures));
        }
    }

    /// A test ended: its document (`-J`) or `end` event (`--json-stream`); a test that ended
    /// before it had a report (`error` says why) as a failed run, `{"complete": false, "error"}`.
    pub fn done(&self, doc: Option<StreamDocument>, error: impl FnOnce() -> String) {
        if *self == PeerOut::Text {
            return;
        }
        let value = match doc {
            Some(doc) => serde_json::to_value(doc),
            None => serde_json::to_value(FailedRun { complete: false, error: error() }),
        };
        let value = match value {
            Ok(v) => v,
            Err(e) => return self.log(&format!("uringbench recv: encoding the test's document: {e}")),
        };
        match self {
            PeerOut::Text => {}
            PeerOut::Json => json_line(&value),
            PeerOut::JsonStream => json_line(&end_event(&value)),
        }
    }
}

/// One JSON value on one line of stdout.
fn json_line(v: &serde_json::Value) {
    Sink::stdout().text(&format!("{v}\n"));
}
