//! Wake-ups between processes on one SQLite file: datagram Unix sockets in a directory
//! beside the database (`<db>.wake/`), on Linux. Elsewhere the store has no channel and
//! workers in other processes poll.
//!
//! Each subscription (a worker's listener) binds one socket in the directory and removes
//! it when dropped, the directory too once it is empty. An announcement sends one
//! datagram naming the queues (empty = any queue) to every socket there, without
//! blocking, and removes the sockets of processes that died (`ECONNREFUSED`). Nothing
//! costs anything while no job is enqueued: a listener sleeps in `recv`.
//!
//! What must stay true: a wake-up is a hint, so a lost or refused datagram only delays a
//! job until its worker polls. No path an attacker could plant is followed: the directory
//! is opened with `O_NOFOLLOW` and every socket through that descriptor
//! (`/proc/self/fd/N/…`, which also keeps socket paths short), and a socket is reached
//! only through an `O_PATH | O_NOFOLLOW` descriptor checked to be a socket. The
//! directory gets the database directory's mode, and sockets are writable (so
//! reachable) by those who may write there (within the umask).

use std::path::Path;
use std::sync::Arc;

use idem_store::{StoreResult, Wakeups};

/// The wake-up channel of one store, when this platform has one.
pub(crate) type Notify = Option<Arc<imp::Channel>>;

/// The channel beside `db_file`, or `None` where wake-ups cannot work (not Linux, no
/// `/proc`, or the wake path is something other than a directory).
pub(crate) fn channel(db_file: &Path) -> Notify {
    imp::Channel::new(db_file).map(Arc::new)
}

/// Sends `queues` to every subscriber of other stores on the same file.
pub(crate) fn announce(notify: &Notify, queues: &[String]) -> StoreResult<()> {
    match notify {
        Some(c) => c.announce(queues),
        None => Ok(()),
    }
}

/// A new subscription; `None` without a channel or once the store is closed.
pub(crate) fn subscribe(notify: &Notify) -> StoreResult<Option<Box<dyn Wakeups>>> {
    match notify {
        Some(c) => c.subscribe(),
        None => Ok(None),
    }
}

/// Ends every subscription of this store (each removes its socket) and refuses new ones.
pub(crate) fn close(notify: &Notify) {
    if let Some(c) = notify {
        c.close();
    }
}

