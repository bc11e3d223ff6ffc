//! The report as one self-contained HTML page (inline CSS and SVG, no script, nothing
//! fetched), and its charts as standalone SVG files.

use crate::episodes::{Episode, Kind};
use crate::svg::{escape, Band, Chart, Series, PALETTE};
use crate::{Facts, Report};
use std::collections::BTreeMap;
use std::fmt::Write;

const MIB: f64 = 1048576.0;

/// UTC date and time of `ns` since the epoch, to the millisecond.
pub fn utc(ns: i64) -> String {
    let ms = ns.rem_euclid(1_000_000_000) / 1_000_000;
    let (y, m, d, h, min, s) = cachescope_platform::clock::utc_civil(ns.div_euclid(1_000_000_000));
    format!("{y:04}-{m:02}-{d:02} {h:02}:{min:02}:{s:02}.{ms:03} UTC")
}

/// A duration in ns, in the unit a person would use.
pub fn span(ns: i64) -> String {
    match ns {
        n if n >= 60_000_000_000 => format!("{:.1} min", n as f64 / 6e10),
        n if n >= 1_000_000_000 => format!("{:.2} s", n as f64 / 1e9),
        n if n >= 1_000_000 => format!("{:.1} ms", n as f64 / 1e6),
        n => format!("{:.0} µs", n as f64 / 1e3),
    }
}

/// Colours by container id, in the report's order (highest occupancy first).
fn colors(r: &Report) -> BTreeMap<String, &'static str> {
    r.containers.iter().enumerate().map(|(i, c)| (c.container_id.clone(), PALETTE[i % PALETTE.len()])).collect()
}

/// Every chart: (file name, title, SVG).
pub fn charts(r: &Report) -> Vec<(String, String, String)> {
    let Some(tl) = &r.timeline else { return Vec::new() };
    let col = colors(r);
    let color = |id: &str| col.get(id).copied().unwrap_or("#888");
    let t0 = r.run.start_ns.unwrap_or(tl.start_ns);
    let x: Vec<f64> = (0..tl.buckets).map(|k| (tl.end_of(k) - t0) as f64 / 1e9).collect();
    let bucket_s = tl.bucket_ns as f64 / 1e9;
    let mut out = Vec::new();
    for d in &tl.domains {
        // Highest occupancy at the bottom of the stack.
        let mut lines: Vec<&crate::timeline::Line> = d.lines.iter().collect();
        let order: BTreeMap<&str, usize> =
            r.containers.iter().enumerate().map(|(i, c)| (c.container_id.as_str(), i)).collect();
        lines.sort_by_key(|l| order.get(l.id.as_str()).copied().unwrap_or(usize::MAX));
        let mut shaded = Vec::new();
        for l in &lines {
            let mut k = 0;
            while k < tl.buckets {
                if l.no_rmid[k] > 0.0 {
                    let from = k;
                    while k + 1 < tl.buckets && l.no_rmid[k + 1] > 0.0 {
                        k += 1;
                    }
                    shaded.push(Band { from, to: k, label: format!("no RMID: {}", l.name) });
                }
                k += 1;
            }
        }
        let bucket_of =
            |ns: i64| ((ns - tl.start_ns).div_euclid(tl.bucket_ns)).clamp(0, tl.buckets as i64 - 1) as usize;
        let marked: Vec<Band> = r
            .episodes
            .iter()
            .enumerate()
            .filter(|(_, e)| e.domain == d.domain)
            .map(|(i, e)| Band {
                from: bucket_of(e.start_ns),
                to: bucket_of(e.end_ns - 1),
                label: format!("episode {}: {}", i + 1, episode_line(e)),
            })
            .collect();
        // A container with nothing measured in a chart (no CPU in this domain) is left out of
        // it, legend included.
        let series = |f: &dyn Fn(&crate::timeline::Line) -> Vec<Option<f64>>| -> Vec<Series> {
            lines
                .iter()
                .map(|l| Series { name: &l.name, color: color(&l.id), values: f(l) })
                .filter(|s| s.values.iter().any(|v| v.is_some_and(|x| x != 0.0)))
                .collect()
        };
        let l3 = r.run.l3_bytes;
        let occ = Chart {
            title: &format!("L3 domain {}: occupancy per container, stacked", d.domain),
            unit: "MiB",
            x: x.clone(),
            bucket_s,
            series: series(&|l| l.occupancy.iter().map(|v| v.map(|b| b / MIB)).collect()),
            stacked: true,
            cap: l3.map(|b| (b as f64 / MIB, format!("L3 {:.0} MiB", b as f64 / MIB))),
            shaded,
            marked,
        }
        .render();
        let measured = |f: &dyn Fn(&crate::timeline::Line) -> &Vec<Option<f64>>| {
            lines.iter().any(|l| f(l).iter().any(Option::is_some))
        };
        // Without cache monitoring (`none`) there is no occupancy to draw: no empty chart.
        if measured(&|l| &l.occupancy) {
            out.push((format!("domain-{}-occupancy.svg", d.domain), format!("domain {} occupancy", d.domain), occ));
        }
        let mut plain =
            |name: &str, title: String, unit: &str, f: &dyn Fn(&crate::timeline::Line) -> Vec<Option<f64>>| {
                let c = Chart {
                    title: &title,
                    unit,
                    x: x.clone(),
                    bucket_s,
                    series: series(f),
                    stacked: false,
                    cap: None,
                    shaded: Vec::new(),
                    marked: Vec::new(),
                };
                out.push((format!("domain-{}-{name}.svg", d.domain), title.clone(), c.render()));
            };
        if measured(&|l| &l.bandwidth) {
            plain("bandwidth", format!("L3 domain {}: memory bandwidth (MBM total)", d.domain), "MB/s", &|l| {
                l.bandwidth.iter().map(|v| v.map(|b| b / 1e6)).collect()
            });
        }
        if measured(&|l| &l.ipc) {
            plain("ipc", format!("L3 domain {}: instructions per cycle", d.domain), "IPC", &|l| l.ipc.clone());
        }
        if measured(&|l| &l.cpu) {
            plain("cpu", format!("L3 domain {}: CPU time per container", d.domain), "CPUs", &|l| l.cpu.clone());
        }
        if measured(&|l| &l.mpki) {
            plain("mpki", format!("L3 domain {}: LLC misses per 1000 instructions", d.domain), "MPKI", &|l| {
                l.mpki.clone()
            });
        }
    }
    out
}

