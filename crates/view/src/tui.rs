//! The live terminal view of `monitor` (ratatui): one line per container with its L3 domains
//! folded (`d` shows them), sorted by LLC occupancy (keys re-sort), per-domain totals and the
//! run's state in the header, scrolling with what is out of sight counted, `/` to filter by
//! name, `?` for help. Columns are chosen by the terminal's width so that no header is ever
//! cut and no value truncated; names are shortened from the middle.
//!
//! It runs on its own thread so that drawing and reading keys never delay a sampling tick: the
//! sampling loop hands it one [`Frame`] per display period (dropped if the thread is behind)
//! and asks [`Tui::quit_requested`] each tick.

use crate::rows::{domain_totals, fold, sort, Group, SortKey, ViewRow};
use ratatui::crossterm::event::{self, Event, KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::{Block, Borders, Cell, Clear, Paragraph, Row, Table, Wrap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TryRecvError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// One display period's view.
pub struct Frame {
    /// The host and the wall-clock time of the period's end (CLOCK_REALTIME ns).
    pub host: String,
    pub wall_ns: i64,
    /// The run's state lines.
    pub header: Vec<String>,
    /// What the run follows ("Docker, containerd, ... containers"), said while there is none.
    pub following: String,
    /// Noisy-neighbour episodes active now (the live finder's).
    pub episodes: Vec<cachescope_sinks::noisy::Episode>,
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

    /// Give the terminal back; an error the UI met on the way. Later calls do nothing. The
    /// UI thread gets 2 s to end: a terminal that stopped answering must not keep the
    /// process from exiting (the thread ends with it).
    pub fn stop(&mut self) -> Result<(), String> {
        self.tx = None;
        let Some(t) = self.thread.take() else { return Ok(()) };
        let deadline = std::time::Instant::now() + Duration::from_secs(2);
        while !t.is_finished() {
            if std::time::Instant::now() > deadline {
                return Err("the terminal did not answer; left as it is".into());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        match t.join() {
            Ok(r) => r,
            Err(_) => Err("terminal UI thread panicked".into()),
        }
    }
}

/// What the person chose: sort key, domains shown, scroll position, filter, help.
#[derive(Debug, Clone, PartialEq)]
pub struct State {
    pub key: SortKey,
    pub expanded: bool,
    /// The first line shown.
    pub scroll: usize,
    pub filter: String,
    /// Typing into the filter.
    pub editing: bool,
    pub help: bool,
    /// Lines the table showed last time (for paging).
    page: usize,
}

impl Default for State {
    fn default() -> Self {
        State {
            key: SortKey::Occupancy,
            expanded: false,
            scroll: 0,
            filter: String::new(),
            editing: false,
            help: false,
            page: 10,
        }
    }
}

/// What a key asks for beyond the state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    None,
    Redraw,
    Quit,
}

impl State {
    pub fn on_key(&mut self, k: KeyEvent) -> Action {
        if k.code == KeyCode::Char('c') && k.modifiers.contains(KeyModifiers::CONTROL) {
            return Action::Quit;
        }
        if self.editing {
            match k.code {
                KeyCode::Enter => self.editing = false,
                KeyCode::Esc => {
                    self.editing = false;
                    self.filter.clear();
                }
                KeyCode::Backspace => {
                    self.filter.pop();
                }
                KeyCode::Char(c) if !c.is_control() && self.filter.chars().count() < 64 => self.filter.push(c),
                _ => return Action::None,
            }
            self.scroll = 0;
            return Action::Redraw;
        }
        if self.help {
            // Any key closes the help (q still quits).
            self.help = false;
            return if matches!(k.code, KeyCode::Char('q')) { Action::Quit } else { Action::Redraw };
        }
        match k.code {
            KeyCode::Char('q') => return Action::Quit,
            KeyCode::Esc if self.filter.is_empty() => return Action::Quit,
            KeyCode::Esc => self.filter.clear(),
            KeyCode::Char('?') | KeyCode::Char('h') => self.help = true,
            KeyCode::Char('/') => self.editing = true,
            KeyCode::Char('d') => self.expanded = !self.expanded,
            KeyCode::Down | KeyCode::Char('j') => self.scroll += 1,
            KeyCode::Up | KeyCode::Char('k') => self.scroll = self.scroll.saturating_sub(1),
            KeyCode::PageDown | KeyCode::Char(' ') => self.scroll += self.page.max(1),
            KeyCode::PageUp => self.scroll = self.scroll.saturating_sub(self.page.max(1)),
            KeyCode::Home | KeyCode::Char('g') => self.scroll = 0,
            KeyCode::End | KeyCode::Char('G') => self.scroll = usize::MAX / 2,
            KeyCode::Char(c) => match sort_key(c) {
                Some(key) => self.key = key,
                None => return Action::None,
            },
            _ => return Action::None,
        }
        Action::Redraw
    }
}

fn ui_loop(term: &mut ratatui::DefaultTerminal, rx: &Receiver<Frame>, quit: &AtomicBool) -> Result<(), String> {
    let mut state = State::default();
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
            term.draw(|f| draw(f, shown.as_ref(), &mut state)).map_err(|e| format!("terminal: {e}"))?;
            dirty = false;
        }
        // Wait for input ourselves: crossterm's poll spins forever, ignoring its timeout, on a
        // terminal that hung up (it reads EOF again and again), and the run could never end.
        if !tty_readable(Duration::from_millis(50))? {
            continue;
        }
        // Every event crossterm has, including those it read ahead in one read.
        while event::poll(Duration::ZERO).map_err(|e| format!("terminal: {e}"))? {
            match event::read().map_err(|e| format!("terminal: {e}"))? {
                Event::Key(k) if k.kind == KeyEventKind::Press => match state.on_key(k) {
                    Action::Quit => quit.store(true, Ordering::Relaxed),
                    Action::Redraw => dirty = true,
                    Action::None => {}
                },
                Event::Resize(..) => dirty = true,
                _ => {}
            }
        }
    }
    Ok(())
}

/// Whether the terminal (stdin: the live view runs only where it is one) has input within
/// `timeout`; an error once it hung up or closed.
fn tty_readable(timeout: Duration) -> Result<bool, String> {
    let mut p = libc::pollfd { fd: libc::STDIN_FILENO, events: libc::POLLIN, revents: 0 };
    // SAFETY: one pollfd we own, for the process's stdin, which stays open.
    let n = unsafe { libc::poll(&mut p, 1, timeout.as_millis() as libc::c_int) };
    if n < 0 {
        let e = std::io::Error::last_os_error();
        return if e.kind() == std::io::ErrorKind::Interrupted { Ok(false) } else { Err(format!("terminal: {e}")) };
    }
    if p.revents & (libc::POLLHUP | libc::POLLERR | libc::POLLNVAL) != 0 {
        return Err("the terminal hung up".into());
    }
    Ok(n > 0)
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

/// A table column: its title (never cut: the width holds it and the sort mark) and width.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Col {
    Name,
    Domain,
    Rmid,
    Status,
    LlcMib,
    LlcPct,
    Mbm,
    Local,
    Ipc,
    Mpki,
}

impl Col {
    pub fn title(self) -> &'static str {
        match self {
            Col::Name => "CONTAINER",
            Col::Domain => "L3",
            Col::Rmid => "RMID",
            Col::Status => "STATUS",
            Col::LlcMib => "LLC MiB",
            Col::LlcPct => "LLC %",
            Col::Mbm => "MBM MB/s",
            Col::Local => "LOCAL MB/s",
            Col::Ipc => "IPC",
            Col::Mpki => "MPKI",
        }
    }

    /// Fixed widths hold the title, the sort mark and every value the column shows
    /// (`unavailable`, `unsupported`, 99999.9 MB/s, ...).
    fn width(self) -> u16 {
        match self {
            Col::Name => 0,
            Col::Domain => 3,
            Col::Rmid => 5,
            Col::Status => 11,
            Col::LlcMib => 8,
            Col::LlcPct => 6,
            Col::Mbm => 9,
            Col::Local => 10,
            Col::Ipc => 5,
            Col::Mpki => 6,
        }
    }

    fn sorts(self, key: SortKey) -> bool {
        matches!(
            (self, key),
            (Col::LlcMib, SortKey::Occupancy)
                | (Col::Mbm, SortKey::Bandwidth)
                | (Col::Ipc, SortKey::Ipc)
                | (Col::Mpki, SortKey::Misses)
        )
    }

    fn cell(self, r: &ViewRow, name_width: usize) -> String {
        let f = |v: Option<f64>, digits: usize| v.map_or("-".into(), |x| format!("{x:.digits$}"));
        // Rates over 99999.9 MB/s lose their decimal rather than their width.
        let rate = |v: Option<f64>| match v.map(|b| b / 1e6) {
            Some(x) if x >= 99_999.95 => format!("{x:.0}"),
            x => f(x, 1),
        };
        match self {
            Col::Name => {
                let label = match r.domain {
                    Some(d) if r.id.is_empty() => format!("  L3 {d}"),
                    _ => r.label.clone(),
                };
                crate::rows::shorten(&label, name_width)
            }
            Col::Domain => r.domain.map_or("*".into(), |d| d.to_string()),
            Col::Rmid => r.rmid.map_or("-".into(), |x| x.to_string()),
            Col::Status => r.status.to_string(),
            Col::LlcMib => f(r.occupancy.map(|b| b as f64 / 1048576.0), 2),
            Col::LlcPct => f(r.occupancy_share.map(|s| 100.0 * s), 1),
            Col::Mbm => rate(r.mbm_total),
            Col::Local => rate(r.mbm_local),
            Col::Ipc => f(r.ipc, 2),
            Col::Mpki => f(r.mpki, 2),
        }
    }
}

