#!/usr/bin/env bash
# Prints the path of a directory holding Debian unstable's containerd (2.x: NRI on by default),
# its runc shim and ctr, for the NRI plugin's test (crates/cli/tests/kubernetes.rs). This
# release's containerd (1.6) has no NRI. The binaries need nothing newer than this release's
# libc (checked: each must print its version). Downloaded once, never installed, kept in
# ${CACHESCOPE_ROOT_CACHE:-/var/cache/cachescope/roots}/containerd-VERSION/bin.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cache=${CACHESCOPE_ROOT_CACHE:-/var/cache/cachescope/roots}
mkdir -p "$cache"
exec 9>"$cache/.containerd.lock"
flock 9
# shellcheck source=scripts/lib/apt-suite.sh
. "$here/lib/apt-suite.sh"
apt_unstable
ver=$(apt-cache "${APT_SUITE_OPTS[@]}" show containerd 2>/dev/null | sed -n 's/^Version: //p' | head -1)
[ -n "$ver" ] || { echo "debian-containerd: no containerd in unstable" >&2; exit 1; }
dir=$cache/containerd-$ver
if [ ! -e "$dir/.complete" ]; then
  rm -rf "$dir" && mkdir -p "$dir/deb" "$dir/x" "$dir/bin"
  (cd "$dir/deb" && apt-get "${APT_SUITE_OPTS[@]}" download -qq containerd >&2)
  dpkg-deb -x "$dir"/deb/containerd_*.deb "$dir/x"
  for b in containerd:--version containerd-shim-runc-v2:-v ctr:--version; do
    cp "$dir/x/usr/bin/${b%%:*}" "$dir/bin/${b%%:*}"
    "$dir/bin/${b%%:*}" "${b#*:}" >/dev/null \
      || { echo "debian-containerd: ${b%%:*} $ver does not run on this machine" >&2; exit 1; }
  done
  rm -rf "$dir/deb" "$dir/x"
  touch "$dir/.complete"
fi
echo "$dir/bin"
