//! The engine's sinks for recording and serving: sparse rows into Parquet files on a writer
//! thread ([`RecordSink`]), and the Prometheus page on an HTTP thread ([`ServeSink`]).

use crate::http::HttpServer;
use crate::parquet::{Block, Options as ParquetOptions, Recorder};
use crate::prom::Metrics;
use cachescope_engine::backend::BackendInfo;
use cachescope_engine::{Flow, OutputError, Row, RunStatus, Sink, Sparse};
use cachescope_platform::clock::realtime_ns;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How often, at most, rows go to the Parquet writer thread (by the rows' own time), and the
/// batch size that sends them sooner: one wake-up of that thread per 1 ms interval cost more
/// than the rows, and one per 50 ms wake-up of the engine (26 a second with its own timeouts)
/// was part of the sixth of a quiet run's process time that thread took (issue 42; it only
/// stages rows until their row group is due). Rows still
/// in a batch at SIGINT/SIGTERM are written; at kill -9 they are lost with the rest of the row
/// group not yet flushed, as they were.
const SEND_EVERY_NS: i64 = 250_000_000;
const SEND_ROWS: usize = 65_536;

/// What a recording says about itself in every file's metadata.
#[derive(Debug, Clone)]
pub struct RecordOptions {
    pub dir: PathBuf,
    pub host: String,
    pub rotate_every: Duration,
    pub rotate_bytes: u64,
    /// A row group is closed this often (wall time) or at `flush_rows` rows, whichever comes
    /// first (the Parquet sink's defaults: 5 s, 65,536 rows).
    pub flush_every: Duration,
    pub flush_rows: usize,
    /// Bytes per occupancy unit (sets what the sparse filter counts as a change).
    pub upscale: u64,
    /// `cachescope.*` key-value pairs.
    pub metadata: Vec<(String, String)>,
    /// Every row's `provenance`.
    pub provenance: crate::parquet::Provenance,
    /// Set to finish the file being filled (SIGHUP).
    pub rotate_now: Option<std::sync::Arc<std::sync::atomic::AtomicBool>>,
}

impl RecordOptions {
    /// The file metadata of a run on `backend` (docs/data.md), with `extra` keys; default
    /// rotation (1 minute, so that a recording in progress is readable; 256 MiB).
    pub fn for_run(dir: PathBuf, host: String, b: &BackendInfo, extra: &[(String, String)]) -> RecordOptions {
        let mono = cachescope_platform::clock::monotonic().as_nanos() as i64;
        let mut metadata = vec![
            (crate::read::RUN_ID.to_string(), new_run_id()),
            ("cachescope.backend".to_string(), b.label.clone()),
            ("cachescope.cpuid".into(), b.cpuid.clone()),
            ("cachescope.monotonic_offset_ns".into(), (realtime_ns() - mono).to_string()),
            ("cachescope.upscale_bytes".into(), b.upscale.to_string()),
        ];
        if let Some(l3) = b.l3_bytes {
            metadata.push(("cachescope.l3_bytes".into(), l3.to_string()));
        }
        if let Some(e) = &b.emulated {
            let what = format!("llc_occupancy_bytes and mbm_* are emulated, driven by {e}");
            metadata.push(("cachescope.emulated".into(), what));
        }
        metadata.extend(extra.iter().cloned());
        metadata.extend(b.metadata.iter().cloned());
        RecordOptions {
            dir,
            host,
            rotate_every: Duration::from_secs(60),
            rotate_bytes: 256 << 20,
            flush_every: Duration::from_secs(5),
            flush_rows: 65_536,
            upscale: b.upscale,
            metadata,
            provenance: crate::parquet::Provenance::of(b.emulated.is_some()),
            rotate_now: None,
        }
    }
}

/// 128 random bits, hex: a run's id, unique across restarts, hosts and PID namespaces (where
/// PIDs and start seconds repeat). The clock and PID stand in where the kernel gives no
/// randomness (never on Linux 3.17 and later).
fn new_run_id() -> String {
    let mut b = [0u8; 16];
    // SAFETY: getrandom writes at most `b.len()` bytes into the buffer we own.
    let n = unsafe { libc::getrandom(b.as_mut_ptr().cast(), b.len(), 0) };
    if n != b.len() as isize {
        let t = realtime_ns() as u128 ^ (u128::from(std::process::id()) << 64);
        b = t.to_le_bytes();
    }
    b.iter().map(|x| format!("{x:02x}")).collect()
}

pub struct RecordSink {
    rec: Option<Recorder>,
    sparse: Sparse,
    failing: bool,
    dir: PathBuf,
    /// Rows waiting for the next send, staged as the file will hold them.
    batch: Block,
    sent_ns: Option<i64>,
    /// Rows that never reached a file, said at the end.
    losses: Option<String>,
    /// The run's dropped PMU charges, for the files' metadata.
    pmu_lost: Arc<std::sync::atomic::AtomicU64>,
}

impl RecordSink {
    /// Open the directory (fails early: an unwritable directory is the caller's bad input).
    pub fn start(o: RecordOptions) -> Result<RecordSink, crate::SinkError> {
        let dir = crate::parquet::OutputDir::open(&o.dir)?;
        Self::start_in(o, dir)
    }

    /// [`RecordSink::start`] in a directory opened before ([`crate::parquet::OutputDir::open`]:
    /// a run checks its outputs before it sets up a backend); its path replaces `o.dir`.
    pub fn start_in(mut o: RecordOptions, dir: crate::parquet::OutputDir) -> Result<RecordSink, crate::SinkError> {
        o.dir = dir.path().to_path_buf();
        let mut p = ParquetOptions::new(o.dir.clone(), o.host);
        p.rotate_every = o.rotate_every;
        p.rotate_bytes = o.rotate_bytes;
        (p.flush_every, p.flush_rows) = (o.flush_every, o.flush_rows.max(1));
        p.metadata = o.metadata;
        p.provenance = o.provenance;
        p.rotate_now = o.rotate_now;
        let pmu_lost = Arc::new(std::sync::atomic::AtomicU64::new(0));
        p.pmu_lost = Some(pmu_lost.clone());
        p.metadata.push((
            "cachescope.sparse".into(),
            "changes + 1 s keyframes; carry occupancy forward, absent counters moved 0".into(),
        ));
        let rec = Recorder::start_in(p, dir)?;
        Ok(RecordSink {
            rec: Some(rec),
            sparse: Sparse::new(o.upscale, 1_000_000_000),
            failing: false,
            dir: o.dir,
            batch: Block::default(),
            sent_ns: None,
            losses: None,
            pmu_lost,
        })
    }
}

impl RecordSink {
    /// Files a crash left in the directory, recovered at start.
    pub fn recovered(&self) -> &[crate::parquet::Recovery] {
        self.rec.as_ref().map_or(&[], |r| r.recovered())
    }

    /// What the writer has done so far (rows written, files, errors), for progress lines.
    pub fn stats(&self) -> Option<crate::parquet::Stats> {
        self.rec.as_ref().map(|r| r.stats())
    }
}

impl Sink for RecordSink {
    fn rows(&mut self, rows: &[Row]) -> Flow {
        let Some(rec) = &self.rec else { return Flow::Continue };
        let Some(t) = rows.last().map(|r| r.time_ns) else { return Flow::Continue };
        self.batch.extend(self.sparse.filter(rows.to_vec()));
        let since = t - *self.sent_ns.get_or_insert(t);
        if since >= SEND_EVERY_NS || self.batch.len() >= SEND_ROWS {
            rec.send(std::mem::take(&mut self.batch));
            self.sent_ns = Some(t);
        }
        Flow::Continue
    }

    fn status(&mut self, st_run: &RunStatus) -> Flow {
        self.pmu_lost.store(st_run.pmu_lost_charges, std::sync::atomic::Ordering::Relaxed);
        let Some(rec) = &self.rec else { return Flow::Continue };
        let st = rec.stats();
        match (&st.failing, self.failing) {
            (Some(why), false) => {
                cachescope_platform::say!("writing Parquet failed, rows kept in memory and retried: {why}");
                self.failing = true;
            }
            (None, true) => {
                cachescope_platform::say!("writing Parquet works again ({} rows pending)", st.rows_pending);
                self.failing = false;
            }
            _ => {}
        }
        Flow::Continue
    }

    fn forget(&mut self, id: &str) {
        let end = self.sparse.stop(id);
        self.batch.extend(end);
    }

    fn finish(&mut self) -> Result<Vec<String>, OutputError> {
        let Some(rec) = self.rec.take() else { return Ok(Vec::new()) };
        rec.send(std::mem::take(&mut self.batch));
        let (st, err) = rec.finish();
        let line = format!(
            "recorded {} rows ({} of {} sampled, sparse) in {} files, {} bytes, in {}",
            st.rows_written,
            self.sparse.kept,
            self.sparse.kept + self.sparse.skipped,
            st.files_closed,
            st.bytes_closed,
            self.dir.display(),
        );
        if st.rows_dropped > 0 {
            self.losses = Some(format!(
                "{} rows lost: {}",
                st.rows_dropped,
                st.dropped_why.as_deref().unwrap_or("the disk refused them")
            ));
        }
        match err {
            // What was done is said first; then why the recording is not whole.
            Some(e) => {
                cachescope_platform::say!("{line}");
                Err(OutputError(format!("finishing the Parquet files: {e}")))
            }
            None => Ok(vec![line]),
        }
    }

    fn losses(&self) -> Option<String> {
        self.losses.clone()
    }
}

/// The Prometheus page, served at /metrics by a server no client can wedge ([`HttpServer`]).
pub struct ServeSink {
    metrics: Arc<Mutex<Metrics>>,
    server: HttpServer,
}

impl ServeSink {
    /// Listen now (fails early: a port in use is the caller's bad input).
    pub fn start(listen: SocketAddr) -> Result<ServeSink, String> {
        let metrics = Arc::new(Mutex::new(Metrics::new()));
        let m2 = metrics.clone();
        let page: crate::http::Page = Arc::new(move || m2.lock().map(|m| m.render()).unwrap_or_default());
        let server = HttpServer::start(listen, page).map_err(|e| format!("--listen {listen}: {e}"))?;
        Ok(ServeSink { metrics, server })
    }

    /// Serve the live noisy-neighbour finder's episodes too.
    pub fn with_board(self, board: crate::noisy::SharedBoard) -> ServeSink {
        self.with(|m| m.board = Some(board));
        self
    }

    /// The address bound (the port the kernel chose for `:0`).
    pub fn addr(&self) -> SocketAddr {
        self.server.addr()
    }

    fn with(&self, f: impl FnOnce(&mut Metrics)) {
        if let Ok(mut m) = self.metrics.lock() {
            f(&mut m);
        }
    }
}

impl Sink for ServeSink {
    fn rows(&mut self, rows: &[Row]) -> Flow {
        self.with(|m| m.update(rows));
        Flow::Continue
    }

    fn tick(&mut self, late: Duration, _missed: u64) {
        self.with(|m| m.observe_lateness(late));
    }

    fn status(&mut self, st: &RunStatus) -> Flow {
        self.with(|m| m.set_status(st));
        Flow::Continue
    }

    fn forget(&mut self, id: &str) {
        self.with(|m| m.forget(id));
    }

    fn finish(&mut self) -> Result<Vec<String>, OutputError> {
        self.server.stop();
        Ok(Vec::new())
    }
}
