//! `/dev/cachescope`: opened by one session at a time (the module refuses a second with
//! EBUSY); closing it restores every CPU's IA32_PQR_ASSOC and sends the RMIDs to limbo.

use crate::abi::{self, Info, Record, Rules, Stats, RECORD_SIZE};
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub const DEFAULT_PATH: &str = "/dev/cachescope";
/// Where the loaded module shows its parameters.
pub const SYSFS: &str = "/sys/module/cachescope";

#[derive(Debug, thiserror::Error)]
pub enum KmodError {
    #[error("{path}: the cachescope module is not loaded (no device; see kmod/README: make -C kmod && insmod kmod/cachescope.ko)")]
    NotLoaded { path: PathBuf },
    #[error("{path}: in use by another cachescope (the module serves one session at a time)")]
    Busy { path: PathBuf },
    #[error("{path}: permission denied (root or CAP_SYS_ADMIN and read access to the device)")]
    Denied { path: PathBuf },
    #[error("{path}: {what}: {source}")]
    Io { path: PathBuf, what: &'static str, source: io::Error },
    #[error("{path}: {0}", path = .1.display())]
    Abi(String, PathBuf),
    #[error("rule {rule:?}: {why}")]
    Rule { rule: String, why: String },
}

/// For the engine: a module that went away (unloaded, its device gone) ends the run as
/// unavailable; anything else it refused is a failure.
impl From<KmodError> for cachescope_engine::PartError {
    fn from(e: KmodError) -> Self {
        let gone = match &e {
            KmodError::NotLoaded { .. } => true,
            KmodError::Io { source, .. } => matches!(source.raw_os_error(), Some(libc::ENODEV | libc::ENXIO)),
            _ => false,
        };
        if gone {
            cachescope_engine::PartError::gone(e)
        } else {
            cachescope_engine::PartError::failed(e)
        }
    }
}

/// What the backend needs of the module: [`Device`] on a host where it is loaded, a fake in
/// tests and in the collector's benchmark.
pub trait KernelDevice: Send {
    fn path(&self) -> &Path;
    fn info(&self) -> Result<Info, KmodError>;
    fn stats(&self) -> Result<Stats, KmodError>;
    fn set_rules(&self, rules: &[String]) -> Result<u64, KmodError>;
    fn attach(&self, dir: &Path) -> Result<Option<u32>, KmodError>;
    fn detach(&self, dir: &Path) -> Result<(), KmodError>;
    fn drain(&mut self, out: &mut Vec<Record>) -> Result<usize, KmodError>;
    fn wait(&self, timeout: Duration) -> Result<bool, KmodError>;
}

pub struct Device {
    file: File,
    path: PathBuf,
    buf: Vec<u8>,
}

impl Device {
    pub fn open(path: &Path) -> Result<Device, KmodError> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open(path)
            .map_err(|e| match e.raw_os_error() {
            Some(libc::ENOENT) | Some(libc::ENXIO) | Some(libc::ENODEV) => KmodError::NotLoaded { path: path.into() },
            Some(libc::EBUSY) => KmodError::Busy { path: path.into() },
            Some(libc::EACCES) | Some(libc::EPERM) => KmodError::Denied { path: path.into() },
            _ => KmodError::Io { path: path.into(), what: "open", source: e },
        })?;
        let dev = Device { file, path: path.into(), buf: vec![0; RECORD_SIZE * 4096] };
        let info = dev.info()?;
        abi::check(&info).map_err(|e| KmodError::Abi(e, path.into()))?;
        Ok(dev)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn io(&self, what: &'static str) -> impl FnOnce(io::Error) -> KmodError + '_ {
        move |source| KmodError::Io { path: self.path.clone(), what, source }
    }

    /// An ioctl whose argument is `arg`; its non-negative return value.
    fn ioctl<T>(&self, request: u64, arg: *mut T) -> io::Result<i64> {
        // SAFETY: `arg` points to a live value of the type the request's size field encodes
        // (the abi module derives each request from its argument's size); the module reads or
        // writes only that many bytes.
        let r = unsafe { libc::ioctl(self.file.as_raw_fd(), request as _, arg) };
        if r < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(i64::from(r))
        }
    }

    pub fn info(&self) -> Result<Info, KmodError> {
        let mut i = Info::default();
        self.ioctl(abi::IOC_INFO, &mut i).map_err(self.io("reading its info"))?;
        Ok(i)
    }

    pub fn stats(&self) -> Result<Stats, KmodError> {
        let mut s = Stats::default();
        self.ioctl(abi::IOC_STATS, &mut s).map_err(self.io("reading its counters"))?;
        Ok(s)
    }

