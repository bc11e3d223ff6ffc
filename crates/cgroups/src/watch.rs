//! Container start/stop events from inotify on the cgroup tree, with a periodic full
//! reconcile as a safety net.
//!
//! inotify is not recursive: every non-container directory gets its own watch, and a new
//! directory is rescanned right after its watch is added, so children created in between are
//! not missed. Duplicates (seen by both the rescan and an event) are suppressed by keeping the
//! set of known containers keyed by path and cgroup id. Events leave one thread, in order.

use crate::identity::{identify, Glob};
use crate::{found, path_text, CgroupError, Container};
use inotify::{EventMask, Inotify, WatchDescriptor, WatchMask};
use std::collections::{BTreeMap, HashMap};
use std::ffi::OsString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

/// Called in the watcher's thread the moment a new container's cgroup is seen, before the
/// event reaches the engine: with the container's id and its cgroup directory. A backend that
/// must act before the container's first instruction (resctrl's tagger) acts from here.
pub type Early = Box<dyn Fn(&str, &Path) + Send>;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lifecycle {
    Started,
    Stopped,
}

#[derive(Debug, Clone)]
pub struct Event {
    pub kind: Lifecycle,
    pub container: Container,
    /// When cachescope noticed it, and the same on CLOCK_MONOTONIC (the run's clock).
    pub at: SystemTime,
    pub monotonic: Duration,
}

struct State {
    root: PathBuf,
    globs: Vec<Glob>,
    inotify: Inotify,
    /// Exact paths (relative to the root): names need not be UTF-8.
    wd_path: HashMap<WatchDescriptor, PathBuf>,
    known: BTreeMap<PathBuf, Known>,
    /// The number of the walk under way: a known container the walk finds unchanged is
    /// marked with it instead of being described again.
    walk: u64,
    tx: Sender<Event>,
    /// Directories searched but not watched (the inotify watch limit): changes below them are
    /// found by the periodic reconcile only. Counted at each reconcile.
    unwatched: usize,
    /// Watches this watcher may hold (None: as many as the kernel gives). Tests set it to
    /// reach the watch limit without lowering the host's.
    limit: Option<usize>,
    /// Told of each container started after the first walk.
    early: Option<Early>,
}

/// A container started and not stopped, and the last walk that found it.
struct Known {
    c: Container,
    walk: u64,
}

impl State {
    fn emit(&self, kind: Lifecycle, container: Container) {
        let (at, monotonic) = (SystemTime::now(), cachescope_platform::clock::monotonic());
        let _ = self.tx.send(Event { kind, container, at, monotonic });
    }

