//! `cachescope report FILE|DIR... [--json] [--html FILE] [--svg DIR]`: what recorded files
//! say: the run's facts, noisy-neighbour episodes, per-container summaries, and charts.

use crate::error::CliError;
use cachescope_report::text::table;
use cachescope_report::{analyze_runs, html, recordings};
use cachescope_sinks::read::{files, runs, RunFiles};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

#[derive(clap::Args, Debug)]
pub struct ReportArgs {
    /// Parquet files, or directories holding them.
    #[arg(required = true, value_name = "FILE|DIR")]
    paths: Vec<PathBuf>,
    /// One JSON object per recording (run facts, containers, domains, episodes) instead of text.
    #[arg(long)]
    json: bool,
    /// Write a self-contained HTML page with the charts to FILE (stdout then lists the files
    /// written instead of the text report).
    #[arg(long, value_name = "FILE")]
    html: Option<PathBuf>,
    /// Also write each chart as an SVG file into DIR (created if missing).
    #[arg(long, value_name = "DIR")]
    svg: Option<PathBuf>,
    /// Report recordings of different hosts or backends as one. Without it each is reported
    /// apart (text: one after the other; --json: one object each; --html FILE and --svg DIR:
    /// FILE-2.html and DIR/recording-2 for the second, and so on); the runs of one host and
    /// backend (restarts) are always one recording, with the time between them a gap.
    #[arg(long)]
    merge: bool,
}

fn write(path: &Path, text: &str) -> Result<(), CliError> {
    std::fs::write(path, text).map_err(|e| CliError::input(format!("{}: {e}", path.display())))
}

pub fn run(args: &ReportArgs) -> Result<(), CliError> {
    let (found, partial) = files(&args.paths).map_err(CliError::input)?;
    if !partial.is_empty() {
        cachescope_platform::say!(
            "{} file(s) a crash left unfinished are not read ({}); `cachescope record --output` on their directory recovers them",
            partial.len(),
            partial[0].display()
        );
    }
    if found.is_empty() {
        return Err(CliError::input("no .parquet files in the paths given"));
    }
    let groups = recordings(runs(&found), args.merge);
    let apart = groups.len() > 1;
    if apart {
        let what: Vec<String> = groups.iter().map(|g| describe(g)).collect();
        cachescope_platform::say!(
            "these files hold {} unrelated recordings ({}): each is reported apart; --merge reports them as one",
            groups.len(),
            what.join("; ")
        );
    }
    // What was written, one path a line: with --html or --svg that is what stdout says (the
    // text report stays for a plain `report`; --json prints its object, one per recording,
    // whatever else is asked).
    let mut written: Vec<PathBuf> = Vec::new();
    let mut out = String::new();
    for (i, g) in groups.iter().enumerate() {
        let (report, problems) = analyze_runs(&g.iter().collect::<Vec<_>>()).map_err(CliError::input)?;
        for p in problems {
            cachescope_platform::say!("{p}");
        }
        // The first recording where asked; the others beside it, numbered.
        let nth = |path: &Path, dir: bool| -> PathBuf {
            if i == 0 {
                return path.to_path_buf();
            }
            if dir {
                return path.join(format!("recording-{}", i + 1));
            }
            let stem = path.file_stem().map(|s| s.to_string_lossy().to_string()).unwrap_or_default();
            let ext = path.extension().map(|e| format!(".{}", e.to_string_lossy())).unwrap_or_default();
            path.with_file_name(format!("{stem}-{}{ext}", i + 1))
        };
        if let Some(dir) = args.svg.as_deref().map(|d| nth(d, true)) {
            if let Some(file) = dir.ancestors().find(|a| a.exists()).filter(|a| !a.is_dir()) {
                return Err(CliError::input(format!("--svg {}: {} is not a directory", dir.display(), file.display())));
            }
            std::fs::create_dir_all(&dir).map_err(|e| CliError::input(format!("--svg {}: {e}", dir.display())))?;
            for (name, _, svg) in html::charts(&report) {
                let path = dir.join(name);
                write(&path, &svg)?;
                written.push(path);
            }
        }
        if let Some(path) = args.html.as_deref().map(|p| nth(p, false)) {
            write(&path, &html::page(&report))?;
            written.push(path);
        }
        let live = live_episodes(g);
        if args.json {
            let mut v = serde_json::to_value(&report).map_err(CliError::input)?;
            v["live_episodes"] = serde_json::Value::Array(live);
            let json = serde_json::to_string_pretty(&v).map_err(CliError::input)?;
            out.push_str(&json);
            out.push('\n');
        } else {
            if apart {
                let _ = writeln!(out, "== recording {} of {}: {}\n", i + 1, groups.len(), describe(g));
            }
            out.push_str(&text(&report, &live));
            if apart && i + 1 < groups.len() {
                out.push('\n');
            }
        }
    }
    if !args.json && (args.html.is_some() || args.svg.is_some()) {
        let lines: String = written.iter().map(|p| format!("{}\n", p.display())).collect();
        return crate::error::print_out(&lines);
    }
    crate::error::print_out(&out)
}

