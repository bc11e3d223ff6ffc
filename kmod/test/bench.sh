#!/bin/busybox sh
# /init of the benchmark guest (scripts/bench-kmod.sh): the module in emulation mode with
# enough RMIDs for 18 containers, then kmod_bench. Its lines go to the console as CS-BENCH.
. /lib/init.sh
echo "clocksource $(cat /sys/devices/system/clocksource/clocksource0/current_clocksource)" | sed "s/^/CS-BENCH /"
# The probes stay registered while the module is loaded: the switch without it, before and
# after, is the baseline of "module closed".
kmod_bench unloaded 2>&1 | sed 's/^/CS-BENCH before loading: /'
insmod /cachescope.ko emulate=1 emu_rmids=32 || echo "CS-BENCH insmod failed"
kmod_bench 2>&1 | sed 's/^/CS-BENCH /'
rmmod cachescope || echo "CS-BENCH rmmod failed"
kmod_bench unloaded 2>&1 | sed 's/^/CS-BENCH after unloading: /'
finish
