//! Where a series of runs stands (sweep, search, experiment, `send --repeat`, the records
//! `report --fleet` reads): "run k of N, elapsed, about M left" on stderr after each step, rewritten in place on a terminal and one line per step
//! otherwise (a log, CI). Written here rather than with `indicatif`: a series moves once per
//! run (seconds apart), so a bar redrawn on a timer would add nothing, and the one line a pipe
//! needs is the same text either way.

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

pub struct Progress {
    what: &'static str,
    total: usize,
    done: usize,
    started: Instant,
    terminal: bool,
    /// The total is an estimate (a search's trials): said "about N", raised when passed.
    estimated: bool,
    /// What one step is ("run", "record").
    unit: &'static str,
    /// Steps milliseconds apart (a fleet's records) are said at most this often, and the last.
    every: Option<Duration>,
    said: Option<Instant>,
}

impl Progress {
    pub fn new(what: &'static str, total: usize) -> Self {
        Self {
            what,
            total,
            done: 0,
            started: Instant::now(),
            terminal: std::io::stderr().is_terminal(),
            estimated: false,
            unit: "run",
            every: None,
            said: None,
        }
    }

    /// A series of many quick steps (`report --fleet` reading a million records): one line a
    /// second at most, and one for the last step unless the whole series took under a second.
    pub fn frequent(what: &'static str, unit: &'static str, total: usize) -> Self {
        // The first line comes a second in, when the rate behind "about M left" means something.
        let started = Instant::now();
        Self { unit, every: Some(Duration::from_secs(1)), said: Some(started), started, ..Self::new(what, total) }
    }

    /// A series whose length is known only roughly before it runs (a search bisects until it
    /// converges, and a failed confirmation sends it back down).
    pub fn estimated(what: &'static str, total: usize) -> Self {
        Self { estimated: true, ..Self::new(what, total) }
    }

    /// One more run finished.
    pub fn step(&mut self) {
        self.done += 1;
        if self.estimated {
            self.total = self.total.max(self.done);
        } else {
            self.done = self.done.min(self.total);
        }
        if let (Some(every), Some(said)) = (self.every, self.said) {
            // A read over within the first second says nothing at all: a line then would only
            // sit above the result (or an error's one line).
            let quiet_so_far = said == self.started;
            if said.elapsed() < every && (self.done < self.total || quiet_so_far) {
                return;
            }
        }
        self.said = Some(Instant::now());
        let mut line = line(self.what, self.unit, self.done, self.total, self.started.elapsed());
        if self.estimated {
            line = line.replacen(" of ", " of about ", 1);
        }
        let mut err = std::io::stderr().lock();
        let _ = if self.terminal {
            write!(err, "\r{line}\x1b[K{}", if self.done == self.total { "\n" } else { "" })
        } else {
            writeln!(err, "{line}")
        };
        let _ = err.flush();
    }

    /// The series ended, maybe before its estimate: a terminal's line is closed.
    pub fn finish(&self) {
        if self.terminal && self.done < self.total && self.done > 0 {
            eprintln!();
        }
    }
}

/// "sweep: run 2 of 8, 21 s elapsed, about 1 min 3 s left".
fn line(what: &str, unit: &str, done: usize, total: usize, elapsed: Duration) -> String {
    let per_run = elapsed.as_secs_f64() / done.max(1) as f64;
    let left = per_run * total.saturating_sub(done) as f64;
    format!("{what}: {unit} {done} of {total}, {} elapsed, about {} left", span(elapsed.as_secs_f64()), span(left))
}

fn span(secs: f64) -> String {
    let s = secs.round() as u64;
    if s >= 60 {
        format!("{} min {} s", s / 60, s % 60)
    } else {
        format!("{s} s")
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_line_says_where_the_series_stands() {
        let l = super::line("sweep", "run", 2, 8, std::time::Duration::from_secs(21));
        assert_eq!(l, "sweep: run 2 of 8, 21 s elapsed, about 1 min 3 s left");
        assert!(super::line("sweep", "run", 8, 8, std::time::Duration::from_secs(5)).ends_with("about 0 s left"));
    }

    #[test]
    fn an_estimate_is_raised_when_the_series_runs_past_it() {
        let mut p = super::Progress::estimated("search", 2);
        for _ in 0..3 {
            p.step();
        }
        assert_eq!((p.done, p.total), (3, 3), "a third trial raises the estimate");
        let mut exact = super::Progress::new("sweep", 2);
        for _ in 0..3 {
            exact.step();
        }
        assert_eq!((exact.done, exact.total), (2, 2), "an exact total is never passed");
    }

    #[test]
    fn frequent_steps_are_said_a_second_apart_and_at_the_end() {
        let mut p = super::Progress::frequent("report --fleet", "record", 1000);
        let first = p.said.expect("the clock starts with the series");
        for _ in 0..999 {
            p.step();
        }
        assert_eq!(p.said, Some(first), "steps within the second are not said");
        p.step();
        assert_eq!(p.said, Some(first), "a series over within a second says nothing, not even its end");
        assert_eq!(p.done, 1000);

        let mut slow = super::Progress::frequent("report --fleet", "record", 2);
        let long_ago = std::time::Instant::now() - std::time::Duration::from_secs(2);
        (slow.started, slow.said) = (long_ago, Some(long_ago));
        slow.step();
        assert!(slow.said.unwrap() > long_ago, "a step a second after the last line is said");
        let said = slow.said;
        slow.step();
        assert!(slow.said > said, "the last step of a series that took seconds is said");
    }
}
