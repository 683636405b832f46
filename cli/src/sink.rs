//! The one way every command writes what it produces: to stdout, or to a file that is written
//! beside its final name, synced and renamed over it once complete, so a reader never finds a
//! partial file under that name.
//!
//! A write never panics and never goes unnoticed: the first error is kept and
//! [`Sink::finish`] turns it into one error line naming the file (or stdout) and exit 1, while
//! main puts the run's headline on stderr. A pipe whose reader went away ends the running test
//! through its stop token (nothing more can be delivered); other errors let the test finish. Stdout that is a pipe is
//! watched, so a reader that goes away (`| head -1`) ends the test at once, not at its next
//! line. Stdout that is a regular file (`-J > f`) is cut back to where this command began
//! writing when a write fails, so no half document is left behind.

use std::{
    fs::File,
    io::{self, Seek, Write},
    os::fd::AsFd,
    path::{Path, PathBuf},
    sync::{Mutex, OnceLock},
};
use tempfile::NamedTempFile;
use uringbench::{
    output::{Exported, OutputFormat},
    Error, StopToken,
};

/// Where a sink's bytes go.
enum Dest {
    /// The process's stdout; `regular`: the regular file behind it and its length when this
    /// process began writing, to cut a failed document back to.
    Stdout { regular: Option<(File, u64)> },
    /// A temporary file beside `path`, renamed over it by [`Sink::finish`].
    File { tmp: NamedTempFile, path: PathBuf },
    /// Something that is not a regular file (`/dev/stdout`, a FIFO, `/dev/full`): written as it
    /// is, since renaming over it would replace the device or pipe.
    Device { file: File },
    /// Finished: the file is in place (or was removed after a failure).
    Done,
}

struct State {
    dest: Dest,
    /// The first write error; later writes are dropped.
    failed: Option<io::Error>,
    /// The running test to end when a write fails.
    stop: Option<StopToken>,
}

/// One output of a command: stdout or a file.
pub struct Sink {
    /// How errors name it: "stdout" or the file's path.
    name: String,
    state: Mutex<State>,
}

/// Whether an io::Error is the reader of a pipe having gone away.
fn reader_gone(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::BrokenPipe
}

impl Sink {
    /// A file written to a temporary file beside `path`. `append`: the file's present content is
    /// kept ahead of what this command writes (`--logfile` appends, as iperf3's does).
    pub fn file(path: &Path, append: bool) -> Result<Self, Error> {
        let name = path.display().to_string();
        let fail = |e: io::Error| Error::io(format!("cannot write {name}"), e);
        let dest = match std::fs::metadata(path) {
            Ok(m) if !m.is_file() => {
                let file = std::fs::OpenOptions::new().write(true).append(append).open(path).map_err(fail)?;
                Dest::Device { file }
            }
            // A link to a file: the file is replaced, the link kept.
            Ok(_) => Self::beside(&std::fs::canonicalize(path).map_err(fail)?, append).map_err(fail)?,
            Err(e) if e.kind() == io::ErrorKind::NotFound => Self::beside(path, append).map_err(fail)?,
            Err(e) => return Err(fail(e)),
        };
        Ok(Self { name, state: Mutex::new(State { dest, failed: None, stop: None }) })
    }

