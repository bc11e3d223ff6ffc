#!/bin/busybox sh
# /init of the benchmark guest (scripts/bench-kmod.sh): the module in emulation mode with
# enough RMIDs for 18 containers, then kmod_bench. Its lines go to the console as CS-BENCH.
. /lib/init.sh
insmod /cachescope.ko emulate=1 emu_rmids=32 || echo "CS-BENCH insmod failed"
echo "clocksource $(cat /sys/devices/system/clocksource/clocksource0/current_clocksource)" | sed "s/^/CS-BENCH /"
kmod_bench 2>&1 | sed 's/^/CS-BENCH /'
finish
