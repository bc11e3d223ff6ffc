#!/usr/bin/env bash
# Checks the packages scripts/package.sh built, as an administrator would use them, in a
# Debian root of this release made here with debootstrap (an overlay over the build root
# scripts/kmod-build.sh keeps: the root itself is not changed):
#   - lintian: no error and no warning;
#   - `apt-get install ./cachescope_*.deb` resolves its dependencies from Debian's archive,
#     `cachescope info` runs, the unit, completions and man page are where they belong and the
#     unit is not enabled; `dpkg --purge` leaves none of its files behind;
#   - `apt-get install ./cachescope-dkms_*.deb` with the headers of the kernel the QEMU tests
#     boot: DKMS builds the module for it; that module loads with emulate=1 in the guest
#     (scripts/guest-qemu.sh, kmod/test/load.sh) and unloads; `dpkg --purge` removes the
#     source and every build.
# Prints "CS-PKG key=value" lines; exits non-zero at the first failure.
#   scripts/package-check.sh DEB DKMS_DEB OUTDIR
set -euo pipefail
cd "$(dirname "$0")/.."
deb=$(realpath "${1:?usage: package-check.sh DEB DKMS_DEB OUTDIR}")
dkms_deb=$(realpath "${2:?usage: package-check.sh DEB DKMS_DEB OUTDIR}")
out=${3:?usage: package-check.sh DEB DKMS_DEB OUTDIR}
mkdir -p "$out" && out=$(realpath "$out")
say() { echo "CS-PKG $*"; }
fail() { echo "package-check: $*" >&2; exit 1; }

for d in "$deb" "$dkms_deb"; do
  tags=$(lintian --tag-display-limit 0 "$d" 2>&1 | grep -E '^[EW]: ' || true)
  [ -z "$tags" ] || fail "lintian on $(basename "$d"): $tags"
done
say lintian=clean

# This release's build root (made once, cached: scripts/kmod-build.sh), and its kernel.
suite=$(. /etc/os-release && echo "$VERSION_CODENAME")
scripts/kmod-build.sh cloud-amd64 "$out/kbuild" >/dev/null
root=$(ls -d "${CACHESCOPE_ROOT_CACHE:-/var/cache/cachescope/roots}/$suite"-gcc-*/ | head -1)
[ -e "$root/.complete" ] || fail "no build root of $suite"
kver=$(dpkg-query -W -f='${Depends}' linux-headers-amd64 | sed -n 's/^linux-headers-\([^ ,]*\).*/\1/p')
[ -n "$kver" ] || fail "linux-headers-amd64 is not installed (scripts/setup.sh installs it)"

