#!/bin/busybox sh
# /init of the RDT machine's guest for its PMU (-device rdt,pmu=on; Intel's architectural PMU
# on an Intel CPU model, AMD's core counters on an AMD one):
# Linux's own perf (Debian's, carried in) against workloads whose counts are known (work.c's
# spin and passes). Prints what Linux said of its PMU, each perf stat line as
# "CS-PERF LABEL CSV" and the sample count of a perf record, for crates/cli/tests/rdt_qemu.rs,
# which judges them: instructions exactly, references and misses within 2 %, the cycle model's
# identity, the PERFEVTSEL fields (CMASK, INV, EDGE, USR, OS) and the overflow interrupt; then
# cachescope's per-container PMU columns against perf stat of the container's process, with the
# recording for the host.
. "${CS_INIT:-/lib/init.sh}"
say kernel="$(uname -r)"
vendor=$(sed -n 's/^vendor_id[[:space:]]*: //p' /proc/cpuinfo | head -1)
say vendor="$vendor"
say perf_driver="$(dmesg | sed -n 's/.*Performance Events: //p' | head -1 | tr -s ' ' '_')"
say nmi_watchdog="$(cat /proc/sys/kernel/nmi_watchdog 2>/dev/null)"
say cpu_pmu="$(ls /sys/bus/event_source/devices/cpu/format 2>/dev/null | tr '\n' ,)"
cd /tmp || exit 1
# Perf's cgroup events need the perf_event controller's state in each cgroup, which cgroup v2
# gives every cgroup implicitly, but only once the root's subtree_control has been written
# (until then perf_event_open answers ENOENT, and perf stat -G "<not supported>"). systemd
# writes it at every boot; this /init enables pids, as a host's would be.
echo +pids >/sys/fs/cgroup/cgroup.subtree_control

# pstat LABEL EVENTS COMMAND...: perf stat of COMMAND, each event's CSV line as CS-PERF LABEL.
pstat() {
  label=$1 events=$2
  shift 2
  if ! perf stat -x, -e "$events" -o /tmp/stat.csv -- "$@" >/tmp/stat.out 2>&1; then
    say "perf_failed_$label=1"
    sed "s/^/CS-PERF-OUT $label /" /tmp/stat.out
  fi
  grep -v '^#' /tmp/stat.csv | grep . | sed "s/^/CS-PERF $label /"
}

# Counter scarcity as a host may have it (cs_scarce=1: the machine has two general counters and
# the kernel's NMI watchdog on): the watchdog holds the core-cycles counter, so cachescope's
# cycles, references and misses share the two general counters and the kernel multiplexes
# them. Each of cachescope's paths (eBPF, perf cgroup events) counts a walk in a container at
# 1 ms, and its sums are judged against perf stat of the same walk run alone (instructions,
# references and misses fit the counters then): what is judged is the values, not only that
# scaling was said.
if [ "${cs_scarce:-}" = 1 ]; then
  echo never >/sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null
  walk="rdt-work passes 8M 20"
  taskset 0x2 perf stat -x, -o /tmp/ref.csv -e instructions,cache-references,cache-misses,task-clock -- $walk >/tmp/ref.out 2>&1
  say ref_exit=$?
  sed 's/^/CS-PERF-OUT ref /' /tmp/ref.out
  grep -v '^#' /tmp/ref.csv | grep . | sed 's/^/CS-PERF ref /'
  C=/sys/fs/cgroup/ctr
  for pmu in bpf perf; do
    mkdir -p "$C/$pmu"
    taskset 0x1 cachescope monitor --backend none --pmu "$pmu" --containers "ctr/$pmu" --jsonl \
      >"/tmp/$pmu.jsonl" 2>"/tmp/$pmu.err" &
    CS=$!
    i=0
    until grep -q "\"ctr/$pmu\"" "/tmp/$pmu.jsonl" || ! kill -0 $CS 2>/dev/null || [ $i -ge 600 ]; do
      sleep 0.1; i=$((i + 1))
    done
    taskset 0x2 sh -c "echo \$\$ > $C/$pmu/cgroup.procs && exec $walk"
    say "${pmu}_work_exit=$?"
    # Past a keyframe (1 s), so that every interval's counts are out.
    sleep 2
    kill -INT $CS
    wait $CS
    say "${pmu}_exit=$?"
    sed "s/^/CS-STDERR-$pmu /" "/tmp/$pmu.err"
  done
  rows_out /tmp/bpf.jsonl /tmp/perf.jsonl
  splats
  say done=1
  finish
fi

