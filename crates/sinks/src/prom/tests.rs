use super::*;
use cachescope_engine::row::Pmu;
use std::collections::BTreeMap;

fn row(id: &str, domain: u32, occ: Option<u64>, mbm: Option<u64>, status: Status) -> Row {
    Row {
        time_ns: 1,
        interval_ns: 1,
        container: Arc::new(ContainerMeta { id: id.into(), name: Some(format!("n\"{id}\\")), ..Default::default() }),
        domain,
        rmid: Some(1),
        llc_occupancy_bytes: occ,
        mbm_total_bytes: mbm,
        mbm_local_bytes: None,
        pmu: Pmu { cycles: Some(10), ..Default::default() },
        cpu_ns: None,
        status,
        mbm_counter: None,
    }
}

/// A strict reader of the text format 0.0.4 as far as we use it: every sample belongs to
/// the family announced by the last TYPE line, names and labels are well formed, values
/// parse, no series appears twice, histogram buckets are cumulative and end at +Inf = count.
pub(crate) fn parse(text: &str) -> Result<BTreeMap<String, f64>, String> {
    let name_ok = |n: &str| {
        !n.is_empty()
            && n.chars()
                .enumerate()
                .all(|(i, c)| c.is_ascii_alphabetic() || c == '_' || c == ':' || (i > 0 && c.is_ascii_digit()))
    };
    let mut family: Option<(String, String)> = None;
    let mut out = BTreeMap::new();
    let mut typed = std::collections::BTreeSet::new();
    for (ln, line) in text.lines().enumerate() {
        let err = |m: &str| format!("line {}: {m}: {line}", ln + 1);
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (n, t) = rest.split_once(' ').ok_or_else(|| err("TYPE"))?;
            if !name_ok(n) || !["gauge", "counter", "histogram"].contains(&t) || !typed.insert(n.to_string()) {
                return Err(err("bad or repeated TYPE"));
            }
            family = Some((n.to_string(), t.to_string()));
            continue;
        }
        if line.starts_with("# HELP ") {
            continue;
        }
        if line.starts_with('#') || line.is_empty() {
            return Err(err("unexpected line"));
        }
        let (series, value) = line.rsplit_once(' ').ok_or_else(|| err("no value"))?;
        let v: f64 = value.parse().map_err(|_| err("value"))?;
        let (name, labels) = match series.split_once('{') {
            Some((n, l)) => (n, l.strip_suffix('}').ok_or_else(|| err("labels not closed"))?),
            None => (series, ""),
        };
        let (fam, kind) = family.as_ref().ok_or_else(|| err("sample before TYPE"))?;
        let belongs = match kind.as_str() {
            "histogram" => {
                [format!("{fam}_bucket"), format!("{fam}_sum"), format!("{fam}_count")].contains(&name.to_string())
            }
            _ => name == fam,
        };
        if !belongs {
            return Err(err("sample outside its family"));
        }
        // Labels: name="value" pairs, values with \\ \" \n escapes only.
        let mut rest = labels;
        while !rest.is_empty() {
            let (ln_, r) = rest.split_once("=\"").ok_or_else(|| err("label"))?;
            if !name_ok(ln_) {
                return Err(err("label name"));
            }
            let mut chars = r.char_indices();
            let mut end = None;
            while let Some((i, c)) = chars.next() {
                match c {
                    '\\' => match chars.next() {
                        Some((_, '\\' | '"' | 'n')) => {}
                        _ => return Err(err("bad escape")),
                    },
                    '"' => {
                        end = Some(i);
                        break;
                    }
                    _ => {}
                }
            }
            let end = end.ok_or_else(|| err("label value not closed"))?;
            rest = r[end + 1..].strip_prefix(',').unwrap_or(&r[end + 1..]);
        }
        if out.insert(series.to_string(), v).is_some() {
            return Err(err("duplicate series"));
        }
    }
    Ok(out)
}

