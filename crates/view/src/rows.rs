//! The per-container view `monitor` shows: rows accumulated over a display period become
//! [`ViewRow`]s (rates, shares, ratios), printed as a plain table without a terminal or drawn
//! by the live terminal UI ([`crate::tui`]). Pure: no terminal here.

use cachescope_engine::row::{ipc, mpki, Row};
use cachescope_engine::ContainerMeta;
use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// One (container, domain) line of the view over one display period, or (`domain` None) a
/// container's domains folded into one line.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ViewRow {
    pub id: String,
    pub label: String,
    pub domain: Option<u32>,
    pub rmid: Option<u32>,
    pub status: &'static str,
    pub occupancy: Option<u64>,
    pub occupancy_share: Option<f64>,
    /// MBM total and local, bytes per second.
    pub mbm_total: Option<f64>,
    pub mbm_local: Option<f64>,
    pub ipc: Option<f64>,
    pub mpki: Option<f64>,
    /// The period's counts behind `ipc` and `mpki` (what folding sums).
    pub cycles: Option<u64>,
    pub instructions: Option<u64>,
    pub misses: Option<u64>,
    /// L3 size of the row's domain (of all its domains, folded).
    pub l3_bytes: Option<u64>,
}

pub const COLUMNS: [&str; 10] =
    ["CONTAINER", "DOMAIN", "RMID", "STATUS", "LLC_MiB", "LLC_%", "MBM_TOT_MB/s", "MBM_LOC_MB/s", "IPC", "LLC_MPKI"];

impl ViewRow {
    /// The cells under [`COLUMNS`]; "-" where a value is absent (never 0 for absent).
    pub fn cells(&self) -> [String; 10] {
        let f = |v: Option<f64>, digits: usize| v.map_or("-".into(), |x| format!("{x:.digits$}"));
        [
            self.label.clone(),
            self.domain.map_or("*".into(), |d| d.to_string()),
            self.rmid.map_or("-".into(), |x| x.to_string()),
            self.status.to_string(),
            f(self.occupancy.map(|b| b as f64 / 1048576.0), 2),
            f(self.occupancy_share.map(|s| 100.0 * s), 1),
            f(self.mbm_total.map(|b| b / 1e6), 1),
            f(self.mbm_local.map(|b| b / 1e6), 1),
            f(self.ipc, 2),
            f(self.mpki, 2),
        ]
    }
}

/// What the view is sorted by (descending; absent values last, then by name).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SortKey {
    Occupancy,
    Bandwidth,
    Ipc,
    Misses,
}

impl SortKey {
    pub fn name(self) -> &'static str {
        match self {
            SortKey::Occupancy => "LLC occupancy",
            SortKey::Bandwidth => "memory bandwidth (MBM total)",
            SortKey::Ipc => "IPC",
            SortKey::Misses => "LLC misses per kilo-instruction",
        }
    }

    fn value(self, r: &ViewRow) -> Option<f64> {
        match self {
            SortKey::Occupancy => r.occupancy.map(|b| b as f64),
            SortKey::Bandwidth => r.mbm_total,
            SortKey::Ipc => r.ipc,
            SortKey::Misses => r.mpki,
        }
    }
}

pub fn sort(rows: &mut [ViewRow], key: SortKey) {
    rows.sort_by(|a, b| {
        let by_value = match (key.value(a), key.value(b)) {
            (Some(x), Some(y)) => y.partial_cmp(&x).unwrap_or(Ordering::Equal),
            (Some(_), None) => Ordering::Less,
            (None, Some(_)) => Ordering::Greater,
            (None, None) => Ordering::Equal,
        };
        by_value.then_with(|| a.label.cmp(&b.label)).then(a.domain.cmp(&b.domain))
    });
}

/// Statuses by how much they say when domains are folded: a container that is `ok` anywhere
/// is `ok`; otherwise the most telling reason.
fn rank(status: &str) -> u8 {
    match status {
        "ok" => 0,
        "rotating" => 1,
        "no_rmid" => 1,
        "error" => 2,
        "unassigned" => 3,
        "unavailable" => 4,
        _ => 5,
    }
}

fn sum(v: impl Iterator<Item = Option<u64>>) -> Option<u64> {
    v.fold(None, |a, x| match (a, x) {
        (a, None) => a,
        (None, Some(x)) => Some(x),
        (Some(a), Some(x)) => Some(a.saturating_add(x)),
    })
}

