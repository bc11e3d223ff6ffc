#!/usr/bin/env bash
# Boots Debian's kernel under QEMU with TCG with a cachescope binary (and the kernel module,
# built against that kernel's headers with W=1, warnings are errors) in a busybox initramfs,
# and runs GUEST_SCRIPT there as /init.
#
#   scripts/guest-qemu.sh CACHESCOPE_BINARY OUTDIR [GUEST_SCRIPT]
#
# GUEST_SCRIPT: kmod/test/guest.sh by default, kmod/test/bench.sh for scripts/bench-kmod.sh,
# tools/rdt-qemu/guest/*.sh on the RDT machine. The environment chooses the machine:
#   CACHESCOPE_QEMU          the QEMU binary (default qemu-system-x86_64; the RDT machine's is
#                            the path tools/rdt-qemu/build.sh prints)
#   CACHESCOPE_QEMU_MACHINE  CPU, topology and devices (default "-cpu max -smp 2"), e.g.
#                            "-cpu EPYC-Rome -smp 2,sockets=2 -device rdt,llc-size=4M"
#   CACHESCOPE_QEMU_TCG      options for -accel tcg, e.g. ",thread=single" (one host thread
#                            for every vCPU; kmod/README.md says when that matters)
#   CACHESCOPE_QEMU_ICOUNT   -icount's options, e.g. "shift=3,sleep=off": the guest's clock
#                            counts instructions (8 ns each) and skips idle time, and one host
#                            thread runs every vCPU (default "off": the host's clock, a host
#                            thread per vCPU)
#   CACHESCOPE_QEMU_APPEND   more kernel parameters; key=value ones unknown to the kernel reach
#                            /init as environment variables
#   CACHESCOPE_QEMU_MITIGATIONS=on  the kernel's CPU-vulnerability mitigations as it chooses
#                            them (default: mitigations=off; see below)
#   CACHESCOPE_QEMU_EXTRA    more programs for the guest's /bin ("path ...")
#   CACHESCOPE_QEMU_TREE     directories copied as they are into the guest's root ("dir ..."):
#                            programs that bring their own libraries (scripts/debian-crun.sh)
#   CACHESCOPE_GUEST_KMOD=0  no module (the build takes a while); =PATH: that module, built
#                            elsewhere (the DKMS package's, scripts/package-check.sh)
#   CACHESCOPE_QEMU_CHECKS   several checks in one boot: a file of lines "NAME SCRIPT
#                            [KEY=VALUE ...]" (SCRIPT a path from the repository's root);
#                            scripts/lib/guest-checks.sh is then /init and runs them in turn,
#                            and OUTDIR/checks/NAME gets each one's console, rows and report
#   CACHESCOPE_GUEST_KERNEL  another Debian kernel than this release's default, as
#                            scripts/debian-kernel.sh names them: a suite (unstable: its newest)
#                            or [SUITE/]META for linux-image-META (rt-amd64, 6.12-amd64, ...);
#                            "debug": the debug kernel scripts/debug-kernel.sh builds
# Leaves OUTDIR/console.log (the guest's serial console) and OUTDIR/rows.jsonl (a recording the
# guest printed between CS-ROWS-BEGIN and CS-ROWS-END, gzip and base64) and OUTDIR/report.json
# (the same between CS-REPORT-BEGIN and CS-REPORT-END). The kernel image is
# downloaded once by scripts/debian-kernel.sh, the module built by scripts/kmod-build.sh. Needs
# qemu-system-x86, busybox-static, cpio, debootstrap and linux-headers-amd64 (scripts/setup.sh
# installs them).
set -euo pipefail
cd "$(dirname "$0")/.."
prepared=$(date +%s)
bin=$(realpath "${1:?usage: guest-qemu.sh CACHESCOPE_BINARY OUTDIR [GUEST_SCRIPT]}")
out=${2:?usage: guest-qemu.sh CACHESCOPE_BINARY OUTDIR [GUEST_SCRIPT]}
guest=${3:-kmod/test/guest.sh}
mkdir -p "$out"
out=$(realpath "$out")

# The kernel: this release's (linux-headers-amd64's) or another Debian kernel, named as
# scripts/debian-kernel.sh takes it (unstable, rt-amd64, 6.12-amd64, unstable/rt-amd64, ...).
kernel=${CACHESCOPE_GUEST_KERNEL:-}
if [ "$kernel" = debug ]; then
  vmlinuz=$(scripts/debug-kernel.sh | tail -1)
else
  vmlinuz=$(scripts/debian-kernel.sh ${kernel:+"$kernel"} | tail -1)
fi

# What QEMU boots: the kernel unpacked, entered by its PVH note (6 s less a boot under TCG;
# scripts/lib/pvh-kernel.py), or the bzImage where it has no such note (the debug kernel).
boot_kernel=$(scripts/lib/pvh-kernel.py "$vmlinuz")

