#![allow(clippy::unwrap_used)]
//! Tier 2: the client against fake resctrl trees in a tempdir (plain files and directories).

use super::*;
use std::fs;

fn tree(files: &[(&str, &str)]) -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    for (p, text) in files {
        let p = d.path().join(p);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, text).unwrap();
    }
    d
}

const BASE: &[(&str, &str)] = &[
    ("info/L3_MON/num_rmids", "256\n"),
    ("info/L3_MON/mon_features", "llc_occupancy\nmbm_total_bytes\nmbm_local_bytes\n"),
    ("info/L3_MON/max_threshold_occupancy", "147456\n"),
    ("info/last_cmd_status", "ok\n"),
    ("mon_data/mon_L3_00/llc_occupancy", "1\n"),
    ("mon_data/mon_L3_02/llc_occupancy", "2\n"),
];

#[test]
fn info_and_domains_with_gaps() {
    let d = tree(BASE);
    let rc = Resctrl::at(d.path());
    let info = rc.info().unwrap();
    assert_eq!(info.num_rmids, 256);
    assert_eq!(info.max_threshold_occupancy, Some(147456));
    assert_eq!(info.events(), vec![Event::L3Occupancy, Event::MbmTotal, Event::MbmLocal]);
    assert_eq!(info.assign, None);
    let doms = rc.domains().unwrap();
    assert_eq!(doms, vec![Domain { id: 0, sub: vec![] }, Domain { id: 2, sub: vec![] }]);
}

#[test]
fn snc_sub_domains_and_assignable_counters() {
    let mut files = BASE.to_vec();
    files.extend([
        ("info/L3_MON/mbm_assign_mode", "[mbm_event]\ndefault\n"),
        ("info/L3_MON/num_mbm_cntrs", "0=32;2=16\n"),
        ("mon_data/mon_L3_00/mon_sub_L3_00/llc_occupancy", "1\n"),
        ("mon_data/mon_L3_00/mon_sub_L3_01/llc_occupancy", "1\n"),
        ("mon_data/mon_L3_02/mon_sub_L3_02/llc_occupancy", "1\n"),
        ("mon_data/mon_L3_02/mon_sub_L3_03/llc_occupancy", "1\n"),
    ]);
    let d = tree(&files);
    let rc = Resctrl::at(d.path());
    let a = rc.info().unwrap().assign.unwrap();
    assert_eq!(a.mode, "mbm_event");
    assert_eq!(a.modes, vec!["mbm_event", "default"]);
    assert_eq!(a.counters, vec![(Some(0), 32), (Some(2), 16)]);
    let doms = rc.domains().unwrap();
    assert_eq!(doms, vec![Domain { id: 0, sub: vec![0, 1] }, Domain { id: 2, sub: vec![2, 3] }]);
    assert_eq!(parse_counters(Path::new("x"), "64\n").unwrap(), vec![(None, 64)]);
    assert!(parse_counters(Path::new("x"), "0=x").is_err());
}

#[test]
fn malformed_info_is_named() {
    let mut files = BASE.to_vec();
    files[0] = ("info/L3_MON/num_rmids", "lots\n");
    let d = tree(&files);
    let e = Resctrl::at(d.path()).info().unwrap_err().to_string();
    assert!(e.contains("num_rmids") && e.contains("lots"), "{e}");
    let empty = tempfile::tempdir().unwrap();
    assert!(matches!(Resctrl::at(empty.path()).info(), Err(ResctrlError::NoL3Monitoring(_))));
}

#[test]
fn hostile_ids_are_refused() {
    for bad in ["", ".", "..", "../x", "a/b", "x\n", ".hidden", "a\0b", "é", &"x".repeat(129), "a b"] {
        assert!(matches!(group_name(bad), Err(ResctrlError::BadId(_))), "{bad:?}");
    }
    assert_eq!(group_name("web-1.a_b").unwrap(), "cachescope-web-1.a_b");
    assert_eq!(id_of_group("cachescope-web"), Some("web"));
    assert_eq!(id_of_group("cachescope-.."), None);
    assert_eq!(id_of_group("other-agent"), None);
    let d = tree(BASE);
    let rc = Resctrl::at(d.path());
    fs::create_dir_all(d.path().join("mon_groups")).unwrap();
    assert!(matches!(rc.create_group("", "../../etc"), Err(ResctrlError::BadId(_))));
    // Nothing was created anywhere.
    assert_eq!(rc.mon_groups().unwrap(), vec![]);
}

