#!/bin/busybox sh
# /init of the RDT machine's guest for resctrl as today's kernels have it (scripts/guest-qemu.sh
# with -device rdt): the kernel's own driver on the device's assignable counters and sub-NUMA
# clusters, with workloads of known footprint (rdt-work). Prints "CS-RESULT key=value" lines for
# crates/cli/tests/rdt_modern.rs. Kernel parameter cs_mode:
#   abmc  (-device rdt,mbm-counters=N, AMD): the counters the kernel assigns, "Unassigned" for a
#         group without one, a stream counted by an assigned counter and, after the counter
#         moves, by its new group; on a kernel without mbm_event (6.1) the old behaviour.
#   snc   (-device rdt,snc=2, Intel, two NUMA nodes per L3): per-node sub-domains, each holding
#         what ran in its node, and the L3 file their sum.
. "${CS_INIT:-/lib/init.sh}"
R=/sys/fs/resctrl
LLC=$(($(sed 's/K$//' /sys/devices/system/cpu/cpu0/cache/index3/size) * 1024))
say llc_bytes=$LLC
say kernel="$(uname -r)"
mount_resctrl
say mount=$?
say num_rmids="$(cat $R/info/L3_MON/num_rmids)"

# run GROUP CPUMASK COMMAND...: COMMAND in MON group GROUP (made if missing) on CPUMASK, output
# in /tmp/GROUP.out.
run() {
  g=$1 mask=$2; shift 2
  mkdir -p "$R/mon_groups/$g"
  taskset "$mask" sh -c "echo \$\$ > $R/mon_groups/$g/tasks && exec $*" >"/tmp/$g.out" 2>&1 &
  LAST=$!
}
wait_for() {
  n=0
  until grep -q "$2" "/tmp/$1.out" 2>/dev/null || [ $n -ge 600 ]; do sleep 0.1; n=$((n + 1)); done
}
# settle GROUP PID: its workload (RDT_WORK_STOP=1) wrote its buffer and stopped; a writer of twice
# the LLC pushes every line out, then it goes on: the lines it holds afterwards are its own.
settle() {
  wait_for "$1" allocated
  taskset 0x1 rdt-work hold $((LLC * 2)) 600 >"/tmp/flush-$1.out" 2>&1 &
  wait_for "flush-$1" ready
  kill -CONT "$2"
  wait_for "$1" ready
}
file() { echo "$R/mon_groups/$1/mon_data/mon_L3_00/$2"; }
line() { tr '\n' ' ' <"$1" | sed 's/ *$//'; }

