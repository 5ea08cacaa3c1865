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
        // The reader is gone before the command starts, so its first write fails (a
        // reader dropped after the spawn could lose the race to a quick command, whose
        // output then fits in the pipe).
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        cmd.stdout(writer).stderr(Stdio::piped());
        let out = cmd.spawn().unwrap().wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        assert_eq!(
            out.status.signal(),
            Some(libc::SIGPIPE),
            "{args:?}: {stderr}"
        );
    }
}
