//! A client of the Linux resctrl filesystem (`Documentation/filesystems/resctrl.rst`), for
//! cache occupancy and memory bandwidth per container: one MON group per container.
//!
//! The root path is a parameter: the real mount (found in mountinfo, or mounted on request),
//! a fake tree in a tempdir, or the emulated filesystem served over FUSE. Everything here is
//! plain file I/O, so the same code runs against all three.
//!
//! Rules kept: groups we create are named [`PREFIX`] + a validated container id, and groups
//! without our prefix are never modified or removed; changes to groups happen under `flock`
//! on the mount ([`Resctrl::lock`]); kernel refusals (ENOSPC, EBUSY, ESRCH) are values.

pub mod counters;
mod reader;
pub mod session;
pub mod tagger;
mod value;

pub use reader::{GroupReader, Read, ReadError};
pub use session::{ContainerGroups, CounterPolicy, SessionStats, DEFAULT_INTERVAL, MIN_INTERVAL};
pub use value::Value;

use cachescope_hw::msr::Event;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// Name prefix of every group cachescope creates.
pub const PREFIX: &str = "cachescope-";

/// Longest container id accepted in a group name (NAME_MAX is 255; ids are far shorter).
pub const MAX_ID_LEN: usize = 128;

#[derive(Debug, thiserror::Error)]
pub enum ResctrlError {
    #[error("resctrl is not mounted (no resctrl line in {0}); mount it (`mount -t resctrl resctrl /sys/fs/resctrl`) or pass --mount-resctrl")]
    NotMounted(String),
    #[error("{path}: {error}")]
    Io { path: PathBuf, error: io::Error },
    #[error("{path}: unexpected contents {text:?}")]
    Parse { path: PathBuf, text: String },
    #[error("{0}: no L3 monitoring in this resctrl mount (info/L3_MON missing)")]
    NoL3Monitoring(PathBuf),
    #[error(
        "container id {0:?} is refused as a resctrl group name: only A-Z a-z 0-9 . _ -, no leading dot, 1 to 128 bytes"
    )]
    BadId(String),
    /// mkdir failed with ENOSPC: every RMID is in use.
    #[error("RMIDs exhausted: mkdir {path} failed with ENOSPC (last_cmd_status: {status})")]
    Exhausted { path: PathBuf, status: String },
    /// mkdir failed with EBUSY: the free RMIDs are all still in limbo.
    #[error("only RMIDs in limbo are left: mkdir {path} failed with EBUSY (last_cmd_status: {status})")]
    OnlyLimbo { path: PathBuf, status: String },
    #[error("{path}: mkdir failed: {error} (last_cmd_status: {status})")]
    Mkdir { path: PathBuf, error: io::Error, status: String },
    #[error("group {0} was not created by cachescope; refusing to touch it")]
    NotOurs(String),
    /// An assignment was refused because no counter is free in a domain.
    #[error("no assignable counter free: {path} (last_cmd_status: {status})")]
    NoCounter { path: PathBuf, status: String },
}

/// For the engine: a mount that is gone, or that no longer monitors L3, ends the run as
/// unavailable; anything else resctrl refused is a failure.
impl From<ResctrlError> for cachescope_engine::PartError {
    fn from(e: ResctrlError) -> Self {
        match e {
            ResctrlError::NotMounted(_) | ResctrlError::NoL3Monitoring(_) => cachescope_engine::PartError::gone(e),
            e => cachescope_engine::PartError::failed(e),
        }
    }
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> ResctrlError + '_ {
    move |error| ResctrlError::Io { path: path.to_path_buf(), error }
}

/// A resctrl mount.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resctrl {
    root: PathBuf,
}

/// What `info/L3_MON` says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MonInfo {
    /// RMIDs the kernel manages, RMID 0 (the default group) included.
    pub num_rmids: u32,
    /// `mon_features`, one event file name per entry (llc_occupancy, mbm_total_bytes, ...).
    pub features: Vec<String>,
    /// Limbo threshold in bytes.
    pub max_threshold_occupancy: Option<u64>,
    /// Assignable MBM counters (AMD ABMC, `mbm_assign_mode`), when the kernel has them.
    pub assign: Option<AssignInfo>,
}

