#!/usr/bin/env bash
# Build cachescope (release) and run it. With no argument: `monitor`, the live view of this
# host's containers (q or Ctrl-C stops it); otherwise any subcommand: `scripts/run.sh info`,
# `scripts/run.sh record --output DIR`. Installs only what the build needs (scripts/setup.sh
# build); scripts/test.sh installs what the tests need. The build is scripts/build.sh's, which
# package.sh and test.sh share.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh build
bin=$(scripts/build.sh | tail -n 1)
[ $# -gt 0 ] || set -- monitor
exec "$bin" "$@"
