//! `cachescope report FILE|DIR... [--json] [--html FILE] [--svg DIR]`: what recorded files
//! say: the run's facts, noisy-neighbour episodes, per-container summaries, and charts.

use crate::error::CliError;
use cachescope_report::text::table;
use cachescope_report::{analyze_files, html};
use cachescope_sinks::read::files;
use std::path::{Path, PathBuf};

#[derive(clap::Args, Debug)]
pub struct ReportArgs {
    /// Parquet files, or directories holding them.
    #[arg(required = true, value_name = "FILE|DIR")]
    paths: Vec<PathBuf>,
    /// One JSON object (run facts, containers, domains, episodes) instead of text.
    #[arg(long)]
    json: bool,
    /// Write a self-contained HTML page with the charts to FILE (stdout then lists the files
    /// written instead of the text report).
    #[arg(long, value_name = "FILE")]
    html: Option<PathBuf>,
    /// Also write each chart as an SVG file into DIR (created if missing).
    #[arg(long, value_name = "DIR")]
    svg: Option<PathBuf>,
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
    let (report, problems) = analyze_files(&found).map_err(CliError::input)?;
    for p in problems {
        cachescope_platform::say!("{p}");
    }
    // What was written, one path a line: with --html or --svg that is what stdout says (the
    // text report stays for a plain `report`; --json prints its object whatever else is asked).
    let mut written: Vec<PathBuf> = Vec::new();
    if let Some(dir) = &args.svg {
        if let Some(file) = dir.ancestors().find(|a| a.exists()).filter(|a| !a.is_dir()) {
            return Err(CliError::input(format!("--svg {}: {} is not a directory", dir.display(), file.display())));
        }
        std::fs::create_dir_all(dir).map_err(|e| CliError::input(format!("--svg {}: {e}", dir.display())))?;
        for (name, _, svg) in html::charts(&report) {
            let path = dir.join(name);
            write(&path, &svg)?;
            written.push(path);
        }
    }
    if let Some(path) = &args.html {
        write(path, &html::page(&report))?;
        written.push(path.clone());
    }
    if args.json {
        let json = serde_json::to_string_pretty(&report).map_err(CliError::input)?;
        return crate::error::print_out(&format!("{json}\n"));
    }
    if args.html.is_some() || args.svg.is_some() {
        let lines: String = written.iter().map(|p| format!("{}\n", p.display())).collect();
        return crate::error::print_out(&lines);
    }
    crate::error::print_out(&text(&report))
}

/// The text report: the run's facts, the episodes, the per-container table.
fn text(report: &cachescope_report::Report) -> String {
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
    o.push('\n');
    o.push_str(&table(&report.containers));
    o
}
