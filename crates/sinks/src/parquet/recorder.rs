//! The Parquet sink on a thread of its own.

use super::io;
use super::{Block, Options, ParquetSink, Recovery, Stats};
use crate::SinkError;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The sink on its own thread: rows arrive over a channel, flushes happen on time even when
/// no rows come. Dropping the sender closes the file.
pub struct Recorder {
    recovered: Vec<Recovery>,
    tx: Option<std::sync::mpsc::Sender<Block>>,
    thread: Option<std::thread::JoinHandle<(Stats, Option<SinkError>)>>,
    stats: Arc<Mutex<Stats>>,
}

impl Recorder {
    pub fn start(opts: Options) -> Result<Recorder, SinkError> {
        let dir = super::OutputDir::open(&opts.dir)?;
        Self::start_in(opts, dir)
    }

    /// [`Recorder::start`] in a directory opened before.
    pub fn start_in(opts: Options, dir: super::OutputDir) -> Result<Recorder, SinkError> {
        let mut sink = ParquetSink::in_dir(opts, dir)?;
        let recovered = sink.recovered().to_vec();
        let stats = sink.stats();
        let (tx, rx) = std::sync::mpsc::channel::<Block>();
        let every = sink.opts.flush_every.min(Duration::from_millis(500));
        let thread = std::thread::Builder::new()
            .name("cachescope-parquet".into())
            .spawn(move || {
                loop {
                    match rx.recv_timeout(every) {
                        Ok(rows) => sink.push_block(rows),
                        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
                        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
                    }
                    // Errors are in the stats; the sink retries at the next flush.
                    let _ = sink.poll(Instant::now());
                }
                sink.close()
            })
            .map_err(io("starting the Parquet writer thread"))?;
        Ok(Recorder { recovered, tx: Some(tx), thread: Some(thread), stats })
    }

    pub fn send(&self, rows: Block) {
        if let Some(tx) = &self.tx {
            let _ = tx.send(rows);
        }
    }

    /// Files a crash left in the directory, recovered at start.
    pub fn recovered(&self) -> &[Recovery] {
        &self.recovered
    }

    pub fn stats(&self) -> Stats {
        self.stats.lock().map(|s| s.clone()).unwrap_or_default()
    }

    /// Close the channel, let the writer finish the file, and return what it did (and why a
    /// file could not be finished, if one could not: see [`ParquetSink::close`]).
    pub fn finish(mut self) -> (Stats, Option<SinkError>) {
        self.tx = None;
        match self.thread.take().map(|t| t.join()) {
            Some(Ok(r)) => r,
            Some(Err(_)) => (self.stats(), Some(SinkError::Parquet("the writer thread panicked".into()))),
            None => (self.stats(), None),
        }
    }
}
