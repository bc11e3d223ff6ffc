//! Durations as the CLI accepts them: `500us`, `1ms`, `2s`, `1m` (docs/cli.md).

use std::time::Duration;

pub fn parse(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .ok_or_else(|| format!("{s:?} has no unit (use us, ms, s or m)"))?;
    let (num, unit) = t.split_at(split);
    let n: f64 = num.parse().map_err(|_| format!("{s:?} does not start with a number"))?;
    let scale = match unit {
        "us" | "µs" => 1e-6,
        "ms" => 1e-3,
        "s" => 1.0,
        "m" => 60.0,
        "h" => 3600.0,
        _ => return Err(format!("{s:?}: unknown unit {unit:?} (use us, ms, s or m)")),
    };
    let secs = n * scale;
    if !secs.is_finite() || secs <= 0.0 || secs > 1e9 {
        return Err(format!("{s:?} is not a positive duration"));
    }
    Ok(Duration::from_secs_f64(secs))
}

#[cfg(test)]
mod tests {
    #[test]
    fn forms() {
        use std::time::Duration;
        assert_eq!(super::parse("500us"), Ok(Duration::from_micros(500)));
        assert_eq!(super::parse("1ms"), Ok(Duration::from_millis(1)));
        assert_eq!(super::parse("2s"), Ok(Duration::from_secs(2)));
        assert_eq!(super::parse("1m"), Ok(Duration::from_secs(60)));
        assert_eq!(super::parse("1.5s"), Ok(Duration::from_millis(1500)));
        for bad in ["", "5", "ms", "0s", "-1s", "3 parsecs", "1e999s"] {
            assert!(super::parse(bad).is_err(), "{bad}");
        }
    }
}
