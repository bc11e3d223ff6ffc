#!/usr/bin/env bash
# Prints the path of a Debian kernel image (vmlinuz), downloaded once and never installed:
#   scripts/debian-kernel.sh               this release's (the one linux-headers-amd64 points to)
#   scripts/debian-kernel.sh SUITE         the newest linux-image-amd64 of SUITE (unstable: 7.2)
#   scripts/debian-kernel.sh [SUITE/]META  the kernel the meta-package linux-image-META points to,
#                                          in SUITE or this release (rt-amd64, 6.12-amd64,
#                                          6.12-rt-amd64, cloud-amd64, unstable/rt-amd64)
# Kept in ${CACHESCOPE_KERNEL_CACHE:-/var/cache/cachescope/kernels}, by version, with the
# modules a guest may need (msr.ko: /dev/cpu/N/msr; intel-uncore.ko: the RDT machine's memory
# controller), uncompressed for busybox's insmod, in modules-VERSION/ beside it (its .complete-2
# file says they were taken; .complete, before, msr.ko alone).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cache=${CACHESCOPE_KERNEL_CACHE:-/var/cache/cachescope/kernels}
mkdir -p "$cache"
# One at a time per cache: tests ask concurrently, and two would update the same suite index
# (apt's lock refuses the second) and write the same image.
exec 9>"$cache/.lock"
flock 9
spec=${1:-}
case $spec in
  "") suite="" meta="" ;;
  */*amd64) suite=${spec%%/*} meta=${spec#*/} ;;
  *amd64) suite="" meta=$spec ;;
  *) suite=$spec meta=amd64 ;;
esac
# Which version a package name means, as apt last said (apt reads a whole suite's index to
# say it: 1-1.7 s of CPU, at every guest boot), while that index has not changed (another
# suite's: while it is under a day old, as apt_suite keeps it) and the kernel is here.
lists=/var/lib/apt/lists fresh=()
[ -n "$suite" ] && lists=$cache/apt-$suite/lists fresh=(-mtime -1)
known=$cache/kver-${suite:-release}-$meta
if [ -n "$meta" ] && [ -s "$known" ] && [ -n "$(find "$lists" -name '*_Packages*' "${fresh[@]}" | head -1)" ] &&
  [ -z "$(find "$lists" -name '*_Packages*' -newer "$known" | head -1)" ]; then
  kver=$(cat "$known")
  if [ -s "$cache/vmlinuz-$kver" ] && [ -e "$cache/modules-$kver/.complete-2" ]; then
    echo "$cache/vmlinuz-$kver"
    exit 0
  fi
fi
apt_opts=()
if [ -n "$suite" ]; then
  # shellcheck source=scripts/lib/apt-suite.sh
  . "$here/lib/apt-suite.sh"
  apt_suite "$cache/apt-$suite" "$suite" deb
  apt_opts=("${APT_SUITE_OPTS[@]}")
fi
if [ -z "$meta" ]; then
  kver=$(dpkg-query -W -f='${Depends}' linux-headers-amd64 | sed -n 's/^linux-headers-\([^ ,]*\).*/\1/p')
  [ -n "$kver" ] || { echo "debian-kernel: linux-headers-amd64 is not installed" >&2; exit 1; }
else
  kver=$(apt-cache "${apt_opts[@]}" depends "linux-image-$meta" 2>/dev/null \
    | sed -n 's/^ *Depends: linux-image-\([0-9][^ ]*-amd64\)$/\1/p' | head -1)
  [ -n "$kver" ] || { echo "debian-kernel: no linux-image-$meta in ${suite:-this release}" >&2; exit 1; }
  echo "$kver" >"$known"
fi
vmlinuz=$cache/vmlinuz-$kver
if [ ! -s "$vmlinuz" ] || [ ! -e "$cache/modules-$kver/.complete-2" ]; then
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
  # Newer kernels keep their modules in linux-modules-VER, compressed (msr.ko.xz): busybox's
  # insmod takes them plain.
  debs=$deb
  if apt-cache "${apt_opts[@]}" show "linux-modules-$kver" >/dev/null 2>&1; then
    (cd "$tmp" && apt-get "${apt_opts[@]}" download -qq "linux-modules-$kver" >&2)
    debs="$debs $(ls "$tmp/linux-modules-$kver"_*.deb)"
  fi
  for d in $debs; do
    for ko in $(dpkg-deb -c "$d" | awk '{ print $6 }' | grep -E '/kernel/arch/x86/(kernel/msr|events/intel/intel-uncore)\.ko(\.xz|\.zst)?$' || true); do
      name=$(basename "$ko")
      case $name in
        *.xz) dpkg-deb --fsys-tarfile "$d" | tar -xO "$ko" | xz -dc >"$cache/modules-$kver/${name%.xz}" ;;
        *.zst) dpkg-deb --fsys-tarfile "$d" | tar -xO "$ko" | zstd -dqc >"$cache/modules-$kver/${name%.zst}" ;;
        *) dpkg-deb --fsys-tarfile "$d" | tar -xO "$ko" >"$cache/modules-$kver/$name" ;;
      esac
    done
  done
  touch "$cache/modules-$kver/.complete-2"
  mv "$vmlinuz.part" "$vmlinuz"
  rm -rf "$tmp"
fi
echo "$vmlinuz"
