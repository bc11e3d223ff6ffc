//! The output directory: one writer at a time, no pseudo-filesystem, names that sort by time.

use super::io;
use crate::SinkError;
use std::fs::{self, File};
use std::io::{Read, Write};
use std::path::Path;

/// The lock file of an output directory: flock'ed by its writer, holding its PID. The kernel
/// drops the lock when the writer dies, so a killed writer's lock is taken over.
pub const LOCK: &str = ".cachescope.lock";

/// Take `dir`'s lock, or say who holds it.
pub(super) fn lock_dir(dir: &Path) -> Result<File, SinkError> {
    use std::os::fd::AsRawFd;
    let path = dir.join(LOCK);
    let mut f = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(io(format!("opening {}", path.display())))?;
    // SAFETY: flock on a descriptor `f` owns; LOCK_NB never blocks.
    if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::WouldBlock {
            return Err(SinkError::Io { what: format!("locking {}", path.display()), error: e });
        }
        let mut holder = String::new();
        let _ = f.read_to_string(&mut holder);
        let pid = holder.trim().parse::<u32>().ok();
        return Err(SinkError::Busy { dir: dir.to_path_buf(), pid });
    }
    // Ours now: say who we are (the old holder's PID, if any, is stale).
    let _ = f.set_len(0).and_then(|()| f.write_all(format!("{}\n", std::process::id()).as_bytes()));
    Ok(f)
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
