//! Parquet files per docs/data.md.
//!
//! Life of a file: it is written as `NAME.parquet.partial`; every flush (at most
//! `flush_every`, 5 s by default, or every `flush_rows` rows) closes a row group, syncs it,
//! and then appends an entry for it to a checkpoint journal beside it
//! (`NAME.parquet.partial.footer`, [`recover`]). At rotation (size or age) or on shutdown the
//! real footer is written and the file renamed to `NAME.parquet`. After a crash, [`recover_dir`]
//! appends a footer made of the journal's entries that verify, so a crash loses at most one
//! flush interval, and damage costs only the row groups it touches.
//!
//! Write failures (disk full, directory gone) do not lose accepted rows: the rows that could
//! not be written stay in memory (up to `max_pending_bytes`, oldest dropped and counted beyond
//! that), the broken file is cut back to its last good row group and closed, and writing is
//! retried on a new file at the next flush.

mod dir;
mod recorder;
mod recover;
mod schema;
mod staged;

use crate::SinkError;
use arrow_schema::SchemaRef;
use cachescope_engine::row::Row;
pub use dir::LOCK;
use dir::{lock_dir, refuse_pseudo_fs, refuse_untrusted, utc_stamp};
use parquet::arrow::arrow_writer::{compute_leaves, ArrowRowGroupWriterFactory};
use parquet::arrow::{add_encoded_arrow_schema_to_metadata, ArrowSchemaConverter, ArrowWriter};
use parquet::basic::{Compression, Encoding, ZstdLevel};
use parquet::file::metadata::{FileMetaData, KeyValue, ParquetMetaData, ParquetMetaDataWriter, RowGroupMetaData};
use parquet::file::properties::{EnabledStatistics, WriterProperties};
use parquet::file::writer::SerializedFileWriter;
use parquet::schema::types::ColumnPath;
pub use recorder::Recorder;
use recover::{final_path, footer_path, rename_unique, sync_dir, Cause, Journal, PARTIAL};
pub use recover::{new_file, recover_dir, recover_file, Recovery, UNRECOVERABLE};
pub use schema::{schema, Provenance, PMU_LOST, SCHEMA_VERSION};
pub use staged::Block;
use std::collections::VecDeque;
use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(Debug, Clone)]
pub struct Options {
    pub dir: PathBuf,
    pub host: String,
    /// Written into the file metadata, e.g. `cachescope.backend`.
    pub metadata: Vec<(String, String)>,
    /// Written into every row (`provenance`).
    pub provenance: Provenance,
    /// A row group is closed at least this often (a crash loses at most this much) ...
    pub flush_every: Duration,
    /// ... or as soon as this many rows wait (bounds the memory the buffer takes).
    pub flush_rows: usize,
    pub rotate_every: Duration,
    pub rotate_bytes: u64,
    /// Rows kept in memory while the disk refuses them, in estimated bytes.
    pub max_pending_bytes: usize,
    /// Set (by SIGHUP, logrotate's convention) to finish the file being filled now; the next
    /// rows start a new one.
    pub rotate_now: Option<Arc<std::sync::atomic::AtomicBool>>,
    /// PMU charges dropped since the run's start, kept current by the run: each file's
    /// metadata says how many were dropped while it was open (`cachescope.pmu_lost_charges`).
    pub pmu_lost: Option<Arc<std::sync::atomic::AtomicU64>>,
}

impl Options {
    pub fn new(dir: PathBuf, host: String) -> Options {
        Options {
            dir,
            host,
            metadata: Vec::new(),
            provenance: Provenance::Measured,
            flush_every: Duration::from_secs(5),
            flush_rows: 65_536,
            rotate_every: Duration::from_secs(60),
            rotate_bytes: 256 << 20,
            max_pending_bytes: 256 << 20,
            rotate_now: None,
            pmu_lost: None,
        }
    }
}

