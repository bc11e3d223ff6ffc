//! Noisy-neighbour episodes as the live finder reports them while a run goes on
//! (`cachescope-report`'s `live` module finds them), shared by the run's outputs: /metrics,
//! the live view, the `--events` log and the recording's episodes file. The finder writes a
//! [`Board`]; each output reads it, and follows its event log with a cursor of its own.

use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};

/// Episodes shown as active on /metrics at most (the newest kept): each is one series per
/// victim, and a run must not grow the page without bound. Older ones are dropped and counted.
pub const MAX_ACTIVE_SERIES: usize = 32;

#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// The aggressor's occupancy rose.
    Occupancy,
    /// The aggressor's memory bandwidth rose.
    Bandwidth,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Victim {
    pub container_id: String,
    pub container_name: String,
    pub occupancy_before_bytes: Option<f64>,
    /// Occupancy lost over the episode (negative: gained).
    pub occupancy_lost_bytes: Option<f64>,
    pub ipc_before: Option<f64>,
    pub ipc_during: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Episode {
    pub domain: i32,
    pub kind: Kind,
    /// CLOCK_REALTIME ns.
    pub start_ns: i64,
    pub end_ns: i64,
    pub container_id: String,
    pub container_name: String,
    pub occupancy_before_bytes: Option<f64>,
    pub occupancy_after_bytes: Option<f64>,
    /// Mean bandwidth over the episode and over as long before it, bytes/s.
    pub bandwidth_before_bytes_per_sec: Option<f64>,
    pub bandwidth_during_bytes_per_sec: Option<f64>,
    pub victims: Vec<Victim>,
}

impl Episode {
    /// When it started and ended, in seconds from `t0` (CLOCK_REALTIME ns, the run's start).
    pub fn seconds_from(&self, t0: i64) -> (f64, f64) {
        ((self.start_ns - t0) as f64 / 1e9, (self.end_ns - t0) as f64 / 1e9)
    }
}

impl Kind {
    /// Its word, as in JSON and labels.
    pub fn word(self) -> &'static str {
        match self {
            Kind::Occupancy => "occupancy",
            Kind::Bandwidth => "bandwidth",
        }
    }
}

/// One episode as the live finder knows it now: the report's episode, and when it was first
/// reported (its detection latency is `detected_ns - start_ns`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LiveEpisode {
    #[serde(flatten)]
    pub episode: Episode,
    /// The data time at which the finder first reported it.
    pub detected_ns: i64,
}

/// A change, for logs: an episode started (first found) or ended.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Event {
    /// `start` or `end`.
    pub event: &'static str,
    /// The data time of the event (detection for a start; the end of the hold for an end).
    pub time_ns: i64,
    #[serde(flatten)]
    pub episode: LiveEpisode,
}

/// What the finder knows now.
#[derive(Debug, Default)]
pub struct Board {
    /// Active episodes, oldest first.
    pub active: Vec<LiveEpisode>,
    /// Episodes found since the start, per domain.
    pub totals: BTreeMap<i32, u64>,
    /// Every start and end since the start, in order. A run has few episodes (each takes a
    /// rise of a tenth of the L3); the log is cut at [`MAX_EVENTS`], the cut counted.
    events: Vec<Event>,
    /// Events cut from the front of the log.
    events_cut: u64,
}

/// The recording's episodes files: `cachescope-episodes-RUN_ID.jsonl` in the output directory,
/// one JSON object per episode start and end (as `--events` writes them).
pub const EPISODES_PREFIX: &str = "cachescope-episodes-";

/// Events the log holds at most.
pub const MAX_EVENTS: usize = 100_000;

/// The board as the run's parts share it.
pub type SharedBoard = Arc<Mutex<Board>>;

impl Board {
    pub fn shared() -> SharedBoard {
        Arc::new(Mutex::new(Board::default()))
    }

    /// Log an event.
    pub fn log(&mut self, e: Event) {
        if self.events.len() >= MAX_EVENTS {
            self.events.remove(0);
            self.events_cut += 1;
        }
        self.events.push(e);
    }

    /// Events from position `cursor` of the whole log (counting those cut) onwards, and the
    /// cursor after them.
    pub fn events_since(&self, cursor: u64) -> (Vec<Event>, u64) {
        let skip = cursor.saturating_sub(self.events_cut) as usize;
        let out: Vec<Event> = self.events.iter().skip(skip).cloned().collect();
        (out, self.events_cut + self.events.len() as u64)
    }

    /// The Prometheus families (docs/metrics.md): one series per active (domain, aggressor,
    /// victim), at most [`MAX_ACTIVE_SERIES`] (the newest), and the episodes counted per
    /// domain, with the series left out counted too.
    pub fn render(&self, o: &mut String) {
        let a = "cachescope_noisy_neighbour_active";
        let _ = writeln!(
            o,
            "# HELP {a} 1 while a noisy-neighbour episode is active: the aggressor's occupancy or bandwidth rose and the victim in the same L3 domain lost occupancy or IPC.\n# TYPE {a} gauge"
        );
        let pairs: Vec<(&Episode, &Victim)> =
            self.active.iter().flat_map(|e| e.episode.victims.iter().map(move |v| (&e.episode, v))).collect();
        let cut = pairs.len().saturating_sub(MAX_ACTIVE_SERIES);
        for (e, v) in &pairs[cut..] {
            let _ = writeln!(
                o,
                "{a}{{domain=\"{}\",aggressor=\"{}\",victim=\"{}\",kind=\"{}\"}} 1",
                e.domain,
                crate::prom::escape(label(&e.container_name, &e.container_id)),
                crate::prom::escape(label(&v.container_name, &v.container_id)),
                e.kind.word()
            );
        }
        let d = "cachescope_noisy_neighbour_active_dropped";
        let _ = writeln!(
            o,
            "# HELP {d} Active (aggressor, victim) pairs left out of {a} beyond its {MAX_ACTIVE_SERIES} newest.\n# TYPE {d} gauge\n{d} {cut}"
        );
        let t = "cachescope_noisy_neighbour_episodes_total";
        let _ = writeln!(
            o,
            "# HELP {t} Noisy-neighbour episodes found since the start, per L3 domain.\n# TYPE {t} counter"
        );
        for (dom, n) in &self.totals {
            let _ = writeln!(o, "{t}{{domain=\"{dom}\"}} {n}");
        }
    }
}

/// A container as a label: its name where it has one, else its id.
fn label<'a>(name: &'a str, id: &'a str) -> &'a str {
    if name.is_empty() {
        id
    } else {
        name
    }
}
