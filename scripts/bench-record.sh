#!/usr/bin/env bash
# Collector cost of `cachescope record` on a busy emulated scenario: CONTAINERS (default 100)
# containers on 2 L3 domains, sampled every 1 ms on the wall clock for SECONDS (default 20).
# Prints lateness, CPU share of one core, peak RSS, bytes on disk, and bytes/hour per container.
# The CPU share includes the emulator (its cache model and the emulated counter reads): see
# `cargo run --release -p cachescope-emu --example model_bench` for that part at 100 containers.
# Usage: scripts/bench-record.sh [SECONDS [CONTAINERS]]; CACHESCOPE=PATH measures that binary
# instead of this tree's release build (e.g. a baseline from scripts/bench-hosts.sh).
set -euo pipefail
secs=${1:-20}
n=${2:-100}
cd "$(dirname "$0")/.."
bin=${CACHESCOPE:-target/release/cachescope}
[ -n "${CACHESCOPE:-}" ] || cargo build --release -q -p cachescope
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
scripts/many-containers.sh "$n" >"$work/s.toml"
/usr/bin/time -f 'TIME %e %U %S %M' "$bin" record --scenario "$work/s.toml" \
  --duration "${secs}s" --output "$work/rec" 2>"$work/err" || { cat "$work/err"; exit 1; }
grep -v '^TIME' "$work/err"
read -r _ wall user sys rss < <(grep '^TIME' "$work/err")
bytes=$(du -cb "$work"/rec/*.parquet | tail -1 | cut -f1)
awk -v n="$n" -v w="$wall" -v u="$user" -v s="$sys" -v r="$rss" -v b="$bytes" -v secs="$secs" 'BEGIN {
  printf "collector CPU: %.1f %% of one core (user %.2f s + sys %.2f s over %.2f s)\n", 100 * (u + s) / w, u, s, w
  printf "peak RSS: %.1f MB\n", r / 1024
  printf "on disk: %d bytes for %d s: %.2f MB/hour for all %d containers, %.3f MB/hour per container\n", b, secs, b / secs * 3600 / 1e6, n, b / secs * 3600 / 1e6 / n
}'
