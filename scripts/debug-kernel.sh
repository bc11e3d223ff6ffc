#!/usr/bin/env bash
# Builds a debug kernel for the module's guest test and prints its image's path:
#   scripts/debug-kernel.sh
# From Debian's source package of this release's kernel (apt-get source linux, through a
# private deb-src configuration: nothing is installed), with a small configuration for a QEMU
# guest (tinyconfig plus what the guest and the module need) and the checkers the module must
# pass: lockdep (PROVE_LOCKING, PROVE_RCU), the atomic-sleep checker, KASAN, timer debug
# objects and kmemleak. Built once with this machine's compiler, cached in
# ${CACHESCOPE_KERNEL_CACHE:-/var/cache/cachescope/kernels}/debug-KEY, KEY a hash of the source
# version and the configuration below; the tree is kept (without its objects) so the module
# can be built against it: scripts/kmod-build.sh debug. OUT/build.log keeps make's output.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cache=${CACHESCOPE_KERNEL_CACHE:-/var/cache/cachescope/kernels}
mkdir -p "$cache"

# What the guest needs on top of tinyconfig (initramfs, serial console, cgroup v2, modules,
# tracepoints, CPU hotplug, ACPI to power off), then the checkers; kmemleak scans when the
# guest test asks (its own scan would report the kernel's boot-time objects at a random time).
# Each line must hold in the final .config: a dependency that drops one fails the build
# instead of hiding it.
FRAGMENT='
CONFIG_64BIT=y
CONFIG_SMP=y
CONFIG_NR_CPUS=8
CONFIG_HOTPLUG_CPU=y
CONFIG_CPU_SUP_INTEL=y
CONFIG_CPU_SUP_AMD=y
CONFIG_X86_MSR=y
CONFIG_PRINTK=y
CONFIG_PRINTK_TIME=y
CONFIG_SLUB=y
CONFIG_BUG=y
CONFIG_TTY=y
CONFIG_SERIAL_8250=y
CONFIG_SERIAL_8250_CONSOLE=y
CONFIG_BLK_DEV_INITRD=y
CONFIG_BINFMT_ELF=y
CONFIG_BINFMT_SCRIPT=y
CONFIG_PROC_FS=y
CONFIG_SYSFS=y
CONFIG_DEVTMPFS=y
CONFIG_TMPFS=y
CONFIG_SHMEM=y
CONFIG_FUTEX=y
CONFIG_EPOLL=y
CONFIG_SIGNALFD=y
CONFIG_TIMERFD=y
CONFIG_EVENTFD=y
CONFIG_INOTIFY_USER=y
CONFIG_POSIX_TIMERS=y
CONFIG_MULTIUSER=y
CONFIG_HIGH_RES_TIMERS=y
CONFIG_PERF_EVENTS=y
CONFIG_MODULES=y
CONFIG_MODULE_UNLOAD=y
CONFIG_CGROUPS=y
CONFIG_CGROUP_SCHED=y
CONFIG_FAIR_GROUP_SCHED=y
CONFIG_FTRACE=y
CONFIG_ENABLE_DEFAULT_TRACERS=y
CONFIG_TRACEPOINTS=y
CONFIG_PCI=y
CONFIG_ACPI=y
CONFIG_KALLSYMS=y
CONFIG_DEBUG_FS=y
CONFIG_DEBUG_KERNEL=y
CONFIG_PROVE_LOCKING=y
CONFIG_PROVE_RCU=y
CONFIG_DEBUG_ATOMIC_SLEEP=y
CONFIG_KASAN=y
CONFIG_KASAN_GENERIC=y
CONFIG_KASAN_OUTLINE=y
CONFIG_DEBUG_OBJECTS=y
CONFIG_DEBUG_OBJECTS_TIMERS=y
CONFIG_DEBUG_KMEMLEAK=y
# CONFIG_DEBUG_KMEMLEAK_AUTO_SCAN is not set
# CONFIG_MODULE_SIG is not set
'

# Debian's source package of this release's kernel, through a private deb-src configuration.
suite=$(. /etc/os-release && echo "$VERSION_CODENAME")
# shellcheck source=scripts/lib/apt-suite.sh
. "$here/lib/apt-suite.sh"
exec 9>"$cache/.debug-lock"
flock 9
apt_suite "$cache/apt-src-$suite" "$suite" deb-src
version=$(apt-cache "${APT_SUITE_OPTS[@]}" showsrc linux 2>/dev/null | sed -n 's/^Version: //p' | sort -V | tail -1)
[ -n "$version" ] || { echo "debug-kernel: no source package linux in $suite" >&2; exit 1; }
key=$( (echo "$version"; echo "$FRAGMENT") | md5sum | cut -c1-12)
dir=$cache/debug-$key
if [ -e "$dir/.complete" ]; then
  echo "$dir/bzImage"
  exit 0
fi
rm -rf "$dir" && mkdir -p "$dir"
started=$(date +%s)
(cd "$dir" && apt-get "${APT_SUITE_OPTS[@]}" source -qq --download-only "linux=$version" >&2)
dsc=$(ls "$dir"/linux_*.dsc)
dpkg-source --no-check -x "$dsc" "$dir/src" >/dev/null
rm -f "$dir"/linux_*
src=$dir/src
log=$dir/build.log
printf '%s\n' "$FRAGMENT" >"$dir/fragment.config"
{
  make -C "$src" ARCH=x86_64 tinyconfig
  (cd "$src" && scripts/kconfig/merge_config.sh -m .config "$dir/fragment.config")
  make -C "$src" ARCH=x86_64 olddefconfig
} >"$log" 2>&1
missing=$(grep -E '^(# )?CONFIG_' "$dir/fragment.config" | while read -r want; do
  grep -qx "$want" "$src/.config" || echo "$want"
done)
if [ -n "$missing" ]; then
  echo "debug-kernel: the configuration dropped: $missing" >&2
  exit 1
fi
# All: the image, and modpost's Module.symvers that an external module links against.
if ! make -C "$src" ARCH=x86_64 -j"$(nproc)" all >>"$log" 2>&1; then
  tail -30 "$log" >&2
  echo "debug-kernel: the build failed ($log)" >&2
  exit 1
fi
cp "$src/arch/x86/boot/bzImage" "$dir/bzImage"
# What building a module against the tree needs stays (headers, .config, Module.symvers,
# scripts/ and objtool); the kernel's own objects go.
find "$src" -name '*.o' -not -path "$src/scripts/*" -not -path "$src/tools/*" -delete
rm -f "$src/vmlinux" "$src/vmlinux.a" "$src/.tmp_vmlinux"*
echo "debug-kernel: built $version ($key) in $(($(date +%s) - started)) s" >&2
touch "$dir/.complete"
echo "$dir/bzImage"