# Instructions: exact, per privilege; the loop touches no memory (an instruction that faults
# is taken back by the device: it counts once, when its retry retires).
both=instructions:u,instructions:k,instructions,cycles:u,cache-references:u,cache-misses:u,page-faults
pstat spin1 "$both" rdt-work spin 1000000
pstat spin9 "$both" rdt-work spin 9000000
# References and misses of known footprints: 8 MiB streams through the 4 MiB L3 (every line
# misses), 1 MiB stays in it but not in the 256 KiB private cache (every line a reference).
refs=cache-references:u,cache-misses:u,instructions:u,cycles:u
# Runs differ by their passes only if their set-up misses the same: with transparent huge
# pages, whether a fault got a huge page (zeroed by the kernel at once, its lines then cached)
# varies run to run, and one CI run's big2 missed 30,731 lines more than the same set-up
# had (a 2.3 % error on the difference). 4 KiB pages only: each zeroed just before its use.
# Only here: what follows (cachescope against perf stat) was measured with the kernel's
# default, and 2,048 more faults of a walk's 8 MiB move its kernel-side counts.
thp=/sys/kernel/mm/transparent_hugepage/enabled
thp_was=$(sed -n 's/.*\[\(.*\)\].*/\1/p' "$thp" 2>/dev/null)
echo never >"$thp" 2>/dev/null
say thp="$(cat "$thp" 2>/dev/null)"
pstat big2 "$refs" rdt-work passes 8M 2
pstat big12 "$refs" rdt-work passes 8M 12
pstat mid2 "$refs" rdt-work passes 1M 2
pstat mid10 "$refs" rdt-work passes 1M 10
if [ -n "$thp_was" ]; then echo "$thp_was" >"$thp" 2>/dev/null; fi
# The selector's fields, as raw events: stalled cycles (CMASK=1 INV), misses counted by edge,
# and a CMASK no cycle reaches; beside cycles, instructions and misses of the same run.
# The misses' raw event: Intel's LLC misses; AMD's L2 misses from data-cache misses (Linux's
# cache-misses on Family 17h).
miss=event=0x2e,umask=0x41
[ "$vendor" = AuthenticAMD ] && miss=event=0x64,umask=0x09
raw='cycles:u,instructions:u,cache-misses:u,cpu/event=0xc0,umask=0x0,cmask=1,inv=1,name=stalls/u'
raw="$raw,cpu/$miss,edge=1,name=miss_edges/u,cpu/event=0xc0,umask=0x0,cmask=2,name=cmask2/u"
pstat fields "$raw" rdt-work passes 8M 2
# The overflow interrupt: a sample every 1,000,003 instructions at CPL 3, counted in the ring.
# The kernel throttles an event whose interrupts take "too long" of the CPU
# (perf_cpu_time_max_percent, judged in the guest's time, which TCG on a busy host stretches):
# a 7.2 boot on a loaded host lost 3 of 20 samples so. What is checked is the interrupt, not
# that policy: no limit here.
echo 0 >/proc/sys/kernel/perf_cpu_time_max_percent 2>/dev/null
echo 100000 >/proc/sys/kernel/perf_event_max_sample_rate 2>/dev/null
# The sampler is rdt-work's own (perf_event_open and its ring): perf record and perf script
# spent 20 to 35 s of the host's time per boot starting, ending and decoding.
rdt-work sample 1000003 10000000 >/tmp/sample.out 2>&1
say sample_exit=$?
sed 's/^/CS-PERF-OUT sample /' /tmp/sample.out
for k in samples lost throttles count; do
  v=$(sed -n "s/.*\b$k=\([0-9]*\).*/\1/p" /tmp/sample.out)
  if [ "$k" = samples ]; then say "samples=${v:--1}"; else say "sample_$k=${v:--1}"; fi
done
say throttled="$(dmesg | grep -c 'took too long')"

# cachescope's PMU columns per container against `perf stat -a -G` of the same cgroup, on each
# of its paths: eBPF (the counters read at every context switch, under ctr/) and perf cgroup
# events (--pmu perf, under pctr/). Each workload's shell moves itself in and waits on a FIFO
# until perf and cachescope both follow its container, then becomes the workload. (Against
# perf stat of the process instead, counting by task, a walk read 2.3-3.7 % more instructions
# on Intel and 7 % more L2 lookups on AMD on both paths, its spin 0.3 % more: the work around
# its 2,048 page faults and its exit that counting by CPU sees.)
C=/sys/fs/cgroup/ctr
ev=cycles,instructions,cache-references,cache-misses
# AMD's six counters hold cachescope's four events on each CPU and two of perf's: perf counts
# the spin's cycles and instructions, the walk's references and misses (Intel's fixed counters
# and eight general ones hold all four of each).
ev_spin=$ev ev_walk=$ev
[ "$vendor" = AuthenticAMD ] && ev_spin=cycles,instructions ev_walk=cache-references,cache-misses
# The kernel's own count of the eBPF programs' runs and time, which cachescope prints at the end.
echo 1 >/proc/sys/kernel/bpf_stats_enabled
# cgroups CG EVENTS: perf's -G argument for EVENTS (comma-separated), each counted in CG.
cgroups() {
  echo "$2" | sed "s|[^,][^,]*|$1|g"
}

