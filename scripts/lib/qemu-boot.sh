# shellcheck shell=bash
# qemu_boot NAME CONSOLE CEILING BOOT_CEILING QEMU ARGS...: runs QEMU (its output to CONSOLE)
# under `timeout CEILING`, and boots it once more when the guest's user space printed no
# "CS-BOOT" line within BOOT_CEILING seconds. TCG on 2 busy host CPUs now and then stalls a
# vCPU's timer early in the boot (the console then says "rcu_preempt kthread timer wakeup
# didn't happen" every 21 s and nothing else: seen on the RDT machine's 6.1 under -icount and in
# the systemd guest with a thread per vCPU); waiting for the whole ceiling cost up to 10
# minutes, and the same guest booted again passes. The stalled boot's console is kept as
# CONSOLE.stalled (removed first, so that it tells of this run) and its end printed on stderr.
# Returns QEMU's status (timeout's 124 at the ceiling), or 75 when the second boot stalled too.
# Sourced by scripts/guest-qemu.sh and scripts/guest-systemd.sh; the guests' first line (scripts/lib/guest-init.sh,
# scripts/lib/systemd-check.sh) is the CS-BOOT line.
qemu_boot() {
  local name=$1 console=$2 ceiling=$3 boot=$4
  shift 4
  local attempt rc next
  rm -f "$console.stalled"
  for attempt in 1 2; do
    rc=0
    qemu_watched "$console" "$ceiling" "$boot" "$@" || rc=$?
    [ "$rc" = 75 ] || return "$rc"
    next="booting again"
    [ "$attempt" = 2 ] && next="giving up"
    echo "$name: boot $attempt reached no user space in $boot s (a stalled vCPU?); $next; the console's last lines:" >&2
    tr -d '\r' <"$console" | tail -12 | sed "s/^/$name:   /" >&2
    cp "$console" "$console.stalled"
  done
  return 75
}

# qemu_watched CONSOLE CEILING BOOT_CEILING QEMU ARGS...: one boot, as above.
qemu_watched() {
  local console=$1 ceiling=$2 boot=$3
  shift 3
  : >"$console"
  timeout "$ceiling" "$@" </dev/null >"$console" 2>&1 &
  local pid=$! waited=0 booted=0 rc=0
  while kill -0 "$pid" 2>/dev/null; do
    if [ $booted = 0 ]; then
      if grep -aq 'CS-BOOT' "$console"; then
        booted=1
      elif [ $waited -ge "$boot" ]; then
        # timeout passes the signal on to QEMU, which exits.
        kill -TERM "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
        return 75
      fi
    fi
    sleep 1
    waited=$((waited + 1))
  done
  wait "$pid" || rc=$?
  return $rc
}

# console_block CONSOLE MARK OUT: writes to OUT what CONSOLE carries between CS-MARK-BEGIN and
# CS-MARK-END (gzip in base64); fails when it carries none whole (gunzip's status). Only
# base64's own lines count: the kernel's messages share the console (a CI run's kmod guest had
# its watchdog's report land inside the recording, which then ended mid-row). Also run by the
# host-side guests of crates/cli/tests/common/rdt.rs.
console_block() {
  tr -d '\r' <"$1" | sed -n "/^CS-$2-BEGIN/,/^CS-$2-END/p" | grep -a '^[A-Za-z0-9+/]\{1,\}=*$' \
    | base64 -d 2>/dev/null | gunzip >"$3" 2>/dev/null
}

# console_tail CONSOLE LINES NAME: the console's last LINES lines on stderr, each after
# "NAME:   ", without the recordings' base64.
console_tail() {
  tr -d '\r' <"$1" | grep -av '^[A-Za-z0-9+/=]\{60,\}$' | tail -"$2" | sed "s/^/$3:   /" >&2
}
