//! The BPF attribution for real, as root: test cgroups with a busy and an idle process, one
//! created after start, 1 ms slots. Counts cycles where the host has a hardware PMU and
//! software cpu-clock (ns) where it does not (our VMs), saying which.

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

use cachescope_bpf::{Attribution, SlotRow, IDLE};
use cachescope_cgroups::cpu_usage_usec;
use cachescope_cgroups::sandbox::Sandbox;
use cachescope_perf::counter::{CounterGroup, Target};
use cachescope_perf::Encoded;
use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

fn setup(tag: &str) -> Option<Sandbox> {
    if !Path::new("/sys/kernel/btf/vmlinux").exists() {
        println!("note: no kernel BTF; the program needs none (no CO-RE), continuing");
    }
    match Sandbox::for_host(&format!("cachescope-bpftest-{tag}")) {
        Ok(s) => Some(s),
        Err(why) => {
            cachescope_testkit::skip(why);
            None
        }
    }
}

fn event() -> (Encoded, &'static str) {
    let (ev, unit) = cachescope_perf::counter::cycles_or_cpu_clock();
    if unit != "cycles" {
        println!("note: no hardware PMU on this host; counting software cpu-clock (ns) instead");
    }
    (ev, unit)
}

/// Sizing of the slot map: a handful of cgroups, drained every 20 ms here, with room for
/// half a second between drains (a test thread the host leaves off its CPUs that long).
const CAP_CGROUPS: usize = 64;
const CAP_DRAIN: u32 = 500;

fn cpus() -> Vec<usize> {
    cachescope_platform::Topology::read(std::path::Path::new("/sys"))
        .unwrap()
        .online_cpus()
        .map(|c| c as usize)
        .collect()
}

fn cmd(args: &[&str]) -> Command {
    let mut c = Command::new(args[0]);
    c.args(&args[1..]);
    c
}

/// CPU time the cgroup `dir` has used (cpu.stat), us.
fn used(dir: &Path) -> u64 {
    cpu_usage_usec(dir).unwrap()
}

/// A lower bound of the slot boundaries a task crossed while on a CPU: `ran_ms` on a CPU in
/// `stints` stretches crosses at least `ran_ms - stints` of them; `armed_late_ms` for the
/// start of a stretch before its timer was armed. A tick timer runs at each one, in a slot of
/// its own, and charges the task there.
fn boundaries(ran_ms: u64, stints: u64, armed_late_ms: u64) -> u64 {
    ran_ms.saturating_sub(stints + armed_late_ms)
}

/// Let this thread run on `cpus` only.
fn pin(cpus: &[usize]) {
    // SAFETY: a zeroed cpu_set_t is the empty set; CPU_SET writes within it and
    // sched_setaffinity reads it, both given its size.
    let rc = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for &c in cpus {
            libc::CPU_SET(c, &mut set);
        }
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set)
    };
    assert_eq!(rc, 0, "sched_setaffinity: {}", std::io::Error::last_os_error());
}

/// Drain everything the kernel booked, each CPU's own count read around it: before this
/// thread moved there and slept (a switch there, which books all until then), and after the
/// drain. Per CPU, what the drain took ends between the two reads. The rows, and the reads.
fn drain_bracketed(
    attr: &mut Attribution,
    per_cpu: &mut [CounterGroup],
    cpus: &[usize],
) -> (Vec<SlotRow>, Vec<[u64; 2]>) {
    let mut pre = Vec::new();
    for (g, &cpu) in per_cpu.iter_mut().zip(cpus) {
        pre.push(g.read().unwrap().raw[0]);
        pin(&[cpu]);
        std::thread::sleep(Duration::from_micros(100));
    }
    pin(cpus); // before anything is spawned: children inherit it
    let rows = attr.drain_all().unwrap();
    let reads = per_cpu.iter_mut().zip(pre).map(|(g, pre)| [pre, g.read().unwrap().raw[0]]).collect();
    (rows, reads)
}

