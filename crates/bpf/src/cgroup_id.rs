//! A cgroup v2 id (what the eBPF attribution charges: the cgroup directory's inode number) to
//! its ancestors' ids, through the kernel's file handles: `open_by_handle_at` with a kernfs
//! handle opens the cgroup's directory by id, and its `..` chain gives the enclosing cgroups.
//! So the container a charge belongs to is found from the charge alone, in a few system calls,
//! instead of a walk of every followed container's tree (10,000 directories a second on a
//! host whose other cgroups run). Needs CAP_DAC_READ_SEARCH (root has it).

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;

/// The handle type of a kernfs node (the kernel's FILEID_KERNFS), whose 8 bytes are its id.
const FILEID_KERNFS: i32 = 0xfe;

/// `struct file_handle` with room for a kernfs id.
#[repr(C)]
struct KernfsHandle {
    handle_bytes: u32,
    handle_type: i32,
    id: [u8; 8],
}

/// Opens cgroups of one cgroup v2 mount by id.
pub struct CgroupIds {
    /// Any directory of the mount: the kernel takes the file system from it.
    mount: OwnedFd,
}

/// `dir` opened (relative to `at`), as a path only (O_PATH) or, with `read`, for reading (the
/// mount's descriptor: open_by_handle_at refuses an O_PATH one).
fn open_dir(dir: &CStr, at: Option<&OwnedFd>, read: bool) -> io::Result<OwnedFd> {
    let base = at.map_or(libc::AT_FDCWD, |f| f.as_raw_fd());
    let how = if read { libc::O_RDONLY } else { libc::O_PATH };
    // SAFETY: `dir` is a NUL-terminated path that outlives the call; `base` is AT_FDCWD or a
    // descriptor `at` keeps open for the call.
    let fd = unsafe { libc::openat(base, dir.as_ptr(), how | libc::O_DIRECTORY | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just opened and is owned by nothing else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn ino(fd: &OwnedFd) -> io::Result<u64> {
    // SAFETY: a zeroed `stat` is a valid value for fstat to fill.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `fd` is open for the call and `st` is a valid, writable stat buffer.
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(st.st_ino)
}

impl CgroupIds {
    /// On the mount that holds `dir` (a cgroup v2 directory).
    pub fn on(dir: &Path) -> io::Result<CgroupIds> {
        let c = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a NUL in the path"))?;
        Ok(CgroupIds { mount: open_dir(&c, None, true)? })
    }

    /// The cgroup `id`, then each enclosing cgroup's id up to the mount's root, at most
    /// `depth` of them. ESTALE: no cgroup has this id now (it was removed).
    pub fn ancestry(&self, id: u64, depth: usize) -> io::Result<Vec<u64>> {
        let mut h = KernfsHandle { handle_bytes: 8, handle_type: FILEID_KERNFS, id: id.to_ne_bytes() };
        // SAFETY: `h` is laid out as the kernel's struct file_handle with `handle_bytes` (8)
        // bytes of handle after its header, and lives for the call; `mount` is open.
        let fd = unsafe {
            libc::open_by_handle_at(
                self.mount.as_raw_fd(),
                (&mut h as *mut KernfsHandle).cast::<libc::file_handle>(),
                libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` was just opened and is owned by nothing else.
        let mut dir = unsafe { OwnedFd::from_raw_fd(fd) };
        let mut out = vec![ino(&dir)?];
        let up = c"..";
        while out.len() <= depth {
            let parent = open_dir(up, Some(&dir), false)?;
            let i = ino(&parent)?;
            // The root's parent is itself (or the directory it is mounted on, another file
            // system's: its inode is not a cgroup's, and walking stops there too).
            if Some(&i) == out.last() || parent_is_other_fs(&dir, &parent)? {
                break;
            }
            out.push(i);
            dir = parent;
        }
        Ok(out)
    }
}

fn parent_is_other_fs(a: &OwnedFd, b: &OwnedFd) -> io::Result<bool> {
    let dev = |fd: &OwnedFd| -> io::Result<u64> {
        // SAFETY: as in `ino`.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: as in `ino`.
        if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(st.st_dev)
    };
    Ok(dev(a)? != dev(b)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    /// The inode number (a cgroup's id) of a directory.
    fn id_of(dir: &Path) -> Option<u64> {
        std::fs::metadata(dir).ok().map(|m| m.ino())
    }

    /// On this host's cgroup v2 mount, as root: a nested cgroup's id gives its own and its
    /// ancestors' ids, the mount's root last; a removed one is ESTALE.
    #[test]
    fn an_id_gives_the_cgroup_and_its_ancestors() {
        let Some(root) = cachescope_cgroups::Hierarchy::find(Path::new("/proc")).ok().filter(|h| h.v2).map(|h| h.root)
        else {
            return cachescope_testkit::skip("no cgroup v2 mount");
        };
        let base = root.join(format!("cachescope-ids-{}", std::process::id()));
        if std::fs::create_dir(&base).is_err() {
            return cachescope_testkit::skip("cannot create cgroups here (not root?)");
        }
        let inner = base.join("a/b");
        std::fs::create_dir_all(&inner).unwrap();
        let ids = CgroupIds::on(&root).unwrap();
        let expect: Vec<u64> = [&inner, &base.join("a"), &base].iter().map(|d| id_of(d).unwrap()).collect();
        let got = ids.ancestry(expect[0], 64);
        for d in [inner.clone(), base.join("a"), base.clone()] {
            std::fs::remove_dir(d).unwrap();
        }
        let got = got.unwrap();
        assert_eq!(got[..3], expect[..]);
        assert_eq!(*got.last().unwrap(), id_of(&root).unwrap(), "{got:?} ends at the root");
        assert_eq!(ids.ancestry(expect[0], 64).unwrap_err().raw_os_error(), Some(libc::ESTALE));
        // Depth-limited.
        assert!(ids.ancestry(id_of(&root).unwrap(), 0).unwrap().len() == 1);
    }
}
