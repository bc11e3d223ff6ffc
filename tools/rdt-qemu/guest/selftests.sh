#!/bin/busybox sh
# /init of the RDT machine's guest for the kernel's own resctrl selftests (resctrl_tests, built
# unmodified from the guest kernel's source by scripts/resctrl-selftests.sh), as an outside
# reference for the device and its cache model: the CMT test once per number in cs_bits (the
# number of ways its group may fill: `-n`, which kernels before 6.9 ignore for CMT, using 5).
# Each run flushes its buffer with CLFLUSH and fills it again in a new group, so every run after
# the first reads what the model did with the flush. Prints each run's own lines as
# CS-SELFTEST and its figures as CS-RESULT for crates/cli/tests/rdt_qemu.rs. Then the CAT
# selftests named in cs_cat, where the machine has a PMU, and with cs_mbm the MBM selftest,
# which compares mbm_local_bytes with the memory controller's CAS counts (the device's imc=on:
# Linux's intel-uncore module, on a -cpu without the hypervisor bit, finds uncore_imc_0).
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
# The MBM selftest on CPU 0 (-p 0): the memory controller serves socket 0's L3, the one its PCI
# bus belongs to. cs_mbm: "default" for the selftest's own benchmark, else its -b command with
# commas for spaces. 6.1 and 6.12 write their 250 MB buffer after the measurement starts, which
# under TCG takes seconds (on silicon, milliseconds): every line is then read and written back,
# and they compare mbm_local_bytes (both) with the memory controller's reads alone, 2x. Their
# tests take a buffer of 32 MB instead (8x the L3), written in a fraction of the first second.
if [ -n "${cs_mbm:-}" ]; then
  insmod /modules/intel-uncore.ko
  say "mbm_pmu=$(ls /sys/bus/event_source/devices | grep -c '^uncore_imc_')"
  if [ "$cs_mbm" = default ]; then
    resctrl_tests -t mbm -p 0 >/tmp/mbm.out 2>&1
  else
    # shellcheck disable=SC2046 # the words of the benchmark's command
    resctrl_tests -t mbm -p 0 -b $(echo "$cs_mbm" | tr , " ") >/tmp/mbm.out 2>&1
  fi
  say "mbm_rc=$?"
  sed "s/^/CS-SELFTEST mbm /" /tmp/mbm.out
  say "mbm_ok=$(grep -c '^ok .*MBM' /tmp/mbm.out)"
  say "mbm_imc=$(sed -n 's/.*avg_bw_imc: //p' /tmp/mbm.out | head -1)"
  say "mbm_resc=$(sed -n 's/.*avg_bw_resc: //p' /tmp/mbm.out | head -1)"
fi
splats
say done=1
finish
