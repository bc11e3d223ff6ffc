#!/bin/busybox sh
# /init of the RDT machine's guest for the kernel's own resctrl selftests (resctrl_tests, built
# unmodified from the guest kernel's source by scripts/resctrl-selftests.sh), as an outside
# reference for the device and its cache model: the CMT test once per number in cs_bits (the
# number of ways its group may fill: `-n`, which kernels before 6.9 ignore for CMT, using 5).
# Each run flushes its buffer with CLFLUSH and fills it again in a new group, so every run after
# the first reads what the model did with the flush. Prints each run's own lines as
# CS-SELFTEST and its figures as CS-RESULT for crates/cli/tests/rdt_qemu.rs. Then the CAT
# selftests named in cs_cat, where the machine has a PMU.
. "${CS_INIT:-/lib/init.sh}"
say kernel="$(uname -r)"
say llc_bytes=$(($(sed 's/K$//' /sys/devices/system/cpu/cpu0/cache/index3/size) * 1024))
mkdir -p /sys/fs/resctrl
cd /tmp || exit 1
i=1
for bits in $(echo "${cs_bits:-5,5,5,5,5}" | tr , " "); do
  resctrl_tests -t cmt -n "$bits" >/tmp/cmt.out 2>&1
  say "cmt${i}_rc=$?"
  sed "s/^/CS-SELFTEST $i /" /tmp/cmt.out
  say "cmt${i}_ok=$(grep -c '^ok .*CMT' /tmp/cmt.out)"
  say "cmt${i}_avg=$(sed -n 's/.*Average LLC val: //p' /tmp/cmt.out | head -1)"
  say "cmt${i}_span=$(sed -n 's/.*Cache span (bytes): //p' /tmp/cmt.out | head -1)"
  say "cmt${i}_bits=$bits"
  i=$((i + 1))
done
say runs=$((i - 1))
# The cache allocation selftests (cs_cat: their names in this kernel's resctrl_tests), which
# count LLC misses with perf: the machine's PMU (pmu=on) against its cache model's ways.
for t in $(echo "${cs_cat:-}" | tr , " "); do
  resctrl_tests -t "$t" >/tmp/cat.out 2>&1
  say "${t}_rc=$?"
  sed "s/^/CS-SELFTEST $t /" /tmp/cat.out
  say "${t}_ok=$(grep -c '^ok ' /tmp/cat.out)"
done
splats
say done=1
finish
