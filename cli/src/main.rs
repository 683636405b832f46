//! `uringbench`: parses the command line, calls the engine, prints. Nothing else lives here.

mod args;
mod doctor_cmd;
mod iperf2_mode;
mod iperf3_mode;
mod iperf_cli;
mod knobs;
mod live_out;
mod metrics_endpoint;
mod peer_out;
mod plan;
mod progress;
mod recv_cmd;
mod send_cmd;
mod shipped;
mod sink;
mod sweep_cmd;
mod target;
mod tuning_cmd;
mod xdp_mode;

use args::*;
use clap::Parser;
use sink::Sink;
use std::{process::ExitCode, time::Duration};
use uringbench::{units, Error, StopToken, Workload};

/// `-s -D`: the receiver in the background, in a process group of its own so the terminal's
/// Ctrl-C does not reach it, its output discarded; prints its process id.
fn daemon(t: &iperf_cli::Translation) -> ExitCode {
    use std::{os::unix::process::CommandExt, process::Stdio};
    let spawned = std::env::current_exe().and_then(|exe| {
        std::process::Command::new(exe)
            .args(&t.argv[1..])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
    });
    let mut child = match spawned {
        Ok(c) => c,
        Err(e) => {
            eprintln!("uringbench: starting the receiver in the background: {e}");
            return ExitCode::from(1);
        }
    };
    // A receiver that cannot listen (port taken, bad flag) exits at once: say so here.
    std::thread::sleep(std::time::Duration::from_millis(300));
    if let Ok(Some(status)) = child.try_wait() {
        eprintln!("uringbench: the background receiver exited at once ({status}); run it without -D to see why");
        return ExitCode::from(1);
    }
    Sink::stdout().text(&format!("{}: in the background, process {}\n", t.ran_as(), child.id()));
    match Sink::stdout().finish() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("uringbench: {e}");
            ExitCode::from(1)
        }
    }
}

