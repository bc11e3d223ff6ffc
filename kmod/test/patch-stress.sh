#!/bin/busybox sh
# /init of a QEMU guest (scripts/guest-qemu.sh) that loads the module, opens and closes the
# device (the first open registers the tracepoint probes, which patches the kernel's text),
# and unloads (patches it back), `iters` times (default 100), beside a context-switch storm
# and CPUs going idle and waking up. It checks the emulator, not the module: Debian's QEMU
# 7.2 with multi-threaded TCG froze a 6.1 guest here at the 108th cycle (kmod/README.md).
#   CACHESCOPE_QEMU_APPEND="iters=300 softlockup_all_cpu_backtrace=1 loglevel=7" \
#     scripts/guest-qemu.sh target/release/cachescope /tmp/ps kmod/test/patch-stress.sh
. "${CS_INIT:-/lib/init.sh}"
taskset 0x1 sh -c 'while :; do usleep 500; done' &
taskset 0x2 sh -c 'while :; do usleep 700; done' &
yes | cat >/dev/null &
i=0
while [ $i -lt "${iters:-100}" ]; do
  insmod /cachescope.ko emulate=1 || { say insmod_failed=$i; break; }
  cat /dev/cachescope >/dev/null 2>&1 &
  C=$!
  usleep 200000
  kill $C
  wait $C 2>/dev/null
  rmmod cachescope || { say rmmod_failed=$i; break; }
  i=$((i + 1))
  echo "ITER $i"
done
say cycles=$i
splats
finish
