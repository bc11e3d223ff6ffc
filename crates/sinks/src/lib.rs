//! Where rows go: Parquet files ([`parquet`], docs/data.md), Prometheus text ([`prom`],
//! docs/metrics.md), JSON lines ([`jsonl`]), and back out of Parquet ([`read`]: the report's
//! summaries, timelines and episodes are `cachescope-report`'s); and the engine sinks that
//! record and serve ([`run_sinks`]).

mod footer;
pub mod http;
pub mod jsonl;
pub mod noisy;
mod pages;
pub mod parquet;
pub mod prom;
pub mod read;
pub mod run_sinks;

pub use run_sinks::{RecordOptions, RecordSink, ServeSink};

#[derive(Debug, thiserror::Error)]
pub enum SinkError {
    #[error("{what}: {error}")]
    Io { what: String, error: std::io::Error },
    #[error("{} is not a directory", .0.display())]
    NotADirectory(std::path::PathBuf),
    /// Another writer holds the directory's lock.
    #[error("another cachescope{} records into {}; one writer per directory", .pid.map(|p| format!(" (pid {p})")).unwrap_or_default(), .dir.display())]
    Busy { dir: std::path::PathBuf, pid: Option<u32> },
    #[error("{0}")]
    Parquet(String),
    #[error("encoding rows: {0}")]
    Encode(String),
}
