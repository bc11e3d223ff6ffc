#!/usr/bin/env bash
# What the kernel module costs (issue 14's benchmarks). Builds release binaries, then:
# - in a QEMU/TCG guest on Debian's kernel (the module emulating RDT): the sched_switch
#   probe's cost per context switch, the sampling tick's cost against active RMIDs, and the
#   user-space collector's CPU for 10 containers; TCG figures are relative only: compare them
#   with each other, not with hardware;
# - on this host: the collector's own CPU (engine and backend fed by a user-space fake of the
#   module at the same record rate), which does not depend on the emulator.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cargo build --release --locked -q -p cachescope -p cachescope-kmod --example kmod_bench
out=$(mktemp -d)
CACHESCOPE_QEMU_EXTRA="$PWD/target/release/examples/kmod_bench" \
  scripts/guest-qemu.sh target/release/cachescope "$out" kmod/test/bench.sh >/dev/null
echo "== in the QEMU guest (TCG: relative figures)"
tr -d '\r' <"$out/console.log" | sed -n 's/^CS-BENCH //p'
echo "== on this host"
cargo run --release --locked -q -p cachescope-kmod --example collector_bench
rm -rf "$out"
