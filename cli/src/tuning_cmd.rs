//! Tuning experiments: `uringbench compare`, `search`, `experiment` and `settings`.

use crate::{
    args::{CompareArgs, ExperimentArgs, SearchArgs, SettingsAction, SettingsArgs, TextOrJson},
    sink::{self, json_text, write_file, Sink},
    xdp_mode,
};
use uringbench::{
    compare::{self, Metric},
    experiment::{self, experiment_document, PeerTool, Plan, Progress},
    iperf2, iperf3_send, ntttcp_send,
    output::SavedResults,
    run_rr, run_send,
    search::{self, SearchPlan, SearchResult},
    settings::{self, Change, Journal},
    Error, Proto, RunFigures, RunRecord, SendOptions, StopToken, Workload, DEFAULT_SEED,
};

use crate::sweep_cmd::write_html;

pub fn compare(args: CompareArgs) -> Result<u8, Error> {
    let mut variants = Vec::new();
    for operand in &args.variants {
        variants.extend(compare::load_operand(operand)?);
    }
    let metrics = if args.metric.is_empty() {
        None
    } else {
        Some(args.metric.iter().map(|m| Metric::parse(m.trim())).collect::<Result<Vec<_>, _>>()?)
    };
    let report = compare::compare(variants, metrics, args.seed.unwrap_or(DEFAULT_SEED))?;
    if let Some(c) = report.verdicts().first() {
        sink::set_headline(c.verdict.clone());
    }
    if let Some(path) = &args.svg {
        write_file(path, &report.chart().to_svg_points())?;
    }
    write_html(args.html.as_deref(), "compare", || SavedResults::Compare(Box::new(report.to_document())))?;
    Sink::stdout().export(crate::plan::text_or_json(args.format, args.json), &report)?;
    Ok(0)
}

pub fn search(args: SearchArgs, stop: StopToken) -> Result<u8, Error> {
    let run_test = xdp_mode::sender(args.engine, args.iface.clone(), xdp_mode::XdpGenArg::Xsk)?;
    let (plan, base) = crate::plan::search_plan(&args, stop)?;
    let (spec, udp, len) = (&plan.spec, plan.spec.proto == Proto::Udp, plan.spec.len);
    let json = args.json || args.format == TextOrJson::Json;
    let out = Sink::stdout();
    out.stop_on_failure(&base.stop);
    if !json {
        out.text(&format!(
            "search: highest rate to {} with {} <= {:.3}%: {} {} B{}, {:.1} s trials, resolution {:.1}%, {} confirmations\n{}\n",
            args.to.target,
            if udp { "loss" } else { "retransmitted bytes" },
            args.loss * 100.0,
            if udp { "UDP" } else { "TCP" },
            len,
            if udp && args.no_gso { " without GSO" } else { "" },
            args.trial.as_secs_f64(),
            args.resolution * 100.0,
            args.confirm,
            SearchResult::STEP_HEADER
        ));
    }
    let mut progress = crate::progress::Progress::estimated("search", expected_trials(&plan));
    let result = search::search(
        &plan,
        |spec| {
            if let Some(cause) = base.stop.cause() {
                return Err(Error::peer(format!("search stopped by {cause} before its answer")));
            }
            let opts = SendOptions { spec: spec.clone(), ..base.clone() };
            run_test(&opts, std::sync::Arc::new(uringbench::Quiet)).map(|r| RunFigures::of_stream(&r.to_document()))
        },
        |step| {
            if !json {
                out.text(&format!("{}\n", SearchResult::step_line(step)));
            }
            progress.step();
        },
    );
    progress.finish();
    let result = result?;
    let text = result.render_text(spec);
    let answer = text.lines().last().unwrap_or_default().to_string();
    sink::set_headline(answer.clone());
    if json {
        out.json_doc(&result.to_document(spec, &args.to.target))?;
    } else {
        out.text(&format!("{answer}\n"));
    }
    let written = out.finish();
    write_html(args.html.as_deref(), "search", || {
        SavedResults::Search(Box::new(result.to_document(spec, &args.to.target)))
    })?;
    let json_file = match &args.json_file {
        Some(path) => write_file(path, &json_text(&result.to_document(spec, &args.to.target))?),
        None => Ok(()),
    };
    written.and(json_file)?;
    Ok(if result.found() { 0 } else { 1 })
}

