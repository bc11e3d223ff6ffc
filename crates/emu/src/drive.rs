//! The emulated platform as parts of the engine's run: the scenario's containers on their
//! schedule ([`ScenarioContainers`]), and the platform's time as the run's world, advanced by
//! the scenario ([`ScenarioWorld`]) or by what real containers were measured to do
//! ([`DrivenWorld`]).

use crate::{EmuPlatform, Scenario};
use cachescope_engine::containers::{Change, Container, ContainerSource};
use cachescope_engine::pmu::Ran;
use cachescope_engine::world::World;
use cachescope_engine::ContainerMeta;
use cachescope_engine::PartResult;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// Scenario containers, known by their name (docs/scenario.md), started and stopped on the
/// scenario's schedule in the run's time.
pub struct ScenarioContainers {
    /// (name, start, stop), and the starts and stops in time order: a poll costs the changes
    /// due, not a walk of every container (thousands are polled every millisecond).
    schedule: Vec<(String, Duration, Option<Duration>)>,
    starts: Vec<usize>,
    stops: Vec<usize>,
    next_start: usize,
    next_stop: usize,
    running: Vec<bool>,
}

impl ScenarioContainers {
    pub fn new(s: &Scenario) -> ScenarioContainers {
        let schedule: Vec<(String, Duration, Option<Duration>)> = s
            .containers
            .iter()
            .map(|c| (c.name.clone(), Duration::from_millis(c.start_ms), c.stop_ms.map(Duration::from_millis)))
            .collect();
        let mut starts: Vec<usize> = (0..schedule.len()).collect();
        starts.sort_by_key(|&i| (schedule[i].1, i));
        let mut stops: Vec<usize> = (0..schedule.len()).filter(|&i| schedule[i].2.is_some()).collect();
        stops.sort_by_key(|&i| (schedule[i].2, i));
        let running = vec![false; schedule.len()];
        ScenarioContainers { schedule, starts, stops, next_start: 0, next_stop: 0, running }
    }
}

impl ContainerSource for ScenarioContainers {
    fn poll(&mut self, now: Duration, out: &mut Vec<Change>) -> PartResult {
        // Stops first: a name that stops and another that starts in one poll are two changes;
        // a container whose whole life falls between two polls never runs.
        while let Some(&i) = self.stops.get(self.next_stop) {
            if self.schedule[i].2.is_none_or(|s| s > now) {
                break;
            }
            self.next_stop += 1;
            if std::mem::take(&mut self.running[i]) {
                out.push(Change::Stopped(self.schedule[i].0.clone(), None));
            }
        }
        while let Some(&i) = self.starts.get(self.next_start) {
            let (name, start, stop) = &self.schedule[i];
            if *start > now {
                break;
            }
            self.next_start += 1;
            if stop.is_none_or(|s| s > now) {
                self.running[i] = true;
                out.push(Change::Started(Container { meta: ContainerMeta::named(name), ..Default::default() }));
            }
        }
        Ok(())
    }

    fn describe(&self) -> String {
        format!("{} scenario containers", self.schedule.len())
    }
}

/// The platform's time follows the run; the scenario says what each container does.
pub struct ScenarioWorld(pub Arc<EmuPlatform>);

impl World for ScenarioWorld {
    fn advance(&mut self, to: Duration, _: &[Ran]) {
        self.0.advance_to(to);
    }

    fn describe(&self) -> String {
        "the scenario".into()
    }
}

/// Bytes of memory traffic per CPU-second of a container where no LLC-miss counter exists:
/// a round figure between an idle loop (~0) and a streaming core (~10 GB/s), said in the data.
pub const BYTES_PER_CPU_SECOND: f64 = 1e9;
/// An LLC miss moves one cache line.
const LINE_BYTES: f64 = 64.0;