impl MonInfo {
    /// The events this client reads: those of [`Event::ALL`] listed in `mon_features` (an
    /// event's resctrl file name is [`Event::name`]).
    pub fn events(&self) -> Vec<Event> {
        Event::ALL.into_iter().filter(|e| self.features.iter().any(|f| f == e.name())).collect()
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AssignInfo {
    /// The active mode (the bracketed line of `mbm_assign_mode`), e.g. `mbm_event` or `default`.
    pub mode: String,
    pub modes: Vec<String>,
    /// `num_mbm_cntrs` per domain id (a bare number applies to every domain: id None).
    pub counters: Vec<(Option<u32>, u32)>,
    /// `available_mbm_cntrs`, the same way: the counters no group holds.
    pub available: Vec<(Option<u32>, u32)>,
    /// `mbm_assign_on_mkdir`: whether a new group gets counters (None: no such file).
    pub on_mkdir: Option<bool>,
}

impl AssignInfo {
    /// Whether the kernel counts bandwidth only where a counter is assigned.
    pub fn active(&self) -> bool {
        self.mode == "mbm_event"
    }

    /// Counters of `domain` in `list` (`counters` or `available`).
    pub fn of(list: &[(Option<u32>, u32)], domain: u32) -> u32 {
        list.iter().find(|(d, _)| d.is_none_or(|d| d == domain)).map_or(0, |(_, n)| *n)
    }
}

/// An L3 monitoring domain: `mon_data/mon_L3_XX`, with SNC sub-domains `mon_sub_L3_YY`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Domain {
    pub id: u32,
    pub sub: Vec<u32>,
}

/// Refuse any container id that could escape a path component or confuse a reader: only
/// `[A-Za-z0-9._-]`, no leading dot (so never `.` or `..`), 1 to [`MAX_ID_LEN`] bytes.
pub fn group_name(id: &str) -> Result<String, ResctrlError> {
    let ok = !id.is_empty()
        && id.len() <= MAX_ID_LEN
        && !id.starts_with('.')
        && id.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if ok {
        Ok(format!("{PREFIX}{id}"))
    } else {
        Err(ResctrlError::BadId(id.to_string()))
    }
}

/// The container id in one of our group names, None for anyone else's group.
pub fn id_of_group(name: &str) -> Option<&str> {
    let id = name.strip_prefix(PREFIX)?;
    group_name(id).is_ok().then_some(id)
}

fn parse_u64(path: &Path, text: &str) -> Result<u64, ResctrlError> {
    text.trim().parse().map_err(|_| ResctrlError::Parse { path: path.to_path_buf(), text: text.to_string() })
}

/// `mon_L3_07` → 7; also `mon_sub_L3_07`.
fn domain_id(name: &str, prefix: &str) -> Option<u32> {
    let n = name.strip_prefix(prefix)?;
    (!n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())).then(|| n.parse().ok()).flatten()
}

/// A group directory: the default group is the mount root (`ctrl` empty), a CTRL_MON group
/// is `<root>/<ctrl>`, a MON group is `<root>/<ctrl>/mon_groups/<name>`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct GroupRef {
    pub ctrl: String,
    pub name: String,
}

/// What happened to the threads written to a group's `tasks`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Assigned {
    pub moved: usize,
    /// Threads that exited before they could be moved (ESRCH): a normal event.
    pub vanished: usize,
    /// Threads the kernel refused (EINVAL: e.g. in another CTRL_MON group), with the reason.
    pub refused: Vec<(u32, String)>,
    /// Times the thread list was read before it stopped changing.
    pub rounds: usize,
}

/// An exclusive `flock` on the mount, as resctrl.rst asks of cooperating agents; released on drop.
pub struct MountLock {
    _dir: File,
}

