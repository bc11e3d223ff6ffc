#!/usr/bin/env bash
# Everything the collector costs, as root (issues 24 and 42): for each path and each count of
# followed cgroups (two of them busy, spinning one per CPU of our 2-CPU machines; one when
# only one is followed; the rest hold one sleeping process each), `cachescope record` at 1 ms
# for SECONDS (default 10), RUNS times (default 3), medians of:
#   proc %   the process's own CPU (user + system) in % of one core
#   ebpf %   its eBPF programs' CPU in the kernel (kernel.bpf_stats_enabled on for the run:
#            program run time, plus the tick timers, which the kernel does not count)
#   whole %  their sum
#   RSS MB   peak resident memory
#   MB/h     bytes written per hour (Parquet, sparse)
#   late %   wake-ups missed: the share of the run's 50 ms wake-ups that came a whole wake-up
#            or more late (the timerfd's missed expirations), so their intervals were worked
#            through late; plus intervals whose reads the budget cut (overload), where it applies
#   read %   container-intervals read of those followed (quiet intervals read who ran, the new,
#            the stopping and a keyframe share: docs/cost.md)
# Paths (PATHS, default "none emu-host"): `none` (eBPF PMU columns on real cgroups),
# `emu-host` (the emulated RDT platform driven by those cgroups' measured CPU time,
# --emulate), `every-cpu` (`none` with CACHESCOPE_BPF_TICKS=every-cpu), `emu-scenario` (a
# scenario of emulated containers: no processes, so no eBPF, and every container read every
# interval; scripts/many-containers.sh) and `resctrl-emu` (the resctrl backend on the emulated
# filesystem over FUSE, playing that scenario as real cgroups at its 100 ms default: the
# scenario's traffic moves every group's counters, so every group is read).
# The kernel module's cost is measured in its QEMU guest by scripts/bench-kmod.sh.
#
# Then (COLLECTOR=1, the default) the same comparison against unvariance/collector, the best
# open collector we know (built from its pinned source by scripts/lib/collector.sh): at 1, 2
# and 100 followed cgroups (COLLECTOR_SIZES), RUNS alternating pairs of SECONDS each, whole
# cost of each (process + its eBPF programs) and their ratio.
#
# Then the eBPF ticks against CPU count: QEMU/TCG guests (Debian's kernel) with VCPUS vCPUs
# (default "2 16 64"), idle but for one followed busy container, 5 s per tick mode:
# eBPF program runs and timer callbacks per second (the work done) and their time. TCG
# timings are distorted (vCPU threads share this host's 2 cores, and its clock source is
# emulated), so runs per second are the comparable figure there; every-cpu is skipped above
# 16 vCPUs, where TCG cannot deliver its ticks.
#
# Usage: scripts/bench-cost.sh [SECONDS [RUNS]]; CONTAINERS="1 2 10 100 1000 10000" (default),
# PATHS, COLLECTOR=0 and VCPUS="" (skips the guests) narrow it; CACHESCOPE=PATH measures
# that binary instead of this tree's release build (an older one says nothing of its eBPF
# time: its column reads 0; nor of its reads: read % is blank).
set -euo pipefail
secs=${1:-10}
runs=${2:-3}
sizes=${CONTAINERS:-1 2 10 100 1000 10000}
paths=${PATHS:-none emu-host}
vcpus=${VCPUS-2 16 64}
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib/cgroups.sh
. scripts/lib/cgroups.sh
[ "$(id -u)" = 0 ] || { echo "bench-cost.sh: run as root (cgroups, eBPF)" >&2; exit 2; }
if [ -n "${CACHESCOPE:-}" ]; then
  bin=$(realpath "$CACHESCOPE")
else
  bin=$(scripts/build.sh)
fi
bench_setup "cachescope-bench-$$" bench-cost.sh

# Grow the set of cgroups to n (they are kept from one size to the next).
have=0
cgroups() {
  mkdir -p "$base"
  while [ "$have" -lt "$1" ]; do
    if [ "$have" -lt 2 ]; then kind=busy; else kind=idle; fi
    cgroup_with "$base/c$(printf %05d "$have")" "$kind"
    have=$((have + 1))
  done
  sleep 1
}

# 1m2.345s (bash `times`) in seconds.
sec() { awk -v t="$1" 'BEGIN { split(t, a, "m"); sub("s", "", a[2]); print a[1] * 60 + a[2] }'; }

