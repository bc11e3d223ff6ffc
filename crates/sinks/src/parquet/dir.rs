//! The output directory: one writer at a time, no pseudo-filesystem, names that sort by time.

use super::io;
use crate::SinkError;
use std::fs::{self, File};
use std::io::{Read, Write};
use std::path::Path;

/// The lock file of an output directory: flock'ed by its writer, holding its PID. The kernel
/// drops the lock when the writer dies, so a killed writer's lock is taken over. It is 0600:
/// flock needs only an open descriptor, so a lock file others can read is one any local user
/// can hold to stop the recorder (issue 41).
pub const LOCK: &str = ".cachescope.lock";

/// Take `dir`'s lock, or say who holds it. The lock file must be a regular file of ours: a
/// symlink is not followed (root's recorder would write its PID wherever it points), a FIFO is
/// not waited on, and one another user owns is refused rather than used.
pub(super) fn lock_dir(dir: &Path) -> Result<File, SinkError> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
    let path = dir.join(LOCK);
    let refuse = |why: String| SinkError::Io {
        what: path.display().to_string(),
        error: std::io::Error::new(std::io::ErrorKind::InvalidInput, why),
    };
    let mut f = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(&path)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP) => refuse("is a symbolic link; remove it (the lock is a file of its own)".into()),
            _ => SinkError::Io { what: format!("opening {}", path.display()), error: e },
        })?;
    let meta = f.metadata().map_err(io(format!("reading {}", path.display())))?;
    if !meta.file_type().is_file() {
        return Err(refuse("is not a regular file; remove it".into()));
    }
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    if meta.uid() != me {
        return Err(refuse(format!("is owned by uid {}, not by this process's ({me}); remove it", meta.uid())));
    }
    // A lock file an older version made 0644.
    if meta.mode() & 0o077 != 0 {
        f.set_permissions(fs::Permissions::from_mode(0o600)).map_err(io(format!("chmod 0600 {}", path.display())))?;
    }
    // SAFETY: flock on a descriptor `f` owns; LOCK_NB never blocks.
    if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::WouldBlock {
            return Err(SinkError::Io { what: format!("locking {}", path.display()), error: e });
        }
        // Who holds it, as the kernel says; the PID in the file is the last writer's, which
        // need not be the holder.
        let pid = flock_holder(&meta).or_else(|| {
            let mut holder = String::new();
            let _ = f.read_to_string(&mut holder);
            holder.trim().parse::<u32>().ok()
        });
        return Err(SinkError::Busy { dir: dir.to_path_buf(), pid });
    }
    // Ours now: say who we are (the old holder's PID, if any, is stale).
    let _ = f.set_len(0).and_then(|()| f.write_all(format!("{}\n", std::process::id()).as_bytes()));
    Ok(f)
}

/// The PID holding a flock on the file `meta` describes, from /proc/locks ("1: FLOCK  ADVISORY
/// WRITE 1234 fd:01:5678 0 EOF": the PID, then major:minor:inode in hex, hex and decimal).
fn flock_holder(meta: &fs::Metadata) -> Option<u32> {
    use std::os::unix::fs::MetadataExt;
    let text = fs::read_to_string("/proc/locks").ok()?;
    holder_in(&text, libc::major(meta.dev()), libc::minor(meta.dev()), meta.ino())
}

fn holder_in(locks: &str, major: u32, minor: u32, ino: u64) -> Option<u32> {
    locks.lines().find_map(|l| {
        let w: Vec<&str> = l.split_whitespace().collect();
        // A blocked waiter's line has "->" before its fields.
        if w.len() < 6 || w[1] != "FLOCK" || w.contains(&"->") {
            return None;
        }
        let mut id = w[5].split(':');
        let (ma, mi, i) = (id.next()?, id.next()?, id.next()?);
        let same = u32::from_str_radix(ma, 16).ok()? == major
            && u32::from_str_radix(mi, 16).ok()? == minor
            && i.parse::<u64>().ok()? == ino;
        same.then(|| w[4].parse().ok()).flatten()
    })
}

