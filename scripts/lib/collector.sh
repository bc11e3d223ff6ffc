# shellcheck shell=bash
# The unvariance/collector baseline (https://github.com/unvariance/collector), pinned at one
# commit, built once and kept under COLLECTOR_CACHE (default /var/cache/cachescope/collector):
#
#   collector_build            builds it if needed; prints the binary's path on stdout
#   collector_run SECS OUTDIR  runs it as root for SECS seconds, writing under OUTDIR:
#                              metrics-*.parquet, collector.log, time.txt ("%e %U %S %M" of
#                              /usr/bin/time) and, with COLLECTOR_BPF_STATS=1,
#                              bpf_run_time_ns (see below)
#   collector_bpf_run_time_ns  the summed run_time_ns of the collector's loaded eBPF programs
#                              (counts only while kernel.bpf_stats_enabled=1)
#
# What the cache holds (github.com is not reachable from the bench machine, so the sources are
# kept there; a build fetches nothing from it):
#   src-COMMIT.tar.gz     `git archive` of the commit (its pax header names the commit), made
#                         from COLLECTOR_GIT when missing (a clone or mirror works)
#   vendor-COMMIT.tar.gz  its Cargo.lock's dependencies, made when missing by
#                         scripts/lib/collector-vendor.py (reproducible: the same inputs give
#                         the same bytes, pinned by COLLECTOR_VENDOR_SHA256): every crates.io
#                         crate, checked against the lock, and the two git dependencies from
#                         clones or mirrors (COLLECTOR_VMLINUX_GIT, COLLECTOR_TTRPC_GIT):
#                         libbpf/vmlinux.h@8f91e9f, and ttrpc 0.8.4, whose locked rev 8ac79f1
#                         (a GitHub pull-request test merge) no longer exists anywhere: its
#                         base, ttrpc-rust d79bd82, plus start_connected(), the API of
#                         containerd/ttrpc-rust#292 the collector calls (the patch below)
#   cargo-config.toml     routes crates.io and both git sources to the vendored crates
#   local.patch           the one local change to the collector (written from the copy below
#                         when missing): without a hardware PMU (this VM), its four hardware
#                         counters fall back to the cpu-clock software event
#   build/KEY, bin/collector-KEY, target/   KEY = first 12 hex digits of the commit and of the
#                         patch's sha256; a binary that exists is never rebuilt
# Build needs: cargo with rustfmt, clang, make, pkg-config, libelf and zlib headers (installed
# with apt-get when missing and run as root). Run needs: root, tracefs (mounted here at
# /sys/kernel/tracing when absent); the collector reads cgroup ids from the kernel (cgroup v2
# ids, whichever hierarchy is mounted) and talks to NRI only when /var/run/nri/nri.sock exists.

COLLECTOR_COMMIT=ac9662290fb3f6c4d12494c8c63a60a88235d9c0
COLLECTOR_VENDOR_SHA256=82ce89270e6ad8a2f79f276cad28c9f392fe894667a8033b49cf3f7ced5b3dd0
COLLECTOR_TTRPC_BASE=d79bd8263528812601ff7650c404a57dab4f1f5b
COLLECTOR_TTRPC_LOCKED=8ac79f1ce81808ff5781cf03a11fb08c29c9ffe1
COLLECTOR_VMLINUX_REV=8f91e9fd5b488ff57074e589e3960940f3387830
# The names of the collector's eBPF programs (collector.bpf.c and bpf-sync-timer).
COLLECTOR_BPF_PROGS="handle_sched_switch handle_process_exit handle_process_free handle_hrtimer_expire_exit sync_timer_init_shared"

_collector_cache() { echo "${COLLECTOR_CACHE:-/var/cache/cachescope/collector}"; }

# The local patch, as kept in this repository (written to the cache when it has none).
_collector_patch_text() {
  cat <<'EOF'
diff -ruN a/crates/perf_events/src/helpers.rs b/crates/perf_events/src/helpers.rs
--- a/crates/perf_events/src/helpers.rs
+++ b/crates/perf_events/src/helpers.rs
@@ -256,7 +256,22 @@
     };
 
     // Open the events
