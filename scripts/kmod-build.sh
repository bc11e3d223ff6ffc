#!/usr/bin/env bash
# Builds kmod/ for a Debian kernel with W=1, warnings as errors, and prints the module's path:
#   scripts/kmod-build.sh KERNEL OUTDIR
# KERNEL as scripts/debian-kernel.sh takes it ("" this release's default, unstable,
# rt-amd64, 6.12-amd64, 6.12-rt-amd64, unstable/rt-amd64, ...), or "debug" for the debug kernel
# scripts/debug-kernel.sh builds (lockdep, KASAN, kmemleak). This release's default kernel
# builds against the headers installed here (linux-headers-amd64); every other one in a build
# root of its suite (debootstrap, minbase, with make, perl, pahole and the compiler its headers name: gcc-12 for this
# release, gcc-16 for unstable's 7.2), with its headers unpacked there and never installed on
# this machine. Roots are cached in ${CACHESCOPE_ROOT_CACHE:-/var/cache/cachescope/roots}, by
# suite, compiler and kbuild's libraries; OUTDIR/kbuild.log keeps the compiler's output.
# A module that built without a warning is kept in ${CACHESCOPE_KMOD_CACHE:-/var/cache/cachescope/kmod},
# keyed by the module's sources, the kernel and the tree it was built against: the same inputs
# give the same module and the same (empty) warnings, so the test suite's guests of one kernel
# build it once.
set -euo pipefail
cd "$(dirname "$0")/.."
spec=${1-}
out=${2:?usage: kmod-build.sh KERNEL OUTDIR}
mkdir -p "$out"
out=$(realpath "$out")
log=$out/kbuild.log

