#!/bin/busybox sh
# /init of the RDT machine's guest (scripts/guest-qemu.sh with -device rdt): the kernel's own
# resctrl on the emulated device, with workloads of known footprint (rdt-work) pinned to CPU 0,
# which is L3 domain 0 (-smp 2,sockets=2: one domain per vCPU). Prints "CS-RESULT key=value"
# lines for the host-side test (crates/cli/tests/rdt_qemu.rs).
# Kernel parameters that reach here: cs_mode=full (default) or cs_mode=read (mount, one group,
# one read of each file: for the device's injected U and E bits).
. "${CS_INIT:-/lib/init.sh}"
R=/sys/fs/resctrl

say vendor="$(sed -n 's/^vendor_id[[:space:]]*: //p' /proc/cpuinfo | head -1)"
say cpus="$(grep -c '^processor' /proc/cpuinfo)"
for f in cqm cqm_llc cqm_occup_llc cqm_mbm_total cqm_mbm_local; do
  say "flag_$f=$(grep '^flags' /proc/cpuinfo | grep -c " $f\( \|$\)")"
done
LLC=$(($(sed 's/K$//' /sys/devices/system/cpu/cpu0/cache/index3/size) * 1024))
say llc_bytes=$LLC
say detected="$(dmesg | grep -c 'resctrl: L3 monitoring detected')"
mount_resctrl
mounted=$?
say mount=$mounted
# Without L3 monitoring there is nothing more to check (the host-side test says why it fails).
if [ $mounted != 0 ]; then
  say done=1
  finish
fi
# Everything but the workloads on CPU 1, so that CPU 0's L3 domain holds what they filled. (With
# one host thread for both vCPUs, as under -icount, QEMU's plugin layer gave a shared block's
# callbacks the translating vCPU's index, and the model charged CPU 1's accesses to CPU 0's
# domain and RMID: a 1 MiB workload there read +40 % and more until tools/rdt-qemu's patch
# 0007; docs/testing.md.)
quiet_cpu0
say num_rmids="$(cat $R/info/L3_MON/num_rmids)"
say mon_features="$(tr '\n' , <$R/info/L3_MON/mon_features)"
say domains="$(ls $R/mon_data | tr '\n' ,)"

file() { echo "$R/mon_groups/$1/mon_data/mon_L3_0${3:-0}/$2"; }
occ() { cat "$(file "$1" llc_occupancy "$2")"; }
mbm() { cat "$(file "$1" mbm_total_bytes "$2")"; }
# samples GROUP: the median of 9 reads of its occupancy 0.11 ... 0.19 s apart (the victim refills
# its lines after every pause and the thrasher takes them again within milliseconds: one read is
# a coin). The gaps differ: in the guest's virtual time (-icount) the reads 0.1 s apart kept in
# step with the victim's 50 ms pauses and all fell just after its pass (a CI run on 7.2 read
# 1,978,368 B of its 2,109,440 beside the thrasher, which then held the whole L3).
samples() {
  for i in 1 2 3 4 5 6 7 8 9; do occ "$1"; sleep "0.1$i"; done | sort -n | sed -n 5p
}
# run GROUP COMMAND...: COMMAND in a new MON group, pinned to CPU 0, output in /tmp/GROUP.out.
run() {
  g=$1; shift
  mkdir -p "$R/mon_groups/$g"
  taskset 0x1 sh -c "echo \$\$ > $R/mon_groups/$g/tasks && exec $*" >"/tmp/$g.out" 2>&1 &
  LAST_PID=$!
  PIDS="$PIDS $!"
}
# finished: waits for the workloads started with run (not for the flushers, which stay).
finished() {
  # shellcheck disable=SC2086 # a list of pids
  wait $PIDS
  PIDS=
}
# settle GROUP...: the workloads (started with RDT_WORK_STOP=1) have written their buffers and
# stopped; a process of the default group then writes twice the LLC and keeps its pages, and
# the workloads go on. Every line a workload holds afterwards is one it filled itself: lines
# belong to the RMID that filled them, and the kernel hands out recently freed pages first,
# whose lines may still be cached under another RMID.
settle() {
  for g in "$@"; do
    n=0
    until grep -q allocated "/tmp/$g.out" 2>/dev/null || [ $n -ge 600 ]; do sleep 0.1; n=$((n + 1)); done
  done
  FLUSHES=$((FLUSHES + 1))
  taskset 0x1 rdt-work hold $((LLC * 2)) 600 >"/tmp/flush$FLUSHES.out" 2>&1 &
  ready "flush$FLUSHES"
  # shellcheck disable=SC2086 # a list of pids
  kill -CONT $PIDS
}
# ready GROUP...: waits until each has warmed up (at most 60 s).
ready() {
  for g in "$@"; do
    n=0
    until grep -q ready "/tmp/$g.out" 2>/dev/null || [ $n -ge 600 ]; do sleep 0.1; n=$((n + 1)); done
  done
}

