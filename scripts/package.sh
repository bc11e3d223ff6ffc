#!/usr/bin/env bash
# Builds cachescope's Debian packages from the workspace version, and prints the path of each
# package as the last lines of its output:
#   cachescope_<version>_amd64.deb      /usr/bin/cachescope; the systemd unit (installed, not
#                                       enabled: `systemctl enable --now cachescope`); bash, zsh
#                                       and fish completions; the man page; the docs
#   cachescope-dkms_<version>_all.deb   the kernel module's source under /usr/src, registered
#                                       with DKMS: built on install for the running kernel, and
#                                       again for each kernel installed later
# Usage: scripts/package.sh [OUTDIR]    (default target/debian)
# CACHESCOPE_PACKAGE_BIN=PATH packages that binary instead of building one (the tests give
# theirs; by default scripts/build.sh's, the one run.sh and test.sh use).
# Needs dpkg-dev (dpkg-shlibdeps) and fakeroot-free dpkg-deb (--root-owner-group).
set -euo pipefail
cd "$(dirname "$0")/.."
out=$(realpath -m "${1:-target/debian}")
version=$(sed -n '/^\[workspace.package\]/,/^\[/s/^version *= *"\(.*\)"/\1/p' Cargo.toml)
[ -n "$version" ] || { echo "package: no version in Cargo.toml's [workspace.package]" >&2; exit 1; }
command -v dpkg-shlibdeps >/dev/null || { echo "package: dpkg-shlibdeps missing (apt-get install dpkg-dev)" >&2; exit 1; }
# Set CACHESCOPE_MAINTAINER to who answers for these packages where they are published.
maintainer=${CACHESCOPE_MAINTAINER:-"cachescope developers <cachescope@example.org>"}
# The binary first, as run.sh and test.sh build it (scripts/build.sh: same directory, same
# environment), so that packaging after either rebuilds nothing.
bin=${CACHESCOPE_PACKAGE_BIN:-}
if [ -z "$bin" ]; then
  bin=$(scripts/build.sh | tail -n 1)
fi
# Reproducible: dates from the last commit, not the clock.
epoch=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || date +%s)}
export SOURCE_DATE_EPOCH=$epoch
when=$(date -u -R -d "@$epoch")
[ -x "$bin" ] || { echo "package: $bin is not an executable" >&2; exit 2; }
mkdir -p "$out"
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT

# doc_files ROOT PACKAGE LICENSE: the copyright (machine-readable) and changelog every package
# carries.
doc_files() {
  local d=$1/usr/share/doc/$2
  install -d "$d"
  case $3 in
    Apache-2.0) text="On Debian systems, the full text of the Apache License 2.0 is in /usr/share/common-licenses/Apache-2.0." ;;
    GPL-2.0) text="On Debian systems, the full text of the GNU General Public License version 2 is in /usr/share/common-licenses/GPL-2." ;;
  esac
  cat >"$d/copyright" <<EOF
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: cachescope
Source: the cachescope repository

Files: *
Copyright: 2025-$(date -u -d "@$epoch" +%Y) the cachescope developers
License: $3
 $text
EOF
  printf 'cachescope (%s) unstable; urgency=medium\n\n  * Built by scripts/package.sh from the workspace.\n\n -- %s  %s\n' \
    "$version" "$maintainer" "$when" | gzip -9n >"$d/changelog.gz"
}

# md5sums ROOT: the control file dpkg --verify (debsums) checks the installed files against.
md5sums() {
  (cd "$1" && find . -type f ! -path './DEBIAN/*' -printf '%P\0' | sort -z | xargs -0 md5sum >DEBIAN/md5sums)
}

# --- cachescope ---
root=$stage/cachescope
install -D -m 755 "$bin" "$root/usr/bin/cachescope"
strip --strip-unneeded --remove-section=.comment --remove-section=.note "$root/usr/bin/cachescope"
install -d "$root/lib/systemd/system"
sed -e 's|/usr/local/bin/cachescope|/usr/bin/cachescope|' \
  -e 's|^#   install -m 755 .*scripts\/build.sh.*$|#   (installed by the cachescope package)|' \
  -e '/^#   install -m 644 deploy\/systemd\/cachescope.service/d' \
  deploy/systemd/cachescope.service >"$root/lib/systemd/system/cachescope.service"
chmod 644 "$root/lib/systemd/system/cachescope.service"
install -d "$root/usr/share/bash-completion/completions" "$root/usr/share/zsh/vendor-completions" \
  "$root/usr/share/fish/vendor_completions.d" "$root/usr/share/man/man1"
