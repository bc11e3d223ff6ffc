#!/usr/bin/env bash
# Builds the kernel's own resctrl selftests (tools/testing/selftests/resctrl) from Debian's
# source of this release's kernel, unmodified, as one static program for the RDT machine's
# guests, and prints its path:
#   scripts/resctrl-selftests.sh
# The source is the tree scripts/debug-kernel.sh unpacks (the same `apt-get source linux` of
# this release; it builds that kernel too, once). Cached in
# ${CACHESCOPE_KERNEL_CACHE:-/var/cache/cachescope/kernels}/resctrl-tests-KEY, KEY a hash of
# the selftests' sources.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cache=${CACHESCOPE_KERNEL_CACHE:-/var/cache/cachescope/kernels}
image=$("$here/debug-kernel.sh")
src=$(dirname "$image")/src
tests=$src/tools/testing/selftests/resctrl
[ -f "$tests/resctrl_tests.c" ] || { echo "resctrl-selftests: no $tests/resctrl_tests.c in the source" >&2; exit 1; }
version=$(make -s -C "$src" kernelversion 2>/dev/null)
key=$(cat "$tests"/*.c "$tests"/*.h | md5sum | cut -c1-12)
out=$cache/resctrl-tests-$key
if [ ! -x "$out/resctrl_tests" ]; then
  mkdir -p "$out.part"
  # The selftests' own flags (their Makefile), static for the initramfs.
  gcc -static -O2 -g0 -Wall -D_FORTIFY_SOURCE=2 -D_GNU_SOURCE -I "$src/tools/testing/selftests" \
    -o "$out.part/resctrl_tests" "$tests"/*.c 2>"$out.part/build.log" \
    || { cat "$out.part/build.log" >&2; echo "resctrl-selftests: the build failed" >&2; exit 1; }
  echo "$version" >"$out.part/version"
  rm -rf "$out" && mv "$out.part" "$out"
fi
echo "$out/resctrl_tests"
