# shellcheck shell=bash
# debootstrap_once ROOT SUITE INCLUDE WHO [trim]: a minbase root of SUITE with the packages
# INCLUDE (comma-separated) at ROOT, made once (ROOT/.complete marks it) from this machine's own
# Debian mirror, ROOT.log keeping debootstrap's output. WHO names the caller in messages; "trim"
# removes what an image does not need (apt's lists and caches, docs, man pages, locales).
# Takes the roots' lock (descriptor 9) and leaves it held: the caller may go on changing the
# root under it, and releases it with `exec 9>&-`.
debootstrap_once() {
  local root=$1 suite=$2 include=$3 who=$4 trim=${5:-}
  local roots mirror
  roots=$(dirname "$root")
  mkdir -p "$roots"
  exec 9>"$roots/.lock"
  flock 9
  [ -e "$root/.complete" ] && return 0
  command -v debootstrap >/dev/null || { echo "$who: debootstrap missing (scripts/setup.sh installs it)" >&2; exit 1; }
  mirror=$(apt-get indextargets --format '$(REPO_URI)' 'Created-By: Packages' 2>/dev/null | grep -v -- '-security' | head -1)
  rm -rf "$root.part"
  echo "$who: a $suite root with $include (once)" >&2
  debootstrap --variant=minbase --include="$include" "$suite" "$root.part" "$mirror" >"$root.log" 2>&1 \
    || { tail -20 "$root.log" >&2; exit 1; }
  if [ "$trim" = trim ]; then
    rm -rf "$root.part"/var/lib/apt/lists/* "$root.part"/var/cache/apt/*.bin "$root.part"/usr/share/doc/* \
      "$root.part"/usr/share/man/* "$root.part"/usr/share/locale/*
  fi
  touch "$root.part/.complete"
  mv "$root.part" "$root"
}