/// What the recorder's live finder reported during the runs of `g` (their episodes files beside
/// the Parquet files, docs/data.md): each episode once, as it last stood.
fn live_episodes(g: &[RunFiles]) -> Vec<serde_json::Value> {
    let mut out: Vec<serde_json::Value> = Vec::new();
    // A run id is what a file's metadata says: only one as `record` makes them (hex) names a
    // file, so that no id can point outside the directory.
    let made_by_record = |id: &str| !id.is_empty() && id.len() <= 64 && id.bytes().all(|b| b.is_ascii_hexdigit());
    for r in g.iter().filter(|r| !r.unreadable && made_by_record(&r.id)) {
        let Some(dir) = r.files.first().and_then(|f| f.parent()) else { continue };
        let path = dir.join(format!("{}{}.jsonl", cachescope_sinks::noisy::EPISODES_PREFIX, r.id));
        // A small file of ours; more than 16 MiB is not one.
        let Ok(text) = std::fs::read_to_string(&path) else { continue };
        if text.len() > 16 << 20 {
            continue;
        }
        for line in text.lines() {
            let Ok(mut e) = serde_json::from_str::<serde_json::Value>(line) else { continue };
            let key = |v: &serde_json::Value| {
                (v["domain"].clone(), v["container_id"].clone(), v["kind"].clone(), v["start_ns"].clone())
            };
            if let Some(m) = e.as_object_mut() {
                m.remove("event");
                m.remove("time_ns");
            }
            match out.iter_mut().find(|x| key(x) == key(&e)) {
                Some(x) => *x = e,
                None => out.push(e),
            }
        }
    }
    out
}

/// A recording in a few words: its host, backend and runs.
fn describe(g: &[RunFiles]) -> String {
    let first = g.iter().find(|r| !r.unreadable);
    let host = first.map_or("?", |r| if r.host.is_empty() { "?" } else { r.host.as_str() });
    let backend = first.map_or("?", |r| r.backend.split(' ').next().unwrap_or("?"));
    let runs = g.iter().filter(|r| !r.unreadable).count();
    format!("host {host}, backend {backend}, {runs} run{}", if runs == 1 { "" } else { "s" })
}

/// The text report: the run's facts, the episodes (recomputed, and as the recorder saw them
/// live), the per-container table.
fn text(report: &cachescope_report::Report, live: &[serde_json::Value]) -> String {
    use std::fmt::Write;
    let mut o = html::facts_text(&report.run);
    o.push('\n');
    if report.episodes.is_empty() {
        o.push_str(&html::no_episode(report));
        o.push('\n');
    } else {
        o.push_str("Noisy-neighbour episodes:\n");
        let t0 = report.run.start_ns.unwrap_or(0);
        for (i, e) in report.episodes.iter().enumerate() {
            let ((from, to), what) = (e.seconds_from(t0), cachescope_report::svg::printable(&html::episode_line(e)));
            let _ = writeln!(o, "  {}. {from:.2}-{to:.2} s: {what}", i + 1);
        }
    }
    if !live.is_empty() {
        let t0 = report.run.start_ns.unwrap_or(0);
        let said: Vec<String> = live
            .iter()
            .map(|e| {
                let victims: Vec<&str> = e["victims"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|v| v["container_name"].as_str())
                    .collect();
                format!(
                    "{} in L3 {} from {:.2} s ({} lost)",
                    cachescope_report::svg::printable(e["container_name"].as_str().unwrap_or("?")),
                    e["domain"],
                    (e["start_ns"].as_i64().unwrap_or(t0) - t0) as f64 / 1e9,
                    cachescope_report::svg::printable(&victims.join(", "))
                )
            })
            .collect();
        let _ = writeln!(o, "Seen live by the recorder: {}", said.join("; "));
    }
    o.push('\n');
    o.push_str(&table(&report.containers));
    o
}