    /// Watch and walk the subtree at `rel`, collecting containers into `found`.
    fn sync_subtree(&mut self, rel: &Path, out: &mut Vec<Container>, depth: usize) -> Result<(), CgroupError> {
        // A container, and still watched and searched: containers nest. One already known in
        // the same directory (the same cgroup id) is only marked as found: describing every
        // container again at each periodic walk held megabytes at 10,000 (docs/cost.md).
        let dir = self.root.join(rel);
        let walk = self.walk;
        let same = |k: &Known| {
            use std::os::unix::fs::MetadataExt;
            k.c.cgroup_id.is_some() && k.c.cgroup_id == std::fs::metadata(&dir).ok().map(|m| m.ino())
        };
        match self.known.get_mut(rel).filter(|k| same(k)) {
            Some(k) => k.walk = walk,
            None => out.extend(found(&self.root, rel, &self.globs)),
        }
        let added = if self.limit.is_some_and(|l| self.wd_path.len() >= l) {
            Err(std::io::Error::from_raw_os_error(libc::ENOSPC))
        } else {
            self.inotify.watches().add(&dir, WatchMask::CREATE | WatchMask::DELETE | WatchMask::ONLYDIR)
        };
        match added {
            Ok(wd) => {
                self.wd_path.insert(wd, rel.to_path_buf());
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            // A file raced in under that name.
            Err(e) if e.raw_os_error() == Some(libc::ENOTDIR) => return Ok(()),
            // Out of watches: still searched (a container below must not escape), and the
            // periodic reconcile finds what changes there.
            Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => self.unwatched += 1,
            Err(error) => return Err(CgroupError::Io { path: dir, error }),
        }
        if depth >= crate::MAX_DEPTH {
            return Ok(());
        }
        for n in crate::subdirs(&dir)? {
            self.sync_subtree(&rel.join(n), out, depth + 1)?;
        }
        Ok(())
    }

    fn start_if_new(&mut self, c: Container) {
        let walk = self.walk;
        match self.known.get_mut(&c.rel) {
            Some(k) if k.c.cgroup_id == c.cgroup_id || c.cgroup_id.is_none() => k.walk = walk,
            Some(_) => {
                // Same path, new directory: the old one is gone.
                if let Some(old) = self.known.remove(&c.rel) {
                    self.emit(Lifecycle::Stopped, old.c);
                }
                self.known.insert(c.rel.clone(), Known { c: c.clone(), walk });
                self.emit(Lifecycle::Started, c);
            }
            None => {
                if let Some(f) = &self.early {
                    f(&c.identity.id, &self.root.join(&c.rel));
                }
                self.known.insert(c.rel.clone(), Known { c: c.clone(), walk });
                self.emit(Lifecycle::Started, c);
            }
        }
    }

    fn stop_under(&mut self, rel: &Path) {
        // cgroupfs does not always send IN_IGNORED for a removed directory: drop its watches
        // (and its descendants') explicitly. EINVAL means the kernel already did.
        // (Path::starts_with compares whole components.)
        let stale: Vec<WatchDescriptor> =
            self.wd_path.iter().filter(|(_, p)| p.starts_with(rel)).map(|(wd, _)| wd.clone()).collect();
        for wd in stale {
            self.wd_path.remove(&wd);
            let _ = self.inotify.watches().remove(wd);
        }
        let gone: Vec<PathBuf> = self.known.keys().filter(|p| p.starts_with(rel)).cloned().collect();
        for p in gone {
            if let Some(k) = self.known.remove(&p) {
                self.emit(Lifecycle::Stopped, k.c);
            }
        }
    }

    /// Full rescan: watches for every directory, Started/Stopped for every difference.
    fn reconcile(&mut self) -> Result<(), CgroupError> {
        let mut found = Vec::new();
        let before: Vec<(WatchDescriptor, PathBuf)> = self.wd_path.drain().collect();
        self.unwatched = 0;
        self.walk += 1;
        let walk = self.walk;
        self.sync_subtree(Path::new(""), &mut found, 0)?;
        // Watches of directories that no longer exist (their removal event was lost).
        for (wd, _) in before {
            if !self.wd_path.contains_key(&wd) {
                let _ = self.inotify.watches().remove(wd);
            }
        }
        // Found unchanged: marked by this walk. Found anew (described): in `found`, where a
        // directory of the same path with another cgroup id replaces the one known.
        let present: BTreeMap<&Path, Option<u64>> = found.iter().map(|c| (c.rel.as_path(), c.cgroup_id)).collect();
        let gone: Vec<PathBuf> = self
            .known
            .iter()
            .filter(|(p, k)| {
                k.walk != walk && present.get(p.as_path()).is_none_or(|id| id.is_some() && *id != k.c.cgroup_id)
            })
            .map(|(p, _)| p.clone())
            .collect();
        for p in gone {
            if let Some(k) = self.known.remove(&p) {
                self.emit(Lifecycle::Stopped, k.c);
            }
        }
        for c in found {
            self.start_if_new(c);
        }
        Ok(())
    }

    fn handle(&mut self, wd: &WatchDescriptor, mask: EventMask, name: Option<OsString>) -> Result<(), CgroupError> {
        if mask.contains(EventMask::Q_OVERFLOW) {
            return self.reconcile();
        }
        if mask.contains(EventMask::IGNORED) {
            self.wd_path.remove(wd);
            return Ok(());
        }
        let (Some(parent), Some(name)) = (self.wd_path.get(wd).cloned(), name) else { return Ok(()) };
        if !mask.contains(EventMask::ISDIR) {
            return Ok(());
        }
        let rel = parent.join(name);
        if mask.contains(EventMask::CREATE) {
            let mut found = Vec::new();
            self.sync_subtree(&rel, &mut found, rel.components().count())?;
            if found.is_empty() {
                // Created and removed before we looked: still a container that started and
                // stopped, if its name says so.
                let text = path_text(&rel);
                if let Some(identity) = identify(&text, &self.globs) {
                    found.push(Container {
                        identity,
                        cgroup_path: text,
                        rel: rel.clone(),
                        cgroup_id: None,
                        name: None,
                    });
                }
            }
            for c in found {
                self.start_if_new(c);
            }
        } else if mask.contains(EventMask::DELETE) {
            self.stop_under(&rel);
        }
        Ok(())
    }
}

/// A running watch. Dropping it stops the thread and closes the inotify descriptor.
pub struct Watcher {
    stop: Arc<AtomicBool>,
    /// Written to stop the thread at once: it sleeps in poll(2) until a cgroup changes or its
    /// next walk is due, not in short naps that would check `stop` (20 wake-ups a second did).
    wake: Arc<OwnedFd>,
    watches: Arc<AtomicUsize>,
    unwatched: Arc<AtomicUsize>,
    handle: Option<JoinHandle<Result<(), CgroupError>>>,
}

impl Watcher {
    /// Start watching `root`. The returned receiver first gets a Started event for every
    /// container present now, then every change, in order.
    pub fn start(
        root: &Path,
        globs: Vec<Glob>,
        reconcile_every: Duration,
    ) -> Result<(Watcher, Receiver<Event>), CgroupError> {
        Self::start_limited(root, globs, reconcile_every, None)
    }