impl Resctrl {
    /// Use the resctrl tree at `root` (a real mount, a fake tree, an emulated mount).
    pub fn at(root: impl Into<PathBuf>) -> Resctrl {
        Resctrl { root: root.into() }
    }

    /// Find the mount in `<proc_root>/self/mountinfo`.
    pub fn find(proc_root: &Path) -> Result<Resctrl, ResctrlError> {
        let mi = proc_root.join("self/mountinfo");
        let mounts = cachescope_platform::mountinfo::read(proc_root).map_err(io_err(&mi))?;
        let found = cachescope_platform::mountinfo::mounts_of(&mounts, "resctrl").next().map(|m| m.mount_point.clone());
        found.map(Resctrl::at).ok_or_else(|| ResctrlError::NotMounted(mi.display().to_string()))
    }

    /// Mount resctrl at `target` (root, a kernel with resctrl).
    pub fn mount(target: &Path) -> Result<Resctrl, ResctrlError> {
        use std::ffi::CString;
        use std::os::unix::ffi::OsStrExt;
        let bad = |_| ResctrlError::Io { path: target.to_path_buf(), error: io::ErrorKind::InvalidInput.into() };
        let t = CString::new(target.as_os_str().as_bytes()).map_err(bad)?;
        let fs = c"resctrl";
        // SAFETY: all pointers are valid NUL-terminated strings that outlive the call; data is null.
        let rc = unsafe { libc::mount(fs.as_ptr(), t.as_ptr(), fs.as_ptr(), 0, std::ptr::null()) };
        if rc != 0 {
            let e = io::Error::last_os_error();
            // Mounted already (by us or someone else): use it.
            if e.raw_os_error() != Some(libc::EBUSY) {
                return Err(ResctrlError::Io { path: target.to_path_buf(), error: e });
            }
        }
        Ok(Resctrl::at(target))
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Take the mount's lock (blocks while another agent holds it).
    pub fn lock(&self) -> Result<MountLock, ResctrlError> {
        let dir = File::open(&self.root).map_err(io_err(&self.root))?;
        use std::os::fd::AsRawFd;
        // SAFETY: flock on a descriptor we own; it touches no memory of ours.
        let rc = unsafe { libc::flock(dir.as_raw_fd(), libc::LOCK_EX) };
        if rc != 0 {
            return Err(ResctrlError::Io { path: self.root.clone(), error: io::Error::last_os_error() });
        }
        Ok(MountLock { _dir: dir })
    }

    fn read(&self, rel: &str) -> Result<Option<String>, ResctrlError> {
        let p = self.root.join(rel);
        match std::fs::read_to_string(&p) {
            Ok(t) => Ok(Some(t)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(ResctrlError::Io { path: p, error: e }),
        }
    }

    /// `info/last_cmd_status`, trimmed ("ok" when the last command succeeded).
    pub fn last_cmd_status(&self) -> String {
        match self.read("info/last_cmd_status") {
            Ok(Some(t)) => t.trim().to_string(),
            _ => "unreadable".into(),
        }
    }

    /// Read `info/L3_MON`.
    pub fn info(&self) -> Result<MonInfo, ResctrlError> {
        let dir = self.root.join("info/L3_MON");
        if !dir.is_dir() {
            return Err(ResctrlError::NoL3Monitoring(self.root.clone()));
        }
        let req = |name: &str| -> Result<(PathBuf, String), ResctrlError> {
            let p = dir.join(name);
            let t = std::fs::read_to_string(&p).map_err(io_err(&p))?;
            Ok((p, t))
        };
        let (p, t) = req("num_rmids")?;
        let num_rmids =
            u32::try_from(parse_u64(&p, &t)?).map_err(|_| ResctrlError::Parse { path: p.clone(), text: t.clone() })?;
        let (_, t) = req("mon_features")?;
        let features = t.lines().map(str::trim).filter(|l| !l.is_empty()).map(String::from).collect();
        let max_threshold_occupancy = match self.read("info/L3_MON/max_threshold_occupancy")? {
            Some(t) => Some(parse_u64(&dir.join("max_threshold_occupancy"), &t)?),
            None => None,
        };
        let assign = match self.read("info/L3_MON/mbm_assign_mode")? {
            None => None,
            Some(modes_text) => {
                let mut mode = String::new();
                let mut modes = Vec::new();
                for l in modes_text.lines().map(str::trim).filter(|l| !l.is_empty()) {
                    let m = l.trim_start_matches('[').trim_end_matches(']');
                    if l.starts_with('[') {
                        mode = m.to_string();
                    }
                    modes.push(m.to_string());
                }
                let counters = self.counters_file("num_mbm_cntrs")?;
                let available = self.counters_file("available_mbm_cntrs")?;
                let on_mkdir = match self.read("info/L3_MON/mbm_assign_on_mkdir")? {
                    Some(t) => Some(parse_u64(&dir.join("mbm_assign_on_mkdir"), &t)? != 0),
                    None => None,
                };
                Some(AssignInfo { mode, modes, counters, available, on_mkdir })
            }
        };
        Ok(MonInfo { num_rmids, features, max_threshold_occupancy, assign })
    }

    /// `info/L3_MON/<name>` as counters per domain (empty where the file is absent).
    pub fn counters_file(&self, name: &str) -> Result<Vec<(Option<u32>, u32)>, ResctrlError> {
        match self.read(&format!("info/L3_MON/{name}"))? {
            Some(t) => parse_counters(&self.root.join("info/L3_MON").join(name), &t),
            None => Ok(Vec::new()),
        }
    }

    /// Write `mbm_assign_on_mkdir` (whether new groups get counters; `mbm_event` mode only).
    pub fn set_assign_on_mkdir(&self, on: bool) -> Result<(), ResctrlError> {
        let p = self.root.join("info/L3_MON/mbm_assign_on_mkdir");
        std::fs::write(&p, if on { "1\n" } else { "0\n" }).map_err(io_err(&p))
    }

    /// Assign (`on`) or release a counter for `event` (its resctrl file name) of group `g` in
    /// each of `domains`, in one write to its `mbm_L3_assignments`. A domain without a free
    /// counter refuses the write ([`ResctrlError::NoCounter`]); the kernel may have applied
    /// the domains before it.
    pub fn assign(&self, g: &GroupRef, event: &str, domains: &[u32], on: bool) -> Result<(), ResctrlError> {
        let p = self.group_dir(g).join("mbm_L3_assignments");
        let state = if on { 'e' } else { '_' };
        let list: Vec<String> = domains.iter().map(|d| format!("{d}={state}")).collect();
        let text = format!("{event}:{}\n", list.join(";"));
        let mut f = OpenOptions::new().write(true).open(&p).map_err(io_err(&p))?;
        match f.write_all(text.as_bytes()) {
            Ok(()) => Ok(()),
            // ENOSPC is what fs/resctrl returns; its status line says so whatever the errno.
            Err(e) => {
                let status = self.last_cmd_status();
                if e.raw_os_error() == Some(libc::ENOSPC) || status.contains("Failed to allocate counter") {
                    Err(ResctrlError::NoCounter { path: p, status })
                } else {
                    Err(ResctrlError::Io { path: p, error: e })
                }
            }
        }
    }

    /// The L3 monitoring domains, from the default group's `mon_data` (ids may have gaps).
    pub fn domains(&self) -> Result<Vec<Domain>, ResctrlError> {
        let dir = self.root.join("mon_data");
        let mut out = Vec::new();
        for name in dir_names(&dir)? {
            if let Some(id) = domain_id(&name, "mon_L3_") {
                let mut sub: Vec<u32> =
                    dir_names(&dir.join(&name))?.iter().filter_map(|n| domain_id(n, "mon_sub_L3_")).collect();
                sub.sort_unstable();
                out.push(Domain { id, sub });
            }
        }
        out.sort_by_key(|d| d.id);
        Ok(out)
    }

    /// The directory of a group.
    pub fn group_dir(&self, g: &GroupRef) -> PathBuf {
        let ctrl = if g.ctrl.is_empty() { self.root.clone() } else { self.root.join(&g.ctrl) };
        if g.name.is_empty() {
            ctrl
        } else {
            ctrl.join("mon_groups").join(&g.name)
        }
    }

    /// CTRL_MON groups: "" (the default group) and every directory of the root that has
    /// `mon_groups`.
    pub fn ctrl_groups(&self) -> Result<Vec<String>, ResctrlError> {
        let mut out = vec![String::new()];
        for n in dir_names(&self.root)? {
            if !matches!(n.as_str(), "info" | "mon_groups" | "mon_data")
                && self.root.join(&n).join("mon_groups").is_dir()
            {
                out.push(n);
            }
        }
        Ok(out)
    }

    /// Every MON group under every CTRL_MON group, ours or not.
    pub fn mon_groups(&self) -> Result<Vec<GroupRef>, ResctrlError> {
        let mut out = Vec::new();
        for ctrl in self.ctrl_groups()? {
            let dir = self.group_dir(&GroupRef { ctrl: ctrl.clone(), name: String::new() }).join("mon_groups");
            for name in dir_names(&dir)? {
                out.push(GroupRef { ctrl: ctrl.clone(), name });
            }
        }
        Ok(out)
    }

    /// The CTRL_MON group ("" = default) and MON group (None: none) whose `tasks` list `tid`,
    /// found by reading them: where /proc/PID/resctrl does not exist. Our own MON groups are
    /// not looked at (a thread found in one is ours already).
    pub fn group_of_task(&self, tid: u32) -> (String, Option<String>) {
        let has = |g: &GroupRef| self.group_tasks(g).is_ok_and(|t| t.contains(&tid));
        let Ok(ctrls) = self.ctrl_groups() else { return (String::new(), None) };
        let ctrl = ctrls
            .iter()
            .find(|c| !c.is_empty() && has(&GroupRef { ctrl: (*c).clone(), name: String::new() }))
            .cloned()
            .unwrap_or_default();
        let dir = self.group_dir(&GroupRef { ctrl: ctrl.clone(), name: String::new() }).join("mon_groups");
        let mon = dir_names(&dir)
            .unwrap_or_default()
            .into_iter()
            .find(|name| id_of_group(name).is_none() && has(&GroupRef { ctrl: ctrl.clone(), name: name.clone() }));
        (ctrl, mon)
    }

    /// The CTRL_MON group ("" = default) and MON group (None: none) thread `tid` is in: as
    /// /proc/TID/resctrl says, or, on kernels without it (CONFIG_PROC_CPU_RESCTRL, off in
    /// Debian's), as the groups' tasks files say.
    pub fn groups_of_thread(&self, tid: u32) -> (String, Option<String>) {
        let proc = Path::new("/proc");
        if proc.join(tid.to_string()).join("resctrl").exists() {
            return (ctrl_group_of(proc, tid).unwrap_or_default(), mon_group_of(proc, tid));
        }
        self.group_of_task(tid)
    }

    /// Container `id`'s MON group under `ctrl`: made, or the one of that name already there
    /// (a hook's, or the tagger's). Call under [`lock`](Self::lock).
    pub fn ensure_group(&self, ctrl: &str, id: &str) -> Result<GroupRef, ResctrlError> {
        match self.create_group(ctrl, id) {
            Err(ResctrlError::Mkdir { error, .. }) if error.kind() == io::ErrorKind::AlreadyExists => {
                Ok(GroupRef { ctrl: ctrl.to_string(), name: group_name(id)? })
            }
            r => r,
        }
    }

    /// Our groups (left over from an earlier run, or live), with their container ids.
    pub fn our_groups(&self) -> Result<Vec<(GroupRef, String)>, ResctrlError> {
        Ok(self
            .mon_groups()?
            .into_iter()
            .filter_map(|g| id_of_group(&g.name).map(|id| (g.clone(), id.to_string())))
            .collect())
    }

    /// Create the MON group of container `id` under CTRL_MON group `ctrl` ("" = default).
    /// ENOSPC and EBUSY come back as [`ResctrlError::Exhausted`] / [`ResctrlError::OnlyLimbo`].
    pub fn create_group(&self, ctrl: &str, id: &str) -> Result<GroupRef, ResctrlError> {
        let g = GroupRef { ctrl: ctrl.to_string(), name: group_name(id)? };
        let path = self.group_dir(&g);
        match std::fs::create_dir(&path) {
            Ok(()) => Ok(g),
            Err(e) => {
                let status = self.last_cmd_status();
                Err(match e.raw_os_error() {
                    Some(libc::ENOSPC) => ResctrlError::Exhausted { path, status },
                    Some(libc::EBUSY) => ResctrlError::OnlyLimbo { path, status },
                    _ => ResctrlError::Mkdir { path, error: e, status },
                })
            }
        }
    }

    /// Remove one of our groups (its threads fall back to the parent group). A group that is
    /// already gone is fine.
    pub fn remove_group(&self, g: &GroupRef) -> Result<(), ResctrlError> {
        if id_of_group(&g.name).is_none() {
            return Err(ResctrlError::NotOurs(g.name.clone()));
        }
        let p = self.group_dir(g);
        match std::fs::remove_dir(&p) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(ResctrlError::Io { path: p, error: e }),
        }
    }

    /// The group directory's inode: a re-created group has a new one.
    pub fn generation(&self, g: &GroupRef) -> Option<u64> {
        std::fs::metadata(self.group_dir(g)).ok().map(|m| m.ino())
    }

    /// Move every thread of a container into group `g`: write each id to `tasks` (one per
    /// write(2), which every kernel accepts), then re-read the list until it stops changing, so
    /// threads spawned meanwhile are not missed (children inherit the group at fork from then
    /// on). Threads that exit meanwhile (ESRCH) are counted, not errors.
    pub fn assign_tasks(
        &self,
        g: &GroupRef,
        list: &mut dyn FnMut() -> io::Result<Vec<u32>>,
    ) -> Result<Assigned, ResctrlError> {
        const MAX_ROUNDS: usize = 16;
        let path = self.group_dir(g).join("tasks");
        let mut f = OpenOptions::new().write(true).open(&path).map_err(io_err(&path))?;
        let mut done = std::collections::HashSet::new();
        let mut out = Assigned::default();
        while out.rounds < MAX_ROUNDS {
            out.rounds += 1;
            let tids = list().map_err(io_err(&path))?;
            let new: Vec<u32> = tids.into_iter().filter(|t| !done.contains(t)).collect();
            if new.is_empty() {
                break;
            }
            for tid in new {
                done.insert(tid);
                match f.write(format!("{tid}\n").as_bytes()) {
                    Ok(_) => out.moved += 1,
                    Err(e) if e.raw_os_error() == Some(libc::ESRCH) => out.vanished += 1,
                    Err(e) if e.raw_os_error() == Some(libc::EINVAL) => out.refused.push((tid, self.last_cmd_status())),
                    // The group itself vanished: the caller re-creates it.
                    Err(e) => return Err(ResctrlError::Io { path, error: e }),
                }
            }
        }
        Ok(out)
    }

    /// As [`assign_tasks`](Self::assign_tasks), writing only the threads `list` gives that
    /// the group's `tasks` does not hold already (joined from outside since the last move).
    pub fn assign_missing(
        &self,
        g: &GroupRef,
        list: &mut dyn FnMut() -> io::Result<Vec<u32>>,
    ) -> Result<Assigned, ResctrlError> {
        let have: std::collections::HashSet<u32> = self.group_tasks(g)?.into_iter().collect();
        let mut missing = || list().map(|t| t.into_iter().filter(|x| !have.contains(x)).collect());
        self.assign_tasks(g, &mut missing)
    }

    /// The thread ids in a group's `tasks` file.
    pub fn group_tasks(&self, g: &GroupRef) -> Result<Vec<u32>, ResctrlError> {
        let path = self.group_dir(g).join("tasks");
        let text = std::fs::read_to_string(&path).map_err(io_err(&path))?;
        Ok(text.split_whitespace().filter_map(|t| t.parse().ok()).collect())
    }

    /// Open a group's counter files for repeated reads: one per L3 domain and event, or, with
    /// Sub-NUMA Clustering, one per node (`mon_sub_L3_YY`, domain = the node's id) and event.
    pub fn reader(&self, g: &GroupRef, domains: &[Domain], events: &[Event]) -> Result<GroupReader, ResctrlError> {
        GroupReader::open(&self.group_dir(g).join("mon_data"), domains, events)
    }

    /// Read one SNC sub-domain counter of a group (per-node detail; the L3 file is their sum).
    pub fn read_sub(&self, g: &GroupRef, domain: u32, sub: u32, e: Event) -> Result<Value, ResctrlError> {
        let p = self
            .group_dir(g)
            .join("mon_data")
            .join(format!("mon_L3_{domain:02}"))
            .join(format!("mon_sub_L3_{sub:02}"))
            .join(e.name());
        let t = std::fs::read(&p).map_err(io_err(&p))?;
        Value::parse(&t).ok_or_else(|| ResctrlError::Parse { path: p, text: String::from_utf8_lossy(&t).into() })
    }
}

/// `num_mbm_cntrs`: either one number or `id=n;id=n`.
fn parse_counters(path: &Path, text: &str) -> Result<Vec<(Option<u32>, u32)>, ResctrlError> {
    let bad = || ResctrlError::Parse { path: path.to_path_buf(), text: text.to_string() };
    let t = text.trim();
    if let Ok(n) = t.parse::<u32>() {
        return Ok(vec![(None, n)]);
    }
    t.split(';')
        .map(|kv| {
            let (k, v) = kv.split_once('=').ok_or_else(bad)?;
            Ok((Some(k.trim().parse().map_err(|_| bad())?), v.trim().parse().map_err(|_| bad())?))
        })
        .collect()
}

/// [`cachescope_platform::fsutil::subdirs`] with the path in the error.
fn dir_names(dir: &Path) -> Result<Vec<String>, ResctrlError> {
    cachescope_platform::fsutil::subdirs(dir).map_err(io_err(dir))
}

/// The CTRL_MON group a thread is in, from `/proc/<tid>/resctrl` (kernels with
/// CONFIG_PROC_CPU_RESCTRL: a line `res:/name`); None when the file is absent or says the
/// default group.
pub fn ctrl_group_of(proc_root: &Path, tid: u32) -> Option<String> {
    let t = std::fs::read_to_string(proc_root.join(tid.to_string()).join("resctrl")).ok()?;
    let res = t.lines().find_map(|l| l.strip_prefix("res:"))?.trim().trim_matches('/');
    (!res.is_empty() && !res.contains('/') && res != "..").then(|| res.to_string())
}

/// The MON group a thread is in, from `/proc/<tid>/resctrl` (its `mon:NAME` line); None when
/// the file is absent or the thread is in no MON group (only its CTRL_MON group's).
pub fn mon_group_of(proc_root: &Path, tid: u32) -> Option<String> {
    let t = std::fs::read_to_string(proc_root.join(tid.to_string()).join("resctrl")).ok()?;
    let name = t.lines().find_map(|l| l.strip_prefix("mon:"))?.trim().trim_matches('/');
    let name = name.rsplit('/').next().unwrap_or(name);
    (!name.is_empty() && name != ".." && name != ".").then(|| name.to_string())
}

#[cfg(test)]
mod tests;
