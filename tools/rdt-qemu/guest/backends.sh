#!/bin/busybox sh
# /init of the RDT machine's guest for cachescope's backends (scripts/guest-qemu.sh with
# -device rdt): containers are cgroups under /sys/fs/cgroup/ctr running workloads of known
# footprint (rdt-work) pinned to CPU 0 (L3 domain 0), and cachescope records them with the
# backend named by the kernel parameter cs_backend (resctrl: the kernel's driver). The guest
# prints "CS-RESULT key=value" lines and the recording (gzip, base64, between CS-ROWS-BEGIN and
# CS-ROWS-END) for crates/cli/tests/rdt_qemu.rs; while cachescope runs it also reads the
# kernel's own mon_data files of the groups cachescope made, as a reference.
. "${CS_INIT:-/lib/init.sh}"
R=/sys/fs/resctrl
C=/sys/fs/cgroup/ctr
LLC=$(($(sed 's/K$//' /sys/devices/system/cpu/cpu0/cache/index3/size) * 1024))
say llc_bytes=$LLC
backend=${cs_backend:-resctrl}
say backend="$backend"
# cs_peak: the host's peak bandwidth (GB/s) cachescope assumes, which bounds its interval for the
# counter width (narrow counters on the device wrap every few MiB).
PEAK=${cs_peak:+--peak-bandwidth-gbps $cs_peak}
if [ "$backend" = resctrl ]; then
  mount_resctrl
  say mount=$?
fi
if [ "$backend" = msr ]; then
  load_msr
  say insmod_msr=$?
fi
if [ "$backend" = kmod ]; then
  # The module's real path: CPUID enumeration, PQR_ASSOC at every switch, EVTSEL/CTR reads.
  # Every 100 ms rather than 1 ms: the same path, with rows a test build of cachescope keeps up
  # with under TCG and that the console carries in seconds.
  insmod /cachescope.ko interval_us=100000
  say insmod_kmod=$?
  dmesg | grep "cachescope:" | sed 's/^/CS-DMESG /'
fi

# cal: function-call interrupts so far, all CPUs (what each resctrl read costs: an IPI to a CPU
# of the domain unless the reader is on one).
cal() {
  awk '/^ *CAL:/ { for (i = 2; i <= NF && $i ~ /^[0-9]+$/; i++) s += $i } END { print s + 0 }' /proc/interrupts
}
# rows: the recording, for the host (gzip, base64).
rows() {
  echo CS-ROWS-BEGIN
  gzip -c /tmp/rows.jsonl | base64
  echo CS-ROWS-END
}
# stop_cs WHAT: end the cachescope running in the background ($CS) as a user would (SIGINT), say
# its exit status as WHAT_exit, then what it said on stderr.
stop_cs() {
  kill -INT $CS
  wait $CS
  say "$1_exit=$?"
  sed 's/^/CS-STDERR /' /tmp/err.txt
}
# start NAME COMMAND...: COMMAND in container NAME, pinned to CPU 0, output in /tmp/NAME.out.
start() {
  n=$1; shift
  mkdir -p "$C/$n"
  taskset 0x1 sh -c "echo \$\$ > $C/$n/cgroup.procs && exec $*" >"/tmp/$n.out" 2>&1 &
  LAST=$!
}
# start_gated NAME COMMAND...: as start, but COMMAND runs only once `go NAME` is said: the
# container exists (and can be tagged) before its workload's first instruction. The shell
# waits in a read of a FIFO: no process is forked meanwhile (a polling loop's forks filled
# lines under the container's RMID before its workload began).
start_gated() {
  n=$1; shift
  mkdir -p "$C/$n"
  mkfifo "/tmp/go-$n"
  taskset 0x1 sh -c "echo \$\$ > $C/$n/cgroup.procs && read go < /tmp/go-$n && exec $*" >"/tmp/$n.out" 2>&1 &
  LAST=$!
}
go() {
  echo go >"/tmp/go-$1"
}
ready() {
  for n in "$@"; do
    i=0
    until grep -q ready "/tmp/$n.out" 2>/dev/null || [ $i -ge 600 ]; do sleep 0.1; i=$((i + 1)); done
  done
}

