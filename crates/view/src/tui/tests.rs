//! The live view as a person sees it: rendered with ratatui's TestBackend.

use super::*;
use ratatui::backend::TestBackend;
use ratatui::crossterm::event::KeyEventState;
use ratatui::Terminal;

fn key(c: KeyCode) -> KeyEvent {
    KeyEvent { code: c, modifiers: KeyModifiers::NONE, kind: KeyEventKind::Press, state: KeyEventState::NONE }
}

/// `n` containers on two domains: each runs in one, is `unavailable` in the other. One has
/// a 64-hex id for a name, one a hostile name.
fn frame(n: usize) -> Frame {
    let mut rows = Vec::new();
    for i in 0..n {
        let (id, label) = match i {
            0 => ("a".repeat(64), "3f2a9c0d1e4b5a6978c0d1e2f3a4b5c6d7e8f9a0b1c2d3e4f5a6b7c8d9e0f1a2".to_string()),
            1 => ("evil".into(), crate::rows::printable("evil\u{1b}[2Jname\n")),
            _ => (format!("c{i:02}"), format!("svc-{i:02}")),
        };
        let d = (i % 2) as u32;
        let ok = ViewRow {
            id: id.clone(),
            label: label.clone(),
            domain: Some(d),
            rmid: Some(i as u32 + 1),
            status: "ok",
            occupancy: Some(((n - i) as u64) << 19),
            occupancy_share: Some((n - i) as f64 / 64.0),
            mbm_total: Some(100e6 * (i + 1) as f64),
            mbm_local: Some(90e6 * (i + 1) as f64),
            l3_bytes: Some(32 << 20),
            ..ViewRow::default()
        };
        let other = ViewRow {
            domain: Some(1 - d),
            status: "unavailable",
            occupancy: None,
            occupancy_share: None,
            mbm_total: None,
            mbm_local: None,
            ..ok.clone()
        };
        rows.push(ok);
        rows.push(other);
    }
    Frame {
        host: "node-7".into(),
        wall_ns: 1_795_489_652_481_257_541,
        header: vec!["t=1.000s  backend=emulated interval=1ms".into()],
        following: "Docker, containerd, CRI-O and Podman containers and Kubernetes pods, by cgroup name".into(),
        episodes: Vec::new(),
        rows,
    }
}

fn screen(width: u16, height: u16, fr: &Frame, st: &mut State) -> Vec<String> {
    let mut t = Terminal::new(TestBackend::new(width, height)).unwrap();
    t.draw(|f| draw(f, Some(fr), st)).unwrap();
    let buf = t.backend().buffer().clone();
    (0..buf.area.height)
        .map(|y| (0..buf.area.width).map(|x| buf[(x, y)].symbol().to_string()).collect::<String>())
        .collect()
}

#[test]
fn every_width_shows_whole_headers_and_values() {
    for width in [80u16, 100, 160] {
        let fr = frame(40);
        let mut st = State::default();
        let s = screen(width, 24, &fr, &mut st);
        let all = s.join("\n");
        assert!(s[0].starts_with("cachescope on node-7 at 2026-11-24 03:07:32 UTC"), "{width}: {}", s[0]);
        assert!(
            all.contains("L3 0: ") && all.contains(" of 32.0 MiB") && all.contains("MB/s"),
            "{width}: totals\n{all}"
        );
        let head = s.iter().find(|l| l.starts_with("CONTAINER")).unwrap_or_else(|| panic!("{width}: {all}"));
        let (cols, _) = columns(width);
        for c in &cols {
            assert!(head.contains(c.title()), "{width}: header {} cut: {head}", c.title());
        }
        assert!(head.contains("LLC MiB▼"), "{width}: {head}");
        // One line per container (domains folded), statuses whole, names never wider than
        // their column, shortened from the middle.
        assert!(!all.contains("unava ") && !all.contains("unavai "), "{width}: a status cut\n{all}");
        let hex = s.iter().find(|l| l.starts_with("3f2a")).unwrap_or_else(|| panic!("{width}: {all}"));
        let (_, name_w) = columns(width);
        if name_w < 64 {
            assert!(hex.contains('…') && hex.contains("f1a2 "), "{width}: {hex}");
        } else {
            assert!(hex.contains(&fr.rows[0].label), "{width}: the whole id where it fits: {hex}");
        }
        assert!(all.contains("evil\\u{1b}[2Jname\\n") || all.contains("evil\\u{1b}…"), "{width}: escaped\n{all}");
        assert!(!all.contains('\u{1b}'), "no raw escape reaches the screen");
        // Overflow is counted, not hidden.
        let last = s.last().unwrap();
        assert!(last.contains(" more ↓") && last.contains("of 40"), "{width}: {last}");
        assert!(s.iter().all(|l| l.chars().count() == width as usize));
        if width == 100 {
            println!("{all}");
        }
    }
}

