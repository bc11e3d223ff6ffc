#!/bin/busybox sh
# /init of the RDT machine's guest (scripts/guest-qemu.sh with -device rdt): the L3s the guest
# finds in CPUID against the device's domains (issue 40, item 6). For each CPU: its L3's id
# (cacheinfo: APIC ID >> the order of the threads sharing it) and, for a 1 MiB workload (a
# quarter of the L3) pinned to it in a MON group of its own, the occupancy each of resctrl's
# L3 domains reads:
#   CS-RESULT cpuN=ID             cpuN's L3 id
#   CS-RESULT domains=LIST        resctrl's mon_data directories
#   CS-RESULT wN_dD=BYTES         workload on cpuN, domain D's llc_occupancy
# The device's own view (vCPU -> domain) is its `rdt-stats` line when QEMU exits.
. "${CS_INIT:-/lib/init.sh}"
R=/sys/fs/resctrl
n=$(grep -c '^processor' /proc/cpuinfo)
say cpus="$n"
c=0
while [ "$c" -lt "$n" ]; do
  say "cpu$c=$(cat /sys/devices/system/cpu/cpu$c/cache/index3/id)"
  c=$((c + 1))
done
if ! mount_resctrl; then
  say mount=1 done=1
  finish
fi
say mount=0
say domains="$(ls $R/mon_data | tr '\n' ,)"
c=0
while [ "$c" -lt "$n" ]; do
  g=$R/mon_groups/w$c
  mkdir "$g"
  taskset "$((1 << c))" sh -c "echo \$\$ >$g/tasks && exec rdt-work touch 1048576 30" >/dev/null 2>&1 &
  pid=$!
  # Until its lines are in (a hang-only ceiling: a 1 MiB touch fills within a second or two).
  i=0
  while [ "$i" -lt 120 ]; do
    total=0
    for d in $g/mon_data/mon_L3_*; do total=$((total + $(cat "$d/llc_occupancy"))); done
    [ "$total" -ge 900000 ] && break
    sleep 0.5
    i=$((i + 1))
  done
  for d in $g/mon_data/mon_L3_*; do
    say "w${c}_d$(echo "${d##*_}" | sed 's/^0*//; s/^$/0/')=$(cat "$d/llc_occupancy")"
  done
  kill "$pid"
  wait "$pid" 2>/dev/null
  c=$((c + 1))
done
say done=1
finish
