//! How doctor's findings are shown: the text (checks by family, a fix under each one that is
//! not passing, the tally) and the `doctor -J` document. The checks and their facts are
//! doctor/'s.

use crate::doctor::{Check, DoctorReport, Status, Tally, TargetFacts};
use crate::metrics::document::{Kind, Tool, SCHEMA_VERSION};
use crate::sys::hostinfo::Cloud;
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;

/// `doctor -J`: the host, the interface examined, the target, every check and the tally.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct DoctorDocument {
    /// `doctor` (documents written before `kind` existed have none).
    #[serde(default = "doctor_kind")]
    pub kind: Kind,
    pub schema_version: u32,
    pub tool: Tool,
    pub host: DoctorHost,
    pub interface: DoctorInterface,
    /// With `--target`: how it answered; null otherwise.
    pub target: Option<TargetFacts>,
    /// One per check, in the text's order.
    pub checks: Vec<Check>,
    pub summary: Tally,
    /// 1 when a check failed, else 0 (also the process's exit code).
    pub exit_code: u8,
}

fn doctor_kind() -> Kind {
    Kind::Doctor
}

/// The host doctor ran on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct DoctorHost {
    pub kernel_release: String,
    /// Online CPUs.
    pub cpus: u32,
    /// The cloud DMI names, or null.
    pub cloud: Option<Cloud>,
}

/// The interface examined and why that one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct DoctorInterface {
    pub name: Option<String>,
    /// `--iface`, `route to ADDR`, `default route`, ...
    pub chosen_by: String,
    pub driver: Option<String>,
}

impl DoctorReport {
    /// The document docs/output.md describes (what `doctor -J` writes).
    pub fn to_document(&self) -> DoctorDocument {
        DoctorDocument {
            kind: Kind::Doctor,
            schema_version: SCHEMA_VERSION,
            tool: Tool::this(),
            host: DoctorHost { kernel_release: self.kernel_release.clone(), cpus: self.cpus, cloud: self.cloud },
            interface: DoctorInterface {
                name: self.iface.clone(),
                chosen_by: self.iface_reason.clone(),
                driver: self.driver.clone(),
            },
            target: self.target.clone(),
            checks: self.checks.clone(),
            summary: self.tally(),
            exit_code: self.exit_code(),
        }
    }

    pub fn to_json(&self) -> serde_json::Value {
        serde_json::to_value(self.to_document()).unwrap_or(serde_json::Value::Null)
    }

    /// Human output: checks grouped by family, a fix under each non-passing one, a tally.
    /// `color` adds ANSI colours to the status labels (for terminals).
    pub fn render_text(&self, color: bool) -> String {
        let mut out = String::new();
        let iface = match (&self.iface, &self.driver) {
            (Some(i), Some(d)) => format!("{i} ({d}, {})", self.iface_reason),
            (Some(i), None) => format!("{i} ({})", self.iface_reason),
            _ => "none".into(),
        };
        let _ = writeln!(
            out,
            "uringbench doctor: Linux {}, {} CPUs{}, interface {iface}{}",
            self.kernel_release,
            self.cpus,
            self.cloud.map(|c| format!(", cloud {}", c.key())).unwrap_or_default(),
            self.target
                .as_ref()
                .map(|t| if t.host == t.addr.to_string() {
                    format!(", target {}", t.host)
                } else {
                    format!(", target {} ({})", t.host, t.addr)
                })
                .unwrap_or_default()
        );
        let mut family = "";
        for c in &self.checks {
            if c.family() != family {
                family = c.family();
                let _ = writeln!(out, "\n{family}");
            }
            write_check(&mut out, c, color);
        }
        let t = self.tally();
        let warnings = if t.warn == 1 { "warning" } else { "warnings" };
        let _ = writeln!(out, "\n{} passed, {} {warnings}, {} failed, {} skipped", t.pass, t.warn, t.fail, t.skip);
        out
    }
}

/// One check: its status label, name and summary, and its fix below.
fn write_check(out: &mut String, c: &Check, color: bool) {
    // A failure shouts; the ANSI colour of each status for terminals.
    let (label, code) = match c.status {
        Status::Pass => ("pass", "32"),
        Status::Warn => ("warn", "33"),
        Status::Fail => ("FAIL", "1;31"),
        Status::Skip => ("skip", "2"),
    };
    let label = if color { format!("\x1b[{code}m{label:<4}\x1b[0m") } else { format!("{label:<4}") };
    let name = c.id.split_once('.').map_or(c.id.as_str(), |(_, n)| n);
    let _ = writeln!(out, "  {label}  {name:<18} {}", c.summary);
    if let Some(fix) = &c.fix {
        for (i, line) in fix.lines().enumerate() {
            let _ = writeln!(out, "  {:<4}  {:<18} {} {line}", "", "", if i == 0 { "fix:" } else { "    " });
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::doctor::{testctx, Check, Status};

    #[test]
    fn text_and_document() {
        let mut report = testctx::veth_report();
        let text = report.render_text(false);
        assert!(text.contains("interface uoda0 (veth, --iface)"), "{text}");
        assert!(text.contains("\nnic\n"), "{text}");
        assert!(!text.contains('\x1b'), "no colour unless asked");
        assert!(report.render_text(true).contains("\x1b[32mpass"), "colour for terminals");
        report.checks.push(Check::fail("x.y", "broken").fix("mend it"));
        let doc = report.to_document();
        assert_eq!(
            doc.summary.fail,
            1 + report.checks[..report.checks.len() - 1].iter().filter(|c| c.status == Status::Fail).count()
        );
        assert_eq!(doc.checks.last().unwrap().fix.as_deref(), Some("mend it"));
        assert_eq!(doc.interface.driver.as_deref(), Some("veth"));
        assert_eq!(doc.exit_code, 1);
        assert!(report.render_text(false).contains("fix: mend it"));
        let json = report.to_json();
        assert_eq!(json["kind"], "doctor");
        assert_eq!(serde_json::from_value::<super::DoctorDocument>(json).unwrap(), doc, "the document reads back");
    }
}
