//! Context switches at a chosen rate, for measuring what each costs the eBPF program
//! (scripts/bench-switches.sh): two threads on one CPU pass a byte back and forth through a
//! socket pair until the kernel's count of its switches (getrusage) reaches RATE/1000 more each
//! millisecond, then sleep to the next millisecond. Prints the switches it made per second.
//!
//! Usage: switch_load RATE SECONDS [CPU]   (CPU: the last online one by default)

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

fn pin(cpu: usize) -> std::io::Result<()> {
    // SAFETY: a zeroed cpu_set_t is the empty set; CPU_SET writes within it and
    // sched_setaffinity reads it, both given its size.
    let rc = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set)
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// This process's context switches so far (voluntary and not, every thread).
fn switches() -> u64 {
    // SAFETY: a zeroed rusage is valid; getrusage fills it.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `u` outlives the call.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    (u.ru_nvcsw + u.ru_nivcsw) as u64
}

fn main() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: switch_load RATE SECONDS [CPU]";
    let num = |i: usize| -> Result<u64, String> {
        let a = args.get(i).ok_or(usage)?;
        a.parse().map_err(|_| format!("switch_load: {a:?} is not a whole number ({usage})"))
    };
    let (rate, secs) = (num(0)?, num(1)?);
    let cpu = match args.get(2) {
        Some(_) => num(2)? as usize,
        None => std::thread::available_parallelism().map(|n| n.get() - 1).unwrap_or(0),
    };
    let (mut a, mut b) = UnixStream::pair().map_err(|e| format!("switch_load: socketpair: {e}"))?;
    let echo = std::thread::spawn(move || -> std::io::Result<()> {
        pin(cpu)?;
        let mut buf = [0u8; 1];
        loop {
            if b.read(&mut buf)? == 0 {
                return Ok(());
            }
            b.write_all(&buf)?;
        }
    });
    pin(cpu).map_err(|e| format!("switch_load: CPU {cpu}: {e}"))?;
    let (s0, t0) = (switches(), Instant::now());
    let end = t0 + Duration::from_secs(secs);
    let mut buf = [0u8; 1];
    let mut next = t0;
    let mut due = 0;
    while Instant::now() < end {
        // Round trips until the kernel's count reaches this millisecond's share (a round trip
        // is two or three switches, as wake-ups preempt or not, and each sleep one more).
        due += rate / 1000;
        while switches() - s0 < due {
            a.write_all(&buf).and_then(|_| a.read_exact(&mut buf)).map_err(|e| format!("switch_load: {e}"))?;
        }
        next += Duration::from_millis(1);
        if let Some(d) = next.checked_duration_since(Instant::now()) {
            std::thread::sleep(d);
        }
    }
    let (made, took) = (switches() - s0, t0.elapsed().as_secs_f64());
    drop(a);
    let _ = echo.join();
    println!("switch_load: {:.0} switches/s ({made} in {took:.2} s, asked {rate}/s on CPU {cpu})", made as f64 / took);
    Ok(())
}