fn mib(v: Option<f64>) -> String {
    v.map_or("-".into(), |b| format!("{:.2} MiB", b / MIB))
}

fn mbs(v: Option<f64>) -> String {
    v.map_or("-".into(), |b| format!("{:.1} MB/s", b / 1e6))
}

/// One sentence for an episode (also the text report's line).
pub fn episode_line(e: &Episode) -> String {
    let what = match e.kind {
        Kind::Occupancy => match e.occupancy_before_bytes {
            Some(b) => format!("occupancy rose {:.2} → {}", b / MIB, mib(e.occupancy_after_bytes)),
            None => format!("started and filled {}", mib(e.occupancy_after_bytes)),
        },
        Kind::Bandwidth => {
            format!(
                "bandwidth rose {} → {}",
                mbs(e.bandwidth_before_bytes_per_sec),
                mbs(e.bandwidth_during_bytes_per_sec)
            )
        }
    };
    let victims: Vec<String> = e
        .victims
        .iter()
        .map(|v| {
            let mut s = v.container_name.clone();
            if let (Some(lost), Some(before)) = (v.occupancy_lost_bytes, v.occupancy_before_bytes) {
                if lost > 0.0 {
                    let _ = write!(s, " lost {:.2} MiB of {:.2}", lost / MIB, before / MIB);
                }
            }
            if let (Some(b), Some(d)) = (v.ipc_before, v.ipc_during) {
                let _ = write!(s, ", IPC {b:.2} → {d:.2}");
            }
            s
        })
        .collect();
    format!("{} in domain {}: {what}; {}", e.container_name, e.domain, victims.join("; "))
}

