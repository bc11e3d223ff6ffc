//! `cachescope report FILE|DIR... [--json]`: per-container summaries of recorded files.

use crate::CliError;
use cachescope_sinks::report::{files, summarize, table};
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct ReportArgs {
    /// Parquet files, or directories holding them.
    #[arg(required = true, value_name = "FILE|DIR")]
    paths: Vec<PathBuf>,
    /// One JSON array of summaries instead of a table.
    #[arg(long)]
    json: bool,
}

pub fn run(args: &ReportArgs) -> Result<(), CliError> {
    let (found, partial) = files(&args.paths).map_err(CliError::input)?;
    if !partial.is_empty() {
        eprintln!(
            "cachescope: {} file(s) a crash left unfinished are not read ({}); `cachescope record --output` on their directory recovers them",
            partial.len(),
            partial[0].display()
        );
    }
    if found.is_empty() {
        return Err(CliError::input("no .parquet files in the paths given"));
    }
    let (s, problems) = summarize(&found).map_err(CliError::input)?;
    for p in problems {
        eprintln!("cachescope: {p}");
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&s).map_err(CliError::input)?);
    } else {
        print!("{}", table(&s));
    }
    Ok(())
}
