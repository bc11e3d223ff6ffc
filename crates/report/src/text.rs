//! The per-container table of `cachescope report`, as text: aligned columns whatever the
//! names (long ones are shortened from the middle, control characters shown escaped).

use crate::summary::Summary;
use crate::svg::shorten;

/// The name column's width.
const NAME: usize = 28;

/// The summaries as a plain table.
pub fn table(rows: &[Summary]) -> String {
    use std::fmt::Write;
    let mib = |v: Option<u64>| v.map_or("-".into(), |b| format!("{:.2}", b as f64 / 1048576.0));
    let mbs = |v: Option<f64>| v.map_or("-".into(), |b| format!("{:.1}", b / 1e6));
    let f2 = |v: Option<f64>| v.map_or("-".into(), |x| format!("{x:.2}"));
    let cpus = |v: Option<f64>| v.map_or("-".into(), |x| format!("{x:.3}"));
    let mut o = String::new();
    let _ = writeln!(
        o,
        "{:<NAME$} {:>8} {:>8} {:>9} {:>9} {:>9} {:>10} {:>10} {:>6} {:>7} {:>7} {:>7} {:>7}",
        "CONTAINER",
        "SECONDS",
        "SAMPLES",
        "OCC_P50",
        "OCC_P99",
        "OCC_MAX",
        "MBM_MEAN",
        "MBM_PEAK",
        "IPC",
        "MPKI",
        "NO_RMID",
        "CPU_P50",
        "CPU_P99"
    );
    let _ = writeln!(
        o,
        "{:<NAME$} {:>8} {:>8} {:>9} {:>9} {:>9} {:>10} {:>10} {:>6} {:>7} {:>7} {:>7} {:>7}",
        "", "", "", "MiB", "MiB", "MiB", "MB/s", "MB/s", "", "", "%", "CPUs", "CPUs"
    );
    for s in rows {
        // Names come from cgroup paths and runtimes: control characters are shown escaped.
        let label: String = s
            .container_name
            .as_deref()
            .unwrap_or(&s.container_id)
            .chars()
            .flat_map(|c| if c.is_control() { c.escape_default().collect() } else { vec![c] })
            .collect();
        // Shortened from the middle (both ends tell containers apart), so the columns line up.
        let label = shorten(&label, NAME);
        let _ = writeln!(
            o,
            "{:<NAME$} {:>8.1} {:>8} {:>9} {:>9} {:>9} {:>10} {:>10} {:>6} {:>7} {:>7.1} {:>7} {:>7}",
            label,
            s.seconds,
            s.samples,
            mib(s.occupancy_p50_bytes),
            mib(s.occupancy_p99_bytes),
            mib(s.occupancy_max_bytes),
            mbs(s.mbm_total_mean_bytes_per_sec),
            mbs(s.mbm_total_peak_bytes_per_sec),
            f2(s.ipc),
            f2(s.llc_mpki),
            s.no_rmid_share * 100.0,
            cpus(s.cpu_p50),
            cpus(s.cpu_p99)
        );
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(id: &str) -> Summary {
        Summary {
            container_id: id.into(),
            container_name: None,
            seconds: 3.0,
            samples: 300,
            occupancy_p50_bytes: Some(1 << 20),
            occupancy_p99_bytes: Some(3 << 20),
            occupancy_max_bytes: Some(3 << 20),
            mbm_total_mean_bytes_per_sec: Some(100e6),
            mbm_total_peak_bytes_per_sec: Some(100e6),
            mbm_local_mean_bytes_per_sec: None,
            ipc: Some(0.5),
            llc_mpki: Some(10.0),
            no_rmid_share: 0.0,
            cpu_mean: Some(0.25),
            cpu_p50: Some(0.125),
            cpu_p99: None,
        }
    }

    #[test]
    fn columns_stay_aligned_whatever_the_names() {
        let long = format!("docker-{}.scope", "3f2a9c".repeat(11));
        let t = table(&[summary("web"), summary(&long), summary("evil\u{1b}[2Jname")]);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 5, "{t}");
        let width = lines[2].chars().count();
        assert!(lines[2..].iter().all(|l| l.chars().count() == width), "aligned:\n{t}");
        assert!(lines[3].starts_with("docker-3f2a9") && lines[3].contains('…') && lines[3].contains(".scope "), "{t}");
        assert!(lines[2].contains("100.0") && !t.contains('\u{1b}'), "{t}");
        assert!(lines[0].ends_with("CPU_P50 CPU_P99") && lines[2].ends_with("  0.125       -"), "{t}");
    }
}
