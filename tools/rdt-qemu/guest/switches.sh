#!/bin/busybox sh
# /init of the RDT machine's guest for scripts/bench-switches-rdt.sh: what one context switch
# costs cachescope's eBPF program when it reads real counters (-device rdt,pmu=on: cycles,
# instructions, LLC references and misses, and cpu-clock) against cpu-clock alone (pmu=off).
# A load of RATE switches a second (switch_load: two threads on CPU 1 passing a byte) runs in
# a followed container, so that every switch is charged; the programs' runs and run time come
# from the kernel (kernel.bpf_stats_enabled, /proc/PID/fdinfo of cachescope's programs) over
# SECS seconds from 4 s into the recording. Kernel parameters: rate=, secs=.
. "${CS_INIT:-/lib/init.sh}"
rate=${rate:-2000}
secs=${secs:-10}
say kernel="$(uname -r)"
say perf_driver="$(dmesg | sed -n 's/.*Performance Events: //p' | head -1 | tr -s ' ' '_')"
cd /tmp || exit 1
echo 1 >/proc/sys/kernel/bpf_stats_enabled
C=/sys/fs/cgroup/ctr
mkdir -p "$C/load"
# sample PID: the run time (ns) and runs of PID's eBPF programs, and the host's switches.
sample() {
  ns=0 cnt=0
  for f in /proc/"$1"/fdinfo/*; do
    set -- $(awk '/^run_time_ns:/ { t = $2 } /^run_cnt:/ { c = $2 } END { print t + 0, c + 0 }' "$f" 2>/dev/null)
    ns=$((ns + ${1:-0}))
    cnt=$((cnt + ${2:-0}))
  done
  echo "$ns $cnt $(awk '/^ctxt / { print $2 }' /proc/stat)"
}
sh -c "echo \$\$ > $C/load/cgroup.procs && exec switch_load $rate $((secs + 10)) 1" >/tmp/load.out 2>&1 &
LOAD=$!
cachescope record --backend none --pmu bpf --containers 'ctr/*' --duration "$((secs + 6))s" \
  --output /tmp/rec >/dev/null 2>/tmp/err.txt &
CS=$!
sleep 4
s0=$(sample $CS)
sleep "$secs"
s1=$(sample $CS)
wait $CS
say cs_exit=$?
wait $LOAD
say load_exit=$?
sed 's/^/CS-STDERR /' /tmp/err.txt
echo "$s0 $s1" | awk -v secs="$secs" '{
  ns = $4 - $1; cnt = $5 - $2; sw = $6 - $3
  printf "CS-RESULT switches_per_s=%.0f runs_per_s=%.0f ns_per_run=%.0f\n", sw / secs, cnt / secs, cnt ? ns / cnt : 0 }'
splats
say done=1
finish
