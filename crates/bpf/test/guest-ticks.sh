#!/bin/busybox sh
# /init of the vCPU-scaling guest (scripts/bench-cost.sh, crates/cli/tests/cost.rs): one
# followed container busy on one CPU, every other CPU idle. For each tick mode in `modes`
# (a kernel parameter, default followed,every-cpu) it records for `secs` seconds (default 5)
# and reports the eBPF CPU time the run's
# summary gives (program runs with kernel.bpf_stats_enabled, plus tick timers) as
#   CS-RESULT ticks=MODE cpus=N ebpf_ns=T runs=R timer_runs=R secs=S mode="the header's words"
# (R: program runs, and timer callbacks, as the summary and the stats give them).
. /lib/init.sh
secs=${secs:-5}
modes=${modes:-followed,every-cpu}
echo 1 >/proc/sys/kernel/bpf_stats_enabled
mkdir -p /sys/fs/cgroup/csb/busy
# shellcheck disable=SC2016 # $$ is the child's
sh -c 'echo $$ >/sys/fs/cgroup/csb/busy/cgroup.procs; exec sh -c "while :; do :; done"' &
busy=$!
sleep 1
for mode in $(echo "$modes" | tr , ' '); do
  # -v: the start-up line that names the tick mode in full (the short one leaves it out).
  CACHESCOPE_BPF_TICKS=$mode cachescope record -v --containers 'csb/*' --interval 1ms \
    --duration "${secs}s" --output "/tmp/r-$mode" >/dev/null 2>"/tmp/err-$mode"
  rc=$?
  # "eBPF CPU time: 0.014 s (programs ..." (stats on), in ns.
  s=$(sed -n 's/.*eBPF CPU time: \([0-9]*\)\.\([0-9]*\) s.*/\1 \2/p' "/tmp/err-$mode" | head -1)
  ns=$(echo "$s" | awk '{ printf "%d", ($1 "." $2) * 1000000000 }')
  runs=$(sed -n 's/.*eBPF CPU time: .* in \([0-9]*\) runs, tick.*/\1/p' "/tmp/err-$mode" | head -1)
  truns=$(sed -n 's/.*tick timers .* in \([0-9]*\) runs).*/\1/p' "/tmp/err-$mode" | head -1)
  words=$(sed -n 's/.*PMU columns: eBPF, 1 ms slots, \([^:]*\):.*/\1/p' "/tmp/err-$mode" | head -1)
  say "ticks=$mode cpus=$(nproc) rc=$rc ebpf_ns=${ns:-none} runs=${runs:-none} timer_runs=${truns:-none} secs=$secs mode=\"$words\""
  grep -a "eBPF CPU" "/tmp/err-$mode" | sed 's/^/CS-INFO /'
  [ -n "$s" ] || sed 's/^/CS-ERR /' "/tmp/err-$mode"
done
kill "$busy"
finish
