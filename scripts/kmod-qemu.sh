#!/usr/bin/env bash
# Builds the kernel module against Debian's kernel headers (W=1, warnings are errors), boots
# that kernel under QEMU with TCG with the module and a cachescope binary in a busybox
# initramfs, and runs kmod/test/guest.sh there.
#
#   scripts/kmod-qemu.sh CACHESCOPE_BINARY OUTDIR [GUEST_SCRIPT]
#
# (GUEST_SCRIPT runs as /init: kmod/test/guest.sh by default, kmod/test/bench.sh for
# scripts/bench-kmod.sh.)
# Leaves OUTDIR/console.log (the guest's serial console) and OUTDIR/rows.jsonl (its
# recording). Debian's kernel image is downloaded once (apt-get download, never installed)
# into ${CACHESCOPE_KMOD_CACHE:-target/kmod-qemu}. Needs qemu-system-x86, busybox-static,
# cpio and linux-headers-amd64 (scripts/setup.sh installs them).
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$(realpath "${1:?usage: kmod-qemu.sh CACHESCOPE_BINARY OUTDIR [GUEST_SCRIPT]}")
out=${2:?usage: kmod-qemu.sh CACHESCOPE_BINARY OUTDIR [GUEST_SCRIPT]}
guest=${3:-kmod/test/guest.sh}
mkdir -p "$out"
out=$(realpath "$out")

# The kernel linux-headers-amd64 points to: its headers build the module, its image boots.
kver=$(dpkg-query -W -f='${Depends}' linux-headers-amd64 | sed -n 's/^linux-headers-\([^ ,]*\).*/\1/p')
kdir=/usr/src/linux-headers-$kver
[ -d "$kdir" ] || { echo "kmod-qemu: $kdir missing (apt-get install linux-headers-amd64)" >&2; exit 1; }
cache=${CACHESCOPE_KMOD_CACHE:-target/kmod-qemu}
mkdir -p "$cache"
vmlinuz=$(realpath "$cache")/vmlinuz-$kver
if [ ! -s "$vmlinuz" ]; then
  tmp=$(mktemp -d)
  (cd "$tmp" && apt-get download -q "linux-image-$kver" >/dev/null)
  dpkg-deb --fsys-tarfile "$tmp"/linux-image-"$kver"_*.deb | tar -xO "./boot/vmlinuz-$kver" >"$vmlinuz.part"
  mv "$vmlinuz.part" "$vmlinuz"
  rm -rf "$tmp"
fi

# The module, built out of the source tree.
rm -rf "$out/kbuild" && mkdir -p "$out/kbuild"
cp kmod/Makefile kmod/Kbuild kmod/*.c kmod/*.h "$out/kbuild/"
make -s -C "$out/kbuild" KDIR="$kdir" check >"$out/kbuild.log" 2>&1 || { cat "$out/kbuild.log" >&2; exit 1; }
if grep -E "warning:|error:" "$out/kbuild.log" >&2; then exit 1; fi

# The initramfs: busybox, the binary without debug info, the libraries it loads, the module.
root=$out/root
rm -rf "$root" && mkdir -p "$root"/{bin,proc,sys,dev,tmp}
cp /bin/busybox "$root/bin/busybox"
for a in $(/bin/busybox --list); do [ -e "$root/bin/$a" ] || ln -s busybox "$root/bin/$a"; done
objcopy --strip-debug "$bin" "$root/bin/cachescope"
# More programs for the guest (the benchmark): CACHESCOPE_QEMU_EXTRA="path ...".
for extra in ${CACHESCOPE_QEMU_EXTRA:-}; do objcopy --strip-debug "$extra" "$root/bin/$(basename "$extra")"; done
for lib in $(ldd "$bin" ${CACHESCOPE_QEMU_EXTRA:-} | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// && $1 !~ /:$/ { print $1 }' | sort -u); do
  mkdir -p "$root$(dirname "$lib")"
  cp -L "$lib" "$root$lib"
done
cp "$out/kbuild/cachescope.ko" "$root/cachescope.ko"
cp "$guest" "$root/init" && chmod +x "$root/init"
(cd "$root" && find . | /bin/busybox cpio -o -H newc 2>/dev/null) >"$out/initramfs.cpio"

# TCG: slow and its 1 ms timers are irregular; the test checks accounting, not timing.
timeout "${CACHESCOPE_QEMU_TIMEOUT:-300}" qemu-system-x86_64 -accel tcg -cpu max -m 1024 -smp 2 \
  -kernel "$vmlinuz" -initrd "$out/initramfs.cpio" -append 'console=ttyS0 panic=-1 quiet loglevel=4' \
  -nographic -no-reboot -monitor none </dev/null >"$out/console.log" 2>&1 || echo "kmod-qemu: qemu exited $?" >&2
tr -d '\r' <"$out/console.log" | sed -n '/^CS-ROWS-BEGIN/,/^CS-ROWS-END/p' | sed '1d;$d' | base64 -d 2>/dev/null \
  | gunzip >"$out/rows.jsonl" 2>/dev/null || true
grep -a "^CS-" "$out/console.log" | grep -av "^CS-ROWS" | tr -d '\r' || true
