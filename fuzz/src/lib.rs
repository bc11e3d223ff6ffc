//! The bodies of the fuzz targets: every parser of input from outside the process, driven as
//! far into the program as that input reaches. Any panic, abort, hang or unbounded allocation
//! is a finding; refusals (an `Err`) are the expected outcome for most inputs.

use cachescope_cgroups::identity::{identify, Glob};
use cachescope_cmt::{Caps, MsrBackend};
use cachescope_emu::{EmuPlatform, Scenario};
use cachescope_engine::backend::{BackendInfo, CacheBackend, Sampling};
use cachescope_engine::containers::{Container, ContainerSource};
use cachescope_engine::ContainerMeta;
use cachescope_hw::CpuInfo;
use cachescope_platform::RecordedVector;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// A scratch path of this process (fuzzers run one input at a time per process).
fn scratch(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("cachescope-fuzz-{}-{name}", std::process::id()))
}

struct NoSource;

impl ContainerSource for NoSource {
    fn poll(&mut self, _: Duration, _: &mut Vec<cachescope_engine::containers::Change>) -> cachescope_engine::PartResult {
        Ok(())
    }
    fn describe(&self) -> String {
        String::new()
    }
}

/// A platform's emulated MSR backend, one tagged container attached and read: every size the
/// platform took from its CPUID must be bounded.
fn exercise_platform(p: EmuPlatform) {
    let p = Arc::new(p);
    let Some(max_rmid) = p.cpu_info().monitoring.max_rmid_any else { return };
    let caps = Caps::from_l3(p.l3(), max_rmid);
    let cfg = cachescope_rmid::Config::with_default_threshold(caps.max_rmid, p.l3_bytes(), Duration::ZERO);
    let info = BackendInfo {
        label: "fuzz".into(),
        cpuid: String::new(),
        domains: Vec::new(),
        upscale: 0,
        l3_bytes: Some(p.l3_bytes()),
        mbm_width: 0,
        mbm_unit: 0,
        mbm_correction: None,
        sampling: Sampling::Virtual,
        emulated: None,
        upkeep_every: Duration::from_millis(10),
        moves_without_tasks: false,
        metadata: Vec::new(),
    };
    let mut b = MsrBackend::new(p.clone(), caps, &p.domains(), cfg, None, info);
    let c = Container { meta: ContainerMeta::named("c"), cpus: Some(vec![0]), ..Default::default() };
    if b.attach(&c, &NoSource, Duration::ZERO).is_err() {
        return;
    }
    p.advance(Duration::from_millis(2));
    let mut raw = Vec::new();
    let _ = b.collect(Duration::from_millis(2), cachescope_engine::Read::All, &mut raw);
    let _ = b.upkeep(Duration::from_millis(2), &NoSource);
    let _ = b.shutdown();
}

/// A CPUID vector file (`--emulate FILE`, `info --cpuid FILE`): parsed, decoded, and where it
/// enumerates L3 monitoring, an emulated platform and its backend built on it.
pub fn cpuid_vector(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let Ok(v) = RecordedVector::parse(text, Path::new("fuzz.json")) else { return };
    let info = CpuInfo::decode(&v.snapshot());
    let _ = info.summary();
    if info.l3_monitoring_absence().is_some() {
        return;
    }
    let path = scratch("vector.json");
    if std::fs::write(&path, data).is_err() {
        return;
    }
    let scenario =
        format!("[platform]\nmodel = {:?}\nl3_mib = 32\ndomains = 2\ncpus_per_domain = 2\n", path.to_string_lossy());
    if let Ok(s) = Scenario::parse(&scenario, Path::new("fuzz.toml")) {
        if let Ok(p) = EmuPlatform::new(&s) {
            exercise_platform(p);
        }
    }
    let _ = std::fs::remove_file(&path);
}

