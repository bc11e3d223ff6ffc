//! CLOCK_MONOTONIC as a Duration since boot: the clock of timerfd deadlines and of
//! `bpf_ktime_get_ns`, so values taken here line up with both.

use std::time::Duration;

pub fn monotonic() -> Duration {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one timespec we own; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}