/// Per CPU, what was charged since `base_totals` (cgroups and idle) lies within the CPU's own
/// count between the reads `start` and `end` of [`drain_bracketed`] (within 1 %, less what was
/// lost for room, which is counted).
fn charged_once_per_cpu(
    attr: &Attribution,
    cpus: &[usize],
    base_totals: &[u64],
    start: &[[u64; 2]],
    end: &[[u64; 2]],
    lost_counts: u64,
) {
    for (i, &cpu) in cpus.iter().enumerate() {
        let charged = attr.cpu_totals()[cpu] - base_totals[cpu];
        let (least, most) = (end[i][0] - start[i][1], end[i][1] - start[i][0]);
        println!("CPU {cpu}: charged {charged}, counted {least}..{most}");
        assert!(
            charged as f64 >= least as f64 * 0.99 - lost_counts as f64 && charged as f64 <= most as f64 * 1.01,
            "CPU {cpu}: charged {charged} vs {least}..{most} counted"
        );
    }
}

/// Attribution of `ev` on `cpus` at 1 ms slots, in the followed mode (ticks where followed
/// tasks run, quiet switches); None, the test skipped and the reason said, where the kernel
/// refuses BPF timers and the program falls back to ticks on every CPU.
fn followed_attribution(ev: Encoded, cpus: &[usize]) -> Option<Attribution> {
    let attr = Attribution::start(&[ev], cpus, Duration::from_millis(1), cachescope_bpf::capacity_for(64, CAP_DRAIN));
    let attr = attr.unwrap();
    if !matches!(attr.tick_mode(), cachescope_bpf::TickMode::Followed { .. }) {
        cachescope_testkit::skip(format!("this kernel refuses BPF timers: {}", attr.tick_mode()));
        return None;
    }
    Some(attr)
}

/// One at a time: each test's busy loops would take the other's CPU time.
static ONE: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// A hang, not a loaded host: what a test waits for (a few hundred ms of CPU) comes within
/// seconds.
const HANG: Duration = Duration::from_secs(60);

