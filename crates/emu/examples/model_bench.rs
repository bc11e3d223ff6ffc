//! Cost of the emulator's cache model alone, for the scenario of scripts/bench-record.sh (100
//! containers on 2 L3 domains, each tagged with its own RMID): wall time per 1 ms step of
//! virtual time, i.e. the share of a core the emulation itself takes at 1 ms on the wall clock.
//! Also the cost of the 600 emulated counter reads a 1 ms tick makes (EVTSEL write + CTR read
//! for 3 events × 100 RMIDs × 2 domains), which stand in for real RDMSRs. `record` on the
//! emulated platform pays both on top of the collector's own work.
//! Usage: cargo run --release -p cachescope-emu --example model_bench [STEPS]

use cachescope_emu::{EmuPlatform, Scenario};
use cachescope_hw::msr::{MsrDevice, IA32_QM_CTR, IA32_QM_EVTSEL};
use std::time::{Duration, Instant};

fn scenario() -> String {
    let mut s = String::from(
        "[platform]\nmodel = \"intel-xeon-platinum-8160\"\nl3_mib = 32\ndomains = 2\ncpus_per_domain = 8\n",
    );
    for i in 0..100u32 {
        s.push_str(&format!(
            "\n[[container]]\nname = \"c{i:02}\"\ncpus = [{}]\nfootprint_mib = {}\nbandwidth_mbps = {}\nlocal_fraction = 0.8\nstart_ms = 0\n",
            i % 16,
            1 + i % 4,
            50 + (i * 37) % 450
        ));
    }
    s
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let steps: u32 = std::env::args().nth(1).map(|a| a.parse()).transpose()?.unwrap_or(20_000);
    let sc = Scenario::parse(&scenario(), std::path::Path::new("bench.toml"))?;
    let (mut model, mut reads) = (Vec::new(), Vec::new());
    let mut sink = 0u64;
    for _ in 0..5 {
        let p = EmuPlatform::new(&sc)?;
        for i in 0..100u32 {
            p.tag_container(&format!("c{i:02}"), Some(i + 1));
        }
        let t0 = Instant::now();
        for _ in 0..steps {
            p.advance(Duration::from_millis(1));
        }
        model.push(t0.elapsed().as_secs_f64() / f64::from(steps));
        let t0 = Instant::now();
        let ticks = steps / 10;
        for _ in 0..ticks {
            for cpu in [0u32, 8] {
                for rmid in 1..=100u64 {
                    for ev in 1..=3u64 {
                        p.write(cpu, IA32_QM_EVTSEL, (rmid << 32) | ev)?;
                        sink = sink.wrapping_add(p.read(cpu, IA32_QM_CTR)?);
                    }
                }
            }
        }
        reads.push(t0.elapsed().as_secs_f64() / f64::from(ticks));
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(|a, b| a.total_cmp(b));
        v[v.len() / 2]
    };
    let (m, r) = (median(&mut model), median(&mut reads));
    println!(
        "emulator model alone: {:.1} µs per 1 ms step (median of 5 × {steps} steps) = {:.1} % of one core at 1 ms",
        m * 1e6,
        m * 1e3 * 100.0
    );
    println!(
        "emulated counter reads: {:.1} µs per tick of 600 reads (median of 5 × {} ticks) = {:.1} % of one core at 1 ms (checksum {sink})",
        r * 1e6,
        steps / 10,
        r * 1e3 * 100.0
    );
    Ok(())
}