/// Refuse an output directory someone else could change under the recorder, as sshd refuses
/// a group-writable home: the directory and every directory above it must belong to root or
/// to this process's user, and none may be writable by its group or others — above it, unless
/// sticky (/tmp): there others cannot rename or remove what is not theirs. Otherwise another
/// local user could swap a file or directory for a symlink between two of our system calls.
pub(super) fn refuse_untrusted(dir: &Path) -> Result<(), SinkError> {
    use std::os::unix::fs::MetadataExt;
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    let refuse = |d: &Path, why: String| SinkError::Io {
        what: d.display().to_string(),
        error: std::io::Error::new(std::io::ErrorKind::PermissionDenied, why),
    };
    let real = fs::canonicalize(dir).map_err(io(format!("resolving {}", dir.display())))?;
    for (i, d) in real.ancestors().enumerate() {
        let m = fs::metadata(d).map_err(io(format!("reading {}", d.display())))?;
        let mode = m.mode() & 0o7777;
        if m.uid() != 0 && m.uid() != me {
            return Err(refuse(
                d,
                format!("is owned by uid {}, not by root or this user ({me}): its owner could replace what cachescope writes there; record into a directory of your own", m.uid()),
            ));
        }
        let sticky = mode & 0o1000 != 0;
        if mode & 0o022 != 0 && (i == 0 || !sticky) {
            return Err(refuse(
                d,
                format!("is writable by others than its owner (mode {mode:04o}): they could replace what cachescope writes there; chmod go-w {} or record elsewhere", d.display()),
            ));
        }
    }
    Ok(())
}

/// YYYYmmddTHHMMSS from seconds since the epoch (UTC), for file names that sort by time.
pub(super) fn utc_stamp(secs: i64) -> String {
    let (y, m, d, h, min, s) = cachescope_platform::clock::utc_civil(secs);
    format!("{y:04}{m:02}{d:02}T{h:02}{min:02}{s:02}")
}

/// Refuse a directory on a kernel pseudo-filesystem: under /sys/fs/cgroup `mkdir` creates a
/// cgroup, and /proc or /sys hold no files of ours. The nearest existing ancestor is asked.
pub(super) fn refuse_pseudo_fs(dir: &Path) -> Result<(), SinkError> {
    const PSEUDO: [(i64, &str); 5] = [
        (0x6367_7270, "cgroup2"),
        (0x0027_e0eb, "cgroup"),
        (0x6265_6572, "sysfs"),
        (0x9fa0, "proc"),
        (0x7472_6163, "tracefs"),
    ];
    let Some(existing) = dir.ancestors().find(|a| a.exists()) else { return Ok(()) };
    let Ok(c) = std::ffi::CString::new(existing.as_os_str().as_encoded_bytes()) else { return Ok(()) };
    // SAFETY: libc::statfs is plain old data: all zeroes is a valid value.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: statfs reads the NUL-terminated path `c` (alive for the call) and writes one
    // statfs struct we own.
    if unsafe { libc::statfs(c.as_ptr(), &mut st) } != 0 {
        return Ok(());
    }
    match PSEUDO.iter().find(|(m, _)| *m == st.f_type as i64) {
        Some((_, fs)) => Err(SinkError::Io {
            what: dir.display().to_string(),
            error: std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("is on a {fs} filesystem ({}), not a place for files", existing.display()),
            ),
        }),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_holder_is_found_by_device_and_inode() {
        let locks = "1: POSIX  ADVISORY  WRITE 77 fd:01:5678 0 EOF\n\
                     2: FLOCK  ADVISORY  WRITE 1234 fd:01:5678 0 EOF\n\
                     2: -> FLOCK  ADVISORY  WRITE 99 fd:01:5678 0 EOF\n\
                     3: FLOCK  ADVISORY  WRITE 555 08:11:5678 0 EOF\n";
        assert_eq!(super::holder_in(locks, 0xfd, 1, 5678), Some(1234));
        assert_eq!(super::holder_in(locks, 8, 0x11, 5678), Some(555));
        assert_eq!(super::holder_in(locks, 0xfd, 1, 5679), None);
        assert_eq!(super::holder_in("garbage\n\n", 0xfd, 1, 5678), None);
    }
}
