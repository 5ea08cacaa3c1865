//! SIGINT and SIGTERM for the commands that own scratch data or child processes (`idem
//! demo`, `idem bench`).
//!
//! Once [`Interrupt::listen`] has run, neither signal ends the process: [`Interrupt::run`]
//! drops the command's work at its next await instead, and the command cleans up (kills
//! its children, removes its scratch database) and exits with the shell's code for the
//! signal, 128 + its number: 130 for SIGINT, 143 for SIGTERM. What the command needs to
//! clean up must therefore live outside the future it hands to `run`.

use std::fmt;
use std::future::Future;
use std::process::ExitCode;

use tokio::signal::unix::{Signal, SignalKind, signal};

/// The listener for SIGINT and SIGTERM.
pub struct Interrupt {
    int: Signal,
    term: Signal,
}

/// The signal that cut a command short.
#[derive(Clone, Copy, Debug)]
pub struct Interrupted {
    name: &'static str,
    number: libc::c_int,
}

impl Interrupt {
    /// Starts listening; from here on SIGINT and SIGTERM no longer end the process.
    pub fn listen() -> std::io::Result<Interrupt> {
        Ok(Interrupt {
            int: signal(SignalKind::interrupt())?,
            term: signal(SignalKind::terminate())?,
        })
    }

    /// Runs `work` to its end, or until SIGINT or SIGTERM arrives (also one that arrived
    /// since [`Interrupt::listen`]); then `work` is dropped.
    pub async fn run<T>(&mut self, work: impl Future<Output = T>) -> Result<T, Interrupted> {
        tokio::select! {
            out = work => Ok(out),
            _ = self.int.recv() => Err(Interrupted { name: "SIGINT", number: libc::SIGINT }),
            _ = self.term.recv() => Err(Interrupted { name: "SIGTERM", number: libc::SIGTERM }),
        }
    }
}

impl Interrupted {
    /// 128 + the signal's number, as a shell reports a process the signal ended.
    pub fn exit_code(self) -> ExitCode {
        ExitCode::from(128 + self.number as u8)
    }
}

impl fmt::Display for Interrupted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name)
    }
}
