//! `uringbench sweep` (a series of stream tests with a chart) and `uringbench report`
//! (re-renders saved results).

use crate::{
    args::{Format, ReportArgs, SweepArgs},
    sink::{self, json_text, write_file, Sink},
};
use std::path::Path;
use uringbench::{
    fleet::{self, FleetReport},
    output::SavedResults,
    sweep, Error, StopToken,
};

/// Writes the files asked for (`--csv`, `--svg`, `--json-file`, `--html`) from the results so far.
fn save(args: &SweepArgs, result: &sweep::SweepResult) -> Result<(), Error> {
    if let Some(path) = &args.csv {
        write_file(path, &result.to_csv())?;
    }
    if let Some(path) = &args.svg {
        write_file(path, &result.chart().to_svg())?;
    }
    if let Some(path) = &args.json_file {
        write_file(path, &json_text(&result.to_document())?)?;
    }
    write_html(args.html.as_deref(), "sweep", || SavedResults::Sweep(Box::new(result.clone())))
}

/// `--html OUT.html` of every command that has it: the page `report --html` draws from the same
/// document, built only when a page is asked for.
pub(crate) fn write_html(path: Option<&Path>, name: &str, saved: impl FnOnce() -> SavedResults) -> Result<(), Error> {
    match path {
        Some(path) => write_file(path, &uringbench::output::html_page(&[(name.to_owned(), saved())])?),
        None => Ok(()),
    }
}

pub fn sweep(args: SweepArgs, stop: StopToken) -> Result<u8, Error> {
    let plan = crate::plan::sweep_plan(&args, stop)?;
    let format = if args.json { Format::Json } else { args.format };
    let text = format == Format::Text;
    // The files are rewritten after every run, so a sweep stopped half-way (Ctrl-C, a lost
    // VM) still leaves every finished run on disk.
    let mut save_error: Option<Error> = None;
    let out = Sink::stdout();
    out.stop_on_failure(&plan.base.stop);
    let mut progress = crate::progress::Progress::new("sweep", plan.values.len() * plan.repeat as usize);
    // A stop ends the running test early and the sweep after it.
    let result = sweep::run(
        &plan,
        |r| r.to_document(),
        |done| {
            let line = uringbench::sweep::run_line(plan.param, done.label, plan.repeat, done.figures);
            if text {
                out.text(&format!("{line}\n"));
            }
            sink::set_headline(format!("last run: {}", line.trim()));
            if save_error.is_none() {
                save_error = save(&args, done.sweep).err();
            }
            progress.step();
        },
    )?;
    if let Some(e) = save_error {
        return Err(e);
    }
    out.export(format.into(), &result)?;
    out.finish()?;
    if let Some(cause) = plan.base.stop.cause() {
        eprintln!("uringbench: sweep stopped by {cause}; the runs so far are reported and saved");
        return Ok(1);
    }
    if !result.complete() {
        eprintln!("uringbench: some runs were incomplete (see the table or the runs' errors)");
        return Ok(1);
    }
    Ok(0)
}

