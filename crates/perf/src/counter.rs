//! Counter groups over perf_event_open (through perf-event2, whose types own the file
//! descriptors): per CPU, per cgroup on one CPU (PERF_FLAG_PID_CGROUP with the cgroup v2
//! directory), or per task; read as one group with time_enabled / time_running so counts can
//! be scaled when the PMU multiplexes.

use crate::format::Encoded;
use perf_event::{Builder, Counter, Group, ReadFormat};
use perf_event_open_sys::bindings::perf_event_attr;
use std::fs::File;
use std::io;

impl perf_event::events::Event for Encoded {
    fn update_attrs(self, attr: &mut perf_event_attr) {
        attr.type_ = self.type_;
        attr.config = self.config;
        attr.config1 = self.config1;
        attr.config2 = self.config2;
    }
}

/// What a group counts.
pub enum Target<'a> {
    /// Every task on one CPU.
    Cpu(usize),
    /// Tasks of one cgroup (its v2 directory, opened) while they run on one CPU.
    Cgroup { dir: &'a File, cpu: usize },
    /// One thread, on any CPU.
    Task(i32),
}

/// Counts scaled for multiplexing: `raw × enabled / running`, flagged when the PMU ran the
/// group for less than the whole time (the value is then an estimate).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Scaled {
    pub value: u64,
    pub multiplexed: bool,
}

/// Pure scaling of one count; `running == 0` (never scheduled) gives 0, flagged.
pub fn scale(raw: u64, enabled_ns: u64, running_ns: u64) -> Scaled {
    if running_ns == 0 {
        return Scaled { value: 0, multiplexed: enabled_ns > 0 };
    }
    if running_ns >= enabled_ns {
        return Scaled { value: raw, multiplexed: false };
    }
    let v = (u128::from(raw) * u128::from(enabled_ns) / u128::from(running_ns)).min(u128::from(u64::MAX)) as u64;
    Scaled { value: v, multiplexed: true }
}

/// One reading of a group: raw counts in event order, and the group's times.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GroupReading {
    pub raw: Vec<u64>,
    pub enabled_ns: u64,
    pub running_ns: u64,
}

impl GroupReading {
    pub fn scaled(&self) -> Vec<Scaled> {
        self.raw.iter().map(|&r| scale(r, self.enabled_ns, self.running_ns)).collect()
    }

    /// Counts since `prev` (same group), each scaled by this interval's own enabled/running
    /// ratio, so a multiplexed interval is flagged by itself.
    pub fn delta_since(&self, prev: &GroupReading) -> Vec<Scaled> {
        let en = self.enabled_ns.saturating_sub(prev.enabled_ns);
        let run = self.running_ns.saturating_sub(prev.running_ns);
        self.raw.iter().zip(&prev.raw).map(|(c, p)| scale(c.saturating_sub(*p), en, run)).collect()
    }
}

/// A perf group: the first event leads, one member per further event; closed on drop. (A
/// dummy leader would do for hardware events, but software clock events in a dummy-led
/// CPU-wide group read 0 on current kernels, so the first real event leads, as in perf stat.)
pub struct CounterGroup {
    group: Group,
    members: Vec<Counter>,
}

fn configure<'a>(b: &mut Builder<'a>, target: &Target<'a>) {
    b.include_kernel();
    match target {
        Target::Cpu(cpu) => {
            b.any_pid().one_cpu(*cpu);
        }
        Target::Cgroup { dir, cpu } => {
            b.observe_cgroup(dir).one_cpu(*cpu);
        }
        Target::Task(pid) => {
            b.observe_pid(*pid).any_cpu();
        }
    }
}

