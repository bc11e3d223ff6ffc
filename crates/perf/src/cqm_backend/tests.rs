//! The perf-cqm backend against a fake sysfs tree (as Linux 4.7 wrote it on a Broadwell-EP)
//! and fake perf events, driven through the engine's derivation.

use super::*;
use crate::cqm::discover;
use cachescope_engine::containers::Change;
use cachescope_engine::derive::Derive;
use cachescope_engine::PartResult;
use std::path::PathBuf;
use std::sync::Mutex;

fn tree() -> tempfile::TempDir {
    crate::cqm::fixtures::tree(crate::cqm::fixtures::GOOD)
}

/// Counter values by (cgroup dir, config, cpu); opens beyond `rmids` fail with ENOSPC, as the
/// kernel does when it has no RMID left for a new event.
#[derive(Clone, Default)]
struct Fake {
    values: Arc<Mutex<BTreeMap<Key, u64>>>,
    opened: Arc<Mutex<Vec<Opened>>>,
    rmids: usize,
}

/// (cgroup dir, config, cpu).
type Key = (PathBuf, u64, usize);
/// (cgroup dir, PMU type, config, cpu) of an event opened.
type Opened = (PathBuf, u32, u64, usize);

struct FakeCounter(Fake, Key);

impl CqmCounter for FakeCounter {
    fn read(&mut self) -> io::Result<u64> {
        Ok(self.0.values.lock().unwrap().get(&self.1).copied().unwrap_or(0))
    }
}

impl CqmOpener for Fake {
    fn open(&self, e: &CqmEvent, dir: &Path, cpu: usize) -> io::Result<Box<dyn CqmCounter>> {
        let mut o = self.opened.lock().unwrap();
        if o.len() >= self.rmids {
            return Err(io::Error::from_raw_os_error(libc::ENOSPC));
        }
        o.push((dir.to_path_buf(), e.encoded.type_, e.encoded.config, cpu));
        Ok(Box::new(FakeCounter(self.clone(), (dir.to_path_buf(), e.encoded.config, cpu))))
    }
}

struct NoSource;
impl ContainerSource for NoSource {
    fn poll(&mut self, _: Duration, _: &mut Vec<Change>) -> PartResult {
        Ok(())
    }
    fn describe(&self) -> String {
        String::new()
    }
}

fn info() -> BackendInfo {
    BackendInfo::new("perf-cqm", String::new(), None)
}

fn container(id: &str, dir: Option<&str>) -> Container {
    Container { meta: ContainerMeta::named(id), dir: dir.map(PathBuf::from), ..Default::default() }
}

#[test]
fn cgroup_events_on_the_sysfs_type_and_config_scaled_to_bytes() {
    let sys = tree();
    let pmu = discover(sys.path()).unwrap();
    let fake = Fake { rmids: 6, ..Fake::default() };
    let domains = vec![(0, vec![0, 1]), (1, vec![2, 3])];
    let mut b = CqmBackend::new(pmu, fake.clone(), &domains, info());
    let i = b.info().clone();
    assert_eq!((i.domains.clone(), i.sampling, i.mbm_unit, i.upscale), (vec![0, 1], Sampling::Tick, 64, 65536));
    // A container known only by name has no cgroup to count.
    assert_eq!(
        b.attach(&container("x", None), &NoSource, Duration::ZERO).unwrap(),
        Attach::Waiting(WaitReason::CannotTag)
    );
    let web = "/sys/fs/cgroup/web";
    assert_eq!(
        b.attach(&container("web", Some(web)), &NoSource, Duration::ZERO).unwrap(),
        Attach::Monitored { rmid: None }
    );
    // Three events on one CPU of each domain, on the PMU's type with the configs sysfs gave.
    let opened = fake.opened.lock().unwrap().clone();
    let want: Vec<Opened> = [(1, 0), (3, 0), (2, 0), (1, 2), (3, 2), (2, 2)]
        .iter()
        .map(|&(c, cpu)| (PathBuf::from(web), 9, c, cpu))
        .collect();
    assert_eq!(opened, want);
    // The kernel has no RMID for a second container's events.
    assert_eq!(
        b.attach(&container("db", Some("/sys/fs/cgroup/db")), &NoSource, Duration::ZERO).unwrap(),
        Attach::Waiting(WaitReason::Exhausted)
    );
    let set = |config: u64, cpu: usize, v: u64| {
        fake.values.lock().unwrap().insert((PathBuf::from(web), config, cpu), v);
    };
    let mut derive = Derive::new(i.mbm_width, i.mbm_unit, 0);
    let mut raw = Vec::new();
    let mut rows = |b: &mut CqmBackend<Fake>, ms: u64| {
        b.collect(Duration::from_millis(ms), cachescope_engine::Read::All, &mut raw).unwrap();
        raw.drain(..).map(|s| derive.row(s, Duration::ZERO)).collect::<Vec<_>>()
    };
    set(1, 0, 100);
    set(2, 0, 1_000);
    set(3, 0, 400);
    let first = rows(&mut b, 100);
    assert_eq!(first.len(), 2, "one row per domain");
    assert_eq!(first[0].llc_occupancy_bytes, Some(100 * 65536));
    assert_eq!(first[0].mbm_total_bytes, None, "no baseline yet");
    set(2, 0, 2_500);
    set(3, 0, 1_000);
    let second = rows(&mut b, 200);
    // 1,500 counts of 6.103515625e-5 MiB = 64 bytes each.
    assert_eq!((second[0].mbm_total_bytes, second[0].mbm_local_bytes), (Some(96_000), Some(38_400)));
    assert_eq!((second[1].domain, second[1].mbm_total_bytes, second[1].llc_occupancy_bytes), (1, Some(0), Some(0)));
    assert!(second.iter().all(|r| r.status == Status::Ok && r.rmid.is_none()));
    b.detach("web", Duration::from_millis(300)).unwrap();
    assert!(rows(&mut b, 300).is_empty());
    assert_eq!(b.slots().in_use, 0);
}
