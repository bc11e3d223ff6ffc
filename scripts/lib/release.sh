# Sourced: where cachescope's release build lives, one place for every script (run.sh,
# package.sh, test.sh, the benchmarks) and the tests' release binaries, so that none rebuilds
# what another built. $CACHESCOPE_RELEASE_TARGET where set (test.sh sets it for its tests);
# else $CARGO_TARGET_DIR (cargo's own setting, honoured everywhere); else /var/cache/cachescope/target-release where it can be
# written (outside the clone: a second clone rebuilds only the workspace's crates); else the
# clone's target/.
release_dir() {
  if [ -n "${CACHESCOPE_RELEASE_TARGET:-}" ]; then
    echo "$CACHESCOPE_RELEASE_TARGET"
  elif [ -n "${CARGO_TARGET_DIR:-}" ]; then
    echo "$CARGO_TARGET_DIR"
  elif mkdir -p /var/cache/cachescope/target-release 2>/dev/null && [ -w /var/cache/cachescope/target-release ]; then
    echo /var/cache/cachescope/target-release
  else
    echo "$PWD/target"
  fi
}
