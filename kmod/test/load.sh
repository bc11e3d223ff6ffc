#!/bin/busybox sh
# /init of a QEMU guest (scripts/guest-qemu.sh) that only loads the module it was given and
# unloads it: what scripts/package-check.sh asks of the module the DKMS package built.
. /lib/init.sh
say kernel="$(uname -r)"
insmod /cachescope.ko emulate=1
say load=$?
[ -e /dev/cachescope ] && say device=1
cachescope info 2>&1 | grep "^ *kmod " | head -1 | sed 's/^/CS-INFO /'
rmmod cachescope
say unload=$?
grep -q "^cachescope " /proc/modules || say gone=1
finish
