//! When a run wakes: an absolute timerfd ([`Ticker`]) on the wall clock, or virtual time
//! (`--fast`) that steps as fast as the work allows. The stop flag comes from outside
//! (signal handlers, a test).

use crate::sched::{Ticker, TickerError};
use cachescope_platform::clock::monotonic;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// One wake-up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Wake {
    /// Time since the run's start.
    pub t: Duration,
    pub late: Duration,
    /// Wake-ups missed before this one.
    pub missed: u64,
    /// The last one (the run's duration is reached).
    pub last: bool,
}

pub struct Clock {
    ticker: Option<Ticker>,
    period: Duration,
    step: u64,
    stop: Arc<AtomicBool>,
    until: Option<Duration>,
    origin: Duration,
    done: bool,
    /// Why the ticker stopped, when it failed: the run ends with it, not silently.
    failed: Option<TickerError>,
}

impl Clock {
    /// Wake every `period`, until `until` (since the start) or the stop flag; `virtual_time`
    /// steps without waiting.
    pub fn new(
        period: Duration,
        until: Option<Duration>,
        virtual_time: bool,
        stop: Arc<AtomicBool>,
    ) -> Result<Clock, TickerError> {
        let ticker = if virtual_time { None } else { Some(Ticker::new(period)?) };
        let origin = ticker.as_ref().map_or_else(monotonic, Ticker::origin);
        Ok(Clock { ticker, period, step: 0, stop, until, origin, done: false, failed: None })
    }

    /// CLOCK_MONOTONIC at the run's t = 0 (for sources that stamp their own samples).
    pub fn origin(&self) -> Duration {
        self.origin
    }

    /// Time since the run's start on the wall clock (None in virtual time).
    pub fn elapsed(&self) -> Option<Duration> {
        self.ticker.as_ref().map(Ticker::elapsed)
    }

    /// Why [`Clock::wait`] returned None, if the ticker failed.
    pub fn take_failure(&mut self) -> Option<TickerError> {
        self.failed.take()
    }

    pub fn is_virtual(&self) -> bool {
        self.ticker.is_none()
    }

    /// Wait for the next wake-up; None to stop. The last wake-up is cut to the duration.
    pub fn wait(&mut self) -> Option<Wake> {
        if self.done || self.stop.load(Ordering::Relaxed) {
            return None;
        }
        let mut w = match self.ticker.as_mut() {
            None => {
                self.step += 1;
                Wake { t: self.period * self.step as u32, late: Duration::ZERO, missed: 0, last: false }
            }
            Some(ticker) => {
                let tick = match ticker.wait() {
                    Ok(t) => t,
                    Err(e) => {
                        self.failed = Some(e);
                        self.done = true;
                        return None;
                    }
                };
                if self.stop.load(Ordering::Relaxed) {
                    return None;
                }
                Wake { t: ticker.elapsed(), late: tick.late, missed: tick.missed, last: false }
            }
        };
        if let Some(u) = self.until {
            if w.t >= u {
                w.t = u;
                w.last = true;
                self.done = true;
            }
        }
        Some(w)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    /// A ticker whose descriptor stops answering ends the run with the reason, never as if
    /// the run had been asked to stop.
    #[test]
    fn a_failing_ticker_is_reported_not_taken_for_a_stop() {
        let mut c = Clock::new(Duration::from_millis(1), None, false, Arc::new(AtomicBool::new(false))).unwrap();
        assert!(c.wait().is_some());
        let ticker = c.ticker.as_ref().unwrap();
        // A descriptor open for writing only: its reads fail with EBADF.
        let null = std::fs::OpenOptions::new().write(true).open("/dev/null").unwrap();
        // SAFETY: both descriptors are open and owned here (the ticker's stays open, now a
        // duplicate of /dev/null's).
        assert!(unsafe { libc::dup2(null.as_raw_fd(), ticker.raw_fd()) } >= 0);
        assert_eq!(c.wait(), None);
        let e = c.take_failure().expect("the ticker's failure is kept for the run to report");
        assert!(e.to_string().contains("Bad file descriptor"), "{e}");
        assert_eq!(c.wait(), None, "and the clock stays stopped");
    }
}
