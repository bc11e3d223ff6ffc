#![allow(clippy::unwrap_used)]
//! The emulated kernel semantics, without FUSE (the FUSE path is tested from the client crate).

use super::*;
use cachescope_emu::Scenario;
use std::path::Path;

const SCENARIO: &str = include_str!("../../../testdata/scenarios/thrash-then-stream.toml");

fn state(opts: Options) -> (State, Arc<EmuPlatform>) {
    let sc = Scenario::parse(SCENARIO, Path::new("t.toml")).unwrap();
    let p = Arc::new(EmuPlatform::new(&sc).unwrap());
    let resolver: TaskResolver = Box::new(|tid| match tid {
        100 => TaskLookup::Exists(Some("thrash".into())),
        101..=199 => TaskLookup::Exists(None),
        _ => TaskLookup::Missing,
    });
    (State::new(p.clone(), Options { wall_clock: false, min_limbo: Duration::ZERO, ..opts }, resolver).unwrap(), p)
}

fn path_ino(st: &State, path: &str) -> u64 {
    let mut ino = state::ROOT_INO;
    for part in path.split('/').filter(|p| !p.is_empty()) {
        ino = st.lookup(ino, part).unwrap_or_else(|| panic!("no {path}")).0;
    }
    ino
}

fn read(st: &mut State, path: &str) -> String {
    let ino = path_ino(st, path);
    st.read_file(ino).unwrap()
}

#[test]
fn tree_and_info() {
    let (mut st, _) = state(Options { domain_ids: Some(vec![0, 3]), ..Options::default() });
    assert_eq!(read(&mut st, "info/L3_MON/num_rmids"), "192\n"); // 8160: max RMID 191
    assert_eq!(read(&mut st, "info/L3_MON/mon_features"), "llc_occupancy\nmbm_total_bytes\nmbm_local_bytes\n");
    let names: Vec<String> = st.children(path_ino(&st, "mon_data")).into_iter().map(|c| c.2).collect();
    assert_eq!(names, vec!["mon_L3_00", "mon_L3_03"]);
    assert_eq!(read(&mut st, "info/last_cmd_status"), "ok\n");
    assert_eq!(read(&mut st, "cpus_list"), "0-3\n");
    assert_eq!(read(&mut st, "cpus"), "f\n");
}

#[test]
fn mkdir_tasks_reads_rmdir() {
    let (mut st, p) = state(Options::default());
    let mg = path_ino(&st, "mon_groups");
    st.mkdir(mg, "g").unwrap();
    assert_eq!(st.mkdir(mg, "g"), Err(libc::EEXIST));
    let tasks = path_ino(&st, "mon_groups/g/tasks");
    assert_eq!(st.write_file(tasks, b"100\n", 1), Ok(()));
    assert_eq!(st.write_file(tasks, b"999\n", 1), Err(libc::ESRCH));
    assert_eq!(read(&mut st, "info/last_cmd_status"), "No task 999\n");
    assert_eq!(st.write_file(tasks, b"abc\n", 1), Err(libc::EINVAL));
    assert_eq!(st.write_file(tasks, b"101,102\n", 1), Ok(()), "comma lists as newer kernels");
    assert_eq!(read(&mut st, "mon_groups/g/tasks"), "100\n101\n102\n");
    p.advance(Duration::from_secs(2));
    let occ: u64 = read(&mut st, "mon_groups/g/mon_data/mon_L3_00/llc_occupancy").trim().parse().unwrap();
    assert!(occ > 20 << 20, "thrash's 24 MiB lands on its group: {occ}");
    let tot: u64 = read(&mut st, "mon_groups/g/mon_data/mon_L3_00/mbm_total_bytes").trim().parse().unwrap();
    // 4000 MB/s for 2 s, counted from the group's creation.
    assert!((tot as f64 - 8e9).abs() < 8e9 * 0.01, "{tot}");
    assert_eq!(read(&mut st, "mon_groups/g/mon_data/mon_L3_01/llc_occupancy"), "Unavailable\n", "never ran there");
    // Not a group: EPERM, as the kernel.
    assert_eq!(st.rmdir(path_ino(&st, "mon_groups/g"), "mon_data"), Err(libc::EPERM));
    st.rmdir(mg, "g").unwrap();
    assert!(st.lookup(mg, "g").is_none());
    assert_eq!(st.rmid_counts(), (0, 1), "freed RMID is in limbo");
}

