#!/usr/bin/env bash
# What a context switch costs the eBPF program (issue 43, item 9), as root: a load of RATE
# switches a second (default rates 10000 and 150000: examples/switch_load.rs, two threads
# ping-ponging on one CPU) runs in a cgroup no one follows, while `cachescope record --backend
# none` follows one idle container. Each mode, RUNS times (default 3), medians over a window of
# SECONDS (default 10) that starts 4 s into the recording (after the 2 s in which a cgroup no
# container claims is still charged apart):
#   host sw/s   the host's context switches a second (/proc/stat ctxt)
#   runs/s      the attached programs' runs a second, ns/run their mean run time
#               (kernel.bpf_stats_enabled on for the run; /proc/PID/fdinfo of the programs)
#   % core      programs' run time per wall second, % of one core
# Modes: `apart` (CACHESCOPE_BPF_QUIET=off: every switch reads the counters and charges the
# outgoing task's cgroup) and `quiet` (the default: switches between tasks of cgroups no
# container claims, and the idle task, read nothing). OLD=PATH adds `old`, that binary with
# its defaults (e.g. a build of a commit before quiet switches).
# Usage: scripts/bench-switches.sh [SECONDS [RUNS]]; RATES="10000 150000" narrows or widens it.
set -euo pipefail
secs=${1:-10}
runs=${2:-3}
rates=${RATES:-10000 150000}
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib/cgroups.sh
. scripts/lib/cgroups.sh
[ "$(id -u)" = 0 ] || { echo "bench-switches.sh: run as root (cgroups, eBPF)" >&2; exit 2; }
bin=$(scripts/build.sh -q)
load=$(dirname "$(scripts/build.sh -q --example switch_load)")/examples/switch_load
bench_setup "cachescope-switches-$$" bench-switches.sh
mkdir -p "$base"
cgroup_with "$base/c0" idle

# Sum of run_time_ns and run_cnt over PID's BPF programs, and the host's ctxt.
sample() {
  local f ns=0 cnt=0 a b
  for f in /proc/"$1"/fdinfo/*; do
    read -r a b < <(awk '/^run_time_ns:/ { t = $2 } /^run_cnt:/ { c = $2 } END { print t + 0, c + 0 }' "$f" 2>/dev/null) || continue
    ns=$((ns + a))
    cnt=$((cnt + b))
  done
  echo "$ns $cnt $(awk '/^ctxt / { print $2 }' /proc/stat)"
}

# One run of binary $1 under load rate $2: "host_sw_per_s runs_per_s ns_per_run pct_core".
measure() {
  local b=$1 rate=$2 out=$work/rec pid s0 s1
  rm -rf "$out"
  "$load" "$rate" $((secs + 8)) >"$work/load" &
  local lp=$!
  sleep 1
  "$b" record --backend none --containers "cachescope-switches-$$/*" --duration "$((secs + 6))s" \
    --output "$out" >/dev/null 2>"$work/err" &
  pid=$!
  sleep 4
  s0=$(sample "$pid")
  sleep "$secs"
  s1=$(sample "$pid")
  wait "$pid" || { cat "$work/err" >&2; return 1; }
  wait "$lp"
  echo "$s0 $s1" | awk -v secs="$secs" '{
    ns = $4 - $1; cnt = $5 - $2; sw = $6 - $3
    printf "%.0f %.0f %.0f %.3f\n", sw / secs, cnt / secs, cnt ? ns / cnt : 0, 100 * ns / 1e9 / secs }'
}

row() {
  local label=$1 b=$2 rate=$3 c
  : >"$work/runs"
  for _ in $(seq "$runs"); do measure "$b" "$rate" >>"$work/runs"; done
  for c in 1 2 3 4; do cut -d' ' -f"$c" "$work/runs" | median; done | paste -sd' ' |
    awk -v l="$label" -v r="$rate" '{ printf "%-7s %9d %10d %10d %8d %8.3f\n", l, r, $1, $2, $3, $4 }'
}

echo "eBPF program per context switch: a load in an unfollowed cgroup, one idle container followed; ${secs} s windows, median of ${runs} ($(nproc) CPUs, $(uname -r))"
printf "%-7s %9s %10s %10s %8s %8s\n" mode "load sw/s" "host sw/s" "runs/s" "ns/run" "% core"
for rate in $rates; do
  [ -z "${OLD:-}" ] || row old "$(realpath "$OLD")" "$rate"
  CACHESCOPE_BPF_QUIET=off row apart "$bin" "$rate"
  row quiet "$bin" "$rate"
done