/// A scenario file (`--scenario`): parsed, and where valid, its platform built and run.
pub fn scenario(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let Ok(s) = Scenario::parse(text, Path::new("fuzz.toml")) else { return };
    // Models from files are another target's input; embedded ones only here.
    if !cachescope_emu::model_names().contains(&s.platform.model.as_str()) {
        return;
    }
    if let Ok(p) = EmuPlatform::new(&s) {
        exercise_platform(p);
    }
}

/// Cgroup paths and `--containers` globs: the first line is the glob list (`,`-separated),
/// the rest are paths; any bytes (a cgroup name need not be UTF-8).
pub fn cgroup_path(data: &[u8]) {
    use std::os::unix::ffi::OsStrExt;
    let mut lines = data.split(|&b| b == b'\n');
    let globs: Vec<Glob> = lines
        .next()
        .map(|l| String::from_utf8_lossy(l).split(',').filter_map(|g| Glob::new(g).ok()).collect())
        .unwrap_or_default();
    for l in lines {
        let text = cachescope_cgroups::path_text(Path::new(std::ffi::OsStr::from_bytes(l)));
        if let Some(id) = identify(&text, &globs) {
            // Every id is safe as a path component (a resctrl group name, a file name).
            assert!(!id.id.is_empty() && !id.id.contains('/') && id.id != "." && id.id != "..", "{id:?}");
            assert!(id.id.len() <= cachescope_cgroups::identity::MAX_ID_LEN, "{id:?}");
        }
        for g in &globs {
            let _ = g.matches(&text);
        }
    }
}

/// What the kernel's files say, as a hostile or broken kernel (or FUSE server) could say it:
/// resctrl's info and mon_data (the input's NUL-separated parts become the files of a resctrl
/// tree), a counter value, mountinfo and CPU lists.
pub fn kernel_text(data: &[u8]) {
    let parts: Vec<&[u8]> = data.split(|&b| b == 0).collect();
    let part = |i: usize| parts.get(i).copied().unwrap_or_default();
    let _ = cachescope_resctrl::Value::parse(part(0));
    let text = String::from_utf8_lossy(data);
    let _ = cachescope_platform::mountinfo::parse(&text);
    let _ = cachescope_hw::cpulist::parse(&text);
    let _ = cachescope_platform::topology::parse_size(&text);
    let root = scratch("resctrl");
    let _ = std::fs::remove_dir_all(&root);
    let mon = root.join("info/L3_MON");
    if std::fs::create_dir_all(&mon).is_err() || std::fs::create_dir_all(root.join("mon_data")).is_err() {
        return;
    }
    let files = ["num_rmids", "mon_features", "max_threshold_occupancy", "mbm_assign_mode", "num_mbm_cntrs"];
    for (i, f) in files.iter().enumerate() {
        if let Some(p) = parts.get(i + 1) {
            let _ = std::fs::write(mon.join(f), p);
        }
    }
    // Domain directories, named by the next part's lines (as `mon_L3_NN` would be).
    for name in String::from_utf8_lossy(part(6)).lines().take(64) {
        if !name.is_empty() && !name.contains('/') && name != "." && name != ".." {
            let _ = std::fs::create_dir_all(root.join("mon_data").join(name).join("mon_sub_L3_01"));
        }
    }
    let rc = cachescope_resctrl::Resctrl::at(&root);
    let _ = rc.info();
    let _ = rc.domains();
    for name in String::from_utf8_lossy(part(7)).lines() {
        let _ = cachescope_resctrl::id_of_group(name);
    }
    let _ = std::fs::remove_dir_all(&root);
}

/// A file given to `report`: any bytes, as a `.parquet` file.
pub fn report_parquet(data: &[u8]) {
    let path = scratch("in.parquet");
    if std::fs::write(&path, data).is_err() {
        return;
    }
    let _ = cachescope_report::summary::summarize(std::slice::from_ref(&path));
    // The whole report: the runs pass (metadata and time columns), then every row.
    let _ = cachescope_report::analyze_files(std::slice::from_ref(&path));
    let _ = cachescope_sinks::read::file_metadata(&path);
    let _ = std::fs::remove_file(&path);
}