#[test]
fn attributes_busy_idle_and_late_cgroups_per_slot() {
    let _one = ONE.lock().unwrap_or_else(|p| p.into_inner());
    let Some(mut sb) = setup("attr") else { return };
    let (ev, unit) = event();
    let cpus = cpus();
    let mut attr = match Attribution::start(
        &[ev],
        &cpus,
        Duration::from_millis(1),
        cachescope_bpf::capacity_for(CAP_CGROUPS, CAP_DRAIN),
    ) {
        Ok(a) => a,
        Err(e) => panic!("BPF should load on this host (root, BPF available): {e}"),
    };
    let busy = sb.add("busy").unwrap();
    let idle = sb.add("idle").unwrap();
    let ino = |p: &Path| std::fs::metadata(p).unwrap().ino();
    let (busy_id, idle_id) = (ino(&busy), ino(&idle));
    println!("ticks: {}", attr.tick_mode());
    attr.follow(busy_id).unwrap();
    attr.follow(idle_id).unwrap();
    // Per-CPU totals by an independent perf count, to check that nothing is lost or doubled.
    let mut per_cpu: Vec<CounterGroup> =
        cpus.iter().map(|&c| CounterGroup::open(&Target::Cpu(c), &[ev]).unwrap()).collect();
    // Forget what came before the counters above.
    let (_, start) = drain_bracketed(&mut attr, &mut per_cpu, &cpus);
    let base_totals = attr.cpu_totals().to_vec();
    // The busy cgroup is empty until the spawn: cpu.stat counts from here what BPF counts.
    let u0 = used(&busy);
    let busy_pid = sb.spawn("busy", cmd(&["sh", "-c", "while :; do :; done"])).unwrap();
    sb.spawn("idle", cmd(&["sleep", "60"])).unwrap();
    // Until busy has run 600 ms on a CPU and late (made once busy has run 300) 100 ms, by
    // cpu.stat: what is compared is CPU time, however much wall time a loaded host takes.
    let t0 = Instant::now();
    let mut rows = Vec::new();
    let (mut late, mut late_id) = (None, 0);
    let (mut drained_at, mut longest_gap) = (attr.current_slot(), 0);
    loop {
        std::thread::sleep(Duration::from_millis(20));
        rows.extend(attr.drain().unwrap());
        let now = attr.current_slot();
        longest_gap = longest_gap.max(now - drained_at);
        drained_at = now;
        let busy_ms = (used(&busy) - u0) / 1000;
        match &late {
            None if busy_ms >= 300 => {
                let dir = sb.add("late").unwrap();
                late_id = ino(&dir);
                attr.follow(late_id).unwrap();
                sb.spawn("late", cmd(&["sh", "-c", "while :; do :; done"])).unwrap();
                late = Some(dir);
            }
            Some(dir) if busy_ms >= 600 && used(dir) >= 100_000 => break,
            _ => assert!(t0.elapsed() < HANG, "busy ran {busy_ms} ms in {:?}", t0.elapsed()),
        }
    }
    // cpu.stat and the stints inside BPF's window: read before the last drain.
    let (u1, stints) = (used(&busy), cachescope_testkit::ctxt_switches(busy_pid) + 1);
    let (rest, end) = drain_bracketed(&mut attr, &mut per_cpu, &cpus);
    rows.extend(rest);
    let mut by_cg: BTreeMap<u64, u64> = BTreeMap::new();
    let mut slots = std::collections::BTreeSet::new();
    let mut busy_slots = std::collections::BTreeSet::new();
    for r in &rows {
        *by_cg.entry(r.cgroup_id).or_default() += r.values[0];
        slots.insert(r.slot);
        if r.cgroup_id == busy_id {
            busy_slots.insert(r.slot);
        }
    }
    let g = |id| by_cg.get(&id).copied().unwrap_or(0);
    let kernel = (u1 - u0) * 1000;
    let st = attr.stats().unwrap();
    println!(
        "{} slots of 1 ms in {:?}, {} of them busy's; busy {} {unit} (cpu.stat {kernel} ns, {stints} stints on a CPU), \
         idle {}, late {}, idle task {}; longest gap between drains {longest_gap} ms; stats {st:?}",
        slots.len(),
        t0.elapsed(),
        busy_slots.len(),
        g(busy_id),
        g(idle_id),
        g(late_id),
        g(IDLE),
    );
    assert!(g(busy_id) > 0 && g(late_id) > 0, "busy and late cgroups charged");
    assert!(g(idle_id) * 100 < g(busy_id), "idle cgroup about zero");
    if unit == "cpu-clock ns" {
        assert!(g(busy_id) as f64 >= 0.9 * kernel as f64, "BPF {} < 90% of cpu.stat {kernel}", g(busy_id));
    }
    // Split into 1 ms slots: busy (followed before it started) is charged in a slot of its own
    // at every slot boundary it ran across. Ticks on every CPU are not aligned to the slots:
    // two may fall in one.
    let crossed = boundaries((u1 - u0) / 1000, stints, 0);
    let need =
        if matches!(attr.tick_mode(), cachescope_bpf::TickMode::Followed { .. }) { crossed } else { crossed / 2 };
    assert!(
        busy_slots.len() as u64 >= need,
        "busy charged in {} slots, ran across {crossed} slot boundaries",
        busy_slots.len()
    );
    // Per CPU: everything charged (cgroups and idle) equals the CPU's own count, which is read
    // on each side of where the charges drained begin and end (within 1 %: a charge into a slot
    // being drained on another CPU can be missed; none was dropped for room, or it is counted).
    charged_once_per_cpu(&attr, &cpus, &base_totals, &start, &end, st.lost_counts);
    // The map holds CAP_DRAIN slots of CAP_CGROUPS cgroups, twice over: it fills only where this
    // thread did not drain it for that long.
    if longest_gap < u64::from(CAP_DRAIN) {
        assert_eq!(st.lost_charges, 0);
    } else {
        println!("note: {longest_gap} ms without a drain (host load): lost charges not checked ({})", st.lost_charges);
    }
    assert_eq!(st.read_failures, 0);
}

