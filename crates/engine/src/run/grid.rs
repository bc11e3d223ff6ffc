//! When a run samples.

use crate::backend::Sampling;
use std::time::Duration;

/// How often, at most, a run whose backend reads at every interval looks for new containers.
pub(super) const LIFECYCLE_EVERY: Duration = Duration::from_millis(10);

/// The sample times due by `limit`: each interval of the grid after `step` for batched
/// backends; for backends read from user space, `limit` itself once an interval (less half a
/// wake-up, so wake-up jitter does not skip one) has passed since the last read.
pub(super) fn due(
    sampling: Sampling,
    interval: Duration,
    wake: Duration,
    step: Duration,
    limit: Duration,
    out: &mut Vec<Duration>,
) {
    out.clear();
    if matches!(sampling, Sampling::Tick | Sampling::Kernel) {
        if limit > step && limit + wake / 2 >= step + interval {
            out.push(limit);
        }
        return;
    }
    let i = interval.as_nanos().max(1);
    let mut k = step.as_nanos() / i + 1;
    while Duration::from_nanos((k * i) as u64) <= limit {
        out.push(Duration::from_nanos((k * i) as u64));
        k += 1;
    }
}