/// What the writer did, shared with whoever shows it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stats {
    pub rows_accepted: u64,
    /// Rows in row groups of files that were finished, or are being filled.
    pub rows_written: u64,
    /// Rows that will never reach a file: dropped beyond `max_pending_bytes`, still refused
    /// when the sink closed, or written to a file that could not be finished.
    pub rows_dropped: u64,
    /// Why rows were dropped (the last reason).
    pub dropped_why: Option<String>,
    pub row_groups: u64,
    pub files_closed: u64,
    pub bytes_closed: u64,
    pub write_errors: u64,
    /// The last write error, until a write succeeds again.
    pub failing: Option<String>,
    /// Rows waiting in memory.
    pub rows_pending: u64,
}

struct Open {
    writer: SerializedFileWriter<File>,
    /// Column writers for each row group, with the Arrow schema in the footer.
    columns: ArrowRowGroupWriterFactory,
    partial: PathBuf,
    /// Bytes of the file that hold complete row groups.
    good_len: u64,
    /// Where the journal's last entry ends in the file: what a crash would keep.
    journaled: u64,
    /// Rows in its complete row groups.
    rows: u64,
    journal: Option<Journal>,
}

pub struct ParquetSink {
    opts: Options,
    schema: SchemaRef,
    props: WriterProperties,
    /// Accepted rows not yet written, a block per flush, oldest first.
    pending: VecDeque<Block>,
    pending_bytes: usize,
    buffer: Block,
    file: Option<Open>,
    /// Abandoned partial files whose recovery has not succeeded yet, with the length their
    /// journal vouches for.
    unrecovered: Vec<(PathBuf, u64)>,
    /// Finished files whose rename failed (EIO, a read-only remount): whole under their
    /// `.partial` name with their journal, retried at every flush.
    unrenamed: Vec<PathBuf>,
    /// What recovery found when the sink started.
    recovered: Vec<Recovery>,
    seq: u64,
    last_flush: Instant,
    /// When the first row of the file being filled was accepted: rotation counts from there,
    /// so that a file is finished `rotate_every` after its first row, whatever the flushes.
    file_since: Option<Instant>,
    stats: Arc<Mutex<Stats>>,
    /// The run's dropped PMU charges when the file being filled began ([`Options::pmu_lost`]).
    lost_mark: u64,
    /// The directory's lock ([`LOCK`]), held while the sink lives: one writer per directory.
    _lock: Option<File>,
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> SinkError {
    let what = what.into();
    move |error| SinkError::Io { what, error }
}

fn pq(what: impl Into<String>) -> impl FnOnce(parquet::errors::ParquetError) -> SinkError {
    let what = what.into();
    move |e| SinkError::Parquet(format!("{}: {e}", what))
}

/// An output directory made ready for a recording: checked, created, locked, and what a crash
/// left there recovered. Opened apart from the sink so that a run can refuse a bad directory
/// before it sets up any backend ([`ParquetSink::in_dir`] takes it over).
pub struct OutputDir {
    dir: PathBuf,
    lock: File,
    recovered: Vec<Recovery>,
}

impl OutputDir {
    /// Check that `dir` can take files (created if missing), take its lock and recover the
    /// files a crash left. A directory that cannot be written is an error here.
    pub fn open(dir: &Path) -> Result<OutputDir, SinkError> {
        refuse_pseudo_fs(dir)?;
        // create_dir_all on a file (or below one) says only "File exists".
        if let Some(file) = dir.ancestors().find(|a| a.exists()).filter(|a| !a.is_dir()) {
            return Err(SinkError::NotADirectory(file.to_path_buf()));
        }
        // 0750 whatever the umask (under umask 000 it was 0777, its files 0666).
        {
            use std::os::unix::fs::DirBuilderExt;
            fs::DirBuilder::new()
                .recursive(true)
                .mode(0o750)
                .create(dir)
                .map_err(io(format!("creating {}", dir.display())))?;
        }
        refuse_untrusted(dir)?;
        let probe = dir.join(format!(".cachescope-probe-{}", std::process::id()));
        new_file(&probe, false).map_err(io(format!("{} is not writable", dir.display())))?;
        let _ = fs::remove_file(&probe);
        // Before anything in the directory is touched: a second recorder would rename the
        // first one's live file as if a crash had left it.
        let lock = lock_dir(dir)?;
        let recovered = recover_dir(dir)?;
        Ok(OutputDir { dir: dir.to_path_buf(), lock, recovered })
    }

