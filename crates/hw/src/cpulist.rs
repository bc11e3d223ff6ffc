//! The kernel's CPU-list syntax (`0-3,8,10-11`), as in sysfs `online` and `shared_cpu_list`.

use std::fmt::Write as _;

/// Largest CPU number accepted: guards against `0-4294967295` allocating the world.
pub const MAX_CPU: u32 = 1 << 16;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid CPU list {input:?}: {why}")]
pub struct CpuListError {
    pub input: String,
    pub why: String,
}

/// Parse a CPU list into sorted, de-duplicated CPU numbers. An empty (or all-whitespace) list
/// is valid and empty, as sysfs writes for "no CPUs".
pub fn parse(input: &str) -> Result<Vec<u32>, CpuListError> {
    let err = |why: String| CpuListError { input: input.to_string(), why };
    let mut cpus = Vec::new();
    let trimmed = input.trim();
    if trimmed.is_empty() {
        return Ok(cpus);
    }
    for part in trimmed.split(',') {
        let part = part.trim();
        let (lo, hi) = match part.split_once('-') {
            Some((a, b)) => (num(a).map_err(&err)?, num(b).map_err(&err)?),
            None => {
                let n = num(part).map_err(&err)?;
                (n, n)
            }
        };
        if lo > hi {
            return Err(err(format!("range {part:?} runs backwards")));
        }
        cpus.extend(lo..=hi);
    }
    cpus.sort_unstable();
    cpus.dedup();
    Ok(cpus)
}

fn num(s: &str) -> Result<u32, String> {
    let s = s.trim();
    let n: u32 = s.parse().map_err(|_| format!("{s:?} is not a CPU number"))?;
    if n > MAX_CPU {
        return Err(format!("CPU {n} is above the supported maximum {MAX_CPU}"));
    }
    Ok(n)
}

/// Format CPU numbers compactly (`[0,1,2,5]` → `0-2,5`).
pub fn format(cpus: &[u32]) -> String {
    let mut sorted = cpus.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let mut out = String::new();
    let mut i = 0;
    while i < sorted.len() {
        let start = sorted[i];
        let mut end = start;
        while i + 1 < sorted.len() && sorted[i + 1] == end + 1 {
            i += 1;
            end = sorted[i];
        }
        if !out.is_empty() {
            out.push(',');
        }
        if start == end {
            let _ = write!(out, "{start}");
        } else {
            let _ = write!(out, "{start}-{end}");
        }
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn parses_sysfs_forms() {
        assert_eq!(parse("0-3,8,10-11\n").unwrap(), vec![0, 1, 2, 3, 8, 10, 11]);
        assert_eq!(parse("5").unwrap(), vec![5]);
        assert_eq!(parse("\n").unwrap(), Vec::<u32>::new());
        assert_eq!(parse("3,1,1-2").unwrap(), vec![1, 2, 3]);
    }

    #[test]
    fn rejects_garbage() {
        for bad in ["a", "1-", "-1", "3-1", "1,,2", "99999999", "0-70000"] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn formats_compactly() {
        assert_eq!(format(&[0, 1, 2, 5, 7, 8]), "0-2,5,7-8");
        assert_eq!(format(&[]), "");
    }

    proptest! {
        #[test]
        fn roundtrip(cpus in proptest::collection::vec(0u32..512, 0..64)) {
            let mut want = cpus.clone();
            want.sort_unstable();
            want.dedup();
            prop_assert_eq!(parse(&format(&cpus)).unwrap(), want);
        }

        #[test]
        fn never_panics(s in "\\PC{0,40}") {
            let _ = parse(&s);
        }
    }
}
