#!/usr/bin/env bash
# Tier 4 (DESIGN.md §4): run by hand, as root, on a machine with real CMT/MBM. Decodes the host,
# checks that CPUID agrees on every CPU, prints what cachescope would use, and then runs the RDT
# machine's checks (crates/cli/tests/rdt_qemu.rs, tools/rdt-qemu/guest/*.sh) on this host: the
# kernel's resctrl against workloads of known footprint, the resctrl and msr backends, and
# Intel's pqos beside them. Exit 1 when the host does not enumerate L3 monitoring (then it is
# not a tier-4 machine); otherwise the test run's status.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cargo build --release --locked -q -p cachescope
bin=target/release/cachescope
grep -o 'cqm[a-z_]*\|rdt_a\|mba' /proc/cpuinfo | sort | uniq -c || echo "no cqm/rdt flags in /proc/cpuinfo"
"$bin" info
json=$("$bin" info --json)
python3 - "$json" <<'PY'
import json, sys
j = json.loads(sys.argv[1])
m = j["monitoring"]
print("monitoring supported:", m["supported"], "| reason:", m["reason"])
pc = j["cpuid"]["per_cpu"]
print("per-CPU CPUID check:", "agree" if pc.get("agree") else pc)
sys.exit(0 if m["supported"] else 1)
PY
# The guest scripts pin their workloads to CPU 0 and create cgroups under ctr/ and resctrl groups;
# one test at a time. (They stop a msr-backend run with SIGINT, which restores PQR_ASSOC.)
CACHESCOPE_RDT_HOST=1 cargo test --release --locked -p cachescope --test rdt_qemu -- \
  --test-threads=1 --nocapture