/// Where the values come from, in words: emulation is said loudly, with what drove it.
fn values_fact(f: &Facts) -> String {
    let why = if f.emulated.is_empty() {
        "the rows' provenance column says so; the file metadata that said what drove them is gone".to_string()
    } else {
        f.emulated.join("; ")
    };
    match f.values.as_str() {
        "measured" => "measured".to_string(),
        "unknown" => {
            "unknown: no cachescope metadata or provenance column (a file rewritten by another tool?)".to_string()
        }
        v if v.contains("emulated") => format!("EMULATED ({v}): {why}"),
        v => v.to_string(),
    }
}

fn fact_rows(f: &Facts) -> Vec<(&'static str, String)> {
    let list = |v: &[String], none: &str| if v.is_empty() { none.to_string() } else { v.join("; ") };
    let mut rows = vec![
        ("host", list(&f.hosts, "-")),
        ("backend", list(&f.backends, "-")),
        ("CPU", list(&f.cpus, "-")),
        ("values", values_fact(f)),
    ];
    if let (Some(a), Some(b)) = (f.start_ns, f.end_ns) {
        rows.push(("time range", format!("{} to {} ({})", utc(a), utc(b), span(b - a))));
        // Several runs (restarts, a crash): what was measured, and each gap between them,
        // which no figure counts as time.
        if f.runs > 1 || !f.gaps.is_empty() {
            let gaps: Vec<String> = f
                .gaps
                .iter()
                .map(|g| {
                    format!(
                        "{:.2}–{:.2} s ({})",
                        (g.start_ns - a) as f64 / 1e9,
                        (g.end_ns - a) as f64 / 1e9,
                        span(g.end_ns - g.start_ns)
                    )
                })
                .collect();
            rows.push((
                "recorded",
                format!(
                    "{} in {} runs; not recorded (a gap, not counted in any mean or percentile): {}",
                    span(f.recorded_ns),
                    f.runs,
                    if gaps.is_empty() { "none".to_string() } else { gaps.join(", ") }
                ),
            ));
        }
    }
    rows.push((
        "interval",
        format!(
            "{}; {} rows spanned more than 1.5 intervals (late or spread reads){}",
            span(f.interval_ns),
            f.long_intervals,
            f.longest_interval_ns.map_or(String::new(), |l| format!(", the longest {}", span(l)))
        ),
    ));
    rows.push(("L3 per domain", f.l3_bytes.map_or("unknown".into(), |b| format!("{:.0} MiB", b as f64 / MIB))));
    rows.push(("PMU columns", list(&f.pmu, "-")));
    if f.pmu_lost_charges > 0 {
        rows.push((
            "PMU lost",
            format!(
                "{} charges dropped while the recorder fell behind: those intervals have null cpu_ns and PMU columns",
                f.pmu_lost_charges
            ),
        ));
    }
    rows.push((
        "data",
        format!(
            "{} rows, {} containers, {} files, schema {}",
            f.rows,
            f.containers,
            f.files,
            list(&f.schema_versions, "?")
        ),
    ));
    rows
}

/// The facts as plain text lines (the text report's header).
pub fn facts_text(f: &Facts) -> String {
    fact_rows(f).into_iter().map(|(k, v)| format!("{k:>14}: {}\n", crate::svg::printable(&v))).collect()
}

/// The whole page.
/// What the page and the text say where no episode was found: none, or none could be, as the
/// files hold neither occupancy nor bandwidth (the `none` backend: CPU time and PMU only).
pub fn no_episode(r: &Report) -> String {
    let measured = |f: &dyn Fn(&crate::summary::Summary) -> bool| r.containers.iter().any(f);
    if !measured(&|s| s.occupancy_max_bytes.is_some() || s.mbm_total_mean_bytes_per_sec.is_some()) {
        return "No noisy-neighbour episode can be found: these files hold no occupancy or bandwidth (recorded \
                without cache monitoring); each container's CPU time is below."
            .into();
    }
    "No noisy-neighbour episode: no container's occupancy or bandwidth rose while a neighbour in its L3 domain \
     lost occupancy or IPC."
        .into()
}

