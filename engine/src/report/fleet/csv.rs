//! The merged fleet data as CSV: one row per planned run, failed ones included, with both
//! hosts' facts as `sender_NAME` / `receiver_NAME` columns (the union of the facts reported).

use super::{FleetReport, FleetRun};
use crate::report::sweep::{csv_field, opt, opt_bps};

/// The fixed columns; the fact columns follow them.
pub(crate) const FLEET_CSV_COLUMNS: &str = "id,entry,sender,receiver,address,target,repeat,complete,exact,receiver_bits_per_second,sender_bits_per_second,cpu_seconds_per_gb,sender_total_bytes,receiver_total_bytes,verdict,error";

fn fact_names(runs: &[FleetRun], pick: fn(&FleetRun) -> &super::Facts) -> Vec<String> {
    // Each host's facts once (runs share them): the names of a thousand hosts, not of a
    // million runs.
    let mut seen = std::collections::HashSet::new();
    let mut names: Vec<String> = runs
        .iter()
        .map(pick)
        .filter(|f| seen.insert(std::sync::Arc::as_ptr(f)))
        .flat_map(|f| f.keys().cloned())
        .collect();
    names.sort();
    names.dedup();
    names
}

pub fn to_csv(report: &FleetReport) -> String {
    let mut out = String::new();
    let _ = write_csv(report, &mut out);
    out
}

/// [`to_csv`] written a row at a time (`report --fleet` writes it into the file as it goes).
pub fn write_csv(report: &FleetReport, out: &mut dyn std::fmt::Write) -> std::fmt::Result {
    let sender = fact_names(&report.runs, |r| &r.sender_facts);
    let receiver = fact_names(&report.runs, |r| &r.receiver_facts);
    out.write_str(FLEET_CSV_COLUMNS)?;
    for n in &sender {
        write!(out, ",sender_{}", csv_field(n))?;
    }
    for n in &receiver {
        write!(out, ",receiver_{}", csv_field(n))?;
    }
    out.write_char('\n')?;
    let num = |v: Option<u64>| v.map_or(String::new(), |v| v.to_string());
    for r in &report.runs {
        write!(
            out,
            "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}",
            csv_field(&r.id),
            csv_field(&r.entry),
            csv_field(&r.sender),
            csv_field(&r.receiver),
            csv_field(&r.address),
            csv_field(r.target.as_deref().unwrap_or("")),
            r.repeat,
            !r.failed(),
            r.exact.map_or(String::new(), |e| e.to_string()),
            opt_bps(r.figures.receiver_bits_per_second),
            opt_bps(r.figures.sender_bits_per_second),
            opt(r.figures.cpu_seconds_per_gb),
            num(r.sender_total_bytes),
            num(r.receiver_total_bytes),
            csv_field(r.figures.verdict.as_deref().unwrap_or("")),
            csv_field(r.figures.error.as_deref().unwrap_or(""))
        )?;
        for (names, facts) in [(&sender, &r.sender_facts), (&receiver, &r.receiver_facts)] {
            for n in names {
                write!(out, ",{}", csv_field(&facts.get(n).and_then(super::fact_text).unwrap_or_default()))?;
            }
        }
        out.write_char('\n')?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::tests::plan_and_records;
    use super::*;

    #[test]
    fn one_row_per_planned_run_with_fact_columns() {
        let (plan, records) = plan_and_records();
        let report = FleetReport::merge(&plan, &records, None).unwrap();
        let csv = to_csv(&report);
        let lines: Vec<&str> = csv.lines().collect();
        assert_eq!(lines.len(), 25, "header and 24 runs");
        let header: Vec<&str> = lines[0].split(',').collect();
        assert!(lines[0].starts_with(FLEET_CSV_COLUMNS));
        assert!(header.contains(&"sender_vcpus") && header.contains(&"receiver_machine_type"), "{}", lines[0]);
        let cols = header.len();
        for l in &lines[1..] {
            if !l.contains('"') {
                assert_eq!(l.split(',').count(), cols, "{l}");
            }
        }
        let first: Vec<&str> = lines[1].split(',').collect();
        assert_eq!(&first[..9], ["0001", "mesh", "h1", "h2", "internal", "10.0.0.2", "1", "true", "true"]);
        assert_eq!(first[9], "11000000000");
        assert!(csv.contains("no result was collected"));
    }
}