/// Ticks follow the followed: a busy task in a cgroup no one follows gets no 1 ms timer; once
/// followed while it runs (no switch needed) it is split into 1 ms slots; unfollowed, the
/// timer stops again. Its counts are charged all along (at switches).
#[test]
fn ticks_run_only_where_followed_tasks_run() {
    let _one = ONE.lock().unwrap_or_else(|p| p.into_inner());
    let Some(mut sb) = setup("ticks") else { return };
    let (ev, _) = event();
    let cpus = cpus();
    let Some(mut attr) = followed_attribution(ev, &cpus) else { return };
    let sched_tick = matches!(attr.tick_mode(), cachescope_bpf::TickMode::Followed { sched_tick: true });
    let busy = sb.add("spin").unwrap();
    let id = std::fs::metadata(&busy).unwrap().ino();
    let pid = sb.spawn("spin", cmd(&["sh", "-c", "while :; do :; done"])).unwrap();
    let runs = |a: &Attribution| a.stats().unwrap().timer_runs;
    // Until the task has run 300 ms on a CPU (cpu.stat), however long a loaded host takes:
    // timer runs (read outside that window), the slots charged to it (drained as the
    // collector does), the ms it ran and its stints on a CPU (inside).
    let phase = |a: &mut Attribution| {
        let _ = a.drain_all().unwrap();
        let r0 = runs(a);
        let (u0, s0, t0) = (used(&busy), cachescope_testkit::ctxt_switches(pid), Instant::now());
        let mut slots = std::collections::BTreeSet::new();
        let mut keep = |rows: Vec<SlotRow>| slots.extend(rows.iter().filter(|r| r.cgroup_id == id).map(|r| r.slot));
        while used(&busy) < u0 + 300_000 {
            assert!(t0.elapsed() < HANG, "the task ran {} ms in {:?}", (used(&busy) - u0) / 1000, t0.elapsed());
            std::thread::sleep(Duration::from_millis(20));
            keep(a.drain().unwrap());
        }
        let (u1, s1, took) = (used(&busy), cachescope_testkit::ctxt_switches(pid), t0.elapsed());
        keep(a.drain_all().unwrap());
        (runs(a) - r0, slots.len() as u64, (u1 - u0) / 1000, s1 - s0 + 1, took)
    };
    let (unfollowed_runs, unfollowed_slots, unfollowed_ms, _, _) = phase(&mut attr);
    attr.follow(id).unwrap();
    if !sched_tick {
        // Without the tick's hook a task followed while running is armed at its next switch:
        // give it one.
        // SAFETY: kill(2) on the child we spawned, which the sandbox has not reaped.
        unsafe {
            libc::kill(pid as i32, libc::SIGSTOP);
            libc::kill(pid as i32, libc::SIGCONT);
        }
    }
    let (followed_runs, followed_slots, ran_ms, stints, took) = phase(&mut attr);
    attr.unfollow(id).unwrap();
    std::thread::sleep(Duration::from_millis(20));
    let (after_runs, _, after_ms, _, _) = phase(&mut attr);
    // Followed while it ran: the tick's hook arms a timer within a tick (HZ 100 at the least).
    let crossed = boundaries(ran_ms, stints, 10);
    println!(
        "{}; timer runs: unfollowed {unfollowed_runs} ({unfollowed_slots} slots charged) in {unfollowed_ms} ms on a CPU, \
         followed {followed_runs} ({followed_slots} slots) in {ran_ms} ms on a CPU ({stints} stints, {took:?}; \
         at least {crossed} slot boundaries crossed), after unfollow {after_runs} in {after_ms} ms",
        attr.tick_mode()
    );
    // A timer left armed fires once more on its CPU, then sees nothing followed.
    let cpus_n = cpus.len() as u64;
    assert!(unfollowed_runs <= cpus_n, "timers ran {unfollowed_runs} times with nothing followed");
    assert!(
        followed_runs >= crossed,
        "followed while running: {followed_runs} timer runs, {crossed} boundaries crossed"
    );
    assert!(followed_slots >= crossed, "followed: {followed_slots} slots charged, {crossed} boundaries crossed");
    assert!(after_runs <= cpus_n, "timers ran {after_runs} times after unfollow");
}

/// Switches away from the tasks of `dir` (voluntary and not), summed over its processes now.
fn switches_of(dir: &Path) -> u64 {
    let procs = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap();
    procs.lines().filter_map(|l| l.parse().ok()).map(cachescope_testkit::ctxt_switches).sum()
}

