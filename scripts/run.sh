#!/usr/bin/env bash
# Build cachescope (release) and run it: `scripts/run.sh info`, `scripts/run.sh info --json`.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cargo build --release --locked -q -p cachescope
[ $# -gt 0 ] || set -- info
exec target/release/cachescope "$@"
