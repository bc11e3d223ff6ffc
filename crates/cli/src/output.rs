//! Where one run's rows go, by subcommand: `monitor` → a periodic table (or JSON lines),
//! `record` → sparse rows into Parquet on a writer thread, `serve` → the Prometheus page on
//! an HTTP thread. Every run loop hands each interval's rows (all containers × domains) to
//! [`Output::tick`], which stamps them with CLOCK_REALTIME and the interval measured.

use crate::tui::{Frame, Tui};
use crate::view::{self, Accumulator};
use crate::CliError;
use cachescope_engine::row::Row;
use cachescope_engine::{Lateness, Sparse};
use cachescope_sinks::parquet::{Options as ParquetOptions, Recorder};
use cachescope_sinks::prom::Metrics;
use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// How often, at most, rows go to the Parquet writer thread, and the batch size that sends
/// them sooner. Rows still in a batch at SIGINT/SIGTERM are written; at kill -9 they are lost
/// with the rest of the row group not yet flushed.
const SEND_EVERY: Duration = Duration::from_millis(50);
const SEND_ROWS: usize = 65_536;

/// What the subcommand asked for.
#[derive(Debug, Clone)]
pub enum Mode {
    /// `plain`: tables even on a terminal (the live UI needs stdin and stdout to be one).
    Monitor {
        jsonl: bool,
        plain: bool,
    },
    Record {
        dir: PathBuf,
        rotate_every: Duration,
        rotate_bytes: u64,
    },
    Serve {
        listen: SocketAddr,
    },
}

/// What the header of a table (and the self-metrics) say about the run.
#[derive(Debug, Clone, Default)]
pub struct Header {
    pub backend: String,
    pub interval: Duration,
    pub rmids_in_use: u64,
    pub rmids_limbo: u64,
    pub unmonitored: u64,
    pub extra: Vec<String>,
}

/// Facts about the run that go into every Parquet file's metadata.
pub struct RunInfo {
    pub backend: String,
    pub cpuid: String,
    pub upscale: u64,
    pub l3_bytes: Option<u64>,
    pub extra: Vec<(String, String)>,
}

enum Sink {
    Table(Accumulator),
    Tui {
        acc: Accumulator,
        tui: Tui,
    },
    Jsonl,
    /// Rows kept by the sparse filter are handed to the writer thread in batches (`batch`,
    /// last handed over at `sent`): one wake-up of that thread per tick cost more than the rows.
    Record {
        rec: Recorder,
        sparse: Sparse,
        failing: bool,
        dir: PathBuf,
        batch: Vec<Row>,
        sent: Duration,
    },
    Serve {
        metrics: Arc<Mutex<Metrics>>,
        _server: Arc<tiny_http::Server>,
    },
}

pub struct Output {
    sink: Sink,
    host: String,
    /// CLOCK_REALTIME at the run's t = 0.
    start_real_ns: i64,
    prev_t: Duration,
    print_every: Duration,
    last_print: Duration,
    /// The whole run's lateness, and the current table period's.
    lateness: Lateness,
    period_lateness: Lateness,
    missed: u64,
    ticks: u64,
    l3_bytes: Option<u64>,
}

fn realtime_ns() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() as i64)
}

pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into())
}