/// A request head as a client sends it to /metrics: where it ends and what it asks for, for
/// every prefix the server might have read when it looked.
pub fn http_head(data: &[u8]) {
    for cut in [data.len() / 3, data.len() / 2, data.len()] {
        let part = &data[..cut];
        if let Some(end) = cachescope_sinks::http::head_end(part, 0) {
            assert!(end <= part.len(), "a head ends inside what was read");
            let _ = cachescope_sinks::http::route(&part[..end]);
        }
    }
    let _ = cachescope_sinks::http::route(data);
}

/// What the kernel module's device gives user space: any bytes, read as its records, through
/// the kmod backend (against a module faked in user space) and the engine's derivation, for
/// three attached containers. The first byte sets the counter width; records are pointed at
/// the attached cgroups and the two domains unless its top bit is set.
pub fn kmod_records(data: &[u8]) {
    use cachescope_kmod::abi::{Record, RECORD_SIZE};
    use cachescope_kmod::fake::FakeKernel;
    let Some((&params, rest)) = data.split_first() else { return };
    let k = FakeKernel::new(&[0, 1], 8, 24 + u32::from(params & 0x1f), 64);
    let Ok(mut b) = cachescope_kmod::KmodBackend::new(Box::new(k.clone()), &cachescope_kmod::rules(&[]), String::new())
    else {
        return;
    };
    b.origin(Duration::ZERO);
    let (width, unit) = (b.info().mbm_width, b.info().mbm_unit);
    let mut derive = cachescope_engine::derive::Derive::new(width, unit, 0);
    for cgid in 1..=3u64 {
        let c = Container {
            meta: ContainerMeta::named(&format!("c{cgid}")),
            cgroup_id: Some(cgid),
            dir: Some(PathBuf::from(format!("/sys/fs/cgroup/c{cgid}"))),
            cpus: None,
            seen_at: None,
        };
        let _ = b.attach(&c, &NoSource, Duration::ZERO);
    }
    let mut raw = Vec::new();
    let mut drain = |b: &mut cachescope_kmod::KmodBackend, step: u64| {
        raw.clear();
        if b.collect(Duration::from_millis(step), cachescope_engine::Read::All, &mut raw).is_ok() {
            for s in raw.drain(..) {
                let _ = derive.row(s, Duration::from_millis(1));
            }
        }
    };
    for (i, chunk) in rest.chunks_exact(RECORD_SIZE).enumerate() {
        let Ok(bytes) = <&[u8; RECORD_SIZE]>::try_from(chunk) else { continue };
        let mut r = Record::parse(bytes);
        if params & 0x80 == 0 {
            r.cgroup_id = 1 + r.cgroup_id % 4;
            r.domain %= 2;
        }
        k.push(r);
        if i % 8 == 7 {
            drain(&mut b, i as u64);
        }
    }
    drain(&mut b, u64::MAX / 2);
}

