//! CLOCK_MONOTONIC as a Duration since boot: the clock of timerfd deadlines and of
//! `bpf_ktime_get_ns`, so values taken here line up with both; CPU time; the wall clock.

use std::time::Duration;

pub fn monotonic() -> Duration {
    read(libc::CLOCK_MONOTONIC)
}

/// The wall clock (CLOCK_REALTIME) in ns since the epoch, as rows and files carry it; 0 for
/// a clock set before 1970.
pub fn realtime_ns() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as i64)
}

/// The wall clock's reading (ns since the epoch) at the past CLOCK_MONOTONIC instant `mono`:
/// the two clocks read back to back, the wall clock between two monotonic readings, so a
/// thread preempted since `mono` (a loaded host: hundreds of ms) does not shift it.
pub fn realtime_ns_at(mono: Duration) -> i64 {
    let before = monotonic();
    let real = realtime_ns();
    let after = monotonic();
    let now = before + (after - before) / 2;
    real.saturating_sub(now.saturating_sub(mono).as_nanos().min(i64::MAX as u128) as i64)
}

/// CPU time the calling thread has used: what work costs, whatever else the machine runs
/// (wall time between two points also counts the time the thread was preempted).
pub fn thread_cpu() -> Duration {
    read(libc::CLOCK_THREAD_CPUTIME_ID)
}

/// CPU time used by every thread of this process so far (what the benchmarks charge a run).
pub fn process_cpu() -> Duration {
    read(libc::CLOCK_PROCESS_CPUTIME_ID)
}

fn read(clock: libc::clockid_t) -> Duration {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one timespec we own; the clocks used here always exist on
    // Linux.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// The UTC calendar date and time of `secs` since the epoch: (year, month, day, hour, minute,
/// second). Days to civil date by the well-known era arithmetic (proleptic Gregorian).
pub fn utc_civil(secs: i64) -> (i64, i64, i64, i64, i64, i64) {
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d, rem / 3600, rem / 60 % 60, rem % 60)
}

#[cfg(test)]
mod tests {
    #[test]
    fn civil_dates_across_eras_and_leap_days() {
        assert_eq!(super::utc_civil(0), (1970, 1, 1, 0, 0, 0));
        assert_eq!(super::utc_civil(951_782_400), (2000, 2, 29, 0, 0, 0));
        assert_eq!(super::utc_civil(1_795_654_518), (2026, 11, 26, 0, 55, 18));
        assert_eq!(super::utc_civil(-1), (1969, 12, 31, 23, 59, 59));
    }

    /// The wall clock at a past instant is that instant's, not the reading's: 30 ms later it
    /// still names the earlier time (bounded by readings taken around it; the upper bound is
    /// exact whatever the load, the lower one allows a preemption between two reads).
    #[test]
    fn the_wall_clock_at_a_past_instant() {
        let before = super::realtime_ns();
        let mono = super::monotonic();
        let after = super::realtime_ns();
        std::thread::sleep(std::time::Duration::from_millis(30));
        let at = super::realtime_ns_at(mono);
        let now = super::realtime_ns();
        assert!(at <= now - 30_000_000, "{at} is not 30 ms before {now}");
        assert!(at >= before - 1_000_000_000 && at <= after + 1_000_000_000, "{before} {at} {after}");
    }
}
