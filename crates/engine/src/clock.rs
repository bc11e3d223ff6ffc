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
