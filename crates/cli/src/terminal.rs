//! What `monitor` shows: the live view on a terminal, periodic plain tables without one (or
//! with `--plain`), or JSON lines. Each is an engine sink; the rows of a period are summed
//! into view rows (rates, shares, ratios) and shown at every status.

use cachescope_engine::{Flow, Lateness, OutputError, Row, RunStatus, Sink};
use cachescope_sinks::parquet::Provenance;
use cachescope_view::rows::{self as view, Accumulator};
use cachescope_view::tui::{Frame, Tui};
use std::io::Write;
use std::time::Duration;

/// The header: run state (backend and interval; lateness and missed wake-ups; RMIDs), then
/// the backend's and the PMU source's lines.
fn header_lines(st: &RunStatus) -> Vec<String> {
    let late: &Lateness = &st.lateness;
    let mut v = vec![
        format!("backend={} interval={:?}", st.backend, st.interval),
        format!(
            "lateness p50={:?} p99={:?} max={:?} missed={}",
            late.quantile(0.5),
            late.quantile(0.99),
            late.max(),
            st.missed
        ),
        format!(
            "RMIDs in use={} limbo={} unmonitored={} failed reads={}{}",
            st.rmids_in_use,
            limbo(st),
            st.unmonitored,
            failed_reads(st),
            if st.rmids_limbo.is_none() { format!(" {LIMBO_UNKNOWN}") } else { String::new() }
        ),
    ];
    v.extend(st.extra.iter().cloned());
    v
}

/// RMIDs in limbo, `?` where the backend cannot tell (resctrl keeps its own limbo and does not
/// say; `none` has no RMIDs): never a reassuring 0.
fn limbo(st: &RunStatus) -> String {
    st.rmids_limbo.map_or("?".to_string(), |n| n.to_string())
}

/// What `limbo=?` means, said once in the header where it appears.
const LIMBO_UNKNOWN: &str = "(limbo=?: the backend does not say how many freed RMIDs still hold lines)";

/// Reads that failed where a value should exist, since the start (`error` rows).
fn failed_reads(st: &RunStatus) -> u64 {
    st.read_errors.iter().map(|(_, n)| n).sum()
}

/// Why a stdout sink stopped: a reader that went away is a quiet end (`monitor | head`), any
/// other write error (a full disk behind `> file`) is the run's failure, said at its end.
#[derive(Default)]
struct Stdout {
    failed: Option<std::io::Error>,
}

impl Stdout {
    fn write(&mut self, w: impl FnOnce(&mut std::io::StdoutLock<'static>) -> std::io::Result<()>) -> Flow {
        match w(&mut std::io::stdout().lock()) {
            Ok(()) => Flow::Continue,
            Err(e) => {
                if e.kind() != std::io::ErrorKind::BrokenPipe {
                    self.failed = Some(e);
                }
                Flow::Stop
            }
        }
    }

    fn finish(&mut self) -> Result<Vec<String>, OutputError> {
        let flushed = if self.failed.is_none() { std::io::stdout().flush() } else { Ok(()) };
        match self.failed.take().map_or(flushed, Err) {
            Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(OutputError(format!("writing to stdout: {e}"))),
            _ => Ok(Vec::new()),
        }
    }
}

/// Periodic plain tables on stdout.
#[derive(Default)]
pub struct Table {
    acc: Accumulator,
    out: Stdout,
}

impl Sink for Table {
    fn rows(&mut self, rows: &[Row]) -> Flow {
        for r in rows {
            self.acc.add(r);
        }
        Flow::Continue
    }

    fn status(&mut self, st: &RunStatus) -> Flow {
        let v = header_lines(st);
        let mut line = v[..3].join(" ");
        for e in &v[3..] {
            line.push('\n');
            line.push_str(e);
        }
        let table = view::plain(st.t, &line, &self.acc.take(st.period, &st.l3_bytes));
        self.out.write(|o| o.write_all(table.as_bytes()).and_then(|()| o.flush()))
    }

    fn forget(&mut self, id: &str) {
        self.acc.forget(id);
    }

    fn finish(&mut self) -> Result<Vec<String>, OutputError> {
        self.out.finish()
    }
}

/// The live view, drawn on its own thread.
pub struct Live {
    acc: Accumulator,
    tui: Tui,
    host: String,
    following: String,
    board: cachescope_sinks::noisy::SharedBoard,
}

impl Live {
    /// `following`: what the container source looks for, said while no container is seen;
    /// `board`: the live noisy-neighbour finder's, whose active episodes the view shows.
    pub fn start(host: String, following: String, board: cachescope_sinks::noisy::SharedBoard) -> Result<Live, String> {
        Ok(Live { acc: Accumulator::default(), tui: Tui::start()?, host, following, board })
    }
}

impl Sink for Live {
    fn rows(&mut self, rows: &[Row]) -> Flow {
        for r in rows {
            self.acc.add(r);
        }
        if self.tui.quit_requested() {
            return Flow::Stop;
        }
        Flow::Continue
    }

    fn status(&mut self, st: &RunStatus) -> Flow {
        let mut header = header_lines(st);
        header[0] = format!("t={:.3}s  {}", st.t.as_secs_f64(), header[0]);
        self.tui.show(Frame {
            host: self.host.clone(),
            wall_ns: cachescope_platform::clock::realtime_ns(),
            header,
            following: self.following.clone(),
            episodes: self
                .board
                .lock()
                .map(|b| b.active.iter().map(|e| e.episode.clone()).collect())
                .unwrap_or_default(),
            rows: self.acc.take(st.period, &st.l3_bytes),
        });
        if self.tui.quit_requested() {
            return Flow::Stop;
        }
        Flow::Continue
    }