    /// What recovery found: files a crash left, recovered.
    pub fn recovered(&self) -> &[Recovery] {
        &self.recovered
    }

    pub fn path(&self) -> &Path {
        &self.dir
    }
}

impl ParquetSink {
    /// Open `opts.dir` ([`OutputDir::open`]) and get ready. A directory that cannot be
    /// written is an error here, before any sampling.
    pub fn new(opts: Options) -> Result<ParquetSink, SinkError> {
        let dir = OutputDir::open(&opts.dir)?;
        Self::in_dir(opts, dir)
    }

    /// Get ready to write into `dir`, opened before (its path replaces `opts.dir`).
    pub fn in_dir(mut opts: Options, dir: OutputDir) -> Result<ParquetSink, SinkError> {
        let OutputDir { dir, lock, recovered } = dir;
        opts.dir = dir;
        let schema = schema();
        let mut kv = vec![KeyValue::new("cachescope.schema_version".into(), SCHEMA_VERSION.to_string())];
        kv.extend(opts.metadata.iter().map(|(k, v)| KeyValue::new(k.clone(), v.clone())));
        let mut props = WriterProperties::builder()
            // Level 1: each row group's column chunks start a zstd context, and level 3's larger
            // tables cost more to set up than they save on our small, repetitive chunks.
            .set_compression(Compression::ZSTD(ZstdLevel::try_new(1).map_err(pq("zstd level"))?))
            .set_statistics_enabled(EnabledStatistics::Chunk)
            .set_max_row_group_size(usize::MAX)
            .set_created_by(format!("cachescope {}", env!("CARGO_PKG_VERSION")))
            .set_key_value_metadata(Some(kv));
        // Times grow by a near-constant step: delta encoding, not a dictionary.
        for c in ["time_ns", "interval_ns"] {
            props = props
                .set_column_dictionary_enabled(ColumnPath::from(c), false)
                .set_column_encoding(ColumnPath::from(c), Encoding::DELTA_BINARY_PACKED);
        }
        let mut props = props.build();
        add_encoded_arrow_schema_to_metadata(&schema, &mut props);
        Ok(ParquetSink {
            opts,
            schema,
            props,
            pending: VecDeque::new(),
            pending_bytes: 0,
            buffer: Block::default(),
            file: None,
            unrecovered: Vec::new(),
            unrenamed: Vec::new(),
            recovered,
            seq: 0,
            last_flush: Instant::now(),
            file_since: None,
            lost_mark: 0,
            stats: Arc::new(Mutex::new(Stats::default())),
            _lock: Some(lock),
        })
    }

    pub fn stats(&self) -> Arc<Mutex<Stats>> {
        self.stats.clone()
    }

    fn with_stats(&self, f: impl FnOnce(&mut Stats)) {
        if let Ok(mut s) = self.stats.lock() {
            f(&mut s);
        }
    }

    /// Accept rows (already thinned by the caller); they are written at the next flush.
    pub fn push(&mut self, rows: Vec<Row>) {
        let mut b = Block::default();
        b.extend(rows);
        self.push_block(b);
    }

    /// [`ParquetSink::push`] of rows already staged.
    pub fn push_block(&mut self, rows: Block) {
        let n = rows.len() as u64;
        if n > 0 && self.file_since.is_none() {
            self.file_since = Some(Instant::now());
        }
        if self.file.is_none() && self.buffer.is_empty() && self.pending.is_empty() {
            // The file these rows will open starts here: PMU losses from now are its own.
            self.lost_mark = self.pmu_lost();
        }
        self.buffer.append(rows);
        self.with_stats(|s| s.rows_accepted += n);
    }

    /// Flush when due; rotate when due. Errors are kept in the stats (and returned) but the
    /// sink stays usable.
    pub fn poll(&mut self, now: Instant) -> Result<(), SinkError> {
        if self.opts.rotate_now.as_ref().is_some_and(|f| f.swap(false, std::sync::atomic::Ordering::Relaxed)) {
            self.flush(now)?;
            return self.close_file();
        }
        let full = self.buffer.len() >= self.opts.flush_rows;
        let rotate = self.file_since.is_some_and(|t| now.duration_since(t) >= self.opts.rotate_every);
        if full || rotate || now.duration_since(self.last_flush) >= self.opts.flush_every {
            self.flush(now)?;
        }
        Ok(())
    }