#[test]
fn narrow_terminals_drop_columns_never_cut_them() {
    let fr = frame(40);
    for width in [20u16, 30, 45, 60, 80] {
        let mut st = State::default();
        let s = screen(width, 24, &fr, &mut st);
        let all = s.join("\n");
        let (cols, name_w) = columns(width);
        assert!(cols.contains(&Col::Name) && cols.contains(&Col::LlcMib), "{width}: {cols:?}");
        let head = s.iter().find(|l| l.starts_with("CONTAINER")).unwrap_or_else(|| panic!("{width}: {all}"));
        for c in &cols {
            assert!(head.contains(c.title()), "{width}: header {} cut: {head}", c.title());
        }
        // Every number of the biggest container's line, whole.
        let line = s.iter().find(|l| l.starts_with("3f2a")).unwrap_or_else(|| panic!("{width}: {all}"));
        let r = &fr.rows[0];
        for c in cols.iter().filter(|c| **c != Col::Name) {
            let v = c.cell(r, name_w as usize);
            assert!(line.contains(&format!(" {v}")), "{width}: {} {v:?} cut: {line}", c.title());
        }
        assert!(s.iter().all(|l| l.chars().count() == width as usize));
        assert!(!s.last().unwrap().ends_with('·'), "{width}: {}", s.last().unwrap());
    }
    // Narrower than a name and a number: a notice, no table.
    let mut st = State::default();
    let s = screen(15, 24, &fr, &mut st);
    assert!(columns(15).0.is_empty());
    assert!(!s.iter().any(|l| l.starts_with("CONTAINER")), "{s:#?}");
    assert!(s.join("").contains("too narrow: 19"), "{s:#?}");
}

#[test]
fn keys_scroll_filter_expand_and_help() {
    let fr = frame(40);
    let mut st = State::default();
    let s = screen(100, 20, &fr, &mut st);
    let first = |s: &[String]| s.iter().position(|l| l.starts_with("CONTAINER")).map(|i| s[i + 1].clone()).unwrap();
    assert!(first(&s).starts_with("3f2a"), "the biggest first: {}", first(&s));
    assert_eq!(st.on_key(key(KeyCode::Down)), Action::Redraw);
    let s = screen(100, 20, &fr, &mut st);
    assert!(s.last().unwrap().contains("1 above ↑"), "{}", s.last().unwrap());
    assert!(!first(&s).starts_with("3f2a"));
    st.on_key(key(KeyCode::End));
    let s = screen(100, 20, &fr, &mut st);
    assert!(!s.last().unwrap().contains("more ↓"), "at the end: {}", s.last().unwrap());
    st.on_key(key(KeyCode::Home));
    // Filter: "/" then text, Enter keeps it.
    st.on_key(key(KeyCode::Char('/')));
    for c in "svc-1".chars() {
        st.on_key(key(KeyCode::Char(c)));
    }
    st.on_key(key(KeyCode::Enter));
    let s = screen(100, 20, &fr, &mut st);
    let body: Vec<&String> = s.iter().filter(|l| l.starts_with("svc-")).collect();
    assert_eq!(body.len(), 10, "svc-10..19: {s:#?}");
    assert!(s.last().unwrap().contains("filter: svc-1 (10 of 40)"), "{}", s.last().unwrap());
    // q while typing is text, not quit.
    st.on_key(key(KeyCode::Char('/')));
    assert_eq!(st.on_key(key(KeyCode::Char('q'))), Action::Redraw);
    st.on_key(key(KeyCode::Esc));
    assert!(st.filter.is_empty());
    // d: each container followed by its domains.
    st.on_key(key(KeyCode::Char('d')));
    let s = screen(160, 30, &fr, &mut st);
    let i = s.iter().position(|l| l.starts_with("3f2a")).unwrap();
    assert!(s[i + 1].starts_with("  L3 0") && s[i + 2].starts_with("  L3 1"), "{s:#?}");
    assert!(s[i + 2].contains("unavailable"));
    // ?: the help over the table; any key closes it.
    st.on_key(key(KeyCode::Char('?')));
    let s = screen(100, 20, &fr, &mut st);
    assert!(s.iter().any(|l| l.contains("show or fold each container's L3 domains")), "{s:#?}");
    st.on_key(key(KeyCode::Char('x')));
    assert!(!st.help);
    assert_eq!(st.on_key(key(KeyCode::Char('b'))), Action::Redraw);
    let s = screen(100, 20, &fr, &mut st);
    assert!(s.iter().any(|l| l.contains("MBM MB/s▼")));
    assert_eq!(st.on_key(key(KeyCode::Char('q'))), Action::Quit);
}

