#!/usr/bin/env bash
# Fuzz every parser of outside input (fuzz/src/lib.rs) with libFuzzer through cargo-fuzz on
# the nightly toolchain, SECONDS each (default 600: the by-hand run; CI runs a short one).
# Seeds: fuzz/seeds/<target>, the CPUID vectors of testdata/cpuid, the scenarios; what a run
# learns is kept in target/fuzz-corpus/<target> (not committed). A crash stops the script
# with the input saved under fuzz/artifacts/<target>/ and its path printed.
# Usage: scripts/fuzz.sh [SECONDS [TARGET...]]
set -euo pipefail
secs=${1:-600}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(cpuid_vector scenario cgroup_path kernel_text report_parquet http_head kmod_records recover)
cd "$(dirname "$0")/.."
if ! rustup run nightly rustc --version >/dev/null 2>&1; then
  echo "fuzz: skipped: no nightly toolchain (libFuzzer's instrumentation needs it)"
  # Where every tier must run (CI), a fuzz run that cannot happen is a failure.
  [ "${CACHESCOPE_REQUIRE_ALL:-}" = 1 ] && exit 1
  exit 0
fi
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked --version 0.13.2
root=$PWD
mkdir -p "$root/target"
# The instrumented build outside the clone, kept between runs (a fresh clone rebuilds only
# the workspace's crates); CACHESCOPE_FUZZ_TARGET chooses another.
fuzz_target=${CACHESCOPE_FUZZ_TARGET:-/var/cache/cachescope/target-fuzz}
mkdir -p "$fuzz_target" 2>/dev/null && [ -w "$fuzz_target" ] || fuzz_target=$root/fuzz/target
unset CARGO_TARGET_DIR
# Built first, with its errors shown: a target that does not compile is a failure, not silence.
if ! (cd fuzz && cargo +nightly fuzz build -O --target-dir "$fuzz_target" >"$root/target/fuzz-build.log" 2>&1); then
  grep -E '^(error|warning: unused)' -A12 "$root/target/fuzz-build.log" | head -60
  echo "fuzz: the fuzz targets do not build (target/fuzz-build.log)"
  exit 1
fi
for t in "${targets[@]}"; do
  corpus="$root/target/fuzz-corpus/$t"
  mkdir -p "$corpus"
  seeds=()
  [ -d "fuzz/seeds/$t" ] && seeds+=("$root/fuzz/seeds/$t")
  [ "$t" = cpuid_vector ] && seeds+=("$root/testdata/cpuid")
  [ "$t" = scenario ] && seeds+=("$root/scenarios" "$root/testdata/scenarios")
  echo "== fuzz $t for ${secs}s"
  # -rss_limit_mb: an input that makes the program allocate beyond this is a finding.
  (cd fuzz && cargo +nightly fuzz run -O --target-dir "$fuzz_target" "$t" "$corpus" "${seeds[@]}" -- \
    -max_total_time="$secs" -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 2>&1) \
    | grep -E '^(#[0-9]+ *(DONE|INITED))|stat::number_of_executed_units|stat::peak_rss_mb|ERROR|SUMMARY|panicked|Test unit written|artifact_prefix|==[0-9]+==' || true
  mkdir -p fuzz/artifacts/"$t"
  found=$(find fuzz/artifacts/"$t" -type f \( -name 'crash-*' -o -name 'oom-*' -o -name 'timeout-*' -o -name 'leak-*' \) 2>/dev/null | head -1)
  if [ -n "$found" ]; then
    echo "fuzz: $t found a failing input: $found"
    exit 1
  fi
done
echo "fuzz: ${#targets[@]} targets, ${secs}s each, no crash"