/// The narrowest the name column gets before a column is dropped.
const MIN_NAME: u16 = 10;
/// Columns in the order they are dropped when the terminal is too narrow for all of them:
/// the name and the occupancy stay to the end.
const DROP_FIRST: [Col; 8] =
    [Col::Domain, Col::Rmid, Col::Local, Col::Mpki, Col::Ipc, Col::LlcPct, Col::Status, Col::Mbm];

/// The columns that fit `width` whole, the name column taking what is left (at least
/// [`MIN_NAME`], at most 64); none where even the name and the occupancy do not fit.
pub fn columns(width: u16) -> (Vec<Col>, u16) {
    let all: &[Col] = if width >= 100 {
        &[
            Col::Name,
            Col::Domain,
            Col::Rmid,
            Col::Status,
            Col::LlcMib,
            Col::LlcPct,
            Col::Mbm,
            Col::Local,
            Col::Ipc,
            Col::Mpki,
        ]
    } else {
        &[Col::Name, Col::Status, Col::LlcMib, Col::LlcPct, Col::Mbm, Col::Ipc, Col::Mpki]
    };
    let mut cols = all.to_vec();
    // Each fixed column takes its width and a space before the next.
    let fixed = |cols: &[Col]| -> u16 { cols.iter().filter(|c| **c != Col::Name).map(|c| c.width() + 1).sum() };
    for drop in DROP_FIRST {
        if fixed(&cols) + MIN_NAME <= width {
            break;
        }
        cols.retain(|c| *c != drop);
    }
    if fixed(&cols) + MIN_NAME > width {
        return (Vec::new(), 0);
    }
    let name = (width - fixed(&cols)).min(64);
    (cols, name)
}

