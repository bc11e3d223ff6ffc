//! An emulated resctrl filesystem, served over FUSE, backed by the emulated RDT platform: mkdir
//! in `mon_groups` allocates an RMID (ENOSPC when none is free, EBUSY when only limbo ones
//! remain, `info/last_cmd_status` saying why), writing a thread id to `tasks` moves it (ESRCH,
//! EINVAL as the kernel), rmdir frees the RMID into limbo, `mon_data` reads go through the
//! emulated MSRs and return counts or `Unavailable` / `Error` / `Unassigned`.
//!
//! The point is that cachescope's real resctrl backend runs unchanged against it: real
//! syscalls through the real VFS. Threads are real host threads; which emulated workload a
//! thread's traffic belongs to is the [`TaskResolver`]'s answer.

pub mod play;
mod state;

pub use state::{Fault, Kind, Options, State, TaskLookup, TaskResolver};

use cachescope_emu::EmuPlatform;
use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, LockOwner, OpenFlags,
    ReplyAttr, ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyWrite, Request, WriteFlags,
};
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

/// Nothing is cached by the kernel: groups come and go, counters change on every read.
const TTL: Duration = Duration::ZERO;

/// Why FUSE cannot be used here, or Ok.
pub fn fuse_available() -> Result<(), String> {
    // SAFETY: geteuid has no preconditions and touches no memory.
    if unsafe { libc::geteuid() } != 0 {
        return Err("not root: mounting the emulated resctrl filesystem needs root".into());
    }
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/fuse")
        .map(|_| ())
        .map_err(|e| format!("/dev/fuse: {e}"))
}

struct Fs {
    state: Arc<Mutex<State>>,
}

fn lock(s: &Mutex<State>) -> MutexGuard<'_, State> {
    s.lock().unwrap_or_else(|p| p.into_inner())
}

fn attr(ino: u64, kind: Kind) -> FileAttr {
    let t = SystemTime::now();
    let dir = kind.is_dir();
    let writable = matches!(kind, Kind::Tasks(_) | Kind::Cpus(_) | Kind::CpusList(_) | Kind::Threshold);
    FileAttr {
        ino: INodeNo(ino),
        size: 0,
        blocks: 0,
        atime: t,
        mtime: t,
        ctime: t,
        crtime: t,
        kind: if dir { FileType::Directory } else { FileType::RegularFile },
        perm: if dir {
            0o755
        } else if writable {
            0o644
        } else {
            0o444
        },
        nlink: if dir { 2 } else { 1 },
        uid: 0,
        gid: 0,
        rdev: 0,
        blksize: 4096,
        flags: 0,
    }
}

