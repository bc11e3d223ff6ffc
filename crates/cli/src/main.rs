//! `cachescope`: the command-line edge. Errors become one line on stderr and the exit codes of
//! docs/cli.md: 0 success, 2 bad usage or bad input, 3 requested backend unavailable.

mod duration;
mod error;
mod hook;
mod info;
mod noisy;
mod parts;
mod report;
mod terminal;

use clap::{CommandFactory, Parser, Subcommand};
use error::{print_out, CliError};
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "cachescope",
    version,
    about = "Per-container LLC occupancy, memory bandwidth and PMU counters at millisecond granularity",
    after_help = "Contracts (flags, exit codes, the Parquet schema, the metrics, the scenario format): docs/ in the \
                  source repository (docs/cli.md, docs/data.md, docs/metrics.md, docs/scenario.md)."
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
    /// Record samples to Parquet files (docs/data.md) in a directory, and serve them with --listen.
    Record(RecordCmd),
    /// Serve Prometheus metrics at /metrics (default 127.0.0.1:9435; docs/metrics.md), and record with --output.
    Serve(ServeCmd),
    /// Summarize recorded Parquet files per container.
    Report(report::ReportArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell) on stdout.
    Completions { shell: clap_complete::Shell },
    /// OCI createRuntime hook: puts a starting container in its resctrl group before its first
    /// instruction (Podman, CRI-O hooks.d; runc, crun config.json; docs/first-instruction.md).
    Hook(hook::HookArgs),
    /// Print the manual page (roff) on stdout: `cachescope manpage | man -l -`; with `--dir`,
    /// write it and one page per subcommand (cachescope-SUB.1, the pages it refers to) there.
    #[command(hide = true)]
    Manpage {
        #[arg(long, value_name = "DIR")]
        dir: Option<std::path::PathBuf>,
    },
}

#[derive(clap::Args)]
struct MonitorCmd {
    #[command(flatten)]
    common: parts::Common,
    /// JSON lines on stdout (one object per row, docs/data.md column names) instead of tables.
    #[arg(long, conflicts_with = "plain")]
    jsonl: bool,
    /// Plain periodic tables even on a terminal (without one they are the default).
    #[arg(long)]
    plain: bool,
}

/// The largest --rotate-mib: 16 TiB, far below where MiB in bytes would wrap.
const MAX_ROTATE_MIB: u64 = 1 << 24;

/// Parquet output.
#[derive(clap::Args)]
struct Files {
    /// Start a new file after this long, 1s to 168h.
    #[arg(long, default_value = "1m", value_parser = duration::rotate_every)]
    rotate_every: std::time::Duration,
    /// Start a new file after this many MiB, 1 to 16777216 (16 TiB).
    #[arg(long, default_value_t = 256)]
    rotate_mib: u64,
    /// Upload each finished file to S3-compatible storage, s3://BUCKET[/PREFIX]; credentials
    /// from AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, region from AWS_REGION (docs/cli.md).
    #[arg(long, value_name = "S3_URL")]
    upload: Option<String>,
    /// The store's address for --upload (default: AWS's for the region).
    #[arg(long, value_name = "URL", requires = "upload")]
    s3_endpoint: Option<String>,
}

impl Files {
    fn with(
        &self,
        dir: Option<std::path::PathBuf>,
        listen: Option<std::net::SocketAddr>,
    ) -> Result<parts::Outputs, CliError> {
        // In bytes it must not wrap: 2^44 MiB shifted by 20 was 0, a file per flush.
        if !(1..=MAX_ROTATE_MIB).contains(&self.rotate_mib) {
            return Err(CliError::input(format!(
                "--rotate-mib {}: must be from 1 to {MAX_ROTATE_MIB} (16 TiB)",
                self.rotate_mib
            )));
        }
        let upload = match (&self.upload, &dir) {
            (Some(_), None) => return Err(CliError::input("--upload needs --output (the files it uploads)")),
            (Some(u), Some(_)) => Some(
                cachescope_upload::Target::new(u, self.s3_endpoint.as_deref(), |k| std::env::var(k).ok())
                    .map_err(CliError::input)?,
            ),
            (None, _) => None,
        };
        let record = dir.map(|d| (d, self.rotate_every, self.rotate_mib << 20));
        Ok(parts::Outputs { terminal: None, record, listen, upload })
    }
}