#[cfg(target_os = "linux")]
mod imp {
    use std::ffi::{OsStr, OsString};
    use std::fs::{DirBuilder, File, OpenOptions, Permissions};
    use std::io::{self, ErrorKind};
    use std::os::fd::{AsRawFd, OwnedFd};
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, OpenOptionsExt};
    use std::os::unix::net::UnixDatagram;
    use std::path::{Path, PathBuf};
    use std::sync::atomic::{AtomicU64, Ordering};

    use async_trait::async_trait;
    use idem_store::{StoreError, StoreResult, Wakeups};
    use tokio::sync::watch;

    /// The longest payload sent; a longer list of queues is sent as "any queue".
    const MAX_PAYLOAD: usize = 4_000;
    /// Binds tried before a subscription gives up (another process may remove the
    /// directory between our opening it and binding in it).
    const BIND_TRIES: usize = 5;
    const SUFFIX: &str = ".sock";

    /// The directory of a database's sockets and its mode.
    pub(crate) struct Channel {
        dir: PathBuf,
        mode: u32,
        closed: watch::Sender<bool>,
    }

    impl Channel {
        pub(super) fn new(db_file: &Path) -> Option<Channel> {
            if db_file.as_os_str().is_empty() || !Path::new("/proc/self/fd").is_dir() {
                return None;
            }
            let mut dir = db_file.as_os_str().to_owned();
            dir.push(".wake");
            let dir = PathBuf::from(dir);
            if let Ok(m) = std::fs::symlink_metadata(&dir)
                && !m.is_dir()
            {
                tracing::warn!(path = %dir.display(), "not a directory; workers in other processes will poll");
                return None;
            }
            let parent = db_file.parent().filter(|p| !p.as_os_str().is_empty());
            let mode = std::fs::metadata(parent.unwrap_or(Path::new(".")))
                .map_or(0o700, |m| m.mode() & 0o7777);
            let closed = watch::channel(false).0;
            Some(Channel { dir, mode, closed })
        }

        pub(super) fn announce(&self, queues: &[String]) -> StoreResult<()> {
            if *self.closed.borrow() {
                return Ok(());
            }
            let dir = match open_dir(&self.dir) {
                Ok(d) => d,
                Err(e) if e.kind() == ErrorKind::NotFound => return Ok(()),
                Err(e) => return Err(self.error("open", e)),
            };
            let payload = payload(queues);
            let sender = UnixDatagram::unbound().map_err(|e| self.error("announce in", e))?;
            sender
                .set_nonblocking(true)
                .map_err(|e| self.error("announce in", e))?;
            let entries = std::fs::read_dir(fd_path(&dir)).map_err(|e| self.error("list", e))?;
            for name in entries.filter_map(|e| e.ok().map(|e| e.file_name())) {
                if name.as_encoded_bytes().ends_with(SUFFIX.as_bytes()) {
                    send(&sender, &dir, &name, payload.as_bytes());
                }
            }
            Ok(())
        }

        pub(super) fn subscribe(&self) -> StoreResult<Option<Box<dyn Wakeups>>> {
            if *self.closed.borrow() {
                return Ok(None);
            }
            let mut last = None;
            for _ in 0..BIND_TRIES {
                let dir = match self.create_dir() {
                    Ok(dir) => dir,
                    Err(e) if unusable(&e) => {
                        tracing::warn!(path = %self.dir.display(), error = %e, "cannot use the wake-up directory; workers in other processes will poll");
                        return Ok(None);
                    }
                    Err(e) => return Err(self.error("create", e)),
                };
                match bind(&dir, self.mode) {
                    Ok((socket, name)) => {
                        let sub = Subscription::new(socket, dir, name, self)?;
                        return Ok(Some(Box::new(sub)));
                    }
                    // The directory was removed after we opened it, or the name is taken.
                    Err(e) if matches!(e.kind(), ErrorKind::NotFound | ErrorKind::AddrInUse) => {
                        last = Some(e)
                    }
                    Err(e) => return Err(self.error("bind a socket in", e)),
                }
            }
            Err(self.error("bind a socket in", last.expect("tried")))
        }

        pub(super) fn close(&self) {
            self.closed.send_replace(true);
        }

        /// The directory, created with the database directory's mode if missing.
        fn create_dir(&self) -> io::Result<File> {
            match DirBuilder::new().mode(self.mode & 0o777).create(&self.dir) {
                Ok(()) => {
                    let dir = open_dir(&self.dir)?;
                    // mkdir applied the umask and left out the sticky and setgid bits.
                    dir.set_permissions(Permissions::from_mode(self.mode))?;
                    Ok(dir)
                }
                Err(e) if e.kind() == ErrorKind::AlreadyExists => open_dir(&self.dir),
                Err(e) => Err(e),
            }
        }

        fn error(&self, what: &str, e: io::Error) -> StoreError {
            let dir = self.dir.display();
            StoreError::Unavailable(format!("cannot {what} the wake-up directory {dir}: {e}"))
        }
    }

    /// Whether `e` will not go away by trying again: the wake-up path is a symlink or not
    /// a directory, or this process may not write beside the database.
    fn unusable(e: &io::Error) -> bool {
        let permanent = [
            libc::ELOOP,
            libc::ENOTDIR,
            libc::EACCES,
            libc::EPERM,
            libc::EROFS,
        ];
        e.raw_os_error().is_some_and(|n| permanent.contains(&n))
    }

    /// Opens `path` as a directory, refusing a symlink.
    fn open_dir(path: &Path) -> io::Result<File> {
        OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(path)
    }

    /// The path of an open file through this process's descriptor.
    fn fd_path(f: &impl AsRawFd) -> PathBuf {
        PathBuf::from(format!("/proc/self/fd/{}", f.as_raw_fd()))
    }

    fn payload(queues: &[String]) -> String {
        let payload = queues.join("\n");
        match payload.len() > MAX_PAYLOAD {
            true => String::new(),
            false => payload,
        }
    }

    /// Sends `payload` to the socket `name` in `dir` if it is one; removes it when no
    /// process holds it any more. Any other failure is left for the next poll.
    fn send(sender: &UnixDatagram, dir: &File, name: &OsStr, payload: &[u8]) {
        let path = fd_path(dir).join(name);
        let target = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&path);
        let Ok(target) = target else { return };
        let Ok(meta) = target.metadata() else { return };
        if !meta.file_type().is_socket() {
            return;
        }
        match sender.send_to(payload, fd_path(&target)) {
            Err(e) if e.kind() == ErrorKind::ConnectionRefused => remove_stale(&path, &meta),
            Err(e) if e.kind() != ErrorKind::WouldBlock => {
                tracing::debug!(path = %path.display(), error = %e, "wake-up not sent");
            }
            _ => {}
        }
    }

    /// Removes the socket at `path` if it is still the one found dead.
    fn remove_stale(path: &Path, found: &std::fs::Metadata) {
        let same = std::fs::symlink_metadata(path)
            .is_ok_and(|m| m.ino() == found.ino() && m.dev() == found.dev());
        if same {
            let _ = std::fs::remove_file(path);
        }
    }

    /// A socket bound under a fresh name in `dir`, writable by those `mode` lets write.
    fn bind(dir: &File, mode: u32) -> io::Result<(UnixDatagram, OsString)> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let name = OsString::from(format!("{}-{n}-{nanos:x}{SUFFIX}", std::process::id()));
        let socket = UnixDatagram::unbound()?;
        // The file bind creates takes the socket's mode (less the umask) on Linux.
        let file = File::from(OwnedFd::from(socket));
        file.set_permissions(Permissions::from_mode(0o600 | (mode & 0o666)))?;
        let socket = UnixDatagram::from(OwnedFd::from(file));
        bind_to(&socket, &fd_path(dir).join(&name))?;
        Ok((socket, name))
    }

    /// bind(2) of an unbound socket (std binds only sockets it creates itself).
    fn bind_to(socket: &UnixDatagram, path: &Path) -> io::Result<()> {
        // SAFETY: sockaddr_un is plain old data; all zeroes is a valid (empty) address.
        let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
        addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
        let bytes = path.as_os_str().as_encoded_bytes();
        if bytes.len() >= addr.sun_path.len() {
            return Err(io::Error::new(
                ErrorKind::InvalidInput,
                "socket path too long",
            ));
        }
        for (to, from) in addr.sun_path.iter_mut().zip(bytes) {
            *to = *from as libc::c_char;
        }
        let len = std::mem::offset_of!(libc::sockaddr_un, sun_path) + bytes.len() + 1;
        // SAFETY: `addr` is a valid sockaddr_un of `len` bytes (its path NUL-terminated
        // by the zeroed tail) and the descriptor is a live socket we own.
        let r = unsafe {
            libc::bind(
                socket.as_raw_fd(),
                (&raw const addr).cast::<libc::sockaddr>(),
                len as libc::socklen_t,
            )
        };
        match r {
            0 => Ok(()),
            _ => Err(io::Error::last_os_error()),
        }
    }

    /// A bound socket; dropping it removes the socket and, when it was the last, the
    /// directory.
    struct Subscription {
        socket: tokio::net::UnixDatagram,
        dir: File,
        dir_path: PathBuf,
        name: OsString,
        closed: watch::Receiver<bool>,
        buf: Vec<u8>,
    }

    impl Subscription {
        fn new(
            socket: UnixDatagram,
            dir: File,
            name: OsString,
            channel: &Channel,
        ) -> StoreResult<Subscription> {
            let socket = socket
                .set_nonblocking(true)
                .and_then(|()| tokio::net::UnixDatagram::from_std(socket));
            Ok(Subscription {
                socket: socket.map_err(|e| channel.error("listen in", e))?,
                dir,
                dir_path: channel.dir.clone(),
                name,
                closed: channel.closed.subscribe(),
                buf: vec![0; MAX_PAYLOAD + 1],
            })
        }

        /// Adds the queues of one datagram to `queues`; `false` when it named any queue.
        fn add(&self, len: usize, queues: &mut Vec<String>) -> bool {
            let text = String::from_utf8_lossy(&self.buf[..len]);
            queues.extend(
                text.split('\n')
                    .filter(|q| !q.is_empty())
                    .map(str::to_owned),
            );
            len > 0
        }
    }

    #[async_trait]
    impl Wakeups for Subscription {
        async fn next(&mut self) -> StoreResult<Vec<String>> {
            let len = tokio::select! {
                r = self.socket.recv(&mut self.buf) => r.map_err(|e| {
                    StoreError::Unavailable(format!("wake-up socket failed: {e}"))
                })?,
                _ = self.closed.wait_for(|c| *c) => {
                    return Err(StoreError::Unavailable("the store was closed".into()));
                }
            };
            // Everything that arrived meanwhile is one wake-up.
            let mut queues = Vec::new();
            let mut named = self.add(len, &mut queues);
            while let Ok(len) = self.socket.try_recv(&mut self.buf) {
                named &= self.add(len, &mut queues);
            }
            if !named {
                queues.clear();
            }
            Ok(queues)
        }
    }

    impl Drop for Subscription {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(fd_path(&self.dir).join(&self.name));
            // Fails while other subscribers' sockets are in it, as it should.
            let _ = std::fs::remove_dir(&self.dir_path);
        }
    }
}

