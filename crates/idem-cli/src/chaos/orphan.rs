//! Child processes that die with the idem process that started them, however it dies:
//! `idem demo`'s workers and `idem chaos`'s sink.

use tokio::process::Command;

/// Makes the kernel SIGKILL the child when its parent dies, however it dies.
///
/// `PR_SET_PDEATHSIG` rather than a child that watches its stdin or polls its parent's
/// pid: the kernel delivers the signal even when the parent was SIGKILLed, and to a child
/// that is stopped (the demo's chaos SIGSTOPs one), busy or stuck, since none of the
/// child's code has to run; a watcher needs the child's runtime to be scheduled, and stdin
/// closes only when every holder of the pipe's other end has closed it. The signal fires
/// when the *thread* that forked the child ends: fork from a thread that lives as long as
/// the process (the one that runs `block_on`, or a runtime worker), never from a
/// `spawn_blocking` thread, which the runtime retires when idle.
#[cfg(target_os = "linux")]
pub(crate) fn die_with_parent(cmd: &mut Command) {
    let parent = std::process::id();
    // SAFETY: the closure runs in the forked child before exec and calls only prctl(2) and
    // getppid(2), which are async-signal-safe; it allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // The parent may have died between fork and prctl: no signal would come then.
            if libc::getppid() as u32 != parent {
                return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
            }
            Ok(())
        });
    }
}

/// Elsewhere the children die with their parent only when it can stop them (SIGINT,
/// SIGTERM, an error).
#[cfg(not(target_os = "linux"))]
pub(crate) fn die_with_parent(_: &mut Command) {}