# The module, built for that kernel (scripts/kmod-build.sh: W=1, warnings are errors).
rm -f "$out/cachescope.ko"
case ${CACHESCOPE_GUEST_KMOD:-1} in
  0) ;;
  1) scripts/kmod-build.sh "$kernel" "$out" >/dev/null ;;
  *) cp "$CACHESCOPE_GUEST_KMOD" "$out/cachescope.ko" ;;
esac

# The initramfs: busybox, the binary without debug info, the libraries it loads, the module.
root=$out/root
rm -rf "$root" && mkdir -p "$root"/{bin,proc,sys,dev,tmp}
cp /bin/busybox "$root/bin/busybox"
for a in $(/bin/busybox --list); do [ -e "$root/bin/$a" ] || ln -s busybox "$root/bin/$a"; done
objcopy --strip-debug "$bin" "$root/bin/cachescope"
for extra in ${CACHESCOPE_QEMU_EXTRA:-}; do objcopy --strip-debug "$extra" "$root/bin/$(basename "$extra")"; done
for lib in $(ldd "$bin" ${CACHESCOPE_QEMU_EXTRA:-} 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// && $1 !~ /:$/ { print $1 }' | sort -u); do
  mkdir -p "$root$(dirname "$lib")"
  cp -L "$lib" "$root$lib"
done
for tree in ${CACHESCOPE_QEMU_TREE:-}; do cp -a "$tree/." "$root/"; done
[ -e "$out/cachescope.ko" ] && cp "$out/cachescope.ko" "$root/cachescope.ko"
# The kernel's own modules scripts/debian-kernel.sh kept (msr.ko), in /modules.
mods=$(dirname "$vmlinuz")/modules-$(basename "$vmlinuz" | sed 's/^vmlinuz-//')
mkdir -p "$root/modules"
[ -d "$mods" ] && cp "$mods"/*.ko "$root/modules/" 2>/dev/null || true
mkdir -p "$root/lib" && cp scripts/lib/guest-init.sh "$root/lib/init.sh"
if [ -n "${CACHESCOPE_QEMU_CHECKS:-}" ]; then
  mkdir -p "$root/checks"
  cp scripts/lib/guest-checks.sh "$root/init"
  cp "$CACHESCOPE_QEMU_CHECKS" "$root/checks.list"
  while read -r _ script _; do cp "$script" "$root/checks/$(basename "$script")"; done <"$CACHESCOPE_QEMU_CHECKS"
  sed -i 's|^\([^ ]*\) [^ ]*/\([^/ ]*\)|\1 \2|' "$root/checks.list"
  guest="checks $(cut -d" " -f1 "$CACHESCOPE_QEMU_CHECKS" | paste -sd,)"
else
  cp "$guest" "$root/init"
fi
chmod +x "$root/init"
(cd "$root" && find . | /bin/busybox cpio -o -H newc 2>/dev/null) >"$out/initramfs.cpio"

# TCG: slow and its 1 ms timers are irregular; the tests check accounting, not timing.
# noirqdebug: the guests print a lot on the serial port (a recording, in base64) while their CPUs
# are busy. On a loaded host, the UART's threaded handler (PREEMPT_RT, and forced threading)
# often finds its work done by the time it runs and answers "not mine"; the kernel's
# spurious-interrupt check then disables IRQ 4 ("irq 4: nobody cared"), and every later write
# to the console waits forever for an interrupt that cannot come. The guest looks hung with
# both CPUs idle. This was the module test's rare hang (CI: after CPU hotplug, around a
# session's end); a guest printing 600 KB blocks of base64 beside two busy loops lost IRQ 4
# within 16 s, twice in two runs, and with noirqdebug printed 4.8 MB, twice in two runs.
# Only RT kernels thread the UART's handler; the generic 6.1 kept its IRQ under the same
# stress, and the others keep the spurious-interrupt check.
irqdebug=
case $kernel in *rt*) irqdebug=noirqdebug ;; esac
# mitigations=off: under TCG page-table isolation (Intel models) reloads CR3 at every kernel
# entry and exit, and each reload flushes TCG's software TLB; the return thunks and barriers
# of the others cost more instructions. None of it guards anything in a throwaway guest, and
# nothing the tests check depends on it (the device, resctrl and the module see the same
# accesses).
mitigations=mitigations=off
[ "${CACHESCOPE_QEMU_MITIGATIONS:-}" = on ] && mitigations=
# cryptomgr.notests: the crypto API's self-tests of every algorithm built in, 6 s of a 13 s boot
# in the guest's clock (1 s of the host's); nothing here uses the kernel's crypto.

