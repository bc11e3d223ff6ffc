#!/usr/bin/env bash
# What a context switch costs cachescope's eBPF program with real counters (issue 40, item 5),
# on the RDT machine (tools/rdt-qemu): the same guest (tools/rdt-qemu/guest/switches.sh: a
# load of RATE switches a second in a followed container, SECS seconds of the programs' runs
# and run time by kernel.bpf_stats_enabled) on Skylake-Server with the device's PMU (the
# program reads cycles, instructions, LLC references and misses, and cpu-clock at every
# switch), the same with two general counters and the NMI watchdog (the events multiplexed, so
# each read estimates and keeps its cgroup's rates) and without it (cpu-clock only). Under
# -icount shift=3 the guest's clock advances 8 ns per instruction, so a run's time is its
# instructions × 8 ns: the table gives both, and the instructions are the figure to compare
# (what TCG takes per instruction, or an RDPMC on silicon, is not in them). Needs root (the initramfs) and the RDT machine's QEMU (built once).
#
#   scripts/bench-switches-rdt.sh [KERNEL...]   (default: this release's and unstable's)
# RATE (default 2000), SECS (default 10), MODES (default "on mux off") in the environment, and
# BIN=PATH to measure that cachescope binary (a build of another commit) instead of this tree's.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "bench-switches-rdt.sh: run as root (the guest's initramfs)" >&2; exit 2; }
rate=${RATE:-2000}
secs=${SECS:-10}
kernels=("$@")
[ ${#kernels[@]} -gt 0 ] || kernels=("" unstable)
modes=${MODES:-on mux off}
for m in $modes; do
  case $m in
    on | mux | off) ;;
    *) echo "bench-switches-rdt.sh: MODES: unknown mode \"$m\" (on, mux, off)" >&2; exit 2 ;;
  esac
done
bin=${BIN:-$(scripts/build.sh -q)}
load=$(dirname "$(scripts/build.sh -q --example switch_load)")/examples/switch_load
qemu=$(tools/rdt-qemu/build.sh | tail -1)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
device="-device rdt,llc-size=4M,llc-ways=16,rmids=32"

echo "eBPF program per context switch on the RDT machine (Skylake-Server, -icount shift=3: 8 ns an instruction); a load of $rate switches/s in a followed container, ${secs} s"
printf "%-10s %-26s %9s %9s %9s %12s\n" kernel "counters read" "sw/s" "runs/s" "ns/run" "instr/run"
for kernel in "${kernels[@]}"; do
  for pmu in $modes; do
    machine="-cpu Skylake-Server -smp 2,sockets=2 $device"
    what="cpu-clock only"
    watchdog=0
    case $pmu in
      on)
        machine="$machine,pmu=on,pmu-counters=8"
        what="4 PMU events + cpu-clock"
        ;;
      mux)
        # Two general counters and the NMI watchdog: three of the events take turns (the
        # estimates and their per-cgroup rates, docs/data.md).
        machine="$machine,pmu=on,pmu-counters=2"
        what="the same, multiplexed"
        watchdog=1
        ;;
    esac
    out=$work/$pmu-${kernel:-default}
    if ! CACHESCOPE_QEMU="$qemu" CACHESCOPE_QEMU_MACHINE="$machine" CACHESCOPE_QEMU_ICOUNT=shift=3,sleep=off \
      CACHESCOPE_QEMU_APPEND="nmi_watchdog=$watchdog rate=$rate secs=$secs" CACHESCOPE_QEMU_EXTRA="$load" \
      CACHESCOPE_GUEST_KMOD=0 CACHESCOPE_GUEST_KERNEL="$kernel" \
      scripts/guest-qemu.sh "$bin" "$out" tools/rdt-qemu/guest/switches.sh >"$out.said" 2>&1; then
      echo "bench-switches-rdt.sh: the guest (kernel ${kernel:-default}, pmu=$pmu) failed:" >&2
      tail -30 "$out.said" >&2
      exit 1
    fi
    r=$(grep '^CS-RESULT switches_per_s=' "$out.said")
    val() { echo "$r" | tr ' ' '\n' | sed -n "s/^$1=//p"; }
    # Linux's PMU driver with the device's PMU, none without (cpu-clock only).
    driver=$(sed -n 's/^CS-RESULT perf_driver=//p' "$out.said")
    case "$pmu:$driver" in
      on:*Intel*|mux:*Intel*|off:|off:*software_events_only*) ;;
      *) echo "bench-switches-rdt.sh: pmu=$pmu, but the guest's perf said \"$driver\"" >&2; exit 1 ;;
    esac
    if [ $pmu = mux ] && ! grep -q '^CS-STDERR .*PMU multiplexing: ' "$out.said"; then
      echo "bench-switches-rdt.sh: pmu-counters=2 with the watchdog, but cachescope said no multiplexing" >&2
      exit 1
    fi
    printf "%-10s %-26s %9s %9s %9s %12s\n" "${kernel:-default}" "$what" "$(val switches_per_s)" "$(val runs_per_s)" \
      "$(val ns_per_run)" "$(($(val ns_per_run) / 8))"
  done
done