    /// As [`start`](Self::start), holding at most `limit` watches, as if the kernel's limit
    /// were reached there.
    pub fn start_limited(
        root: &Path,
        globs: Vec<Glob>,
        reconcile_every: Duration,
        limit: Option<usize>,
    ) -> Result<(Watcher, Receiver<Event>), CgroupError> {
        Self::start_with(root, globs, reconcile_every, limit, None)
    }

    /// As [`start_limited`](Self::start_limited), telling `early` of every container that
    /// starts from now on, as soon as its cgroup is seen.
    pub fn start_with(
        root: &Path,
        globs: Vec<Glob>,
        reconcile_every: Duration,
        limit: Option<usize>,
        early: Option<Early>,
    ) -> Result<(Watcher, Receiver<Event>), CgroupError> {
        let inotify =
            Inotify::init().map_err(|error| CgroupError::Io { path: PathBuf::from("inotify_init1"), error })?;
        let (tx, rx) = channel();
        let mut st = State {
            root: root.to_path_buf(),
            globs,
            inotify,
            wd_path: HashMap::new(),
            known: BTreeMap::new(),
            walk: 0,
            tx,
            unwatched: 0,
            limit,
            early: None,
        };
        st.reconcile()?;
        st.early = early;
        // SAFETY: eventfd(2) takes no pointers; a descriptor it returns is ours alone.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if fd < 0 {
            return Err(CgroupError::Io { path: PathBuf::from("eventfd"), error: std::io::Error::last_os_error() });
        }
        // SAFETY: `fd` was just returned by eventfd(2) and nothing else owns it.
        let wake = Arc::new(unsafe { OwnedFd::from_raw_fd(fd) });
        let stop = Arc::new(AtomicBool::new(false));
        let watches = Arc::new(AtomicUsize::new(st.wd_path.len()));
        let unwatched = Arc::new(AtomicUsize::new(st.unwatched));
        let shared = (stop.clone(), wake.clone(), watches.clone(), unwatched.clone());
        let handle = std::thread::Builder::new()
            .name("cgroup-watch".into())
            .spawn(move || run(st, shared, reconcile_every))
            .map_err(|error| CgroupError::Io { path: PathBuf::from("thread"), error })?;
        Ok((Watcher { stop, wake, watches, unwatched, handle: Some(handle) }, rx))
    }