impl Filesystem for Fs {
    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let mut st = lock(&self.state);
        st.tick();
        match name.to_str().and_then(|n| st.lookup(parent.0, n)) {
            Some((ino, kind)) => reply.entry(&TTL, &attr(ino, kind), Generation(0)),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        let st = lock(&self.state);
        match st.node(ino.0) {
            Some((_, kind)) => reply.attr(&TTL, &attr(ino.0, kind)),
            None => reply.error(Errno::ENOENT),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        _mode: Option<u32>,
        _uid: Option<u32>,
        _gid: Option<u32>,
        _size: Option<u64>,
        _atime: Option<fuser::TimeOrNow>,
        _mtime: Option<fuser::TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        // O_TRUNC on `tasks` (shell redirection) is a no-op, as on the kernel's files.
        let st = lock(&self.state);
        match st.node(ino.0) {
            Some((_, kind)) => reply.attr(&TTL, &attr(ino.0, kind)),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let st = lock(&self.state);
        match st.node(ino.0) {
            Some((_, k)) if !k.is_dir() => reply.opened(FileHandle(0), FopenFlags::FOPEN_DIRECT_IO),
            Some(_) => reply.error(Errno::EISDIR),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let mut st = lock(&self.state);
        st.tick();
        match st.read_file(ino.0) {
            Ok(text) => {
                let b = text.as_bytes();
                let start = (offset as usize).min(b.len());
                let end = (start + size as usize).min(b.len());
                reply.data(&b[start..end]);
            }
            Err(e) => reply.error(Errno::from_i32(e)),
        }
    }

    fn write(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let mut st = lock(&self.state);
        st.tick();
        match st.write_file(ino.0, data, req.pid()) {
            Ok(()) => reply.written(data.len() as u32),
            Err(e) => reply.error(Errno::from_i32(e)),
        }
    }

    /// ENOSYS, as a filesystem without a flush operation: the kernel then stops sending FLUSH
    /// for the whole connection. A FLUSH is waited for uninterruptibly, and this process is
    /// both the server and a client: killed while closing one of these files, it would wait
    /// forever on a server it has itself lost (SIGKILL left it in D state, holding the mount).
    fn flush(&self, _req: &Request, _ino: INodeNo, _fh: FileHandle, _lock_owner: LockOwner, reply: ReplyEmpty) {
        reply.error(Errno::ENOSYS);
    }

    fn readdir(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, offset: u64, mut reply: ReplyDirectory) {
        let st = lock(&self.state);
        if !st.node(ino.0).is_some_and(|(_, k)| k.is_dir()) {
            reply.error(Errno::ENOTDIR);
            return;
        }
        let mut entries = vec![(ino.0, Kind::Dir, ".".to_string()), (ino.0, Kind::Dir, "..".to_string())];
        entries.extend(st.children(ino.0));
        for (i, (child, kind, name)) in entries.into_iter().enumerate().skip(offset as usize) {
            let ft = if kind.is_dir() { FileType::Directory } else { FileType::RegularFile };
            if reply.add(INodeNo(child), i as u64 + 1, ft, name) {
                break;
            }
        }
        reply.ok();
    }

    fn mkdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, _mode: u32, _umask: u32, reply: ReplyEntry) {
        let mut st = lock(&self.state);
        st.tick();
        let Some(name) = name.to_str() else {
            reply.error(Errno::EINVAL);
            return;
        };
        match st.mkdir(parent.0, name) {
            Ok(ino) => reply.entry(&TTL, &attr(ino, Kind::Group(0)), Generation(0)),
            Err(e) => reply.error(Errno::from_i32(e)),
        }
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let mut st = lock(&self.state);
        st.tick();
        match name.to_str().map(|n| st.rmdir(parent.0, n)) {
            Some(Ok(())) => reply.ok(),
            Some(Err(e)) => reply.error(Errno::from_i32(e)),
            None => reply.error(Errno::ENOENT),
        }
    }
}

/// A mounted emulated resctrl filesystem; unmounted (and its directory removed) on drop.
pub struct Mounted {
    session: Option<fuser::BackgroundSession>,
    dir: PathBuf,
    state: Arc<Mutex<State>>,
    platform: Arc<EmuPlatform>,
}

#[derive(Debug, thiserror::Error)]
pub enum MountError {
    #[error("emulated resctrl: {0}")]
    Config(String),
    #[error("FUSE unavailable: {0}")]
    NoFuse(String),
    #[error("mounting the emulated resctrl filesystem at {path}: {error}")]
    Mount { path: PathBuf, error: std::io::Error },
}

impl Mounted {
    /// Mount on a fresh directory under the system temp dir.
    pub fn start(platform: Arc<EmuPlatform>, opts: Options, resolver: TaskResolver) -> Result<Mounted, MountError> {
        static N: AtomicU32 = AtomicU32::new(0);
        fuse_available().map_err(MountError::NoFuse)?;
        let dir = std::env::temp_dir().join(format!(
            "cachescope-resctrl-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).map_err(|error| MountError::Mount { path: dir.clone(), error })?;
        let state = Arc::new(Mutex::new(State::new(platform.clone(), opts, resolver).map_err(MountError::Config)?));
        let mut cfg = fuser::Config::default();
        cfg.mount_options =
            vec![fuser::MountOption::FSName("resctrl".into()), fuser::MountOption::Subtype("cachescope-emu".into())];
        let session = fuser::spawn_mount(Fs { state: state.clone() }, &dir, &cfg).map_err(|error| {
            let _ = std::fs::remove_dir(&dir);
            MountError::Mount { path: dir.clone(), error }
        })?;
        // The first close sends the only FLUSH (answered ENOSYS, see `flush`): have it now,
        // while the server surely runs, not when the process is being killed.
        let _ = std::fs::File::open(dir.join("info/L3_MON/num_rmids"));
        Ok(Mounted { session: Some(session), dir, state, platform })
    }

    /// The mount point: hand it to the resctrl client as its root.
    pub fn root(&self) -> &Path {
        &self.dir
    }

    pub fn platform(&self) -> &Arc<EmuPlatform> {
        &self.platform
    }

    /// Direct access to the emulated kernel state (fault injection, RMID counts).
    pub fn state(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        if let Some(s) = self.session.take() {
            let _ = s.umount_and_join();
        }
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// The production resolver: a thread exists when `/proc/<tid>` does; its workload is what
/// `workload_of` says of its cgroup v2 path (the `0::` line of `/proc/<tid>/cgroup`).
pub fn proc_resolver(
    proc_root: PathBuf,
    workload_of: impl Fn(&str) -> Option<String> + Send + Sync + 'static,
) -> TaskResolver {
    Box::new(move |tid| {
        let dir = proc_root.join(tid.to_string());
        let Ok(text) = std::fs::read_to_string(dir.join("cgroup")) else {
            return if dir.exists() { TaskLookup::Exists(None) } else { TaskLookup::Missing };
        };
        let path = text.lines().find_map(|l| l.strip_prefix("0::")).unwrap_or("");
        TaskLookup::Exists(workload_of(path.trim_start_matches('/')))
    })
}

#[cfg(test)]
mod tests;
