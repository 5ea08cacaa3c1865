//! A command whose reader closes the pipe (`idem queues | head -1`) ends quietly, killed
//! by SIGPIPE as Unix tools are, instead of panicking on the failed write.

mod common;

use std::os::unix::process::ExitStatusExt;
use std::process::Stdio;

use common::*;

#[test]
fn a_closed_pipe_ends_a_listing_without_a_panic() {
    let (tmp, data) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let url = migrated_sqlite(tmp.path(), &data.path().join("idem.db"));
    enqueue(tmp.path(), &url, "k");
    for args in [&["queues"][..], &["guarantees"], &["jobs", "list"]] {
        let mut cmd = idem(tmp.path());
        cmd.arg("--database-url").arg(&url).args(args);
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = cmd.spawn().unwrap();
        // The reader goes away before the command writes anything.
        drop(child.stdout.take());
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        assert_eq!(
            out.status.signal(),
            Some(libc::SIGPIPE),
            "{args:?}: {stderr}"
        );
    }
}