-    open_events(map, &mut attr)
+    match open_events(map, &mut attr) {
+        Err(PerfEventError::OpenError { cpu, source }) => {
+            // cachescope local patch: no hardware PMU (e.g. VM) -> fall back to the
+            // software cpu-clock event so the BPF programs still load and run.
+            eprintln!(
+                "WARN perf_events: {:?}: hardware counter unavailable on CPU {} ({}); falling back to cpu-clock",
+                counter_type,
+                cpu,
+                source
+            );
+            attr.type_ = sys::bindings::PERF_TYPE_SOFTWARE;
+            attr.config = sys::bindings::PERF_COUNT_SW_CPU_CLOCK as u64;
+            open_events(map, &mut attr)
+        }
+        other => other,
+    }
 }
 
 /// Enables all perf events stored in the map.
EOF
}

# The vendored ttrpc's change: start_connected() on its base revision.
_collector_ttrpc_patch_text() {
  cat <<'EOF'
--- a/src/asynchronous/server.rs
+++ b/src/asynchronous/server.rs
@@ -171,6 +171,25 @@
         Ok(())
     }
 
+    /// Serves one socket that is already connected, until it closes (a local change for
+    /// unvariance/collector's baseline build: the API it calls, from containerd/ttrpc-rust#292).
+    pub fn start_connected(
+        &mut self,
+        conn: Socket,
+    ) -> impl std::future::Future<Output = Result<()>> + Send + 'static {
+        let delegate = ServerBuilder {
+            services: self.services.clone(),
+            streams: Arc::new(Mutex::new(HashMap::new())),
+            shutdown_waiter: self.shutdown.subscribe(),
+        };
+        async move {
+            Connection::new(conn, delegate)
+                .run()
+                .await
+                .map_err(|e| Error::Others(format!("connection run error: {e}")))
+        }
+    }
+
     pub async fn shutdown(&mut self) -> Result<()> {
         self.stop_listen().await;
         self.disconnect().await;
EOF
}

# The cargo configuration that sends every source of the lock to the vendored crates (the
# build points `directory` at them).
_collector_cargo_config_text() {
  cat <<EOF
[source.crates-io]
replace-with = "vendored-sources"

[source."git+https://github.com/containerd/ttrpc-rust?rev=$COLLECTOR_TTRPC_LOCKED"]
git = "https://github.com/containerd/ttrpc-rust"
rev = "$COLLECTOR_TTRPC_LOCKED"
replace-with = "vendored-sources"

[source."git+https://github.com/libbpf/vmlinux.h.git?rev=$COLLECTOR_VMLINUX_REV"]
git = "https://github.com/libbpf/vmlinux.h.git"
rev = "$COLLECTOR_VMLINUX_REV"
replace-with = "vendored-sources"

[source.vendored-sources]
directory = "vendor"
EOF
}

# _collector_git_dir CACHE NAME URL: a local git directory holding URL's history (URL itself
# when it is a directory; else a bare clone kept in CACHE/git-NAME).
_collector_git_dir() {
  local c=$1 name=$2 url=$3
  if [ -d "$url" ]; then
    echo "$url"
    return 0
  fi
  if [ ! -d "$c/git-$name" ]; then
    if ! git clone -q --bare "$url" "$c/git-$name.part" >&2; then
      rm -rf "$c/git-$name.part"
      echo "collector_build: cannot clone $url (set COLLECTOR_${name^^}_GIT to a clone or mirror)" >&2
      return 1
    fi
    mv "$c/git-$name.part" "$c/git-$name"
  fi
  echo "$c/git-$name"
}

