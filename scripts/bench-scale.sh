#!/usr/bin/env bash
# Cost of one 1 ms interval against the number of containers, on the emulated platform
# (2 L3 domains × 8 CPUs, every container running), in virtual time (--fast) so the whole
# cost is measured whatever it is: CPU per interval (user + sys over the intervals worked
# through) and what share of real time that is at 1 ms (over 100 % the run cannot keep up).
# The cost includes the emulator (cache model and emulated counter reads) and the Parquet
# writer. Then the same in real time for SECONDS × 3: wake-ups missed (of one per 50 ms) and,
# where the engine had to read part of the containers per interval (crate engine::budget),
# the mean effective sampling period.
# Usage: scripts/bench-scale.sh [SECONDS [COUNTS...]] (default 1 s; 10 100 300 1000).
set -euo pipefail
secs=${1:-1}
shift || true
counts=("$@")
[ ${#counts[@]} -gt 0 ] || counts=(10 100 300 1000)
cd "$(dirname "$0")/.."
cargo build --release -q -p cachescope
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
printf '%10s %12s %14s %14s %16s %18s\n' containers intervals "us/interval" "% of 1 ms" "missed (real)" "mean period (real)"
for n in "${counts[@]}"; do
  scripts/many-containers.sh "$n" >"$work/s.toml"
  rm -rf "$work/rec"
  /usr/bin/time -f 'TIME %e %U %S' target/release/cachescope record --scenario "$work/s.toml" --fast \
    --duration "${secs}s" --output "$work/rec" 2>"$work/err" || { cat "$work/err"; exit 1; }
  read -r _ _ user sys < <(grep '^TIME' "$work/err")
  rm -rf "$work/rec"
  target/release/cachescope record --scenario "$work/s.toml" --duration "$((secs * 3))s" --output "$work/rec" \
    2>"$work/err" || { cat "$work/err"; exit 1; }
  ticks=$(sed -n 's/^cachescope: \([0-9]*\) ticks.*, \([0-9]*\) missed$/\2 of \1/p' "$work/err")
  period=$(sed -n 's/.*read every \([0-9.]*[mµu]*s\) on average.*/\1/p' "$work/err")
  awk -v n="$n" -v u="$user" -v s="$sys" -v secs="$secs" -v t="${ticks:-?}" -v p="${period:-1ms (all read)}" 'BEGIN {
    k = secs * 1000; us = (u + s) * 1e6 / k
    printf "%10d %12d %14.1f %14.1f %16s %18s\n", n, k, us, us / 10, t, p
  }'
done
