//! Durations as the CLI accepts them: `500us`, `1ms`, `2s`, `1m`, `1h` (docs/cli.md), each
//! flag within its documented range.

use std::time::Duration;

const UNITS: &str = "us, ms, s, m or h";

/// A duration of any length cachescope can count (up to 10 years).
fn parse(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .ok_or_else(|| format!("{s:?} has no unit (use {UNITS})"))?;
    let (num, unit) = t.split_at(split);
    let n: f64 = num.parse().map_err(|_| format!("{s:?} does not start with a number"))?;
    let scale = match unit {
        "us" | "µs" => 1e-6,
        "ms" => 1e-3,
        "s" => 1.0,
        "m" => 60.0,
        "h" => 3600.0,
        _ => return Err(format!("{s:?}: unknown unit {unit:?} (use {UNITS})")),
    };
    let secs = n * scale;
    if !secs.is_finite() || secs <= 0.0 {
        return Err(format!("{s:?} is not a positive duration"));
    }
    if secs > TEN_YEARS.as_secs_f64() {
        return Err(format!("{s:?} is longer than 10 years"));
    }
    Ok(Duration::from_secs_f64(secs))
}

const TEN_YEARS: Duration = Duration::from_secs(10 * 366 * 86400);

/// `s` within `lo..=hi`, said with the range where it is not.
fn within(s: &str, lo: Duration, hi: Duration, range: &str) -> Result<Duration, String> {
    let d = parse(s)?;
    if d < lo || d > hi {
        return Err(format!("{s:?} is out of range: {range} (units {UNITS})"));
    }
    Ok(d)
}

/// `--interval`'s range: below 100 us the collector cannot keep its grid (a 0.5 us interval
/// made a 2 s run take 10.7 s); above 10 m counters may wrap between reads.
pub const INTERVALS: (Duration, Duration) = (Duration::from_micros(100), Duration::from_secs(600));

/// `--interval`: within [`INTERVALS`].
pub fn interval(s: &str) -> Result<Duration, String> {
    let (lo, hi) = INTERVALS;
    within(s, lo, hi, &format!("from {} to {}", short(lo), short(hi)))
}

/// A whole duration in the largest unit that writes it without a fraction (`100us`, `1ms`,
/// `10m`), as the docs write defaults and ranges.
pub fn short(d: Duration) -> String {
    let us = d.as_micros();
    let units = [(3_600_000_000, "h"), (60_000_000, "m"), (1_000_000, "s"), (1_000, "ms"), (1, "us")];
    let (size, unit) = units.into_iter().find(|(size, _)| us % size == 0 && us >= *size).unwrap_or((1, "us"));
    format!("{}{unit}", us / size)
}

/// `--duration`: 1us to 10 years (it must also cover one interval; checked with the interval).
pub fn run_length(s: &str) -> Result<Duration, String> {
    within(s, Duration::from_micros(1), TEN_YEARS, "from 1us to 10 years (87840h)")
}

/// `--print-every`: 10ms to 1h.
pub fn print_every(s: &str) -> Result<Duration, String> {
    within(s, Duration::from_millis(10), Duration::from_secs(3600), "from 10ms to 1h")
}

/// `--rotate-every`: 1s to 7 days.
pub fn rotate_every(s: &str) -> Result<Duration, String> {
    within(s, Duration::from_secs(1), Duration::from_secs(7 * 86400), "from 1s to 168h")
}

/// `--mbm-rotate`: 100ms to 1h (a turn shorter than two resctrl intervals measures nothing).
pub fn mbm_rotate(s: &str) -> Result<Duration, String> {
    within(s, Duration::from_millis(100), Duration::from_secs(3600), "from 100ms to 1h")
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    #[test]
    fn forms() {
        assert_eq!(super::parse("500us"), Ok(Duration::from_micros(500)));
        assert_eq!(super::parse("1ms"), Ok(Duration::from_millis(1)));
        assert_eq!(super::parse("2s"), Ok(Duration::from_secs(2)));
        assert_eq!(super::parse("1m"), Ok(Duration::from_secs(60)));
        assert_eq!(super::parse("2h"), Ok(Duration::from_secs(7200)));
        assert_eq!(super::parse("1.5s"), Ok(Duration::from_millis(1500)));
        for bad in ["", "5", "ms", "0s", "-1s", "3 parsecs", "1e999s"] {
            assert!(super::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn each_flag_keeps_its_range_and_says_it() {
        assert_eq!(super::interval("100us"), Ok(Duration::from_micros(100)));
        assert_eq!(super::interval("10m"), Ok(Duration::from_secs(600)));
        let e = super::interval("0.5us").unwrap_err();
        assert!(e.contains("from 100us to 10m") && e.contains("us, ms, s, m or h"), "{e}");
        assert!(super::interval("11m").is_err());
        let e = super::run_length("99999999999h").unwrap_err();
        assert!(e.contains("longer than 10 years"), "{e}");
        assert_eq!(super::run_length("24h"), Ok(Duration::from_secs(86400)));
        assert!(super::print_every("1ms").is_err());
        assert!(super::rotate_every("500ms").is_err());
        let e = super::parse("5").unwrap_err();
        assert!(e.contains("us, ms, s, m or h"), "{e}");
    }

    #[test]
    fn short_forms() {
        let d = |us| super::short(Duration::from_micros(us));
        assert_eq!(
            [d(100), d(1000), d(1500), d(100_000), d(600_000_000), d(7_200_000_000)],
            ["100us", "1ms", "1500us", "100ms", "10m", "2h"]
        );
    }
}
