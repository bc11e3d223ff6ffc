#!/usr/bin/env bash
# Prints the path of a Debian kernel image (vmlinuz), downloaded once and never installed:
#   scripts/debian-kernel.sh          this release's (the one linux-headers-amd64 points to)
#   scripts/debian-kernel.sh SUITE    the newest linux-image-amd64 of SUITE (unstable: 7.2)
# Kept in ${CACHESCOPE_KERNEL_CACHE:-/var/cache/cachescope/kernels}, by version, with the
# modules a guest may need that the package carries uncompressed (msr.ko: /dev/cpu/N/msr) in
# modules-VERSION/ beside it.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cache=${CACHESCOPE_KERNEL_CACHE:-/var/cache/cachescope/kernels}
mkdir -p "$cache"
suite=${1:-}
apt_opts=()
if [ -z "$suite" ]; then
  kver=$(dpkg-query -W -f='${Depends}' linux-headers-amd64 | sed -n 's/^linux-headers-\([^ ,]*\).*/\1/p')
  [ -n "$kver" ] || { echo "debian-kernel: linux-headers-amd64 is not installed" >&2; exit 1; }
else
  # shellcheck source=scripts/lib/apt-suite.sh
  . "$here/lib/apt-suite.sh"
  apt_suite "$cache/apt-$suite" "$suite" deb
  apt_opts=("${APT_SUITE_OPTS[@]}")
  kver=$(apt-cache "${apt_opts[@]}" depends linux-image-amd64 2>/dev/null \
    | sed -n 's/^ *Depends: linux-image-\([0-9][^ ]*-amd64\)$/\1/p' | head -1)
  [ -n "$kver" ] || { echo "debian-kernel: no linux-image-amd64 in $suite" >&2; exit 1; }
fi
vmlinuz=$cache/vmlinuz-$kver
if [ ! -s "$vmlinuz" ] || [ ! -d "$cache/modules-$kver" ]; then
  tmp=$(mktemp -d)
  # Newer Debian kernels moved the image from linux-image-VER into linux-binary-VER.
  pkg=linux-image-$kver
  apt-cache "${apt_opts[@]}" show "linux-binary-$kver" >/dev/null 2>&1 && pkg=linux-binary-$kver
  (cd "$tmp" && apt-get "${apt_opts[@]}" download -qq "$pkg" >&2)
  deb=$(ls "$tmp/$pkg"_*.deb)
  path=$(dpkg-deb -c "$deb" | awk '{ print $6 }' | grep -Fx -e "./boot/vmlinuz-$kver" -e "./usr/lib/modules/$kver/vmlinuz" | head -1)
  [ -n "$path" ] || { echo "debian-kernel: no vmlinuz in $deb" >&2; exit 1; }
  dpkg-deb --fsys-tarfile "$deb" | tar -xO "$path" >"$vmlinuz.part"
  mkdir -p "$cache/modules-$kver"
  for ko in $(dpkg-deb -c "$deb" | awk '{ print $6 }' | grep -E '/kernel/arch/x86/kernel/msr\.ko$' || true); do
    dpkg-deb --fsys-tarfile "$deb" | tar -xO "$ko" >"$cache/modules-$kver/$(basename "$ko")"
  done
  mv "$vmlinuz.part" "$vmlinuz"
  rm -rf "$tmp"
fi
echo "$vmlinuz"