fn sumf(v: impl Iterator<Item = Option<f64>>) -> Option<f64> {
    v.fold(None, |a, x| match (a, x) {
        (a, None) => a,
        (None, Some(x)) => Some(x),
        (Some(a), Some(x)) => Some(a + x),
    })
}

/// One container: its domains folded into one line, and the domain lines themselves.
#[derive(Debug, Clone, PartialEq)]
pub struct Group {
    pub total: ViewRow,
    pub parts: Vec<ViewRow>,
}

/// Fold (container, domain) rows into one group per container: occupancy, bandwidth and
/// counts summed over domains (the share is of the L3 of the domains it has occupancy in).
pub fn fold(rows: &[ViewRow]) -> Vec<Group> {
    let mut by: BTreeMap<&str, Vec<&ViewRow>> = BTreeMap::new();
    for r in rows {
        by.entry(r.id.as_str()).or_default().push(r);
    }
    by.into_values()
        .map(|mut parts| {
            parts.sort_by_key(|r| r.domain);
            let first = parts[0];
            let occupancy = sum(parts.iter().map(|r| r.occupancy));
            let l3 = sum(parts.iter().filter(|r| r.occupancy.is_some()).map(|r| r.l3_bytes));
            let (cycles, instructions, misses) = (
                sum(parts.iter().map(|r| r.cycles)),
                sum(parts.iter().map(|r| r.instructions)),
                sum(parts.iter().map(|r| r.misses)),
            );
            let rmids: std::collections::BTreeSet<Option<u32>> = parts.iter().map(|r| r.rmid).collect();
            let total = ViewRow {
                id: first.id.clone(),
                label: first.label.clone(),
                domain: None,
                rmid: if rmids.len() == 1 { first.rmid } else { None },
                status: parts.iter().map(|r| r.status).min_by_key(|s| rank(s)).unwrap_or("ok"),
                occupancy,
                occupancy_share: match (occupancy, l3) {
                    (Some(b), Some(l3)) if l3 > 0 => Some(b as f64 / l3 as f64),
                    _ => None,
                },
                mbm_total: sumf(parts.iter().map(|r| r.mbm_total)),
                mbm_local: sumf(parts.iter().map(|r| r.mbm_local)),
                ipc: ipc(instructions, cycles),
                mpki: mpki(misses, instructions),
                cycles,
                instructions,
                misses,
                l3_bytes: l3,
            };
            Group { total, parts: parts.into_iter().cloned().collect() }
        })
        .collect()
}

/// One L3 domain over the period: occupancy of every container together, and bandwidth.
#[derive(Debug, Clone, PartialEq)]
pub struct DomainTotal {
    pub domain: u32,
    pub used: Option<u64>,
    pub l3_bytes: Option<u64>,
    /// Bytes per second.
    pub mbm_total: Option<f64>,
}

pub fn domain_totals(rows: &[ViewRow]) -> Vec<DomainTotal> {
    let mut by: BTreeMap<u32, Vec<&ViewRow>> = BTreeMap::new();
    for r in rows {
        if let Some(d) = r.domain {
            by.entry(d).or_default().push(r);
        }
    }
    by.into_iter()
        .map(|(domain, v)| DomainTotal {
            domain,
            used: sum(v.iter().map(|r| r.occupancy)),
            l3_bytes: v.iter().find_map(|r| r.l3_bytes),
            mbm_total: sumf(v.iter().map(|r| r.mbm_total)),
        })
        .collect()
}

/// Accumulates rows between two displays.
#[derive(Default)]
struct Acc {
    /// Who: its label is taken at each period's end (the runtime's answer, and a rename,
    /// may come after the first row).
    meta: Option<Arc<ContainerMeta>>,
    rmid: Option<u32>,
    status: &'static str,
    occupancy: Option<u64>,
    total: u64,
    local: u64,
    mbm_seen: bool,
    cycles: Option<u64>,
    instructions: Option<u64>,
    misses: Option<u64>,
    /// No row yet in this period: the values above are the last period's columns at 0 (rows
    /// are sparse: a container that did not run has none, and moved nothing), replaced by
    /// the first row's.
    carried: bool,
}