    /// Write everything accepted so far as a row group (and rotate if due).
    pub fn flush(&mut self, now: Instant) -> Result<(), SinkError> {
        self.last_flush = now;
        if !self.buffer.is_empty() {
            let rows = std::mem::take(&mut self.buffer);
            self.pending_bytes += rows.bytes();
            self.pending.push_back(rows);
            self.bound_pending();
        }
        let r = self.write_pending(now);
        let pending_rows: usize = self.pending.iter().map(Block::len).sum();
        match &r {
            Ok(()) => self.with_stats(|s| {
                s.failing = None;
                s.rows_pending = pending_rows as u64;
            }),
            Err(e) => {
                let msg = e.to_string();
                self.with_stats(|s| {
                    s.write_errors += 1;
                    s.failing = Some(msg);
                    s.rows_pending = pending_rows as u64;
                })
            }
        }
        r
    }

    fn bound_pending(&mut self) {
        while self.pending_bytes > self.opts.max_pending_bytes && self.pending.len() > 1 {
            if let Some(b) = self.pending.pop_front() {
                self.pending_bytes -= b.bytes();
                let n = b.len() as u64;
                self.with_stats(|s| {
                    s.rows_dropped += n;
                    s.dropped_why = Some("more rows waited for the disk than memory may hold".into());
                });
            }
        }
    }

    fn write_pending(&mut self, now: Instant) -> Result<(), SinkError> {
        self.retry_recovery(false);
        self.retry_renames();
        while !self.pending.is_empty() {
            if self.file.is_none() {
                self.open()?;
            }
            let (Some(f), Some(block)) = (self.file.as_mut(), self.pending.front()) else { break };
            let n = block.len() as u64;
            let what = format!("writing {}", f.partial.display());
            // One row group. Synced before the journal names it: an entry never describes bytes
            // a power loss could take back.
            let (schema, host, prov) = (&self.schema, self.opts.host.as_str(), self.opts.provenance);
            let written = write_row_group(&mut f.writer, &f.columns, schema, host, prov, block, &what)
                .and_then(|()| f.writer.flush().and_then(|()| f.writer.inner().sync_data()).map_err(io(what)));
            if let Err(e) = written {
                self.abandon();
                return Err(e);
            }
            let start = f.good_len;
            f.good_len = f.writer.bytes_written() as u64;
            // The rows leave memory only once a crash could not lose them: after their journal
            // entry, or else after the file is closed with its real footer. If both fail, the
            // file falls back to the journal and the rows stay pending.
            if self.checkpoint(start).is_err() {
                self.close_file()?;
            }
            let size = self.pending_bytes;
            if let Some(b) = self.pending.pop_front() {
                self.pending_bytes = size.saturating_sub(b.bytes());
            }
            if let Some(f) = self.file.as_mut() {
                f.rows += n;
            }
            self.with_stats(|s| {
                s.rows_written += n;
                s.row_groups += 1;
            });
        }
        let old = self.file_since.is_some_and(|t| now.duration_since(t) >= self.opts.rotate_every);
        let due = self.file.as_ref().is_some_and(|f| old || f.good_len >= self.opts.rotate_bytes);
        if due {
            self.close_file()?;
        }
        Ok(())
    }

