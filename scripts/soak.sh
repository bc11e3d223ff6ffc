#!/usr/bin/env bash
# Soak: MINUTES (default 3) of container churn on this host's cgroup v2 tree while `record`
# (Parquet + /metrics) runs and is killed — kill -9 or SIGTERM, in turn — and restarted, with
# killed emulated-resctrl runs in between. Checks that nothing leaks and nothing is lost beyond
# the documented bound:
#   - the recorder's descriptors and memory stay flat (sampled every second);
#   - no leftover: sandbox cgroups of dead runs, FUSE mounts, .partial files after recovery;
#   - every file reads back with `report` (no file skipped);
#   - a killed recorder loses at most the last 5 s of rows (row groups close every 5 s) plus
#     a second of slack; a stopped one loses nothing.
# Needs root and cgroup v2; not part of every CI run. Usage: scripts/soak.sh [MINUTES]
set -euo pipefail
minutes=${1:-3}
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib/cgroups.sh
. scripts/lib/cgroups.sh
[ "$(id -u)" = 0 ] || { echo "soak: needs root"; exit 2; }
cg=$(awk '$9 == "cgroup2" { print $5; exit }' /proc/self/mountinfo)
[ -n "$cg" ] || { echo "soak: no cgroup v2"; exit 2; }
cargo build --release -q -p cachescope
bin=$PWD/target/release/cachescope
python3 -c 'import pyarrow' 2>/dev/null || pip install -q pyarrow
work=$(mktemp -d)
sandbox="$cg/cachescope-soak-$$"
mkdir "$sandbox"
echo "+cpu" >"$sandbox/cgroup.subtree_control" 2>/dev/null || true
cleanup() {
  kill "$churn_pid" 2>/dev/null || true
  wait 2>/dev/null || true
  remove_cgroups "$sandbox"
  rm -rf "$work"
}
trap cleanup EXIT

# Churn: containers named as Docker names them, each busy or idle for 0.3-3 s.
churn() {
  while :; do
    id=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
    d="$sandbox/docker-$id.scope"
    mkdir "$d"
    if ((RANDOM % 2)); then
      (echo $BASHPID >"$d/cgroup.procs"; exec sh -c 'while :; do :; done') &
    else
      (echo $BASHPID >"$d/cgroup.procs"; exec sleep 60) &
    fi
    pid=$!
    (sleep "$((RANDOM % 3)).$((RANDOM % 7 + 3))"; kill -9 "$pid" 2>/dev/null; sleep 0.2; rmdir "$d" 2>/dev/null) &
    sleep 0.2
  done
}
churn 2>/dev/null &
churn_pid=$!

out="$work/rec"
kills="$work/kills"
: >"$kills"
stats="$work/stats"
: >"$stats"
end=$((SECONDS + minutes * 60))
n=0
while ((SECONDS < end)); do
  n=$((n + 1))
  port=$((19000 + n % 1000))
  "$bin" record --containers "cachescope-soak-$$/**" --output "$out" --listen "127.0.0.1:$port" \
    2>>"$work/record.err" &
  rec=$!
  life=$((RANDOM % 15 + 8))
  for ((s = 0; s < life; s++)); do
    sleep 1
    kill -0 "$rec" 2>/dev/null || { echo "soak: record exited early"; cat "$work/record.err"; exit 1; }
    fds=$(ls /proc/$rec/fd | wc -l)
    rss=$(awk '/VmRSS/ { print $2 }' /proc/$rec/status)
    echo "$n $s $fds $rss" >>"$stats"
    ((s % 5 == 4)) && curl -s -m 2 "http://127.0.0.1:$port/metrics" >/dev/null || true
  done
  if ((n % 2)); then
    kill -9 "$rec"
    echo "$rec $(date +%s%N) kill" >>"$kills"
  else
    kill -TERM "$rec"
    echo "$rec $(date +%s%N) term" >>"$kills"
  fi
  wait "$rec" 2>/dev/null || true
  # An emulated resctrl run killed while it plays; the next one must clean up after it.
  if ((n % 3 == 0)); then
    "$bin" monitor --backend resctrl --emulate intel-xeon-platinum-8160 \
      --scenario scenarios/noisy-neighbour.toml --duration 30s --plain >/dev/null 2>&1 &
    emu=$!
    sleep 1.5
    kill -9 "$emu"
    timeout 5 tail --pid="$emu" -f /dev/null || { echo "soak: killed emulated resctrl run did not exit"; exit 1; }
  fi