#[derive(clap::Args)]
struct RecordCmd {
    #[command(flatten)]
    common: parts::Common,
    /// Directory for the Parquet files (created if missing).
    #[arg(long, value_name = "DIR")]
    output: std::path::PathBuf,
    #[command(flatten)]
    files: Files,
    /// Also serve Prometheus metrics at this address (one process records and serves).
    #[arg(long, value_name = "ADDR")]
    listen: Option<std::net::SocketAddr>,
}

#[derive(clap::Args)]
struct ServeCmd {
    #[command(flatten)]
    common: parts::Common,
    /// Address to listen on; all interfaces only if asked for (e.g. 0.0.0.0:9435).
    #[arg(long, default_value = "127.0.0.1:9435")]
    listen: std::net::SocketAddr,
    /// Also record Parquet files in this directory (one process serves and records).
    #[arg(long, value_name = "DIR")]
    output: Option<std::path::PathBuf>,
    #[command(flatten)]
    files: Files,
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
            cachescope_platform::say!("{} (see cachescope --help)", if msg.is_empty() { "invalid usage" } else { msg });
            return ExitCode::from(2);
        }
    };
    let result = match cli.command {
        Command::Info(args) => info::run(&args),
        Command::Monitor(c) => {
            let t = if c.jsonl {
                parts::Terminal::Jsonl
            } else if c.plain {
                parts::Terminal::Plain
            } else {
                parts::Terminal::View
            };
            parts::run(&c.common, &parts::Outputs { terminal: Some(t), ..Default::default() })
        }
        Command::Record(c) => c.files.with(Some(c.output), c.listen).and_then(|o| parts::run(&c.common, &o)),
        Command::Serve(c) => c.files.with(c.output, Some(c.listen)).and_then(|o| parts::run(&c.common, &o)),
        Command::Report(args) => report::run(&args),
        Command::Hook(args) => hook::run(&args),
        Command::Completions { shell } => {
            let mut out = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "cachescope", &mut out);
            print_out(&String::from_utf8_lossy(&out))
        }
        Command::Manpage { dir: None } => {
            let mut out = Vec::new();
            match clap_mangen::Man::new(Cli::command()).render(&mut out) {
                Ok(()) => print_out(&String::from_utf8_lossy(&out)),
                Err(e) => Err(CliError::output(format!("rendering the manual page: {e}"))),
            }
        }
        Command::Manpage { dir: Some(dir) } => write_manpages(&dir),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            if let Some(m) = e.message() {
                cachescope_platform::say!("{m}");
            }
            ExitCode::from(e.exit_code())
        }
    }
}

/// cachescope.1 and, as its SUBCOMMANDS section names them, cachescope-SUB.1 for every
/// subcommand it lists, in `dir`.
fn write_manpages(dir: &std::path::Path) -> Result<(), CliError> {
    let cmd = Cli::command();
    let mut pages = vec![("cachescope".to_string(), cmd.clone())];
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        let name = format!("cachescope-{}", sub.get_name());
        let synopsis = format!("cachescope {}", sub.get_name());
        pages.push((name.clone(), sub.clone().display_name(name).bin_name(synopsis)));
    }
    // The help subcommand clap adds is listed too; its page says what `help` does.
    if !cmd.is_disable_help_subcommand_set() && !pages.iter().any(|(n, _)| n == "cachescope-help") {
        let help = clap::Command::new("help")
            .display_name("cachescope-help")
            .bin_name("cachescope help")
            .about("Print the help of cachescope or of one of its subcommands")
            .arg(clap::Arg::new("SUBCOMMAND").help("the subcommand whose help to print"))
            .disable_help_flag(true);
        pages.push(("cachescope-help".into(), help));
    }
    for (name, page) in pages {
        let path = dir.join(format!("{name}.1"));
        let mut out = Vec::new();
        clap_mangen::Man::new(page)
            .render(&mut out)
            .map_err(|e| CliError::output(format!("rendering {}: {e}", path.display())))?;
        std::fs::write(&path, out).map_err(|e| CliError::output(format!("writing {}: {e}", path.display())))?;
    }
    Ok(())
}