    /// A temporary file beside `path` (holding its present content when `append`).
    fn beside(path: &Path, append: bool) -> io::Result<Dest> {
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        let file_name = path.file_name().ok_or_else(|| io::Error::other("not a file name"))?;
        // Rename keeps the temporary file's mode: 0666 less the umask, as a plain create gives.
        use std::os::unix::fs::PermissionsExt;
        let mut tmp = tempfile::Builder::new()
            .prefix(&format!(".{}.", file_name.to_string_lossy()))
            .suffix(".tmp")
            .permissions(std::fs::Permissions::from_mode(0o666))
            .tempfile_in(dir)?;
        if append {
            match File::open(path) {
                Ok(mut old) => {
                    let mode = old.metadata()?.permissions();
                    io::copy(&mut old, tmp.as_file_mut())?;
                    tmp.as_file().set_permissions(mode)?;
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
        Ok(Dest::File { tmp, path: path.to_owned() })
    }

    /// The process's stdout, shared by every writer in the process.
    pub fn stdout() -> &'static Sink {
        static STDOUT: OnceLock<Sink> = OnceLock::new();
        STDOUT.get_or_init(|| {
            // A regular file behind stdout, and where our output begins in it.
            let regular = std::io::stdout()
                .as_fd()
                .try_clone_to_owned()
                .ok()
                .map(File::from)
                .filter(|f| f.metadata().is_ok_and(|m| m.is_file()))
                .and_then(|mut f| f.stream_position().ok().map(|at| (f, at)));
            Sink {
                name: "stdout".into(),
                state: Mutex::new(State { dest: Dest::Stdout { regular }, failed: None, stop: None }),
            }
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Ends `stop`'s test when this output's reader goes away (EPIPE); for stdout on a pipe or
    /// socket, as soon as it goes, without waiting for the next write to find out.
    pub fn stop_on_failure(&self, stop: &StopToken) {
        let mut state = self.lock();
        state.stop = Some(stop.clone());
        if state.failed.as_ref().is_some_and(reader_gone) {
            stop.stop(format!("{}'s reader went away", self.name));
        }
        if matches!(state.dest, Dest::Stdout { .. }) {
            watch_stdout_reader(stop.clone());
        }
    }

    /// Writes `bytes` whole, or keeps the first error (and stops the test).
    pub fn write(&self, bytes: &[u8]) {
        let mut state = self.lock();
        if state.failed.is_some() {
            return;
        }
        let result = match &mut state.dest {
            Dest::Stdout { .. } => {
                let mut out = std::io::stdout().lock();
                out.write_all(bytes).and_then(|()| out.flush())
            }
            Dest::File { tmp, .. } => tmp.as_file_mut().write_all(bytes),
            Dest::Device { file } => file.write_all(bytes),
            Dest::Done => Err(io::Error::other("written after it was finished")),
        };
        if let Err(e) = result {
            // A reader gone wants nothing more: end the test. A full disk or a failing device
            // does not spoil the measurement: the test runs on and its headline goes to stderr.
            if let Some(stop) = state.stop.as_ref().filter(|_| reader_gone(&e)) {
                stop.stop(format!("writing {} failed: {e}", self.name));
            }
            state.failed = Some(e);
        }
    }

    /// Text as it is.
    pub fn text(&self, text: &str) {
        self.write(text.as_bytes());
    }

    /// A finished result in the format asked for, rendered by the result itself.
    pub fn export(&self, format: OutputFormat, result: &impl Exported) -> Result<(), Error> {
        self.text(&result.export(format)?);
        Ok(())
    }

    /// One JSON document, indented, with a final newline (`-J`, `--json-file`).
    pub fn json_doc(&self, doc: &impl serde::Serialize) -> Result<(), Error> {
        self.text(&json_text(doc)?);
        Ok(())
    }

    /// Completes the output: a file is synced and renamed over its final name (its folder
    /// synced too); stdout is flushed. After a failed write the file is removed (its final
    /// name untouched) or stdout cut back to where this process began, and the error names it.
    pub fn finish(&self) -> Result<(), Error> {
        let mut state = self.lock();
        let dest = std::mem::replace(&mut state.dest, Dest::Done);
        let outcome = match (state.failed.take(), dest) {
            (None, Dest::File { tmp, path }) => commit_file(tmp, &path),
            (None, stdout @ Dest::Stdout { .. }) => {
                state.dest = stdout;
                match STDOUT_READER_GONE.get() {
                    Some(()) => Err(io::Error::from_raw_os_error(libc::EPIPE)),
                    None => std::io::stdout().lock().flush(),
                }
            }
            (None, Dest::Device { mut file }) => file.flush(),
            (None, Dest::Done) => Ok(()),
            (Some(e), Dest::Stdout { regular }) => {
                if let Some((file, at)) = &regular {
                    // Best effort: the disk that refused the document may refuse nothing here.
                    let _ = file.set_len(*at);
                }
                state.dest = Dest::Stdout { regular };
                Err(e)
            }
            // Dropping the temporary file removes it.
            (Some(e), _) => Err(e),
        };
        outcome.map_err(|e| {
            state.failed = Some(io::Error::new(e.kind(), e.to_string()));
            write_error(&self.name, &e)
        })
    }
}

/// The error a failed write becomes: one line naming where, exit 1.
fn write_error(name: &str, e: &io::Error) -> Error {
    Error::io(format!("writing {name}"), io::Error::new(e.kind(), e.to_string()))
}

/// Syncs `tmp`, renames it to `path` and syncs the folder so the rename itself is durable.
fn commit_file(tmp: NamedTempFile, path: &Path) -> io::Result<()> {
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    File::open(dir)?.sync_all()
}

/// Set once the reader of stdout (a pipe or socket) is gone.
static STDOUT_READER_GONE: OnceLock<()> = OnceLock::new();

/// Watches stdout when it is a pipe or socket: poll(2) reports POLLERR (pipe) or POLLHUP
/// (socket) on our end once the reader closed its end, whatever events were asked for.
fn watch_stdout_reader(stop: StopToken) {
    static WATCHING: OnceLock<()> = OnceLock::new();
    let Ok(fd) = std::io::stdout().as_fd().try_clone_to_owned() else { return };
    let out = File::from(fd);
    let pipe_or_socket = out.metadata().is_ok_and(|m| {
        use std::os::unix::fs::FileTypeExt;
        m.file_type().is_fifo() || m.file_type().is_socket()
    });
    if !pipe_or_socket || WATCHING.set(()).is_err() {
        return;
    }
    let _ = std::thread::Builder::new().name("ub-stdout".into()).spawn(move || {
        use std::os::fd::AsRawFd;
        let mut pfd = libc::pollfd { fd: out.as_raw_fd(), events: 0, revents: 0 };
        loop {
            // SAFETY: one valid pollfd for the duration of the call; `out` keeps its descriptor open.
            let n = unsafe { libc::poll(&mut pfd, 1, -1) };
            if n > 0 && pfd.revents & (libc::POLLERR | libc::POLLHUP) != 0 {
                let _ = STDOUT_READER_GONE.set(());
                stop.stop("stdout's reader went away");
                return;
            }
            if n < 0 && io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
                return;
            }
        }
    });
}

/// A JSON document as written: pretty, with a final newline.
pub(crate) use uringbench::output::json_text;

/// Writes a whole file the user asked for (`--html`, `--svg`, `--csv`, `--json-file`): beside
/// its name, then renamed over it.
pub(crate) fn write_file(path: &Path, text: &str) -> Result<(), Error> {
    let sink = Sink::file(path, false)?;
    sink.text(text);
    sink.finish()
}

/// Writes a whole file as `write` produces it (a fleet's merged files: gigabytes for a million
/// runs, never held as one string): buffered, beside its name, then renamed over it. The
/// first failed write is the error.
pub(crate) fn write_file_with(
    path: &Path,
    write: impl FnOnce(&mut dyn std::io::Write) -> std::io::Result<()>,
) -> Result<(), Error> {
    struct Into<'a>(&'a Sink);
    impl std::io::Write for Into<'_> {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            // The sink keeps the first error; finish() returns it.
            self.0.write(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let sink = Sink::file(path, false)?;
    let mut out = std::io::BufWriter::with_capacity(1 << 20, Into(&sink));
    let produced = write(&mut out).and_then(|()| std::io::Write::flush(&mut out));
    drop(out);
    let finished = sink.finish();
    produced.map_err(|e| Error::io(format!("writing {}", path.display()), e))?;
    finished
}

/// The run's headline, kept so that a failed write still leaves the result on stderr.
static HEADLINE: Mutex<Option<String>> = Mutex::new(None);

/// Records the headline of the result a command is about to write.
pub(crate) fn set_headline(line: String) {
    *HEADLINE.lock().unwrap_or_else(|p| p.into_inner()) = Some(line);
}

/// The recorded headline, once (main prints it ahead of a write error).
pub(crate) fn take_headline() -> Option<String> {
    HEADLINE.lock().unwrap_or_else(|p| p.into_inner()).take()
}