fn add_opt(acc: &mut Option<u64>, v: Option<u64>) {
    if let Some(v) = v {
        *acc = Some(acc.unwrap_or(0) + v);
    }
}

/// Rows of the current display period, per (container, domain).
#[derive(Default)]
pub struct Accumulator {
    /// container id → domain → what accumulated (nested so adding a row looks up by &str).
    rows: BTreeMap<String, BTreeMap<u32, Acc>>,
}

impl Accumulator {
    pub fn add(&mut self, row: &Row) {
        let doms = match self.rows.get_mut(row.container.id.as_str()) {
            Some(d) => d,
            None => self.rows.entry(row.container.id.clone()).or_default(),
        };
        let r = doms.entry(row.domain).or_default();
        if std::mem::take(&mut r.carried) {
            (r.mbm_seen, r.cycles, r.instructions, r.misses) = (false, None, None, None);
        }
        if !r.meta.as_ref().is_some_and(|m| Arc::ptr_eq(m, &row.container)) {
            r.meta = Some(row.container.clone());
        }
        r.rmid = row.rmid;
        // Bandwidth from a counter that rotates through containers (docs/counters.md) is a
        // sample: the view says so where the status would say `ok`.
        r.status = match (row.status, row.mbm_counter) {
            (cachescope_engine::Status::Ok, Some(cachescope_engine::MbmCounter::Rotating)) => "rotating",
            (s, _) => s.as_str(),
        };
        r.occupancy = row.llc_occupancy_bytes;
        if let Some(t) = row.mbm_total_bytes {
            r.total += t;
            r.mbm_seen = true;
        }
        r.local += row.mbm_local_bytes.unwrap_or(0);
        add_opt(&mut r.cycles, row.pmu.cycles);
        add_opt(&mut r.instructions, row.pmu.instructions);
        add_opt(&mut r.misses, row.pmu.llc_misses);
    }

    /// A container stopped: its lines leave the view.
    pub fn forget(&mut self, id: &str) {
        self.rows.remove(id);
    }

    /// The view of the `period` that ends now, sorted by occupancy; the next period starts.
    /// `l3_bytes`: each domain's L3 size.
    pub fn take(&mut self, period: Duration, l3_bytes: &[(u32, u64)]) -> Vec<ViewRow> {
        let secs = period.as_secs_f64().max(1e-9);
        let mut out = Vec::new();
        for (id, domains) in self.rows.iter_mut() {
            for (domain, a) in domains.iter_mut() {
                let l3_bytes = l3_bytes.iter().find(|(d, _)| d == domain).map(|(_, b)| *b);
                let rate = |v: u64| a.mbm_seen.then(|| v as f64 / secs);
                out.push(ViewRow {
                    id: id.clone(),
                    label: a.meta.as_ref().map_or_else(|| id.clone(), |m| printable(&m.view_label())),
                    domain: Some(*domain),
                    rmid: a.rmid,
                    status: a.status,
                    occupancy: a.occupancy,
                    occupancy_share: match (a.occupancy, l3_bytes) {
                        (Some(b), Some(l3)) if l3 > 0 => Some(b as f64 / l3 as f64),
                        _ => None,
                    },
                    mbm_total: rate(a.total),
                    mbm_local: rate(a.local),
                    ipc: ipc(a.instructions, a.cycles),
                    mpki: mpki(a.misses, a.instructions),
                    cycles: a.cycles,
                    instructions: a.instructions,
                    misses: a.misses,
                    l3_bytes,
                });
                a.total = 0;
                a.local = 0;
                a.cycles = a.cycles.map(|_| 0);
                a.instructions = a.instructions.map(|_| 0);
                a.misses = a.misses.map(|_| 0);
                a.carried = true;
            }
        }
        sort(&mut out, SortKey::Occupancy);
        out
    }
}

pub use cachescope_report::svg::shorten;

pub use cachescope_engine::row::printable;

