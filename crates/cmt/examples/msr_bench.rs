//! Benchmark of the MSR read protocol on the emulated platform: MSR operations and wall time
//! per sample (every RMID × occupancy, MBM total, MBM local, in every L3 domain) for 16, 64
//! and 256 RMIDs. Run: `cargo run --release -p cachescope-cmt --example msr_bench`.
//!
//! The emulator's MSR cost is a mutex and a map lookup, not the ~1-2 µs of a real rdmsr/wrmsr
//! through /dev/cpu/N/msr; the op counts carry over to silicon, the times do not.

use cachescope_cmt::{Caps, Reader, Retries};
use cachescope_emu::{EmuPlatform, Scenario};
use cachescope_hw::msr::Event;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let repeats = 200;
    println!(
        "{:>6} {:>8} {:>14} {:>16} {:>16} {:>10}",
        "RMIDs", "domains", "MSR ops/sample", "median us/sample", "p99 us/sample", "ns/read"
    );
    let mut base = None;
    for n in [16u32, 64, 256] {
        let mut text = String::from(
            "[platform]\nmodel = \"intel-xeon-w9-3475x\"\nl3_mib = 105\ndomains = 2\ncpus_per_domain = 8\n",
        );
        text.push_str("[[container]]\nname = \"load\"\ncpus = [0, 8]\nfootprint_mib = 64\nbandwidth_mbps = 20000\n");
        let s = Scenario::parse(&text, Path::new("bench.toml"))?;
        let emu = Arc::new(EmuPlatform::new(&s)?);
        for r in 0..n {
            emu.tag_container("load", Some(r));
            emu.advance(Duration::from_millis(1));
        }
        let l3 = emu.l3().clone();
        let caps = Caps::from_l3(&l3, emu.cpu_info().monitoring.max_rmid_any.unwrap_or(l3.max_rmid));
        let reader = Reader::new(emu.clone(), caps.clone(), &emu.domains(), Retries::default());
        let mut times = Vec::with_capacity(repeats);
        let ops0 = reader.stats.msr_ops.load(Ordering::Relaxed);
        for _ in 0..repeats {
            emu.advance(Duration::from_millis(1));
            let t = Instant::now();
            for d in reader.domain_ids() {
                for r in 0..n {
                    for e in Event::ALL {
                        std::hint::black_box(reader.read(d, r, e)?);
                    }
                }
            }
            times.push(t.elapsed());
        }
        let ops = (reader.stats.msr_ops.load(Ordering::Relaxed) - ops0) / repeats as u64;
        times.sort_unstable();
        let med = times[repeats / 2];
        let p99 = times[repeats * 99 / 100];
        let reads = u64::from(n) * 3 * reader.domain_ids().len() as u64;
        let ratio = match base {
            None => {
                base = Some(med);
                String::new()
            }
            Some(b) => format!("  ({:.1}x the 16-RMID time)", med.as_secs_f64() / b.as_secs_f64()),
        };
        println!(
            "{:>6} {:>8} {:>14} {:>16.1} {:>16.1} {:>10.0}{ratio}",
            n,
            reader.domain_ids().len(),
            ops,
            med.as_secs_f64() * 1e6,
            p99.as_secs_f64() * 1e6,
            med.as_nanos() as f64 / reads as f64
        );
    }
    Ok(())
}
