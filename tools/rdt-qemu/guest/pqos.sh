#!/bin/busybox sh
# /init of the RDT machine's guest for the comparison with Intel's pqos (intel-cmt-cat), a
# reader we did not write: the same workloads, pinned to core 0 (L3 domain 0), measured by
# cachescope and then by pqos, in MSR mode (core groups) and in OS mode (resctrl, by pid).
# Two tools cannot own PQR_ASSOC (or a pid's group) at once, so they take turns; before each
# turn the workload stops, every line is pushed out of the LLC and the workload goes on under
# the new owner's RMID (lines belong to the RMID that filled them).
# Occupancy is read every 100 ms by both (each MSR read is an IPI handled on core 0, under its
# RMID); pqos reads bandwidth every 500 ms (at 100 ms its MB/s, printed with one decimal, were
# 6 % low: it divides by the nominal interval).
# Prints "CS-RESULT key=value" lines, cachescope's rows (CS-ROWS) and pqos's CSV (CS-PQOS-MSR,
# CS-PQOS-OS) for crates/cli/tests/rdt_qemu.rs.
. "${CS_INIT:-/lib/init.sh}"
R=/sys/fs/resctrl
C=/sys/fs/cgroup/ctr
LLC=$(($(sed 's/K$//' /sys/devices/system/cpu/cpu0/cache/index3/size) * 1024))
say llc_bytes=$LLC
mkdir -p /var/lock "$C"
load_msr
say insmod_msr=$?
# This shell and everything it starts stay on core 1 unless pinned to core 0.
taskset -p 0x2 $$ >/dev/null
quiet_cpu0

ready() {
  i=0
  until grep -q "$2" "$1" 2>/dev/null || [ $i -ge 600 ]; do sleep 0.1; i=$((i + 1)); done
}
# flush: a process on core 0 writes twice the LLC (under whatever RMID core 0 has) and keeps
# its pages.
FLUSHES=0
flush() {
  FLUSHES=$((FLUSHES + 1))
  taskset 0x1 rdt-work hold $((LLC * 2)) 600 >"/tmp/flush$FLUSHES.out" 2>&1 &
  ready "/tmp/flush$FLUSHES.out" ready
}
stop_cachescope() {
  kill -INT "$CS"
  wait "$CS"
  say "$1"_exit=$?
}

# Occupancy, MSR mode: a quarter of the LLC touched on core 0.
mkdir "$C/quarter"
taskset 0x1 sh -c "echo \$\$ > $C/quarter/cgroup.procs && exec env RDT_WORK_STOP=1 rdt-work touch $((LLC / 4)) 600" >/tmp/quarter.out 2>&1 &
Q=$!
ready /tmp/quarter.out allocated
flush
cachescope monitor --backend msr --cores 0,1 --pmu off --interval 100ms --jsonl >/tmp/msr.jsonl 2>/tmp/msr.err &
CS=$!
sleep 1
kill -CONT $Q
ready /tmp/quarter.out ready
sleep 2
say msr_occ_end="$(date +%s)"
kill -STOP $Q
stop_cachescope msr_occ
flush
pqos --iface=msr --disable-mon-ipc --disable-mon-llc_miss -m "llc:0;mbl:0" -t 4 -i 1 -u csv \
  -o /tmp/pqos-msr-occ.csv >/tmp/pqos.out 2>&1 &
P=$!
sleep 1
kill -CONT $Q
wait $P
say pqos_msr_occ_exit=$?

# Bandwidth, MSR mode: 16 MiB/s through 4 x the LLC, cachescope then pqos on the same stream.
kill $Q
# The stream lasts until pqos is done (SIGTERM ends it and it says what it moved): pqos's
# start under TCG took a varying part of a fixed 12 s stream.
taskset 0x1 rdt-work stream 16M 300 $((LLC * 4)) >/tmp/stream.out 2>&1 &
S=$!
ready /tmp/stream.out ready
cachescope monitor --backend msr --cores 0,1 --pmu off --interval 100ms --jsonl >/tmp/msr-bw.jsonl 2>>/tmp/msr.err &
CS=$!
sleep 4
stop_cachescope msr_bw
pqos --iface=msr --disable-mon-ipc --disable-mon-llc_miss -m "llc:0;mbl:0" -t 4 -i 5 -u csv \
  -o /tmp/pqos-msr-bw.csv >>/tmp/pqos.out 2>&1
say pqos_msr_bw_exit=$?
kill -TERM $S
wait $S
say stream="$(tr '\n' ' ' </tmp/stream.out)"

# OS mode: the kernel's resctrl; cachescope's group for the container, then pqos's for the pid.
mount_resctrl
say mount=$?
mkdir "$C/os"
taskset 0x1 sh -c "echo \$\$ > $C/os/cgroup.procs && exec env RDT_WORK_STOP=1 rdt-work touch $((LLC / 4)) 600" >/tmp/os.out 2>&1 &
Q=$!
ready /tmp/os.out allocated
cachescope monitor --backend resctrl --pmu off --containers 'ctr/os' --interval 100ms --jsonl \
  >/tmp/os.jsonl 2>>/tmp/msr.err &
CS=$!
i=0
until grep -qx "$Q" "$R"/mon_groups/cachescope-ctr_os-*/tasks 2>/dev/null || [ $i -ge 300 ]; do sleep 0.1; i=$((i + 1)); done
flush
kill -CONT $Q
ready /tmp/os.out ready
sleep 2
say os_occ_end="$(date +%s)"
kill -STOP $Q
stop_cachescope os_occ
pqos -I --disable-mon-ipc --disable-mon-llc_miss -p "llc:$Q;mbl:$Q" -t 5 -i 1 -u csv \
  -o /tmp/pqos-os.csv >>/tmp/pqos.out 2>&1 &
P=$!
# pqos moves the pid into a group of its own; then the lines go, and the workload refills them.
i=0
until grep -qx "$Q" "$R"/mon_groups/*/tasks 2>/dev/null || [ $i -ge 300 ]; do sleep 0.1; i=$((i + 1)); done
flush
kill -CONT $Q
wait $P
say pqos_os_exit=$?
kill $Q

sed 's/^/CS-STDERR /' /tmp/msr.err
grep -v "^NOTE\|^ \|^WARN" /tmp/pqos.out | sed 's/^/CS-PQOS-SAID /'
sed 's/^/CS-PQOS-MSR-OCC /' /tmp/pqos-msr-occ.csv
sed 's/^/CS-PQOS-MSR-BW /' /tmp/pqos-msr-bw.csv
sed 's/^/CS-PQOS-OS /' /tmp/pqos-os.csv
cat /tmp/msr.jsonl /tmp/msr-bw.jsonl /tmp/os.jsonl >/tmp/rows.jsonl
echo CS-ROWS-BEGIN
gzip -c /tmp/rows.jsonl | base64
echo CS-ROWS-END
say done=1
finish
