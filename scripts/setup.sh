#!/usr/bin/env bash
# Installs what building and testing cachescope needs, idempotently. Called by run.sh and
# test.sh, so a fresh machine needs nothing else. Root (or sudo) is needed only when a system
# package is missing.
#   scripts/setup.sh         everything the test suite uses (test.sh)
#   scripts/setup.sh build   only what building and running the binary need (run.sh)
set -euo pipefail
only_build=0
case "${1:-}" in
  build) only_build=1 ;;
  "") ;;
  *) echo "setup: unknown argument '$1' (none, or 'build')" >&2; exit 2 ;;
esac

# Debian packages the build needs (checked by the command each provides): "command:package".
APT_BUILD=(
  "clang:clang"        # compiles the BPF program (crates/bpf)
  "make:make"          # libbpf-sys builds the vendored libbpf
  "pkg-config:pkg-config"
)
# Files the build needs, checked by path: "path:package".
HEADERS_BUILD=(
  "/usr/include/libelf.h:libelf-dev"   # libbpf
  "/usr/include/zlib.h:zlib1g-dev"     # libbpf
  "/usr/include/linux/bpf.h:linux-libc-dev"
)
# And what only the tests need.
APT_NEEDS=(
  "dockerd:docker.io"  # real containers for the runtime-metadata tests (test.sh starts dockerd)
  "podman:podman"      # the same through Podman's Docker-compatible API
  "busybox:busybox-static"  # the root of the test image (docker import, no registry)
  "promtool:prometheus"  # checks /metrics, the rules and the dashboard's queries (deploy/)
  "systemd-analyze:systemd"  # verifies deploy/systemd/cachescope.service
  "qemu-system-x86_64:qemu-system-x86"  # boots Debian's kernel with the kernel module (kmod/)
  "chromium:chromium"  # renders report --html as a person sees it (crates/cli/tests/report_html.rs)
  "tesseract:tesseract-ocr"  # reads the rendered charts' titles and legends back
  "tmux:tmux"          # the live view as a person sees it, at 80, 100 and 160 columns
  "pqos:intel-cmt-cat"  # Intel's pqos: a reference reader on the RDT machine (tools/rdt-qemu)
  "perf:linux-perf"    # Linux's perf: the reference for the RDT machine's PMU (crates/cli/tests/rdt_pmu.rs)
  "debootstrap:debootstrap"  # build roots for the module on other kernels (scripts/kmod-build.sh)
  "lintian:lintian"    # checks the Debian packages (scripts/package-check.sh)
  "dpkg-shlibdeps:dpkg-dev"  # the binary package's dependencies (scripts/package.sh)
  "kubectl:kubernetes-client"  # renders deploy/kubernetes's kustomization (kubectl kustomize)
  "valgrind:valgrind"  # counts the hot path's instructions (crates/cli/tests/instructions.rs)
  "protoc:protobuf-compiler"  # the CRI's protos, for the pod test's CRI client (crates/cli/tests/kubernetes.rs)
  "zstd:zstd"          # unpacks Debian's newer kernels for QEMU's PVH boot (scripts/lib/pvh-kernel.py)
  "patchelf:patchelf"  # unstable's crun beside this release's libc, in the RDT guest (scripts/debian-crun.sh)
)
APT_HEADERS=(
  "/usr/share/tesseract-ocr/5/tessdata/eng.traineddata:tesseract-ocr-eng"
  "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf:fonts-dejavu-core"  # the report's font
)

if ((only_build)); then
  APT_NEEDS=() APT_HEADERS=()
fi
missing=()
# The kernel module's test builds it against the headers of the kernel the QEMU test boots
# (Debian's current one; its image is fetched by scripts/guest-qemu.sh, never installed).
if ((!only_build)); then
  dpkg-query -W -f='${Status}' linux-headers-amd64 2>/dev/null | grep -q "install ok installed" \
    || missing+=(linux-headers-amd64)
fi
for entry in "${APT_BUILD[@]}" "${APT_NEEDS[@]}"; do
  cmd=${entry%%:*}; pkg=${entry#*:}
  command -v "$cmd" >/dev/null 2>&1 || missing+=("$pkg")
done
for entry in "${HEADERS_BUILD[@]}" "${APT_HEADERS[@]}"; do
  path=${entry%%:*}; pkg=${entry#*:}
  [ -e "$path" ] || missing+=("$pkg")
done
if ((${#missing[@]})); then
  # What the wait is, up front: a fresh machine's first test run installs ~1.5 GB.
  if ((only_build)); then
    echo "setup: installing ${missing[*]} (apt-get: usually under a minute)" >&2
  else
    echo "setup: installing ${missing[*]} (apt-get: 2-6 minutes on a fresh machine, once)" >&2
  fi
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  # Another apt (unattended-upgrades on a fresh cloud VM) may hold the lock: wait for it,
  # saying so, rather than fail in a second.
  if command -v fuser >/dev/null && fuser /var/lib/dpkg/lock-frontend /var/lib/apt/lists/lock >/dev/null 2>&1; then
    echo "setup: another apt-get or dpkg is running; waiting up to 10 minutes for its lock" >&2
  fi
  lock=(-o DPkg::Lock::Timeout=600)
  $SUDO apt-get "${lock[@]}" update -qq
  $SUDO apt-get "${lock[@]}" install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if ! command -v cargo >/dev/null 2>&1; then
  echo "setup: cargo not found: install a Rust toolchain (https://rustup.rs) and re-run" >&2
  exit 1
fi
((only_build)) && exit 0
# Lints run in the test suite; rustup-managed toolchains may lack the components.
if command -v rustup >/dev/null 2>&1; then
  for comp in rustfmt clippy; do
    rustup component list --installed 2>/dev/null | grep -q "^$comp" || rustup component add "$comp" >&2
  done
fi

# From PyPI: the schema check of the Kubernetes manifests (kubectl's dry run needs an API
# server), and a local S3-compatible store for the upload tests.
PIP_NEEDS=("kubernetes-validate:kubernetes-validate==1.37.0" "moto_server:moto[server]==5.2.1")
for entry in "${PIP_NEEDS[@]}"; do
  cmd=${entry%%:*}; pkg=${entry#*:}
  if command -v python3 >/dev/null 2>&1 && ! command -v "$cmd" >/dev/null 2>&1; then
    echo "setup: installing $pkg (PyPI)" >&2
    python3 -m pip install -q "$pkg" >&2 || echo "setup: $pkg not installed; its tests skip" >&2
  fi
done
# Python modules (checked by import): DuckDB runs the README's queries in the test suite
# (crates/cli/tests/queries.rs); it needs pytz to return time-zoned timestamps.
PY_MODULES=("duckdb:duckdb==2.0.0" "pytz:pytz")
for entry in "${PY_MODULES[@]}"; do
  mod=${entry%%:*}; pkg=${entry#*:}
  if command -v python3 >/dev/null 2>&1 && ! python3 -c "import $mod" 2>/dev/null; then
    echo "setup: installing $pkg (PyPI)" >&2
    python3 -m pip install -q "$pkg" >&2 || echo "setup: $pkg not installed; its tests skip" >&2
  fi
done