    /// inotify watches currently held (one per non-container directory).
    pub fn watch_count(&self) -> usize {
        self.watches.load(Ordering::Relaxed)
    }

    /// Directories searched without a watch (the inotify watch limit was reached): changes
    /// below them are seen at the periodic reconcile only, at most [`UNWATCHED_RECONCILE`]
    /// apart.
    pub fn unwatched(&self) -> usize {
        self.unwatched.load(Ordering::Relaxed)
    }

    /// Tells the thread to end, now rather than at its next walk.
    fn signal_stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
        let one = 1u64.to_ne_bytes();
        // SAFETY: writes 8 bytes from a live buffer to the eventfd `wake` keeps open. It cannot
        // fail but by overflowing the counter, which a few writes do not reach.
        unsafe { libc::write(self.wake.as_raw_fd(), one.as_ptr().cast(), one.len()) };
    }

    /// Stop and report the thread's error, if it had one.
    pub fn stop(mut self) -> Result<(), CgroupError> {
        self.signal_stop();
        match self.handle.take().map(|h| h.join()) {
            Some(Ok(r)) => r,
            Some(Err(_)) => Err(CgroupError::Io {
                path: "cgroup-watch".into(),
                error: std::io::Error::other("watch thread panicked"),
            }),
            None => Ok(()),
        }
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        if self.handle.is_none() {
            return;
        }
        self.signal_stop();
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// The longest wait for a full walk while some directories are searched without a watch.
pub const UNWATCHED_RECONCILE: Duration = Duration::from_secs(10);

/// What the watch thread shares with its [`Watcher`]: the stop flag, the eventfd that wakes it
/// to see the flag, its watch count and its unwatched count.
type Shared = (Arc<AtomicBool>, Arc<OwnedFd>, Arc<AtomicUsize>, Arc<AtomicUsize>);

fn run(mut st: State, (stop, wake, watches, unwatched): Shared, reconcile_every: Duration) -> Result<(), CgroupError> {
    let mut buf = vec![0u8; 64 * 1024];
    let mut last_reconcile = Instant::now();
    let fd = st.inotify.as_raw_fd();
    while !stop.load(Ordering::Relaxed) {
        // Changes below an unwatched directory are found by the walk only: it comes sooner.
        let every = if st.unwatched > 0 { reconcile_every.min(UNWATCHED_RECONCILE) } else { reconcile_every };
        // Asleep until a change, the stop, or the next walk (rounded up to whole milliseconds).
        let wait = every.saturating_sub(last_reconcile.elapsed());
        let timeout = i32::try_from(wait.as_micros().div_ceil(1000)).unwrap_or(i32::MAX);
        let mut pfd = [
            libc::pollfd { fd, events: libc::POLLIN, revents: 0 },
            libc::pollfd { fd: wake.as_raw_fd(), events: libc::POLLIN, revents: 0 },
        ];
        // SAFETY: `pfd` holds two valid pollfds, for the inotify descriptor (`st` keeps it open)
        // and the eventfd (`wake` keeps it open), for the duration of the call.
        let n = unsafe { libc::poll(pfd.as_mut_ptr(), 2, timeout) };
        if n > 0 && pfd[0].revents != 0 {
            let events: Vec<(WatchDescriptor, EventMask, Option<OsString>)> = match st.inotify.read_events(&mut buf) {
                Ok(evs) => evs.map(|e| (e.wd, e.mask, e.name.map(|n| n.to_os_string()))).collect(),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Vec::new(),
                Err(error) => return Err(CgroupError::Io { path: "inotify read".into(), error }),
            };
            for (wd, mask, name) in events {
                st.handle(&wd, mask, name)?;
            }
        }
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let every = if st.unwatched > 0 { reconcile_every.min(UNWATCHED_RECONCILE) } else { reconcile_every };
        if last_reconcile.elapsed() >= every {
            st.reconcile()?;
            last_reconcile = Instant::now();
        }
        watches.store(st.wd_path.len(), Ordering::Relaxed);
        unwatched.store(st.unwatched, Ordering::Relaxed);
    }
    Ok(())
}