/// The lines of the table: containers (folded), or each followed by its domains.
fn lines(rows: &[ViewRow], st: &State) -> (Vec<ViewRow>, usize, usize) {
    let needle = st.filter.to_lowercase();
    let mut groups: Vec<Group> = fold(rows);
    let all = groups.len();
    if !needle.is_empty() {
        groups
            .retain(|g| g.total.label.to_lowercase().contains(&needle) || g.total.id.to_lowercase().contains(&needle));
    }
    let shown = groups.len();
    let mut totals: Vec<ViewRow> = groups.iter().map(|g| g.total.clone()).collect();
    sort(&mut totals, st.key);
    let mut out = Vec::new();
    for t in totals {
        let parts = groups.iter().find(|g| g.total.id == t.id).map(|g| g.parts.clone()).unwrap_or_default();
        out.push(t);
        if st.expanded {
            // Domain lines: no id of their own (drawn indented under the container).
            out.extend(parts.into_iter().map(|p| ViewRow { id: String::new(), ..p }));
        }
    }
    (out, shown, all)
}

fn mib(b: u64) -> String {
    format!("{:.1}", b as f64 / 1048576.0)
}

/// Per-domain totals, as many per line as `width` holds.
fn totals_lines(rows: &[ViewRow], width: u16) -> Vec<String> {
    let items: Vec<String> = domain_totals(rows)
        .iter()
        .map(|d| {
            let used = d.used.map_or("-".into(), mib);
            let space = match (d.used, d.l3_bytes) {
                (Some(u), Some(l3)) => format!("{used} of {} MiB used, {} free", mib(l3), mib(l3.saturating_sub(u))),
                (None, Some(l3)) => format!("- of {} MiB used", mib(l3)),
                _ => format!("{used} MiB used"),
            };
            let bw = d.mbm_total.map_or("-".into(), |b| format!("{:.0}", b / 1e6));
            format!("L3 {}: {space}, {bw} MB/s", d.domain)
        })
        .collect();
    let mut out: Vec<String> = Vec::new();
    for it in items {
        match out.last_mut() {
            Some(l) if l.chars().count() + 3 + it.chars().count() <= width as usize => {
                l.push_str(" │ ");
                l.push_str(&it);
            }
            _ => out.push(it),
        }
    }
    out
}