/// This host's real containers drive the emulated cache: the traffic measured for each over a
/// step (LLC misses × 64 B where misses are counted, CPU time × [`BYTES_PER_CPU_SECOND`]
/// where not) becomes its traffic in the emulated domain over the same step.
pub struct DrivenWorld {
    emu: Arc<EmuPlatform>,
    /// Emulated domains, in the order the measured domains map to (index = emulated domain).
    domains: Vec<u32>,
    misses: bool,
    /// Followed containers and the rate last set for each emulated domain: only a change is
    /// passed on (of 1,000 containers most are idle, and each call takes the platform's lock).
    followed: BTreeMap<String, Vec<f64>>,
    /// The followed containers whose rate is not 0 in some domain.
    moving: std::collections::BTreeSet<String>,
    last: Duration,
}

impl DrivenWorld {
    /// `domains`: the domain ids the PMU source reports, one per emulated domain (index);
    /// `misses`: whether LLC misses are counted (else CPU time stands in).
    pub fn new(emu: Arc<EmuPlatform>, domains: Vec<u32>, misses: bool) -> DrivenWorld {
        DrivenWorld {
            emu,
            domains,
            misses,
            followed: BTreeMap::new(),
            moving: Default::default(),
            last: Duration::ZERO,
        }
    }

    /// What drives it, in words (header, stderr, file metadata).
    pub fn driver(misses: bool) -> String {
        if misses {
            "each container's measured LLC misses × 64 B".to_string()
        } else {
            format!(
                "each container's measured CPU time × {:.0} GB/s (no LLC-miss counter here)",
                BYTES_PER_CPU_SECOND / 1e9
            )
        }
    }
}

impl World for DrivenWorld {
    fn started(&mut self, c: &Container) {
        if self.emu.add_driven(c.id()) {
            // The platform starts a driven container at 0 B/s in every domain.
            self.followed.insert(c.id().to_string(), vec![0.0; self.domains.len()]);
        }
    }

    fn stopped(&mut self, id: &str) {
        self.moving.remove(id);
        if self.followed.remove(id).is_some() {
            self.emu.stop_driven(id);
        }
    }

    fn advance(&mut self, to: Duration, ran: &[Ran]) {
        let secs = to.saturating_sub(self.last).as_secs_f64().max(1e-6);
        // This step's rate of each container that ran, per emulated domain; every other
        // container moved nothing. Only what changed is passed on: the work follows the
        // containers that ran, and those that stopped running (`moving`), not all followed.
        let mut now: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
        for r in ran {
            let Some(i) = self.domains.iter().position(|&d| d == r.domain) else { continue };
            if !self.followed.contains_key(&*r.id) {
                continue;
            }
            let bytes = if self.misses {
                r.totals.values[3] as f64 * LINE_BYTES
            } else {
                r.totals.cpu_ns as f64 / 1e9 * BYTES_PER_CPU_SECOND
            };
            now.entry(&*r.id).or_insert_with(|| vec![0.0; self.domains.len()])[i] += bytes / secs;
        }
        let mut changed = Vec::new();
        let zero = vec![0.0; self.domains.len()];
        let mut moving = std::mem::take(&mut self.moving);
        for id in moving.iter().map(String::as_str).filter(|id| !now.contains_key(id)).chain(now.keys().copied()) {
            let Some(set) = self.followed.get_mut(id) else { continue };
            let rates = now.get(id).unwrap_or(&zero);
            for (i, (set, &rate)) in set.iter_mut().zip(rates).enumerate() {
                if rate != *set {
                    *set = rate;
                    changed.push((id, i as u32, rate));
                }
            }
        }
        self.emu.set_rates(&changed);
        drop(changed);
        moving.retain(|id| now.contains_key(id.as_str()));
        for id in now.keys() {
            if !moving.contains(*id) {
                moving.insert(id.to_string());
            }
        }
        self.moving = moving;
        self.emu.advance_to(to);
        self.last = to;
    }

    fn describe(&self) -> String {
        Self::driver(self.misses)
    }
}
