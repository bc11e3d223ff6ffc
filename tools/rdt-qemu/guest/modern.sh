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
#   assign (-device rdt,mbm-counters=32): cachescope assigning the counters (below).
#   snc_backend (as snc): cachescope's resctrl backend with a node per domain (below).
#   share: another owner's group and a crashed run's orphan (below).
#   crun  (-device rdt,closids=N): the kernel's cache allocation on the device, then a container
#         whose groups crun made (the OCI spec's enableMonitoring; below).
#   hook: a container's first 50 ms, tagged by cachescope's watcher (its tagger) and by its OCI hook (below).
#   nri:  the same, tagged by `cachescope hook nri` on containerd's NRI socket, in a pod made
#         through containerd's CRI (below).
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
  _w=0
  until grep -q "$2" "/tmp/$1.out" 2>/dev/null || [ $_w -ge 600 ]; do sleep 0.1; _w=$((_w + 1)); done
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
# the_end: cachescope's stderr, the recording (gzip, base64) where there is one, the kernel's
# splats; then power off.
the_end() {
  [ -e /tmp/err.txt ] && sed 's/^/CS-STDERR /' /tmp/err.txt
  if [ -e /tmp/rows.jsonl ]; then
    echo CS-ROWS-BEGIN
    gzip -c /tmp/rows.jsonl | base64
    echo CS-ROWS-END
  fi
  splats
  say done=1
  finish
}

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
  the_end
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
  the_end
fi
# cs_mode=assign (-device rdt,mbm-counters=32,rmids=128, AMD): cachescope's resctrl backend
# owns the counters: 100 containers, one pinned (a stream of 16 MiB/s), 99 idle, beside another
# owner's group holding two counters per L3; the recording and what the kernel says after
# cachescope has gone.
if [ "${cs_mode:-}" = assign ]; then
  C=/sys/fs/cgroup/ctr
  mkdir -p $C
  i=0
  while [ $i -lt 99 ]; do
    n=$(printf 'c%02d' $i)
    mkdir $C/$n
    sh -c "echo \$\$ > $C/$n/cgroup.procs && exec sleep 600" &
    i=$((i + 1))
  done
  mkdir $C/pin
  # The pinned stream exists (stopped) before cachescope starts, so that it is tagged before it
  # streams: this test is about counters, not about how soon a container is tagged. It streams
  # for 16 s, from its first measured row (about 5 s) to about 21 s of the 50 s run: a tick that reads 600 counter files under
  # TCG took up to 2.5 s in a CI run, and 8 s then held only 3 whole rows of the 5 the test needs.
  taskset 0x1 sh -c "echo \$\$ > $C/pin/cgroup.procs && exec env RDT_WORK_STOP=1 rdt-work stream 16M 16 $((LLC * 4))" >/tmp/pin.out 2>&1 &
  PIN=$!
  wait_for pin allocated
  # Another owner's group, with the two counters mkdir gave it: cachescope leaves them be.
  mkdir $R/mon_groups/other
  say on_mkdir_before="$(cat $R/info/L3_MON/mbm_assign_on_mkdir)"
  say available_before="$(cat $R/info/L3_MON/available_mbm_cntrs)"
  # Every second (a TCG guest reads the 600 counter files in about half of it), turns of 3 s.
  cachescope monitor --backend resctrl --pmu off --containers 'ctr/*' --interval 1s \
    --mbm-rotate 3s --mbm-pin 'ctr/pin' --jsonl --duration 50s >/tmp/rows.jsonl 2>/tmp/err.txt &
  CS=$!
  # The stream goes once the pinned container has a measured row (its counter assigned and a
  # baseline read): a fixed 5 s here was once not enough on a loaded host, and the stream's
  # first row in its window was that baseline, null. 60 s is a hang.
  _w=0
  until grep '"cgroup_path":"ctr/pin"' /tmp/rows.jsonl 2>/dev/null | grep -q '"mbm_total_bytes":[0-9]' || [ $_w -ge 600 ]; do
    sleep 0.1
    _w=$((_w + 1))
  done
  say pin_measured_after="$((_w / 10)) s"
  say on_mkdir_during="$(cat $R/info/L3_MON/mbm_assign_on_mkdir)"
  kill -CONT $PIN
  wait $PIN
  say stream_pin="$(line /tmp/pin.out)"
  # Ended (SIGTERM) once every container has had a measured row, what the test asks of the
  # rotation: about 25 s here; the 50 s --duration is only the ceiling.
  _w=0
  while kill -0 $CS 2>/dev/null && [ $_w -lt 600 ]; do
    [ "$(grep '"mbm_total_bytes":[0-9]' /tmp/rows.jsonl | grep -o '"cgroup_path":"ctr/[a-z0-9]*"' | sort -u | wc -l)" -ge 100 ] && break
    sleep 1
    _w=$((_w + 1))
  done
  say measured_at_stop="$(grep '"mbm_total_bytes":[0-9]' /tmp/rows.jsonl | grep -o '"cgroup_path":"ctr/[a-z0-9]*"' | sort -u | wc -l)"
  kill -TERM $CS 2>/dev/null
  wait $CS
  say monitor_exit=$?
  say on_mkdir_after="$(cat $R/info/L3_MON/mbm_assign_on_mkdir)"
  say available_after="$(cat $R/info/L3_MON/available_mbm_cntrs)"
  say groups_left="$(ls $R/mon_groups | grep -c '^cachescope-')"
  say other_assign="$(line $R/mon_groups/other/mbm_L3_assignments)"
  # A run killed with SIGKILL cannot put mbm_assign_on_mkdir back; the next one does.
  cachescope monitor --backend resctrl --pmu off --containers 'ctr/*' --interval 1s >/dev/null 2>&1 &
  KILLED=$!
  sleep 4
  kill -KILL $KILLED
  wait $KILLED 2>/dev/null
  say on_mkdir_killed="$(cat $R/info/L3_MON/mbm_assign_on_mkdir)"
  cachescope monitor --backend resctrl --pmu off --containers 'ctr/*' --interval 1s --duration 4s \
    >/dev/null 2>/tmp/err-next.txt
  say on_mkdir_next="$(cat $R/info/L3_MON/mbm_assign_on_mkdir)"
  say groups_left_next="$(ls $R/mon_groups | grep -c '^cachescope-')"
  the_end
