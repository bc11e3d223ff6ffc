//! The few system calls detection needs, behind a trait so the reasoning above them is
//! testable without a kernel that says yes.

use std::io;
use std::os::fd::{FromRawFd, OwnedFd};
use std::path::Path;

pub trait SyscallProbe {
    /// Open (and close) a hardware CPU-cycles counter on this process.
    fn perf_cycles(&self) -> io::Result<()>;
    /// Create (and close) a one-entry BPF array map.
    fn bpf_map_create(&self) -> io::Result<()>;
    /// Open (and close) a device file read-write.
    fn open_rw(&self, path: &Path) -> io::Result<()>;
}

/// The real kernel.
#[derive(Debug, Default, Clone, Copy)]
pub struct LiveProbe;

/// `struct perf_event_attr` up to `config1` (PERF_ATTR_SIZE_VER0, 64 bytes): the kernel
/// accepts any older size and zero-fills the rest.
#[repr(C)]
#[derive(Default)]
struct PerfEventAttrV0 {
    type_: u32,
    size: u32,
    config: u64,
    sample_period: u64,
    sample_type: u64,
    read_format: u64,
    flags: u64,
    wakeup_events: u32,
    bp_type: u32,
    config1: u64,
}

const PERF_TYPE_HARDWARE: u32 = 0;
const PERF_COUNT_HW_CPU_CYCLES: u64 = 0;
const FLAG_DISABLED: u64 = 1 << 0;
const FLAG_EXCLUDE_KERNEL: u64 = 1 << 5;
const FLAG_EXCLUDE_HV: u64 = 1 << 6;
const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 1 << 3;

/// The head of `union bpf_attr` for BPF_MAP_CREATE.
#[repr(C)]
#[derive(Default)]
struct BpfMapCreateAttr {
    map_type: u32,
    key_size: u32,
    value_size: u32,
    max_entries: u32,
    map_flags: u32,
}

const BPF_MAP_CREATE: libc::c_long = 0;
const BPF_MAP_TYPE_ARRAY: u32 = 2;

fn fd_result(ret: libc::c_long) -> io::Result<OwnedFd> {
    if ret < 0 {
        return Err(io::Error::last_os_error());
    }
    let fd = i32::try_from(ret).map_err(|_| io::Error::other("kernel returned an out-of-range fd"))?;
    // SAFETY: a non-negative return from these syscalls is a new file descriptor that nothing
    // else owns; OwnedFd closes it when dropped.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

impl SyscallProbe for LiveProbe {
    fn perf_cycles(&self) -> io::Result<()> {
        let attr = PerfEventAttrV0 {
            type_: PERF_TYPE_HARDWARE,
            size: std::mem::size_of::<PerfEventAttrV0>() as u32,
            config: PERF_COUNT_HW_CPU_CYCLES,
            // User-space only, so perf_event_paranoid <= 2 allows it without privileges.
            flags: FLAG_DISABLED | FLAG_EXCLUDE_KERNEL | FLAG_EXCLUDE_HV,
            ..Default::default()
        };
        // SAFETY: `attr` is a valid, initialised perf_event_attr prefix whose `size` field
        // matches its length; pid 0 / cpu -1 / group -1 measure this process on any CPU.
        let ret = unsafe {
            libc::syscall(
                libc::SYS_perf_event_open,
                &attr as *const PerfEventAttrV0,
                0 as libc::pid_t,
                -1 as libc::c_int,
                -1 as libc::c_int,
                PERF_FLAG_FD_CLOEXEC,
            )
        };
        fd_result(ret).map(drop)
    }

    fn bpf_map_create(&self) -> io::Result<()> {
        let attr =
            BpfMapCreateAttr { map_type: BPF_MAP_TYPE_ARRAY, key_size: 4, value_size: 8, max_entries: 1, map_flags: 0 };
        // SAFETY: `attr` is a valid, zero-padded prefix of union bpf_attr for BPF_MAP_CREATE
        // and the size argument is its exact length; the kernel only reads it.
        let ret = unsafe {
            libc::syscall(
                libc::SYS_bpf,
                BPF_MAP_CREATE,
                &attr as *const BpfMapCreateAttr,
                std::mem::size_of::<BpfMapCreateAttr>() as libc::c_uint,
            )
        };
        fd_result(ret).map(drop)
    }

    fn open_rw(&self, path: &Path) -> io::Result<()> {
        std::fs::OpenOptions::new().read(true).write(true).open(path).map(drop)
    }
}