/// Switches the rows charged away from cgroup `id`.
fn charged_switches(rows: &[SlotRow], id: u64) -> u64 {
    rows.iter().filter(|r| r.cgroup_id == id).map(|r| r.switches).sum()
}

/// Quiet switches: a switch between two quiet tasks (cgroups user space marked, or the idle
/// task) reads no counter. Two shells ping-pong through FIFOs (tens of thousands of switches a
/// second, to each other or through idle): charged apart at each switch while not quiet, not
/// after `quiet`, and apart again once followed (a followed cgroup is charged whatever
/// `quiet` says: the epoch makes the program judge it again).
#[test]
fn switches_between_quiet_tasks_read_no_counter() {
    let _one = ONE.lock().unwrap_or_else(|p| p.into_inner());
    let Some(mut sb) = setup("quiet") else { return };
    let (ev, _) = event();
    let cpus = cpus();
    let Some(mut attr) = followed_attribution(ev, &cpus) else { return };
    let dir = sb.add("chatty").unwrap();
    let id = std::fs::metadata(&dir).unwrap().ino();
    // FIFOs cannot live in cgroupfs: a directory of their own beside.
    let fifos = std::env::temp_dir().join(format!("cachescope-quiet-{}", std::process::id()));
    std::fs::create_dir_all(&fifos).unwrap();
    let (a, b) = (fifos.join("a"), fifos.join("b"));
    for f in [&a, &b] {
        assert!(Command::new("mkfifo").arg(f).status().unwrap().success());
    }
    let script = format!(
        "until grep -q 'chatty$' /proc/$$/cgroup; do :; done; \
         (while :; do read x < {a}; echo > {b}; done) & while :; do echo > {a}; read x < {b}; done",
        a = a.display(),
        b = b.display()
    );
    sb.spawn("chatty", cmd(&["sh", "-c", &script])).unwrap();
    // It forks its second shell once it is in the cgroup (the move comes after the spawn).
    let t0 = Instant::now();
    while std::fs::read_to_string(dir.join("cgroup.procs")).unwrap().lines().count() < 2 {
        assert!(t0.elapsed() < HANG, "the ping-pong's second shell never started");
        std::thread::sleep(Duration::from_millis(5));
    }
    // A phase: 20,000 of its switches (however long a loaded host takes); what it switched
    // by its own count, and what the rows charged away from it.
    let phase = |attr: &mut Attribution| {
        let _ = attr.drain_all().unwrap();
        let (s0, c0, t0) = (switches_of(&dir), attr.stats().unwrap().charges, Instant::now());
        let mut rows = Vec::new();
        while switches_of(&dir) < s0 + 20_000 {
            assert!(
                t0.elapsed() < HANG,
                "the ping-pong switched {} times in {:?}",
                switches_of(&dir) - s0,
                t0.elapsed()
            );
            std::thread::sleep(Duration::from_millis(20));
            rows.extend(attr.drain().unwrap());
        }
        let (own, charges) = (switches_of(&dir) - s0, attr.stats().unwrap().charges - c0);
        // Slots each CPU began in the phase: between quiet tasks a CPU reads once a slot.
        let slots = (t0.elapsed().as_millis() as u64 + 2) * cpus.len() as u64;
        rows.extend(attr.drain_all().unwrap());
        (own, charged_switches(&rows, id), charges, slots, rows)
    };
    let (own_a, charged_a, charges_a, _, rows) = phase(&mut attr);
    // As the collector does: every cgroup charged that no one claims is made quiet (this
    // test's own among them).
    let seen: std::collections::BTreeSet<u64> = rows.iter().map(|r| r.cgroup_id).filter(|&c| c != IDLE).collect();
    for &c in &seen {
        attr.quiet(c).unwrap();
    }
    let (own_b, charged_b, charges_b, slots_b, _) = phase(&mut attr);
    attr.follow(id).unwrap();
    let (own_c, charged_c, charges_c, _, _) = phase(&mut attr);
    println!(
        "switches of the ping-pong / charged away from it / all charges: apart {own_a} / {charged_a} / {charges_a}, \
         quiet ({} cgroups, {slots_b} CPU-slots) {own_b} / {charged_b} / {charges_b}, followed {own_c} / {charged_c} / \
         {charges_c}",
        seen.len()
    );
    // Apart, every switch away from it is charged (the drains bracket the counts: a few more;
    // a charge made into a slot while a drain deletes it is lost: within 1 %, as above).
    assert!(
        charged_a + own_a / 100 >= own_a && charged_a <= own_a + own_a / 20,
        "apart: {charged_a} charged of {own_a}"
    );
    // Quiet, only the first switch of a slot on each CPU, or a switch to a task not quiet (new
    // on the host since), reads the counters.
    assert!(charged_b <= own_b / 10 + slots_b, "quiet: {charged_b} of {own_b} switches charged in {slots_b} CPU-slots");
    assert!(charges_b <= charges_a / 5 + slots_b, "quiet: {charges_b} charges against {charges_a} apart");
    // Followed: apart again, but for a task judged quiet when it came on a CPU, which may
    // leave it once more unread (one stint per CPU at most).
    let cpus_n = cpus.len() as u64;
    assert!(
        charged_c + cpus_n + own_c / 100 >= own_c && charged_c <= own_c + own_c / 20,
        "followed: {charged_c} charged of {own_c}"
    );
    assert_eq!(attr.stats().unwrap().read_failures, 0);
    drop(sb);
    let _ = std::fs::remove_dir_all(&fifos);
}