/// The trials a search is expected to take when its confirmations hold: the unpaced probe
/// (without `--max-rate`) or the top rate, the bisection down to the resolution, and the
/// confirmations. A failed confirmation adds more; the progress line raises its estimate.
fn expected_trials(plan: &SearchPlan) -> usize {
    let halvings = (1.0 / plan.resolution).log2().ceil().max(1.0) as usize;
    1 + halvings + plan.confirm as usize
}

pub fn experiment(args: ExperimentArgs, stop: StopToken) -> Result<u8, Error> {
    let text =
        std::fs::read_to_string(&args.plan).map_err(|e| Error::usage(format!("{}: {e}", args.plan.display())))?;
    let mut plan =
        Plan::parse(&text).map_err(|e| Error { message: format!("{}: {}", args.plan.display(), e.message), ..e })?;
    plan.test.latency |= args.latency;
    // A stop (Ctrl-C, a kill) ends the running test early, reverts and exits 130; a second
    // signal reverts from the signal watcher and exits at once.
    let state = args.state.clone().unwrap_or_else(|| settings::default_state("experiment"));
    let journal =
        settings::register(Journal::create(&state, &format!("uringbench experiment {}", args.plan.display()))?);
    let json = args.json || args.format == TextOrJson::Json;
    let out = Sink::stdout();
    out.stop_on_failure(&stop);
    let say = |line: String| {
        if !json {
            out.text(&format!("{line}\n"));
        }
    };
    say(format!(
        "experiment {}: {} variants x {} runs ({} warm-up run(s) after each change), block order seed {}, state {}",
        args.plan.display(),
        plan.variants.len(),
        plan.runs,
        plan.warmup_runs,
        plan.seed,
        state.display()
    ));
    // Few runs: say before they are made what they can show.
    if (plan.runs as usize) < compare::rank_test_min_runs() {
        say(format!(
            "note: with {} runs a variant the rank test cannot reach p<0.05 (it needs {}); Welch's t on log values judges, assuming roughly log-normal runs",
            plan.runs,
            compare::rank_test_min_runs()
        ));
    }
    // Settings reverted once a stop came: what the interrupted experiment undid.
    let mut reverted_after_stop = 0;
    let runs = plan.runs as usize * plan.variants.len() * (plan.warmup_runs as usize + 1);
    let mut progress = crate::progress::Progress::new("experiment", runs);
    let outcome = experiment::run(
        &plan,
        uringbench::KernelCaps::detect()?,
        &journal,
        &stop,
        |opts| match (plan.peer(), opts.spec.workload) {
            (Some(PeerTool::Iperf2), _) => iperf2::run_send(opts).map(|r| RunRecord::Stream(Box::new(r.to_document()))),
            (Some(PeerTool::Iperf3), _) => iperf3_send(opts).map(|r| RunRecord::Stream(Box::new(r.to_document()))),
            (Some(PeerTool::Ntttcp), _) => ntttcp_send(opts).map(|r| RunRecord::Stream(Box::new(r.to_document()))),
            (None, Workload::Stream) => run_send(opts).map(|r| RunRecord::Stream(Box::new(r.to_document()))),
            (None, Workload::Rr | Workload::Crr) => {
                run_rr(opts).map(|r| RunRecord::Transactions(Box::new(r.to_document())))
            }
        },
        |p| match p {
            Progress::Applied { variant, what } => say(format!("{variant}: {}", what.join("; "))),
            Progress::Run { block, blocks, variant, warmup, doc } => {
                say(format!(
                    "block {block}/{blocks} {variant}{}: {}",
                    if warmup { " (warm-up)" } else { "" },
                    run_summary(doc)
                ));
                progress.step();
            }
            Progress::Reverted { variant, count } => {
                if stop.is_stopped() {
                    reverted_after_stop += count;
                }
                say(format!("{variant}: reverted {count} setting(s)"))
            }
        },
    );
    progress.finish();
    // Whatever happened, nothing may stay changed: the engine reverts; say so if it could not.
    let leftover = journal.lock().unwrap_or_else(|p| p.into_inner()).entries().len();
    if leftover > 0 {
        let revert = journal.lock().unwrap_or_else(|p| p.into_inner()).revert();
        reverted_after_stop += revert?.len();
    }
    if let Some(cause) = stop.cause() {
        eprintln!("uringbench: interrupted: reverted {reverted_after_stop} setting(s) after {cause}");
        return Ok(130);
    }
    let result = outcome?;
    let comparison = compare::compare_experiment(&result, plan.seed)?;
    let doc = experiment_document(&result, Some(&comparison));
    if let Some(c) = comparison.verdicts().first() {
        sink::set_headline(c.verdict.clone());
    }
    if json {
        out.json_doc(&doc)?;
    } else {
        let mut text = String::from("\nsettings per variant:\n");
        for v in &result.variants {
            let mut what = v.applied.clone();
            if let Some(r) = &v.receiver {
                what.push(format!("receiver variant {r}"));
            }
            let what = if what.is_empty() { "as the host was".into() } else { what.join("; ") };
            text += &format!("  {}: {what}\n", v.name);
        }
        out.text(&format!("{text}\n{}", comparison.render_text()));
    }
    // Every file is tried, each in place or not there at all; the first failure is the error.
    let written = out.finish();
    let json_file = args.json_file.as_ref().map_or(Ok(()), |path| write_file(path, &json_text(&doc)?));
    let svg = args.svg.as_ref().map_or(Ok(()), |path| write_file(path, &comparison.chart().to_svg_points()));
    let html = write_html(args.html.as_deref(), "experiment", || SavedResults::Experiment(Box::new(doc.clone())));
    written.and(json_file).and(svg).and(html)?;
    let incomplete =
        result.variants.iter().flat_map(|v| &v.runs).filter(|r| !RunFigures::of_record(r).complete).count();
    if incomplete > 0 {
        eprintln!("uringbench: {incomplete} run(s) were incomplete (left out of the comparison)");
        return Ok(1);
    }
    Ok(0)
}

