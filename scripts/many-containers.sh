#!/usr/bin/env bash
# A scenario of N busy emulated containers on a two-socket Skylake-SP (2 L3 domains × 8 CPUs),
# all running from the start, with footprints of 1-4 MiB and 50-500 MB/s each: the load the
# benchmarks scale. Usage: scripts/many-containers.sh N > scenario.toml
set -euo pipefail
n=${1:?usage: many-containers.sh N}
printf '[platform]\nmodel = "intel-xeon-platinum-8160"\nl3_mib = 32\ndomains = 2\ncpus_per_domain = 8\n'
for i in $(seq 0 $((n - 1))); do
  printf '\n[[container]]\nname = "c%04d"\ncpus = [%d]\nfootprint_mib = %d\nbandwidth_mbps = %d\nlocal_fraction = 0.8\nstart_ms = 0\n' \
    "$i" $((i % 16)) $((1 + i % 4)) $((50 + (i * 37) % 450))
done
