//! Prometheus text exposition (format 0.0.4) of docs/metrics.md. The state is the latest
//! occupancy and the running counter totals per (container, domain); a stopped container's
//! series are dropped (Prometheus marks them stale), so the page shows what runs now.
//! Absent values are absent series, never 0.

use cachescope_engine::row::{ContainerMeta, Row, Status};
use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Arc;

/// Upper bounds of the lateness histogram, seconds.
pub const LATENESS_BUCKETS: [f64; 11] = [1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 1e-1];

const COUNTERS: [(&str, &str); 7] = [
    (
        "cachescope_mbm_total_bytes_total",
        "Bytes moved to and from memory (MBM total) by the container's RMID in this L3 domain.",
    ),
    ("cachescope_mbm_local_bytes_total", "Bytes moved to and from the local memory node (MBM local)."),
    ("cachescope_cycles_total", "CPU cycles of the container's threads on this domain's CPUs."),
    ("cachescope_instructions_total", "Instructions retired by the container's threads on this domain's CPUs."),
    ("cachescope_llc_references_total", "Last-level cache references (PMU) of the container's threads."),
    ("cachescope_llc_misses_total", "Last-level cache misses (PMU) of the container's threads."),
    ("cachescope_cpu_seconds_total", "CPU time of the container's threads on this domain's CPUs."),
];
/// The last counter is kept in ns and shown in seconds.
const CPU_COUNTER: usize = 6;

#[derive(Default)]
struct Series {
    meta: Arc<ContainerMeta>,
    occupancy: Option<u64>,
    /// Running totals; None until the first value arrives.
    totals: [Option<u64>; COUNTERS.len()],
}

#[derive(Default)]
pub struct Metrics {
    /// container id → domain → series (nested so an update looks up by &str).
    series: BTreeMap<String, BTreeMap<u32, Series>>,
    pub rmids_in_use: u64,
    pub rmids_limbo: Option<u64>,
    pub containers_unmonitored: u64,
    lateness_buckets: [u64; LATENESS_BUCKETS.len()],
    lateness_count: u64,
    lateness_sum: f64,
    /// Rows whose counters read Error: a read that should have had a value.
    read_errors: u64,
    missed_ticks: u64,
    /// Charges the PMU source dropped (the collector fell behind).
    pmu_lost_charges: u64,
    pmu_kernel_cpu: Option<cachescope_engine::pmu::KernelCpu>,
    /// (domain, L3 bytes).
    l3_bytes: Vec<(u32, u64)>,
    /// What drives emulated values, when they are.
    emulated: Option<String>,
    /// The live noisy-neighbour finder's board, where the run has one.
    pub board: Option<crate::noisy::SharedBoard>,
}

/// `name="value",...`, values escaped.
fn label_set(pairs: &[(&str, &str)]) -> String {
    let mut s = String::new();
    for (i, (k, v)) in pairs.iter().enumerate() {
        let _ = write!(s, "{}{k}=\"{}\"", if i == 0 { "" } else { "," }, escape(v));
    }
    s
}

pub(crate) fn escape(v: &str) -> String {
    let mut s = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => s.push_str("\\\\"),
            '"' => s.push_str("\\\""),
            '\n' => s.push_str("\\n"),
            c => s.push(c),
        }
    }
    s
}

impl Metrics {
    pub fn new() -> Metrics {
        Metrics::default()
    }

    /// Take one interval's rows (all of them, not the sparse subset).
    pub fn update(&mut self, rows: &[Row]) {
        for r in rows {
            let doms = match self.series.get_mut(r.container.id.as_str()) {
                Some(d) => d,
                None => self.series.entry(r.container.id.clone()).or_default(),
            };
            let s = doms.entry(r.domain).or_default();
            s.meta = r.container.clone();
            s.occupancy = r.llc_occupancy_bytes;
            for (t, x) in s.totals.iter_mut().zip(r.counters()) {
                if let Some(x) = x {
                    *t = Some(t.unwrap_or(0).wrapping_add(x));
                }
            }
            // Unavailable (no data can exist: the container never ran on that domain) and
            // Unassigned (no counter assigned) are states, not failed reads.
            if r.status == Status::Error {
                self.read_errors += 1;
            }
        }
    }