fi
# cs_mode=snc_backend (as snc): cachescope's resctrl backend on SNC: a container on node 0's CPU
# and one on node 1's, each a quarter of the LLC; its rows per node, and the kernel's files of
# the groups it made as the reference.
if [ "${cs_mode:-}" = snc_backend ]; then
  C=/sys/fs/cgroup/ctr
  mkdir -p $C/n0 $C/n1
  cachescope monitor --backend resctrl --pmu off --containers 'ctr/*' --interval 250ms \
    --jsonl >/tmp/rows.jsonl 2>/tmp/err.txt &
  CS=$!
  for n in n0 n1; do
    mask=0x1
    [ $n = n1 ] && mask=0x2
    taskset $mask sh -c "echo \$\$ > $C/$n/cgroup.procs && exec env RDT_WORK_STOP=1 rdt-work touch $((LLC / 4)) 120" >/tmp/$n.out 2>&1 &
    eval "P_$n=\$!"
  done
  for n in n0 n1; do
    wait_for $n allocated
    pid=$(head -1 $C/$n/cgroup.procs)
    i=0
    until grep -qx "$pid" $R/mon_groups/cachescope-ctr_$n-*/tasks 2>/dev/null || [ $i -ge 300 ]; do sleep 0.1; i=$((i + 1)); done
  done
  taskset 0x1 rdt-work hold $((LLC * 2)) 600 >/tmp/flush.out 2>&1 &
  wait_for flush ready
  # shellcheck disable=SC2154 # set by eval
  kill -CONT $P_n0 $P_n1
  wait_for n0 ready
  wait_for n1 ready
  sleep 2
  say settled="$(date +%s)"
  for n in n0 n1; do
    g=$(ls -d $R/mon_groups/cachescope-ctr_$n-* | head -1)
    say "${n}_ref_l3=$(cat $g/mon_data/mon_L3_00/llc_occupancy)"
    say "${n}_ref_sub0=$(cat $g/mon_data/mon_L3_00/mon_sub_L3_00/llc_occupancy)"
    say "${n}_ref_sub1=$(cat $g/mon_data/mon_L3_00/mon_sub_L3_01/llc_occupancy)"
  done
  sleep 1
  kill -INT $CS
  wait $CS
  say monitor_exit=$?
  # shellcheck disable=SC2154 # set by eval
  kill $P_n0 $P_n1
  cachescope info >/tmp/info.txt 2>&1
  say info_snc="$(grep -o 'SNC on: [0-9]* nodes per L3' /tmp/info.txt | head -1)"
  the_end