impl CounterGroup {
    /// Open and enable a group counting `events` for `target`.
    pub fn open<'a>(target: &Target<'a>, events: &[Encoded]) -> io::Result<CounterGroup> {
        let (first, rest) = events
            .split_first()
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "a group needs an event"))?;
        let mut lb: Builder<'a> = Builder::new(*first);
        lb.read_format(
            ReadFormat::GROUP | ReadFormat::ID | ReadFormat::TOTAL_TIME_ENABLED | ReadFormat::TOTAL_TIME_RUNNING,
        );
        configure(&mut lb, target);
        let mut group = lb.build_group()?;
        let mut members = Vec::with_capacity(rest.len());
        for e in rest {
            let mut b: Builder<'a> = Builder::new(*e);
            configure(&mut b, target);
            members.push(group.add(&b)?);
        }
        group.enable()?;
        Ok(CounterGroup { group, members })
    }

    pub fn read(&mut self) -> io::Result<GroupReading> {
        let data = self.group.as_counter_mut().read_group()?;
        let leader = data.get(self.group.as_counter()).map_or(0, |e| e.value());
        let raw =
            std::iter::once(leader).chain(self.members.iter().map(|m| data.get(m).map_or(0, |e| e.value()))).collect();
        Ok(GroupReading {
            raw,
            enabled_ns: data.time_enabled().map_or(0, |d| d.as_nanos() as u64),
            running_ns: data.time_running().map_or(0, |d| d.as_nanos() as u64),
        })
    }
}

/// Whether the PMU schedules a group of `events` on `cpu` beside its other users: the group is
/// opened and its time running read twice, `wait` apart. The kernel schedules a group whole or
/// not at all, and one it cannot hold (its other users pinned the counters it needs: the NMI
/// watchdog, a perf) is never scheduled after its first moments (Linux 6.1 with the watchdog
/// and two general counters: 72 µs of 40 ms), and no scaling recovers its counts. One that
/// only waits its turn (others rotate with it) runs within a few of the kernel's rotations,
/// which `wait` should cover.
pub fn group_fits(cpu: usize, events: &[Encoded], wait: std::time::Duration) -> io::Result<bool> {
    let mut g = CounterGroup::open(&Target::Cpu(cpu), events)?;
    std::thread::sleep(wait / 4);
    let first = g.read()?;
    std::thread::sleep(wait);
    Ok(g.read()?.running_ns > first.running_ns)
}

/// The busy-time event this host can count: hardware cycles where the kernel has a PMU
/// (probed by opening one on CPU 0), else software cpu-clock in ns (VMs without a PMU).
/// Returns the encoding and its unit, for saying which one the data holds.
pub fn cycles_or_cpu_clock() -> (Encoded, &'static str) {
    use crate::events::{PERF_TYPE_HARDWARE, PERF_TYPE_SOFTWARE, SW_CPU_CLOCK};
    let cycles = Encoded { type_: PERF_TYPE_HARDWARE, config: 0, ..Encoded::default() };
    if CounterGroup::open(&Target::Cpu(0), &[cycles]).is_ok() {
        (cycles, "cycles")
    } else {
        (Encoded { type_: PERF_TYPE_SOFTWARE, config: SW_CPU_CLOCK, ..Encoded::default() }, "cpu-clock ns")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scaling() {
        assert_eq!(scale(100, 10, 10), Scaled { value: 100, multiplexed: false });
        assert_eq!(scale(100, 10, 5), Scaled { value: 200, multiplexed: true });
        assert_eq!(scale(100, 0, 0), Scaled { value: 0, multiplexed: false });
        assert_eq!(scale(7, 10, 0), Scaled { value: 0, multiplexed: true });
        assert_eq!(scale(u64::MAX, 10, 1).value, u64::MAX, "saturates");
        let a = GroupReading { raw: vec![10, 20], enabled_ns: 100, running_ns: 100 };
        let b = GroupReading { raw: vec![30, 60], enabled_ns: 200, running_ns: 150 };
        assert_eq!(
            b.delta_since(&a),
            vec![Scaled { value: 40, multiplexed: true }, Scaled { value: 80, multiplexed: true }]
        );
    }
}
