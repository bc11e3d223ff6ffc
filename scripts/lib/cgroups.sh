# shellcheck shell=bash
# Sourced by the benchmarks and the soak: cgroups made for a run and removed after it.

# cgroup_with DIR busy|idle: make cgroup DIR holding one process: a busy loop, or a sleep.
cgroup_with() {
  mkdir "$1"
  if [ "$2" = busy ]; then
    # shellcheck disable=SC2016 # $$ is the child's
    sh -c 'echo $$ >"$1/cgroup.procs"; exec sh -c "while :; do :; done"' sh "$1" >/dev/null 2>&1 &
  else
    # shellcheck disable=SC2016
    sh -c 'echo $$ >"$1/cgroup.procs"; exec sleep 1000000' sh "$1" >/dev/null 2>&1 &
  fi
  disown
}

# remove_cgroups DIR: kill the processes of DIR's child cgroups, then remove them and DIR.
remove_cgroups() {
  local d p
  for d in "$1"/*/; do
    [ -d "$d" ] || continue
    while read -r p; do kill -9 "$p" 2>/dev/null || true; done <"$d/cgroup.procs"
  done
  sleep 0.5
  for d in "$1"/*/; do
    if [ -d "$d" ]; then rmdir "$d" 2>/dev/null || true; fi
  done
  rmdir "$1" 2>/dev/null || true
}

# remove_cgroups_from DIR N: remove DIR's cgroups cNNNNN numbered N and above (as the
# benchmarks name them), their processes killed first.
remove_cgroups_from() {
  local d p
  for d in "$1"/c*/; do
    [ -d "$d" ] || continue
    [ "$((10#$(basename "$d" | tr -dc 0-9)))" -ge "$2" ] || continue
    while read -r p; do kill -9 "$p" 2>/dev/null || true; done <"$d/cgroup.procs"
  done
  sleep 0.5
  for d in "$1"/c*/; do
    [ -d "$d" ] || continue
    [ "$((10#$(basename "$d" | tr -dc 0-9)))" -ge "$2" ] || continue
    rmdir "$d" 2>/dev/null || true
  done
}

# bench_setup NAME WHO: for a benchmark run as root, $base (the cgroup v2 directory NAME under
# the cgroup2 mount, for its cgroups), $work (a scratch directory) and kernel.bpf_stats_enabled
# on; at exit the setting comes back and both are removed (the cgroups' processes killed).
# WHO names the caller in messages.
bench_setup() {
  local cg
  cg=$(awk '$3 == "cgroup2" { print $2; exit }' /proc/mounts)
  [ -n "$cg" ] || { echo "$2: no cgroup v2 mounted" >&2; exit 2; }
  base=$cg/$1
  work=$(mktemp -d)
  stats_was=$(cat /proc/sys/kernel/bpf_stats_enabled)
  trap 'echo "$stats_was" >/proc/sys/kernel/bpf_stats_enabled; remove_cgroups "$base"; rm -rf "$work"' EXIT
  echo 1 >/proc/sys/kernel/bpf_stats_enabled
}

# median: the median of the numbers on stdin, one a line.
median() { sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