/// A recording a crash left (its partial file and journal, 4 row groups of 3 rows), made
/// once per process, and the (time, container) of every row in it.
fn crashed_recording() -> Option<&'static (Vec<u8>, Vec<u8>, std::collections::BTreeSet<(i64, String)>)> {
    use cachescope_engine::row::{Pmu, Row, Status};
    use cachescope_sinks::parquet::{Options, ParquetSink};
    static MADE: std::sync::OnceLock<Option<(Vec<u8>, Vec<u8>, std::collections::BTreeSet<(i64, String)>)>> =
        std::sync::OnceLock::new();
    MADE.get_or_init(|| {
        let dir = scratch("recording");
        let _ = std::fs::remove_dir_all(&dir);
        let mut sink = ParquetSink::new(Options::new(dir.clone(), "fuzz".into())).ok()?;
        let mut keys = std::collections::BTreeSet::new();
        for t in 1..=4i64 {
            let rows: Vec<Row> = (0..3)
                .map(|c| Row {
                    time_ns: 1_700_000_000_000_000_000 + t * 1_000_000,
                    interval_ns: 1_000_000,
                    container: ContainerMeta::named(&format!("c{c}")),
                    domain: 0,
                    rmid: Some(c),
                    llc_occupancy_bytes: Some(u64::from(c) << 16),
                    mbm_total_bytes: Some(64),
                    mbm_local_bytes: None,
                    pmu: Pmu::default(),
                    cpu_ns: None,
                    status: Status::Ok,
                    mbm_counter: None,
                })
                .collect();
            keys.extend(rows.iter().map(|r| (r.time_ns, r.container.id.clone())));
            sink.push(rows);
            sink.flush(std::time::Instant::now()).ok()?;
        }
        // A crash: dropped unfinished (the sink writes a footer only when closed), the files
        // as they are.
        drop(sink);
        let partial = std::fs::read_dir(&dir).ok()?.flatten().map(|e| e.path()).find(|p| {
            p.to_string_lossy().ends_with(".parquet.partial")
        })?;
        let mut journal = partial.clone().into_os_string();
        journal.push(".footer");
        let out = (std::fs::read(&partial).ok()?, std::fs::read(journal).ok()?, keys);
        let _ = std::fs::remove_dir_all(&dir);
        Some(out)
    })
    .as_ref()
}

/// Recovery after a crash, of a partial file and journal damaged as the input says: 6 bytes
/// per change (which file and how: cut, flip or insert; a byte; where). Whatever the damage,
/// recovery must not fail on it, and every row a recovered file gives must be one that was
/// recorded.
pub fn recover(data: &[u8]) {
    let Some((d, j, keys)) = crashed_recording() else { return };
    let (mut d, mut j) = (d.clone(), j.clone());
    for op in data.chunks_exact(6) {
        let f = if op[0] & 1 == 0 { &mut d } else { &mut j };
        let at = u32::from_le_bytes([op[2], op[3], op[4], op[5]]) as usize % (f.len() + 1);
        match (op[0] >> 1) & 3 {
            0 => f.truncate(at),
            3 => f.insert(at, op[1]),
            _ if at < f.len() => f[at] ^= op[1] | 1,
            _ => {}
        }
    }
    // On tmpfs where there is one: recovery syncs, and a disk's syncs would cost most runs.
    let shm = Path::new("/dev/shm");
    let dir = if shm.is_dir() { shm.join(format!("cachescope-fuzz-{}-recover", std::process::id())) } else { scratch("recover") };
    let _ = std::fs::remove_dir_all(&dir);
    if std::fs::create_dir_all(&dir).is_err() {
        return;
    }
    let partial = dir.join("cachescope-fuzz-20260101T000000Z-1-0001.parquet.partial");
    let mut journal = partial.clone().into_os_string();
    journal.push(".footer");
    if std::fs::write(&partial, &d).is_err() || std::fs::write(&journal, &j).is_err() {
        return;
    }
    let got = cachescope_sinks::parquet::recover_dir(&dir).expect("recovery of a damaged file fails only on I/O");
    for r in got {
        if let cachescope_sinks::parquet::Recovery::Recovered { path, rows, .. } = r {
            let mut seen = 0;
            cachescope_sinks::read::stream(std::slice::from_ref(&path), &mut |id, _, p| {
                assert!(keys.contains(&(p.time_ns, id.to_string())), "a row that was never recorded: {id} {}", p.time_ns);
                assert_eq!(p.mbm_total, Some(64), "a value that was never recorded");
                seen += 1;
            })
            .expect("a recovered file reads");
            assert_eq!(seen, rows, "the rows recovery counted are the rows read");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}