pub fn report(args: ReportArgs) -> Result<u8, Error> {
    if let Some(dir) = &args.fleet {
        return fleet_report(dir, &args);
    }
    let mut saved = Vec::with_capacity(args.files.len());
    for file in &args.files {
        let text = std::fs::read_to_string(file).map_err(|e| Error::usage(format!("{}: {e}", file.display())))?;
        let doc = SavedResults::parse(&text).map_err(|e| Error::usage(format!("{}: {}", file.display(), e.message)))?;
        saved.push((file.display().to_string(), doc));
    }
    // Every refusal comes before any file is written.
    let several = saved.len() > 1;
    if several && (args.html.is_none() || args.svg.is_some() || args.csv.is_some()) {
        return Err(Error::usage("several documents go on one page: give --html OUT.html (and no --svg/--csv)"));
    }
    let Some((_, first)) = saved.first() else {
        return Err(Error::usage("give a saved document, or --fleet DIR"));
    };
    if args.csv.is_some() && !matches!(first, SavedResults::Sweep(_)) {
        return Err(Error::usage("--csv applies to sweeps; `send --format csv` writes a test's CSV"));
    }
    // Each file written is named, as `report --fleet` names its files.
    let mut written = Vec::new();
    if let Some(path) = &args.html {
        write_file(path, &uringbench::output::html_page(&saved)?)?;
        written.push(path.display().to_string());
        if several {
            Sink::stdout().text(&format!("wrote {}\n", path.display()));
            return Ok(0);
        }
    }
    if let Some(path) = &args.svg {
        write_file(path, &first.chart()?.to_svg())?;
        written.push(path.display().to_string());
    }
    if let (Some(path), SavedResults::Sweep(s)) = (&args.csv, first) {
        write_file(path, &s.to_csv())?;
        written.push(path.display().to_string());
    }
    Sink::stdout().text(&first.render_text());
    if !written.is_empty() {
        Sink::stdout().text(&format!("wrote {}\n", written.join(", ")));
    }
    Ok(0)
}

/// `report --fleet DIR`: the merged tables on stdout, the merged files in the folder, and
/// exit 1 when a planned run failed (the text lists them).
fn fleet_report(dir: &Path, args: &ReportArgs) -> Result<u8, Error> {
    let mut asked: Vec<String> = args.by.iter().map(|a| a.trim().to_string()).filter(|a| !a.is_empty()).collect();
    asked.dedup();
    let mut progress: Option<crate::progress::Progress> = None;
    let report = FleetReport::load_reporting(dir, (!asked.is_empty()).then_some(asked.as_slice()), &mut |_, n| {
        progress.get_or_insert_with(|| crate::progress::Progress::frequent("report --fleet", "record", n)).step()
    })?;
    if let Some(p) = &progress {
        p.finish();
    }
    let out_dir = args.out.as_deref().unwrap_or(dir);
    std::fs::create_dir_all(out_dir).map_err(|e| Error::io(format!("creating {}", out_dir.display()), e))?;
    // Each file streamed from the rows: a million runs' files are never strings in memory.
    let mut written = vec![out_dir.join("fleet.json"), out_dir.join("fleet.csv"), out_dir.join("heatmap.svg")];
    sink::write_file_with(&written[0], |w| report.write_document(w))?;
    sink::write_file_with(&written[1], |w| {
        let mut text = fleet::FmtIo::new(w);
        let _ = fleet::csv::write_csv(&report, &mut text);
        text.finish().map(drop)
    })?;
    sink::write_file_with(&written[2], |w| {
        let mut text = fleet::FmtIo::new(w);
        let _ = fleet::heatmap::write_svg(&report, &mut text);
        text.finish().map(drop)
    })?;
    for attr in report.summaries.iter().map(|s| &s.attribute).filter(|a| *a != "address" && *a != "entry") {
        let name: String = attr.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect();
        let path = out_dir.join(format!("by-{name}.svg"));
        write_file(&path, &report.attribute_chart(attr).to_svg())?;
        written.push(path);
    }
    if let Some(path) = &args.html {
        write_html(Some(path), "fleet", || SavedResults::Fleet(Box::new(report.clone())))?;
        written.push(path.clone());
    }
    let names: Vec<String> = written.iter().map(|p| p.display().to_string()).collect();
    let mut text = fleet::FmtIo::new(std::io::BufWriter::with_capacity(1 << 16, StdoutText));
    let _ = report.write_text(&mut text);
    let _ = text.finish();
    Sink::stdout().text(&format!("\nwrote {}\n", names.join(", ")));
    let failed = report.failed().len();
    if failed > 0 {
        eprintln!("uringbench: {failed} of {} planned runs failed (listed above)", report.runs.len());
        return Ok(1);
    }
    Ok(0)
}

/// The process's stdout as an `io::Write` for text made piece by piece (its sink keeps the
/// first error).
struct StdoutText;

impl std::io::Write for StdoutText {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        Sink::stdout().write(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
