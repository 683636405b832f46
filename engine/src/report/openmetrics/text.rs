//! The OpenMetrics text format (version 1.0.0), as much of it as `recv --metrics` writes:
//! metric families with their type and help, samples with escaped label values, `# EOF`.

use std::fmt::{Display, Write};

/// The content type a scrape is answered with.
pub(crate) const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// An exposition being written: each family's metadata, then its samples.
#[derive(Debug, Default)]
pub(super) struct Exposition {
    out: String,
}

impl Exposition {
    /// Starts a family: `name` without a counter's `_total` or an info's `_info`.
    pub(super) fn family(&mut self, name: &str, kind: &str, help: &str) {
        let _ = writeln!(self.out, "# TYPE {name} {kind}");
        let _ = writeln!(self.out, "# HELP {name} {}", escape(help, false));
    }

    /// One sample of the family begun last. A value is a count or a finite number (Rust's
    /// shortest representation that reads back as the same f64).
    pub(super) fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: impl Display) {
        self.out.push_str(name);
        if !labels.is_empty() {
            self.out.push('{');
            for (i, (key, val)) in labels.iter().enumerate() {
                if i > 0 {
                    self.out.push(',');
                }
                let _ = write!(self.out, "{key}=\"{}\"", escape(val, true));
            }
            self.out.push('}');
        }
        let _ = writeln!(self.out, " {value}");
    }

    pub(super) fn finish(mut self) -> String {
        self.out.push_str("# EOF\n");
        self.out
    }
}

/// Backslash and newline escaped, and in a label value the double quote too.
fn escape(s: &str, label: bool) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '"' if label => out.push_str("\\\""),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_samples_and_escapes_are_written_as_openmetrics_says() {
        let mut x = Exposition::default();
        x.family("demo", "counter", "A \\ help\nline.");
        x.sample("demo_total", &[("a", "x\"y\\z\nw"), ("b", "2")], 7u64);
        x.family("g", "gauge", "G.");
        x.sample("g", &[], 0.1f64);
        x.sample("g", &[], 2.5e10f64);
        assert_eq!(
            x.finish(),
            "# TYPE demo counter\n# HELP demo A \\\\ help\\nline.\n\
             demo_total{a=\"x\\\"y\\\\z\\nw\",b=\"2\"} 7\n\
             # TYPE g gauge\n# HELP g G.\ng 0.1\ng 25000000000\n# EOF\n"
        );
    }
}
