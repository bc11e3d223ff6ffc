//! The run: one loop for every command and backend.
//!
//! Each wake-up: drain the PMU source (its slots keep their own times); then for every
//! sample time due (the wake-up itself for backends read from user space, or each interval
//! of the batch for emulated and cache-less backends): lifecycle changes (a new container is
//! attached before anything of its interval is read or emulated) → the emulated world
//! advances → the backend is read → rows derived → stopped containers detached. Upkeep and
//! the RMID policy at their period. Rows are released, with their PMU columns joined, once
//! the PMU source has delivered their interval, and every sink gets them in time order.

use crate::backend::{CacheBackend, Read, Sampling};
use crate::budget::ReadBudget;
use crate::clock::{Clock, Wake};
use crate::containers::{Change, ContainerSource};
use crate::derive::Derive;
use crate::error::PartError;
use crate::pmu::{Counted, Join, PmuSample, PmuSource, Ran};
use crate::quiet::Quiet;
use crate::row::{Pmu, Row, Status};
use crate::sched::{Lateness, TickerError};
use crate::sink::{Flow, RunStatus, Sink};
use crate::slots::Slots;
use crate::world::World;
use crate::{FastMap, FastSet};
use cachescope_platform::clock::{realtime_ns_at, thread_cpu};
use std::collections::VecDeque;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

/// The parts of a run, chosen and built by the caller.
pub struct Parts {
    pub backend: Box<dyn CacheBackend>,
    pub containers: Box<dyn ContainerSource>,
    pub pmu: Option<Box<dyn PmuSource>>,
    pub world: Option<Box<dyn World>>,
    pub sinks: Vec<Box<dyn Sink>>,
}

#[derive(Debug, Clone)]
pub struct Options {
    /// The sampling interval (each row's).
    pub interval: Duration,
    /// How long batched backends sleep between wake-ups (rows keep `interval`).
    pub batch: Duration,
    pub duration: Option<Duration>,
    /// Virtual time: no waiting (emulated scenarios only).
    pub virtual_time: bool,
    /// How often sinks get the run's status.
    pub status_every: Duration,
    /// Read every container at every interval, even where the PMU source says who ran
    /// ([`crate::quiet`] off: a diagnostic, `CACHESCOPE_READ=every-interval`).
    pub every_interval: bool,
    pub stop: Arc<AtomicBool>,
}