/// The plain table printed without a terminal: `t=…  header`, then one line per row.
pub fn plain(now: Duration, header: &str, rows: &[ViewRow]) -> String {
    use std::fmt::Write;
    let mut o = String::new();
    let _ = writeln!(o, "t={:.3}s  {header}", now.as_secs_f64());
    let line = |o: &mut String, c: &[&str]| {
        let _ = writeln!(
            o,
            "{:<24} {:>6} {:>5} {:<12} {:>9} {:>6} {:>12} {:>12} {:>6} {:>8}",
            c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7], c[8], c[9]
        );
    };
    line(&mut o, &COLUMNS);
    for r in rows {
        let c = r.cells();
        line(&mut o, &c.iter().map(String::as_str).collect::<Vec<_>>());
    }
    let _ = writeln!(o);
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_follow_the_runtime_after_the_first_row() {
        let meta = Arc::new(ContainerMeta { id: "3f2a9c".into(), ..Default::default() });
        let row = Row {
            time_ns: 1,
            interval_ns: 1,
            container: meta.clone(),
            domain: 0,
            rmid: Some(1),
            llc_occupancy_bytes: Some(1),
            mbm_total_bytes: None,
            mbm_local_bytes: None,
            pmu: Default::default(),
            cpu_ns: None,
            status: cachescope_engine::Status::Ok,
            mbm_counter: None,
        };
        let mut acc = Accumulator::default();
        let label = |acc: &mut Accumulator| acc.take(Duration::from_secs(1), &[])[0].label.clone();
        acc.add(&row);
        assert_eq!(label(&mut acc), "3f2a9c", "the id until the runtime answers");
        let named = |n: &str| cachescope_engine::RuntimeMeta { name: Some(n.into()), ..Default::default() };
        meta.runtime.set(named("web"));
        acc.add(&row);
        assert_eq!(label(&mut acc), "web");
        meta.runtime.set(named("web-renamed"));
        assert_eq!(label(&mut acc), "web-renamed", "a rename, even between rows");
    }

    #[test]
    fn bandwidth_from_a_rotating_counter_says_so_in_the_status() {
        let meta = Arc::new(ContainerMeta { id: "r".into(), ..Default::default() });
        let mut row = Row {
            time_ns: 1,
            interval_ns: 1,
            container: meta,
            domain: 0,
            rmid: None,
            llc_occupancy_bytes: Some(1),
            mbm_total_bytes: Some(5),
            mbm_local_bytes: None,
            pmu: Default::default(),
            cpu_ns: None,
            status: cachescope_engine::Status::Ok,
            mbm_counter: Some(cachescope_engine::MbmCounter::Rotating),
        };
        let mut acc = Accumulator::default();
        let status = |acc: &mut Accumulator| acc.take(Duration::from_secs(1), &[])[0].status;
        acc.add(&row);
        assert_eq!(status(&mut acc), "rotating");
        row.mbm_counter = Some(cachescope_engine::MbmCounter::Kept);
        acc.add(&row);
        assert_eq!(status(&mut acc), "ok");
        (row.status, row.mbm_counter, row.mbm_total_bytes) = (cachescope_engine::Status::Unassigned, None, None);
        acc.add(&row);
        assert_eq!(status(&mut acc), "unassigned", "a turn without a counter");
    }

    #[test]
    fn a_period_without_rows_moved_nothing_and_keeps_its_occupancy() {
        let meta = Arc::new(ContainerMeta { id: "idle".into(), ..Default::default() });
        let mut row = Row {
            time_ns: 1,
            interval_ns: 1,
            container: meta,
            domain: 0,
            rmid: Some(1),
            llc_occupancy_bytes: Some(4096),
            mbm_total_bytes: Some(1000),
            mbm_local_bytes: Some(10),
            pmu: cachescope_engine::Pmu { cycles: Some(7), instructions: Some(14), ..Default::default() },
            cpu_ns: Some(1),
            status: cachescope_engine::Status::Ok,
            mbm_counter: None,
        };
        let mut acc = Accumulator::default();
        let take = |acc: &mut Accumulator| acc.take(Duration::from_secs(1), &[]).remove(0);
        acc.add(&row);
        let first = take(&mut acc);
        assert_eq!((first.mbm_total, first.cycles, first.occupancy), (Some(1000.0), Some(7), Some(4096)));
        // A quiet period: no row (the container did not run). Shown as 0, not as unknown.
        let quiet = take(&mut acc);
        assert_eq!((quiet.mbm_total, quiet.cycles, quiet.ipc), (Some(0.0), Some(0), None));
        assert_eq!(quiet.occupancy, Some(4096), "occupancy carried forward");
        // The next row's columns replace the carried ones: a column gone null is unknown again.
        (row.mbm_total_bytes, row.pmu) = (None, Default::default());
        acc.add(&row);
        let after = take(&mut acc);
        assert_eq!((after.mbm_total, after.cycles), (None, None));
    }

    pub(crate) fn row(label: &str, occ: Option<u64>, bw: Option<f64>, ipc: Option<f64>, mpki: Option<f64>) -> ViewRow {
        ViewRow {
            id: label.into(),
            label: label.into(),
            domain: Some(0),
            rmid: Some(1),
            status: "ok",
            occupancy: occ,
            occupancy_share: None,
            mbm_total: bw,
            mbm_local: bw,
            ipc,
            mpki,
            ..ViewRow::default()
        }
    }

    #[test]
    fn names_reach_the_terminal_escaped() {
        assert_eq!(printable("web\u{1b}[2Jx\ny"), "web\\u{1b}[2Jx\\ny");
        assert_eq!(printable("plain-name_1"), "plain-name_1");
    }

    #[test]
    fn sort_keys_descend_with_absent_values_last() {
        let mut v = vec![
            row("a", Some(10), Some(5.0), None, Some(1.0)),
            row("b", Some(30), None, Some(2.0), Some(9.0)),
            row("c", None, Some(50.0), Some(0.5), None),
        ];
        let order = |v: &[ViewRow]| v.iter().map(|r| r.label.clone()).collect::<Vec<_>>().join("");
        sort(&mut v, SortKey::Occupancy);
        assert_eq!(order(&v), "bac");
        sort(&mut v, SortKey::Bandwidth);
        assert_eq!(order(&v), "cab");
        sort(&mut v, SortKey::Ipc);
        assert_eq!(order(&v), "bca");
        sort(&mut v, SortKey::Misses);
        assert_eq!(order(&v), "bac");
    }

    #[test]
    fn absent_is_a_dash_not_zero() {
        let c = row("x", None, None, None, None).cells();
        assert_eq!(&c[4..], &["-", "-", "-", "-", "-", "-"]);
        let c = row("x", Some(3 << 20), Some(2.5e6), Some(1.234), Some(0.0)).cells();
        assert_eq!(&c[4..], &["3.00", "-", "2.5", "2.5", "1.23", "0.00"]);
    }

    #[test]
    fn domains_fold_into_one_line_per_container() {
        let part = |d: u32, status: &'static str, occ: Option<u64>, bw: Option<f64>, c: u64, i: u64| ViewRow {
            id: "web".into(),
            label: "web".into(),
            domain: Some(d),
            rmid: Some(7),
            status,
            occupancy: occ,
            mbm_total: bw,
            cycles: Some(c),
            instructions: Some(i),
            l3_bytes: Some(32 << 20),
            ..ViewRow::default()
        };
        let rows = vec![
            part(1, "unavailable", None, None, 0, 0),
            part(0, "ok", Some(8 << 20), Some(1e6), 100, 300),
            ViewRow { id: "db".into(), label: "db".into(), domain: Some(0), status: "no_rmid", ..ViewRow::default() },
        ];
        let g = fold(&rows);
        assert_eq!(g.len(), 2);
        let web = g.iter().find(|g| g.total.id == "web").unwrap();
        assert_eq!(web.parts.iter().map(|p| p.domain).collect::<Vec<_>>(), [Some(0), Some(1)]);
        let t = &web.total;
        assert_eq!((t.domain, t.status, t.rmid, t.occupancy), (None, "ok", Some(7), Some(8 << 20)));
        assert_eq!(t.occupancy_share, Some(0.25), "of the L3 of the domain it occupies");
        assert_eq!((t.mbm_total, t.ipc), (Some(1e6), Some(3.0)));
        assert_eq!(g.iter().find(|g| g.total.id == "db").unwrap().total.status, "no_rmid");
        let d = domain_totals(&rows);
        assert_eq!(d.len(), 2);
        assert_eq!(
            (d[0].domain, d[0].used, d[0].l3_bytes, d[0].mbm_total),
            (0, Some(8 << 20), Some(32 << 20), Some(1e6))
        );
        assert_eq!((d[1].used, d[1].mbm_total), (None, None), "nothing measured there: unknown, not 0");
    }
}