pub fn page(r: &Report) -> String {
    let mut o = String::new();
    let title = format!("cachescope report — {}", r.run.hosts.join(", "));
    let _ = write!(
        o,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{}</title><style>\
         body{{font-family:'DejaVu Sans',Arial,sans-serif;margin:24px;color:#222;max-width:1000px}}\
         h1{{font-size:22px}} h2{{font-size:17px;margin-top:28px}}\
         table{{border-collapse:collapse;font-size:13px}} td,th{{border:1px solid #ccc;padding:3px 8px;text-align:left}}\
         td.n{{text-align:right}} .emulated{{background:#fff3cd;padding:6px 10px;border:1px solid #e0c060}}\
         .episode{{color:#b00}} .swatch{{display:inline-block;width:11px;height:11px;margin-right:6px}}\
         </style></head><body>\n",
        escape(&title)
    );
    let _ = writeln!(o, "<h1>{}</h1>", escape(&title));
    if r.run.values.contains("emulated") {
        let _ = writeln!(o, "<p class=\"emulated\">{}</p>", escape(&values_fact(&r.run)));
    }
    o.push_str("<table id=\"facts\">\n");
    for (k, v) in fact_rows(&r.run) {
        let _ = writeln!(o, "<tr><th>{}</th><td>{}</td></tr>", escape(k), escape(&v));
    }
    o.push_str("</table>\n<h2>Noisy neighbours</h2>\n");
    if r.episodes.is_empty() {
        let _ = writeln!(o, "<p id=\"episodes\">{}</p>", escape(&no_episode(r)));
    } else {
        let t0 = r.run.start_ns.unwrap_or(0);
        o.push_str("<table id=\"episodes\"><tr><th>#</th><th>when (s from start)</th><th>domain</th><th>who</th><th>what</th></tr>\n");
        for (i, e) in r.episodes.iter().enumerate() {
            let (from, to) = e.seconds_from(t0);
            let _ = writeln!(
                o,
                "<tr class=\"episode\"><td>{}</td><td>{from:.2}–{to:.2}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                i + 1,
                e.domain,
                escape(&e.container_name),
                escape(&episode_line(e))
            );
        }
        o.push_str("</table>\n");
    }
    let col = colors(r);
    o.push_str("<h2>Containers</h2>\n<table id=\"containers\"><tr><th>container</th><th>seconds</th><th>occupancy p50</th><th>p99</th><th>max</th><th>MBM mean</th><th>MBM peak (1 s)</th><th>IPC</th><th>LLC MPKI</th><th>no RMID</th><th>CPUs mean</th><th>CPUs p50 (1 s)</th><th>p99</th></tr>\n");
    for s in &r.containers {
        let name = s.container_name.as_deref().unwrap_or(&s.container_id);
        let f2 = |v: Option<f64>| v.map_or("-".into(), |x| format!("{x:.2}"));
        let f3 = |v: Option<f64>| v.map_or("-".into(), |x| format!("{x:.3}"));
        let num = |v: Option<f64>, shown: String| {
            format!("<td class=\"n\" data-v=\"{}\">{}</td>", v.map_or("".into(), |x| format!("{x}")), escape(&shown))
        };
        let _ = writeln!(
            o,
            "<tr data-id=\"{}\"><td><span class=\"swatch\" style=\"background:{}\"></span>{}</td>{}{}{}{}{}{}{}{}{}{}{}{}</tr>",
            escape(&s.container_id),
            col.get(&s.container_id).copied().unwrap_or("#888"),
            escape(name),
            num(Some(s.seconds), format!("{:.1}", s.seconds)),
            num(s.occupancy_p50_bytes.map(|v| v as f64), mib(s.occupancy_p50_bytes.map(|v| v as f64))),
            num(s.occupancy_p99_bytes.map(|v| v as f64), mib(s.occupancy_p99_bytes.map(|v| v as f64))),
            num(s.occupancy_max_bytes.map(|v| v as f64), mib(s.occupancy_max_bytes.map(|v| v as f64))),
            num(s.mbm_total_mean_bytes_per_sec, mbs(s.mbm_total_mean_bytes_per_sec)),
            num(s.mbm_total_peak_bytes_per_sec, mbs(s.mbm_total_peak_bytes_per_sec)),
            num(s.ipc, f2(s.ipc)),
            num(s.llc_mpki, f2(s.llc_mpki)),
            num(Some(s.no_rmid_share), format!("{:.1} %", s.no_rmid_share * 100.0)),
            num(s.cpu_mean, f3(s.cpu_mean)),
            num(s.cpu_p50, f3(s.cpu_p50)),
            num(s.cpu_p99, f3(s.cpu_p99)),
        );
    }
    o.push_str("</table>\n");
    let charts = charts(r);
    let mut current = None;
    for (name, _, svg) in &charts {
        let domain = name.split('-').nth(1).unwrap_or("");
        if current != Some(domain) {
            current = Some(domain);
            let _ = writeln!(o, "<h2>L3 domain {}</h2>", escape(domain));
            if let Some(d) = r.domains.iter().find(|d| d.domain.to_string() == domain && d.used_max_bytes.is_some()) {
                let _ = writeln!(
                    o,
                    "<p>Highest total occupancy: {}{}.</p>",
                    mib(d.used_max_bytes),
                    d.l3_bytes.map_or(String::new(), |b| format!(" of {:.0} MiB", b as f64 / MIB))
                );
            }
        }
        let _ = writeln!(o, "<figure id=\"{}\">{svg}</figure>", escape(name.trim_end_matches(".svg")));
    }
    let has_pmu = charts.iter().any(|(n, _, _)| n.ends_with("-ipc.svg") || n.ends_with("-mpki.svg"));
    if !has_pmu {
        let _ = writeln!(
            o,
            "<p id=\"no-pmu\">IPC and LLC MPKI: not measured in these files ({}).</p>",
            escape(&if r.run.pmu.is_empty() { "no PMU columns".to_string() } else { r.run.pmu.join("; ") })
        );
    }
    o.push_str("</body></html>\n");
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_read_as_people_write_them() {
        assert_eq!(utc(1_795_489_652_481_257_541), "2026-11-24 03:07:32.481 UTC");
        assert_eq!(utc(0), "1970-01-01 00:00:00.000 UTC");
        assert_eq!(span(1_500_000), "1.5 ms");
        assert_eq!(span(20_001_000_000), "20.00 s");
    }
}

#[cfg(test)]
mod pmu_tests {
    use super::*;
    use crate::summary::{Recorded, Recording};
    use cachescope_sinks::read::Point;

    /// Where the PMU columns were counted, the page has IPC and MPKI charts; a hostile name is
    /// escaped everywhere.
    #[test]
    fn ipc_and_mpki_charts_where_counted() {
        let pts: Vec<Point> = (1..=200)
            .map(|t| Point {
                time_ns: 1_000_000_000 + t * 1_000_000,
                interval_ns: 1_000_000,
                domain: 0,
                occupancy: Some(4 << 20),
                mbm_total: Some(1_000_000),
                mbm_local: None,
                cycles: Some(2_000_000),
                instructions: Some(3_000_000),
                misses: Some(3_000),
                cpu_ns: None,
                no_rmid: t > 150,
                stopped: false,
            })
            .collect();
        let mut rec = Recording::default();
        rec.containers.insert("x".into(), Recorded { name: Some("<x>\u{1b}[2J".into()), points: pts });
        let r = crate::analyze(rec);
        let names: Vec<String> = charts(&r).into_iter().map(|c| c.0).collect();
        assert_eq!(
            names,
            ["domain-0-occupancy.svg", "domain-0-bandwidth.svg", "domain-0-ipc.svg", "domain-0-mpki.svg"]
        );
        let tl = r.timeline.as_ref().unwrap();
        let line = &tl.domains[0].lines[0];
        assert!(line.ipc.iter().flatten().all(|v| (v - 1.5).abs() < 1e-9), "{:?}", line.ipc);
        assert!(line.mpki.iter().flatten().all(|v| (v - 1.0).abs() < 1e-9));
        let page = page(&r);
        assert!(page.contains("class=\"no-rmid\""), "the last quarter without an RMID is shaded");
        assert!(!page.contains("<x>") && !page.contains('\u{1b}') && page.contains("&lt;x&gt;\\x1b[2J"));
        assert!(!page.contains("id=\"no-pmu\""));
    }
}
