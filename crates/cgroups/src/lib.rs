//! Containers from the cgroup tree: which exist, what they are called, which threads they
//! hold, and (in [`watch`]) when they start and stop.
//!
//! Parsing a path into an identity is pure ([`identity`]); this module does the I/O: find the
//! hierarchy in mountinfo, walk it, stat directories for their cgroup id (the inode, which is
//! what BPF's `bpf_get_current_cgroup_id` returns on cgroup v2), read `cgroup.threads`.

pub mod identity;
pub mod sandbox;
pub mod source;
pub mod watch;

use cachescope_platform::mountinfo::{self, CgroupLayout};
use identity::{identify, Glob, Identity};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// Deepest cgroup nesting walked. The kernel's default max depth is unlimited and real trees
/// are under 10 deep, but anyone who can make cgroups can nest them: a container 33 levels
/// down was never found at the old limit of 32. A path is at most 4096 bytes, so 2048 levels
/// of one-byte names is the most a path can hold.
pub const MAX_DEPTH: usize = 2048;

#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    #[error("no cgroup hierarchy mounted (checked {0})")]
    NotMounted(String),
    #[error("{path}: {error}")]
    Io { path: PathBuf, error: std::io::Error },
}

/// Which hierarchy is in use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hierarchy {
    pub root: PathBuf,
    /// true: cgroup v2; false: the v1 cpu/cpuacct fallback.
    pub v2: bool,
    /// Human description ("cgroup v2 at ... (hybrid)").
    pub description: String,
}

impl Hierarchy {
    /// Find cgroup v2 in `<proc_root>/self/mountinfo`, or fall back to v1 cpu/cpuacct.
    pub fn find(proc_root: &Path) -> Result<Hierarchy, CgroupError> {
        let mi = proc_root.join("self/mountinfo");
        let mounts = mountinfo::read(proc_root).map_err(|error| CgroupError::Io { path: mi.clone(), error })?;
        match mountinfo::cgroup_layout(&mounts) {
            CgroupLayout::Unified { v2 } => {
                Ok(Hierarchy { description: format!("cgroup v2 at {}", v2.display()), root: v2, v2: true })
            }
            CgroupLayout::Hybrid { v2, .. } => Ok(Hierarchy {
                description: format!("cgroup v2 at {} (hybrid layout beside v1 controllers)", v2.display()),
                root: v2,
                v2: true,
            }),
            CgroupLayout::Legacy { v1_controllers } => {
                let cpu = v1_controllers
                    .iter()
                    .find(|(c, _)| c.split(',').any(|x| x == "cpu" || x == "cpuacct"))
                    .ok_or_else(|| CgroupError::NotMounted(format!("{}: only v1 without cpu/cpuacct", mi.display())))?;
                Ok(Hierarchy {
                    description: format!(
                        "cgroup v1 {} at {} (no cgroup v2; cgroup ids will not match BPF)",
                        cpu.0,
                        cpu.1.display()
                    ),
                    root: cpu.1.clone(),
                    v2: false,
                })
            }
            CgroupLayout::None => Err(CgroupError::NotMounted(mi.display().to_string())),
        }
    }
}

/// A container as found in the tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Container {
    pub identity: Identity,
    /// Relative to the hierarchy root, `/`-separated, no leading slash, as text
    /// ([`path_text`]: bytes that are not UTF-8 written `\xHH`).
    pub cgroup_path: String,
    /// The same path, exact: what the directory is reached by, and the key that tells two
    /// cgroups apart whose text is the same.
    pub rel: PathBuf,
    /// The directory's inode; None if it vanished before it could be read.
    pub cgroup_id: Option<u64>,
    /// Human name from the runtime's local state, where readable without a daemon.
    pub name: Option<String>,
}

/// Walk the hierarchy and return every container, at any depth. A container's sub-cgroups are
/// searched too: a container nested in another is its own (each task is charged to the
/// nearest enclosing container).
pub fn scan(root: &Path, globs: &[Glob]) -> Result<Vec<Container>, CgroupError> {
    let mut out = Vec::new();
    walk(root, Path::new(""), globs, &mut out, 0)?;
    Ok(out)
}

