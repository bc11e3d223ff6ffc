#!/usr/bin/env bash
# Everything the collector costs, as root (issue 24): for each path this host has and for 10,
# 100 and 1,000 containers at 1 ms, `cachescope record` for SECONDS (default 10), RUNS times
# (default 3), medians of:
#   proc %   the process's own CPU (user + system) in % of one core
#   ebpf %   its eBPF programs' CPU in the kernel (kernel.bpf_stats_enabled on for the run:
#            program run time, plus the tick timers, which the kernel does not count)
#   whole %  their sum
#   RSS MB   peak resident memory
#   MB/h     bytes written per hour (Parquet, sparse)
#   over %   share of intervals that read only part of the containers (overload)
# Paths: `none` (eBPF PMU columns on real cgroups), `emu-host` (the emulated RDT platform
# driven by those cgroups' measured CPU time, --emulate) and `emu-scenario` (a scenario of
# emulated containers: no processes, so no eBPF; scripts/many-containers.sh). The real cgroups
# each hold one sleeping process, except two that spin (one per CPU of our 2-CPU machines).
# The kernel module's cost is measured in its QEMU guest by scripts/bench-kmod.sh.
#
# Then the eBPF ticks against CPU count: QEMU/TCG guests (Debian's kernel) with VCPUS vCPUs
# (default "2 16 64"), idle but for one followed busy container, 5 s per tick mode:
# eBPF program runs and timer callbacks per second (the work done) and their time. TCG
# timings are distorted (vCPU threads share this host's 2 cores, and its clock source is
# emulated), so runs per second are the comparable figure there; every-cpu is skipped above
# 16 vCPUs, where TCG cannot deliver its ticks.
#
# Usage: scripts/bench-cost.sh [SECONDS [RUNS]]; CONTAINERS="10 100" and VCPUS="2 16" narrow
# it, VCPUS="" skips the guests; CACHESCOPE=PATH measures that binary instead of this tree's
# release build (an older one says nothing of its eBPF time: its column reads 0, and it has no
# CACHESCOPE_BPF_TICKS: its every-CPU row is its only mode).
set -euo pipefail
secs=${1:-10}
runs=${2:-3}
sizes=${CONTAINERS:-10 100 1000}
vcpus=${VCPUS-2 16 64}
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "bench-cost.sh: run as root (cgroups, eBPF)" >&2; exit 2; }
if [ -n "${CACHESCOPE:-}" ]; then
  bin=$(realpath "$CACHESCOPE")
else
  cargo build --release --locked -q -p cachescope
  bin=$PWD/target/release/cachescope