# tagged NAME [PID]: waits (at most 30 s) until the backend monitors container NAME's workload
# (PID, else the first in its cgroup.procs): with resctrl, the pid is in the tasks file of the
# group cachescope made for it.
tagged() {
  pid=${2:-$(head -1 "$C/$1/cgroup.procs")}
  i=0
  while [ $i -lt 300 ]; do
    case $backend in
      resctrl) grep -qx "$pid" "$R"/mon_groups/cachescope-ctr_"$1"-*/tasks 2>/dev/null && return 0 ;;
      *) return 0 ;;
    esac
    sleep 0.1; i=$((i + 1))
  done
  say "untagged_$1=1"
}
# settle NAME: NAME's workload (started with RDT_WORK_STOP=1) has written its buffer and
# stopped; once the backend tags it, a process of the default group pushes every line out of
# the LLC (and keeps its pages), and the workload goes on: the lines it then holds are all its
# own, filled under its RMID (lines belong to the RMID that filled them).
settle() {
  i=0
  until grep -q allocated "/tmp/$1.out" 2>/dev/null || [ $i -ge 600 ]; do sleep 0.1; i=$((i + 1)); done
  tagged "$1"
  taskset 0x1 rdt-work hold $((LLC * 2)) 600 >"/tmp/flush-$1.out" 2>&1 &
  ready "flush-$1"
  kill -CONT "$(cat "$C/$1/cgroup.procs" | head -1)"
}
# The kernel's own mon_data of each group cachescope made, beside its rows: a reference we did
# not write. Group names carry the container's cgroup path.
reference() {
  [ "$backend" = resctrl ] || return 0
  for g in "$R"/mon_groups/*/; do
    [ -d "$g" ] || continue
    echo "CS-REF uptime=$(cut -d' ' -f1 /proc/uptime) group=$(basename "$g") occ=$(cat "$g/mon_data/mon_L3_00/llc_occupancy") mbm=$(cat "$g/mon_data/mon_L3_00/mbm_total_bytes")"
  done
}

if [ "$backend" = msr ] && [ "${cs_mode:-}" != inject ]; then
  # Core groups: core 0 (L3 domain 0) runs only the workloads; this shell, cachescope's main
  # thread and everything else stay on core 1 where they can (the reader of domain 0 must run
  # on core 0). The msr backend writes PQR_ASSOC once per core.
  taskset -p 0x2 $$ >/dev/null
  quiet_cpu0
  start quarter env RDT_WORK_STOP=1 rdt-work touch $((LLC / 4)) 120
  i=0
  until grep -q allocated /tmp/quarter.out 2>/dev/null || [ $i -ge 600 ]; do sleep 0.1; i=$((i + 1)); done
  # Lines filled so far belong to RMID 0: push them all out before cachescope starts.
  taskset 0x1 rdt-work hold $((LLC * 2)) 600 >/tmp/flush.out 2>&1 &
  ready flush
  cachescope monitor --backend msr --cores 0,1 --pmu off --interval 100ms --jsonl $PEAK \
    >/tmp/rows.jsonl 2>/tmp/err.txt &
  CS=$!
  sleep 1
  kill -CONT "$(cat $C/quarter/cgroup.procs | head -1)"
  ready quarter
  sleep 2.5
  say settled="$(date +%s)"
  start stream rdt-work stream 16M 4 $((LLC * 4))
  wait $LAST
  # cachescope runs until told: SIGINT ends it cleanly, whatever the guest's pace was.
  sleep 0.5
  stop_cs monitor
  say stream="$(tr '\n' ' ' </tmp/stream.out)"
  rows
  say done=1
  finish
fi

# cs_mode=inject (the device sets U or E on every read): one container, a short run; every row
# must say so, with no number.
if [ "${cs_mode:-}" = inject ]; then
  start one rdt-work touch $((LLC / 4)) 60
  ready one
  if [ "$backend" = msr ]; then
    cachescope monitor --backend msr --cores 0,1 --pmu off --interval 100ms --jsonl --duration 3s \
      >/tmp/rows.jsonl 2>/tmp/err.txt
  else
    cachescope monitor --backend "$backend" --pmu off --containers 'ctr/*' --interval 100ms \
      --jsonl --duration 3s >/tmp/rows.jsonl 2>/tmp/err.txt
  fi
  say monitor_exit=$?
  sed 's/^/CS-STDERR /' /tmp/err.txt
  rows
  say done=1
  finish
fi

# cs_mode=limbo (-device rdt,rmids=4: three RMIDs for containers): a holds half the LLC, b and
# c sleep; a stops and its cgroup goes; d arrives and must wait while a's lines are cached (its
# RMID is in limbo), then get an RMID once a writer in the root cgroup has evicted them.
if [ "${cs_mode:-}" = limbo ]; then
  cachescope monitor --backend "$backend" --pmu off --containers 'ctr/*' --interval 100ms \
    --jsonl >/tmp/rows.jsonl 2>/tmp/err.txt &
  CS=$!
  sleep 1
  start a env RDT_WORK_STOP=1 rdt-work touch $((LLC / 2)) 600
  A=$LAST
  start b rdt-work idle 600
  start c rdt-work idle 600
  settle a
  ready a
  sleep 1.5
  kill $A
  wait $A
  rmdir $C/a
  say rmdir_a=$?
  say a_gone="$(date +%s)"
  start d rdt-work idle 600
  # d waits while a's RMID is in limbo: once a row says so (not after a fixed sleep: a slow
  # guest's backend may not have met d yet), and a second more of it.
  i=0
  until grep '"ctr_d' /tmp/rows.jsonl 2>/dev/null | grep -q no_rmid || [ $i -ge 600 ]; do sleep 0.1; i=$((i + 1)); done
  sleep 1
  say thrash_start="$(rdt-work now)"
  taskset 0x1 rdt-work thrash $((LLC * 4)) 3 >/dev/null 2>&1
  sleep 3
  stop_cs monitor
  rows
  say done=1
  finish
fi

# cs_mode=noisy: a noisy neighbour, recorded and reported as a user would. The victim passes
# over half the LLC every 50 ms and holds it; a thrasher (writing 4 x the LLC) starts beside
# it; `cachescope record` writes Parquet and `cachescope report --json` must name the thrasher
# and the victim in an episode, from what the device counted.
if [ "${cs_mode:-}" = noisy ]; then
  start victim env RDT_WORK_STOP=1 RDT_WORK_PAUSE_MS=50 rdt-work touch $((LLC / 2)) 600
  VICTIM=$LAST
  cachescope record --backend "$backend" --pmu off --containers 'ctr/*' --interval 100ms \
    $PEAK --output /tmp/rec >/dev/null 2>/tmp/err.txt &
  CS=$!
  [ "$backend" = kmod ] && sleep 2
  settle victim
  ready victim
  sleep 1
  reference
  sleep 1
  reference
  sleep 1
  # The thrasher's container is tagged before its first instruction: this test is about what
  # the report makes of what the device counted, not about how soon a backend notices a
  # container (a loaded host made resctrl's poll take seconds, and the thrasher's first
  # passes were charged to the default group).
  start_gated thrash rdt-work thrash $((LLC * 4)) 600
  THRASH=$LAST
  until grep -qx "$THRASH" "$C/thrash/cgroup.procs"; do sleep 0.05; done
  tagged thrash "$THRASH"
  sleep 0.5
  say thrash_start="$(rdt-work now)"
  go thrash
  ready thrash
  say thrash_ready="$(rdt-work now)"
  sleep 2
  reference
  sleep 2
  say thrash_end="$(date +%s)"
  kill $THRASH $VICTIM
  wait $THRASH $VICTIM 2>/dev/null
  sleep 0.5
  stop_cs record
  cachescope report --json /tmp/rec >/tmp/report.json 2>/tmp/report-err.txt
  say report_exit=$?
  sed 's/^/CS-STDERR /' /tmp/report-err.txt
  echo CS-REPORT-BEGIN
  gzip -c /tmp/report.json | base64
  echo CS-REPORT-END
  [ "$backend" = kmod ] && { rmmod cachescope; say rmmod=$?; }
  say done=1
  finish
fi

# A container that exists before cachescope starts (adopted then), one that starts while it
# runs, both holding a quarter of the LLC, and an idle one (all longer than the run).
start early env RDT_WORK_STOP=1 rdt-work touch $((LLC / 4)) 120
start idle rdt-work idle 120
cal_before=$(cal)
cachescope monitor --backend "$backend" --pmu off --containers 'ctr/*' --interval 100ms \
  --jsonl $PEAK >/tmp/rows.jsonl 2>/tmp/err.txt &
CS=$!
# The module adopts the cgroups that exist when the session sets its rules: once a row of
# `idle` is out, it has (a fixed sleep here once decided it).
if [ "$backend" = kmod ]; then
  i=0
  until grep -q '"ctr/idle"' /tmp/rows.jsonl 2>/dev/null || [ $i -ge 600 ]; do sleep 0.1; i=$((i + 1)); done
fi
start late env RDT_WORK_STOP=1 rdt-work touch $((LLC / 4)) 120
settle early
ready early
# late stopped once it wrote its buffer: it is settled the same way.
settle late
ready late
sleep 2.5
say settled="$(date +%s)"
reference
# A stream of 16 MiB/s through 4 x the LLC, for 4 s.
start stream rdt-work stream 16M 4 $((LLC * 4))
STREAM=$LAST
ready stream
sleep 2
reference
wait $STREAM
# cachescope runs until told: SIGINT ends it cleanly, whatever the guest's pace was.
sleep 0.5
kill -INT $CS
wait $CS
say monitor_exit=$?
say cal="$(($(cal) - cal_before))"
say stream="$(tr '\n' ' ' </tmp/stream.out)"
sed 's/^/CS-STDERR /' /tmp/err.txt
[ "$backend" = resctrl ] && say groups_left="$(ls $R/mon_groups | wc -l)"
if [ "$backend" = kmod ]; then
  rmmod cachescope
  say rmmod=$?
  dmesg | grep "cachescope:" | sed 's/^/CS-DMESG /'
fi
rows
say done=1
finish