/// A task moved into another cgroup while it runs (a container's first process writes itself
/// into cgroup.procs, then execs) is charged to its new cgroup when it leaves the CPU, even
/// when it came on the CPU in a quiet cgroup and leaves it for a quiet task: the program judges
/// the outgoing task by the cgroup it is in at the switch, not by the one it came in with.
#[test]
fn a_task_moved_while_it_runs_is_charged_to_its_new_cgroup() {
    let _one = ONE.lock().unwrap_or_else(|p| p.into_inner());
    let Some(mut sb) = setup("moved") else { return };
    let (ev, unit) = event();
    if unit != "cpu-clock ns" {
        return cachescope_testkit::skip("compares cpu-clock with cpu.stat; this host counts cycles");
    }
    let cpus = cpus();
    let Some(mut attr) = followed_attribution(ev, &cpus) else { return };
    let ino = |p: &Path| std::fs::metadata(p).unwrap().ino();
    let (from, to) = (sb.add("from").unwrap(), sb.add("to").unwrap());
    let pid = sb.spawn("from", cmd(&["sh", "-c", "while :; do :; done"])).unwrap();
    let t0 = Instant::now();
    while used(&from) < 100_000 {
        assert!(t0.elapsed() < HANG, "the loop never ran");
        std::thread::sleep(Duration::from_millis(10));
    }
    // Everything charged so far made quiet, as the collector would (this test's own cgroup,
    // the host's, the loop's first one); the loop's new cgroup is not judged yet.
    let seen: std::collections::BTreeSet<u64> =
        attr.drain_all().unwrap().iter().map(|r| r.cgroup_id).filter(|&c| c != IDLE).collect();
    for &c in seen.iter().chain([ino(&from)].iter()) {
        attr.quiet(c).unwrap();
    }
    // Back on a CPU as a quiet task (a stop and a continue), then moved while it runs.
    // SAFETY: kill(2) on the child we spawned, which the sandbox has not reaped.
    unsafe { libc::kill(pid as i32, libc::SIGSTOP) };
    std::thread::sleep(Duration::from_millis(20));
    let before = used(&from);
    // SAFETY: as above.
    unsafe { libc::kill(pid as i32, libc::SIGCONT) };
    while used(&from) < before + 30_000 {
        assert!(t0.elapsed() < HANG, "the loop never ran again");
        std::thread::sleep(Duration::from_millis(5));
    }
    std::fs::write(to.join("cgroup.procs"), pid.to_string()).unwrap();
    let u0 = used(&to);
    let mut rows = Vec::new();
    while used(&to) < u0 + 300_000 {
        assert!(t0.elapsed() < HANG, "the loop ran {} ms in its new cgroup", (used(&to) - u0) / 1000);
        std::thread::sleep(Duration::from_millis(20));
        rows.extend(attr.drain().unwrap());
    }
    // Off its CPU for good: its last stint is charged at that switch.
    // SAFETY: kill(2) on the child we spawned, which the sandbox has not reaped.
    unsafe { libc::kill(pid as i32, libc::SIGSTOP) };
    std::thread::sleep(Duration::from_millis(50));
    let ran = (used(&to) - u0) * 1000;
    rows.extend(attr.drain_all().unwrap());
    let charged: u64 = rows.iter().filter(|r| r.cgroup_id == ino(&to)).map(|r| r.values[0]).sum();
    println!("moved while running: charged {charged} ns to its new cgroup, cpu.stat {ran} ns there");
    assert!(charged as f64 >= 0.9 * ran as f64, "charged {charged} ns of the {ran} ns it ran in its new cgroup");
}

