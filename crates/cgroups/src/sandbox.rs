//! A private cgroup v2 subtree holding processes cachescope starts itself: scenario containers
//! played for real, and the test cgroups of the real-kernel tests. Every process is killed and
//! every directory removed (deepest first) on drop.

use crate::{CgroupError, Hierarchy};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

pub struct Sandbox {
    root: PathBuf,
    dir: PathBuf,
    children: BTreeMap<String, Vec<Child>>,
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> CgroupError + '_ {
    move |error| CgroupError::Io { path: path.to_path_buf(), error }
}

impl Sandbox {
    /// Create `<v2 root>/<name>` (the hierarchy must be cgroup v2; root is needed).
    pub fn create(h: &Hierarchy, name: &str) -> Result<Sandbox, CgroupError> {
        if !h.v2 {
            return Err(CgroupError::NotMounted(format!("a sandbox needs cgroup v2; found {}", h.description)));
        }
        let dir = h.root.join(name);
        std::fs::create_dir(&dir).map_err(io(&dir))?;
        // Let children have the cpu controller where the parent offers it (cpu.stat is there
        // either way; this only adds cpu.max and friends).
        let _ = std::fs::write(dir.join("cgroup.subtree_control"), "+cpu");
        Ok(Sandbox { root: h.root.clone(), dir, children: BTreeMap::new() })
    }

    /// A sandbox `<prefix>-<pid>` under this host's cgroup v2 root, or why there cannot be one
    /// (not root, no cgroup v2): what the real-kernel tests print when they skip.
    pub fn for_host(prefix: &str) -> Result<Sandbox, String> {
        // SAFETY: geteuid has no preconditions and touches no memory.
        if unsafe { libc::geteuid() } != 0 {
            return Err("not root: cannot create cgroups".into());
        }
        let h = Hierarchy::find(Path::new("/proc")).map_err(|e| e.to_string())?;
        if !h.v2 {
            return Err(format!("no cgroup v2 ({})", h.description));
        }
        Sandbox::create(&h, &format!("{prefix}-{}", std::process::id())).map_err(|e| e.to_string())
    }

    /// The sandbox directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Path of the sandbox relative to the hierarchy root.
    pub fn rel(&self) -> String {
        self.dir.strip_prefix(&self.root).map(|p| p.to_string_lossy().into_owned()).unwrap_or_default()
    }

    /// Create the child cgroup `name` (a single path component).
    pub fn add(&mut self, name: &str) -> Result<PathBuf, CgroupError> {
        let d = self.dir.join(name);
        if name.is_empty() || name.contains('/') || name.starts_with('.') {
            return Err(CgroupError::Io { path: d, error: std::io::ErrorKind::InvalidInput.into() });
        }
        std::fs::create_dir(&d).map_err(io(&d))?;
        self.children.entry(name.to_string()).or_default();
        Ok(d)
    }

    /// Start `cmd` and move it into child `name` (created if needed). The process runs briefly
    /// in the caller's cgroup before the move.
    pub fn spawn(&mut self, name: &str, mut cmd: Command) -> Result<u32, CgroupError> {
        let d = self.dir.join(name);
        if !self.children.contains_key(name) {
            self.add(name)?;
        }
        let child = cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null()).spawn().map_err(io(&d))?;
        let pid = child.id();
        let moved = std::fs::write(d.join("cgroup.procs"), pid.to_string());
        self.children.entry(name.to_string()).or_default().push(child);
        moved.map_err(io(&d.join("cgroup.procs")))?;
        Ok(pid)
    }

    /// Kill every process of child `name` (the ones we started and anything they forked) and
    /// remove its cgroup.
    pub fn remove(&mut self, name: &str) {
        let d = self.dir.join(name);
        // cgroup.kill (Linux 5.14+) kills the whole cgroup, grandchildren included.
        let _ = std::fs::write(d.join("cgroup.kill"), "1");
        if let Some(procs) = self.children.remove(name) {
            for mut c in procs {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
        // Killed processes leave the cgroup asynchronously: retry briefly.
        for _ in 0..100 {
            match std::fs::remove_dir(&d) {
                Ok(()) => return,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return,
                Err(_) => std::thread::sleep(std::time::Duration::from_millis(5)),
            }
        }
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        let names: Vec<String> = self.children.keys().cloned().collect();
        for n in names {
            self.remove(&n);
        }
        let _ = std::fs::remove_dir(&self.dir);
    }
}
