#!/usr/bin/env bash
# Prints the path of a tree holding Debian unstable's crun, for a guest's root: opt/crun/bin/crun
# and the libraries it loads in opt/crun/lib, its ELF interpreter and library path pointed there
# (patchelf), so that it runs beside this release's older libc. crun reads the OCI spec's
# linux.intelRdt.enableMonitoring (a MON group per container, made before the container runs);
# this release's crun and runc, and unstable's runc, do not. Downloaded once, never installed,
# kept in ${CACHESCOPE_ROOT_CACHE:-/var/cache/cachescope/roots}/crun-VERSION.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cache=${CACHESCOPE_ROOT_CACHE:-/var/cache/cachescope/roots}
mkdir -p "$cache"
exec 9>"$cache/.crun.lock"
flock 9
command -v patchelf >/dev/null || { echo "debian-crun: patchelf is missing (scripts/setup.sh test)" >&2; exit 1; }
# shellcheck source=scripts/lib/apt-suite.sh
. "$here/lib/apt-suite.sh"
apt_unstable
ver=$(apt-cache "${APT_SUITE_OPTS[@]}" show crun 2>/dev/null | sed -n 's/^Version: //p' | head -1)
[ -n "$ver" ] || { echo "debian-crun: no crun in unstable" >&2; exit 1; }
libc=$(apt-cache "${APT_SUITE_OPTS[@]}" show libc6 2>/dev/null | sed -n 's/^Version: //p' | head -1)
dir=$cache/crun-$ver-libc-$libc
if [ ! -e "$dir/.complete" ]; then
  rm -rf "$dir" && mkdir -p "$dir/debs" "$dir/x" "$dir/tree/opt/crun/bin" "$dir/tree/opt/crun/lib"
  # crun and what it needs, recursively (in unstable: libraries only).
  pkgs=$(apt-cache "${APT_SUITE_OPTS[@]}" depends --recurse --no-recommends --no-suggests --no-conflicts \
    --no-breaks --no-replaces --no-enhances crun 2>/dev/null | grep -v '^ ' | grep -v '^<' | sort -u)
  # shellcheck disable=SC2086 # one word per package
  (cd "$dir/debs" && apt-get "${APT_SUITE_OPTS[@]}" download -qq $pkgs >&2)
  for d in "$dir"/debs/*.deb; do dpkg-deb -x "$d" "$dir/x"; done
  cp "$dir/x/usr/bin/crun" "$dir/tree/opt/crun/bin/crun"
  find "$dir/x/usr/lib/x86_64-linux-gnu" "$dir/x/lib/x86_64-linux-gnu" -maxdepth 1 -name '*.so*' \
    \( -type f -o -type l \) -exec cp -P {} "$dir/tree/opt/crun/lib/" \; 2>/dev/null || true
  lib=$dir/tree/opt/crun/lib
  [ -e "$lib/ld-linux-x86-64.so.2" ] || cp -L "$dir/x/usr/lib64/ld-linux-x86-64.so.2" "$lib/" 2>/dev/null || true
  [ -e "$lib/ld-linux-x86-64.so.2" ] || { echo "debian-crun: no ld-linux-x86-64.so.2 in unstable's libc6" >&2; exit 1; }
  # Everything crun loads must come from the tree: the loader says where each library is found.
  if "$lib/ld-linux-x86-64.so.2" --library-path "$lib" --list "$dir/tree/opt/crun/bin/crun" | grep -v -e "$lib/" -e vdso; then
    echo "debian-crun: crun loads the libraries above from outside its tree" >&2
    exit 1
  fi
  patchelf --set-interpreter /opt/crun/lib/ld-linux-x86-64.so.2 --set-rpath /opt/crun/lib "$dir/tree/opt/crun/bin/crun"
  "$lib/ld-linux-x86-64.so.2" --library-path "$lib" "$dir/tree/opt/crun/bin/crun" --version >"$dir/version.txt"
  rm -rf "$dir/debs" "$dir/x"
  touch "$dir/.complete"
fi
echo "$dir/tree"