#[test]
fn ours_versus_theirs() {
    let d = tree(BASE);
    for g in ["mon_groups/cachescope-a", "mon_groups/theirs", "ctl1/mon_groups/cachescope-b", "ctl1/mon_groups/x"] {
        fs::create_dir_all(d.path().join(g)).unwrap();
    }
    let rc = Resctrl::at(d.path());
    assert_eq!(rc.ctrl_groups().unwrap(), vec!["".to_string(), "ctl1".to_string()]);
    let ours = rc.our_groups().unwrap();
    let ids: Vec<&str> = ours.iter().map(|(_, id)| id.as_str()).collect();
    assert_eq!(ids, vec!["a", "b"]);
    assert_eq!(rc.group_dir(&ours[1].0), d.path().join("ctl1/mon_groups/cachescope-b"));
    let theirs = GroupRef { ctrl: String::new(), name: "theirs".into() };
    assert!(matches!(rc.remove_group(&theirs), Err(ResctrlError::NotOurs(_))));
    assert!(d.path().join("mon_groups/theirs").is_dir());
}

#[test]
fn reader_parses_every_word() {
    let d = tree(&[
        ("info/L3_MON/num_rmids", "4\n"),
        ("info/L3_MON/mon_features", "llc_occupancy\nmbm_total_bytes\n"),
        ("mon_groups/cachescope-a/mon_data/mon_L3_00/llc_occupancy", "4096\n"),
        ("mon_groups/cachescope-a/mon_data/mon_L3_00/mbm_total_bytes", "Unassigned\n"),
        ("mon_groups/cachescope-a/mon_data/mon_L3_01/llc_occupancy", "Unavailable\n"),
        ("mon_groups/cachescope-a/mon_data/mon_L3_01/mbm_total_bytes", "Error\n"),
    ]);
    let rc = Resctrl::at(d.path());
    let g = GroupRef { ctrl: String::new(), name: "cachescope-a".into() };
    let doms = [Domain { id: 0, sub: vec![] }, Domain { id: 1, sub: vec![] }];
    let events = rc.info().unwrap().events();
    let mut r = rc.reader(&g, &doms, &events).unwrap();
    let mut out = Vec::new();
    r.read_all(&mut out).unwrap();
    let vals: Vec<Value> = out.iter().map(|x| x.value).collect();
    assert_eq!(vals, vec![Value::Bytes(4096), Value::Unassigned, Value::Unavailable, Value::Error]);
    // A file rewritten in place is re-read, not cached.
    fs::write(d.path().join("mon_groups/cachescope-a/mon_data/mon_L3_00/llc_occupancy"), "8192\n").unwrap();
    r.read_all(&mut out).unwrap();
    assert_eq!(out[0].value, Value::Bytes(8192));
    fs::write(d.path().join("mon_groups/cachescope-a/mon_data/mon_L3_00/llc_occupancy"), "garbage\n").unwrap();
    assert!(matches!(r.read_all(&mut out), Err(ReadError::Parse(_))));
}

#[test]
fn proc_resctrl_names_the_ctrl_group() {
    let d = tree(&[("42/resctrl", "res:/gold\nmon:/mon_groups/x\n"), ("43/resctrl", "res:/\nmon:\n")]);
    assert_eq!(ctrl_group_of(d.path(), 42).as_deref(), Some("gold"));
    assert_eq!(ctrl_group_of(d.path(), 43), None);
    assert_eq!(ctrl_group_of(d.path(), 44), None);
    assert_eq!(mon_group_of(d.path(), 42).as_deref(), Some("x"));
    assert_eq!(mon_group_of(d.path(), 43), None, "in no MON group");
    let d = tree(&[("7/resctrl", "res:/\nmon:runc-abc\n")]);
    assert_eq!(mon_group_of(d.path(), 7).as_deref(), Some("runc-abc"), "the bare name 6.x prints");
}

#[test]
fn mountinfo_finds_resctrl() {
    let d = tree(&[(
        "self/mountinfo",
        "22 1 0:20 / /sys rw - sysfs sysfs rw\n40 22 0:35 / /sys/fs/resctrl rw - resctrl resctrl rw\n",
    )]);
    assert_eq!(Resctrl::find(d.path()).unwrap().root(), Path::new("/sys/fs/resctrl"));
    let d = tree(&[("self/mountinfo", "22 1 0:20 / /sys rw - sysfs sysfs rw\n")]);
    assert!(matches!(Resctrl::find(d.path()), Err(ResctrlError::NotMounted(_))));
}

#[test]
fn a_task_in_another_owners_group_is_found_by_its_tasks_files() {
    let d = tree(&[
        ("tasks", "1\n"),
        ("gold/tasks", "5\n7\n"),
        ("gold/mon_groups/runc-1/tasks", "5\n"),
        ("mon_groups/cachescope-x/tasks", "6\n"),
        ("mon_groups/nri-2/tasks", "8\n"),
    ]);
    let rc = Resctrl::at(d.path());
    assert_eq!(rc.group_of_task(5), ("gold".to_string(), Some("runc-1".to_string())));
    assert_eq!(rc.group_of_task(7), ("gold".to_string(), None), "in the CTRL_MON group only");
    assert_eq!(rc.group_of_task(8), (String::new(), Some("nri-2".to_string())));
    assert_eq!(rc.group_of_task(6), (String::new(), None), "our own groups are not another owner's");
}