    fn open(&mut self) -> Result<(), SinkError> {
        let secs = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64);
        // Numbered only once made: a disk that refuses files leaves no gaps in the sequence. A
        // name taken, finished or not (an earlier run with this PID in this second: PID 1 in
        // a PID namespace), is skipped; the file is made only if none is there. Readable too:
        // each row group's bytes are read back for the journal's checksum.
        let mut seq = self.seq + 1;
        let (partial, file) = loop {
            let name = format!("cachescope-{}-{}Z-{}-{seq:04}", self.opts.host, utc_stamp(secs), std::process::id());
            let partial = self.opts.dir.join(format!("{name}{PARTIAL}"));
            let taken = final_path(&partial).symlink_metadata().is_ok();
            match if taken { Err(std::io::ErrorKind::AlreadyExists.into()) } else { new_file(&partial, true) } {
                Ok(f) => break (partial, f),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && seq < self.seq + 10_000 => seq += 1,
                Err(e) => return Err(self.gone(e, format!("creating {}", partial.display()))),
            }
        };
        // The Arrow writer only to put the Arrow schema in the footer; row groups are written
        // a column at a time (write_row_group).
        let (writer, columns) = ArrowWriter::try_new(file, self.schema.clone(), Some(self.props.clone()))
            .and_then(ArrowWriter::into_serialized_writer)
            .map_err(pq(format!("starting {}", partial.display())))?;
        self.seq = seq;
        self.file = Some(Open { writer, columns, partial, good_len: 4, journaled: 4, rows: 0, journal: None });
        Ok(())
    }

    /// Append the journal entry of the row group just written at `start..good_len`.
    fn checkpoint(&mut self, start: u64) -> Result<(), SinkError> {
        let Some(f) = &mut self.file else { return Ok(()) };
        let Some(rg) = f.writer.flushed_row_groups().last().cloned() else { return Ok(()) };
        // The PMU charges dropped since the file began, as close_file would write them: a
        // recovered file says what the finished one would have said.
        let lost = self.opts.pmu_lost.as_ref().map_or(0, |c| c.load(std::sync::atomic::Ordering::Relaxed));
        let lost = lost.saturating_sub(self.lost_mark);
        let footer = footer_bytes(&self.schema, &self.props, vec![rg], lost)?;
        let journal = match f.journal.as_mut() {
            Some(j) => j,
            None => f.journal.insert(Journal::create(&f.partial)?),
        };
        journal.append(f.writer.inner(), start, f.good_len, &footer)?;
        f.journaled = f.good_len;
        Ok(())
    }

    /// A write failed: cut the file back to what its journal describes and close it that way
    /// (or delete it when that is nothing). The failed rows are still pending.
    fn abandon(&mut self) {
        let Some(f) = self.file.take() else { return };
        let (partial, keep) = (f.partial.clone(), f.journaled);
        drop(f);
        match recover::recover(&partial, Cause::Abandoned { keep, shed: false }) {
            // Nothing was in it: its number goes to the next file, so numbers stay dense.
            Ok(Recovery::Empty { .. }) => self.seq -= 1,
            Ok(_) => self.with_stats(|s| s.files_closed += 1),
            Err(_) => self.unrecovered.push((partial, keep)),
        }
    }

    /// Cut back and close abandoned files; one that still fails (the footer did not fit
    /// either) is retried at the next flush. With `shed` (the last try, at close), a footer a
    /// full disk has no room for is made to fit by cutting the file's last row groups, their
    /// rows counted as dropped: every file ends finished.
    fn retry_recovery(&mut self, shed: bool) {
        let mut left = Vec::new();
        for (p, keep) in std::mem::take(&mut self.unrecovered) {
            match recover::recover(&p, Cause::Abandoned { keep, shed }) {
                Ok(Recovery::Recovered { shed: cut, .. }) => self.with_stats(|s| {
                    s.files_closed += 1;
                    if cut > 0 {
                        s.rows_written -= cut.min(s.rows_written);
                        s.rows_dropped += cut;
                        s.dropped_why = Some(format!(
                            "finishing {}: {}",
                            p.display(),
                            std::io::Error::from_raw_os_error(libc::ENOSPC)
                        ));
                    }
                }),
                Ok(_) => {}
                Err(_) => left.push((p, keep)),
            }
        }
        self.unrecovered = left;
    }

