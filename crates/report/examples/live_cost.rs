//! The live noisy-neighbour finder's price, for callgrind (docs/cost.md): N containers in one
//! L3 domain, 1 ms rows for a number of intervals, fed to the finder as the engine feeds it,
//! or (`rows-only`) only made, the baseline to subtract.
//!
//!     valgrind --tool=callgrind --callgrind-out-file=/dev/null \
//!         target/release/examples/live_cost N INTERVALS [rows-only]
#![allow(clippy::unwrap_used)] // a benchmark: a panic is the report

use cachescope_engine::row::{ContainerMeta, Pmu, Row, Status};
use cachescope_report::live::LiveFinder;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let n: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(100);
    let intervals: i64 = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(1000);
    let feed = args.get(3).is_none_or(|a| a != "rows-only");
    let cs: Vec<_> = (0..n).map(|i| ContainerMeta::named(&format!("c{i:05}"))).collect();
    let mut f = LiveFinder::new(cachescope_sinks::noisy::Board::shared());
    f.set_l3(&[(0, 32 << 20)]);
    let t0: i64 = 1_790_000_000_000_000_000;
    let mut made = 0u64;
    for k in 1..=intervals {
        let t = t0 + k * 1_000_000;
        let rows: Vec<Row> = cs
            .iter()
            .enumerate()
            .map(|(i, c)| Row {
                time_ns: t,
                interval_ns: 1_000_000,
                container: c.clone(),
                domain: 0,
                rmid: None,
                llc_occupancy_bytes: Some(((i % 64) as u64 + 1) << 16),
                mbm_total_bytes: Some(64 * (i as u64 % 7 + 1)),
                mbm_local_bytes: None,
                pmu: Pmu {
                    cycles: Some(2_000_000),
                    instructions: Some(1_500_000),
                    llc_references: None,
                    llc_misses: None,
                    lost: false,
                },
                cpu_ns: Some(1_000_000),
                status: Status::Ok,
                mbm_counter: None,
            })
            .collect();
        made += rows.len() as u64;
        if feed {
            f.rows(&rows);
        }
    }
    f.finish();
    println!(
        "{n} containers x {intervals} intervals: {made} rows{}",
        if feed { " fed to the finder" } else { " made" }
    );
}
