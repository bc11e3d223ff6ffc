//! `cachescope`: the command-line edge. Errors become one line on stderr and the exit codes of
//! DESIGN.md §5.1: 0 success, 2 bad usage or bad input, 3 requested backend unavailable.

mod duration;
mod host_drive;
mod info;
mod monitor;
mod output;
mod pmu;
mod report;
mod resctrl_run;
mod tui;
mod view;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "cachescope",
    version,
    about = "Per-container LLC occupancy, memory bandwidth and PMU counters at millisecond granularity"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Show what this host (or a recorded CPUID dump) offers: CMT/MBM, CAT/MBA, PMU, topology, backends.
    Info(info::InfoArgs),
    /// Live view: LLC occupancy, memory bandwidth and PMU counts per container, sorted by occupancy.
    Monitor(MonitorCmd),
    /// Record samples to Parquet files (DESIGN.md §5.3) in a directory.
    Record(RecordCmd),
    /// Serve Prometheus metrics at /metrics (default 127.0.0.1:9435).
    Serve(ServeCmd),
    /// Summarize recorded Parquet files per container.
    Report(report::ReportArgs),
}

#[derive(clap::Args)]
struct MonitorCmd {
    #[command(flatten)]
    common: monitor::MonitorArgs,
    /// JSON lines on stdout (one object per row, §5.3 column names) instead of tables.
    #[arg(long, conflicts_with = "plain")]
    jsonl: bool,
    /// Plain periodic tables even on a terminal (without one they are the default).
    #[arg(long)]
    plain: bool,
}

#[derive(clap::Args)]
struct RecordCmd {
    #[command(flatten)]
    common: monitor::MonitorArgs,
    /// Directory for the Parquet files (created if missing).
    #[arg(long, value_name = "DIR")]
    output: std::path::PathBuf,
    /// Start a new file after this long.
    #[arg(long, default_value = "10m", value_parser = duration::parse)]
    rotate_every: std::time::Duration,
    /// Start a new file after this many MiB.
    #[arg(long, default_value_t = 256)]
    rotate_mib: u64,
}

#[derive(clap::Args)]
struct ServeCmd {
    #[command(flatten)]
    common: monitor::MonitorArgs,
    /// Address to listen on; all interfaces only if asked for (e.g. 0.0.0.0:9435).
    #[arg(long, default_value = "127.0.0.1:9435")]
    listen: std::net::SocketAddr,
}

/// An error that knows its exit status.
#[derive(Debug)]
pub enum CliError {
    /// Bad usage or bad input: exit 2.
    Input(anyhow::Error),
    /// The requested backend or facility is unavailable on this host: exit 3.
    Unavailable(anyhow::Error),
}

impl CliError {
    /// Bad usage or input, from anything printable (one line).
    pub fn input(e: impl std::fmt::Display) -> CliError {
        CliError::Input(anyhow::anyhow!("{e}"))
    }

    /// The backend or facility is unavailable, from anything printable (one line).
    pub fn unavailable(e: impl std::fmt::Display) -> CliError {
        CliError::Unavailable(anyhow::anyhow!("{e}"))
    }

    fn exit_code(&self) -> u8 {
        match self {
            CliError::Input(_) => 2,
            CliError::Unavailable(_) => 3,
        }
    }

    fn message(&self) -> String {
        let (CliError::Input(e) | CliError::Unavailable(e)) = self;
        // `{:#}` joins the context chain on one line.
        format!("{e:#}").replace('\n', " ")
    }
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            use clap::error::ErrorKind;
            if matches!(
                e.kind(),
                ErrorKind::DisplayHelp
                    | ErrorKind::DisplayVersion
                    | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
            ) {
                let _ = e.print();
                return if e.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
                    ExitCode::from(2)
                } else {
                    ExitCode::SUCCESS
                };
            }
            // One line: clap's message (which may continue on indented lines, e.g. the missing
            // arguments), without its usage block.
            let text = e.render().to_string();
            let msg: Vec<&str> = text
                .lines()
                .take_while(|l| !l.starts_with("Usage:"))
                .map(|l| l.trim())
                .filter(|l| !l.is_empty())
                .collect();
            let msg = msg.join(" ");
            let msg = msg.trim_start_matches("error: ");
            eprintln!("cachescope: {} (see cachescope --help)", if msg.is_empty() { "invalid usage" } else { msg });
            return ExitCode::from(2);
        }
    };
    let result = match cli.command {
        Command::Info(args) => info::run(&args),
        Command::Monitor(c) => monitor::run(&c.common, &output::Mode::Monitor { jsonl: c.jsonl, plain: c.plain }),
        Command::Record(c) => {
            if c.rotate_mib == 0 {
                Err(CliError::input("--rotate-mib must be at least 1"))
            } else {
                monitor::run(
                    &c.common,
                    &output::Mode::Record {
                        dir: c.output,
                        rotate_every: c.rotate_every,
                        rotate_bytes: c.rotate_mib << 20,
                    },
                )
            }
        }
        Command::Serve(c) => monitor::run(&c.common, &output::Mode::Serve { listen: c.listen }),
        Command::Report(args) => report::run(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cachescope: {}", e.message());
            ExitCode::from(e.exit_code())
        }
    }
}
