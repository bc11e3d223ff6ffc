//! CLOCK_MONOTONIC as a Duration since boot: the clock of timerfd deadlines and of
//! `bpf_ktime_get_ns`, so values taken here line up with both.

use std::time::Duration;

pub fn monotonic() -> Duration {
    read(libc::CLOCK_MONOTONIC)
}

/// CPU time the calling thread has used: what work costs, whatever else the machine runs
/// (wall time between two points also counts the time the thread was preempted).
pub fn thread_cpu() -> Duration {
    read(libc::CLOCK_THREAD_CPUTIME_ID)
}

fn read(clock: libc::clockid_t) -> Duration {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one timespec we own; both clocks used here always exist on
    // Linux.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}