done
kill "$churn_pid" 2>/dev/null || true
# Recover what the last kill left, and clean the last emulated run's leftovers.
"$bin" record --containers "cachescope-soak-$$/**" --output "$out" --duration 200ms 2>>"$work/record.err"
"$bin" monitor --backend resctrl --emulate intel-xeon-platinum-8160 \
  --scenario scenarios/noisy-neighbour.toml --duration 200ms --plain >/dev/null 2>&1
fail=0
echo "soak: $n recorder runs in $minutes min"
awk '{ f[$3]++; r[$1] = $4; if (!minr || $4 < minr) minr = $4; if ($4 > maxr) maxr = $4 }
     END { for (k in f) { if (!min || k < min) min = k; if (k > max) max = k }
           printf "soak: recorder fds %d..%d, RSS %d..%d KiB\n", min, max, minr, maxr }' "$stats"
read -r fmin fmax < <(awk '{ if (!min || $3 < min) min = $3; if ($3 > max) max = $3 } END { print min, max }' "$stats")
read -r rmax < <(awk '{ if ($4 > max) max = $4 } END { print max }' "$stats")
((fmax - fmin <= 8)) || { echo "soak: FAIL descriptors grew ($fmin..$fmax)"; fail=1; }
((rmax <= 200000)) || { echo "soak: FAIL RSS reached $rmax KiB"; fail=1; }
left=$(find "$out" -name '*.partial*' | wc -l)
((left == 0)) || { echo "soak: FAIL $left partial files left"; fail=1; }
emu_cg=$(find "$cg" -maxdepth 1 -name 'cachescope-emu-*' | wc -l)
mounts=$(grep -c 'cachescope-resctrl-' /proc/self/mountinfo || true)
((emu_cg == 0 && mounts == 0)) || { echo "soak: FAIL leftovers: $emu_cg sandbox cgroups, $mounts mounts"; fail=1; }
"$bin" report "$out" --json >"$work/report.json" 2>"$work/report.err" || { echo "soak: FAIL report"; cat "$work/report.err"; fail=1; }
if [ -s "$work/report.err" ]; then
  echo "soak: FAIL report passed something over:"
  cat "$work/report.err"
  fail=1
fi
echo "soak: $(python3 -c 'import json,sys; print(len(json.load(open(sys.argv[1]))["containers"]))' "$work/report.json") containers in the report"
# Per killed recorder: its files' last row against the kill time.
python3 - "$out" "$kills" <<'PY' || fail=1
import glob, re, sys
import pyarrow.parquet as pq
out, kills = sys.argv[1], sys.argv[2]
last = {}
for f in glob.glob(out + "/*.parquet"):
    pid = int(re.search(r"-(\d+)-\d+\.parquet$", f).group(1))
    t = pq.read_table(f, columns=["time_ns"]).column("time_ns").to_pylist()
    if t:
        last[pid] = max(last.get(pid, 0), max(t))
worst = {"kill": 0.0, "term": 0.0}
bad = 0
for line in open(kills):
    pid, at, how = line.split()
    lost = (int(at) - last.get(int(pid), 0)) / 1e9
    worst[how] = max(worst[how], lost)
    bound = 6.0 if how == "kill" else 1.0
    if lost > bound:
        print(f"soak: FAIL recorder {pid} ({how}) lost its last {lost:.1f} s (bound {bound} s)")
        bad = 1
print(f"soak: rows lost at the end of a run: at most {worst['kill']:.2f} s after kill -9, {worst['term']:.2f} s after SIGTERM")
sys.exit(bad)
PY
((fail == 0)) && echo "soak: PASS" || { echo "soak: FAIL"; exit 1; }
