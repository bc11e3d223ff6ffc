//! Young containers tagged at once. The engine attaches a new container at its next wake-up
//! (as late as an interval later) and the backend's upkeep moves threads that joined a cgroup
//! from outside every 500 ms; a runtime puts a container's first process into its cgroup from
//! outside, so until then the container's first instructions are charged to the default group.
//!
//! The tagger closes that gap without the module and without a runtime hook: the cgroup
//! watcher tells it of each new container the moment its directory appears ([`TagSender`]),
//! it watches that cgroup's `cgroup.events` (the kernel notifies a change of `populated`), and
//! as soon as the cgroup holds a thread it makes the container's MON group (named as the
//! backend names it, so the backend adopts it) and moves every thread in, re-reading until
//! none is left outside (threads forked meanwhile). It does what `cachescope hook oci` does,
//! from the first thread the kernel reports rather than from the runtime's call.
//!
//! It follows a container for [`YOUNG`] only; after that the backend's own upkeep takes over.
//! A container whose threads already sit in another owner's MON group (a runtime that made
//! one) is left to it; a refused mkdir (RMIDs exhausted or in limbo) is left to the backend's
//! RMID policy.

use crate::{Resctrl, ResctrlError};
use inotify::{Inotify, WatchDescriptor, WatchMask};
use std::collections::HashMap;
use std::io;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long a new container is followed.
pub const YOUNG: Duration = Duration::from_secs(2);

/// The threads of a container's cgroup directory (its nested cgroups' included).
pub type Threads = fn(&Path) -> io::Result<Vec<u32>>;

struct Young {
    id: String,
    dir: PathBuf,
}

/// Tells the tagger of a new container; cheap, never blocks (the cgroup watcher calls it).
#[derive(Clone)]
pub struct TagSender {
    tx: Sender<Young>,
    wake: Arc<OwnedFd>,
}

impl TagSender {
    /// Container `id` (the backend's id for it) started in cgroup directory `dir`.
    pub fn young(&self, id: &str, dir: &Path) {
        if self.tx.send(Young { id: id.to_string(), dir: dir.to_path_buf() }).is_ok() {
            ring(&self.wake);
        }
    }
}

/// What the tagger did, for the run's end.
#[derive(Debug, Default)]
pub struct TagStats {
    /// Containers whose threads it moved into their group.
    pub tagged: AtomicU64,
    pub threads_moved: AtomicU64,
    /// Containers left alone: another owner's group, or no RMID to be had.
    pub left: AtomicU64,
}

/// The tagger's thread; stopped when dropped.
pub struct Tagger {
    stop: Arc<AtomicBool>,
    wake: Arc<OwnedFd>,
    stats: Arc<TagStats>,
    handle: Option<JoinHandle<()>>,
}

impl Tagger {
    pub fn start(rc: Resctrl, threads: Threads) -> io::Result<(Tagger, TagSender)> {
        // SAFETY: eventfd(2) with valid flags; it returns a new descriptor or -1.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` was just returned by eventfd and is owned by nothing else.
        let wake = Arc::new(unsafe { OwnedFd::from_raw_fd(fd) });
        let inotify = Inotify::init()?;
        let (tx, rx) = channel();
        let stop = Arc::new(AtomicBool::new(false));
        let stats = Arc::new(TagStats::default());
        let mut w = Work { rc, threads, inotify, rx, young: HashMap::new(), stats: stats.clone() };
        let (s, k) = (stop.clone(), wake.clone());
        let handle = std::thread::Builder::new().name("resctrl-tagger".into()).spawn(move || w.run(&s, &k))?;
        Ok((Tagger { stop, wake: wake.clone(), stats, handle: Some(handle) }, TagSender { tx, wake }))
    }

    pub fn stats(&self) -> &TagStats {
        &self.stats
    }
}