fi
cg=$(awk '$3 == "cgroup2" { print $2; exit }' /proc/mounts)
[ -n "$cg" ] || { echo "bench-cost.sh: no cgroup v2 mounted" >&2; exit 2; }
base=$cg/cachescope-bench-$$
work=$(mktemp -d)
stats_was=$(cat /proc/sys/kernel/bpf_stats_enabled)
cleanup() {
  echo "$stats_was" >/proc/sys/kernel/bpf_stats_enabled
  for d in "$base"/*/; do
    [ -d "$d" ] || continue
    while read -r p; do kill -9 "$p" 2>/dev/null || true; done <"$d/cgroup.procs"
  done
  sleep 0.3
  for d in "$base"/*/; do [ -d "$d" ] && rmdir "$d" 2>/dev/null || true; done
  rmdir "$base" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
echo 1 >/proc/sys/kernel/bpf_stats_enabled

# Grow the set of cgroups to n (they are kept from one size to the next).
have=0
cgroups() {
  mkdir -p "$base"
  while [ "$have" -lt "$1" ]; do
    d=$base/c$(printf %04d "$have")
    mkdir "$d"
    if [ "$have" -lt 2 ]; then
      # shellcheck disable=SC2016 # $$ is the child's
      sh -c 'echo $$ >"$1/cgroup.procs"; exec sh -c "while :; do :; done"' sh "$d" >/dev/null 2>&1 &
      disown
    else
      # shellcheck disable=SC2016
      sh -c 'echo $$ >"$1/cgroup.procs"; exec sleep 100000' sh "$d" >/dev/null 2>&1 &
      disown
    fi
    have=$((have + 1))
  done
  sleep 1
}

# One run: prints "proc ebpf rss_mb mb_per_hour over" (percentages of one core, %).
measure() {
  local out=$work/rec err=$work/err
  rm -rf "$out"
  /usr/bin/time -f 'TIME %e %U %S %M' "$bin" record "$@" --interval 1ms --duration "${secs}s" \
    --output "$out" >/dev/null 2>"$err" || { cat "$err" >&2; return 1; }
  local bytes
  bytes=$(du -cb "$out"/*.parquet | tail -1 | cut -f1)
  awk -v bytes="$bytes" -v secs="$secs" '
    /^TIME / { wall = $2; cpu = $3 + $4; rss = $5 / 1024 }
    /eBPF CPU time: [0-9.]+ s/ { for (i = 1; i <= NF; i++) if ($i == "time:") ebpf = $(i + 1) }
    /eBPF CPU time: tick timers/ { for (i = 1; i <= NF; i++) if ($i == "timers") ebpf = $(i + 1) }
    /overloaded: [0-9]+ of [0-9]+ intervals/ {
      for (i = 1; i <= NF; i++) if ($i == "overloaded:") { part = $(i + 1); all = $(i + 3) }
    }
    END {
      printf "%.2f %.2f %.1f %.2f %.2f\n", 100 * cpu / wall, 100 * ebpf / wall, rss,
        bytes / secs * 3600 / 1e6, all ? 100 * part / all : 0
    }' "$err"
}

median() { sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

# RUNS runs of one configuration, one table line of medians.
row() {
  local label=$1 n=$2
  shift 2
  : >"$work/runs"
  for _ in $(seq "$runs"); do measure "$@" >>"$work/runs"; done
  local c
  for c in 1 2 3 4 5; do cut -d' ' -f"$c" "$work/runs" | median; done | paste -sd' ' |
    awk -v l="$label" -v n="$n" '{ printf "%-22s %6d %7.2f %7.2f %8.2f %7.1f %8.2f %7.2f\n", l, n, $1, $2, $1 + $2, $3, $4, $5 }'
}

echo "cachescope record at 1 ms, ${secs} s per run, median of ${runs} runs ($(nproc) CPUs, $(uname -r))"
printf "%-22s %6s %7s %7s %8s %7s %8s %7s\n" path containers "proc %" "ebpf %" "whole %" "RSS MB" "MB/h" "over %"
for n in $sizes; do
  cgroups "$n"
  sel="cachescope-bench-$$/*"
  row "none" "$n" --backend none --containers "$sel"
  CACHESCOPE_BPF_TICKS=every-cpu row "none, ticks every CPU" "$n" --backend none --containers "$sel"
  row "emu-host" "$n" --emulate intel-xeon-platinum-8160 --containers "$sel"
  scripts/many-containers.sh "$n" >"$work/s.toml"
  row "emu-scenario" "$n" --scenario "$work/s.toml"
done

[ -n "$vcpus" ] || exit 0
echo
echo "eBPF against CPU count: QEMU/TCG guests, one followed busy container, 5 s per mode"
printf "%-10s %6s %10s %12s %10s\n" ticks vCPUs "runs/s" "timer runs/s" "ms/s"
for v in $vcpus; do
  modes=followed,every-cpu
  [ "$v" -le 16 ] || modes=followed
  CACHESCOPE_GUEST_KMOD=0 CACHESCOPE_QEMU_APPEND="secs=5 modes=$modes" CACHESCOPE_QEMU_TIMEOUT=900 \
    CACHESCOPE_QEMU_MACHINE="-cpu max -smp $v" \
    scripts/guest-qemu.sh "$bin" "$work/guest-$v" crates/bpf/test/guest-ticks.sh |
    sed -n 's/^CS-RESULT //p' | awk '{
      for (i = 1; i <= NF; i++) { split($i, kv, "="); f[kv[1]] = kv[2] }
      printf "%-10s %6d %10.0f %12.0f %10.2f\n", f["ticks"], f["cpus"], f["runs"] / f["secs"],
        f["timer_runs"] / f["secs"], f["ebpf_ns"] / f["secs"] / 1e6
    }'
done
