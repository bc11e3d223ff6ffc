//! A group's counters, kept open: one pread(2) per counter and read.

use crate::{io_err, Domain, ResctrlError, Value};
use cachescope_hw::msr::Event;
use cachescope_platform::clock::monotonic;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

struct Slot {
    domain: u32,
    event: Event,
    file: File,
}

/// A group's `mon_data` files, kept open and read with pread(2): one syscall per counter.
pub struct GroupReader {
    slots: Vec<Slot>,
    buf: [u8; 32],
}

/// One counter of one group in one domain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Read {
    pub domain: u32,
    pub event: Event,
    pub value: Value,
    /// CLOCK_MONOTONIC halfway through the read: when the kernel read the counter, give or
    /// take half the syscall (milliseconds on a loaded host, or over FUSE).
    pub at: std::time::Duration,
}

/// Why a read produced no value.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The group was removed (by someone else) between listing and reading.
    #[error("group vanished")]
    Gone,
    #[error("read failed: {0}")]
    Io(io::Error),
    #[error("unexpected contents {0:?}")]
    Parse(String),
}

impl GroupReader {
    /// The counter files under a group's `mon_data` (`base`): one per L3 domain and event, or,
    /// with Sub-NUMA Clustering, one per node (`mon_sub_L3_YY`, domain = the node's id) and
    /// event.
    pub(crate) fn open(base: &Path, domains: &[Domain], events: &[Event]) -> Result<GroupReader, ResctrlError> {
        let mut slots = Vec::new();
        for d in domains {
            let dir = base.join(format!("mon_L3_{:02}", d.id));
            // With SNC each node is a domain of its own (the L3 file is their sum).
            let parts: Vec<(u32, PathBuf)> = if d.sub.is_empty() {
                vec![(d.id, dir)]
            } else {
                d.sub.iter().map(|&n| (n, dir.join(format!("mon_sub_L3_{n:02}")))).collect()
            };
            for (domain, dir) in parts {
                for &e in events {
                    let p = dir.join(e.name());
                    let file = File::open(&p).map_err(io_err(&p))?;
                    slots.push(Slot { domain, event: e, file });
                }
            }
        }
        Ok(GroupReader { slots, buf: [0; 32] })
    }

    /// Read every counter into `out` (cleared first).
    pub fn read_all(&mut self, out: &mut Vec<Read>) -> Result<(), ReadError> {
        out.clear();
        for s in &self.slots {
            let before = monotonic();
            let read = s.file.read_at(&mut self.buf, 0);
            let at = before + monotonic().saturating_sub(before) / 2;
            let n = match read {
                Ok(n) => n,
                Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT) | Some(libc::ENODEV)) => {
                    return Err(ReadError::Gone)
                }
                Err(e) => return Err(ReadError::Io(e)),
            };
            let text = &self.buf[..n];
            let value = Value::parse(text).ok_or_else(|| ReadError::Parse(String::from_utf8_lossy(text).into()))?;
            out.push(Read { domain: s.domain, event: s.event, value, at });
        }
        Ok(())
    }

    pub fn len(&self) -> usize {
        self.slots.len()
    }

    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }
}
