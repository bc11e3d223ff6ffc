//! `cachescope`: the command-line edge. Errors become one line on stderr and the exit codes of
//! DESIGN.md §5.1: 0 success, 2 bad usage or bad input, 3 requested backend unavailable.

mod duration;
mod info;
mod monitor;
mod resctrl_run;

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
    /// Sample LLC occupancy and memory bandwidth and print a table periodically.
    Monitor(monitor::MonitorArgs),
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
            // One line: clap's first line, without its usage block.
            let text = e.render().to_string();
            let first = text.lines().next().unwrap_or("invalid usage").trim_start_matches("error: ");
            eprintln!("cachescope: {first} (see cachescope --help)");
            return ExitCode::from(2);
        }
    };
    let result = match cli.command {
        Command::Info(args) => info::run(&args),
        Command::Monitor(args) => monitor::run(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cachescope: {}", e.message());
            ExitCode::from(e.exit_code())
        }
    }
}
