#!/usr/bin/env bash
# The whole test suite: lints, then every test tier this host can run. Tests that need root,
# FUSE, BPF or hardware counters detect what is missing, say why they skip, and are counted
# as skipped; CACHESCOPE_REQUIRE_ALL=1 (which .ci/run sets) makes any skip a failure.
#
# The tests run under cargo-nextest (.config/nextest.toml): each in its own process with a
# ceiling that names a hung test, the guests (QEMU under TCG) one at a time and first, the
# host's tests beside them, the fuzz targets beside all of it at the lowest priority. The run
# ends with the time of each phase, the ten slowest tests, each guest boot's time and one
# summary line (scripts/lib/test-summary.py).
set -euo pipefail
cd "$(dirname "$0")/.."
# What the run leaves for whoever reads it (its phases, skips, boots, nextest's JUnit): the
# clone's target/.
tdir=target
mkdir -p "$tdir"
phases="$tdir/test-phases.txt"
: >"$phases"
# phase NAME COMMAND...: runs COMMAND, its wall time kept for the closing table.
phase() {
  local name=$1 t0 rc=0
  shift
  echo "== $name"
  t0=$(date +%s)
  "$@" || rc=$?
  echo "$name $(($(date +%s) - t0))" >>"$phases"
  return $rc
}
phase setup scripts/setup.sh
# The release build's directory, shared with run.sh, package.sh and the tests' cost bars
# (scripts/lib/release.sh), chosen before CARGO_TARGET_DIR is set for the debug build below.
. scripts/lib/release.sh
export CACHESCOPE_RELEASE_TARGET
CACHESCOPE_RELEASE_TARGET=$(release_dir)
# A clean clone gains nothing from incremental state, which is most of a debug target's size.
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"
# The build outside the clone, as the release build and the guests' kernels and QEMU are: a
# fresh clone on a machine that ran the suite before rebuilds only the workspace's own crates
# (cargo keys the rest by their versions and flags). CARGO_TARGET_DIR chooses another.
if [ -z "${CARGO_TARGET_DIR:-}" ] && mkdir -p /var/cache/cachescope/target-debug 2>/dev/null \
  && [ -w /var/cache/cachescope/target-debug ]; then
  export CARGO_TARGET_DIR=/var/cache/cachescope/target-debug
fi
build_dir=${CARGO_TARGET_DIR:-target}
mkdir -p "$build_dir"
free_gb=$(df -P -BG "$build_dir" | awk 'NR == 2 { sub("G", "", $4); print $4 }')
echo "test: ${free_gb} GiB free where $build_dir lives (a full run writes about 3 GiB there and 1 GiB under ${TMPDIR:-/tmp})"
if [ "${free_gb:-0}" -lt 4 ]; then
  echo "test: not enough disk: ${free_gb} GiB free at $build_dir; free some and run again" >&2
  exit 1
fi
if ! cargo nextest --version >/dev/null 2>&1; then
  echo "test: installing cargo-nextest (crates.io; a few minutes, once)"
  cargo install cargo-nextest --locked
fi
phase rustfmt cargo fmt --all -- --check
phase clippy cargo clippy --workspace --all-targets --locked -- -D warnings
# The test binaries (and the cli's examples with them), and the release build the cost and guest
# tests use (crates/cli/tests/common: scripts/build.sh's, in CACHESCOPE_RELEASE_TARGET, with the
# instruction guard's interval_cost in the same cargo invocation), before any test runs: a build
# is a phase of its own, not the first test's time.
build() {
  cargo nextest run --workspace --locked --no-run --cargo-quiet \
    && scripts/build.sh -q -p cachescope-interval-cost >/dev/null
}
phase build build
# A Docker daemon for the tests that need real containers (as the issue's machines run it: no
# iptables, no bridge; containers use --network none). Left running for later runs.
if [ "$(id -u)" = 0 ] && command -v dockerd >/dev/null && ! docker info >/dev/null 2>&1; then
  mkdir -p target
  # dockerd uses a containerd whose socket exists; one left by a killed containerd (nothing
  # listening) makes it give up instead of starting its own.
  sock=/run/containerd/containerd.sock
  if [ -S "$sock" ] && command -v ctr >/dev/null && ! timeout 5 ctr --address "$sock" version >/dev/null 2>&1; then
    echo "test: removing $sock: no containerd listens on it"
    rm -f "$sock" "$sock.ttrpc"
  fi
  nohup dockerd --iptables=false --bridge=none >target/dockerd.log 2>&1 &
  for _ in $(seq 100); do docker info >/dev/null 2>&1 && break; sleep 0.2; done
  docker info >/dev/null 2>&1 || echo "test: dockerd did not start (target/dockerd.log); Docker tests skip"
fi
# A test that cannot run here calls cachescope_testkit::skip, which the harness counts as
# passed: each such skip is a line in this file, counted below as skipped. With
# CACHESCOPE_REQUIRE_ALL=1 (CI: our machines run every tier) a skip fails its test instead.
export CACHESCOPE_SKIPS="$PWD/$tdir/test-skips.txt"
# Each guest boot appends its time, kernel and machine here (scripts/guest-qemu.sh).
export CACHESCOPE_BOOT_LOG="$PWD/$tdir/guest-boots.txt"
rm -f "$CACHESCOPE_SKIPS" "$CACHESCOPE_BOOT_LOG"
status=0
# The fuzz targets' build and short runs, beside the tests at the lowest CPU priority: they
# take the CPU that the guests' serial chain leaves idle (a third of the two CPUs over the
# tests' phase, on average), where they cost the tests nothing; alone after them they were
# 137 s of every run. Their output waits in target/fuzz.log and is shown after the tests.
fuzz_log="$tdir/fuzz.log"
(
  t0=$(date +%s)
  rc=0
  nice -n 19 scripts/fuzz.sh "${CACHESCOPE_FUZZ_SECONDS:-10}" >"$fuzz_log" 2>&1 || rc=$?
  echo "fuzz, beside the tests $(($(date +%s) - t0))" >>"$phases"
  exit $rc
) &
fuzz_pid=$!
# The module's guest on the debug kernel alone, after the rest (nextest profile `alone`): it
# runs with a host thread per vCPU (its sessions are too slow under -icount), and beside the
# host's tests TCG stretches what its checks compare. The module's other guests run under
# -icount among the tests (crates/cli/tests/kmod.rs).
alone='binary_id(cachescope::kmod) & test(=kernel_module_on_the_debug_kernel)'
phase "tests (host and guests)" cargo nextest run --workspace --locked --cargo-quiet --no-fail-fast \
  -E "not ($alone)" || status=1
phase "the module on the debug kernel, alone" cargo nextest run --workspace --locked --cargo-quiet --no-fail-fast \
  --profile alone -E "$alone" || status=1
echo "== fuzz (beside the tests)"
t0=$(date +%s)
fuzz_status=0
wait "$fuzz_pid" || fuzz_status=$?
echo "fuzz, waited for after the tests $(($(date +%s) - t0))" >>"$phases"
cat "$fuzz_log"
[ "$fuzz_status" = 0 ] || status=1
python3 scripts/lib/test-summary.py "$phases" "$CACHESCOPE_SKIPS" "$CACHESCOPE_BOOT_LOG" \
  target/nextest/default/junit.xml target/nextest/alone/junit.xml
exit $status
