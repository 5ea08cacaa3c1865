//! Kill points: the chaos driver arms one with a signal (SIGUSR1: inside the next effect
//! transaction; SIGUSR2: right after the next job that completes through the batched
//! completer returns), and the worker process SIGKILLs itself when it gets there, so a
//! kill lands at the point named rather than wherever a random moment falls.

use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

use tokio::signal::unix::{SignalKind, signal};

/// Where an armed kill fires.
#[derive(Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(in crate::chaos) enum Point {
    /// After a handler's effect writes, before its transaction commits.
    InEffectTx = 1,
    /// After a handler returned, while its completion waits for the batched completer.
    InBatchedCompletion = 2,
}

impl Point {
    /// The signal that arms this point in a worker process.
    pub(in crate::chaos) fn signal(self) -> libc::c_int {
        match self {
            Point::InEffectTx => libc::SIGUSR1,
            Point::InBatchedCompletion => libc::SIGUSR2,
        }
    }
}

/// The armed point (0: none).
static ARMED: AtomicU8 = AtomicU8::new(0);

/// Listens for the arming signals for the rest of the process's life.
pub(in crate::chaos) fn listen() -> anyhow::Result<()> {
    for point in [Point::InEffectTx, Point::InBatchedCompletion] {
        let mut armed = signal(SignalKind::from_raw(point.signal()))?;
        tokio::spawn(async move {
            while armed.recv().await.is_some() {
                ARMED.store(point as u8, Ordering::SeqCst);
            }
        });
    }
    Ok(())
}

/// Called at `point`: SIGKILLs this process when that point is armed.
pub(super) fn at(point: Point) {
    if ARMED
        .compare_exchange(point as u8, 0, Ordering::SeqCst, Ordering::SeqCst)
        .is_ok()
    {
        match point {
            Point::InEffectTx => die(),
            // The handler must return first so its completion is queued: die a moment
            // later, from a thread of its own.
            Point::InBatchedCompletion => {
                std::thread::spawn(|| {
                    std::thread::sleep(Duration::from_millis(2));
                    die();
                });
            }
        }
    }
}

fn die() {
    // SAFETY: kill(2) on this process's own id; nothing is shared.
    unsafe {
        libc::kill(libc::getpid(), libc::SIGKILL);
    }
}