#[test]
fn exhaustion_then_limbo_then_recovery() {
    let (mut st, p) = state(Options::default());
    let mg = path_ino(&st, "mon_groups");
    let n = 191; // RMIDs 1..=191
    for i in 0..n {
        st.mkdir(mg, &format!("g{i}")).unwrap();
    }
    assert_eq!(st.mkdir(mg, "extra"), Err(libc::ENOSPC));
    assert!(read(&mut st, "info/last_cmd_status").starts_with("Out of RMIDs"));
    // g0 holds the thrashing workload's lines; freeing it leaves a dirty RMID in limbo.
    st.write_file(path_ino(&st, "mon_groups/g0/tasks"), b"100", 1).unwrap();
    p.advance(Duration::from_secs(1));
    st.rmdir(mg, "g0").unwrap();
    assert_eq!(st.mkdir(mg, "extra"), Err(libc::EBUSY), "only limbo left");
    // The workload keeps running untagged (RMID 0) and its lines tagged g0 stay resident,
    // as on hardware: a hit does not re-tag a line. Only the streaming workload (from 3 s)
    // evicts them.
    p.advance(Duration::from_millis(1500));
    assert_eq!(st.mkdir(mg, "extra"), Err(libc::EBUSY), "still dirty before anyone evicts");
    let mut ok = false;
    for _ in 0..100 {
        p.advance(Duration::from_millis(100));
        if st.mkdir(mg, "extra").is_ok() {
            ok = true;
            break;
        }
    }
    assert!(ok, "RMID left limbo once its occupancy decayed");
}

#[test]
fn snc_shares_sum_to_the_domain() {
    let (mut st, p) = state(Options { snc: 2, ..Options::default() });
    let mg = path_ino(&st, "mon_groups");
    st.mkdir(mg, "g").unwrap();
    st.write_file(path_ino(&st, "mon_groups/g/tasks"), b"100", 1).unwrap();
    p.advance(Duration::from_millis(500));
    let v = |st: &mut State, f: &str| -> u64 { read(st, f).trim().parse().unwrap() };
    let all = v(&mut st, "mon_groups/g/mon_data/mon_L3_00/mbm_total_bytes");
    let a = v(&mut st, "mon_groups/g/mon_data/mon_L3_00/mon_sub_L3_00/mbm_total_bytes");
    let b = v(&mut st, "mon_groups/g/mon_data/mon_L3_00/mon_sub_L3_01/mbm_total_bytes");
    assert!(all > 0 && a + b == all, "{a} + {b} != {all}");
    assert!(st.lookup(path_ino(&st, "mon_data/mon_L3_01"), "mon_sub_L3_03").is_some());
}

#[test]
fn assignable_counters_and_faults() {
    let (mut st, _) = state(Options { mbm_counters: Some(4), ..Options::default() });
    let mg = path_ino(&st, "mon_groups");
    for g in ["a", "b", "c"] {
        st.mkdir(mg, g).unwrap();
    }
    assert_eq!(read(&mut st, "info/L3_MON/mbm_assign_mode"), "[mbm_event]\ndefault\n");
    assert_eq!(read(&mut st, "info/L3_MON/available_mbm_cntrs"), "0=0;1=0\n");
    assert_eq!(read(&mut st, "mon_groups/c/mon_data/mon_L3_00/mbm_total_bytes"), "Unassigned\n");
    assert_ne!(read(&mut st, "mon_groups/a/mon_data/mon_L3_00/mbm_total_bytes"), "Unassigned\n");
    st.inject("mon_groups/a", 1, Some(Fault::Error));
    assert_eq!(read(&mut st, "mon_groups/a/mon_data/mon_L3_01/llc_occupancy"), "Error\n");
    st.inject("mon_groups/a", 1, None);
    assert_ne!(read(&mut st, "mon_groups/a/mon_data/mon_L3_01/llc_occupancy"), "Error\n");
    st.rmdir(mg, "a").unwrap();
    assert_eq!(read(&mut st, "info/L3_MON/available_mbm_cntrs"), "0=2;1=2\n");
}

#[test]
fn ctrl_mon_groups_and_task_rules() {
    let (mut st, _) = state(Options::default());
    st.mkdir(state::ROOT_INO, "gold").unwrap();
    let gold_mg = path_ino(&st, "gold/mon_groups");
    st.mkdir(gold_mg, "m").unwrap();
    st.mkdir(path_ino(&st, "mon_groups"), "n").unwrap();
    // A task in the default group cannot join a MON group of another CTRL_MON group.
    assert_eq!(st.write_file(path_ino(&st, "gold/mon_groups/m/tasks"), b"101", 1), Err(libc::EINVAL));
    assert_eq!(read(&mut st, "info/last_cmd_status"), "Can't move task to different control group\n");
    st.write_file(path_ino(&st, "gold/tasks"), b"101", 1).unwrap();
    st.write_file(path_ino(&st, "gold/mon_groups/m/tasks"), b"101", 1).unwrap();
    assert_eq!(read(&mut st, "gold/mon_groups/m/tasks"), "101\n");
    assert_eq!(read(&mut st, "gold/tasks"), "101\n", "a CTRL_MON group lists its MON groups' tasks");
    assert_eq!(st.mkdir(path_ino(&st, "info"), "x"), Err(libc::EPERM));
    // Removing the CTRL_MON group takes its MON groups along and frees both RMIDs.
    st.rmdir(state::ROOT_INO, "gold").unwrap();
    assert!(st.lookup(state::ROOT_INO, "gold").is_none());
    assert_eq!(st.rmid_counts(), (1, 2));
    // 101 is back in the default group, whose tasks file lists nothing here (the kernel
    // lists every thread of the host).
    assert_eq!(read(&mut st, "tasks"), "");
}