/// One run in a progress line.
fn run_summary(doc: &RunRecord) -> String {
    let run = RunFigures::of_record(doc);
    let mut parts = Vec::new();
    for m in compare::ALL_METRICS {
        if let Some(v) = m.of_run(&run) {
            parts.push(format!("{} {}", if v >= 100.0 { format!("{v:.0}") } else { format!("{v:.3}") }, m.title()));
        }
    }
    if !run.complete {
        let why = run.error.as_deref().unwrap_or("?");
        parts.push(if parts.is_empty() { format!("failed: {why}") } else { format!("incomplete: {why}") });
    }
    parts.join(", ")
}

pub fn settings(args: SettingsArgs) -> Result<u8, Error> {
    if args.action != SettingsAction::Apply && !args.changes.is_empty() {
        return Err(Error::usage("only apply takes changes"));
    }
    match args.action {
        SettingsAction::Apply => {
            if args.changes.is_empty() {
                return Err(Error::usage("apply: no change given (e.g. sysctl:net.core.rmem_max=67108864)"));
            }
            let changes: Vec<Change> = args.changes.iter().map(|c| Change::parse(c)).collect::<Result<_, _>>()?;
            let mut journal = Journal::append_to(&args.state, "uringbench settings")?;
            for change in &changes {
                match journal.apply(change) {
                    Ok(Some(what)) => Sink::stdout().text(&format!("  {what}\n")),
                    Ok(None) => Sink::stdout().text(&format!("  {} (already so)\n", change.describe())),
                    // What was applied before the failure stays applied: say so, and how to undo it.
                    Err(mut e) if !journal.entries().is_empty() => {
                        let state = args.state.display();
                        e.message = format!(
                            "{}; {} earlier change(s) stay applied, recorded in {state} (undo: uringbench settings revert --state {state})",
                            e.message,
                            journal.entries().len()
                        );
                        return Err(e);
                    }
                    Err(e) => return Err(e),
                }
            }
            Ok(0)
        }
        SettingsAction::Revert => {
            let mut journal = Journal::open(&args.state)?;
            Sink::stdout().text(&format!(
                "restoring {} setting(s) from {}\n",
                journal.entries().len(),
                args.state.display()
            ));
            let done = journal.revert();
            match done {
                Ok(done) => {
                    for d in done {
                        Sink::stdout().text(&format!("  {d}\n"));
                    }
                    Sink::stdout().text(&format!("reverted; {} removed\n", args.state.display()));
                    Ok(0)
                }
                Err(e) => Err(e),
            }
        }
        SettingsAction::Show => {
            let journal = Journal::open(&args.state)?;
            for e in journal.entries() {
                Sink::stdout().text(&format!("{}\t{}\t{}\n", e.kind, e.key, e.previous));
            }
            Ok(0)
        }
    }
}
