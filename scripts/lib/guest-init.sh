# shellcheck shell=sh
# The start of every guest's /init (scripts/guest-qemu.sh puts this file at /lib/init.sh): the
# kernel's file systems, and how a guest reports. Guest scripts begin with ". /lib/init.sh".
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
mount -t tmpfs tmp /tmp
mount -t cgroup2 none /sys/fs/cgroup
# A line the host-side test reads: "CS-RESULT key=value".
say() { echo "CS-RESULT $*"; }
# The end: written data out, power off (QEMU exits).
finish() { sync; poweroff -f; }
# The console's first line may carry the firmware's escape sequences: start on a clean one.
echo