#[cfg(not(target_os = "linux"))]
mod imp {
    use std::path::Path;

    use idem_store::{StoreResult, Wakeups};

    /// No channel off Linux: workers in other processes poll.
    pub(crate) enum Channel {}

    impl Channel {
        pub(super) fn new(_: &Path) -> Option<Channel> {
            None
        }

        pub(super) fn announce(&self, _: &[String]) -> StoreResult<()> {
            match *self {}
        }

        pub(super) fn subscribe(&self) -> StoreResult<Option<Box<dyn Wakeups>>> {
            match *self {}
        }

        pub(super) fn close(&self) {
            match *self {}
        }
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::net::UnixDatagram;
    use std::path::PathBuf;

    use super::*;

    /// A fresh directory of the test's own and the database file's path in it.
    fn scratch(name: &str) -> (PathBuf, PathBuf) {
        let dir = std::env::temp_dir().join(format!("idem-notify-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let db = dir.join("idem.db");
        (dir, db)
    }

    fn wake_dir(db: &Path) -> PathBuf {
        PathBuf::from(format!("{}.wake", db.display()))
    }

    /// Once every subscription was dropped: no socket or directory is left.
    fn left_nothing(db: &Path, dir: PathBuf) {
        let wake = wake_dir(db);
        assert!(!wake.exists(), "{} was left behind", wake.display());
        std::fs::remove_dir_all(dir).unwrap();
    }

    async fn next(sub: &mut Box<dyn Wakeups>) -> Vec<String> {
        let next = tokio::time::timeout(std::time::Duration::from_secs(30), sub.next());
        next.await.expect("a wake-up").expect("the subscription")
    }

    #[tokio::test]
    async fn an_announcement_reaches_every_subscriber_and_a_clean_drop_leaves_nothing() {
        let (dir, db) = scratch("reach");
        let (a, b) = (channel(&db), channel(&db));
        let mut sub_a = subscribe(&a).unwrap().expect("a channel");
        let mut sub_b = subscribe(&b).unwrap().expect("a channel");
        announce(&a, &["mail".into(), "bills".into()]).unwrap();
        assert_eq!(next(&mut sub_b).await, ["mail", "bills"]);
        assert_eq!(next(&mut sub_a).await, ["mail", "bills"]);
        // An empty list means any queue; datagrams waiting together are one wake-up.
        announce(&b, &["mail".into()]).unwrap();
        announce(&b, &[]).unwrap();
        assert!(next(&mut sub_a).await.is_empty());
        drop((sub_a, sub_b));
        left_nothing(&db, dir);
    }

    #[tokio::test]
    async fn a_dead_socket_is_removed_and_a_planted_symlink_is_not_followed() {
        let (dir, db) = scratch("attack");
        let c = channel(&db);
        let mut sub = subscribe(&c).unwrap().expect("a channel");
        let wake = wake_dir(&db);
        // A process that died: its socket file stays, nobody reads it.
        drop(UnixDatagram::bind(wake.join("1-0-0.sock")).unwrap());
        // A symlink to another program's socket outside the directory.
        let victim = UnixDatagram::bind(dir.join("victim")).unwrap();
        victim.set_nonblocking(true).unwrap();
        std::os::unix::fs::symlink(dir.join("victim"), wake.join("evil.sock")).unwrap();
        announce(&c, &["q".into()]).unwrap();
        assert_eq!(next(&mut sub).await, ["q"]);
        assert!(
            !wake.join("1-0-0.sock").exists(),
            "the dead socket was kept"
        );
        let err = victim.recv(&mut [0; 64]).unwrap_err();
        assert_eq!(
            err.kind(),
            std::io::ErrorKind::WouldBlock,
            "the symlink was followed"
        );
        assert!(wake.join("evil.sock").symlink_metadata().is_ok());
        std::fs::remove_file(wake.join("evil.sock")).unwrap();
        drop(sub);
        // A symlink planted as the directory itself, before or after the store opened:
        // no channel, workers poll.
        std::os::unix::fs::symlink(&dir, &wake).unwrap();
        assert!(
            channel(&db).is_none(),
            "a symlinked wake-up directory was used"
        );
        assert!(
            subscribe(&c).unwrap().is_none(),
            "subscribed through a symlink"
        );
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[tokio::test]
    async fn closing_the_store_ends_its_subscriptions() {
        let (dir, db) = scratch("close");
        let c = channel(&db);
        let mut sub = subscribe(&c).unwrap().expect("a channel");
        close(&c);
        let ended = tokio::time::timeout(std::time::Duration::from_secs(30), sub.next());
        let ended = ended.await.expect("the subscription outlived the store");
        assert!(ended.is_err(), "the subscription outlived the store");
        assert!(
            subscribe(&c).unwrap().is_none(),
            "a closed store subscribed"
        );
        drop(sub);
        left_nothing(&db, dir);
    }

    #[tokio::test]
    async fn the_directory_takes_the_database_directorys_mode() {
        let (dir, db) = scratch("mode");
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o750)).unwrap();
        let c = channel(&db);
        let sub = subscribe(&c).unwrap().expect("a channel");
        let wake = wake_dir(&db);
        let mode = |p: &Path| std::fs::symlink_metadata(p).unwrap().permissions().mode();
        assert_eq!(mode(&wake) & 0o7777, 0o750);
        let socket = std::fs::read_dir(&wake)
            .unwrap()
            .next()
            .unwrap()
            .unwrap()
            .path();
        assert_eq!(mode(&socket) & 0o007, 0, "others may write the socket");
        drop(sub);
        std::fs::remove_dir_all(dir).unwrap();
    }
}
