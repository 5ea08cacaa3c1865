//! The gate: while held, arriving applies wait; the test can await how many are waiting.
//!
//! Only applies pass the gate; lookups are answered while it is held, so a test can look
//! up an effect whose request is still in flight.

use std::future::Future;

use tokio::sync::watch;

/// Holds applies back while closed and counts the ones waiting.
#[derive(Debug)]
pub(crate) struct Gate {
    held: watch::Sender<bool>,
    waiting: watch::Sender<usize>,
}

impl Gate {
    pub(crate) fn new() -> Self {
        Gate {
            held: watch::Sender::new(false),
            waiting: watch::Sender::new(0),
        }
    }

    /// Makes requests arriving from now on wait.
    pub(crate) fn hold(&self) {
        self.held.send_replace(true);
    }

    /// Lets every waiting request through, and later ones pass straight on.
    pub(crate) fn release(&self) {
        self.held.send_replace(false);
    }

    /// Waits while the gate is held. False when `stopped` resolved first.
    pub(crate) async fn pass(&self, stopped: impl Future<Output = ()>) -> bool {
        let mut held = self.held.subscribe();
        if !*held.borrow_and_update() {
            return true;
        }
        let _waiting = Waiting::enter(&self.waiting);
        tokio::select! {
            () = until(&mut held, |h| !*h) => true,
            () = stopped => false,
        }
    }

    /// Resolves once at least `n` requests are waiting at the gate.
    pub(crate) async fn wait_for_waiting(&self, n: usize) {
        until(&mut self.waiting.subscribe(), |w| *w >= n).await;
    }
}

/// Resolves once the watched value satisfies `ready`; the sender outlives every caller.
pub(crate) async fn until<T>(rx: &mut watch::Receiver<T>, ready: impl FnMut(&T) -> bool) {
    // The `Ref` this returns holds a lock (and is not `Send`): drop it here.
    let _ = rx.wait_for(ready).await;
}

/// Counts one request as waiting for as long as it lives, even if its client gives up.
struct Waiting<'a>(&'a watch::Sender<usize>);

impl<'a> Waiting<'a> {
    fn enter(count: &'a watch::Sender<usize>) -> Self {
        count.send_modify(|n| *n += 1);
        Waiting(count)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.send_modify(|n| *n -= 1);
    }
}