    fn close_file(&mut self) -> Result<(), SinkError> {
        let Some(mut f) = self.file.take() else { return Ok(()) };
        // Rows accepted from now on start the next file's clock.
        self.file_since = (!self.buffer.is_empty() || !self.pending.is_empty()).then(Instant::now);
        let now_lost = self.pmu_lost();
        let lost = now_lost.saturating_sub(std::mem::replace(&mut self.lost_mark, now_lost));
        if lost > 0 {
            f.writer.append_key_value_metadata(KeyValue::new(PMU_LOST.into(), lost.to_string()));
        }
        let finished = f
            .writer
            .finish()
            .map_err(|e| e.to_string())
            .and_then(|_| f.writer.flush().and_then(|()| f.writer.inner().sync_data()).map_err(|e| e.to_string()));
        let (partial, keep, rows) = (f.partial.clone(), f.journaled, f.rows);
        drop(f);
        if let Err(e) = finished {
            // The footer could not be written: fall back to the journal.
            self.unrecovered.push((partial.clone(), keep));
            self.retry_recovery(false);
            return Err(SinkError::Parquet(format!("closing {}: {e}", partial.display())));
        }
        if let Err(e) = self.rename_finished(&partial) {
            if e.kind() == std::io::ErrorKind::NotFound && !self.opts.dir.is_dir() {
                let e = self.gone(e, format!("renaming {}", partial.display()));
                // Its rows are nowhere a reader will find them (an output directory removed
                // under us takes the open file with it): not written after all.
                self.with_stats(|s| {
                    s.rows_written -= rows.min(s.rows_written);
                    s.rows_dropped += rows;
                    s.dropped_why = Some(e.to_string());
                });
                return Err(e);
            }
            // The file is whole, its rows written: only its name is wrong. Retried at every
            // flush; left with its journal, the next record into the directory recovers it.
            let msg = format!("renaming {}: {e}", partial.display());
            self.with_stats(|s| {
                s.write_errors += 1;
                s.failing = Some(msg);
            });
            self.unrenamed.push(partial);
        }
        Ok(())
    }

    /// Give a finished `.partial` file its name, drop its journal and count it closed.
    fn rename_finished(&mut self, partial: &Path) -> std::io::Result<()> {
        let done = rename_unique(partial, &final_path(partial))?;
        // The file is finished and named: a directory that will not sync costs durability
        // across a power loss, not the rows (failing here would write them again).
        let _ = sync_dir(&self.opts.dir);
        let _ = fs::remove_file(footer_path(partial));
        let size = fs::metadata(&done).map_or(0, |m| m.len());
        self.with_stats(|s| {
            s.files_closed += 1;
            s.bytes_closed += size;
        });
        Ok(())
    }

    /// Try again to name the finished files whose rename failed.
    fn retry_renames(&mut self) {
        for p in std::mem::take(&mut self.unrenamed) {
            if self.rename_finished(&p).is_err() {
                self.unrenamed.push(p);
            }
        }
    }

    fn pmu_lost(&self) -> u64 {
        self.opts.pmu_lost.as_ref().map_or(0, |c| c.load(std::sync::atomic::Ordering::Relaxed))
    }

    /// A failure to make a file, told as the directory's loss when that is what it is.
    fn gone(&self, e: std::io::Error, what: String) -> SinkError {
        if e.kind() == std::io::ErrorKind::NotFound && !self.opts.dir.is_dir() {
            return SinkError::Io { what: format!("the output directory {}", self.opts.dir.display()), error: e };
        }
        SinkError::Io { what, error: e }
    }