"$bin" completions bash >"$root/usr/share/bash-completion/completions/cachescope"
"$bin" completions zsh >"$root/usr/share/zsh/vendor-completions/_cachescope"
"$bin" completions fish >"$root/usr/share/fish/vendor_completions.d/cachescope.fish"
# The manual page and one per subcommand (cachescope-monitor(1) ...), which it refers to.
mkdir -p "$stage/man" && "$bin" manpage --dir "$stage/man"
for page in "$stage"/man/*.1; do gzip -9nc "$page" >"$root/usr/share/man/man1/$(basename "$page").gz"; done
# The OCI hook definition, to be linked into hooks.d by whoever wants it (docs/first-instruction.md).
install -D -m 644 deploy/oci-hooks.d/cachescope.json "$root/usr/share/cachescope/oci-hooks.d/cachescope.json"
doc_files "$root" cachescope Apache-2.0
for f in README.md docs/*.md; do gzip -9nc "$f" >"$root/usr/share/doc/cachescope/$(basename "$f").gz"; done
find "$root" -type d -exec chmod 755 {} + && find "$root/usr/share" -type f -exec chmod 644 {} +
# What the binary links, as Debian's packages name it.
mkdir -p "$stage/shlibs/debian"
printf 'Source: cachescope\n\nPackage: cachescope\nArchitecture: amd64\n' >"$stage/shlibs/debian/control"
depends=$(cd "$stage/shlibs" && dpkg-shlibdeps -O "$root/usr/bin/cachescope" 2>/dev/null | sed -n 's/^shlibs:Depends=//p')
[ -n "$depends" ] || { echo "package: dpkg-shlibdeps found no dependencies" >&2; exit 1; }
install -d "$root/DEBIAN"
cat >"$root/DEBIAN/control" <<EOF
Package: cachescope
Version: $version
Architecture: amd64
Maintainer: $maintainer
Installed-Size: $(du -sk --exclude=DEBIAN "$root" | cut -f1)
Depends: $depends
Suggests: cachescope-dkms
Section: admin
Priority: optional
Description: per-container LLC occupancy, memory bandwidth and PMU counters
 cachescope measures, per container and at millisecond granularity, how much of
 the last-level cache each one occupies (Intel CMT, AMD PQoS), how much memory
 bandwidth it moves (MBM), and what its cores do (cycles, instructions, LLC
 references and misses). It records to Parquet, serves Prometheus metrics and
 shows a live view. The systemd unit is installed but not enabled:
 systemctl enable --now cachescope
EOF
md5sums "$root"
deb=$out/cachescope_${version}_amd64.deb
dpkg-deb --root-owner-group -Zxz --build "$root" "$deb" >&2

# --- cachescope-dkms ---
root=$stage/dkms
src=$root/usr/src/cachescope-$version
install -d "$src"
install -m 644 kmod/Makefile kmod/Kbuild kmod/*.c kmod/*.h "$src/"
sed -e "s/^PACKAGE_VERSION=.*/PACKAGE_VERSION=\"$version\"/" -e 's/^AUTOINSTALL=.*/AUTOINSTALL="yes"/' \
  kmod/dkms.conf >"$src/dkms.conf"
chmod 644 "$src/dkms.conf"
doc_files "$root" cachescope-dkms GPL-2.0
gzip -9nc kmod/README.md >"$root/usr/share/doc/cachescope-dkms/README.md.gz"
find "$root" -type d -exec chmod 755 {} +
install -d "$root/DEBIAN"
cat >"$root/DEBIAN/control" <<EOF
Package: cachescope-dkms
Version: $version
Architecture: all
Maintainer: $maintainer
Installed-Size: $(du -sk --exclude=DEBIAN "$root" | cut -f1)
Depends: dkms (>= 3.0)
Recommends: cachescope
Section: kernel
Priority: optional
Description: cachescope's kernel module (DKMS source)
 The out-of-tree module that tags containers with RMIDs from their first
 instruction and samples the cache monitoring counters every millisecond in the
 kernel (cachescope --backend kmod). DKMS builds it for the running kernel on
 install and for every kernel installed later.
EOF
# The DKMS helper Debian's own *-dkms packages use: add, build and install for the kernels
# with headers; remove every build before the source goes.
cat >"$root/DEBIAN/postinst" <<EOF
#!/bin/sh
set -e
if [ "\$1" = configure ]; then
	/usr/lib/dkms/common.postinst cachescope $version "" "" "\$2"
fi
EOF
cat >"$root/DEBIAN/prerm" <<EOF
#!/bin/sh
set -e
if [ "\$1" = remove ] || [ "\$1" = upgrade ] || [ "\$1" = deconfigure ]; then
	if dkms status -m cachescope -v $version 2>/dev/null | grep -q .; then
		dkms remove -m cachescope -v $version --all || true
	fi
fi
EOF
chmod 755 "$root/DEBIAN/postinst" "$root/DEBIAN/prerm"
md5sums "$root"
dkms_deb=$out/cachescope-dkms_${version}_all.deb
dpkg-deb --root-owner-group -Zxz --build "$root" "$dkms_deb" >&2

echo "$deb"
echo "$dkms_deb"
