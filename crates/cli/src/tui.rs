//! The live terminal view of `monitor` (ratatui): one line per (container, domain), sorted by
//! LLC occupancy, keys to sort by bandwidth, IPC or misses, a header with the run's state.
//! It runs on its own thread so that drawing and reading keys never delay a sampling tick: the
//! sampling loop hands it one [`Frame`] per display period (dropped if the thread is behind)
//! and asks [`Tui::quit_requested`] each tick.

use crate::view::{sort, SortKey, ViewRow, COLUMNS};
use ratatui::crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
use ratatui::layout::{Constraint, Layout};
use ratatui::style::{Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::{Cell, Paragraph, Row, Table};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TryRecvError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// One display period's view.
pub struct Frame {
    pub header: Vec<String>,
    pub rows: Vec<ViewRow>,
}

pub struct Tui {
    tx: Option<SyncSender<Frame>>,
    quit: Arc<AtomicBool>,
    thread: Option<JoinHandle<Result<(), String>>>,
}

impl Tui {
    /// Take over the terminal (alternate screen, raw mode) on a UI thread.
    pub fn start() -> Result<Tui, String> {
        let (tx, rx) = sync_channel::<Frame>(2);
        let quit = Arc::new(AtomicBool::new(false));
        let q = quit.clone();
        let (ready_tx, ready_rx) = sync_channel::<Result<(), String>>(1);
        let thread = std::thread::Builder::new()
            .name("cachescope-tui".into())
            .spawn(move || {
                let mut term = match ratatui::try_init() {
                    Ok(t) => {
                        let _ = ready_tx.send(Ok(()));
                        t
                    }
                    Err(e) => {
                        let _ = ready_tx.send(Err(format!("terminal: {e}")));
                        return Ok(());
                    }
                };
                let r = ui_loop(&mut term, &rx, &q);
                ratatui::restore();
                q.store(true, Ordering::Relaxed);
                r
            })
            .map_err(|e| format!("terminal UI thread: {e}"))?;
        match ready_rx.recv() {
            Ok(Ok(())) => Ok(Tui { tx: Some(tx), quit, thread: Some(thread) }),
            Ok(Err(e)) => Err(e),
            Err(_) => Err("terminal UI thread ended at start".into()),
        }
    }

    /// Show a new period (dropped when the UI has two not yet drawn).
    pub fn show(&self, frame: Frame) {
        if let Some(tx) = &self.tx {
            let _ = tx.try_send(frame);
        }
    }

    /// The user pressed q, Esc or Ctrl-C (or the UI failed).
    pub fn quit_requested(&self) -> bool {
        self.quit.load(Ordering::Relaxed)
    }

    /// Give the terminal back; an error the UI met on the way. Later calls do nothing.
    pub fn stop(&mut self) -> Result<(), String> {
        self.tx = None;
        match self.thread.take().map(|t| t.join()) {
            Some(Ok(r)) => r,
            Some(Err(_)) => Err("terminal UI thread panicked".into()),
            None => Ok(()),
        }
    }
}

fn ui_loop(term: &mut ratatui::DefaultTerminal, rx: &Receiver<Frame>, quit: &AtomicBool) -> Result<(), String> {
    let mut key = SortKey::Occupancy;
    let mut shown: Option<Frame> = None;
    let mut dirty = true;
    while !quit.load(Ordering::Relaxed) {
        loop {
            match rx.try_recv() {
                Ok(f) => {
                    shown = Some(f);
                    dirty = true;
                }
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => return Ok(()),
            }
        }
        if dirty {
            term.draw(|f| draw(f, shown.as_ref(), key)).map_err(|e| format!("terminal: {e}"))?;
            dirty = false;
        }
        if !event::poll(Duration::from_millis(50)).map_err(|e| format!("terminal: {e}"))? {
            continue;
        }
        match event::read().map_err(|e| format!("terminal: {e}"))? {
            Event::Key(k) if k.kind == KeyEventKind::Press => {
                let ctrl_c = k.code == KeyCode::Char('c') && k.modifiers.contains(KeyModifiers::CONTROL);
                match k.code {
                    _ if ctrl_c => quit.store(true, Ordering::Relaxed),
                    KeyCode::Char('q') | KeyCode::Esc => quit.store(true, Ordering::Relaxed),
                    KeyCode::Char(c) => {
                        if let Some(k) = sort_key(c) {
                            key = k;
                            dirty = true;
                        }
                    }
                    _ => {}
                }
            }
            Event::Resize(..) => dirty = true,
            _ => {}
        }
    }
    Ok(())
}

/// The sort key a key press selects.
pub fn sort_key(c: char) -> Option<SortKey> {
    match c.to_ascii_lowercase() {
        'o' => Some(SortKey::Occupancy),
        'b' => Some(SortKey::Bandwidth),
        'i' => Some(SortKey::Ipc),
        'm' => Some(SortKey::Misses),
        _ => None,
    }
}

/// Which column a sort key sorts by.
fn sorted_column(key: SortKey) -> usize {
    match key {
        SortKey::Occupancy => 4,
        SortKey::Bandwidth => 6,
        SortKey::Ipc => 8,
        SortKey::Misses => 9,
    }
}

/// Draw one screen: the header lines, the keys, the table sorted by `key`.
pub fn draw(f: &mut ratatui::Frame, frame: Option<&Frame>, key: SortKey) {
    let header: Vec<Line> = match frame {
        Some(fr) => fr.header.iter().map(|h| Line::from(h.as_str())).collect(),
        None => vec![Line::from("cachescope: waiting for the first period…")],
    };
    let keys =
        Line::from(format!("sorted by {} — keys: o occupancy, b bandwidth, i IPC, m misses, q quit", key.name()))
            .style(Style::default().add_modifier(Modifier::DIM));
    let [top, help, body] =
        Layout::vertical([Constraint::Length(header.len() as u16), Constraint::Length(1), Constraint::Min(0)])
            .areas(f.area());
    f.render_widget(Paragraph::new(header), top);
    f.render_widget(Paragraph::new(keys), help);
    let mut rows = frame.map(|fr| fr.rows.clone()).unwrap_or_default();
    sort(&mut rows, key);
    let bold = Style::default().add_modifier(Modifier::BOLD);
    let hot = sorted_column(key);
    let head = Row::new(COLUMNS.iter().enumerate().map(|(i, c)| {
        if i == hot {
            Cell::from(format!("{c}▼")).style(bold.add_modifier(Modifier::REVERSED))
        } else {
            Cell::from(*c).style(bold)
        }
    }));
    let widths = [
        Constraint::Min(24),
        Constraint::Length(6),
        Constraint::Length(5),
        Constraint::Length(11),
        Constraint::Length(9),
        Constraint::Length(6),
        Constraint::Length(13),
        Constraint::Length(13),
        Constraint::Length(6),
        Constraint::Length(9),
    ];
    let table = Table::new(rows.iter().map(|r| Row::new(r.cells())), widths).header(head).column_spacing(1);
    f.render_widget(table, body);
}

#[cfg(test)]
mod tests {
    use super::*;
    use ratatui::backend::TestBackend;
    use ratatui::Terminal;

    fn row(label: &str, occ: u64, bw: f64, ipc: f64) -> ViewRow {
        ViewRow {
            label: label.into(),
            domain: 0,
            rmid: Some(1),
            status: "ok",
            occupancy: Some(occ << 20),
            occupancy_share: Some(occ as f64 / 32.0),
            mbm_total: Some(bw * 1e6),
            mbm_local: Some(bw * 1e6),
            ipc: Some(ipc),
            mpki: None,
        }
    }

    fn screen(key: SortKey) -> Vec<String> {
        let frame = Frame {
            header: vec!["backend=emulated interval=1ms".into(), "RMIDs in use=3".into()],
            rows: vec![row("big-cache", 20, 10.0, 0.5), row("streamer", 4, 9000.0, 0.3), row("compute", 1, 5.0, 3.1)],
        };
        let mut t = Terminal::new(TestBackend::new(120, 12)).unwrap();
        t.draw(|f| draw(f, Some(&frame), key)).unwrap();
        let buf = t.backend().buffer().clone();
        (0..buf.area.height)
            .map(|y| (0..buf.area.width).map(|x| buf[(x, y)].symbol().to_string()).collect::<String>())
            .collect()
    }

    fn order(lines: &[String]) -> Vec<&'static str> {
        let mut v: Vec<(usize, &'static str)> = ["big-cache", "streamer", "compute"]
            .into_iter()
            .filter_map(|n| lines.iter().position(|l| l.starts_with(n)).map(|i| (i, n)))
            .collect();
        v.sort();
        v.into_iter().map(|x| x.1).collect()
    }

    #[test]
    fn sorted_by_occupancy_then_by_the_key_pressed() {
        let s = screen(SortKey::Occupancy);
        assert!(s[0].starts_with("backend=emulated") && s[1].starts_with("RMIDs in use=3"), "{s:#?}");
        assert!(s[2].contains("sorted by LLC occupancy"));
        assert!(s[3].contains("LLC_MiB▼") && s[3].contains("MBM_TOT_MB/s"), "{}", s[3]);
        assert_eq!(order(&s), ["big-cache", "streamer", "compute"]);
        assert_eq!(order(&screen(sort_key('b').unwrap())), ["streamer", "big-cache", "compute"]);
        assert_eq!(order(&screen(sort_key('I').unwrap())), ["compute", "big-cache", "streamer"]);
        // No misses counted: the order falls back to the names; nothing is shown as 0.
        let s = screen(sort_key('m').unwrap());
        assert_eq!(order(&s), ["big-cache", "compute", "streamer"]);
        let line = s.iter().find(|l| l.starts_with("compute")).unwrap();
        assert!(line.trim_end().ends_with('-') && line.contains("3.10"), "{line}");
        assert_eq!(sort_key('x'), None);
    }
}