const AGGRESSOR: char = '▲';
const VICTIM: char = '▼';

/// Each container of an active episode and its mark: ▲ the aggressor, ▼ a victim (an
/// aggressor in one episode and a victim in another is shown as the aggressor).
fn marks(eps: &[cachescope_sinks::noisy::Episode]) -> std::collections::HashMap<&str, char> {
    let mut m = std::collections::HashMap::new();
    for e in eps {
        for v in &e.victims {
            m.entry(v.container_id.as_str()).or_insert(VICTIM);
        }
    }
    for e in eps {
        m.insert(e.container_id.as_str(), AGGRESSOR);
    }
    m
}

/// The active episodes, newest first, at most three lines and a count of the rest: who rose,
/// by what, since when, and who lost what.
fn episode_lines(eps: &[cachescope_sinks::noisy::Episode]) -> Vec<String> {
    let mut out = Vec::new();
    for e in eps.iter().rev().take(3) {
        let since = cachescope_report::html::utc(e.start_ns);
        let since = since.get(11..21).unwrap_or(&since);
        let what = match (e.kind, e.occupancy_before_bytes, e.occupancy_after_bytes) {
            (cachescope_sinks::noisy::Kind::Occupancy, Some(a), Some(b)) => {
                format!("occupancy {} → {} MiB", mib(a as u64), mib(b as u64))
            }
            _ => format!(
                "bandwidth {} → {} MB/s",
                e.bandwidth_before_bytes_per_sec.map_or("-".into(), |b| format!("{:.0}", b / 1e6)),
                e.bandwidth_during_bytes_per_sec.map_or("-".into(), |b| format!("{:.0}", b / 1e6))
            ),
        };
        let victims: Vec<String> = e
            .victims
            .iter()
            .map(|v| {
                let who = crate::rows::printable(if v.container_name.is_empty() {
                    &v.container_id
                } else {
                    &v.container_name
                });
                match v.occupancy_lost_bytes {
                    Some(l) if l > 0.0 => format!("{VICTIM} {who} lost {} MiB", mib(l as u64)),
                    _ => format!("{VICTIM} {who} lost IPC"),
                }
            })
            .collect();
        let who = crate::rows::printable(if e.container_name.is_empty() { &e.container_id } else { &e.container_name });
        out.push(format!(
            "NOISY NEIGHBOUR L3 {}: {AGGRESSOR} {who} {what} since {since}; {}",
            e.domain,
            victims.join(", ")
        ));
    }
    if eps.len() > 3 {
        out.push(format!("… and {} more active episodes", eps.len() - 3));
    }
    out
}