fi
# cs_mode=share: another owner's group (as runc's enableMonitoring or an NRI plugin makes one:
# the container's first process in it before it runs) and a crashed cachescope's orphan, met by
# cachescope's resctrl backend: it reads the first, leaves it as found, and removes the second.
if [ "${cs_mode:-}" = share ]; then
  C=/sys/fs/cgroup/ctr
  mkdir -p $C/owned
  mkdir $R/mon_groups/runc-owned
  taskset 0x1 sh -c "echo \$\$ > $C/owned/cgroup.procs && echo \$\$ > $R/mon_groups/runc-owned/tasks && exec env RDT_WORK_STOP=1 rdt-work touch $((LLC / 4)) 120" >/tmp/owned.out 2>&1 &
  PO=$!
  mkdir $R/mon_groups/cachescope-ctr_gone-0
  wait_for owned allocated
  say proc_resctrl="$(tr '\n' ' ' </proc/$PO/resctrl)"
  cachescope info >/tmp/info.txt 2>&1
  say info_others="$(grep -o "other owners' groups hold [0-9]* RMIDs: [^;]*" /tmp/info.txt | head -1)"
  cachescope monitor --backend resctrl --pmu off --containers 'ctr/*' --interval 250ms \
    --jsonl >/tmp/rows.jsonl 2>/tmp/err.txt &
  CS=$!
  sleep 2
  taskset 0x1 rdt-work hold $((LLC * 2)) 600 >/tmp/flush.out 2>&1 &
  wait_for flush ready
  kill -CONT $PO
  wait_for owned ready
  sleep 2
  say settled="$(date +%s)"
  say ref_owned="$(cat $R/mon_groups/runc-owned/mon_data/mon_L3_00/llc_occupancy)"
  say orphan_gone="$([ -d $R/mon_groups/cachescope-ctr_gone-0 ] && echo 0 || echo 1)"
  sleep 1
  kill -INT $CS
  wait $CS
  say monitor_exit=$?
  say runc_group_kept="$([ -d $R/mon_groups/runc-owned ] && echo 1 || echo 0)"
  say runc_task_kept="$(grep -cx "$PO" $R/mon_groups/runc-owned/tasks)"
  say ours_left="$(ls $R/mon_groups | grep -c '^cachescope-')"
  kill $PO
  the_end
fi
# cs_mode=crun: first the device's cache allocation as the kernel drives it: a CTRL_MON group
# whose schemata allows 2 of the 16 ways, running a workload of half the LLC, holds an eighth of
# it. Then a container run by Debian unstable's crun (scripts/debian-crun.sh, in /opt/crun) whose
# OCI spec asks for linux.intelRdt.enableMonitoring: crun makes a CTRL_MON group named after the
# container (no closID in the spec) and a MON group in it, and puts the container's first
# process there before it runs. cachescope's resctrl backend, already running, reads that group
# and leaves it as found; crun removes both when the container goes. crun does not keep the
# affinity it was started with (taskset): the container pins itself to CPU 0 (busybox taskset,
# which execs the workload: the same process).
if [ "${cs_mode:-}" = crun ]; then
  say num_closids="$(cat $R/info/L3/num_closids 2>/dev/null || echo none)"
  say cbm_mask="$(cat $R/info/L3/cbm_mask 2>/dev/null || echo none)"
  mkdir $R/small
  say mkdir_small=$?
  echo "L3:0=3;1=3" >$R/small/schemata
  say schemata_small=$?
  say small_schemata="$(grep L3 $R/small/schemata | tr -d ' ')"
  taskset 0x1 sh -c "echo \$\$ > $R/small/tasks && exec env RDT_WORK_STOP=1 rdt-work touch $((LLC / 2)) 120" >/tmp/small.out 2>&1 &
  PS=$!
  settle small $PS
  sleep 1
  say small_occ="$(cat $R/small/mon_data/mon_L3_00/llc_occupancy)"
  kill $PS
  wait $PS 2>/dev/null
  rmdir $R/small
  C=crunned b=/tmp/bundle-crunned
  mkdir -p $b/rootfs/bin $b/rootfs/proc $b/rootfs/dev /sys/fs/cgroup/ctr
  cp /bin/rdt-work /bin/busybox $b/rootfs/bin/
  cat >$b/config.json <<JSON
{"ociVersion": "1.0.2",
 "process": {"terminal": false, "user": {"uid": 0, "gid": 0}, "cwd": "/",
   "env": ["PATH=/bin", "RDT_WORK_STOP=1"],
   "args": ["/bin/busybox", "taskset", "0x1", "/bin/rdt-work", "touch", "$((LLC / 4))", "120"]},
 "root": {"path": "rootfs"},
 "mounts": [{"destination": "/proc", "type": "proc", "source": "proc"}],
 "linux": {"cgroupsPath": "/ctr/$C", "intelRdt": {"enableMonitoring": true},
   "namespaces": [{"type": "mount"}]}}