    fn forget(&mut self, id: &str) {
        self.acc.forget(id);
    }

    /// The terminal is restored first, so what follows is printed on the normal screen.
    fn finish(&mut self) -> Result<Vec<String>, OutputError> {
        self.tui.stop().map_err(OutputError)?;
        Ok(Vec::new())
    }
}

/// `record` and `serve`: a progress line on stderr (rows, files, write errors, lateness,
/// RMIDs) every `every`, around the record sink when there is one.
pub struct Progress {
    pub record: Option<cachescope_sinks::run_sinks::RecordSink>,
    pub every: Duration,
    last: Option<Duration>,
    sampled: u64,
    /// PMU charges lost, as last said.
    lost_said: u64,
}

impl Progress {
    /// Every `print_every` on a terminal; in logs (stderr not a terminal) at most once a minute.
    pub fn new(record: Option<cachescope_sinks::run_sinks::RecordSink>, print_every: Duration) -> Progress {
        use std::io::IsTerminal;
        let every =
            if std::io::stderr().is_terminal() { print_every } else { print_every.max(Duration::from_secs(60)) };
        Progress { record, every, last: None, sampled: 0, lost_said: 0 }
    }

    pub fn line(&self, st: &RunStatus) -> String {
        let mut o = format!("t={:.1}s {} rows sampled", st.t.as_secs_f64(), self.sampled);
        if let Some(s) = self.record.as_ref().and_then(|r| r.stats()) {
            o.push_str(&format!(
                "; {} written, {} files finished, {} write errors, {} pending",
                s.rows_written, s.files_closed, s.write_errors, s.rows_pending
            ));
        }
        o.push_str(&format!(
            "; lateness p99 {:?}, {} missed; RMIDs {} in use, {} limbo, {} waiting; {} failed reads",
            st.lateness.quantile(0.99),
            st.missed,
            st.rmids_in_use,
            limbo(st),
            st.unmonitored,
            failed_reads(st)
        ));
        if st.pmu_lost_charges > 0 {
            o.push_str(&format!("; {} PMU charges lost", st.pmu_lost_charges));
        }
        o
    }
}

impl Sink for Progress {
    fn rows(&mut self, rows: &[Row]) -> Flow {
        self.sampled += rows.len() as u64;
        self.record.as_mut().map_or(Flow::Continue, |r| r.rows(rows))
    }

    fn tick(&mut self, late: Duration, missed: u64) {
        if let Some(r) = self.record.as_mut() {
            r.tick(late, missed);
        }
    }

    fn status(&mut self, st: &RunStatus) -> Flow {
        let flow = self.record.as_mut().map_or(Flow::Continue, |r| r.status(st));
        if st.pmu_lost_charges > self.lost_said {
            // Said when it happens, not a minute later.
            cachescope_platform::say!(
                "t={:.1}s: the collector fell behind and the kernel dropped PMU charges ({} since the start): the \
                 rows of that time have null cpu_ns and PMU columns",
                st.t.as_secs_f64(),
                st.pmu_lost_charges
            );
            self.lost_said = st.pmu_lost_charges;
        }
        if self.last.is_none_or(|l| st.t.saturating_sub(l) >= self.every) {
            cachescope_platform::say!("{}", self.line(st));
            self.last = Some(st.t);
        }
        flow
    }

    fn forget(&mut self, id: &str) {
        if let Some(r) = self.record.as_mut() {
            r.forget(id);
        }
    }

    fn finish(&mut self) -> Result<Vec<String>, OutputError> {
        self.record.as_mut().map_or(Ok(Vec::new()), |r| r.finish())
    }

    fn losses(&self) -> Option<String> {
        self.record.as_ref().and_then(|r| r.losses())
    }
}

/// JSON lines on stdout, one object per row.
pub struct Jsonl {
    host: String,
    provenance: Provenance,
    out: Stdout,
    /// A batch's lines, written with one call: stdout is line-buffered, and a write per row
    /// was most of what a batch cost (a system call per row).
    buf: Vec<u8>,
}

impl Jsonl {
    pub fn new(host: String, provenance: Provenance) -> Jsonl {
        Jsonl { host, provenance, out: Stdout::default(), buf: Vec::new() }
    }
}

impl Sink for Jsonl {
    fn rows(&mut self, rows: &[Row]) -> Flow {
        self.buf.clear();
        if let Err(e) = cachescope_sinks::jsonl::write_rows(&mut self.buf, &self.host, self.provenance, rows) {
            // Writing to memory fails only if a row cannot be serialized.
            return self.out.write(|_| Err(e));
        }
        let buf = &self.buf;
        self.out.write(|o| o.write_all(buf))
    }

    fn finish(&mut self) -> Result<Vec<String>, OutputError> {
        self.out.finish()
    }
}

/// One line at the end of a run: wake-ups and their lateness.
pub fn summary_line(wakes: u64, late: &Lateness, missed: u64) -> String {
    format!(
        "{wakes} ticks, lateness p50 {:?} p99 {:?} max {:?}, {missed} missed",
        late.quantile(0.5),
        late.quantile(0.99),
        late.max()
    )
}

pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into())
}