if [ "${cs_mode:-full}" = read ]; then
  mkdir $R/mon_groups/g
  say read_occupancy="$(occ g)"
  say read_mbm_total="$(mbm g)"
  say read_mbm_local="$(cat "$(file g mbm_local_bytes)")"
  say done=1
  finish
fi

# cs_mode=limbo (-device rdt,rmids=4: RMIDs 1-3 for groups): a freed RMID whose lines are still
# cached is not handed out again until they are gone.
if [ "${cs_mode:-}" = limbo ]; then
  say threshold="$(cat $R/info/L3_MON/max_threshold_occupancy)"
  run a env RDT_WORK_STOP=1 rdt-work touch $((LLC / 2)) 600
  settle a
  ready a
  mkdir $R/mon_groups/b $R/mon_groups/c
  say three_groups=$?
  say a_occ="$(occ a)"
  kill $PIDS
  finished
  rmdir $R/mon_groups/a
  say rmdir_a=$?
  # Its 2 MiB are still in the LLC: the kernel keeps the RMID in limbo.
  mkdir $R/mon_groups/d 2>/dev/null
  say mkdir_dirty=$?
  say last_cmd_status="$(cat $R/info/last_cmd_status)"
  # A writer in the default group evicts them; the limbo worker (every second) frees the RMID.
  taskset 0x1 rdt-work thrash $((LLC * 4)) 3 >/dev/null 2>&1
  n=0
  until mkdir $R/mon_groups/d 2>/dev/null || [ $n -ge 50 ]; do sleep 0.2; n=$((n + 1)); done
  say mkdir_clean="$([ -d $R/mon_groups/d ] && echo 0 || echo 1)"
  say d_occ="$(occ d)"
  say done=1
  finish
fi

# Occupancy: a quarter and a half of the LLC held by two workloads side by side (3/4 of the
# cache in all, LRU keeps both), and one that sleeps.
run quarter env RDT_WORK_STOP=1 rdt-work touch $((LLC / 4)) 60
run half env RDT_WORK_STOP=1 rdt-work touch $((LLC / 2)) 60
# The idle program starts before the flush, not beside the running workloads.
run idle rdt-work idle 60
settle quarter half
ready quarter half idle
say idle_mbm0="$(mbm idle)"
sleep 2
# Medians of 9 reads, with what else their groups held beside them (one CI run read the quarter
# +33 %).
say quarter_occ="$(samples quarter)"
say half_occ="$(samples half)"
say occ_context="quarter_tasks=$(tr '\n' , <$R/mon_groups/quarter/tasks) half_tasks=$(tr '\n' , <$R/mon_groups/half/tasks)\
 $(grep -E '^(pgmigrate_success|thp_collapse_alloc|thp_fault_alloc|compact_isolated) ' /proc/vmstat | tr ' \n' '=,')\
 clocksource=$(cat /sys/devices/system/clocksource/clocksource0/current_clocksource)\
 reads=$(for _ in 1 2 3 4 5; do occ quarter; sleep 0.2; done | tr '\n' ,)"
