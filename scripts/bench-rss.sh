#!/usr/bin/env bash
# A long run's memory (issue 42): `cachescope record --backend none` at 1 ms following N cgroups
# (default 10,000; two busy, the rest one sleeping process each) for MINUTES (default 60),
# its resident memory sampled every 10 s. Prints the RSS at 10 s, at 10 min and at the end,
# the peak, and the figures of the run's end (reads, rows, bytes written).
# Usage: scripts/bench-rss.sh [N [MINUTES]]   (as root; CACHESCOPE=PATH measures that binary)
set -euo pipefail
n=${1:-10000}
minutes=${2:-60}
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib/cgroups.sh
. scripts/lib/cgroups.sh
[ "$(id -u)" = 0 ] || { echo "bench-rss.sh: run as root (cgroups, eBPF)" >&2; exit 2; }
if [ -n "${CACHESCOPE:-}" ]; then
  bin=$(realpath "$CACHESCOPE")
else
  bin=$(scripts/build.sh)
fi
cg=$(awk '$3 == "cgroup2" { print $2; exit }' /proc/mounts)
[ -n "$cg" ] || { echo "bench-rss.sh: no cgroup v2 mounted" >&2; exit 2; }
base=$cg/cachescope-rss-$$
work=$(mktemp -d)
cleanup() {
  [ -n "${rec:-}" ] && kill "$rec" 2>/dev/null || true
  remove_cgroups "$base"
  rm -rf "$work"
}
trap cleanup EXIT
mkdir -p "$base"
for i in $(seq 0 $((n - 1))); do
  if [ "$i" -lt 2 ]; then kind=busy; else kind=idle; fi
  cgroup_with "$base/c$(printf %05d "$i")" "$kind"
done
sleep 2
"$bin" record --backend none --containers "cachescope-rss-$$/*" --interval 1ms --duration "${minutes}m" \
  --output "$work/rec" >/dev/null 2>"$work/err" &
rec=$!
rss() { awk '/^VmRSS/ { print $2 / 1024 }' "/proc/$rec/status" 2>/dev/null || echo 0; }
echo "seconds rss_mb" >"$work/rss"
t=0
while kill -0 "$rec" 2>/dev/null; do
  sleep 10
  t=$((t + 10))
  r=$(rss)
  [ "$r" = 0 ] || echo "$t $r" >>"$work/rss"
done
wait "$rec" || { cat "$work/err" >&2; exit 1; }
at() { awk -v s="$1" 'NR > 1 && $1 >= s { print $2; exit }' "$work/rss"; }
echo "cachescope record, $n cgroups (2 busy), ${minutes} min at 1 ms ($(nproc) CPUs, $(uname -r))"
echo "RSS MB at 10 s: $(at 10); at 10 min: $(at 600); at the end: $(awk 'END { print $2 }' "$work/rss"); peak: $(awk 'NR > 1 && $2 > m { m = $2 } END { print m }' "$work/rss")"
grep -E "read [0-9]+ of|recorded|ticks, lateness|eBPF CPU" "$work/err" || true