#[test]
fn page_parses_and_carries_the_values() {
    let mut m = Metrics::new();
    m.update(&[row("a", 0, Some(4096), Some(100), Status::Ok), row("a", 1, None, None, Status::Unavailable)]);
    m.update(&[row("a", 0, Some(8192), Some(50), Status::Ok), row("b", 0, None, None, Status::Error)]);
    m.rmids_in_use = 2;
    m.containers_unmonitored = 1;
    for us in [5, 40, 2000, 300_000] {
        m.observe_lateness(std::time::Duration::from_micros(us));
    }
    let page = m.render();
    let s = parse(&page).unwrap_or_else(|e| panic!("{e}\n{page}"));
    let l = "container_id=\"a\",container_name=\"n\\\"a\\\\\",pod_name=\"\",pod_namespace=\"\",domain=\"0\"";
    assert_eq!(s.get(&format!("cachescope_llc_occupancy_bytes{{{l}}}")), Some(&8192.0));
    assert_eq!(s.get(&format!("cachescope_mbm_total_bytes_total{{{l}}}")), Some(&150.0));
    assert_eq!(s.get(&format!("cachescope_cycles_total{{{l}}}")), Some(&20.0));
    // Unavailable is an absent series, not 0.
    assert!(!page.contains("cachescope_llc_occupancy_bytes{container_id=\"a\",container_name=\"n\\\"a\\\\\",pod_name=\"\",pod_namespace=\"\",domain=\"1\"}"));
    // A read that cannot have data (no CPU of the container in the domain) is no error.
    assert_eq!(s.get("cachescope_read_errors_total{kind=\"unavailable\"}"), None);
    assert_eq!(s.get("cachescope_read_errors_total{kind=\"error\"}"), Some(&1.0));
    assert_eq!(s.get("cachescope_emulated{driven_by=\"\"}"), Some(&0.0));
    assert!(s.keys().any(|k| k.starts_with("cachescope_build_info{version=")));
    assert_eq!(s.get("cachescope_rmids_in_use"), Some(&2.0));
    assert_eq!(
        s.get("cachescope_sample_lateness_seconds_bucket{le=\"0.00001\"}")
            .or(s.get("cachescope_sample_lateness_seconds_bucket{le=\"1e-5\"}")),
        Some(&1.0)
    );
    assert_eq!(s.get("cachescope_sample_lateness_seconds_bucket{le=\"+Inf\"}"), Some(&4.0));
    assert_eq!(s.get("cachescope_sample_lateness_seconds_count"), Some(&4.0));
    m.forget("a");
    assert!(!m.render().contains("container_id=\"a\""));
}

