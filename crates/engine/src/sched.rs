//! The sampling clock: a timerfd on CLOCK_MONOTONIC armed with absolute deadlines
//! (start + k × interval), so lateness never accumulates into drift. Each wait reports how
//! late the tick was handled and how many ticks were missed (the timerfd's expiration count
//! beyond one); [`Lateness`] keeps the distribution.

use cachescope_platform::clock::monotonic;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::Duration;

pub const MIN_INTERVAL: Duration = Duration::from_micros(100);
pub const MAX_INTERVAL: Duration = Duration::from_secs(3600);

#[derive(Debug, thiserror::Error)]
pub enum TickerError {
    #[error("interval {0:?} is outside 100us..1h")]
    Interval(Duration),
    #[error("timerfd: {0}")]
    Io(#[from] io::Error),
}

/// One tick as handled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tick {
    /// Index of the deadline this tick stands for (1, 2, ...; jumps when ticks were missed).
    pub index: u64,
    /// Its deadline, since the ticker started.
    pub due: Duration,
    /// How long after the deadline the wait returned.
    pub late: Duration,
    /// Deadlines that passed unhandled before this one.
    pub missed: u64,
}

fn to_ts(d: Duration) -> libc::timespec {
    libc::timespec { tv_sec: d.as_secs() as libc::time_t, tv_nsec: d.subsec_nanos() as libc::c_long }
}

pub struct Ticker {
    fd: OwnedFd,
    interval: Duration,
    start: Duration,
    index: u64,
    pub lateness: Lateness,
    pub missed: u64,
}

impl Ticker {
    /// Arm a ticker whose first deadline is one interval from now.
    pub fn new(interval: Duration) -> Result<Ticker, TickerError> {
        if !(MIN_INTERVAL..=MAX_INTERVAL).contains(&interval) {
            return Err(TickerError::Interval(interval));
        }
        // SAFETY: timerfd_create takes flags only; the returned descriptor is checked below.
        let raw = unsafe { libc::timerfd_create(libc::CLOCK_MONOTONIC, libc::TFD_CLOEXEC) };
        if raw < 0 {
            return Err(io::Error::last_os_error().into());
        }
        // SAFETY: raw is a fresh descriptor nobody else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let start = monotonic();
        let spec = libc::itimerspec { it_interval: to_ts(interval), it_value: to_ts(start + interval) };
        // SAFETY: fd is a timerfd; spec is a valid itimerspec; the old value is not wanted.
        let rc = unsafe { libc::timerfd_settime(fd.as_raw_fd(), libc::TFD_TIMER_ABSTIME, &spec, std::ptr::null_mut()) };
        if rc != 0 {
            return Err(io::Error::last_os_error().into());
        }
        Ok(Ticker { fd, interval, start, index: 0, lateness: Lateness::default(), missed: 0 })
    }

    pub fn interval(&self) -> Duration {
        self.interval
    }

    /// CLOCK_MONOTONIC when the ticker started (its t = 0).
    pub fn origin(&self) -> Duration {
        self.start
    }

    /// The timerfd (tests break it to see a failure reported).
    #[cfg(test)]
    pub(crate) fn raw_fd(&self) -> std::os::fd::RawFd {
        self.fd.as_raw_fd()
    }

    /// Time since the ticker started.
    pub fn elapsed(&self) -> Duration {
        monotonic().saturating_sub(self.start)
    }

    /// Block until the next deadline.
    pub fn wait(&mut self) -> Result<Tick, TickerError> {
        let mut expirations = 0u64;
        loop {
            // SAFETY: reads 8 bytes into a u64 we own from a timerfd.
            let n = unsafe { libc::read(self.fd.as_raw_fd(), (&mut expirations as *mut u64).cast(), 8) };
            if n == 8 {
                break;
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e.into());
            }
        }
        let missed = expirations.saturating_sub(1);
        self.index += expirations.max(1);
        self.missed += missed;
        let due = self.interval * self.index as u32;
        let late = self.elapsed().saturating_sub(due);
        self.lateness.record(late);
        Ok(Tick { index: self.index, due, late, missed })
    }
}

