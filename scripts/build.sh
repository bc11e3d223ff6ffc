#!/usr/bin/env bash
# Builds cachescope (release) and prints the binary's path as the last line of stdout; cargo's
# progress goes to stderr. run.sh, package.sh and test.sh build through this script, into one
# target directory (scripts/lib/release.sh: $CACHESCOPE_RELEASE_TARGET or $CARGO_TARGET_DIR, else
# /var/cache/cachescope/target-release, else target/), with the same environment, so that none
# of them rebuilds what another built: SOURCE_DATE_EPOCH, for one, makes the C dependencies'
# build scripts run again, and package.sh sets it only after this build.
# Usage: scripts/build.sh [CARGO-BUILD-ARGUMENTS...]   (e.g. -q, or -p cachescope-interval-cost)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/release.sh
dir=$(release_dir)
quiet=0
for a in "$@"; do [ "$a" = -q ] && quiet=1; done
if ((!quiet)) && [ ! -x "$dir/release/cachescope" ]; then
  echo "build: cachescope (release) into $dir: about 10 minutes on 2 CPUs the first time, seconds afterwards" >&2
fi
cargo build --release --locked -p cachescope --target-dir "$dir" "$@" >&2 &
cargo=$!
# A line every 25 s while cargo builds: one crate (arrow's, ring's C) can take 40 s on 2 CPUs
# with nothing new on the screen. The ticker's sleep holds no descriptor of ours, so a caller
# reading this script's output is not kept waiting once cargo is done.
beat=
if ((!quiet)); then
  (
    s=0
    while sleep 25 >/dev/null 2>&1; do
      kill -0 "$cargo" 2>/dev/null || exit 0
      s=$((s + 25))
      echo "build: still building, ${s} s so far" >&2
    done
  ) >/dev/null &
  beat=$!
fi
rc=0
wait "$cargo" || rc=$?
[ -z "$beat" ] || kill "$beat" 2>/dev/null || true
[ "$rc" = 0 ] || exit "$rc"
echo "$dir/release/cachescope"