/// The help box's lines: at most 72 characters, so that the box (4 more) fits 80 columns
/// without wrapping, and 9 lines (11 rows) fit 24.
const HELP: [&str; 9] = [
    "o b i m         sort by occupancy, bandwidth, IPC, LLC misses (MPKI)",
    "d               show or fold each container's L3 domains",
    "↑ ↓ j k         a line; PgUp PgDn (space) a page; g / G top / end",
    "/               filter by name (Enter keeps it, Esc clears it)",
    "? h             this help (any key closes it)",
    "q  Esc  Ctrl-C  quit",
    "",
    "Absent values are '-', never 0: 'unavailable' (no data in that L3 yet),",
    "'no_rmid' (waiting for an RMID), 'unsupported' (no cache monitoring).",
];

/// Draw one screen.
pub fn draw(f: &mut ratatui::Frame, frame: Option<&Frame>, st: &mut State) {
    let area = f.area();
    let width = area.width;
    let mut header: Vec<Line> = Vec::new();
    let rows: &[ViewRow] = frame.map_or(&[], |fr| fr.rows.as_slice());
    match frame {
        Some(fr) => {
            let when = cachescope_report::html::utc(fr.wall_ns);
            let when = when.get(..19).unwrap_or(&when);
            header.push(
                Line::from(format!("cachescope on {} at {when} UTC", crate::rows::printable(&fr.host)))
                    .style(Style::default().add_modifier(Modifier::BOLD)),
            );
            header.extend(fr.header.iter().map(|h| Line::from(h.as_str())));
            header.extend(totals_lines(rows, width).into_iter().map(Line::from));
            let red = Style::default().fg(Color::Red).add_modifier(Modifier::BOLD);
            header.extend(episode_lines(&fr.episodes).into_iter().map(|l| Line::from(l).style(red)));
        }
        None => header.push(Line::from("cachescope: waiting for the first period…")),
    }
    let keys = if width >= 100 {
        format!("sorted by {} · ? help · / filter · d domains · ↑↓ scroll · q quit", st.key.name())
    } else if width >= 60 {
        format!("by {} · ? help · / filter · d domains · q quit", st.key.name())
    } else {
        "? help · q quit".to_string()
    };
    let keys = Line::from(keys).style(Style::default().add_modifier(Modifier::DIM));
    // Long lines wrap: the header takes the rows they wrap to.
    let w = usize::from(width.max(1));
    let header_rows: usize = header.iter().map(|l| l.width().max(1).div_ceil(w)).sum();
    let [top, help, body, foot] = Layout::vertical([
        Constraint::Length(header_rows as u16),
        Constraint::Length(1),
        Constraint::Min(2),
        Constraint::Length(1),
    ])
    .areas(area);
    f.render_widget(Paragraph::new(header).wrap(Wrap { trim: false }), top);
    f.render_widget(Paragraph::new(keys), help);

    let (cols, name_w) = columns(width);
    if cols.is_empty() {
        // Narrower than a name and a number: say so rather than show cut values.
        let need = MIN_NAME + Col::LlcMib.width() + 1;
        let say = format!("too narrow: {need} columns needed");
        f.render_widget(Paragraph::new(say).wrap(Wrap { trim: false }), body);
        return;
    }
    let (all_lines, shown, all) = lines(rows, st);
    let visible = body.height.saturating_sub(1) as usize;
    st.page = visible;
    st.scroll = st.scroll.min(all_lines.len().saturating_sub(visible));
    let bold = Style::default().add_modifier(Modifier::BOLD);
    let head = Row::new(cols.iter().map(|c| {
        if c.sorts(st.key) {
            Cell::from(format!("{}▼", c.title())).style(bold.add_modifier(Modifier::REVERSED))
        } else {
            Cell::from(c.title()).style(bold)
        }
    }));
    let widths: Vec<Constraint> = cols
        .iter()
        .map(|c| if *c == Col::Name { Constraint::Length(name_w) } else { Constraint::Length(c.width()) })
        .collect();
    let marks = frame.map(|fr| marks(&fr.episodes)).unwrap_or_default();
    let body_rows = all_lines.iter().skip(st.scroll).take(visible).map(|r| {
        let mark = marks.get(r.id.as_str()).copied();
        let style = match mark {
            _ if r.id.is_empty() => Style::default().add_modifier(Modifier::DIM),
            Some(AGGRESSOR) => Style::default().fg(Color::Red).add_modifier(Modifier::BOLD),
            Some(_) => Style::default().fg(Color::Yellow),
            None => Style::default(),
        };
        Row::new(cols.iter().map(|c| {
            let text = match mark {
                // The mark in the name's first two columns: the name is shortened for it.
                Some(m) if *c == Col::Name => format!("{m} {}", c.cell(r, (name_w as usize).saturating_sub(2))),
                _ => c.cell(r, name_w as usize),
            };
            // Numbers right-aligned under their titles.
            if matches!(c, Col::Name | Col::Status) {
                Cell::from(text)
            } else {
                Cell::from(Line::from(text).right_aligned())
            }
        }))
        .style(style)
    });
    f.render_widget(Table::new(body_rows, widths).header(head).column_spacing(1), body);

    // No container yet: say what was looked for and how to widen it, where the rows would be.
    if let Some(fr) = frame.filter(|_| all_lines.is_empty() && st.filter.is_empty()) {
        let text = vec![
            Line::from(""),
            Line::from(format!("No container seen yet. Following: {}.", fr.following)),
            Line::from(
                "Others (a service, a cgroup of your own): --containers 'GLOB' over cgroup paths, \
                 e.g. --containers 'system.slice/*.service'.",
            ),
            Line::from("`cachescope info` says what this host offers."),
        ];
        let below_head = Rect { y: body.y + 1, height: body.height.saturating_sub(1), ..body };
        f.render_widget(Paragraph::new(text).wrap(Wrap { trim: false }), below_head);
    }
    let below = all_lines.len().saturating_sub(st.scroll + visible);
    let mut status = Vec::new();
    if all_lines.is_empty() && frame.is_some() {
        status.push(if st.filter.is_empty() { "no containers".to_string() } else { "nothing matches".to_string() });
    } else if !all_lines.is_empty() {
        status.push(format!(
            "lines {}–{} of {}",
            st.scroll + 1,
            (st.scroll + visible).min(all_lines.len()),
            all_lines.len()
        ));
    }
    if st.scroll > 0 {
        status.push(format!("{} above ↑", st.scroll));
    }
    if below > 0 {
        status.push(format!("{below} more ↓"));
    }
    if st.editing || !st.filter.is_empty() {
        status.push(format!(
            "filter: {}{} ({shown} of {all})",
            crate::rows::printable(&st.filter),
            if st.editing { "▏" } else { "" }
        ));
    }
    // A narrow terminal loses whole parts of the status line, the line count first.
    while status.len() > 1 && status.join(" · ").chars().count() > usize::from(width) {
        status.remove(0);
    }
    f.render_widget(Paragraph::new(status.join(" · ")).style(Style::default().add_modifier(Modifier::BOLD)), foot);

    if st.help {
        let w = (HELP.iter().map(|l| l.chars().count()).max().unwrap_or(40) as u16 + 4).min(area.width);
        let h = (HELP.len() as u16 + 2).min(area.height);
        let r = Rect { x: area.x + (area.width - w) / 2, y: area.y + (area.height - h) / 2, width: w, height: h };
        f.render_widget(Clear, r);
        let p = Paragraph::new(HELP.iter().map(|l| Line::from(*l)).collect::<Vec<_>>())
            .block(Block::default().borders(Borders::ALL).title(" keys "))
            .wrap(Wrap { trim: false });
        f.render_widget(p, r);
    }
}

#[cfg(test)]
mod tests;