# -icount, where the caller asks for it (the RDT machine's tests: crates/cli/tests/common/rdt.rs
# says why). Not the default: the module's guests took twice as long under it (68 s against 37
# on the default kernel: one host thread for both vCPUs, and a CPU that waits for the other's
# answer to an IPI spins until the host thread turns to it), and Debian 12's QEMU 7.2 did not
# get past SeaBIOS in 300 s with two vCPUs.
icount=${CACHESCOPE_QEMU_ICOUNT:-off}
[ "$icount" = off ] && icount=

# A boot whose /init said nothing within a ceiling only a stalled vCPU reaches is booted once
# more (scripts/lib/qemu-boot.sh): the debug kernel (KASAN, lockdep) boots slowest.
boot_ceiling=${CACHESCOPE_QEMU_BOOT_TIMEOUT:-240}
[ "$kernel" = debug ] && boot_ceiling=${CACHESCOPE_QEMU_BOOT_TIMEOUT:-600}
# shellcheck source=scripts/lib/qemu-boot.sh
. scripts/lib/qemu-boot.sh
booted=$(date +%s)
# shellcheck disable=SC2086 # the machine arguments are words
# A ceiling only a hang reaches: three to six times the longest boot seen in CI.
ceiling=${CACHESCOPE_QEMU_TIMEOUT:-900}
qemu_boot guest-qemu "$out/console.log" "$ceiling" "$boot_ceiling" \
  "${CACHESCOPE_QEMU:-qemu-system-x86_64}" -accel "tcg${CACHESCOPE_QEMU_TCG:-}" \
  ${icount:+-icount "$icount"} \
  ${CACHESCOPE_QEMU_MACHINE:--cpu max -smp 2} -m 1024 \
  -kernel "$boot_kernel" -initrd "$out/initramfs.cpio" \
  -append "console=ttyS0 panic=-1 quiet loglevel=4 ${irqdebug:-} ${mitigations:-} cryptomgr.notests=1 cs_ceiling=$ceiling ${CACHESCOPE_QEMU_APPEND:-}" \
  -nographic -no-reboot -monitor none -nic none || rc=$?
# A guest that did not end well: the console's last lines, which hold what the kernel said
# (a guest whose serial output stopped reports only there), without the recordings' base64.
# QEMU exits 0 when the guest reboots (a panic, with panic=-1, and -no-reboot) before its script
# said CS-END (a CI run's 7.2 guest printed nothing at all so): that is not a good end either.
ended=0
grep -aq '^CS-END' "$out/console.log" && ended=1
# One line per boot for scripts/test.sh's closing table: seconds in QEMU, seconds preparing
# (kernel, module, initramfs), how it ended, what it was.
if [ -n "${CACHESCOPE_BOOT_LOG:-}" ]; then
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$(($(date +%s) - booted))" "prepared in $((booted - prepared)) s" \
    "$([ $ended = 1 ] && echo ended || echo "FAILED(qemu ${rc:-0})")$([ -e "$out/console.log.stalled" ] && echo ", a boot stalled")" "kernel=${kernel:-default}" \
    "$(basename "$guest")" "${CACHESCOPE_QEMU_MACHINE:--cpu max -smp 2}${icount:+ -icount $icount}" "${CACHESCOPE_QEMU_APPEND:-}" \
    >>"$CACHESCOPE_BOOT_LOG"
fi
if [ "${rc:-0}" -ne 0 ] || [ $ended = 0 ]; then
  [ "${rc:-0}" = 124 ] && rc="124 (its ceiling of $ceiling s reached)"
  echo "guest-qemu: qemu exited ${rc:-0}, the guest's script did not reach its end; the console's last lines:" >&2
  console_tail "$out/console.log" 30 guest-qemu
fi
# unpack CONSOLE DIR: DIR/rows.jsonl and DIR/report.json from what CONSOLE carries.
unpack() {
  console_block "$1" ROWS "$2/rows.jsonl" || true
  console_block "$1" REPORT "$2/report.json" || true
}
unpack "$out/console.log" "$out"
# Each check's part of the console, and what it carries, in OUTDIR/checks/NAME.
if [ -n "${CACHESCOPE_QEMU_CHECKS:-}" ]; then
  while read -r name _; do
    mkdir -p "$out/checks/$name"
    tr -d '\r' <"$out/console.log" | sed -n "/^CS-CHECK-BEGIN $name\$/,/^CS-CHECK-END $name /p" \
      >"$out/checks/$name/console.log"
    unpack "$out/checks/$name/console.log" "$out/checks/$name"
  done <"$CACHESCOPE_QEMU_CHECKS"
fi
grep -a "^CS-\|^rdt-stats: " "$out/console.log" | grep -av "^CS-ROWS\|^CS-REPORT\|^CS-END" | tr -d "\r" || true
# A script that did not reach its end failed, whatever QEMU said.
[ $ended = 1 ]