#[test]
fn the_help_box_is_whole_at_80_by_24() {
    let fr = frame(40);
    let mut st = State { help: true, ..State::default() };
    let s = screen(80, 24, &fr, &mut st);
    let all = s.join("\n");
    for line in super::HELP.iter().filter(|l| !l.is_empty()) {
        assert!(s.iter().any(|l| l.contains(line)), "help line {line:?} cut or wrapped:\n{all}");
    }
    assert!(s.iter().any(|l| l.contains("┌ keys ─")), "{all}");
}

#[test]
fn no_container_says_what_was_looked_for_and_how_to_widen_it() {
    let mut fr = frame(0);
    fr.rows.clear();
    for width in [80u16, 100, 160] {
        let mut st = State::default();
        let s = screen(width, 24, &fr, &mut st);
        let all = s.join(" ");
        let flat: String = all.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(
            flat.contains("No container seen yet. Following: Docker, containerd, CRI-O and Podman"),
            "{width}: {all}"
        );
        assert!(flat.contains("--containers 'GLOB'") && flat.contains("cachescope info"), "{width}: {all}");
        assert!(s.last().unwrap().contains("no containers"), "{width}: {}", s.last().unwrap());
    }
}

/// An active noisy-neighbour episode (issue 44): a red line under the totals names the
/// aggressor, what rose and since when, and each victim with what it lost; the aggressor's
/// row is marked ▲ and the victim's ▼, at every width.
#[test]
fn an_active_episode_is_named_and_its_containers_marked() {
    let mut fr = frame(12);
    let victim = |id: &str, name: &str| cachescope_sinks::noisy::Victim {
        container_id: id.into(),
        container_name: name.into(),
        occupancy_before_bytes: Some(12.0 * 1048576.0),
        occupancy_lost_bytes: Some(6.5 * 1048576.0),
        ipc_before: None,
        ipc_during: None,
    };
    fr.episodes.push(cachescope_sinks::noisy::Episode {
        domain: 0,
        kind: cachescope_sinks::noisy::Kind::Occupancy,
        start_ns: 1_795_489_650_250_000_000,
        end_ns: 1_795_489_650_500_000_000,
        container_id: "c02".into(),
        container_name: "svc-02".into(),
        occupancy_before_bytes: Some(0.0),
        occupancy_after_bytes: Some(24.0 * 1048576.0),
        bandwidth_before_bytes_per_sec: None,
        bandwidth_during_bytes_per_sec: None,
        victims: vec![victim("c04", "svc-04")],
    });
    for width in [80u16, 100, 160] {
        let mut st = State::default();
        let s = screen(width, 30, &fr, &mut st);
        let all = s.join("\n");
        let flat: String = all.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(
            flat.contains("NOISY NEIGHBOUR L3 0: ▲ svc-02 occupancy 0.0 → 24.0 MiB since 03:07:30.2")
                && flat.contains("▼ svc-04 lost 6.5 MiB"),
            "{width}:\n{all}"
        );
        assert!(s.iter().any(|l| l.starts_with("▲ svc-02")), "{width}: aggressor marked\n{all}");
        assert!(s.iter().any(|l| l.starts_with("▼ svc-04")), "{width}: victim marked\n{all}");
        assert!(s.iter().any(|l| l.starts_with("svc-03")), "{width}: the others unmarked\n{all}");
        assert!(s.iter().all(|l| l.chars().count() == width as usize));
        if width == 100 {
            println!("{all}");
        }
    }
}