impl Output {
    /// Open the sink (fails early: an unwritable directory or a port in use is exit 2).
    pub fn new(mode: &Mode, print_every: Duration, info: RunInfo) -> Result<Output, CliError> {
        let host = hostname();
        let start_real_ns = realtime_ns();
        let mono = cachescope_platform::clock::monotonic().as_nanos() as i64;
        let sink = match mode {
            Mode::Monitor { jsonl: true, .. } => Sink::Jsonl,
            Mode::Monitor { jsonl: false, plain } => {
                use std::io::IsTerminal;
                if !plain && std::io::stdout().is_terminal() && std::io::stdin().is_terminal() {
                    let tui = Tui::start().map_err(CliError::unavailable)?;
                    Sink::Tui { acc: Accumulator::default(), tui }
                } else {
                    Sink::Table(Accumulator::default())
                }
            }
            Mode::Record { dir, rotate_every, rotate_bytes } => {
                let mut o = ParquetOptions::new(dir.clone(), host.clone());
                o.rotate_every = *rotate_every;
                o.rotate_bytes = *rotate_bytes;
                o.metadata = vec![
                    ("cachescope.backend".into(), info.backend.clone()),
                    ("cachescope.cpuid".into(), info.cpuid.clone()),
                    ("cachescope.monotonic_offset_ns".into(), (start_real_ns - mono).to_string()),
                    ("cachescope.upscale_bytes".into(), info.upscale.to_string()),
                    (
                        "cachescope.sparse".into(),
                        "changes + 1 s keyframes; carry occupancy forward, absent counters moved 0".into(),
                    ),
                ];
                if let Some(l3) = info.l3_bytes {
                    o.metadata.push(("cachescope.l3_bytes".into(), l3.to_string()));
                }
                o.metadata.extend(info.extra);
                let rec =
                    Recorder::start(o).map_err(|e| CliError::input(format!("--output {}: {e}", dir.display())))?;
                Sink::Record {
                    rec,
                    sparse: Sparse::new(info.upscale, 1_000_000_000),
                    failing: false,
                    dir: dir.clone(),
                    batch: Vec::new(),
                    sent: Duration::ZERO,
                }
            }
            Mode::Serve { listen } => {
                let server =
                    tiny_http::Server::http(listen).map_err(|e| CliError::input(format!("--listen {listen}: {e}")))?;
                let server = Arc::new(server);
                let metrics = Arc::new(Mutex::new(Metrics::new()));
                let (s2, m2) = (server.clone(), metrics.clone());
                std::thread::Builder::new()
                    .name("cachescope-http".into())
                    .spawn(move || serve(&s2, &m2))
                    .map_err(|e| CliError::unavailable(format!("HTTP thread: {e}")))?;
                eprintln!("cachescope: serving Prometheus metrics at http://{listen}/metrics");
                Sink::Serve { metrics, _server: server }
            }
        };
        Ok(Output {
            sink,
            host,
            start_real_ns,
            prev_t: Duration::ZERO,
            print_every,
            last_print: Duration::ZERO,
            lateness: Lateness::default(),
            period_lateness: Lateness::default(),
            missed: 0,
            ticks: 0,
            l3_bytes: info.l3_bytes,
        })
    }

    /// One interval ending at `t` (since the run's start): stamp and hand over its rows.
    /// `header` is asked, when a table or the self-metrics are due, for the run's state over
    /// the period given (since the last time it was asked). False when the run should stop:
    /// stdout was closed (`monitor | head`).
    pub fn tick(
        &mut self,
        t: Duration,
        late: Duration,
        missed: u64,
        mut rows: Vec<Row>,
        header: &mut dyn FnMut(Duration) -> Header,
    ) -> bool {
        let time_ns = self.start_real_ns + t.as_nanos() as i64;
        let interval_ns = t.saturating_sub(self.prev_t).as_nanos() as i64;
        self.prev_t = t;
        for r in rows.iter_mut() {
            r.time_ns = time_ns;
            r.interval_ns = interval_ns;
        }
        self.lateness.record(late);
        self.period_lateness.record(late);
        self.missed += missed;
        self.ticks += 1;
        let period = t.saturating_sub(self.last_print);
        let due = period >= self.print_every;
        match &mut self.sink {
            Sink::Table(acc) => {
                for r in &rows {
                    acc.add(r);
                }
                if due {
                    let h = header(period);
                    let line = header_line(&h, &self.period_lateness, self.missed);
                    let table = view::plain(t, &line, &acc.take(period, self.l3_bytes));
                    if std::io::stdout().lock().write_all(table.as_bytes()).is_err() {
                        return false;
                    }
                }
            }
            Sink::Tui { acc, tui } => {
                for r in &rows {
                    acc.add(r);
                }
                if due {
                    let h = header(period);
                    let mut header = header_lines(&h, &self.period_lateness, self.missed);
                    header[0] = format!("t={:.3}s  {}", t.as_secs_f64(), header[0]);
                    tui.show(Frame { header, rows: acc.take(period, self.l3_bytes) });
                }
                if tui.quit_requested() {
                    return false;
                }
            }
            Sink::Jsonl => {
                if cachescope_sinks::jsonl::write_rows(&mut std::io::stdout().lock(), &self.host, &rows).is_err() {
                    return false;
                }
            }
            Sink::Record { rec, sparse, failing, batch, sent, .. } => {
                batch.extend(sparse.filter(rows));
                if t.saturating_sub(*sent) >= SEND_EVERY || batch.len() >= SEND_ROWS {
                    rec.send(std::mem::take(batch));
                    *sent = t;
                }
                if due {
                    let st = rec.stats();
                    match (&st.failing, *failing) {
                        (Some(why), false) => {
                            eprintln!("cachescope: writing Parquet failed, rows kept in memory and retried: {why}");
                            *failing = true;
                        }
                        (None, true) => {
                            eprintln!("cachescope: writing Parquet works again ({} rows pending)", st.rows_pending);
                            *failing = false;
                        }
                        _ => {}
                    }
                }
            }
            Sink::Serve { metrics, .. } => {
                let h = due.then(|| header(period));
                if let Ok(mut m) = metrics.lock() {
                    m.update(&rows);
                    m.observe_lateness(late);
                    if let Some(h) = h {
                        m.rmids_in_use = h.rmids_in_use;
                        m.rmids_limbo = h.rmids_limbo;
                        m.containers_unmonitored = h.unmonitored;
                    }
                }
            }
        }
        if due {
            self.last_print = t;
            self.period_lateness = Lateness::default();
        }
        true
    }