    /// The run's state (RMIDs, missed wake-ups, L3 sizes, the emulation marker).
    pub fn set_status(&mut self, st: &cachescope_engine::RunStatus) {
        self.rmids_in_use = st.rmids_in_use;
        self.rmids_limbo = st.rmids_limbo;
        self.containers_unmonitored = st.unmonitored;
        self.missed_ticks = st.missed;
        self.pmu_lost_charges = st.pmu_lost_charges;
        self.pmu_kernel_cpu = st.pmu_kernel_cpu;
        self.l3_bytes = st.l3_bytes.clone();
        self.emulated = st.emulated.clone();
    }

    pub fn observe_lateness(&mut self, late: std::time::Duration) {
        let s = late.as_secs_f64();
        for (b, le) in self.lateness_buckets.iter_mut().zip(LATENESS_BUCKETS) {
            if s <= le {
                *b += 1;
            }
        }
        self.lateness_count += 1;
        self.lateness_sum += s;
    }

    /// A container stopped: its series leave the page.
    pub fn forget(&mut self, id: &str) {
        self.series.remove(id);
    }

    fn labels(m: &ContainerMeta, domain: u32) -> String {
        label_set(&[
            ("container_id", &m.id),
            ("container_name", m.name().unwrap_or("")),
            ("pod_name", m.pod_name().unwrap_or("")),
            ("pod_namespace", m.pod_namespace().unwrap_or("")),
            ("domain", &domain.to_string()),
        ])
    }

    /// The labels cAdvisor (and the kubelet, which embeds it) put on container series:
    /// `id` the cgroup path, `name` and `image` from the runtime, `container`, `pod`,
    /// `namespace` from Kubernetes; `node_id` the L3 domain, as cAdvisor's resctrl metrics. A
    /// container without a cgroup (a scenario's) has no `id` (empty: absent to Prometheus), not
    /// "/", which is cAdvisor's id of the root cgroup, the whole machine.
    fn cadvisor_labels(m: &ContainerMeta, domain: u32) -> String {
        let id = if m.cgroup_path.is_empty() { String::new() } else { format!("/{}", m.cgroup_path) };
        label_set(&[
            ("id", &id),
            ("name", m.name().unwrap_or("")),
            ("image", m.image().unwrap_or("")),
            ("container", m.pod_container().unwrap_or("")),
            ("pod", m.pod_name().unwrap_or("")),
            ("namespace", m.pod_namespace().unwrap_or("")),
            ("node_id", &domain.to_string()),
        ])
    }