/// Lateness distribution: log-spaced buckets (8 per power of two of ns), exact max.
#[derive(Debug, Clone)]
pub struct Lateness {
    buckets: Vec<u64>,
    count: u64,
    max: Duration,
}

impl Default for Lateness {
    fn default() -> Self {
        Lateness { buckets: vec![0; 64 * 8], count: 0, max: Duration::ZERO }
    }
}

fn bucket(ns: u64) -> usize {
    if ns < 8 {
        return ns as usize;
    }
    let p = 63 - ns.leading_zeros() as usize; // ns in [2^p, 2^(p+1))
    let frac = ((ns >> (p - 3)) & 7) as usize;
    p * 8 + frac
}

fn bucket_upper(b: usize) -> u64 {
    if b < 8 {
        return b as u64;
    }
    let (p, frac) = (b / 8, (b % 8) as u64);
    ((8 + frac + 1) << (p - 3)).saturating_sub(1)
}

impl Lateness {
    pub fn record(&mut self, late: Duration) {
        let ns = late.as_nanos().min(u128::from(u64::MAX)) as u64;
        self.buckets[bucket(ns).min(64 * 8 - 1)] += 1;
        self.count += 1;
        self.max = self.max.max(late);
    }

    pub fn count(&self) -> u64 {
        self.count
    }

    pub fn max(&self) -> Duration {
        self.max
    }

    /// The q-quantile (0..=1), as the upper edge of its bucket (within 12.5 %), capped at max.
    pub fn quantile(&self, q: f64) -> Duration {
        if self.count == 0 {
            return Duration::ZERO;
        }
        let rank = ((q.clamp(0.0, 1.0) * self.count as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (b, n) in self.buckets.iter().enumerate() {
            seen += n;
            if seen >= rank {
                return Duration::from_nanos(bucket_upper(b)).min(self.max);
            }
        }
        self.max
    }

    pub fn reset(&mut self) {
        *self = Lateness::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_monotonic_and_tight() {
        let mut prev = 0;
        for ns in (0..100_000u64).chain([1 << 20, 1 << 30, u64::MAX >> 1]) {
            let b = bucket(ns);
            assert!(b >= prev || ns > 100_000);
            assert!(bucket_upper(b) >= ns, "{ns}");
            assert!(ns < 8 || (bucket_upper(b) as f64) < ns as f64 * 1.126, "{ns} -> {}", bucket_upper(b));
            prev = b;
        }
    }

    #[test]
    fn quantiles() {
        let mut l = Lateness::default();
        for us in 1..=100u64 {
            l.record(Duration::from_micros(us));
        }
        let p50 = l.quantile(0.5).as_nanos() as f64;
        assert!((50_000.0..=50_000.0 * 1.126).contains(&p50), "{p50}");
        assert_eq!(l.quantile(1.0), Duration::from_micros(100));
        assert_eq!(l.max(), Duration::from_micros(100));
        assert_eq!(Lateness::default().quantile(0.99), Duration::ZERO);
    }

    #[test]
    fn ticks_keep_absolute_deadlines_and_count_misses() {
        assert!(matches!(Ticker::new(Duration::from_micros(50)), Err(TickerError::Interval(_))));
        let mut t = Ticker::new(Duration::from_millis(1)).unwrap();
        // A loaded machine (CI, parallel tests) may preempt us past a deadline: every tick then
        // accounts for the deadlines it skipped, and its deadline stays on the absolute grid.
        let mut index = 0;
        for _ in 1..=20 {
            let k = t.wait().unwrap();
            assert_eq!(k.index, index + 1 + k.missed, "{k:?}");
            assert_eq!(k.due, Duration::from_millis(k.index));
            index = k.index;
        }
        let missed_before = t.missed;
        // Stall for 5 intervals: the next wait reports the deadlines that passed.
        std::thread::sleep(Duration::from_micros(5500));
        let k = t.wait().unwrap();
        assert!(k.missed >= 4, "{k:?}");
        assert_eq!(k.index, index + k.missed + 1);
        assert_eq!(t.missed, missed_before + k.missed);
        assert_eq!(t.lateness.count(), 21);
    }
}