# One run: prints "proc ebpf rss_mb mb_per_hour late read" (percentages; read is - when the
# binary does not say).
measure() {
  local out=$work/rec err=$work/err
  rm -rf "$out"
  # CPU time from bash's `times` (milliseconds; the children's line counts the waited-for run),
  # not time(1)'s %U and %S: those have two decimals, and at 0.07 s of CPU in a 10 s run
  # 10 ms is a seventh of the figure. time(1) still gives the wall time and the peak RSS.
  (
    /usr/bin/time -f 'TIME %e %U %S %M' "$bin" record "$@" --interval "${interval:-1ms}" --duration "${secs}s" \
      --output "$out" >/dev/null 2>"$err" || exit 1
    times >"$work/times"
  ) || { cat "$err" >&2; return 1; }
  local user sys
  read -r user sys < <(tail -1 "$work/times")
  echo "CPU $(sec "$user") $(sec "$sys")" >>"$err"
  local bytes
  bytes=$(du -cb "$out"/*.parquet | tail -1 | cut -f1)
  awk -v bytes="$bytes" -v secs="$secs" '
    /^TIME / { wall = $2; rss = $5 / 1024 }
    /^CPU / { cpu = $2 + $3 }
    /eBPF CPU time: [0-9.]+ s/ { for (i = 1; i <= NF; i++) if ($i == "time:") ebpf = $(i + 1) }
    /eBPF CPU time: tick timers/ { for (i = 1; i <= NF; i++) if ($i == "timers") ebpf = $(i + 1) }
    / ticks, lateness / {
      for (i = 1; i <= NF; i++) { if ($i == "ticks,") ticks = $(i - 1); if ($i == "missed") missed = $(i - 1) }
    }
    /overloaded: [0-9]+ of [0-9]+ intervals/ {
      for (i = 1; i <= NF; i++) if ($i == "overloaded:") { part = $(i + 1); all = $(i + 3) }
    }
    /container-intervals/ { for (i = 1; i <= NF; i++) if ($i == "read") { r = $(i + 1); f = $(i + 3) } }
    END {
      late = ticks + missed ? 100 * missed / (ticks + missed) : 0
      if (all) late += 100 * part / all
      printf "%.2f %.2f %.1f %.2f %.2f %s\n", 100 * cpu / wall, 100 * ebpf / wall, rss,
        bytes / secs * 3600 / 1e6, late, f ? sprintf("%.2f", 100 * r / f) : "-"
    }' "$err"
}

# RUNS runs of one configuration, one table line of medians.
row() {
  local label=$1 n=$2
  shift 2
  : >"$work/runs"
  for _ in $(seq "$runs"); do measure "$@" >>"$work/runs"; done
  local c read
  read=$(cut -d' ' -f6 "$work/runs" | grep -v -- - | median || true)
  for c in 1 2 3 4 5; do cut -d' ' -f"$c" "$work/runs" | median; done | paste -sd' ' |
    awk -v l="$label" -v n="$n" -v r="${read:--}" \
      '{ printf "%-14s %6d %7.2f %7.2f %8.2f %7.1f %8.2f %7.2f %7s\n", l, n, $1, $2, $1 + $2, $3, $4, $5, r }'
}

echo "cachescope record at 1 ms, ${secs} s per run, median of ${runs} runs ($(nproc) CPUs, $(uname -r))"
printf "%-14s %6s %7s %7s %8s %7s %8s %7s %7s\n" path cgroups "proc %" "ebpf %" "whole %" "RSS MB" "MB/h" "late %" "read %"
for n in $sizes; do
  cgroups "$n"
  sel="cachescope-bench-$$/*"
  for p in $paths; do
    case $p in
      none) row none "$n" --backend none --containers "$sel" ;;
      every-cpu) CACHESCOPE_BPF_TICKS=every-cpu row every-cpu "$n" --backend none --containers "$sel" ;;
      emu-host) row emu-host "$n" --emulate intel-xeon-platinum-8160 --containers "$sel" ;;
      emu-scenario)
        scripts/many-containers.sh "$n" >"$work/s.toml"
        row emu-scenario "$n" --scenario "$work/s.toml"
        ;;
      resctrl-emu)
        scripts/many-containers.sh "$n" >"$work/s.toml"
        interval=100ms row resctrl-emu "$n" --backend resctrl --emulate intel-xeon-platinum-8160 --scenario "$work/s.toml"
        ;;
      *) echo "bench-cost.sh: unknown path $p (none, every-cpu, emu-host, emu-scenario, resctrl-emu)" >&2; exit 2 ;;
    esac
  done
done

if [ "${COLLECTOR:-1}" != 0 ]; then
  # shellcheck source=scripts/lib/collector.sh
  . scripts/lib/collector.sh
  collector_describe() { echo "commit ${COLLECTOR_COMMIT:0:7}, built with the local changes scripts/lib/collector.sh lists"; }
  # One run of SECS: its whole cost, % of one core (user + system + its eBPF programs).
  collector_measure() {
    rm -rf "$2"
    COLLECTOR_BPF_STATS=1 collector_run "$1" "$2" >/dev/null || return 1
    awk -v bpf="$(cat "$2/bpf_run_time_ns" 2>/dev/null || echo 0)" \
      '{ printf "%.2f\n", 100 * ($2 + $3) / $1 + 100 * bpf / 1e9 / $1 }' "$2/time.txt"
  }
  collector_build >/dev/null
  # The host holds only the cgroups the comparison follows: 10,000 left from above would
  # charge each collector's start a walk of them all (0.2 s of ours, in a 10 s run).
  sizes_c=${COLLECTOR_SIZES:-1 2 100}
  most=$(tr ' ' '\n' <<<"$sizes_c" | sort -n | tail -1)
  if [ "$have" -gt "$most" ]; then
    remove_cgroups_from "$base" "$most"
    have=$most
  fi
  echo
  echo "against unvariance/collector ($(collector_describe)): ${runs} alternating pairs of ${secs} s, whole % medians"
  printf "%-8s %16s %16s %7s\n" cgroups "cachescope %" "collector %" ratio
  for n in $sizes_c; do
    # The first n of the cgroups made above (they are kept), two busy.
    sel=()
    for i in $(seq 0 $((n - 1))); do sel+=("$(printf '%s/c%05d' "cachescope-bench-$$" "$i")"); done
    [ "$have" -ge "$n" ] || cgroups "$n"
    : >"$work/pairs"
    for _ in $(seq "$runs"); do
      ours=$(measure --backend none --containers "${sel[@]}" | awk '{ print $1 + $2 }')
      theirs=$(collector_measure "$secs" "$work/collector")
      echo "$ours $theirs" >>"$work/pairs"
    done
    o=$(cut -d' ' -f1 "$work/pairs" | median)
    t=$(cut -d' ' -f2 "$work/pairs" | median)
    awk -v n="$n" -v o="$o" -v t="$t" 'BEGIN { printf "%-8d %16.2f %16.2f %7.3f\n", n, o, t, (t > 0 ? o / t : 0) }'
  done
fi

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