    /// Write what is left and close the file (SIGINT/SIGTERM, end of --duration). Rows the
    /// disk still refuses are dropped and counted (`rows_dropped`, `dropped_why`): what
    /// returns is what was done, and an error only when a file could not be finished (it is
    /// left with its journal for the next run to recover) or the directory is gone.
    pub fn close(mut self) -> (Stats, Option<SinkError>) {
        let flushed = self.flush(Instant::now());
        if let Err(e) = &flushed {
            let n: u64 = self.pending.iter().map(|b| b.len() as u64).sum();
            self.pending.clear();
            self.with_stats(|s| {
                s.rows_dropped += n;
                s.rows_pending = 0;
                s.dropped_why = Some(e.to_string());
            });
        }
        let closed = self.close_file();
        self.retry_recovery(true);
        // A footer that did not fit (close_file's only Parquet error) is no error once the last
        // try above finished the file.
        let closed = match closed {
            Err(SinkError::Parquet(_)) if self.unrecovered.is_empty() => Ok(()),
            other => other,
        };
        self.retry_renames();
        let stats = self.stats.lock().map(|s| s.clone()).unwrap_or_default();
        let unfinished = self.unrecovered.first().map(|(p, _)| {
            SinkError::Parquet(format!(
                "{} could not be finished; the next record into the directory recovers it",
                p.display()
            ))
        });
        let unrenamed = self.unrenamed.first().map(|p| {
            let why = stats.failing.clone().unwrap_or_default();
            SinkError::Parquet(format!(
                "{} file(s) could not be renamed ({why}): their rows are whole in {}{}, and the next record into the directory recovers them",
                self.unrenamed.len(),
                p.display(),
                if self.unrenamed.len() > 1 { " and the others" } else { "" }
            ))
        });
        let gone = (!self.opts.dir.is_dir()).then(|| SinkError::Io {
            what: format!("the output directory {}", self.opts.dir.display()),
            error: std::io::Error::new(std::io::ErrorKind::NotFound, "removed while recording"),
        });
        (stats, closed.err().or(unfinished).or(unrenamed).or(gone))
    }

    /// What was found in the directory when the sink started: files a crash left, recovered.
    pub fn recovered(&self) -> &[Recovery] {
        &self.recovered
    }
}

/// Write `block` as the file's next row group, a column at a time: each column's chunks go
/// through its encoder and its encoded pages to the file before the next column starts, so a
/// flush holds one column's encoder, not all of them (docs/cost.md, "a column at a time").
fn write_row_group(
    w: &mut SerializedFileWriter<File>,
    columns: &ArrowRowGroupWriterFactory,
    schema: &SchemaRef,
    host: &str,
    prov: Provenance,
    block: &Block,
    what: &str,
) -> Result<(), SinkError> {
    let writers = columns.create_column_writers(w.flushed_row_groups().len()).map_err(pq(what))?;
    if writers.len() != schema.fields().len() || writers.len() != staged::COLUMNS {
        return Err(SinkError::Encode(format!(
            "{what}: {} column writers for {} columns",
            writers.len(),
            staged::COLUMNS
        )));
    }
    let mut group = w.next_row_group().map_err(pq(what))?;
    for (c, (field, mut writer)) in schema.fields().iter().zip(writers).enumerate() {
        for rows in block.chunks() {
            let array = staged::column(c, host, prov, rows);
            for leaf in compute_leaves(field, &array).map_err(pq(what))? {
                writer.write(&leaf).map_err(pq(what))?;
            }
        }
        writer.close().and_then(|chunk| chunk.append_to_row_group(&mut group)).map_err(pq(what))?;
    }
    group.close().map_err(pq(what))?;
    Ok(())
}

/// A footer (metadata, length, magic) for the row groups `rgs` of a file of `schema`, saying
/// `pmu_lost` PMU charges were dropped while the file was filled (when any were).
fn footer_bytes(
    schema: &SchemaRef,
    props: &WriterProperties,
    rgs: Vec<RowGroupMetaData>,
    pmu_lost: u64,
) -> Result<Vec<u8>, SinkError> {
    let rows = rgs.iter().map(|r| r.num_rows()).sum();
    let descr = ArrowSchemaConverter::new().convert(schema).map_err(pq("schema"))?;
    let mut kv = props.key_value_metadata().cloned().unwrap_or_default();
    if pmu_lost > 0 {
        kv.push(KeyValue::new(PMU_LOST.into(), pmu_lost.to_string()));
    }
    let meta = FileMetaData::new(
        1,
        rows,
        Some(format!("cachescope {} (recovered)", env!("CARGO_PKG_VERSION"))),
        Some(kv),
        Arc::new(descr),
        None,
    );
    let md = ParquetMetaData::new(meta, rgs);
    let mut buf = Vec::new();
    ParquetMetaDataWriter::new(&mut buf, &md).finish().map_err(pq("checkpoint footer"))?;
    Ok(buf)
}

#[cfg(test)]
mod tests;