fn main() -> ExitCode {
    // Where this process's output begins, should stdout be a file to cut back on a failed write.
    let _ = Sink::stdout();
    let argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let text: Vec<String> = argv.iter().map(|a| a.to_string_lossy().into_owned()).collect();
    let iperf = match iperf_cli::translate(&text) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("uringbench: {e}");
            return ExitCode::from(2);
        }
    };
    let parsed = match &iperf {
        Some(t) => Cli::try_parse_from(&t.argv),
        None => Cli::try_parse_from(argv),
    };
    let mut cli = match parsed {
        Ok(cli) => cli,
        Err(e) => {
            use clap::error::ErrorKind;
            if matches!(
                e.kind(),
                ErrorKind::DisplayHelp
                    | ErrorKind::DisplayVersion
                    | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
            ) {
                let _ = e.print();
                return ExitCode::from(if e.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
                    2
                } else {
                    0
                });
            }
            // One line, as every other error: clap's message up to its usage block.
            let text = e.to_string();
            let message: Vec<&str> = text
                .lines()
                .map(str::trim)
                .take_while(|l| {
                    !l.starts_with("Usage:") && !l.starts_with("tip:") && !l.starts_with("For more information")
                })
                .filter(|l| !l.is_empty())
                .collect();
            // `send` without -c: name the flag as users type it.
            let message = message.join(" ").replace("--target <TARGET>", "-c HOST");
            eprintln!("uringbench: {} (see --help)", message.trim_start_matches("error: "));
            return ExitCode::from(2);
        }
    };
    if let Err(e) = target::normalize(&mut cli) {
        eprintln!("uringbench: {e}");
        return ExitCode::from(e.exit_code() as u8);
    }
    if let Some(t) = &iperf {
        if t.daemon {
            return daemon(t);
        }
        // Which native command ran, where it cannot spoil a JSON or CSV document.
        if t.machine_output() {
            eprintln!("{}", t.ran_as());
        } else {
            Sink::stdout().text(&format!("{}\n", t.ran_as()));
        }
    }
    // Commands that run tests end them early on a signal, with what they measured; the
    // others keep the default action (a Ctrl-C on `doctor` ends it at once).
    let runs_tests = matches!(
        cli.command,
        Command::Recv(_)
            | Command::Send(_)
            | Command::Http(_)
            | Command::Rr(_)
            | Command::Crr(_)
            | Command::Sweep(_)
            | Command::Search(_)
            | Command::Experiment(_)
    );
    let stop = if runs_tests {
        match stop_on_signals() {
            Ok(stop) => stop,
            Err(e) => {
                eprintln!("uringbench: {e}");
                return ExitCode::from(e.exit_code() as u8);
            }
        }
    } else {
        StopToken::new()
    };
    let result = match cli.command {
        Command::Recv(args) => recv_cmd::recv(args, stop),
        Command::Send(args) => send_cmd::send(args, stop),
        Command::Http(args) => send_cmd::http(args, stop),
        Command::Rr(args) => send_cmd::rr(args, Workload::Rr, stop),
        Command::Crr(args) => send_cmd::rr(args, Workload::Crr, stop),
        Command::Doctor(args) => doctor_cmd::doctor(args),
        Command::Sweep(args) => sweep_cmd::sweep(args, stop),
        Command::Report(args) => sweep_cmd::report(args),
        Command::Compare(args) => tuning_cmd::compare(args),
        Command::Search(args) => tuning_cmd::search(args, stop),
        Command::Experiment(args) => tuning_cmd::experiment(args, stop),
        Command::Settings(args) => tuning_cmd::settings(args),
        Command::Completions { shell } => shipped::completions(shell),
        Command::Man { command } => shipped::man(command.as_deref()),
    };
    // Stdout is completed whatever the command did: a failed write there is an error too.
    let result = result.and_then(|code| Sink::stdout().finish().map(|()| code));
    match result {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            // The result measured is not lost when its output could not be written.
            if let Some(headline) = sink::take_headline() {
                eprintln!("uringbench: result: {headline}");
            }
            eprintln!("uringbench: {e}");
            ExitCode::from(e.exit_code() as u8)
        }
    }
}

/// How long after the first stop signal another one forces an exit. A shorter gap is the same
/// stop delivered twice: GNU `timeout` and a terminal signal the process and then its process
/// group, microseconds apart.
const FORCE_EXIT_AFTER: Duration = Duration::from_millis(500);

/// Maps the stop signals (SIGINT, SIGTERM, SIGHUP, SIGQUIT) onto a new stop token: the first one
/// stops it, so the running test ends early with its report; another one at least
/// [`FORCE_EXIT_AFTER`] later reverts every setting still applied and exits at once. Call it
/// before any other thread exists (the signals are blocked here, and so in every later thread).
fn stop_on_signals() -> Result<StopToken, Error> {
    let signals = uringbench::StopSignals::block()?;
    let stop = StopToken::new();
    let token = stop.clone();
    std::thread::Builder::new()
        .name("ub-signals".into())
        .spawn(move || {
            let mut first: Option<std::time::Instant> = None;
            while let Some(signal) = signals.wait() {
                match first {
                    None => {
                        first = Some(std::time::Instant::now());
                        token.stop(signal.name);
                    }
                    Some(at) if at.elapsed() >= FORCE_EXIT_AFTER => {
                        let (reverted, failed) = uringbench::settings::revert_registered();
                        if reverted > 0 {
                            eprintln!("uringbench: interrupted: reverted {reverted} setting(s)");
                        }
                        for e in &failed {
                            eprintln!("uringbench: interrupted: {e}");
                        }
                        std::process::exit(if failed.is_empty() { 128 + signal.number } else { 1 });
                    }
                    Some(_) => {}
                }
            }
        })
        .map_err(|e| Error::io("starting the signal watcher", e))?;
    Ok(stop)
}
