//! `/proc/self/mountinfo`: where cgroup v2, cgroup v1 controllers and resctrl are mounted.
//!
//! Line format (proc(5)): `ID PARENT MAJ:MIN ROOT MOUNT_POINT OPTIONS [OPTIONAL...] - FSTYPE
//! SOURCE SUPER_OPTIONS`, with spaces, tabs, newlines and backslashes in paths octal-escaped.

use std::path::{Path, PathBuf};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    /// Path within the filesystem that is mounted (e.g. `/` or a cgroup subtree).
    pub root: String,
    pub mount_point: PathBuf,
    pub fs_type: String,
    pub source: String,
    pub super_options: Vec<String>,
}

/// Parse mountinfo text. Lines that do not follow the format are skipped: the kernel writes
/// this file, and one odd line must not hide every other mount.
pub fn parse(text: &str) -> Vec<Mount> {
    text.lines().filter_map(parse_line).collect()
}

fn parse_line(line: &str) -> Option<Mount> {
    let (pre, post) = line.split_once(" - ")?;
    let pre: Vec<&str> = pre.split(' ').collect();
    if pre.len() < 6 {
        return None;
    }
    let mut post = post.split(' ');
    let fs_type = post.next()?.to_string();
    let source = unescape(post.next()?);
    let super_options = post.next().unwrap_or("").split(',').filter(|s| !s.is_empty()).map(String::from).collect();
    Some(Mount { root: unescape(pre[3]), mount_point: PathBuf::from(unescape(pre[4])), fs_type, source, super_options })
}

/// Undo the kernel's `\ooo` octal escapes.
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 3 < b.len() && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c)) {
            let v = (b[i + 1] - b'0') as u32 * 64 + (b[i + 2] - b'0') as u32 * 8 + (b[i + 3] - b'0') as u32;
            if let Ok(byte) = u8::try_from(v) {
                out.push(byte);
                i += 4;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Read and parse `<proc_root>/self/mountinfo`.
pub fn read(proc_root: &Path) -> std::io::Result<Vec<Mount>> {
    Ok(parse(&std::fs::read_to_string(proc_root.join("self/mountinfo"))?))
}

/// How cgroups are mounted on this host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CgroupLayout {
    /// Only cgroup v2 (modern systemd default).
    Unified {
        v2: PathBuf,
    },
    /// cgroup v2 beside v1 controller hierarchies (often v2 at /sys/fs/cgroup/unified).
    Hybrid {
        v2: PathBuf,
        v1_controllers: Vec<(String, PathBuf)>,
    },
    /// Only v1 hierarchies.
    Legacy {
        v1_controllers: Vec<(String, PathBuf)>,
    },
    None,
}

impl CgroupLayout {
    pub fn v2_mount(&self) -> Option<&Path> {
        match self {
            CgroupLayout::Unified { v2 } | CgroupLayout::Hybrid { v2, .. } => Some(v2),
            _ => None,
        }
    }
}

/// Find the cgroup layout. When cgroup2 is mounted more than once (bind mounts into
/// containers), the mount of the filesystem's root at the shortest path wins.
pub fn cgroup_layout(mounts: &[Mount]) -> CgroupLayout {
    let v2 = mounts
        .iter()
        .filter(|m| m.fs_type == "cgroup2")
        .min_by_key(|m| (m.root != "/", m.mount_point.as_os_str().len()))
        .map(|m| m.mount_point.clone());
    let v1: Vec<(String, PathBuf)> = mounts
        .iter()
        .filter(|m| m.fs_type == "cgroup")
        .map(|m| {
            let ctrl = m
                .super_options
                .iter()
                .filter(|o| !matches!(o.as_str(), "rw" | "ro") && !o.starts_with("release_agent"))
                .cloned()
                .collect::<Vec<_>>()
                .join(",");
            (ctrl, m.mount_point.clone())
        })
        .collect();
    match (v2, v1.is_empty()) {
        (Some(v2), true) => CgroupLayout::Unified { v2 },
        (Some(v2), false) => CgroupLayout::Hybrid { v2, v1_controllers: v1 },
        (None, false) => CgroupLayout::Legacy { v1_controllers: v1 },
        (None, true) => CgroupLayout::None,
    }
}

/// Mount points of a filesystem type (e.g. "resctrl").
pub fn mounts_of<'a>(mounts: &'a [Mount], fs_type: &str) -> impl Iterator<Item = &'a Mount> + 'a {
    let fs_type = fs_type.to_string();
    mounts.iter().filter(move |m| m.fs_type == fs_type)
}

#[cfg(test)]
mod tests {
    use super::*;

    const HYBRID: &str = "\
23 1 253:0 / / rw,relatime - ext4 /dev/vda rw
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,xattr,release_agent=/x,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime shared:5 - cgroup2 cgroup2 rw
";

    #[test]
    fn hybrid_layout_like_our_machines() {
        let m = parse(HYBRID);
        assert_eq!(m.len(), 6);
        match cgroup_layout(&m) {
            CgroupLayout::Hybrid { v2, v1_controllers } => {
                assert_eq!(v2, PathBuf::from("/sys/fs/cgroup/unified"));
                assert_eq!(v1_controllers[0], ("cpu".to_string(), PathBuf::from("/sys/fs/cgroup/cpu")));
                assert_eq!(v1_controllers[2].0, "xattr,name=systemd");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn unified_and_bind_mounts() {
        let text = "\
30 23 0:26 / /sys/fs/cgroup rw,nosuid shared:4 master:1 - cgroup2 cgroup2 rw,nsdelegate
90 23 0:26 /kubepods /var/lib/x/cgroup rw - cgroup2 cgroup2 rw
";
        assert_eq!(cgroup_layout(&parse(text)), CgroupLayout::Unified { v2: PathBuf::from("/sys/fs/cgroup") });
    }

    #[test]
    fn resctrl_and_escapes() {
        let text = "50 23 0:40 / /sys/fs/res\\040ctrl rw - resctrl resctrl rw,cdp\ngarbage line\n";
        let m = parse(text);
        assert_eq!(m.len(), 1);
        let r: Vec<_> = mounts_of(&m, "resctrl").collect();
        assert_eq!(r[0].mount_point, PathBuf::from("/sys/fs/res ctrl"));
        assert_eq!(r[0].super_options, vec!["rw", "cdp"]);
        assert_eq!(cgroup_layout(&m), CgroupLayout::None);
    }

    #[test]
    fn reads_this_host() {
        // Every Linux process has a mountinfo with at least the root mount.
        let m = read(Path::new("/proc")).unwrap();
        assert!(m.iter().any(|m| m.mount_point == Path::new("/")));
    }
}
