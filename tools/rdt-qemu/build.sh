#!/usr/bin/env bash
# Builds (or finds) the RDT machine: QEMU from Debian's source package with patches/*.patch
# (the `rdt` device: CPUID, the monitoring MSRs) and the cache-model plugin (plugin/), and
# prints the absolute path of a qemu-system-x86_64 wrapper as the last line of its output.
#
#   tools/rdt-qemu/build.sh        # then: "$(tools/rdt-qemu/build.sh | tail -1)" ... -device rdt
#
# The wrapper adds what the binary needs: the firmware directories of Debian's QEMU packages
# (-L) and, when the command line has `-device rdt`, the plugin. QEMU is built once per machine
# under ${CACHESCOPE_RDT_CACHE:-/var/cache/cachescope/rdt-qemu}, keyed by the source package's
# version, the patches and the configure flags; the plugin is built by cargo and copied there
# keyed by the hash of its sources. Installs its build dependencies with apt-get.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
cache=${CACHESCOPE_RDT_CACHE:-/var/cache/cachescope/rdt-qemu}
# The source package: Debian's newest QEMU whose source is served (11.x is listed but not).
QEMU_VERSION=10.2.2
QEMU_DEB_VERSION=1:10.2.2+ds-1
QEMU_ORIG_SHA256=be05230fe47a6937cd29f28f562932c8125f9c93c2a82c625198f7a4aa601dfb
QEMU_SUITE=unstable
# Only the x86_64 system emulator, with TCG and plugins.
CONFIGURE_FLAGS=(--target-list=x86_64-softmmu --enable-tcg --enable-plugins --disable-kvm
  --disable-xen --disable-docs --disable-tools --disable-install-blobs --disable-werror
  --disable-gtk --disable-sdl --disable-vnc --disable-opengl --disable-spice --disable-curses
  --disable-libusb --disable-usb-redir --disable-slirp --disable-rust)

say() { echo "rdt-qemu: $*" >&2; }
hash_of() { cat "$@" | sha256sum | cut -c1-16; }

# One build.sh at a time per cache (tests ask concurrently): the second waits, then finds what
# the first installed and built (two apt-get runs at once fail on dpkg's lock).
mkdir -p "$cache"
exec 9>"$cache/.lock"
flock 9

# Build dependencies and the firmware the wrapper points at.
need=()
for entry in gcc:gcc ninja:ninja-build flex:flex bison:bison dtc:device-tree-compiler \
  pkg-config:pkg-config bzip2:bzip2 xz:xz-utils; do
  command -v "${entry%%:*}" >/dev/null 2>&1 || need+=("${entry#*:}")
done
for entry in /usr/include/libfdt.h:libfdt-dev /usr/include/glib-2.0/glib.h:libglib2.0-dev \
  /usr/include/pixman-1/pixman.h:libpixman-1-dev /usr/share/seabios/bios-256k.bin:seabios \
  /usr/share/qemu/linuxboot_dma.bin:qemu-system-data; do
  [ -e "${entry%%:*}" ] || need+=("${entry#*:}")
done
if ((${#need[@]})); then
  say "installing ${need[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >&2
fi

key=$QEMU_VERSION-$( (cat "$here"/patches/*.patch; echo "$QEMU_DEB_VERSION ${CONFIGURE_FLAGS[*]}") | sha256sum | cut -c1-16)
qemu_dir=$cache/qemu-$key
qemu_bin=$qemu_dir/qemu-system-x86_64
if [ ! -x "$qemu_bin" ]; then
  started=$(date +%s)
  work=$cache/build-$key
  rm -rf "$work" && mkdir -p "$work"
  # deb-src of the suite, from the mirror this machine's apt already uses.
  # shellcheck source=scripts/lib/apt-suite.sh
  . "$root/scripts/lib/apt-suite.sh"
  apt_suite "$work/apt" "$QEMU_SUITE" deb-src
  say "fetching QEMU $QEMU_DEB_VERSION source ($QEMU_SUITE)"
  (cd "$work" && apt-get "${APT_SUITE_OPTS[@]}" source --download-only -qq "qemu=$QEMU_DEB_VERSION" >&2)
  orig=$work/qemu_$QEMU_VERSION+ds.orig.tar.xz
  echo "$QEMU_ORIG_SHA256  $orig" | sha256sum -c --quiet - >&2 \
    || { say "$orig does not have the expected SHA-256"; exit 1; }
  tar -xf "$orig" -C "$work"
  src=$work/qemu-$QEMU_VERSION
  for p in "$here"/patches/*.patch; do patch -s -d "$src" -p1 <"$p"; done
  # Meson and pycotap from PyPI (the +ds tarball strips QEMU's bundled wheels).
  python3 -m venv "$work/venv"
  "$work/venv/bin/pip" install -q meson==1.9.0 pycotap==1.3.1 >&2
  mkdir -p "$src/build"
  (cd "$src/build" && ../configure --python="$work/venv/bin/python3" "${CONFIGURE_FLAGS[@]}" \
    >"$work/configure.log" 2>&1) \
    || { tail -30 "$work/configure.log" >&2; say "configure failed ($work/configure.log)"; exit 1; }
  say "building qemu-system-x86_64 (a few minutes on 2 cores)"
  ninja -C "$src/build" -j"$(nproc)" qemu-system-x86_64 >"$work/ninja.log" 2>&1 \
    || { tail -30 "$work/ninja.log" >&2; say "build failed ($work/ninja.log)"; exit 1; }
  rm -rf "$qemu_dir.part" && mkdir -p "$qemu_dir.part"
  cp "$src/build/qemu-system-x86_64" "$qemu_dir.part/"
  rm -rf "$qemu_dir" && mv "$qemu_dir.part" "$qemu_dir"
  rm -rf "$work"
  say "built QEMU $QEMU_VERSION with the rdt device in $(($(date +%s) - started)) s"
fi

# The plugin: cargo rebuilds it when its sources change; the copy is keyed by them.
(cd "$root" && cargo build --release --locked -q -p cachescope-rdt-plugin >&2)
plugin_src=$(hash_of "$here"/plugin/Cargo.toml $(find "$here/plugin/src" -name '*.rs' | sort))
plugin=$cache/plugin-$plugin_src.so
if [ ! -s "$plugin" ]; then
  cp "${CARGO_TARGET_DIR:-$root/target}/release/libcachescope_rdt_plugin.so" "$plugin.part"
  mv "$plugin.part" "$plugin"
fi

wrapper=$cache/rdt-$key-$plugin_src/qemu-system-x86_64
if [ ! -x "$wrapper" ]; then
  mkdir -p "$(dirname "$wrapper")"
  cat >"$wrapper.part" <<EOF
#!/bin/sh
# The RDT machine (cachescope tools/rdt-qemu): QEMU $QEMU_VERSION with the rdt device; the
# cache-model plugin is loaded when the command line has -device rdt.
for a in "\$@"; do
  case "\$a" in
    rdt|rdt,*) exec "$qemu_bin" -L /usr/share/qemu -L /usr/share/seabios -plugin "$plugin" "\$@" ;;
  esac
done
exec "$qemu_bin" -L /usr/share/qemu -L /usr/share/seabios "\$@"
EOF
  chmod +x "$wrapper.part" && mv "$wrapper.part" "$wrapper"
fi
echo "$wrapper"
