//! The Prometheus rules and the Grafana dashboard of `deploy/`, checked against what `/metrics`
//! really exposes: promtool accepts the rules and their unit tests pass; every expression of
//! the dashboard parses; every cachescope metric they name is a family of the page.
#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

use cachescope_sinks::prom::Metrics;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

fn deploy() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy")
}

fn promtool(args: &[&str], dir: &Path) -> Option<(bool, String)> {
    let out = Command::new("promtool").args(args).current_dir(dir).output().ok()?;
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    Some((out.status.success(), text))
}

/// The dashboard's query expressions, with Grafana's variables given values.
fn dashboard_exprs() -> Vec<String> {
    let text = std::fs::read_to_string(deploy().join("grafana/cachescope.json")).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).expect("the dashboard is JSON");
    let mut out = Vec::new();
    for p in v["panels"].as_array().expect("panels") {
        assert!(p["title"].as_str().is_some_and(|t| !t.is_empty()), "{p}");
        for t in p["targets"].as_array().expect("targets") {
            let e = t["expr"].as_str().expect("expr");
            out.push(e.replace("$__rate_interval", "1m").replace("$instance", ".*").replace("$namespace", ".*"));
        }
    }
    // And the annotations' queries (the noisy-neighbour episodes on every panel).
    for a in v["annotations"]["list"].as_array().expect("annotations") {
        if let Some(e) = a["expr"].as_str() {
            out.push(e.replace("$__rate_interval", "1m").replace("$instance", ".*").replace("$namespace", ".*"));
        }
    }
    out
}

/// Metric names used (`cachescope_…`; no label name starts so).
fn names_in(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = text;
    while let Some(i) = rest.find("cachescope_") {
        let tail = &rest[i..];
        let end = tail.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(tail.len());
        out.insert(tail[..end].to_string());
        rest = &tail[end..];
    }
    out
}

#[test]
fn rules_and_dashboard_use_what_the_page_has() {
    // As a run serves it: with the live noisy-neighbour finder's families.
    let mut m = Metrics::new();
    m.board = Some(cachescope_sinks::noisy::Board::shared());
    let page = m.render();
    let families: BTreeSet<String> = page
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split(' ').next())
        .flat_map(|f| [f.to_string(), format!("{f}_bucket"), format!("{f}_sum"), format!("{f}_count")])
        .collect();
    let rules = std::fs::read_to_string(deploy().join("prometheus/rules.yml")).unwrap();
    let exprs = dashboard_exprs();
    assert!(exprs.len() >= 9, "{exprs:?}");
    let used: BTreeSet<String> = names_in(&rules).into_iter().chain(names_in(&exprs.join("\n"))).collect();
    assert!(used.len() >= 10, "{used:?}");
    for n in &used {
        assert!(families.contains(n), "{n} is not on the /metrics page");
    }
}

#[test]
fn promtool_checks_the_rules_and_the_dashboard() {
    let Some((ok, out)) = promtool(&["check", "rules", "rules.yml"], &deploy().join("prometheus")) else {
        return cachescope_testkit::skip("promtool is not installed (scripts/setup.sh installs Debian's prometheus)");
    };
    assert!(ok, "{out}");
    let (ok, out) = promtool(&["test", "rules", "rules_test.yml"], &deploy().join("prometheus")).unwrap();
    assert!(ok, "{out}");
    // Every panel's query, as a recording rule, for promtool to parse.
    let dir = tempfile::tempdir().unwrap();
    let mut y = String::from("groups:\n  - name: dashboard\n    rules:\n");
    for (i, e) in dashboard_exprs().iter().enumerate() {
        y.push_str(&format!(
            "      - record: dashboard:panel{i}\n        expr: {}\n",
            serde_json::to_string(e).unwrap()
        ));
    }
    std::fs::write(dir.path().join("d.yml"), y).unwrap();
    let (ok, out) = promtool(&["check", "rules", "d.yml"], dir.path()).unwrap();
    assert!(ok, "{out}");
}