impl Drop for Tagger {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        ring(&self.wake);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

fn ring(fd: &OwnedFd) {
    let one = 1u64.to_ne_bytes();
    // SAFETY: writes 8 bytes from a live buffer to an eventfd we own; a full counter (EAGAIN)
    // already means "wake up".
    unsafe { libc::write(fd.as_raw_fd(), one.as_ptr().cast(), one.len()) };
}

struct Entry {
    id: String,
    dir: PathBuf,
    until: Instant,
    /// The group its threads go to, once made.
    group: Option<crate::GroupRef>,
}

struct Work {
    rc: Resctrl,
    threads: Threads,
    inotify: Inotify,
    rx: Receiver<Young>,
    young: HashMap<WatchDescriptor, Entry>,
    stats: Arc<TagStats>,
}

impl Work {
    fn run(&mut self, stop: &AtomicBool, wake: &OwnedFd) {
        let mut buf = [0u8; 4096];
        while !stop.load(Ordering::Relaxed) {
            let mut fds = [
                libc::pollfd { fd: self.inotify.as_fd().as_raw_fd(), events: libc::POLLIN, revents: 0 },
                libc::pollfd { fd: wake.as_raw_fd(), events: libc::POLLIN, revents: 0 },
            ];
            // With young containers, wake at least every 100 ms to let the old ones go.
            let timeout = if self.young.is_empty() { -1 } else { 100 };
            // SAFETY: `fds` is a live array of two pollfd, its length passed with it.
            unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout) };
            let mut count = [0u8; 8];
            // SAFETY: reads at most 8 bytes into a live 8-byte buffer; EAGAIN when not rung.
            unsafe { libc::read(wake.as_raw_fd(), count.as_mut_ptr().cast(), count.len()) };
            while let Ok(y) = self.rx.try_recv() {
                self.follow(y);
            }
            let mut due = Vec::new();
            if let Ok(events) = self.inotify.read_events(&mut buf) {
                due.extend(events.map(|e| e.wd));
            }
            for wd in due {
                if let Some(mut e) = self.young.remove(&wd) {
                    self.attempt(&mut e);
                    self.young.insert(wd, e);
                }
            }
            let now = Instant::now();
            let old: Vec<WatchDescriptor> =
                self.young.iter().filter(|(_, e)| e.until <= now).map(|(wd, _)| wd.clone()).collect();
            for wd in old {
                self.young.remove(&wd);
                let _ = self.inotify.watches().remove(wd);
            }
        }
    }

    /// Watch a new container's `cgroup.events`, and tag it if it already holds threads.
    fn follow(&mut self, y: Young) {
        let Ok(wd) = self.inotify.watches().add(y.dir.join("cgroup.events"), WatchMask::MODIFY) else {
            return; // Gone already.
        };
        let mut e = Entry { id: y.id, dir: y.dir, until: Instant::now() + YOUNG, group: None };
        self.attempt(&mut e);
        self.young.insert(wd, e);
    }

    /// Move the container's threads into its group, made first if need be.
    fn attempt(&self, e: &mut Entry) {
        let Ok(tids) = (self.threads)(&e.dir) else { return };
        let Some(&first) = tids.first() else { return };
        if e.group.is_none() {
            match self.group_for(&e.id, first) {
                Ok(Some(g)) => e.group = Some(g),
                Ok(None) | Err(_) => {
                    self.stats.left.fetch_add(1, Ordering::Relaxed);
                    e.until = Instant::now();
                    return;
                }
            }
        }
        let Some(g) = &e.group else { return };
        // Threads already in (an earlier wake-up's) are not written again.
        let dir = e.dir.clone();
        let threads = self.threads;
        let mut list = || threads(&dir);
        if let Ok(a) = self.rc.assign_missing(g, &mut list) {
            if a.moved > 0 {
                self.stats.tagged.fetch_add(1, Ordering::Relaxed);
                self.stats.threads_moved.fetch_add(a.moved as u64, Ordering::Relaxed);
            }
        }
    }

    /// The container's group under the CTRL_MON group of its first thread; None where that
    /// thread is in another owner's MON group already.
    fn group_for(&self, id: &str, tid: u32) -> Result<Option<crate::GroupRef>, ResctrlError> {
        let (ctrl, mon) = self.rc.groups_of_thread(tid);
        if mon.is_some_and(|m| crate::id_of_group(&m).is_none()) {
            return Ok(None);
        }
        let _lock = self.rc.lock()?;
        self.rc.ensure_group(&ctrl, id).map(Some)
    }
}