    /// Replace the watch rules (globs as `--containers` takes them; `!` excludes); cgroups that
    /// exist and match are adopted now. Returns how many were.
    pub fn set_rules(&self, rules: &[String]) -> Result<u64, KmodError> {
        let err = |rule: &str, why: &str| KmodError::Rule { rule: rule.into(), why: why.into() };
        if rules.len() > abi::MAX_RULES {
            return Err(err(&rules[abi::MAX_RULES], &format!("the module takes at most {} rules", abi::MAX_RULES)));
        }
        let total: usize = rules.iter().map(|r| r.trim_start_matches('!').len()).sum();
        if total > abi::RULES_BYTES {
            return Err(err(&rules.join(" "), &format!("more than {} bytes of rules", abi::RULES_BYTES)));
        }
        let mut r = Rules { count: rules.len() as u32, pad: 0, rule: [[0; abi::RULE_LEN]; abi::MAX_RULES] };
        for (slot, rule) in r.rule.iter_mut().zip(rules) {
            let b = rule.as_bytes();
            if b.is_empty() || b.len() >= abi::RULE_LEN || b.contains(&0) {
                return Err(err(rule, &format!("a rule is 1 to {} bytes without NUL", abi::RULE_LEN - 1)));
            }
            slot[..b.len()].copy_from_slice(b);
        }
        let n = self.ioctl(abi::IOC_RULES, &mut r).map_err(self.io("setting the watch rules"))?;
        Ok(n as u64)
    }

    /// Give the cgroup at `dir` an RMID (idempotent): Some(rmid), or None when none is free
    /// (the module hands it one when an RMID leaves limbo).
    pub fn attach(&self, dir: &Path) -> Result<Option<u32>, KmodError> {
        let d = File::open(dir).map_err(self.io("opening the cgroup to attach"))?;
        let mut fd: i32 = d.as_raw_fd();
        match self.ioctl(abi::IOC_ATTACH, &mut fd) {
            Ok(rmid) => Ok(Some(rmid as u32)),
            Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => Ok(None),
            Err(e) => Err(KmodError::Io { path: dir.into(), what: "attaching the cgroup", source: e }),
        }
    }

    /// Take the RMID of the cgroup at `dir` back. A cgroup already gone is not an error (the
    /// module released it at rmdir).
    pub fn detach(&self, dir: &Path) -> Result<(), KmodError> {
        let d = match File::open(dir) {
            Ok(d) => d,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(KmodError::Io { path: dir.into(), what: "opening the cgroup to detach", source: e }),
        };
        let mut fd: i32 = d.as_raw_fd();
        self.ioctl(abi::IOC_DETACH, &mut fd).map(|_| ()).map_err(|e| KmodError::Io {
            path: dir.into(),
            what: "detaching the cgroup",
            source: e,
        })
    }

    /// Everything in the ring now, appended to `out`; how many records.
    pub fn drain(&mut self, out: &mut Vec<Record>) -> Result<usize, KmodError> {
        let mut n = 0;
        loop {
            // SAFETY: reading into our own buffer, at most its length.
            let r = unsafe { libc::read(self.file.as_raw_fd(), self.buf.as_mut_ptr().cast(), self.buf.len()) };
            if r < 0 {
                let e = io::Error::last_os_error();
                return match e.raw_os_error() {
                    Some(libc::EAGAIN) => Ok(n),
                    Some(libc::EINTR) => continue,
                    _ => Err(KmodError::Io { path: self.path.clone(), what: "reading records", source: e }),
                };
            }
            let r = r as usize;
            for chunk in self.buf[..r].chunks_exact(RECORD_SIZE) {
                let mut a = [0u8; RECORD_SIZE];
                a.copy_from_slice(chunk);
                out.push(Record::parse(&a));
            }
            n += r / RECORD_SIZE;
            if r < self.buf.len() {
                return Ok(n);
            }
        }
    }

    /// Waits until records are ready (the module wakes readers when its ring is a quarter
    /// full) or `timeout` passes.
    pub fn wait(&self, timeout: Duration) -> Result<bool, KmodError> {
        let mut p = libc::pollfd { fd: self.file.as_raw_fd(), events: libc::POLLIN, revents: 0 };
        let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
        // SAFETY: one valid pollfd for the call's duration.
        let r = unsafe { libc::poll(&mut p, 1, ms) };
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EINTR) {
                return Ok(false);
            }
            return Err(KmodError::Io { path: self.path.clone(), what: "polling", source: e });
        }
        Ok(r > 0)
    }
}

/// The loaded module's parameters (`/sys/module/cachescope/parameters`), sorted; None when
/// the module is not loaded.
pub fn parameters(sys_module: &Path) -> Option<Vec<(String, String)>> {
    let dir = std::fs::read_dir(sys_module.join("parameters")).ok()?;
    let mut v: Vec<(String, String)> = dir
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_str()?.to_string();
            let value = std::fs::read_to_string(e.path()).ok()?.trim().to_string();
            Some((name, value))
        })
        .collect();
    v.sort();
    Some(v)
}

impl KernelDevice for Device {
    fn path(&self) -> &Path {
        Device::path(self)
    }
    fn info(&self) -> Result<Info, KmodError> {
        Device::info(self)
    }
    fn stats(&self) -> Result<Stats, KmodError> {
        Device::stats(self)
    }
    fn set_rules(&self, rules: &[String]) -> Result<u64, KmodError> {
        Device::set_rules(self, rules)
    }
    fn attach(&self, dir: &Path) -> Result<Option<u32>, KmodError> {
        Device::attach(self, dir)
    }
    fn detach(&self, dir: &Path) -> Result<(), KmodError> {
        Device::detach(self, dir)
    }
    fn drain(&mut self, out: &mut Vec<Record>) -> Result<usize, KmodError> {
        Device::drain(self, out)
    }
    fn wait(&self, timeout: Duration) -> Result<bool, KmodError> {
        Device::wait(self, timeout)
    }
}
