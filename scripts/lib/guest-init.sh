# shellcheck shell=sh
# The start of every guest's /init (scripts/guest-qemu.sh puts this file at /lib/init.sh): the
# kernel's file systems, and how a guest reports. Guest scripts begin with
# '. "${CS_INIT:-/lib/init.sh}"' (on a host, CS_INIT names this file).
# With CS_HOST=1 the same scripts run on a real host instead (scripts/hw-check.sh runs them in
# a private mount namespace): /tmp is a private tmpfs, nothing else is mounted, modules come
# from the host's kernel, and the script exits instead of powering off.
# With CS_CHECK=NAME the script is one check of several in one boot (scripts/lib/guest-checks.sh
# is /init, has mounted all this, and cleans up after each check): finish ends the check only.
export PATH=${CS_HOST:+$PATH:}/bin
if [ -n "${CS_CHECK:-}" ]; then
  :
elif [ -n "${CS_HOST:-}" ]; then
  mount -t tmpfs tmp /tmp
else
  mount -t proc proc /proc
  mount -t sysfs sys /sys
  mount -t devtmpfs dev /dev
  mount -t tmpfs tmp /tmp
  mount -t cgroup2 none /sys/fs/cgroup
  # User space reached: scripts/lib/qemu-boot.sh boots again a guest that never says so.
  # (On a line of its own: the firmware's last escape sequences have no line end.)
  read -r up _ </proc/uptime && printf '\nCS-BOOT /init at %s s\n' "$up"
fi
# A line the host-side test reads: "CS-RESULT key=value"; and when it was said (seconds since
# boot), so that a console log shows where a guest's time went.
say() {
  echo "CS-RESULT $*"
  read -r up _ </proc/uptime 2>/dev/null && echo "CS-AT $up ${1%%=*}"
}
# The end: written data out, power off (QEMU exits). CS-END tells scripts/guest-qemu.sh the
# script got here: a guest that reboots (a panic, with panic=-1) also makes QEMU exit 0.
finish() {
  sync
  if [ -n "${CS_CHECK:-}" ]; then exit 0; fi
  echo "CS-END"
  if [ -n "${CS_HOST:-}" ]; then exit 0; fi
  poweroff -f
}
# load_msr: /dev/cpu/N/msr (the guest carries msr.ko from its kernel's package).
load_msr() {
  [ -e /dev/cpu/0/msr ] && return 0
  if [ -n "${CS_HOST:-}" ]; then modprobe msr; else insmod /modules/msr.ko; fi
}
# mount_resctrl: resctrl at /sys/fs/resctrl, unless it is there already (on a host).
mount_resctrl() {
  grep -q " /sys/fs/resctrl resctrl " /proc/mounts || mount -t resctrl resctrl /sys/fs/resctrl
}
# quiet_cpu0: every task that may leave CPU 0 goes to CPU 1 (in a guest only: a host's tasks
# are not ours to move), so that a core group of CPU 0 holds what is pinned there and little
# else. 7.2's kdamond alone charged core 0 about 25 KiB of lines a second. Unbound workqueue
# workers cannot be moved so: the tests boot those guests with workqueue.unbound_cpus=1.
quiet_cpu0() {
  [ -n "${CS_HOST:-}" ] && return 0
  for t in /proc/[0-9]*; do taskset -p 0x2 "${t#/proc/}" >/dev/null 2>&1 || true; done
}
# splats: what the kernel said that it should never say (a WARNING or BUG, lockdep, KASAN, the
# atomic-sleep checker, a kCFI trap, a hung task), each with its trace, as CS-SPLAT lines, and
# their count.
# Not a splat: 6.1's boot advice on an AMD CPU model without the SRSO microcode (EPYC-Rome
# under TCG) says "WARNING:" too.
SPLAT='WARNING:|BUG:|BUG |Oops|general protection|sleeping function called|CFI failure|possible recursive locking|circular locking|inconsistent lock state|KASAN|UBSAN|kmemleak: [0-9]+ new|blocked for more than'
BENIGN='Speculative Return Stack Overflow: WARNING: See'
splats() {
  dmesg | awk -v re="$SPLAT" -v ok="$BENIGN" '$0 ~ re && $0 !~ ok { p = 1; n = 0 } p { print "CS-SPLAT " $0; if (++n > 60 || /<\/TASK>|---\[ end trace/) p = 0 }'
  say splats="$(dmesg | grep -E "$SPLAT" | grep -cvE "$BENIGN")"
}
# rows_out FILE...: recordings (JSON lines) for the host, gzip'd and base64'd between
# CS-ROWS-BEGIN and CS-ROWS-END; scripts/guest-qemu.sh keeps them as OUT/rows.jsonl.
rows_out() {
  echo CS-ROWS-BEGIN
  cat "$@" | gzip -c | base64
  echo CS-ROWS-END
}
# The console's first line may carry the firmware's escape sequences: start on a clean one.
echo