# per_container PMU PARENT P: cachescope --pmu PMU following PARENT/spin and PARENT/walk;
# perf stat -G's lines labelled Pspin and Pwalk, results prefixed P, rows in /tmp/Prows.jsonl.
per_container() {
  pmu=$1 parent=/sys/fs/cgroup/$2 p=$3
  mkdir -p "$parent/spin" "$parent/walk"
  for n in spin walk; do mkfifo "/tmp/go-$p$n"; done
  taskset 0x1 sh -c "echo \$\$ > $parent/spin/cgroup.procs && read go < /tmp/go-${p}spin && exec rdt-work spin 20000000" &
  SPIN=$!
  taskset 0x2 sh -c "echo \$\$ > $parent/walk/cgroup.procs && read go < /tmp/go-${p}walk && exec rdt-work passes 8M 3" &
  WALK=$!
  i=0
  until [ "$(cat "$parent/spin/cgroup.procs" "$parent/walk/cgroup.procs" | grep -c .)" -eq 2 ] || [ $i -ge 300 ]; do
    sleep 0.1; i=$((i + 1))
  done
  # Each shell waits on its FIFO by now: perf counts its cgroup from here to the end (CSV
  # fields: value, unit, event, cgroup, run time, share), each line relabelled by its cgroup.
  # perf starts with its events disabled and enables them on its control FIFO, answering
  # "ack": past that its events count and its SIGINT handler is set (a background job of a
  # script starts with SIGINT ignored, and one sent before perf set its handler was lost: perf
  # never ended).
  mkfifo "/tmp/${p}ctl" "/tmp/${p}ack"
  perf stat -a -D -1 --control "fifo:/tmp/${p}ctl,/tmp/${p}ack" -x, -o "/tmp/${p}G.csv" -e "$ev_spin,$ev_walk" \
    -G "$(cgroups "$2/spin" "$ev_spin"),$(cgroups "$2/walk" "$ev_walk")" >"/tmp/${p}G.out" 2>&1 &
  PERF=$!
  timeout 120 sh -c "echo enable >/tmp/${p}ctl && read a </tmp/${p}ack"
  say "${p}perf_enabled=$((! $?))"
  cachescope monitor --backend none --pmu "$pmu" --containers "$2/*" --interval 100ms --jsonl \
    >"/tmp/${p}rows.jsonl" 2>"/tmp/${p}err.txt" &
  CS=$!
  following() { grep -q "\"$2/walk\"" "/tmp/${p}rows.jsonl" && grep -q "\"$2/spin\"" "/tmp/${p}rows.jsonl"; }
  i=0
  until following "$@" || ! kill -0 $CS 2>/dev/null || [ $i -ge 600 ]; do
    sleep 0.1; i=$((i + 1))
  done
  following "$@"
  say "${p}cs_following=$((! $?))"
  echo go >"/tmp/go-${p}spin"
  echo go >"/tmp/go-${p}walk"
  wait $SPIN
  say "${p}spin_exit=$?"
  wait $WALK
  say "${p}walk_exit=$?"
  # perf stat -a ends at SIGINT, with 128 + 2.
  kill -INT $PERF
  wait $PERF
  say "${p}perf_exit=$?"
  sed "s/^/CS-PERF-OUT ${p}G /" "/tmp/${p}G.out"
  grep -v '^#' "/tmp/${p}G.csv" | awk -F, -v p="$p" 'NF >= 6 {
    n = split($4, cg, "/"); line = $1 "," $2 "," $3
    for (i = 5; i <= NF; i++) line = line "," $i
    print "CS-PERF " p cg[n] " " line }'
  # Past a keyframe (1 s), so that every interval's counts are out.
  sleep 2
  kill -INT $CS
  wait $CS
  say "${p}cs_exit=$?"
  sed "s/^/CS-STDERR /" "/tmp/${p}err.txt"
}
per_container bpf ctr ""
per_container perf pctr p
rows_out /tmp/rows.jsonl /tmp/prows.jsonl

# Counter scarcity: perf pins seven LLC-reference events on every CPU, so cachescope's two
# events that need a general counter (references, misses) share the eighth (on AMD, five
# L2-miss events of six counters, and cachescope's four share the sixth). The kernel
# multiplexes them and scales their counts; cachescope must say so when it ends.
hog='{r4f2e,r4f2e,r4f2e,r4f2e,r4f2e,r4f2e,r4f2e}:D'
[ "$vendor" = AuthenticAMD ] && hog='{r0964,r0964,r0964,r0964,r0964}:D'
perf stat -a -x, -o /tmp/hog.csv -e "$hog" >/tmp/hog.out 2>&1 &
HOG=$!
mkdir -p "$C/scarce"
cachescope monitor --backend none --pmu bpf --containers 'ctr/scarce' --interval 100ms --jsonl \
  >/tmp/scarce.jsonl 2>/tmp/scarce.err &
CS=$!
i=0
until grep -q '"ctr/scarce"' /tmp/scarce.jsonl || ! kill -0 $CS 2>/dev/null || [ $i -ge 600 ]; do
  sleep 0.1; i=$((i + 1))
done
sh -c "echo \$\$ > $C/scarce/cgroup.procs && exec rdt-work passes 8M 2"
say scarce_work_exit=$?
sleep 1
kill -INT $CS
wait $CS
say scarce_exit=$?
kill -INT $HOG
wait $HOG
sed 's/^/CS-SCARCE /' /tmp/scarce.err /tmp/hog.out
grep -v '^#' /tmp/hog.csv | grep . | sed 's/^/CS-SCARCE hog /'
splats
say done=1
finish