fn walk(root: &Path, rel: &Path, globs: &[Glob], out: &mut Vec<Container>, depth: usize) -> Result<(), CgroupError> {
    if let Some(c) = found(root, rel, globs) {
        out.push(c);
    }
    if depth >= MAX_DEPTH {
        return Ok(());
    }
    for n in subdirs(&root.join(rel))? {
        walk(root, &rel.join(n), globs, out, depth + 1)?;
    }
    Ok(())
}

/// The container at `rel`, if its path names one.
pub(crate) fn found(root: &Path, rel: &Path, globs: &[Glob]) -> Option<Container> {
    if rel.as_os_str().is_empty() {
        return None;
    }
    let text = path_text(rel);
    identify(&text, globs).map(|identity| describe(root, rel, text, identity))
}

/// A cgroup path as text: UTF-8 as it is, every byte that is not written `\xHH`. Any bytes
/// make a cgroup name, and a name that is not UTF-8 must not hide a container (nor its
/// subtree); the exact path stays beside the text ([`Container::rel`]).
///
/// Two paths never share a text: a literal backslash that would read as one of our escapes
/// (followed by `x` and a byte of 0x80 or above, which no UTF-8 text escapes, or `x5c`) is
/// itself written `\x5c`. systemd's escapes (`\x2d` for `-`) stay as they are.
pub fn path_text(rel: &Path) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    for chunk in rel.as_os_str().as_bytes().utf8_chunks() {
        let valid = chunk.valid();
        for (i, c) in valid.char_indices() {
            if c == '\\' && reads_as_escape(&valid[i + 1..]) {
                s.push_str("\\x5c");
            } else {
                s.push(c);
            }
        }
        for b in chunk.invalid() {
            let _ = write!(s, "\\x{b:02x}");
        }
    }
    s
}

/// Whether `rest` (what follows a backslash) would make it read as an escape of [`path_text`].
fn reads_as_escape(rest: &str) -> bool {
    let Some(hex) = rest.strip_prefix('x').and_then(|h| h.get(..2)) else { return false };
    u8::from_str_radix(hex, 16).is_ok_and(|b| b >= 0x80 || b == 0x5c)
}

/// Names of the subdirectories of `dir`, whatever their bytes, sorted; none if it is gone.
pub(crate) fn subdirs(dir: &Path) -> Result<Vec<std::ffi::OsString>, CgroupError> {
    cachescope_platform::fsutil::subdirs_os(dir).map_err(|error| CgroupError::Io { path: dir.to_path_buf(), error })
}

/// CPU time used by the cgroup at `dir` in µs (`usage_usec` of `cpu.stat`, present on every
/// cgroup v2 directory); None when unreadable (the cgroup vanished, or v1).
pub fn cpu_usage_usec(dir: &Path) -> Option<u64> {
    let text = std::fs::read_to_string(dir.join("cpu.stat")).ok()?;
    text.lines().find_map(|l| l.strip_prefix("usage_usec ")).and_then(|v| v.trim().parse().ok())
}

/// Fill in cgroup id and name for an identified path (`text` is [`path_text`] of `rel`).
pub fn describe(root: &Path, rel: &Path, text: String, identity: Identity) -> Container {
    let cgroup_id = std::fs::metadata(root.join(rel)).ok().map(|m| m.ino());
    let name = docker_name(Path::new("/var/lib/docker/containers"), &identity);
    Container { identity, cgroup_path: text, rel: rel.to_path_buf(), cgroup_id, name }
}

/// Docker keeps each container's name in `containers/<id>/config.v2.json` ("Name": "/web").
pub fn docker_name(containers_dir: &Path, id: &Identity) -> Option<String> {
    if id.runtime != identity::Runtime::Docker {
        return None;
    }
    let text = std::fs::read_to_string(containers_dir.join(&id.id).join("config.v2.json")).ok()?;
    let v: serde_json::Value = serde_json::from_str(&text).ok()?;
    let name = v.get("Name")?.as_str()?.trim_start_matches('/');
    (!name.is_empty()).then(|| name.to_string())
}

/// Thread ids in the container's cgroup and all its descendants (`cgroup.threads` on v2,
/// `tasks` on v1). Threads and cgroups that vanish meanwhile are skipped.
pub fn threads(root: &Path, rel: impl AsRef<Path>, v2: bool) -> Result<Vec<u32>, CgroupError> {
    gather(&root.join(rel.as_ref()), if v2 { "cgroup.threads" } else { "tasks" }, &[])
}

