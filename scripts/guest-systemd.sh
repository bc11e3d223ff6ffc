#!/usr/bin/env bash
# Boots Debian's systemd as PID 1 under QEMU/TCG (this release's kernel) from an initramfs of a
# Debian root of this release, and runs scripts/lib/systemd-check.sh there as a unit: it
# installs DEB with dpkg, starts a container and the packaged unit, reads /metrics, stops the
# unit and checks the files it left (issue 43, item 7).
#
#   scripts/guest-systemd.sh DEB OUTDIR
#
# CACHESCOPE_QEMU and CACHESCOPE_QEMU_MACHINE choose the machine as for guest-qemu.sh (the RDT
# machine's QEMU and device give the guest resctrl; say so with cs_resctrl=1 in
# CACHESCOPE_QEMU_APPEND, which adds kernel parameters). Leaves OUTDIR/console.log and
# OUTDIR/report.json (the guest's `cachescope report --json`), prints the CS- lines, and fails
# when the check did not reach its end. The root (debootstrap, minbase with systemd and the
# package's dependencies) and its cpio are made once, in the roots cache, keyed by what they
# hold.
set -euo pipefail
cd "$(dirname "$0")/.."
deb=$(realpath "${1:?usage: guest-systemd.sh DEB OUTDIR}")
out=${2:?usage: guest-systemd.sh DEB OUTDIR}
mkdir -p "$out" && out=$(realpath "$out")
prepared=$(date +%s)

suite=$(. /etc/os-release && echo "$VERSION_CODENAME")
# systemd and the package's Depends (dpkg -i in the guest has no archive to fetch from).
include="systemd,systemd-sysv,$(dpkg-deb -f "$deb" Depends | sed 's/ *([^)]*)//g; s/ //g')"
key=$(printf '%s' "$include" | sha256sum | cut -c1-8)
roots=${CACHESCOPE_ROOT_CACHE:-/var/cache/cachescope/roots}
root=$roots/systemd-$suite-$key
# shellcheck source=scripts/lib/debootstrap.sh
. scripts/lib/debootstrap.sh
debootstrap_once "$root" "$suite" "$include" guest-systemd trim
# The root as one uncompressed cpio (TCG takes longer to decompress than to load), made once.
if [ ! -e "$root.cpio" ]; then
  (cd "$root" && find . ! -name .complete | /bin/busybox cpio -o -H newc 2>/dev/null) >"$root.cpio.part"
  mv "$root.cpio.part" "$root.cpio"
fi
exec 9>&-

# What this run adds, in a second archive the kernel unpacks over the first: systemd as /init,
# the package, busybox (for wget), the check and its unit.
extra=$out/extra
rm -rf "$extra" && mkdir -p "$extra/usr/local/bin" "$extra/etc/systemd/system/multi-user.target.wants"
ln -s /lib/systemd/systemd "$extra/init"
cp "$deb" "$extra/cachescope.deb"
cp /bin/busybox "$extra/usr/local/bin/busybox"
install -m 755 scripts/lib/systemd-check.sh "$extra/usr/local/bin/cs-check"
cat >"$extra/etc/systemd/system/cs-check.service" <<'EOF'
[Unit]
Description=cachescope's check of its packaged unit
After=multi-user.target
[Service]
Type=oneshot
ExecStart=/usr/local/bin/cs-check
StandardOutput=tty
StandardError=tty
TTYPath=/dev/ttyS0
[Install]
WantedBy=multi-user.target
EOF
ln -s ../cs-check.service "$extra/etc/systemd/system/multi-user.target.wants/cs-check.service"
# A machine id of its own (minbase leaves the file empty: systemd would make a transient one
# and say so on every boot).
printf '%s\n' "$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')" >"$extra/etc/machine-id"
mkdir -p "$extra/etc"
(cd "$extra" && find . | /bin/busybox cpio -o -H newc 2>/dev/null) >"$out/extra.cpio"
cat "$root.cpio" "$out/extra.cpio" >"$out/initramfs.cpio"
rm -f "$out/extra.cpio"

vmlinuz=$(scripts/debian-kernel.sh | tail -1)
# Entered by its PVH note, as guest-qemu.sh boots it (scripts/lib/pvh-kernel.py).
vmlinuz=$(scripts/lib/pvh-kernel.py "$vmlinuz")
booted=$(date +%s)
rc=0
# The serial console is the check's (no getty on it); mitigations and the crypto self-tests off,
# and -icount only if asked, as guest-qemu.sh says why.
icount=${CACHESCOPE_QEMU_ICOUNT:-off}
[ "$icount" = off ] && icount=
# A boot whose check said nothing within 300 s is booted once more (scripts/lib/qemu-boot.sh).
# shellcheck source=scripts/lib/qemu-boot.sh
. scripts/lib/qemu-boot.sh
# shellcheck disable=SC2086 # the machine arguments are words
# A ceiling only a hang reaches: three to six times the longest boot seen in CI.
ceiling=${CACHESCOPE_QEMU_TIMEOUT:-1500}
qemu_boot guest-systemd "$out/console.log" "$ceiling" "${CACHESCOPE_QEMU_BOOT_TIMEOUT:-300}" \
  "${CACHESCOPE_QEMU:-qemu-system-x86_64}" -accel tcg \
  ${icount:+-icount "$icount"} \
  ${CACHESCOPE_QEMU_MACHINE:--cpu max -smp 2} -m 1536 \
  -kernel "$vmlinuz" -initrd "$out/initramfs.cpio" \
  -append "console=ttyS0 panic=-1 loglevel=4 mitigations=off cryptomgr.notests=1 systemd.mask=serial-getty@ttyS0.service systemd.show_status=0 ${CACHESCOPE_QEMU_APPEND:-}" \
  -nographic -no-reboot -monitor none -nic none || rc=$?
rm -f "$out/initramfs.cpio"
ended=0
grep -aq '^CS-END rc=0' "$out/console.log" && ended=1
if [ -n "${CACHESCOPE_BOOT_LOG:-}" ]; then
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$(($(date +%s) - booted))" "prepared in $((booted - prepared)) s" \
    "$([ $ended = 1 ] && echo ended || echo "FAILED(qemu $rc)")$([ -e "$out/console.log.stalled" ] && echo ", a boot stalled")" "kernel=default" "systemd-check.sh" \
    "${CACHESCOPE_QEMU_MACHINE:--cpu max -smp 2}${icount:+ -icount $icount}" "${CACHESCOPE_QEMU_APPEND:-}" >>"$CACHESCOPE_BOOT_LOG"
fi
if [ $ended = 0 ]; then
  [ "$rc" = 124 ] && rc="124 (its ceiling of $ceiling s reached)"
  echo "guest-systemd: qemu exited $rc, the check did not end well; the console's last lines:" >&2
  console_tail "$out/console.log" 40 guest-systemd
fi
console_block "$out/console.log" REPORT "$out/report.json" || true
tr -d '\r' <"$out/console.log" | grep -a "^CS-" | grep -av "^CS-REPORT" || true
[ $ended = 1 ]