/// The slot ring holds six cgroups per CPU and slot, and 256 slots per CPU until read. A
/// reader away for 600 ms finds a CPU's records still unread when its charges come back to
/// them; those go to the hash (as do a slot's charges beyond six cgroups: eight sleepers
/// trading one CPU, the count printed), and per CPU everything is still charged once.
#[test]
fn charges_the_ring_cannot_hold_go_to_the_hash_and_are_counted_once() {
    let _one = ONE.lock().unwrap_or_else(|p| p.into_inner());
    let Some(mut sb) = setup("ring") else { return };
    if Command::new("python3").arg("-c").arg("pass").status().map_or(true, |s| !s.success()) {
        cachescope_testkit::skip("needs python3 (the cgroups' sleepers)");
        return;
    }
    let (ev, _) = event();
    let cpus = cpus();
    let Some(mut attr) = followed_attribution(ev, &cpus) else { return };
    let mut per_cpu: Vec<CounterGroup> =
        cpus.iter().map(|&c| CounterGroup::open(&Target::Cpu(c), &[ev]).unwrap()).collect();
    let (_, start) = drain_bracketed(&mut attr, &mut per_cpu, &cpus);
    let base_totals = attr.cpu_totals().to_vec();
    let hash0 = attr.stats().unwrap().hash_charges;
    let first = cpus[0].to_string();
    let mut ids = Vec::new();
    for i in 0..8 {
        let name = format!("s{i}");
        let dir = sb.add(&name).unwrap();
        ids.push(std::fs::metadata(&dir).unwrap().ino());
        attr.follow(*ids.last().unwrap()).unwrap();
        let sleeper = "import time\nwhile True: time.sleep(0.0001)";
        sb.spawn(&name, cmd(&["taskset", "-c", &first, "python3", "-c", sleeper])).unwrap();
    }
    // Drained as the collector does for a while, then not at all for 600 ms.
    let mut rows = Vec::new();
    for _ in 0..25 {
        std::thread::sleep(Duration::from_millis(20));
        rows.extend(attr.drain().unwrap());
    }
    let mid = attr.stats().unwrap().hash_charges;
    std::thread::sleep(Duration::from_millis(600));
    let (rest, end) = drain_bracketed(&mut attr, &mut per_cpu, &cpus);
    rows.extend(rest);
    let st = attr.stats().unwrap();
    let charged: u64 = rows.iter().filter(|r| ids.contains(&r.cgroup_id)).map(|r| r.values[0]).sum();
    let busiest = rows
        .iter()
        .filter(|r| ids.contains(&r.cgroup_id))
        .fold(BTreeMap::<(u64, u32), u64>::new(), |mut m, r| {
            *m.entry((r.slot, r.domain)).or_default() += 1;
            m
        })
        .into_values()
        .max()
        .unwrap_or(0);
    println!(
        "the sleepers: {charged} charged, at most {busiest} of them in one slot; charges to the hash: {} while \
         drained, {} in all; stats {st:?}",
        mid - hash0,
        st.hash_charges - hash0
    );
    assert!(charged > 0, "the sleepers were charged");
    assert!(
        st.hash_charges > mid,
        "a reader away for 600 ms: the CPU's records were not free, charges went to the hash"
    );
    charged_once_per_cpu(&attr, &cpus, &base_totals, &start, &end, st.lost_counts);
    assert_eq!(st.read_failures, 0);
}