JSON
  say crun_version="$(/opt/crun/bin/crun --version | head -1)"
  cachescope monitor --backend resctrl --pmu off --containers 'ctr/*' --interval 250ms \
    --jsonl >/tmp/rows.jsonl 2>/tmp/err.txt &
  CS=$!
  sleep 2
  taskset 0x1 /opt/crun/bin/crun --root /tmp/crun run --no-pivot -b $b $C >/tmp/$C.out 2>&1 &
  RUN=$!
  wait_for $C allocated
  PC=$(head -1 /sys/fs/cgroup/ctr/$C/cgroup.procs)
  G=$(grep -lx "$PC" $R/mon_groups/*/tasks $R/*/mon_groups/*/tasks 2>/dev/null | head -1)
  G=${G%/tasks}
  say crun_group="${G#"$R"/}"
  say groups="$(cd $R && ls -d mon_groups/* */mon_groups/* 2>/dev/null | tr '\n' ' ')"
  say proc_resctrl="$(tr '\n' ' ' </proc/$PC/resctrl 2>/dev/null)"
  say crun_affinity="$(taskset -p "$PC" | sed 's/.*: //')"
  taskset 0x1 rdt-work hold $((LLC * 2)) 600 >/tmp/flush.out 2>&1 &
  wait_for flush ready
  kill -CONT "$PC"
  wait_for $C ready
  sleep 2
  say settled="$(date +%s)"
  say ref_crun="$(cat "$G/mon_data/mon_L3_00/llc_occupancy")"
  cachescope info >/tmp/info.txt 2>&1
  say info_others="$(grep -o "other owners' groups hold [0-9]* RMIDs: [^;]*" /tmp/info.txt | head -1)"
  say ours_for_crun="$(ls -d $R/mon_groups/cachescope-ctr_$C-* $R/*/mon_groups/cachescope-ctr_$C-* 2>/dev/null | wc -l)"
  sleep 1
  kill -INT $CS
  wait $CS
  say monitor_exit=$?
  say crun_group_kept="$([ -d "$G" ] && echo 1 || echo 0)"
  say crun_task_kept="$(grep -cx "$PC" "$G/tasks")"
  say ours_left="$(ls -d $R/mon_groups/cachescope-* $R/*/mon_groups/cachescope-* 2>/dev/null | wc -l)"
  kill "$PC"
  wait $RUN
  say crun_exit=$?
  sed "s/^/CS-STDERR crun: /" /tmp/$C.out
  say crun_group_gone="$([ -d "$G" ] && echo 0 || echo 1)"
  the_end