work=$(mktemp -d /var/tmp/cachescope-pkg.XXXXXX)
m=$work/merged
cleanup() {
  for p in "$m/var/cache/apt/archives" "$m/dev" "$m/sys" "$m/proc" "$m"; do mountpoint -q "$p" && umount -l "$p"; done
  rm -rf "$work"
}
trap cleanup EXIT
mkdir -p "$work/upper" "$work/work" "$m"
mount -t overlay overlay -o "lowerdir=$root,upperdir=$work/upper,workdir=$work/work" "$m"
mount -t proc proc "$m/proc"
mount --bind /dev "$m/dev"
mount --bind -o ro /sys "$m/sys"
# Downloaded packages are kept between runs (dkms, the kernel headers: tens of MB).
archives=${CACHESCOPE_APT_ARCHIVES:-/var/cache/cachescope/apt-archives}
mkdir -p "$archives/partial"
mount --bind "$archives" "$m/var/cache/apt/archives"
cp -L /etc/resolv.conf "$m/etc/resolv.conf"
# This machine's Debian sources (the release's updates and security suites carry its kernels).
for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.sources /etc/apt/sources.list.d/*.list; do
  [ -f "$f" ] && grep -q "debian" "$f" && cp "$f" "$m$f"
done
cp "$deb" "$dkms_deb" "$m/tmp/"
in_root() { chroot "$m" env DEBIAN_FRONTEND=noninteractive PATH=/usr/sbin:/usr/bin:/sbin:/bin "$@"; }
in_root apt-get update -qq >"$out/apt.log" 2>&1 || { tail "$out/apt.log" >&2; fail "apt-get update"; }

# The binary package.
in_root apt-get install -y -q "/tmp/$(basename "$deb")" >>"$out/apt.log" 2>&1 \
  || { tail -20 "$out/apt.log" >&2; fail "installing $(basename "$deb")"; }
say installed=cachescope
in_root cachescope info >"$out/info.txt" 2>&1 || fail "cachescope info: $(tail -3 "$out/info.txt")"
grep -q "^Backends" "$out/info.txt" || fail "cachescope info: $(head -3 "$out/info.txt")"
say info=ran
for f in /lib/systemd/system/cachescope.service /usr/share/bash-completion/completions/cachescope \
  /usr/share/zsh/vendor-completions/_cachescope /usr/share/fish/vendor_completions.d/cachescope.fish \
  /usr/share/man/man1/cachescope.1.gz /usr/share/man/man1/cachescope-monitor.1.gz \
  /usr/share/man/man1/cachescope-record.1.gz /usr/share/doc/cachescope/copyright; do
  [ -s "$m$f" ] || fail "$f missing"
done
grep -q "^ExecStart=/usr/bin/cachescope " "$m/lib/systemd/system/cachescope.service" || fail "the unit does not run /usr/bin/cachescope"
[ -e "$m/etc/systemd/system/multi-user.target.wants/cachescope.service" ] && fail "the unit was enabled"
say files=present unit=not-enabled
in_root dpkg --purge cachescope >>"$out/apt.log" 2>&1 || fail "dpkg --purge cachescope"
left=$(dpkg-deb --fsys-tarfile "$deb" | tar -t | sed 's|^\./|/|' | grep -v '/$' | while read -r f; do [ -e "$m$f" ] && echo "$f"; done || true)
[ -z "$left" ] || fail "left after purge: $left"
say purged=clean

# The DKMS package, with the headers of the kernel the guest boots.
in_root apt-get install -y -q "/tmp/$(basename "$dkms_deb")" "linux-headers-$kver" >>"$out/apt.log" 2>&1 \
  || { tail -20 "$out/apt.log" >&2; fail "installing $(basename "$dkms_deb")"; }
version=$(dpkg-deb -f "$dkms_deb" Version)
# The postinst built for the kernels with headers; in a chroot `uname -r` is this machine's
# kernel, so the guest's is asked for by name, as on a kernel upgrade.
in_root dkms autoinstall -k "$kver" >>"$out/apt.log" 2>&1 || { tail -20 "$out/apt.log" >&2; fail "dkms autoinstall -k $kver"; }
in_root dkms status -m cachescope -v "$version" >"$out/dkms-status.txt" 2>>"$out/apt.log"
grep -q "$kver, x86_64: installed" "$out/dkms-status.txt" || fail "dkms status: $(cat "$out/dkms-status.txt")"
ko=$(find "$m/lib/modules/$kver" -name 'cachescope.ko*' | head -1)
[ -n "$ko" ] || fail "no cachescope.ko under /lib/modules/$kver"
case $ko in
  *.xz) xz -dc "$ko" >"$out/cachescope.ko" ;;
  *.zst) zstd -qdc "$ko" >"$out/cachescope.ko" ;;
  *) cp "$ko" "$out/cachescope.ko" ;;
esac
say dkms=built kernel="$kver"
in_root dpkg --purge cachescope-dkms >>"$out/apt.log" 2>&1 || fail "dpkg --purge cachescope-dkms"
[ -e "$m/usr/src/cachescope-$version" ] && fail "/usr/src/cachescope-$version left after purge"
[ -n "$(find "$m/lib/modules/$kver" -name 'cachescope.ko*')" ] && fail "the module left after purge"
[ -e "$m/var/lib/dkms/cachescope" ] && fail "/var/lib/dkms/cachescope left after purge"
say dkms_purged=clean

# The module DKMS built, in the guest, with the packaged binary.
rm -rf "$out/deb" && mkdir -p "$out/deb"
dpkg-deb --fsys-tarfile "$deb" | tar -x -C "$out/deb" ./usr/bin/cachescope
CACHESCOPE_GUEST_KMOD=$out/cachescope.ko scripts/guest-qemu.sh "$out/deb/usr/bin/cachescope" "$out/guest" kmod/test/load.sh \
  | sed 's/^CS-RESULT /CS-PKG guest_/'