if [ "${cs_mode:-}" = abmc ]; then
  if [ ! -e $R/info/L3_MON/mbm_assign_mode ]; then
    # A kernel before assignable counters: every group counts, as before.
    say assign_mode=none
    run s 0x1 env RDT_WORK_STOP=1 RDT_WORK_COUNTER="$(file s mbm_total_bytes)" rdt-work stream 16M 3 $((LLC * 4))
    settle s $LAST
    wait $LAST
    say stream_s="$(line /tmp/s.out)"
    say done=1
    finish
  fi
  say assign_mode="$(line $R/info/L3_MON/mbm_assign_mode)"
  say num_mbm_cntrs="$(cat $R/info/L3_MON/num_mbm_cntrs)"
  say on_mkdir="$(cat $R/info/L3_MON/mbm_assign_on_mkdir)"
  say available_mount="$(cat $R/info/L3_MON/available_mbm_cntrs)"
  say default_assign="$(line $R/mbm_L3_assignments)"
  say filter_total="$(cat $R/info/L3_MON/event_configs/mbm_total_bytes/event_filter)"
  mkdir $R/mon_groups/a
  say available_a="$(cat $R/info/L3_MON/available_mbm_cntrs)"
  say a_assign="$(line $R/mon_groups/a/mbm_L3_assignments)"
  mkdir $R/mon_groups/b
  say mkdir_b=$?
  say b_status="$(cat $R/info/last_cmd_status)"
  say b_assign="$(line $R/mon_groups/b/mbm_L3_assignments)"
  say b_total="$(cat "$(file b mbm_total_bytes)")"
  say b_occupancy_number="$(cat "$(file b llc_occupancy)" | grep -c '^[0-9][0-9]*$')"
  # A stream in a, counted by its counter over the stream's own window.
  run a 0x1 env RDT_WORK_STOP=1 RDT_WORK_COUNTER="$(file a mbm_total_bytes)" rdt-work stream 16M 3 $((LLC * 4))
  settle a $LAST
  wait $LAST
  say stream_a="$(line /tmp/a.out)"
  # The counter of a's total bandwidth in domain 0 goes to b.
  echo "mbm_total_bytes:0=_" >$R/mon_groups/a/mbm_L3_assignments
  say unassign_a=$?
  echo "mbm_total_bytes:0=e" >$R/mon_groups/b/mbm_L3_assignments
  say assign_b=$?
  say a_assign_after="$(line $R/mon_groups/a/mbm_L3_assignments)"
  say b_assign_after="$(line $R/mon_groups/b/mbm_L3_assignments)"
  say a_total_after="$(cat "$(file a mbm_total_bytes)")"
  run b 0x1 env RDT_WORK_STOP=1 RDT_WORK_COUNTER="$(file b mbm_total_bytes)" rdt-work stream 16M 3 $((LLC * 4))
  settle b $LAST
  wait $LAST
  say stream_b="$(line /tmp/b.out)"
  rmdir $R/mon_groups/a $R/mon_groups/b
  say available_end="$(cat $R/info/L3_MON/available_mbm_cntrs)"
  splats
  say done=1
  finish
fi

if [ "${cs_mode:-}" = snc ]; then
  say snc_detected="$(dmesg | sed -n 's/.*Sub-NUMA Cluster mode detected with \([0-9]*\) nodes per L3 cache.*/\1/p')"
  say domains="$(ls $R/mon_data | tr '\n' ,)"
  say sub_00="$(ls $R/mon_data/mon_L3_00 | grep mon_sub | tr '\n' ,)"
  say sub_01="$(ls $R/mon_data/mon_L3_01 2>/dev/null | grep mon_sub | tr '\n' ,)"
  # A quarter of the LLC from node 0 (CPU 0), a quarter from node 1 (CPU 1): one L3.
  run n0 0x1 env RDT_WORK_STOP=1 rdt-work touch $((LLC / 4)) 120
  P0=$LAST
  run n1 0x2 env RDT_WORK_STOP=1 rdt-work touch $((LLC / 4)) 120
  P1=$LAST
  wait_for n1 allocated
  settle n0 $P0
  kill -CONT $P1
  wait_for n1 ready
  sleep 2
  for g in n0 n1; do
    d=$R/mon_groups/$g/mon_data/mon_L3_00
    say "${g}_sub0=$(cat $d/mon_sub_L3_00/llc_occupancy)"
    say "${g}_sub1=$(cat $d/mon_sub_L3_01/llc_occupancy)"
    say "${g}_l3=$(cat $d/llc_occupancy)"
  done
  kill $P0 $P1
  wait $P0 $P1 2>/dev/null
  # Bandwidth from node 1, over the stream's window, in the L3 file (the sum of both nodes).
  run s1 0x2 env RDT_WORK_STOP=1 RDT_WORK_COUNTER="$(file s1 mbm_total_bytes)" rdt-work stream 16M 3 $((LLC * 4))
  settle s1 $LAST
  wait $LAST
  say stream_s1="$(line /tmp/s1.out)"
  say s1_sub0_mbm="$(cat $R/mon_groups/s1/mon_data/mon_L3_00/mon_sub_L3_00/mbm_total_bytes)"
  say s1_sub1_mbm="$(cat $R/mon_groups/s1/mon_data/mon_L3_00/mon_sub_L3_01/mbm_total_bytes)"
  splats
  say done=1
  finish
fi
say unknown_mode="${cs_mode:-}"
finish