/// What a run did.
#[derive(Debug, Clone, Default)]
pub struct Summary {
    pub wakes: u64,
    pub samples: u64,
    pub lateness: Lateness,
    pub missed: u64,
    /// What the backend, the sources and the sinks said at the end.
    pub messages: Vec<String>,
    /// What the sinks accepted and could not keep ([`crate::sink::Sink::losses`]).
    pub losses: Vec<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("{0}")]
    Clock(#[from] TickerError),
    #[error("{what}: {why}")]
    Part { what: &'static str, why: PartError },
    /// The run went to its end but an output could not finish (a full disk, a stdout that
    /// refused writes): what the run measured is in `summary`, what was lost in `why`.
    #[error("{why}")]
    Output { why: String, summary: Box<Summary> },
}

fn part(what: &'static str) -> impl FnOnce(PartError) -> RunError {
    move |why| RunError::Part { what, why }
}

struct State {
    p: Parts,
    interval: Duration,
    slots: Slots,
    derive: Derive,
    join: Join,
    counted: Counted,
    origin: Duration,
    pending: Pending,
    changes: Vec<Change>,
    /// Containers reported stopped, detached after their last interval is read.
    stopped: Vec<String>,
    /// Containers attached since the last sample: read in their first interval whatever
    /// the budget (their first read is the baseline of their counters).
    fresh: FastSet<String>,
    budget: ReadBudget,
    domains: Vec<u32>,
    raw: Vec<crate::backend::RawSample>,
    drained: Vec<PmuSample>,
    /// The last sample time worked through.
    step: Duration,
    /// The PMU watermark, in run time (None: no PMU source, nothing to wait for).
    watermark: Option<Duration>,
    samples: u64,
    messages: Vec<String>,
    read_errors: u64,
    lost: PmuLost,
    /// Changes waiting for the sample time they happened at, in order.
    deferred: VecDeque<(Duration, Change)>,
    /// Containers whose first row is still to come, and when they started (run time): that
    /// row's interval begins there.
    born: FastMap<String, Duration>,
    /// Stopped containers the PMU source still counts until its slots pass this
    /// (CLOCK_MONOTONIC).
    leaving: Vec<(Duration, String)>,
    /// Where the PMU source counts CPU time: who each interval reads ([`crate::quiet`]);
    /// None: every container, every interval.
    quiet: Option<Quiet>,
    /// How far the PMU source's slots can lag a sample time when it is read (a backend read
    /// from user space at the tick, slots drained every 50 ms): who ran that recently is read.
    /// 0 for batched runs, which sample only what was drained.
    lag: Duration,
    /// Who ran lately (as far as drained), and who ran in the step, per domain.
    recent: Vec<(Arc<str>, Duration)>,
    ran: Vec<Ran>,
    /// Container-intervals read, and followed, while quiet.
    quiet_reads: u64,
    quiet_followed: u64,
}

impl State {
    fn lifecycle(&mut self, at: Duration) -> Result<(), RunError> {
        self.p.containers.poll(at, &mut self.changes).map_err(part("containers"))?;
        // A change is applied at the first sample time at or after it happened: a run that
        // samples behind real time (batched, waiting for the PMU) neither starts a container's
        // rows before it existed nor ends them before it stopped.
        let origin = self.origin;
        let when = |t: Option<Duration>| t.map_or(Duration::ZERO, |t| t.saturating_sub(origin));
        for ch in self.changes.drain(..) {
            let t = match &ch {
                Change::Started(c) => when(c.seen_at),
                Change::Stopped(_, seen) => when(*seen),
            };
            self.deferred.push_back((t, ch));
        }
        while self.deferred.front().is_some_and(|(t, _)| *t <= at) {
            let Some((t, ch)) = self.deferred.pop_front() else { break };
            match ch {
                Change::Started(c) => {
                    if t > self.step {
                        self.born.insert(c.id().to_string(), t);
                    }
                    if let Some(w) = self.p.world.as_mut() {
                        w.started(&c);
                    }
                    if let Some(pmu) = self.p.pmu.as_mut() {
                        pmu.follow(&c);
                        self.join.follow(&c.meta);
                        if let Some(q) = self.quiet.as_mut() {
                            q.follow(&c.meta, !pmu.uncounted(c.id()));
                        }
                    }
                    self.fresh.insert(c.id().to_string());
                    self.slots
                        .start(c, self.p.backend.as_mut(), self.p.containers.as_ref(), at)
                        .map_err(part("attach"))?;
                }
                // Stopped containers are read one last time (their final interval), then detached.
                Change::Stopped(id, _) => self.stopped.push(id),
            }
        }
        Ok(())
    }

    fn stop_containers(&mut self, at: Duration) -> Result<(), RunError> {
        for id in std::mem::take(&mut self.stopped) {
            self.slots.stop(&id, self.p.backend.as_mut(), at).map_err(part("detach"))?;
            if let Some(w) = self.p.world.as_mut() {
                w.stopped(&id);
            }
            // Its slots up to `at` are still to be drained: the source lets it go after that.
            if self.p.pmu.is_some() {
                self.leaving.push((self.origin + at, id.clone()));
            }
            self.born.remove(&id);
            if let Some(q) = self.quiet.as_mut() {
                q.forget(&id);
            }
            self.derive.forget(&id);
            self.pending.forget(id);
        }
        Ok(())
    }

    /// Work through one sample time; what reading the containers cost (CPU time of this
    /// thread: the read budget's variable part).
    /// `measure`: the read budget is at work (else no clock is read and the cost is 0).
    fn sample(&mut self, at: Duration, measure: bool) -> Result<Duration, RunError> {
        self.lifecycle(at)?;
        let (from, to) = (self.origin + self.step, self.origin + at);
        // Who ran in the step (as far as drained), found from those that ran lately: the
        // emulated world it drives and the quiet interval's reads need no look at the others.
        self.ran.clear();
        if self.quiet.is_some() || self.p.world.is_some() {
            self.join.ran_after(from.saturating_sub(self.lag), &mut self.recent);
            for (id, _) in &self.recent {
                self.join.ran_in(id, from, to, &mut self.ran);
            }
        }
        if let Some(w) = self.p.world.as_mut() {
            w.advance(at, &self.ran);
        }
        let began = measure.then(thread_cpu);
        if !self.stopped.is_empty() {
            self.p.backend.stopping(&self.stopped);
        }
        if let Some(q) = self.quiet.as_mut() {
            // Quiet: the keyframe share, the new, the stopping, and who ran (batched: in the
            // step; read at the tick: lately, as the slots drained so far say).
            q.begin(at);
            self.fresh.iter().chain(self.stopped.iter()).for_each(|id| q.add_id(id));
            if self.lag.is_zero() {
                self.ran.iter().for_each(|r| q.add_id(&r.id));
            } else {
                self.recent.iter().for_each(|(id, _)| q.add_id(id));
            }
            self.quiet_reads += q.visit().len() as u64;
            self.quiet_followed += q.followed() as u64;
        }
        // Who is read this interval: quiet, those above; else every container but under
        // overload (crate::budget), the new and the stopping always. Containers without an
        // RMID get their rows on the same terms.
        let (budget, join, fresh, stopped, domains, quiet) =
            (&self.budget, &self.join, &self.fresh, &self.stopped, &self.domains, &self.quiet);
        let cpu = self.counted.cpu_ns;
        let ran = |id: &str| cpu.then(|| domains.iter().any(|&d| join.peek(id, d, from, to).cpu_ns > 0));
        let read = |id: &str| match quiet {
            Some(q) => q.contains(id),
            None => budget.wants(id, || ran(id)) || fresh.contains(id) || stopped.iter().any(|s| s == id),
        };
        let which = quiet.as_ref().map_or(Read::Wanted(&read), |q| Read::Only(q.visit()));
        self.p.backend.collect(at, which, &mut self.raw).map_err(part("backend"))?;
        for s in self.raw.drain(..) {
            // Rows keep their sample's time (the kernel's, for backends sampled there): the
            // PMU columns joined to them are those of that instant.
            let when = s.at;
            if s.status == Status::Error {
                self.read_errors += 1;
            }
            // Made in place: a row is ~200 bytes, and moving it is this loop's main cost.
            let since = since(&self.born, self.step, &s.container.id);
            self.pending.row(when, self.derive.row(s, since));
        }
        // Containers without an RMID: a `no_rmid` row in every domain, made here only.
        let start_real = self.derive.start_real_ns();
        let (born, step) = (&self.born, self.step);
        let since = |id: &str| since(born, step, id);
        let waiting = self.slots.waiting();
        let rows_for: Vec<&crate::slots::Waiting> = match quiet {
            // Looked up by the few read: thousands may wait where RMIDs are few.
            Some(q) if waiting.len() > q.visit().len() => {
                q.visit().iter().filter_map(|id| waiting.get(id.id())).collect()
            }
            _ => waiting.values().filter(|w| read(w.container.id())).collect(),
        };
        for w in rows_for {
            for &domain in domains {
                self.pending.row(
                    at,
                    Row {
                        time_ns: start_real.saturating_add(at.as_nanos() as i64),
                        interval_ns: at.saturating_sub(since(w.container.id())).as_nanos() as i64,
                        container: w.container.meta.clone(),
                        domain,
                        rmid: None,
                        llc_occupancy_bytes: None,
                        mbm_total_bytes: None,
                        mbm_local_bytes: None,
                        pmu: Default::default(),
                        cpu_ns: None,
                        status: Status::NoRmid,
                        mbm_counter: None,
                    },
                );
            }
        }
        let read_cost = began.map_or(Duration::ZERO, |b| thread_cpu().saturating_sub(b));
        // First rows made: their intervals began at their start.
        if !self.born.is_empty() {
            let fresh = &self.fresh;
            self.born.retain(|id, _| !fresh.contains(id));
        }
        self.fresh.clear();
        self.budget.next_interval();
        self.samples += 1;
        self.step = at;
        self.stop_containers(at)?;
        Ok(read_cost)
    }

    /// Drain the PMU source for the sample time `at` (run time).
    fn drain_pmu(&mut self, at: Duration) {
        let Some(pmu) = self.p.pmu.as_mut() else { return };
        match pmu.drain(self.origin + at, &mut self.drained) {
            Ok(mark) => {
                self.join.push(&mut self.drained);
                self.watermark = Some(mark.saturating_sub(self.origin));
                // Containers whose last rows' slots are all drained now.
                let mut i = 0;
                while i < self.leaving.len() {
                    if self.leaving[i].0 <= mark {
                        pmu.unfollow(&self.leaving.swap_remove(i).1);
                    } else {
                        i += 1;
                    }
                }
                if let Some(g) = pmu.gap() {
                    self.join.gap(g.from, g.to);
                    self.lost.charges += g.charges;
                    self.lost.gaps += 1;
                    self.lost.span += g.to.saturating_sub(g.from);
                }
            }
            Err(e) => {
                self.messages.push(format!("PMU counting stopped: {e}"));
                // Who runs is no longer known: every container is read from now on.
                self.quiet = None;
                self.p.pmu = None;
                self.counted = Counted::default();
                self.watermark = None;
            }
        }
    }

    /// Hand the rows whose PMU columns are complete (all of them with `all`) to the sinks, and
    /// the ends of containers once every row before them has gone.
    fn release(&mut self, all: bool) -> Flow {
        let mark = if all { None } else { self.watermark };
        let mut flow = Flow::Continue;
        let q = &mut self.pending;
        loop {
            let before_forget = q.forgets.front().map_or(q.rows.len(), |(k, _)| (k - q.released) as usize);
            let n = q.at[..before_forget].iter().take_while(|&&at| mark.is_none_or(|m| at <= m)).count();
            if n > 0 {
                if self.counted.any() {
                    // An emulated world driven by the PMU's CPU time has no bandwidth either
                    // where that time is unknown.
                    let driven = self.p.world.is_some();
                    for (row, &at) in q.rows[..n].iter_mut().zip(&q.at) {
                        let until = self.origin + at;
                        let (t, first, prev) = self.join.take(&row.container, row.domain, self.origin, until);
                        let mut from = until.saturating_sub(Duration::from_nanos(row.interval_ns.max(0) as u64));
                        // Counts from before the row's interval (a container is charged from
                        // its first slot, which can precede its first row when it was found
                        // late): the row reaches back to them, within the run and not past
                        // the container's previous row, so that what it says happened within
                        // it. Not where the row carries bandwidth, whose interval is the
                        // hardware's read interval. (Counts from before the run's start, while
                        // it set up, are in no row.)
                        let slot = self.p.pmu.as_ref().map_or(Duration::ZERO, |p| p.slot_len());
                        let floor = prev.unwrap_or(self.origin).max(self.origin);
                        let begun = first.map(|end| end.saturating_sub(slot).max(floor));
                        if let Some(begun) = begun.filter(|b| *b < from) {
                            if row.mbm_total_bytes.is_none() && row.mbm_local_bytes.is_none() {
                                // Whole intervals, as every row spans: rows stay on the grid.
                                let iv = self.interval.as_nanos().max(1);
                                let n = (until - begun).as_nanos().div_ceil(iv);
                                row.interval_ns = (n * iv).min(i64::MAX as u128) as i64;
                                from = until.saturating_sub(Duration::from_nanos(row.interval_ns as u64));
                            }
                        }
                        if self.p.pmu.as_ref().is_some_and(|p| p.uncounted(&row.container.id)) {
                            (row.pmu, row.cpu_ns) = (Pmu::default(), None);
                            if driven {
                                (row.mbm_total_bytes, row.mbm_local_bytes) = (None, None);
                            }
                        } else if self.join.in_gap(from, until) {
                            // Part of the counts were dropped: none, rather than a part.
                            (row.pmu, row.cpu_ns) = (Pmu { lost: true, ..Default::default() }, None);
                            if driven {
                                (row.mbm_total_bytes, row.mbm_local_bytes) = (None, None);
                            }
                            self.lost.rows += 1;
                        } else {
                            (row.pmu, row.cpu_ns) = t.columns(self.counted);
                        }
                    }
                }
                for s in self.p.sinks.iter_mut() {
                    if s.rows(&q.rows[..n]) == Flow::Stop {
                        flow = Flow::Stop;
                    }
                }
                q.rows.drain(..n);
                q.at.drain(..n);
                q.released += n as u64;
            }
            // Every row before the next end has gone: that container's end is due.
            let Some((_, id)) = (n == before_forget).then(|| q.forgets.pop_front()).flatten() else { return flow };
            self.join.forget(&id);
            for s in self.p.sinks.iter_mut() {
                s.forget(&id);
            }
            if flow == Flow::Stop {
                return flow;
            }
        }
    }

    fn status(&mut self, t: Duration, period: Duration, lateness: &Lateness, missed: u64) -> Flow {
        let info = self.p.backend.info();
        let slots = self.p.backend.slots();
        let mut extra = self.p.backend.header();
        if let Some(e) = &info.emulated {
            extra.insert(0, format!("EMULATED occupancy and bandwidth, driven by {e}"));
        }
        if let Some(line) = self.p.pmu.as_mut().and_then(|p| p.header(period)) {
            extra.push(line);
        }
        extra.extend(self.budget.describe(self.interval, self.slots.count()));
        // The first few by name: thousands can wait where RMIDs are few.
        let all = self.slots.waiting();
        let waiting: Vec<String> =
            all.iter().take(WAITING_NAMED).map(|(k, w)| format!("{k} ({})", w.reason.name())).collect();
        if !waiting.is_empty() {
            let more = all.len() - waiting.len();
            let more = if more > 0 { format!(" and {more} more") } else { String::new() };
            extra.push(format!("without RMID: {}{more}", waiting.join(", ")));
        }
        let st = RunStatus {
            t,
            period,
            backend: info.label.clone(),
            interval: self.interval,
            lateness: lateness.clone(),
            missed,
            rmids_in_use: slots.in_use,
            rmids_limbo: slots.limbo,
            unmonitored: self.slots.waiting().len() as u64,
            l3_bytes: info.l3_bytes.map(|b| info.domains.iter().map(|&d| (d, b)).collect()).unwrap_or_default(),
            emulated: info.emulated.clone(),
            read_errors: vec![("error", self.read_errors)],
            pmu_lost_charges: self.lost.charges,
            pmu_kernel_cpu: self.p.pmu.as_mut().and_then(|p| p.kernel_cpu()),
            extra,
        };
        let mut flow = Flow::Continue;
        for s in self.p.sinks.iter_mut() {
            if s.status(&st) == Flow::Stop {
                flow = Flow::Stop;
            }
        }
        flow
    }
}

/// Where a container's next row begins when it has no row yet: its start, or the last sample
/// time `step` if that came later.
fn since(born: &FastMap<String, Duration>, step: Duration, id: &str) -> Duration {
    if born.is_empty() {
        return step;
    }
    born.get(id).map_or(step, |b| (*b).max(step))
}

/// Run until the duration, the stop flag or a sink says stop. The backend is shut down and
/// the sinks finished whatever happens; the first error wins.
pub fn run(parts: Parts, opts: &Options) -> Result<Summary, RunError> {
    let info = parts.backend.info().clone();
    let wake = match info.sampling {
        // Read at every interval, but look for new containers more often, so one is attached
        // within LIFECYCLE_EVERY of being reported (resctrl reads every 100 ms by default).
        Sampling::Tick => opts.interval.min(LIFECYCLE_EVERY),
        // Drained in batches: the samples keep the kernel's times.
        Sampling::Kernel => opts.batch.max(opts.interval),
        // A whole number of intervals per wake-up.
        _ => opts.interval * (opts.batch.as_nanos() / opts.interval.as_nanos().max(1)).max(1) as u32,
    };
    let mut clock = Clock::new(wake, opts.duration, opts.virtual_time, opts.stop.clone())?;
    let counted = parts.pmu.as_ref().map(|p| p.counted()).unwrap_or_default();
    let drain_every = parts.pmu.as_ref().map_or(wake, |p| p.drain_every());
    let mut parts = parts;
    parts.backend.origin(clock.origin());
    let mut st = State {
        p: parts,
        interval: opts.interval,
        slots: Slots::default(),
        // The wall clock at the run's origin, not at this line: the start's work before it
        // (and a preemption) would shift every row's time.
        derive: Derive::new(info.mbm_width, info.mbm_unit, realtime_ns_at(clock.origin()))
            .with_correction(info.mbm_correction),
        join: Join::default(),
        counted,
        origin: clock.origin(),
        pending: Pending::default(),
        changes: Vec::new(),
        stopped: Vec::new(),
        fresh: FastSet::default(),
        budget: ReadBudget::default(),
        domains: info.domains.clone(),
        raw: Vec::new(),
        drained: Vec::new(),
        step: Duration::ZERO,
        watermark: None,
        samples: 0,
        messages: Vec::new(),
        read_errors: 0,
        lost: PmuLost::default(),
        deferred: VecDeque::new(),
        born: FastMap::default(),
        leaving: Vec::new(),
        quiet: (counted.cpu_ns && !info.moves_without_tasks && !opts.every_interval).then(|| Quiet::new(opts.interval)),
        lag: match info.sampling {
            Sampling::Tick | Sampling::Kernel => 2 * drain_every + opts.interval,
            Sampling::Virtual | Sampling::Unsupported => Duration::ZERO,
        },
        recent: Vec::new(),
        ran: Vec::new(),
        quiet_reads: 0,
        quiet_followed: 0,
    };
    let mut summary = Summary::default();
    let result = run_loop(&mut st, &mut clock, &info, wake, drain_every, opts, &mut summary);
    // Clean up in order, whatever happened: the rows still held, the backend's changes, the
    // sources, the sinks.
    st.drain_pmu(st.step);
    if let Some(k) = st.p.pmu.as_mut().and_then(|p| p.kernel_cpu()) {
        st.messages.push(k.describe());
    }
    if let Some(p) = st.p.pmu.as_mut() {
        let said = p.closing();
        st.messages.extend(said);
    }
    st.release(true);
    let mut first_err = result.err();
    let note = |e: RunError, first: &mut Option<RunError>| {
        if first.is_none() {
            *first = Some(e);
        }
    };
    if let Err(e) = st.slots.stop_all(st.p.backend.as_mut(), st.step) {
        note(RunError::Part { what: "detach", why: e }, &mut first_err);
    }
    match st.p.backend.shutdown() {
        Ok(m) => st.messages.extend(m),
        Err(e) => note(RunError::Part { what: "backend shutdown", why: e }, &mut first_err),
    }
    st.p.containers.stop();
    let mut output_errors = Vec::new();
    for s in st.p.sinks.iter_mut() {
        match s.finish() {
            Ok(m) => st.messages.extend(m),
            Err(e) => output_errors.push(e.to_string()),
        }
        summary.losses.extend(s.losses());
    }
    if let Some(last) = &st.slots.last_refusal {
        st.messages
            .push(format!("{} attaches refused for a container's own trouble (the last: {last})", st.slots.refused));
    }
    st.messages.extend(st.budget.summary(opts.interval, st.samples));
    if st.quiet_followed > 0 {
        st.messages.push(format!(
            "read {} of {} container-intervals ({:.2} %): the others did not run (docs/cost.md)",
            st.quiet_reads,
            st.quiet_followed,
            100.0 * st.quiet_reads as f64 / st.quiet_followed as f64
        ));
    }
    st.messages.extend(st.lost.summary());
    summary.samples = st.samples;
    summary.messages = std::mem::take(&mut st.messages);
    match first_err {
        // The run's own failure is the reason it ends with (an output failing after it is
        // likely its consequence).
        Some(e) => Err(e),
        None if !output_errors.is_empty() => {
            Err(RunError::Output { why: output_errors.join("; "), summary: Box::new(summary) })
        }
        None => Ok(summary),
    }
}

/// Containers without an RMID named in the status (the rest counted).
const WAITING_NAMED: usize = 8;

/// Rows held before they are handed on mid-batch (about 13 MB).
const RELEASE_ROWS: usize = 65_536;

/// What the buffers emptied and refilled every wake-up (the rows waiting for the PMU, the
/// lifecycle changes, the backend's samples) keep of a burst's room: the start of 10,000
/// containers, all new at once, left 20 MB of their capacity held for the whole run.
const TRIM_ROWS: usize = 4_096;

/// How often the allocator hands free memory back to the kernel: glibc keeps the pages freed
/// inside its heap (docs/cost.md: 10,000 containers, 103-109 MB before, 95-100 MB after).
const GIVE_BACK_EVERY: Duration = Duration::from_secs(10);

fn give_back() {
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim takes no pointer; it returns the heaps' free pages to the kernel
    // and leaves every allocation as it is.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// A buffer that keeps its largest size until told otherwise.
trait Room {
    fn room(&self) -> usize;
    fn held(&self) -> usize;
    fn shrink(&mut self, to: usize);
}

// Vec and VecDeque name the same three methods alike.
macro_rules! room {
    ($($buffer:ident),*) => {$(
        impl<T> Room for $buffer<T> {
            fn room(&self) -> usize {
                self.capacity()
            }
            fn held(&self) -> usize {
                self.len()
            }
            fn shrink(&mut self, to: usize) {
                self.shrink_to(to);
            }
        }
    )*};
}
room!(Vec, VecDeque);

/// Give back what a burst left in a buffer: down to `keep` (or what it holds) when its room is
/// more than four times that.
fn trim(v: &mut impl Room, keep: usize) {
    let need = keep.max(v.held());
    if v.room() > 4 * need {
        v.shrink(need);
    }
}

fn run_loop(
    st: &mut State,
    clock: &mut Clock,
    info: &crate::backend::BackendInfo,
    wake: Duration,
    drain_every: Duration,
    opts: &Options,
    summary: &mut Summary,
) -> Result<(), RunError> {
    // Containers present at the start are attached before the first interval begins.
    st.lifecycle(Duration::ZERO)?;
    st.stop_containers(Duration::ZERO)?;
    let mut period_lateness = Lateness::default();
    let (mut last_drain, mut last_upkeep, mut last_status) = (Duration::ZERO, Duration::ZERO, Duration::ZERO);
    let mut last_give_back = Duration::ZERO;
    let mut times = Vec::new();
    while let Some(Wake { t, late, missed, last }) = clock.wait() {
        summary.wakes += 1;
        summary.lateness.record(late);
        summary.missed += missed;
        period_lateness.record(late);
        for s in st.p.sinks.iter_mut() {
            s.tick(late, missed);
        }
        // A batched run works through what the PMU source has delivered (an emulated world
        // driven by it needs its counts before it advances); a backend read from user space
        // reads now and its rows wait for their PMU slots.
        if st.p.pmu.is_some() && (info.sampling != Sampling::Tick || t.saturating_sub(last_drain) >= drain_every) {
            st.drain_pmu(t);
            last_drain = t;
        }
        let limit = match (info.sampling, st.watermark) {
            (Sampling::Tick, _) | (_, None) => t,
            (_, Some(m)) => m.min(t),
        };
        due(info.sampling, opts.interval, wake, st.step, limit, &mut times);
        if times.is_empty() {
            // Between reads: attach whoever started (a stop waits for its last read), up to
            // where the next reads can reach: a change seen later than that waits for them.
            st.lifecycle(limit.max(st.step))?;
        }
        let mut stopped = false;
        for &at in &times {
            // A batch that overruns (thousands of containers) still stops at once when asked.
            if opts.stop.load(std::sync::atomic::Ordering::Relaxed) || stopped {
                break;
            }
            // A run that fell behind by seconds catches up with thousands of intervals at a
            // time: hand rows on as they become many, rather than hold them all (1,000
            // containers starved for 5 s were 5 million rows, a gigabyte).
            if st.pending.rows.len() >= RELEASE_ROWS {
                stopped = st.release(false) == Flow::Stop;
            }
            // In real time, each interval's cost sets how many the next one reads.
            // (The kernel decides what it samples: its batches are not budgeted here.)
            // A quiet run reads only who ran and a keyframe share (crate::quiet): there is no
            // share of the others to cut, and no clock to read (the thread's CPU clock takes
            // the run queue's lock: four reads an interval were 16 % of a quiet run's CPU).
            let measure = !clock.is_virtual() && info.sampling != Sampling::Kernel && st.quiet.is_none();
            let began = measure.then(thread_cpu);
            let reads = st.sample(at, measure)?;
            if let Some(began) = began {
                st.budget.adjust(thread_cpu().saturating_sub(began), reads, opts.interval, st.slots.count());
            }
        }
        if t.saturating_sub(last_upkeep) >= info.upkeep_every {
            last_upkeep = t;
            // Where the PMU source counts every container's CPU time (a quiet run), that
            // is the policy's measure: a file read per container each upkeep was 80 % of an
            // emulated run's CPU at 1,000 containers.
            let (join, containers, quiet) = (&st.join, st.p.containers.as_ref(), st.quiet.as_ref());
            let cpu = |id: &str| match quiet {
                Some(q) if q.counted(id) => join.cpu_usage_usec(id),
                _ => containers.cpu_usage_usec(id),
            };
            st.slots.upkeep(st.p.backend.as_mut(), containers, t, &cpu).map_err(part("RMID upkeep"))?;
        }
        let mut flow = if stopped { Flow::Stop } else { st.release(false) };
        st.pending.trim(TRIM_ROWS);
        trim(&mut st.changes, TRIM_ROWS);
        trim(&mut st.raw, TRIM_ROWS);
        trim(&mut st.deferred, TRIM_ROWS);
        if t.saturating_sub(last_give_back) >= GIVE_BACK_EVERY {
            give_back();
            last_give_back = t;
        }
        let period = t.saturating_sub(last_status);
        if period >= opts.status_every || last {
            // Rows up to now first, so the status closes the period they belong to.
            if st.p.pmu.is_some() && info.sampling == Sampling::Tick {
                st.drain_pmu(t);
                last_drain = t;
                if st.release(false) == Flow::Stop {
                    flow = Flow::Stop;
                }
            }
            if st.status(t, period, &period_lateness, summary.missed) == Flow::Stop {
                flow = Flow::Stop;
            }
            last_status = t;
            period_lateness = Lateness::default();
        }
        if flow == Flow::Stop {
            break;
        }
    }
    if let Some(e) = clock.take_failure() {
        return Err(RunError::Clock(e));
    }
    // Stopped by a signal between wake-ups: what the kernel sampled since the last one is in
    // its ring, with the kernel's times. Read it rather than lose the run's last batch.
    if info.sampling == Sampling::Kernel && opts.stop.load(std::sync::atomic::Ordering::Relaxed) {
        if let Some(t) = clock.elapsed().filter(|t| *t > st.step) {
            st.sample(t, false)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;

mod grid;
mod pending;
use grid::{due, LIFECYCLE_EVERY};
use pending::{Pending, PmuLost};