    /// The page.
    pub fn render(&self) -> String {
        let mut o = String::with_capacity(256 + self.series.len() * 2 * 10 * 200);
        // Each series' two label sets, made once for the page's eleven families.
        let series: Vec<(String, String, &Series)> = self
            .series
            .values()
            .flatten()
            .map(|(d, s)| (Self::labels(&s.meta, *d), Self::cadvisor_labels(&s.meta, *d), s))
            .collect();
        let _ = writeln!(o, "# HELP cachescope_llc_occupancy_bytes Last-level cache bytes held by the container's RMID in this L3 domain.");
        let _ = writeln!(o, "# TYPE cachescope_llc_occupancy_bytes gauge");
        for (l, _, s) in &series {
            if let Some(v) = s.occupancy {
                let _ = writeln!(o, "cachescope_llc_occupancy_bytes{{{l}}} {v}");
            }
        }
        for (i, (name, help)) in COUNTERS.iter().enumerate() {
            let _ = writeln!(o, "# HELP {name} {help}");
            let _ = writeln!(o, "# TYPE {name} counter");
            for (l, _, s) in &series {
                match s.totals[i] {
                    Some(v) if i == CPU_COUNTER => {
                        let _ = writeln!(o, "{name}{{{l}}} {}", v as f64 / 1e9);
                    }
                    Some(v) => {
                        let _ = writeln!(o, "{name}{{{l}}} {v}");
                    }
                    None => {}
                }
            }
        }
        // cAdvisor's names for the same values, so dashboards built on them work unchanged
        // (docs/metrics.md): gauges, MBM as running byte totals.
        type Value = fn(&Series) -> Option<u64>;
        for (name, help, value) in [
            (
                "container_llc_occupancy_bytes",
                "Last level cache usage of the container in this L3 domain (cAdvisor's name; cachescope_llc_occupancy_bytes).",
                (|s| s.occupancy) as Value,
            ),
            (
                "container_memory_bandwidth_bytes",
                "Memory bandwidth (MBM total) of the container, running byte total (cAdvisor's name; cachescope_mbm_total_bytes_total).",
                |s| s.totals[0],
            ),
            (
                "container_memory_bandwidth_local_bytes",
                "Local memory bandwidth (MBM local) of the container, running byte total (cAdvisor's name; cachescope_mbm_local_bytes_total).",
                |s| s.totals[1],
            ),
        ] {
            let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} gauge");
            for (_, l, s) in &series {
                if let Some(v) = value(s) {
                    let _ = writeln!(o, "{name}{{{l}}} {v}");
                }
            }
        }
        for (name, help, v) in [
            ("cachescope_rmids_in_use", "RMIDs held by monitored containers.", Some(self.rmids_in_use)),
            // Absent where the backend cannot tell (resctrl): unknown is not 0.
            ("cachescope_rmids_limbo", "Freed RMIDs waiting for their cache lines to decay.", self.rmids_limbo),
            (
                "cachescope_containers_unmonitored",
                "Containers without an RMID (reported as no_rmid).",
                Some(self.containers_unmonitored),
            ),
        ] {
            let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} gauge");
            if let Some(v) = v {
                let _ = writeln!(o, "{name} {v}");
            }
        }
        let h = "cachescope_sample_lateness_seconds";
        let _ = writeln!(o, "# HELP {h} How late each sampling tick ran after its deadline.\n# TYPE {h} histogram");
        for (le, c) in LATENESS_BUCKETS.iter().zip(self.lateness_buckets) {
            let _ = writeln!(o, "{h}_bucket{{le=\"{le}\"}} {c}");
        }
        let _ = writeln!(o, "{h}_bucket{{le=\"+Inf\"}} {}", self.lateness_count);
        let _ = writeln!(o, "{h}_sum {}", self.lateness_sum);
        let _ = writeln!(o, "{h}_count {}", self.lateness_count);
        let e = "cachescope_read_errors_total";
        let _ = writeln!(
            o,
            "# HELP {e} Samples whose counters read Error (a value should exist), by kind.\n# TYPE {e} counter"
        );
        let _ = writeln!(o, "{e}{{kind=\"error\"}} {}", self.read_errors);
        let m = "cachescope_missed_ticks_total";
        let _ =
            writeln!(o, "# HELP {m} Sampling wake-ups missed because the previous one overran.\n# TYPE {m} counter");
        let _ = writeln!(o, "{m} {}", self.missed_ticks);
        let p = "cachescope_pmu_lost_charges_total";
        let _ = writeln!(
            o,
            "# HELP {p} PMU charges dropped because the collector fell behind; those intervals' rows have no PMU values.\n# TYPE {p} counter"
        );
        let _ = writeln!(o, "{p} {}", self.pmu_lost_charges);
        if let Some(k) = self.pmu_kernel_cpu {
            let b = "cachescope_ebpf_cpu_seconds_total";
            let _ = writeln!(
                o,
                "# HELP {b} CPU time of the eBPF attribution in the kernel, not in the process's own: its tick timers, and its programs' runs while kernel.bpf_stats_enabled is 1 (absent otherwise).\n# TYPE {b} counter"
            );
            let _ = writeln!(o, "{b}{{part=\"timers\"}} {}", k.timers.as_secs_f64());
            if let Some(p) = k.programs {
                let _ = writeln!(o, "{b}{{part=\"programs\"}} {}", p.as_secs_f64());
            }
        }
        let l = "cachescope_l3_size_bytes";
        let _ = writeln!(o, "# HELP {l} Size of the L3 cache of each domain.\n# TYPE {l} gauge");
        for (d, b) in &self.l3_bytes {
            let _ = writeln!(o, "{l}{{domain=\"{d}\"}} {b}");
        }
        let em = "cachescope_emulated";
        let _ = writeln!(
            o,
            "# HELP {em} 1 when occupancy and bandwidth are emulated (not measured), with what drives them.\n# TYPE {em} gauge"
        );
        match &self.emulated {
            Some(why) => {
                let _ = writeln!(o, "{em}{{driven_by=\"{}\"}} 1", escape(why));
            }
            None => {
                let _ = writeln!(o, "{em}{{driven_by=\"\"}} 0");
            }
        }
        if let Some(board) = &self.board {
            if let Ok(b) = board.lock() {
                b.render(&mut o);
            }
        }
        let b = "cachescope_build_info";
        let _ = writeln!(o, "# HELP {b} The cachescope build serving these metrics.\n# TYPE {b} gauge");
        let _ = writeln!(o, "{b}{{version=\"{}\"}} 1", env!("CARGO_PKG_VERSION"));
        o
    }
}

#[cfg(test)]
mod tests;
