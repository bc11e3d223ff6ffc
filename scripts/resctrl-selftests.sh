#!/usr/bin/env bash
# Builds the kernel's own resctrl selftests (tools/testing/selftests/resctrl), unmodified, as
# one static program for the RDT machine's guests, and prints its path:
#   scripts/resctrl-selftests.sh            from this release's kernel source (the tree
#                                           scripts/debug-kernel.sh unpacks; it builds that
#                                           kernel too, once)
#   scripts/resctrl-selftests.sh unstable   from unstable's newest linux-source-X.Y package
#   scripts/resctrl-selftests.sh 6.12-amd64 from this release's linux-source-6.12
# Built with the selftests' own flags (their Makefile: tools/include on the path; this
# machine's uapi headers stand in for the tree's), static. Cached in
# ${CACHESCOPE_KERNEL_CACHE:-/var/cache/cachescope/kernels}/resctrl-tests-KEY, KEY a hash of
# the selftests' sources.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cache=${CACHESCOPE_KERNEL_CACHE:-/var/cache/cachescope/kernels}
# shellcheck source=lib/apt-suite.sh
. "$here/lib/apt-suite.sh"
# source_package PKG: the selftests' part of PKG's newest version (sets src and version), once.
source_package() {
  local pkg=$1
  version=$(apt-cache "${APT_SUITE_OPTS[@]}" show "$pkg" 2>/dev/null | sed -n 's/^Version: //p' | sort -V | tail -1)
  [ -n "$version" ] || { echo "resctrl-selftests: no $pkg package" >&2; exit 1; }
  src=$cache/selftests-src-$pkg-$version
  if [ ! -e "$src/.complete" ]; then
    rm -rf "$src" "$src.part" && mkdir -p "$src.part"
    (cd "$src.part" && apt-get "${APT_SUITE_OPTS[@]}" download -qq "$pkg=$version" >&2)
    # Only what the selftests build from: their directory, kselftest's headers, tools/include.
    dpkg-deb --fsys-tarfile "$src.part"/*.deb | tar -xO "./usr/src/$pkg.tar.xz" | xz -dc \
      | tar -x -C "$src.part" --strip-components=1 --wildcards "$pkg/tools/testing/selftests/resctrl/*" \
        "$pkg/tools/testing/selftests/kselftest*" "$pkg/tools/include/*"
    rm -f "$src.part"/*.deb
    touch "$src.part/.complete"
    mv "$src.part" "$src"
  fi
}
case "${1:-}" in
  "")
    image=$("$here/debug-kernel.sh")
    src=$(dirname "$image")/src
    version=$(make -s -C "$src" kernelversion 2>/dev/null)
    ;;
  unstable)
    apt_unstable
    pkg=$(apt-cache "${APT_SUITE_OPTS[@]}" search '^linux-source-[0-9.]+$' 2>/dev/null | cut -d' ' -f1 | sort -V | tail -1)
    [ -n "$pkg" ] || { echo "resctrl-selftests: no linux-source package in unstable" >&2; exit 1; }
    source_package "$pkg"
    ;;
  [0-9]*.[0-9]*-amd64)
    # This release's linux-source-X.Y (6.12: bookworm's security updates), for the guest
    # kernel scripts/debian-kernel.sh X.Y-amd64 boots.
    APT_SUITE_OPTS=()
    source_package "linux-source-${1%-amd64}"
    ;;
  *)
    echo "usage: resctrl-selftests.sh [unstable | X.Y-amd64]" >&2
    exit 2
    ;;
esac
tests=$src/tools/testing/selftests/resctrl
[ -f "$tests/resctrl_tests.c" ] || { echo "resctrl-selftests: no $tests/resctrl_tests.c in the source" >&2; exit 1; }
key=$(cat "$tests"/*.c "$tests"/*.h | md5sum | cut -c1-12)
out=$cache/resctrl-tests-$key
if [ ! -x "$out/resctrl_tests" ]; then
  rm -rf "$out.part" && mkdir -p "$out.part"
  gcc -static -O2 -g0 -Wall -D_FORTIFY_SOURCE=2 -D_GNU_SOURCE -I "$src/tools/testing/selftests" \
    -I "$src/tools/include" -o "$out.part/resctrl_tests" "$tests"/*.c 2>"$out.part/build.log" \
    || { cat "$out.part/build.log" >&2; echo "resctrl-selftests: the build failed" >&2; exit 1; }
  echo "$version" >"$out.part/version"
  rm -rf "$out" && mv "$out.part" "$out"
fi
echo "$out/resctrl_tests"