# _collector_source CACHE: makes sure CACHE/src-COMMIT.tar.gz exists, from COLLECTOR_GIT
# (default https://github.com/unvariance/collector; a local mirror's path works too) if not.
_collector_source() {
  local c=$1 tgz url tmp
  tgz=$c/src-$COLLECTOR_COMMIT.tar.gz
  [ -s "$tgz" ] && return 0
  url=${COLLECTOR_GIT:-https://github.com/unvariance/collector}
  if ! timeout 20 git ls-remote "$url" >/dev/null 2>&1; then
    echo "collector_build: MISSING $tgz, and $url cannot be reached to remake it." >&2
    echo "collector_build: restore that file (git archive --format=tar $COLLECTOR_COMMIT | gzip -n of" \
      "unvariance/collector), or set COLLECTOR_GIT to a reachable clone or mirror." >&2
    return 1
  fi
  echo "collector_build: fetching unvariance/collector@$COLLECTOR_COMMIT from $url" >&2
  tmp=$(mktemp -d "$c/git.XXXXXX") || return 1
  if git init -q --bare "$tmp" && git -C "$tmp" fetch -q --depth 1 "$url" "$COLLECTOR_COMMIT" \
    && git -C "$tmp" archive --format=tar "$COLLECTOR_COMMIT" | gzip -n >"$tgz.part"; then
    mv "$tgz.part" "$tgz"
    rm -rf "$tmp"
  else
    rm -rf "$tmp" "$tgz.part"
    echo "collector_build: could not fetch $COLLECTOR_COMMIT from $url" >&2
    return 1
  fi
}

# _collector_vendor CACHE: makes sure the vendored crates are unpacked at CACHE/vendor-COMMIT,
# making their tarball first when it is missing.
_collector_vendor() {
  local c=$1 tgz dir sum ttrpc vmlinux patch
  dir=$c/vendor-$COLLECTOR_COMMIT
  tgz=$dir.tar.gz
  [ -d "$dir" ] && return 0
  if [ ! -s "$tgz" ]; then
    echo "collector_build: making $tgz (crates.io and the two git dependencies)" >&2
    ttrpc=$(_collector_git_dir "$c" ttrpc "${COLLECTOR_TTRPC_GIT:-https://github.com/containerd/ttrpc-rust}") || return 1
    vmlinux=$(_collector_git_dir "$c" vmlinux "${COLLECTOR_VMLINUX_GIT:-https://github.com/libbpf/vmlinux.h}") || return 1
    patch=$c/ttrpc-start_connected.patch
    _collector_ttrpc_patch_text >"$patch"
    "$(dirname "${BASH_SOURCE[0]}")/collector-vendor.py" "$c/src-$COLLECTOR_COMMIT.tar.gz" "$ttrpc" \
      "$COLLECTOR_TTRPC_BASE" "$patch" "$vmlinux" "$tgz" || return 1
  fi
  sum=$(sha256sum "$tgz" | cut -d' ' -f1)
  if [ "$sum" != "$COLLECTOR_VENDOR_SHA256" ]; then
    echo "collector_build: $tgz has sha256 $sum, expected $COLLECTOR_VENDOR_SHA256" >&2
    return 1
  fi
  rm -rf "$dir.part" && mkdir -p "$dir.part" \
    && tar -xzf "$tgz" -C "$dir.part" --strip-components=1 && mv "$dir.part" "$dir"
}

# _collector_deps: the build's tools and libraries, apt-get installing what is missing.
_collector_deps() {
  local missing=() t
  for t in clang make pkg-config patch; do command -v "$t" >/dev/null || missing+=("$t"); done
  pkg-config --exists libelf 2>/dev/null || missing+=(libelf-dev)
  pkg-config --exists zlib 2>/dev/null || missing+=(zlib1g-dev)
  if [ ${#missing[@]} -gt 0 ]; then
    if [ "$(id -u)" != 0 ]; then
      echo "collector_build: missing ${missing[*]} (apt-get install clang make pkg-config patch libelf-dev zlib1g-dev)" >&2
      return 1
    fi
    echo "collector_build: apt-get installing ${missing[*]}" >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q clang make pkg-config patch libelf-dev zlib1g-dev >&2 || return 1
  fi
  command -v cargo >/dev/null || { echo "collector_build: cargo not found" >&2; return 1; }
  command -v rustfmt >/dev/null || { echo "collector_build: rustfmt not found (rustup component add rustfmt)" >&2; return 1; }
}

collector_build() {
  local c patch psum key bin src log fd t0 rc
  c=$(_collector_cache)
  mkdir -p "$c/bin" "$c/build" || return 1
  patch=${COLLECTOR_PATCH:-$c/local.patch}
  [ -s "$patch" ] || _collector_patch_text >"$patch" || return 1
  if ! cmp -s "$patch" <(_collector_patch_text); then
    echo "collector_build: note: $patch differs from the patch in scripts/lib/collector.sh; using $patch" >&2
  fi
  psum=$(sha256sum "$patch" | cut -d' ' -f1)
  key=${COLLECTOR_COMMIT:0:12}-${psum:0:12}
  bin=$c/bin/collector-$key
  # Not for the build: collector_run reads the collector's eBPF time (COLLECTOR_BPF_STATS=1)
  # with bpftool, and a benchmark should not find it missing after its own half.
  if ! command -v bpftool >/dev/null && [ "$(id -u)" = 0 ]; then
    echo "collector_build: apt-get installing bpftool" >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q bpftool >&2 || return 1
  fi
  if [ -x "$bin" ]; then
    echo "$bin"
    return 0
  fi

  exec {fd}>"$c/.lock"
  flock "$fd"
  rc=0
  if [ ! -x "$bin" ]; then
    _collector_build_locked "$c" "$patch" "$key" "$bin" || rc=1
  fi
  exec {fd}>&-
  [ $rc = 0 ] && echo "$bin"
  return $rc
}

_collector_build_locked() {
  local c=$1 patch=$2 key=$3 bin=$4 src log t0 id
  _collector_deps || return 1
  _collector_source "$c" || return 1
  _collector_vendor "$c" || return 1
  [ -s "$c/cargo-config.toml" ] || _collector_cargo_config_text >"$c/cargo-config.toml" || return 1
  id=$(zcat "$c/src-$COLLECTOR_COMMIT.tar.gz" | git get-tar-commit-id 2>/dev/null)
  if [ "$id" != "$COLLECTOR_COMMIT" ]; then
    echo "collector_build: $c/src-$COLLECTOR_COMMIT.tar.gz is not a git archive of $COLLECTOR_COMMIT" >&2
    return 1
  fi

  src=$c/build/$key
  log=$c/build/$key.log
  rm -rf "$src" && mkdir -p "$src/.cargo" || return 1
  # -m: fresh mtimes, so that the build scripts (which write the BPF skeletons into the source
  # tree) run again even when target/ already holds an older build of them.
  tar -xzmf "$c/src-$COLLECTOR_COMMIT.tar.gz" -C "$src" || return 1
  patch -d "$src" -p1 --batch --forward <"$patch" >"$log" 2>&1 || { cat "$log" >&2; return 1; }
  sed "s|^directory = .*|directory = \"$c/vendor-$COLLECTOR_COMMIT\"|" "$c/cargo-config.toml" >"$src/.cargo/config.toml"

  echo "collector_build: building unvariance/collector@${COLLECTOR_COMMIT:0:12} (log: $log)" >&2
  t0=$(date +%s)
  if ! (cd "$src" && CARGO_HOME=$c/cargo-home CARGO_TARGET_DIR=$c/target \
    cargo build --release --locked --offline --bin collector) >>"$log" 2>&1; then
    tail -30 "$log" >&2
    echo "collector_build: build failed (log: $log)" >&2
    return 1
  fi
  cp "$c/target/release/collector" "$bin.part" && mv "$bin.part" "$bin" || return 1
  printf 'commit %s\npatch_sha256 %s\nrustc %s\nbuilt %s\nbuild_seconds %s\n' "$COLLECTOR_COMMIT" \
    "$(sha256sum "$patch" | cut -d' ' -f1)" "$(rustc --version)" "$(date -u +%FT%TZ)" \
    "$(($(date +%s) - t0))" >"$bin.info"
  echo "collector_build: built $bin in $(($(date +%s) - t0)) s" >&2
}

# collector_bpf_run_time_ns: the sum of run_time_ns over the collector's loaded programs
# (0 when none is loaded; the kernel only counts with kernel.bpf_stats_enabled=1).
collector_bpf_run_time_ns() {
  bpftool prog show 2>/dev/null | awk -v names="$COLLECTOR_BPF_PROGS" '
    BEGIN { n = split(names, a, " "); for (i = 1; i <= n; i++) want[a[i]] = 1 }
    /^[0-9]+: / {
      name = ""; rt = 0
      for (i = 1; i < NF; i++) {
        if ($i == "name") name = $(i + 1)
        if ($i == "run_time_ns") rt = $(i + 1)
      }
      if (name in want) sum += rt
    }
    END { printf "%d\n", sum }'
}

# _collector_tracefs: the collector attaches tracepoints through /sys/kernel/tracing.
_collector_tracefs() {
  [ -d /sys/kernel/tracing/events/sched ] && return 0
  mount -t tracefs tracefs /sys/kernel/tracing 2>/dev/null
  [ -d /sys/kernel/tracing/events/sched ] && return 0
  echo "collector_run: tracefs is not available at /sys/kernel/tracing" >&2
  return 1
}

# collector_run SECONDS OUTDIR: one run of the collector (binary: COLLECTOR_BIN, else
# collector_build's) for SECONDS, its output under OUTDIR. With COLLECTOR_BPF_STATS=1 it turns
# kernel.bpf_stats_enabled on for the run (restoring it after) and writes OUTDIR/bpf_run_time_ns,
# the collector's programs' summed run time, sampled every 0.5 s while they are loaded (so the
# last < 0.5 s before they unload is not counted).
collector_run() {
  local secs=$1 out=$2 bin rc pid old="" v best=0
  if [ -z "$secs" ] || [ -z "$out" ]; then
    echo "usage: collector_run SECONDS OUTDIR" >&2
    return 2
  fi
  [ "$(id -u)" = 0 ] || { echo "collector_run: needs root" >&2; return 1; }
  bin=${COLLECTOR_BIN:-$(collector_build)} || return 1
  mkdir -p "$out" && out=$(cd "$out" && pwd) || return 1
  _collector_tracefs || return 1

  local cmd=("$bin" -d "$secs" --storage-type local --prefix "$out/metrics-" --health-addr 127.0.0.1:0)
  if [ -x /usr/bin/time ]; then
    cmd=(/usr/bin/time -o "$out/time.txt" -f '%e %U %S %M' "${cmd[@]}")
  fi
  if [ "${COLLECTOR_BPF_STATS:-0}" = 1 ]; then
    command -v bpftool >/dev/null || { echo "collector_run: COLLECTOR_BPF_STATS=1 needs bpftool (apt-get install bpftool)" >&2; return 1; }
    old=$(sysctl -n kernel.bpf_stats_enabled)
    sysctl -qw kernel.bpf_stats_enabled=1
  fi
  timeout -s INT -k 10 $((secs + 60)) "${cmd[@]}" >"$out/collector.log" 2>&1 &
  pid=$!
  if [ -n "$old" ]; then
    while kill -0 "$pid" 2>/dev/null; do
      v=$(collector_bpf_run_time_ns)
      if [ "${v:-0}" -gt "$best" ]; then best=$v; echo "$best" >"$out/bpf_run_time_ns"; fi
      sleep 0.5
    done
  fi
  wait "$pid"
  rc=$?
  [ -n "$old" ] && sysctl -qw kernel.bpf_stats_enabled="$old"
  if [ $rc != 0 ]; then
    tail -20 "$out/collector.log" >&2
    echo "collector_run: collector exited $rc (log: $out/collector.log)" >&2
    return 1
  fi
  return 0
}