/// As [`threads`] on cgroup v2, leaving out the subtrees at `except` (the directories of
/// containers nested in this one: their threads are theirs).
pub fn threads_except(root: &Path, rel: impl AsRef<Path>, except: &[PathBuf]) -> Result<Vec<u32>, CgroupError> {
    gather(&root.join(rel.as_ref()), "cgroup.threads", except)
}

fn gather(dir: &Path, file: &str, except: &[PathBuf]) -> Result<Vec<u32>, CgroupError> {
    let mut tids = Vec::new();
    collect_threads(dir, file, except, &mut tids, 0)?;
    tids.sort_unstable();
    tids.dedup();
    Ok(tids)
}

fn collect_threads(
    dir: &Path,
    file: &str,
    except: &[PathBuf],
    out: &mut Vec<u32>,
    depth: usize,
) -> Result<(), CgroupError> {
    if except.iter().any(|e| e == dir) {
        return Ok(());
    }
    match std::fs::read_to_string(dir.join(file)) {
        Ok(text) => out.extend(text.lines().filter_map(|l| l.trim().parse::<u32>().ok())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(error) => return Err(CgroupError::Io { path: dir.join(file), error }),
    }
    if depth >= MAX_DEPTH {
        return Ok(());
    }
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.filter_map(Result::ok) {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                collect_threads(&e.path(), file, except, out, depth + 1)?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_mountinfo(text: &str) -> Result<Hierarchy, CgroupError> {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("self")).unwrap();
        std::fs::write(dir.path().join("self/mountinfo"), text).unwrap();
        Hierarchy::find(dir.path())
    }

    #[test]
    fn hierarchy_choice() {
        let hybrid = "32 31 0:29 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n\
                      41 31 0:38 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n";
        let h = with_mountinfo(hybrid).unwrap();
        assert!(h.v2 && h.root == Path::new("/sys/fs/cgroup/unified") && h.description.contains("hybrid"));
        let legacy = "32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n\
                      33 31 0:30 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n";
        let h = with_mountinfo(legacy).unwrap();
        assert!(!h.v2 && h.root == Path::new("/sys/fs/cgroup/cpu,cpuacct") && h.description.contains("v1"));
        assert!(with_mountinfo("33 31 0:30 / /m rw - cgroup cgroup rw,memory\n").is_err());
        assert!(with_mountinfo("").unwrap_err().to_string().contains("no cgroup hierarchy"));
    }

    #[test]
    fn path_text_writes_bytes_that_are_not_utf8() {
        use std::os::unix::ffi::OsStrExt;
        let p = Path::new(std::ffi::OsStr::from_bytes(b"a\xff\xfe/b\xc3\xa9/c\\x2d"));
        assert_eq!(path_text(p), "a\\xff\\xfe/b\u{e9}/c\\x2d");
        // A name holding the text of an escape is not the name holding that byte.
        let text = |b: &[u8]| path_text(Path::new(std::ffi::OsStr::from_bytes(b)));
        assert_eq!(text(b"a\\x80"), "a\\x5cx80");
        assert_eq!(text(b"a\x80"), "a\\x80");
        assert_eq!(text(b"a\\x5cx80"), "a\\x5cx5cx80");
        let names: [&[u8]; 6] = [b"a\x80", b"a\\x80", b"a\\x5cx80", b"a\\x5c\x80", b"a\\x2d", b"a-"];
        let texts: std::collections::BTreeSet<String> = names.iter().map(|n| text(n)).collect();
        assert_eq!(texts.len(), names.len(), "distinct: {texts:?}");
    }

    #[test]
    fn docker_names_from_local_state() {
        let dir = tempfile::tempdir().unwrap();
        let id = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
        std::fs::create_dir_all(dir.path().join(id)).unwrap();
        std::fs::write(dir.path().join(id).join("config.v2.json"), r#"{"Name":"/web-1","Id":"x"}"#).unwrap();
        let ident = identity::identify(&format!("docker/{id}"), &[]).unwrap();
        assert_eq!(docker_name(dir.path(), &ident).as_deref(), Some("web-1"));
        let other = identity::identify(&format!("system.slice/crio-{id}.scope"), &[]).unwrap();
        assert_eq!(docker_name(dir.path(), &other), None, "never invented");
    }
}
