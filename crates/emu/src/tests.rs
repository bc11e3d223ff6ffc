use super::*;
use cachescope_hw::msr::{CTR_ERROR, CTR_UNAVAILABLE};
use proptest::prelude::*;

fn scenario(model: &str, extra: &str) -> Scenario {
    let text = format!(
        "[platform]\nmodel = \"{model}\"\nl3_mib = 32\ndomains = 2\ncpus_per_domain = 4\n{extra}\n\
         [[container]]\nname = \"a\"\ncpus = [0, 1]\nfootprint_mib = 24\nbandwidth_mbps = 4000\nlocal_fraction = 0.5\n\
         [[container]]\nname = \"b\"\ncpus = [2]\nfootprint_mib = 20\nbandwidth_mbps = 2000\nstart_ms = 50\nstop_ms = 500\n"
    );
    Scenario::parse(&text, Path::new("t.toml")).unwrap()
}

fn read_ctr(p: &EmuPlatform, cpu: u32, event: u64, rmid: u64) -> u64 {
    p.write(cpu, IA32_QM_EVTSEL, (rmid << 32) | event).unwrap();
    p.read(cpu, IA32_QM_CTR).unwrap()
}

#[test]
fn embedded_models_and_unknown_model() {
    assert!(model_names().contains(&"intel-xeon-platinum-8160"));
    assert!(load_model("intel-xeon-w9-3475x").is_ok());
    let e = load_model("pentium-pro").unwrap_err().to_string();
    assert!(e.contains("pentium-pro") && e.contains("amd-epyc-7742"), "{e}");
    let e = EmuPlatform::new(&scenario("intel-core-i7-4770", "")).err().unwrap().to_string();
    assert!(e.contains("cannot be emulated") && e.contains("PQM"), "{e}");
}

#[test]
fn cpuid_is_the_vectors() {
    let p = EmuPlatform::new(&scenario("intel-xeon-platinum-8160", "")).unwrap();
    let i = CpuInfo::decode(&CpuidSnapshot::capture(&p).unwrap());
    assert_eq!(i.monitoring.l3.as_ref().unwrap().max_rmid, 191);
    assert_eq!(i.monitoring.l3.unwrap().upscale_factor, 98304);
}

#[test]
fn the_mbm_correction_factor_follows_the_vector() {
    use cachescope_hw::mbm_cf::MbmCorrection;
    let of = |model: &str| {
        let p = EmuPlatform::new(&scenario(model, "")).unwrap();
        MbmCorrection::for_cpu(&CpuInfo::decode(&CpuidSnapshot::capture(&p).unwrap()))
    };
    // Skylake-SP (family 6 model 0x55), 192 RMIDs: entry 23 of Linux's table.
    let c = of("intel-xeon-platinum-8160").expect("Skylake-X is corrected");
    assert_eq!((c.above_rmid, c.factor_q20), (127, 1_016_850));
    assert_eq!((c.apply(127, 1000), c.apply(128, 1000)), (1000, 969));
    // Broadwell-EP (model 0x4F), 64 RMIDs: entry 7, a factor of 1. Others: none.
    for model in ["intel-xeon-e5-2620v4", "intel-xeon-platinum-8351n", "amd-epyc-7742"] {
        assert_eq!(of(model), None, "{model}");
    }
}

#[test]
fn general_protection_paths() {
    let p = EmuPlatform::new(&scenario("intel-xeon-platinum-8160", "")).unwrap();
    // RMID above the maximum (191; the field is 8 bits wide, so 192..=255 fit but are invalid).
    assert!(matches!(p.write(0, IA32_PQR_ASSOC, 192), Err(MsrError::GeneralProtection { .. })));
    // Reserved bits between the RMID field and CLOS.
    assert!(matches!(p.write(0, IA32_PQR_ASSOC, 1 << 20), Err(MsrError::GeneralProtection { .. })));
    // CLOS bits are fine and kept.
    p.write(0, IA32_PQR_ASSOC, (3 << 32) | 7).unwrap();
    assert_eq!(p.read(0, IA32_PQR_ASSOC).unwrap(), (3 << 32) | 7);
    // Unknown MSRs, and writes to the read-only counter.
    assert!(matches!(p.read(0, 0x123), Err(MsrError::GeneralProtection { msr: 0x123, op: MsrOp::Read, .. })));
    assert!(matches!(p.write(0, IA32_QM_CTR, 0), Err(MsrError::GeneralProtection { .. })));
    assert!(matches!(p.read(8, IA32_PQR_ASSOC), Err(MsrError::NoDevice { cpu: 8, .. })));
}

#[test]
fn error_and_unavailable_bits() {
    let p = EmuPlatform::new(&scenario("intel-xeon-e5-2699v3", "")).unwrap();
    // Haswell-EP: occupancy only, so MBM events are Error; unknown event ids too.
    assert_eq!(read_ctr(&p, 0, 2, 0), CTR_ERROR);
    assert_eq!(read_ctr(&p, 0, 9, 0), CTR_ERROR);
    // RMID 5 has never carried data: Unavailable.
    assert_eq!(read_ctr(&p, 0, 1, 5), CTR_UNAVAILABLE);
    p.tag_container("a", Some(5));
    p.advance(Duration::from_millis(10));
    let v = read_ctr(&p, 0, 1, 5);
    assert_eq!(v & (CTR_ERROR | CTR_UNAVAILABLE), 0);
    // Occupancy is quantized to the upscale unit.
    let truth = p.true_occupancy(0, 5);
    assert_eq!(v, (truth / 73728.0).floor() as u64);
    // RMIDs are scoped per domain: domain 1 (CPU 4) has no data for RMID 5.
    assert_eq!(read_ctr(&p, 4, 1, 5), CTR_UNAVAILABLE);
}

