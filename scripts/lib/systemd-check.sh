#!/bin/sh
# Runs in the guest scripts/guest-systemd.sh boots, as the unit cs-check.service, with Debian's
# systemd as PID 1: the administrator's path through the package. Installs /cachescope.deb
# with dpkg, starts a container (a docker-<id>.scope, as dockerd makes them) and
# `systemctl start cachescope`, reads /metrics, stops the unit and checks what it left:
#   CS-RESULT key=value ...   one line per step
#   CS-FAIL what              the first failure, with the unit's journal after it (CS-LOG)
#   CS-END rc=N               last; then the guest powers off
# cs_resctrl=1 (kernel parameter): the guest has resctrl (the RDT machine); the rows must then
# hold LLC occupancy from the resctrl backend.
# The check started: scripts/lib/qemu-boot.sh boots again a guest that never says so.
echo "CS-BOOT cs-check at $(cut -d' ' -f1 /proc/uptime) s"
say() { echo "CS-RESULT $*"; }
end() {
  echo "CS-END rc=$1"
  systemctl poweroff --no-block
  exit 0
}
fail() {
  echo "CS-FAIL $*"
  pid=$(systemctl show -p MainPID --value cachescope)
  if [ -n "$pid" ] && [ "$pid" != 0 ]; then
    grep resctrl "/proc/$pid/mountinfo" | sed 's/^/CS-LOG mount: /'
    find "/proc/$pid/root/sys/fs/resctrl/mon_groups" -maxdepth 1 2>&1 | head -20 | sed 's/^/CS-LOG group: /'
    busybox wget -q -O - http://127.0.0.1:9400/metrics 2>&1 | grep -v '^#' | grep -v 'container_id=' | sed 's/^/CS-LOG metric: /'
  fi
  systemctl status cachescope --no-pager 2>&1 | sed 's/^/CS-LOG /'
  journalctl -u cachescope --no-pager -o cat 2>&1 | tail -40 | sed 's/^/CS-LOG /'
  end 1
}
# wait_for SECONDS WHAT COMMAND...: until COMMAND succeeds; a hang, not a slow guest, reaches it.
wait_for() {
  n=$1 what=$2
  shift 2
  i=0
  until "$@" >/dev/null 2>&1; do
    i=$((i + 1))
    [ "$i" -le "$((n * 2))" ] || fail "waited ${n} s for $what"
    sleep 0.5
  done
}
resctrl=$(sed -n 's/.*cs_resctrl=\([01]\).*/\1/p' /proc/cmdline)

dpkg -i /cachescope.deb >/tmp/dpkg.log 2>&1 || fail "dpkg -i: $(tail -3 /tmp/dpkg.log | tr '\n' ' ')"
say installed=1 enabled="$(systemctl is-enabled cachescope 2>&1)"
# What the unit names must exist: its binary and its Documentation= file.
doc=$(systemctl show -p Documentation --value cachescope | sed 's|^file://||')
[ -s "$doc" ] || fail "Documentation= names $doc, which is not there"
say documentation=present

# A container as Docker's systemd driver makes it: a scope under system.slice.
id=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
systemd-run --quiet --unit "docker-$id" --scope sh -c 'while :; do :; done' &
wait_for 30 "the container's scope" test -d "/sys/fs/cgroup/system.slice/docker-$id.scope"

cachescope info 2>&1 | sed 's/^/CS-INFO /'
systemctl start cachescope || fail "systemctl start cachescope"
wait_for 60 "/metrics" busybox wget -q -O /tmp/metrics http://127.0.0.1:9400/metrics
# The container's first rows reach /metrics within a few flushes.
wait_for 60 "the container in /metrics" \
  sh -c "busybox wget -q -O /tmp/metrics http://127.0.0.1:9400/metrics && grep -q $id /tmp/metrics"
grep "$id" /tmp/metrics | sed 's/^/CS-METRIC /' | head -20
say active="$(systemctl is-active cachescope)" serves=1 container=1
if [ "$resctrl" = 1 ]; then
  wait_for 30 "the container's LLC occupancy in /metrics" \
    sh -c "busybox wget -q -O - http://127.0.0.1:9400/metrics | grep -q '^cachescope_llc_occupancy_bytes{.*$id'"
  say occupancy=1 modes="$(stat -c %a:%U /proc/$(systemctl show -p MainPID --value cachescope)/root/sys/fs/resctrl/mon_groups)"
fi
sleep 3

systemctl stop cachescope || fail "systemctl stop cachescope"
result=$(systemctl show -p Result --value cachescope)
status=$(systemctl show -p ExecMainStatus --value cachescope)
say stopped=1 result="$result" status="$status"
[ "$result" = success ] && [ "$status" = 0 ] || fail "stopped with result $result, status $status"
# Finished files only: Parquet, no partial file or journal left.
ls -la /var/lib/cachescope | sed 's/^/CS-LS /'
files=$(find /var/lib/cachescope -name '*.parquet' | wc -l)
partial=$(find /var/lib/cachescope -name '*.partial*' -o -name '*.journal' | wc -l)
mode=$(stat -c %a /var/lib/cachescope)
say parquet="$files" partial="$partial" dir_mode="$mode"
[ "$files" -ge 1 ] && [ "$partial" = 0 ] || fail "$files Parquet files, $partial partial ones"
cachescope report /var/lib/cachescope --json >/tmp/report.json 2>/tmp/report.err || fail "report: $(tail -2 /tmp/report.err)"
grep -q "$id" /tmp/report.json || fail "the report does not name the container"
say report=1 container_id="$id"
echo CS-REPORT-BEGIN
gzip -c /tmp/report.json | base64
echo CS-REPORT-END
end 0
