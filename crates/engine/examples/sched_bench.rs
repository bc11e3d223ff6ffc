//! Lateness of the sampling clock at 1 ms (and 100 us), timerfd with absolute deadlines
//! against a thread::sleep loop with absolute deadlines in the same run.
//! `cargo run --release -p cachescope-engine --example sched_bench [-- SECONDS]`

use cachescope_engine::{Lateness, Ticker};
use std::time::{Duration, Instant};

fn main() {
    let secs: u64 = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(5);
    for interval in [Duration::from_millis(1), Duration::from_micros(100)] {
        let n = (Duration::from_secs(secs).as_nanos() / interval.as_nanos()) as u64;
        let mut t = match Ticker::new(interval) {
            Ok(t) => t,
            Err(e) => {
                eprintln!("sched_bench: {e}");
                std::process::exit(3);
            }
        };
        for _ in 0..n {
            if t.wait().is_err() {
                break;
            }
        }
        let mut sleep = Lateness::default();
        let start = Instant::now();
        for i in 1..=n as u32 {
            let due = start + interval * i;
            if let Some(d) = due.checked_duration_since(Instant::now()) {
                std::thread::sleep(d);
            }
            sleep.record(Instant::now().saturating_duration_since(due));
        }
        let l = &t.lateness;
        println!(
            "{interval:>6?} x {n}: timerfd lateness p50 {:?} p99 {:?} max {:?}, missed {} | thread::sleep p50 {:?} p99 {:?} max {:?}",
            l.quantile(0.5),
            l.quantile(0.99),
            l.max(),
            t.missed,
            sleep.quantile(0.5),
            sleep.quantile(0.99),
            sleep.max()
        );
    }
}
