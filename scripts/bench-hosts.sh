#!/usr/bin/env bash
# Collector cost of `cachescope record` following real busy containers on this host, against
# a baseline build of another commit, in the same run: CPU share of one core in the steady
# state (user + sys from /proc/PID/stat between 2 s after the start and 0.5 s before the end,
# over that wall time), the same over the whole run (start-up included: BPF load, probes),
# and peak RSS; medians of RUNS runs of SECONDS each, for 1 and 5 busy containers (each a
# cgroup with a `while :; do :; done` shell), with eBPF PMU columns at 1 ms.
# Modes: `record` as auto picks it (on a host without RDT: containers, CPU time, PMU columns),
# and `record --emulate MODEL` (the emulated cache driven by the same containers), which is
# all the baseline can do on a host without RDT. Needs root and cgroup v2.
# Usage: scripts/bench-hosts.sh [BASE_REV [SECONDS [RUNS]]]
set -euo pipefail
base=${1:-HEAD~1}
secs=${2:-12}
runs=${3:-5}
cd "$(dirname "$0")/.."
cargo build --release -q -p cachescope
new=target/release/cachescope
work=$(mktemp -d)
cg=$(awk '$9 == "cgroup2" { print $5; exit }' /proc/self/mountinfo)
[ -n "$cg" ] || { echo "bench-hosts: no cgroup v2 mount" >&2; exit 1; }
sandbox="$cg/cachescope-bench-$$"
cleanup() {
  for d in "$sandbox"/*/; do
    [ -d "$d" ] && { while read -r p; do kill "$p" 2>/dev/null || true; done <"$d/cgroup.procs"; }
  done
  sleep 0.2
  for d in "$sandbox"/*/; do [ -d "$d" ] && rmdir "$d" 2>/dev/null || true; done
  rmdir "$sandbox" 2>/dev/null || true
  git worktree remove --force "$work/base" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
echo "baseline: $(git rev-parse --short "$base") ($(git log -1 --format=%s "$base" | cut -c1-60)...)"
git worktree add -q --detach "$work/base" "$base"
# The baseline builds in its own target directory, kept between runs.
(cd "$work/base" && CARGO_TARGET_DIR="$OLDPWD/target/bench-base" cargo build --release -q -p cachescope)
old="$PWD/target/bench-base/release/cachescope"
mkdir "$sandbox"
echo "+cpu" >"$cg/cgroup.subtree_control" 2>/dev/null || true
busy() { # start container $1 with a busy shell
  mkdir "$sandbox/c$1"
  sh -c 'echo $$ > "$1/cgroup.procs"; exec sh -c "while :; do :; done"' _ "$sandbox/c$1" &
}
ticks=$(getconf CLK_TCK)
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
median() { sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
measure() { # bin, mode args... → "steady% whole% rssMB (runs)"
  local bin=$1; shift
  local steady=() whole=() rsss=()
  for _ in $(seq "$runs"); do
    rm -rf "$work/rec"
    /usr/bin/time -f 'TIME %e %U %S %M' "$bin" record "$@" --containers "$(basename "$sandbox")/*" \
      --pmu bpf --duration "${secs}s" --output "$work/rec" 2>"$work/err" >/dev/null &
    local tpid=$! pid=""
    while [ -z "$pid" ]; do sleep 0.05; pid=$(pgrep -P "$tpid" || true); done
    sleep 2
    local c0 t0 c1 t1
    c0=$(cpu_ticks "$pid"); t0=$(date +%s.%N)
    sleep "$(awk -v s="$secs" 'BEGIN { print s - 2.5 }')"
    c1=$(cpu_ticks "$pid"); t1=$(date +%s.%N)
    wait "$tpid" || { cat "$work/err"; exit 1; }
    read -r _ wall user sys rss < <(grep '^TIME' "$work/err")
    steady+=("$(awk -v a="$c0" -v b="$c1" -v t0="$t0" -v t1="$t1" -v hz="$ticks" 'BEGIN { printf "%.2f", 100 * (b - a) / hz / (t1 - t0) }')")
    whole+=("$(awk -v w="$wall" -v u="$user" -v s="$sys" 'BEGIN { printf "%.2f", 100 * (u + s) / w }')")
    rsss+=("$(awk -v r="$rss" 'BEGIN { printf "%.1f", r / 1024 }')")
  done
  echo "$(printf '%s\n' "${steady[@]}" | median) $(printf '%s\n' "${whole[@]}" | median) $(printf '%s\n' "${rsss[@]}" | median) (steady: ${steady[*]})"
}
printf '%-11s %-30s %9s %9s %8s  %s\n' containers mode "steady %" "whole %" "RSS MB" "runs"
started=0
for n in 1 5; do
  while [ "$started" -lt "$n" ]; do busy "$started"; started=$((started + 1)); done
  sleep 0.5
  for row in "new|record (auto)|" "new|record --emulate|--emulate intel-xeon-platinum-8160" \
    "old|record --emulate (baseline)|--emulate intel-xeon-platinum-8160"; do
    IFS='|' read -r which label args <<<"$row"
    bin=$new; [ "$which" = old ] && bin=$old
    # shellcheck disable=SC2086
    read -r c w r rest < <(measure "$bin" $args)
    printf '%-11s %-30s %9s %9s %8s  %s\n' "$n" "$label" "$c" "$w" "$r" "$rest"
  done
done
