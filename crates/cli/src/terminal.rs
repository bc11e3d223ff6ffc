//! What `monitor` shows: the live view on a terminal, periodic plain tables without one (or
//! with `--plain`), or JSON lines. Each is an engine sink; the rows of a period are summed
//! into view rows (rates, shares, ratios) and shown at every status.

use crate::tui::{Frame, Tui};
use crate::view::{self, Accumulator};
use cachescope_engine::{Flow, Lateness, Row, RunStatus, Sink};
use std::io::Write;

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
        format!("RMIDs in use={} limbo={} unmonitored={}", st.rmids_in_use, st.rmids_limbo, st.unmonitored),
    ];
    v.extend(st.extra.iter().cloned());
    v
}

fn l3(st: &RunStatus) -> Option<u64> {
    st.l3_bytes.first().map(|(_, b)| *b)
}

/// Periodic plain tables on stdout.
#[derive(Default)]
pub struct Table {
    acc: Accumulator,
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
        let table = view::plain(st.t, &line, &self.acc.take(st.period, l3(st)));
        // A closed stdout (`monitor | head`) ends the run cleanly.
        if std::io::stdout().lock().write_all(table.as_bytes()).is_err() {
            return Flow::Stop;
        }
        Flow::Continue
    }

    fn forget(&mut self, id: &str) {
        self.acc.forget(id);
    }

    fn finish(&mut self) -> Result<Vec<String>, String> {
        let _ = std::io::stdout().flush();
        Ok(Vec::new())
    }
}

/// The live view, drawn on its own thread.
pub struct Live {
    acc: Accumulator,
    tui: Tui,
}

impl Live {
    pub fn start() -> Result<Live, String> {
        Ok(Live { acc: Accumulator::default(), tui: Tui::start()? })
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
        self.tui.show(Frame { header, rows: self.acc.take(st.period, l3(st)) });
        if self.tui.quit_requested() {
            return Flow::Stop;
        }
        Flow::Continue
    }

    fn forget(&mut self, id: &str) {
        self.acc.forget(id);
    }

    /// The terminal is restored first, so what follows is printed on the normal screen.
    fn finish(&mut self) -> Result<Vec<String>, String> {
        self.tui.stop()?;
        Ok(Vec::new())
    }
}

/// JSON lines on stdout, one object per row.
pub struct Jsonl {
    pub host: String,
}

impl Sink for Jsonl {
    fn rows(&mut self, rows: &[Row]) -> Flow {
        if cachescope_sinks::jsonl::write_rows(&mut std::io::stdout().lock(), &self.host, rows).is_err() {
            return Flow::Stop;
        }
        Flow::Continue
    }

    fn finish(&mut self) -> Result<Vec<String>, String> {
        let _ = std::io::stdout().flush();
        Ok(Vec::new())
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