fi
# cs_mode=hook: a container (runc, pinned to CPU 0) that fills a quarter of the LLC in its
# first 50 ms and then sleeps, while cachescope's resctrl backend runs: tagged by the backend's
# tagger when its cgroup gets its first thread, and tagged by `cachescope hook oci` as runc's
# createRuntime hook. Sampled every 2 s: the engine attaches a new container at its next
# wake-up, later than runc (about a second here from cgroup to exec) starts the program, so the
# tagger is what tags it in time. What its group holds, per the
# kernel, is what was charged to it.
if [ "${cs_mode:-}" = hook ]; then
  W=$((LLC / 4))
  # CPU 0's L3 is the container's alone: this shell's polling (a grep and a sleep every 0.1 s)
  # and cachescope run on CPU 1. Pages freed on CPU 0 just before the container's workload
  # would be its first, their lines still cached and charged to whoever freed them, and its
  # writes to them hits that CMT charges to no one new. So the flush keeps its pages until the
  # group is read (else a 6.1 guest read 80 % of W now and then; 7.2 with the NRI path, 35 %),
  # and the hook runs on CPU 1: it exits just before the container starts (6.1 read 72 % of W
  # once in 7 runs with the hook on CPU 0, 119-125 % otherwise). Still, runc's init frees its
  # pages on CPU 0 when it execs the container's program, which gets them first: 6.1 read 74 %
  # of W once in CI (stop 53). So the workload flushes its buffer once written
  # (RDT_WORK_FLUSH) and fills it by reading, as the kernel's CMT selftest does. And it goes on
  # reading it until the group is read: a line that other work on CPU 0 evicts in the meantime
  # comes back as the group's (a workload that exited after 50 ms left 6.1 reading 87 % of W
  # two seconds later, stop 59), while a line the first pass filled under another RMID (a late
  # tag) stays that RMID's, as hits do not move lines: only a tag in time reads W.
  quiet_cpu0
  bundle() {
    b=/tmp/bundle-$1
    mkdir -p $b/rootfs/bin $b/rootfs/proc
    cp /bin/busybox /bin/rdt-work $b/rootfs/bin/
    for a in sh sleep echo; do ln -sf busybox $b/rootfs/bin/$a; done
    hooks=
    [ "$2" = hook ] && hooks='"hooks": {"createRuntime": [{"path": "/bin/taskset", "args": ["taskset", "0x2", "/bin/cachescope", "hook", "oci", "--containers", "ctr/*"]}]},'
    cat >$b/config.json <<JSON
{"ociVersion": "1.0.2",
 "process": {"terminal": false, "user": {"uid": 0, "gid": 0}, "cwd": "/", "env": ["PATH=/bin"],
   "args": ["/bin/sh", "-c", "RDT_WORK_FLUSH=1 rdt-work touch $W 5"]},
 "root": {"path": "rootfs"},
 "mounts": [{"destination": "/proc", "type": "proc", "source": "proc"}],
 $hooks
 "linux": {"cgroupsPath": "/ctr/$1", "namespaces": [{"type": "pid"}, {"type": "mount"}]}}
JSON
  }
  bundle watched none
  bundle hooked hook
  mkdir -p /sys/fs/cgroup/ctr
  cachescope monitor --backend resctrl --pmu off --containers 'ctr/*' --interval 2s \
    --jsonl >/tmp/rows.jsonl 2>/tmp/err.txt &
  CS=$!
  sleep 2
  for n in watched hooked; do
    taskset 0x1 rdt-work hold $((LLC * 2)) 600 >/tmp/flush-$n.out 2>&1 &
    FL=$!
    wait_for flush-$n ready
    taskset 0x1 runc --root /tmp/runc run --no-pivot -b /tmp/bundle-$n $n >/tmp/$n.out 2>&1 &
    RUN=$!
    wait_for $n ready
    sleep 2
    g=$(ls -d $R/mon_groups/cachescope-ctr_$n-* 2>/dev/null | head -1)
    say "${n}_group=$(basename "$g")"
    say "${n}_occ=$(cat "$g/mon_data/mon_L3_00/llc_occupancy" 2>/dev/null || echo none)"
    kill $FL
    wait $RUN
    say "${n}_exit=$?"
    sed "s/^/CS-STDERR $n: /" /tmp/$n.out
  done
  say w=$W
  kill -INT $CS
  wait $CS
  say monitor_exit=$?
  the_end