/// promtool, where installed, must accept the page too.
#[test]
fn promtool_accepts_the_page() {
    let Ok(out) = std::process::Command::new("promtool").arg("--version").output() else {
        cachescope_testkit::skip("promtool is not installed");
        return;
    };
    assert!(out.status.success());
    let mut m = Metrics::new();
    m.update(&[row("a", 0, Some(4096), Some(100), Status::Ok)]);
    m.observe_lateness(std::time::Duration::from_micros(30));
    // With the live finder's families, an episode active.
    let board = crate::noisy::Board::shared();
    board.lock().expect("board").active.push(episode("backup", &["web", "db"]));
    board.lock().expect("board").totals.insert(0, 1);
    m.board = Some(board);
    use std::io::Write;
    let mut child = std::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("promtool");
    child.stdin.take().expect("stdin").write_all(m.render().as_bytes()).expect("write");
    let out = child.wait_with_output().expect("wait");
    assert!(out.status.success(), "{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
}

/// The same values under cAdvisor's names and labels, for dashboards built on them.
#[test]
fn cadvisor_names_and_labels() {
    let meta = ContainerMeta { id: "c1".into(), cgroup_path: "docker/c1".into(), ..Default::default() };
    let _ = meta.runtime.set(cachescope_engine::RuntimeMeta {
        name: Some("web-1".into()),
        image: Some("shop/web:2".into()),
        pod_name: Some("web-0".into()),
        pod_namespace: Some("prod".into()),
        pod_container: Some("app".into()),
    });
    let mut r = row("c1", 1, Some(8192), Some(640), Status::Ok);
    r.container = Arc::new(meta);
    r.mbm_local_bytes = Some(64);
    let mut m = Metrics::new();
    m.update(std::slice::from_ref(&r));
    m.update(&[r]);
    let s = parse(&m.render()).unwrap();
    let l = "id=\"/docker/c1\",name=\"web-1\",image=\"shop/web:2\",container=\"app\",pod=\"web-0\",namespace=\"prod\",node_id=\"1\"";
    assert_eq!(s.get(&format!("container_llc_occupancy_bytes{{{l}}}")), Some(&8192.0));
    assert_eq!(s.get(&format!("container_memory_bandwidth_bytes{{{l}}}")), Some(&1280.0), "a running total");
    assert_eq!(s.get(&format!("container_memory_bandwidth_local_bytes{{{l}}}")), Some(&128.0));
    // The runtime's answer reaches the cachescope_* series' labels too.
    assert!(s.keys().any(|k| k.starts_with("cachescope_llc_occupancy_bytes{") && k.contains("pod_name=\"web-0\"")));
}

/// A scenario's container has no cgroup: no cAdvisor `id`, rather than "/" (the root cgroup's,
/// which every scenario container shared).
#[test]
fn a_container_without_a_cgroup_has_no_cadvisor_id() {
    let mut r = row("noisy", 0, Some(4096), Some(64), Status::Ok);
    r.container = Arc::new(ContainerMeta { id: "noisy".into(), cgroup_path: String::new(), ..Default::default() });
    let mut m = Metrics::new();
    m.update(&[r]);
    let page = m.render();
    assert!(page.contains("container_llc_occupancy_bytes{id=\"\","), "{page}");
    assert!(!page.contains("id=\"/\""), "{page}");
}

fn episode(aggressor: &str, victims: &[&str]) -> crate::noisy::LiveEpisode {
    let episode = crate::noisy::Episode {
        domain: 0,
        kind: crate::noisy::Kind::Occupancy,
        start_ns: 1,
        end_ns: 2,
        container_id: format!("{aggressor}-id"),
        container_name: aggressor.into(),
        occupancy_before_bytes: Some(0.0),
        occupancy_after_bytes: Some(8e6),
        bandwidth_before_bytes_per_sec: None,
        bandwidth_during_bytes_per_sec: None,
        victims: victims
            .iter()
            .map(|v| crate::noisy::Victim {
                container_id: format!("{v}-id"),
                container_name: v.to_string(),
                occupancy_before_bytes: Some(8e6),
                occupancy_lost_bytes: Some(4e6),
                ipc_before: None,
                ipc_during: None,
            })
            .collect(),
    };
    crate::noisy::LiveEpisode { episode, detected_ns: 3 }
}

/// The live finder's episodes on the page: one series per active (aggressor, victim), at
/// most the newest 32, the rest counted; the episodes counted per domain.
#[test]
fn active_episodes_are_series_of_bounded_number() {
    let board = crate::noisy::Board::shared();
    {
        let mut b = board.lock().expect("board");
        b.active.push(episode("backup", &["web", "db"]));
        b.totals.insert(0, 3);
    }
    let mut m = Metrics::new();
    m.board = Some(board.clone());
    let s = parse(&m.render()).unwrap();
    let k = "cachescope_noisy_neighbour_active{domain=\"0\",aggressor=\"backup\",victim=\"web\",kind=\"occupancy\"}";
    assert_eq!(s.get(k), Some(&1.0), "{:?}", s.keys().filter(|k| k.contains("noisy")).collect::<Vec<_>>());
    assert_eq!(s.get("cachescope_noisy_neighbour_episodes_total{domain=\"0\"}"), Some(&3.0));
    assert_eq!(s.get("cachescope_noisy_neighbour_active_dropped"), Some(&0.0));
    // 20 episodes of 2 victims: 40 pairs, the newest 32 shown.
    board.lock().expect("board").active = (0..20).map(|i| episode(&format!("a{i}"), &["v1", "v2"])).collect();
    let s = parse(&m.render()).unwrap();
    assert_eq!(s.keys().filter(|k| k.starts_with("cachescope_noisy_neighbour_active{")).count(), 32);
    assert_eq!(s.get("cachescope_noisy_neighbour_active_dropped"), Some(&8.0));
    assert!(s.keys().any(|k| k.contains("aggressor=\"a19\"")) && !s.keys().any(|k| k.contains("aggressor=\"a0\"")));
}
