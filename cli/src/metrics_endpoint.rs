//! `recv --metrics ADDR:PORT`: the OpenMetrics endpoint started beside the receiver, its
//! exporter handed to the receiver as the tally every test ends in.

use crate::args::RecvArgs;
use std::io::Write;
use std::sync::Arc;
use uringbench::openmetrics::{self, MetricsExporter, Tally};
use uringbench::{escape_controls, Error, StopToken};

/// Binds and starts the endpoint when `--metrics` asks for it; the tally for the receiver.
pub(crate) fn start(args: &RecvArgs, stop: &StopToken) -> Result<Option<Tally>, Error> {
    let Some(addr) = args.metrics else { return Ok(None) };
    if args.peer().is_tool() {
        return Err(Error::usage(
            "--metrics serves uringbench senders' tests: not yet with --iperf2, --iperf3 or --ntttcp (docs/metrics.md)",
        ));
    }
    let listener = openmetrics::bind(addr)?;
    let bound = listener.local_addr().map_err(|e| Error::io("reading the metrics address", e))?;
    let exporter = Arc::new(MetricsExporter::new(args.metrics_senders as usize));
    let log: openmetrics::MetricsLog = Arc::new(|line: String| {
        // Reasons may quote what a peer sent: one line each, whatever it sent.
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "uringbench recv: {}", escape_controls(&line));
        let _ = out.flush();
    });
    // The endpoint's thread ends with the stop token; the process ends with the receiver.
    let _thread = openmetrics::start(listener, Arc::clone(&exporter), stop.clone(), Arc::clone(&log))?;
    log(format!("metrics on http://{bound}/metrics"));
    Ok(Some(Tally(exporter)))
}