fi
# cs_mode=nri: as hook, with the container in a Kubernetes pod: Debian unstable's containerd
# 2.1 (its CRI, NRI on, the native snapshotter, Debian's runc) and `cachescope hook nri`
# registered on its NRI socket; the pod made through the CRI by cri_pod (crates/cli/examples/
# cri_pod.rs), as a kubelet with the cgroupfs driver makes it. The images are made here, as
# OCI layouts (no registry). containerd and its shims run on CPU 1 (so does the container's
# shell); the workload is pinned to CPU 0, whose L3 is read, the flush holds its pages
# until the group is read, and the workload reads its buffer until then (as in hook).
if [ "${cs_mode:-}" = nri ]; then
  W=$((LLC / 4))
  quiet_cpu0
  # oci_image NAME ROOTFS OUT ENTRYPOINT: an OCI image layout archive of ROOTFS, one layer.
  oci_image() {
    _d=$(mktemp -d) && mkdir -p "$_d/blobs/sha256"
    tar -C "$2" -cf "$_d/l" .
    printf '{"architecture":"amd64","os":"linux","config":{"Env":["PATH=/bin"],"Entrypoint":%s},"rootfs":{"type":"layers","diff_ids":["sha256:%s"]}}' \
      "$4" "$(sha256sum "$_d/l" | cut -d' ' -f1)" >"$_d/c"
    # blob FILE: moved to its digest's name; "sha256:DIGEST","size":N for a descriptor.
    blob() { _h=$(sha256sum "$1" | cut -d' ' -f1) && _n=$(stat -c %s "$1") && mv "$1" "$_d/blobs/sha256/$_h" && echo "\"digest\":\"sha256:$_h\",\"size\":$_n"; }
    _l=$(blob "$_d/l") _c=$(blob "$_d/c")
    printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json",%s},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar",%s}]}' "$_c" "$_l" >"$_d/m"
    printf '{"schemaVersion":2,"manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json",%s,"annotations":{"io.containerd.image.name":"%s"}}]}' "$(blob "$_d/m")" "$1" >"$_d/index.json"
    echo '{"imageLayoutVersion":"1.0.0"}' >"$_d/oci-layout"
    tar -C "$_d" -cf "$3" oci-layout index.json blobs && rm -rf "$_d"
  }
  img=/tmp/img
  mkdir -p $img/bin $img/proc $img/dev $img/sys
  cp /bin/busybox /bin/rdt-work $img/bin/
  for a in sh sleep echo taskset; do ln -sf busybox $img/bin/$a; done
  oci_image localhost/cachescope-test-work:1 $img /tmp/work.tar null
  oci_image localhost/cachescope-test-pause:1 $img /tmp/pause.tar '["/bin/sleep","86400"]'
  mkdir -p /etc/containerd /run/containerd /var/lib/containerd /run/nri
  # A host-network pod gets copies of the node's.
  echo "127.0.0.1 localhost" >/etc/hosts
  : >/etc/resolv.conf
  echo guest >/etc/hostname
  cat >/etc/containerd/config.toml <<TOML
version = 3
[plugins.'io.containerd.nri.v1.nri']
  disable = false
  socket_path = "/run/nri/nri.sock"
[plugins.'io.containerd.cri.v1.images']
  snapshotter = "native"
# The guest's root is the initramfs, which 6.1's pivot_root(2) refuses to leave (7.2's allows it).
[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
  NoPivotRoot = true
[plugins.'io.containerd.cri.v1.images'.pinned_images]
  sandbox = "localhost/cachescope-test-pause:1"
TOML
  taskset 0x2 containerd --config /etc/containerd/config.toml >/tmp/containerd.log 2>&1 &
  _w=0
  until [ -S /run/nri/nri.sock ] || [ $_w -ge 600 ]; do sleep 0.1; _w=$((_w + 1)); done
  say containerd="$(containerd --version | cut -d' ' -f3)"
  taskset 0x2 cachescope hook nri --socket /run/nri/nri.sock --containers 'kubepods/*/*/*' >/tmp/plugin.out 2>&1 &
  wait_for plugin registered
  for i in work pause; do ctr -n k8s.io images import /tmp/$i.tar >/dev/null 2>>/tmp/ctr.out; done
  say images="$(ctr -n k8s.io images ls -q | grep -c cachescope-test)"
  taskset 0x1 rdt-work hold $((LLC * 2)) 600 >/tmp/flush.out 2>&1 &
  FL=$!
  wait_for flush ready
  taskset 0x2 cri_pod /run/containerd/containerd.sock localhost/cachescope-test-work:1 /tmp/pods \
    "RDT_WORK_FLUSH=1 taskset 0x1 rdt-work touch $W 5" >/tmp/cri.out 2>&1
  say cri_exit=$?
  _w=0
  until grep -q ready /tmp/pods/app/0.log 2>/dev/null || [ $_w -ge 600 ]; do sleep 0.1; _w=$((_w + 1)); done
  sleep 2
  g=$(ls -d $R/mon_groups/cachescope-* 2>/dev/null | head -1)
  say "nri_groups=$(ls -d $R/mon_groups/cachescope-* 2>/dev/null | wc -l)"
  say "nri_group=$(basename "$g")"
  say "nri_occ=$(cat "$g/mon_data/mon_L3_00/llc_occupancy" 2>/dev/null || echo none)"
  kill $FL
  say w=$W
  for f in plugin cri ctr; do sed "s/^/CS-STDERR $f: /" /tmp/$f.out; done
  sed 's/^/CS-STDERR container: /' /tmp/pods/app/0.log
  grep -E 'level=(error|fatal)' /tmp/containerd.log | tail -20 | sed 's/^/CS-STDERR containerd: /'
  splats
  say done=1
  finish
fi
say unknown_mode="${cs_mode:-}"
finish