kcache=${CACHESCOPE_KMOD_CACHE:-/var/cache/cachescope/kmod}
src_hash=$(cat kmod/Makefile kmod/Kbuild kmod/*.c kmod/*.h | sha256sum | cut -c1-16)

# cached TREE: the module built before for $kver against TREE, if any, copied to OUTDIR and
# its path printed (the caller then exits).
cached() {
  local key
  key=$(echo "$kver $1 $src_hash" | sha256sum | cut -c1-16)
  kdir=$kcache/$key
  [ -f "$kdir/cachescope.ko" ] || return 1
  cp "$kdir/cachescope.ko" "$out/cachescope.ko"
  cp "$kdir/kbuild.log" "$log"
  echo "$out/cachescope.ko"
}

# keep: the module just built and checked, into the cache ($kdir, set by cached).
keep() {
  mkdir -p "$kcache"
  local tmp
  tmp=$(mktemp -d "$kcache/.new-XXXXXX")
  cp "$out/cachescope.ko" "$log" "$tmp/"
  # Whole or not at all; a concurrent build of the same key may have kept its own already.
  mv -T "$tmp" "$kdir" 2>/dev/null || rm -rf "$tmp"
}

# check DIR MAKE...: the module's sources in DIR, built by MAKE; any warning fails.
check() {
  local dir=$1
  shift
  rm -rf "$dir" && mkdir -p "$dir"
  cp kmod/Makefile kmod/Kbuild kmod/*.c kmod/*.h "$dir/"
  if ! "$@" >"$log" 2>&1; then
    cat "$log" >&2
    echo "kmod-build: the module does not build for $kver" >&2
    exit 1
  fi
  if grep -E "warning:|error:" "$log" >&2; then
    echo "kmod-build: warnings building for $kver" >&2
    exit 1
  fi
}

# The debug kernel (scripts/debug-kernel.sh): against its own tree, with this machine's compiler.
if [ "$spec" = debug ]; then
  ktree=$(dirname "$(scripts/debug-kernel.sh | tail -1)")/src
  kver="debug ($(make -s -C "$ktree" kernelversion))"
  cached "$ktree" && exit 0
  check "$out/kbuild" make -s -C "$out/kbuild" KDIR="$ktree" check
  cp "$out/kbuild/cachescope.ko" "$out/cachescope.ko"
  keep
  echo "$out/cachescope.ko"
  exit 0
fi
vmlinuz=$(scripts/debian-kernel.sh ${spec:+"$spec"} | tail -1)
kver=$(basename "$vmlinuz" | sed 's/^vmlinuz-//')

native=$(dpkg-query -W -f='${Depends}' linux-headers-amd64 2>/dev/null | sed -n 's/^linux-headers-\([^ ,]*\).*/\1/p')
if [ "$kver" = "$native" ] && [ -d "/usr/src/linux-headers-$kver" ]; then
  cached "/usr/src/linux-headers-$kver $(gcc --version | head -1)" && exit 0
  check "$out/kbuild" make -s -C "$out/kbuild" KDIR="/usr/src/linux-headers-$kver" check
  cp "$out/kbuild/cachescope.ko" "$out/cachescope.ko"
  keep
  echo "$out/cachescope.ko"
  exit 0
fi

# The suite whose packages built this kernel, and apt options that reach it.
case $spec in
  */*) suite=${spec%%/*} ;;
  *amd64) suite="" ;;
  *) suite=$spec ;;
esac
apt_opts=()
if [ -n "$suite" ]; then
  # shellcheck source=scripts/lib/apt-suite.sh
  . scripts/lib/apt-suite.sh
  apt_suite "${CACHESCOPE_KERNEL_CACHE:-/var/cache/cachescope/kernels}/apt-$suite" "$suite" deb
  apt_opts=("${APT_SUITE_OPTS[@]}")
else
  suite=$(. /etc/os-release && echo "$VERSION_CODENAME")
fi
# The headers' packages (arch, common, kbuild), the compiler they were built with, and the
# libraries kbuild's programs load (objtool: libelf).
deps() { apt-cache "${apt_opts[@]}" depends "$1" 2>/dev/null | sed -n 's/^ *Depends: \([^ <>]*\)$/\1/p'; }
pkgs="linux-headers-$kver"
compiler=""
libs=""
for d in $(deps "linux-headers-$kver"); do
  case $d in
    linux-headers-*) pkgs="$pkgs $d" ;;
    linux-kbuild-*)
      pkgs="$pkgs $d"
      for l in $(deps "$d"); do case $l in lib*) libs="$libs,$l" ;; esac; done
      ;;
    gcc-*|linux-compiler-gcc-*) compiler=$d ;;
  esac
done
[ -n "$compiler" ] || { echo "kmod-build: linux-headers-$kver names no compiler" >&2; exit 1; }
# linux-compiler-gcc-12-x86 is this release's name for gcc-12; gcc-16-for-host unstable's.
cc_pkg=$(echo "$compiler" | sed -e 's/^linux-compiler-\(gcc-[0-9]*\)-x86$/\1/' -e 's/-for-host$//')

roots=${CACHESCOPE_ROOT_CACHE:-/var/cache/cachescope/roots}
root=$roots/$suite-$cc_pkg-$(echo "make,perl,dwarves$libs" | md5sum | cut -c1-8)
# shellcheck source=scripts/lib/debootstrap.sh
. scripts/lib/debootstrap.sh
debootstrap_once "$root" "$suite" "make,perl,dwarves,$cc_pkg$libs" kmod-build
# Headers unpacked, not installed: their packages depend on the kernel image.
if [ ! -e "$root/usr/src/linux-headers-$kver/.complete" ]; then
  tmp=$(mktemp -d)
  # shellcheck disable=SC2086 # a list of package names
  (cd "$tmp" && apt-get "${apt_opts[@]}" download -qq $pkgs >&2)
  # Kept: the root's /lib -> usr/lib (a plain dpkg-deb -x would replace it with a directory).
  for deb in "$tmp"/*.deb; do dpkg-deb --fsys-tarfile "$deb" | tar -x --keep-directory-symlink -C "$root"; done
  rm -rf "$tmp"
  touch "$root/usr/src/linux-headers-$kver/.complete"
fi
exec 9>&-
cached "$root" && exit 0
cc=$(sed -n 's/^CONFIG_CC_VERSION_TEXT="\{0,1\}\([^ ]*\).*/\1/p' "$root/usr/src/linux-headers-$kver/include/config/auto.conf")
[ -n "$cc" ] || cc=gcc
dir=/tmp/kbuild-$$
# objtool reads /proc: the root gets its own, in a mount namespace of this build.
check "$root$dir" unshare --mount --fork sh -c \
  "mount -t proc proc '$root/proc' && exec chroot '$root' make -s -C '$dir' KDIR='/usr/src/linux-headers-$kver' CC='$cc' check"
cp "$root$dir/cachescope.ko" "$out/cachescope.ko"
rm -rf "${root:?}$dir"
keep
echo "$out/cachescope.ko"