say idle_occ="$(occ idle)"
say idle_mbm="$(mbm idle)"
say quarter_occ_d1="$(occ quarter 1)"
# shellcheck disable=SC2086 # a list of pids
kill $PIDS
finished

# Bandwidth: 16 MiB/s read from a buffer 4 x the LLC (every line a miss); the workload reads
# the kernel's counter just before and after its window.
run stream env RDT_WORK_STOP=1 RDT_WORK_COUNTER="$(file stream mbm_total_bytes)" rdt-work stream 16M 3 $((LLC * 4))
settle stream
finished
say stream="$(tr '\n' ' ' </tmp/stream.out)"

# A noisy neighbour: the victim passes over half the cache every 50 ms and holds it; then a
# writer of 4 x the LLC runs beside it and takes most of it.
run victim env RDT_WORK_STOP=1 RDT_WORK_PAUSE_MS=50 rdt-work touch $((LLC / 2)) 60
settle victim
ready victim
sleep 1
say victim_before="$(samples victim)"
run thrash rdt-work thrash $((LLC * 4)) 60
ready thrash
sleep 2
say victim_during="$(samples victim)"
say thrash_occ="$(samples thrash)"
say thrash_mbm_ok="$([ "$(mbm thrash)" -gt $((LLC * 4)) ] && echo 1 || echo 0)"
# Both run until told (a loaded host stretches the reads above): stop them now.
# shellcheck disable=SC2086 # a list of pids
kill $PIDS
finished

# Flushes (the kernel's CMT selftest): a quarter of the LLC written in group fa, every line
# flushed, then read by the same process from group fb: fb holds the lines, fa none, and fa's
# counter has the dirty lines' write-backs. Non-temporal stores: half the LLC stored 4 times in
# group nt moves 2 LLCs to memory and leaves nothing cached.
# The cache pushed full of a flusher's lines first: fa's pages may be ones the workloads just
# ended freed, whose lines are still cached under their RMIDs, and a hit does not change a
# line's owner (settle's reason): its fills and write-backs would be theirs (a CI run: 405,504 B
# of the 1 MiB written back counted for fa).
FLUSHES=$((FLUSHES + 1))
taskset 0x1 rdt-work hold $((LLC * 2)) 600 >"/tmp/flush$FLUSHES.out" 2>&1 &
ready "flush$FLUSHES"
mkdir -p "$R/mon_groups/fa" "$R/mon_groups/fb"
fa_mbm0="$(mbm fa)"
run fa rdt-work flush $((LLC / 4)) "$R/mon_groups/fb/tasks" 60
ready fa
say flush_a_occ="$(occ fa)"
say flush_b_occ="$(occ fb)"
say flush_a_mbm="$(($(mbm fa) - fa_mbm0))"
run nt env RDT_WORK_STOP=1 rdt-work ntstore $((LLC / 2)) 4 60
n=0
until grep -q allocated /tmp/nt.out 2>/dev/null || [ $n -ge 600 ]; do sleep 0.1; n=$((n + 1)); done
# Counted from here: the flush of its (dirty) buffer, then the non-temporal passes.
nt_mbm0="$(mbm nt)"
kill -CONT $LAST_PID
ready nt
say nt_occ="$(occ nt)"
say nt_mbm="$(($(mbm nt) - nt_mbm0))"
say nt_stored="$(sed -n 's/^stored=//p' /tmp/nt.out)"
# shellcheck disable=SC2086 # a list of pids
kill $PIDS
finished

for g in quarter half idle stream victim thrash fa fb nt; do rmdir "$R/mon_groups/$g" || say rmdir_failed="$g"; done
say done=1
finish
