//! One error type for the whole engine, carrying the exit code the CLI should use.
//!
//! The exit codes are part of the command's contract (README, man pages): 0 success, 1 test failed or incomplete, 2 usage error.
//! Every error is a single human sentence; the CLI prints it on one line.

use std::fmt;
use std::io;

/// What went wrong, sorted by what the user should do about it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The command line or a value in it is wrong (exit 2).
    Usage,
    /// The kernel or host lacks something the test needs (exit 1).
    Unsupported,
    /// The peer could not be reached, refused, or went away (exit 1).
    Peer,
    /// The peer spoke something that is not our protocol (exit 1).
    Protocol,
    /// A local system call failed (exit 1).
    Io,
}

/// An engine error: a kind and a one-line message that already names the cause and the fix.
#[derive(Debug, Clone)]
pub struct Error {
    pub kind: ErrorKind,
    pub message: String,
}

impl Error {
    pub fn usage(message: impl Into<String>) -> Self {
        Self { kind: ErrorKind::Usage, message: message.into() }
    }
    pub fn unsupported(message: impl Into<String>) -> Self {
        Self { kind: ErrorKind::Unsupported, message: message.into() }
    }
    pub fn peer(message: impl Into<String>) -> Self {
        Self { kind: ErrorKind::Peer, message: message.into() }
    }
    pub fn protocol(message: impl Into<String>) -> Self {
        Self { kind: ErrorKind::Protocol, message: message.into() }
    }
    /// A failed system call, with what we were doing when it failed.
    pub fn io(context: impl fmt::Display, err: io::Error) -> Self {
        Self { kind: ErrorKind::Io, message: format!("{context}: {err}") }
    }

    /// The process exit code for this error (0 success, 1 test failed or incomplete, 2 usage).
    pub fn exit_code(&self) -> i32 {
        match self.kind {
            ErrorKind::Usage => 2,
            _ => 1,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}

pub type Result<T> = std::result::Result<T, Error>;