    /// A container stopped.
    pub fn forget(&mut self, id: &str) {
        match &mut self.sink {
            Sink::Table(acc) | Sink::Tui { acc, .. } => acc.forget(id),
            Sink::Record { sparse, .. } => sparse.forget(id),
            Sink::Serve { metrics, .. } => {
                if let Ok(mut m) = metrics.lock() {
                    m.forget(id);
                }
            }
            Sink::Jsonl => {}
        }
    }

    /// End of the run: close files (valid Parquet after SIGINT/SIGTERM too) and say what was done.
    pub fn finish(mut self) -> Result<(), CliError> {
        let _ = std::io::stdout().flush();
        // The terminal first, so that what follows is printed on the normal screen.
        if let Sink::Tui { tui, .. } = &mut self.sink {
            tui.stop().map_err(CliError::unavailable)?;
        }
        eprintln!(
            "cachescope: {} ticks, lateness p50 {:?} p99 {:?} max {:?}, {} missed",
            self.ticks,
            self.lateness.quantile(0.5),
            self.lateness.quantile(0.99),
            self.lateness.max(),
            self.missed
        );
        if let Sink::Record { rec, sparse, dir, batch, .. } = self.sink {
            rec.send(batch);
            let st = rec.finish().map_err(|e| CliError::unavailable(format!("closing the Parquet files: {e}")))?;
            eprintln!(
                "cachescope: recorded {} rows ({} of {} sampled, sparse) in {} files, {} bytes, in {}{}",
                st.rows_written,
                sparse.kept,
                sparse.kept + sparse.skipped,
                st.files_closed,
                st.bytes_closed,
                dir.display(),
                if st.rows_dropped > 0 {
                    format!("; {} rows dropped while the disk refused them", st.rows_dropped)
                } else {
                    String::new()
                }
            );
        }
        Ok(())
    }
}

/// The header: run state (backend and interval; lateness and missed ticks; RMIDs), then the
/// backend's extra lines. The plain table puts the first three on one line.
fn header_lines(h: &Header, late: &Lateness, missed: u64) -> Vec<String> {
    let mut v = vec![
        format!("backend={} interval={:?}", h.backend, h.interval),
        format!(
            "lateness p50={:?} p99={:?} max={:?} missed={}",
            late.quantile(0.5),
            late.quantile(0.99),
            late.max(),
            missed
        ),
        format!("RMIDs in use={} limbo={} unmonitored={}", h.rmids_in_use, h.rmids_limbo, h.unmonitored),
    ];
    v.extend(h.extra.iter().cloned());
    v
}

fn header_line(h: &Header, late: &Lateness, missed: u64) -> String {
    let v = header_lines(h, late, missed);
    let mut s = v[..3].join(" ");
    for e in &v[3..] {
        s.push('\n');
        s.push_str(e);
    }
    s
}

fn serve(server: &tiny_http::Server, metrics: &Mutex<Metrics>) {
    for req in server.incoming_requests() {
        let ok_path = req.url() == "/metrics" || req.url().starts_with("/metrics?");
        let resp = if *req.method() == tiny_http::Method::Get && ok_path {
            let body = metrics.lock().map(|m| m.render()).unwrap_or_default();
            let ct =
                tiny_http::Header::from_bytes(&b"Content-Type"[..], &b"text/plain; version=0.0.4; charset=utf-8"[..]);
            let mut r = tiny_http::Response::from_string(body);
            if let Ok(h) = ct {
                r = r.with_header(h);
            }
            r
        } else {
            tiny_http::Response::from_string("cachescope: see /metrics\n").with_status_code(404)
        };
        let _ = req.respond(resp);
    }
}