#[test]
fn mbm_wraps_at_the_counter_width() {
    let p = EmuPlatform::new(&scenario("amd-epyc-7742", "counter_width = 20")).unwrap();
    assert_eq!(p.counter_width(), 20);
    p.tag_container("a", Some(1));
    // 4000 MB/s for 1 s in 64-byte units: 62.5e6 counts, far past 2^20.
    p.advance(Duration::from_secs(1));
    let v = read_ctr(&p, 0, 2, 1);
    assert!(v < (1 << 20));
    assert_eq!(v, (4e9 / 64.0) as u64 % (1 << 20));
}

#[test]
fn deterministic_for_a_seed() {
    let run = |seed: u64| {
        let p =
            EmuPlatform::new(&scenario("intel-xeon-platinum-8160", &format!("seed = {seed}\njitter = 0.3"))).unwrap();
        p.tag_container("a", Some(1));
        p.advance(Duration::from_millis(20));
        p.true_occupancy(0, 1)
    };
    assert_eq!(run(7), run(7));
    assert_ne!(run(7), run(8));
}

/// Host-driven containers: MBM is exactly the traffic set, a lone streamer fills the L3 and no
/// more, a second one takes a share by evicting, a stopped one's lines stay until evicted, and a
/// restarted name is a new container.
#[test]
fn driven_containers() {
    let platform = PlatformSpec {
        model: "intel-xeon-platinum-8160".into(),
        l3_mib: 32.0,
        domains: 2,
        cpus_per_domain: 1,
        counter_width: None,
        seed: 0,
        jitter: 0.0,
    };
    let p = EmuPlatform::new(&Scenario::platform_only(platform).unwrap()).unwrap();
    assert!(p.add_driven("x") && !p.add_driven("x"));
    assert!(p.running_containers() == ["x"]);
    p.tag_container("x", Some(3));
    // Nothing set yet: no traffic, no data.
    p.advance(Duration::from_millis(5));
    assert_eq!(read_ctr(&p, 0, 2, 3), CTR_UNAVAILABLE);
    assert!(p.set_rate("x", 0, 2e9) && !p.set_rate("x", 2, 1.0) && !p.set_rate("y", 0, 1.0));
    p.advance(Duration::from_millis(100));
    // 2 GB/s for 100 ms, in upscale units (MBM counts scale by the same factor as occupancy).
    assert_eq!(read_ctr(&p, 0, 2, 3), (2e8_f64 / 98304.0).floor() as u64);
    assert_eq!(read_ctr(&p, 1, 2, 3), CTR_UNAVAILABLE, "no traffic was set in domain 1");
    // 200 MB of fills into 32 MiB: full, never over.
    let l3 = 32.0 * 1024.0 * 1024.0;
    let occ = p.container_occupancy(0, "x");
    assert!(occ > 0.99 * l3 && occ <= l3 * (1.0 + 1e-9), "{occ}");
    assert!(p.add_driven("y"));
    p.tag_container("y", Some(4));
    p.set_rate("y", 0, 2e9);
    p.advance(Duration::from_millis(200));
    let (x, y) = (p.container_occupancy(0, "x"), p.container_occupancy(0, "y"));
    assert!(x + y <= l3 * (1.0 + 1e-9) && y > 0.3 * l3 && x > 0.3 * l3, "x {x} y {y}");
    // x stops: its lines stay, y's fills evict them.
    assert!(p.stop_driven("x") && !p.stop_driven("x"));
    assert_eq!(p.running_containers(), ["y"]);
    let before = p.true_occupancy(0, 3);
    p.advance(Duration::from_millis(100));
    let after = p.true_occupancy(0, 3);
    assert!(after < before && after > 0.0, "{before} → {after}");
    // x comes back: a new container with no lines of its own yet (traffic 0).
    assert!(p.add_driven("x"));
    assert!(p.set_rate("x", 0, 0.0));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Random containers on one domain: nobody exceeds its footprint or the L3, the domain
    /// never holds more than the L3, and a container alone converges to its footprint.
    #[test]
    fn model_invariants(specs in proptest::collection::vec((1.0f64..40.0, 0.0f64..8000.0, 0u64..200, 0u64..400), 1..6), seed in 0u64..(i64::MAX as u64)) {
        let mut text = format!("[platform]\nmodel = \"amd-epyc-7742\"\nl3_mib = 32\ndomains = 1\ncpus_per_domain = 4\nseed = {seed}\njitter = 0.2\n");
        for (i, (fp, bw, start, len)) in specs.iter().enumerate() {
            text.push_str(&format!("[[container]]\nname = \"c{i}\"\ncpus = [{}]\nfootprint_mib = {fp}\nbandwidth_mbps = {bw}\nstart_ms = {start}\nstop_ms = {}\n", i % 4, start + len + 1));
        }
        let s = Scenario::parse(&text, Path::new("p.toml")).unwrap();
        let p = EmuPlatform::new(&s).unwrap();
        for (i, _) in specs.iter().enumerate() {
            p.tag_container(&format!("c{i}"), Some(i as u32 + 1));
        }
        let l3 = 32.0 * 1024.0 * 1024.0;
        for _ in 0..60 {
            p.advance(Duration::from_millis(10));
            let st = p.lock();
            prop_assert!(st.model.domain_total(0) <= l3 * (1.0 + 1e-9));
            for (i, (fp, ..)) in specs.iter().enumerate() {
                let occ = st.model.container_occupancy(0, &format!("c{i}"));
                prop_assert!(occ <= fp * 1024.0 * 1024.0 * (1.0 + 1e-9) && occ <= l3 * (1.0 + 1e-9));
            }
        }
    }
}
