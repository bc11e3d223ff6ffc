#!/bin/busybox sh
# /init of a guest that runs several checks in one boot (scripts/guest-qemu.sh with
# CACHESCOPE_QEMU_CHECKS): /checks.list has a line per check, "NAME SCRIPT [KEY=VALUE ...]";
# each SCRIPT (in /checks) runs in a shell of its own with CS_CHECK=NAME and its KEY=VALUEs in
# its environment (beside the kernel's parameters), between "CS-CHECK-BEGIN NAME" and
# "CS-CHECK-END NAME rc=RC seconds=S" on the console. After each check everything it left is
# undone: its processes, cgroups, resctrl's mount, the module, /tmp; so the next check meets
# the guest as a fresh boot would, but for the kernel's own memory of it (RMIDs in limbo) and
# the device's counts, which the tests read over the whole boot.
. /lib/init.sh
# user PID: whether PID is a process of user space (a kernel thread has no command line; procfs
# gives every file the size 0, so its content is read).
user() {
  [ "$1" != 1 ] && [ "$1" != $$ ] && [ -n "$(tr -d '\0' <"/proc/$1/cmdline" 2>/dev/null)" ]
}
# clean: every process but this shell and the kernel's threads (no command line) killed and
# waited for, then the cgroups (deepest first), resctrl, the module and /tmp.
clean() {
  for p in /proc/[0-9]*; do
    user "${p#/proc/}" && kill -9 "${p#/proc/}" 2>/dev/null
  done
  i=0
  while [ $i -lt 100 ]; do
    left=0
    for p in /proc/[0-9]*; do
      user "${p#/proc/}" && left=1
    done
    [ $left = 0 ] && break
    sleep 0.1; i=$((i + 1))
  done
  find /sys/fs/cgroup -mindepth 1 -type d 2>/dev/null | sort -r | while read -r d; do rmdir "$d" 2>/dev/null; done
  grep -q " /sys/fs/resctrl " /proc/mounts && umount /sys/fs/resctrl
  # The lines the check's RMIDs hold in the RDT machine's L3s go too: each written over twice
  # from CPU 0 and CPU 1 (a domain each), under the default RMID.
  if command -v rdt-work >/dev/null && [ -e /sys/devices/system/cpu/cpu0/cache/index3/size ]; then
    llc=$(($(sed 's/K$//' /sys/devices/system/cpu/cpu0/cache/index3/size) * 1024))
    for cpu in 0x1 0x2; do taskset $cpu rdt-work hold $((llc * 2)) 0 >/dev/null 2>&1; done
  fi
  grep -q "^cachescope " /proc/modules && rmmod cachescope
  rm -rf /tmp/* 2>/dev/null
  cd /
}
while read -r name script vars; do
  echo "CS-CHECK-BEGIN $name"
  t0=$(cut -d. -f1 /proc/uptime)
  # shellcheck disable=SC2086 # the check's KEY=VALUE words
  env $vars CS_CHECK="$name" sh "/checks/$script" </dev/null
  rc=$?
  echo "CS-CHECK-END $name rc=$rc seconds=$(($(cut -d. -f1 /proc/uptime) - t0))"
  clean
done </checks.list
finish
