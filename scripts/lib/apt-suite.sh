# shellcheck shell=bash
# apt_suite DIR SUITE TYPES: a private apt configuration in DIR for one Debian suite (TYPES: deb,
# deb-src or "deb deb-src"), from the mirror this machine's apt already uses, with its index
# fetched (at most once a day: an index younger than that is kept). Sets APT_SUITE_OPTS, the
# options to give apt-get and apt-cache. This machine's own sources, lists and packages are
# never touched: nothing from SUITE is installed.
apt_suite() {
  local dir=$1 suite=$2 types=$3 mirror
  mirror=$(apt-get indextargets --format '$(REPO_URI)' 'Created-By: Packages' 2>/dev/null \
    | grep -v -- '-security' | head -1)
  if [ -z "$mirror" ]; then
    echo "apt_suite: no Debian mirror in this machine's apt sources" >&2
    return 1
  fi
  mkdir -p "$dir/lists/partial" "$dir/etc" "$dir/cache/archives/partial"
  printf 'Types: %s\nURIs: %s\nSuites: %s\nComponents: main\nArchitectures: amd64\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
    "$types" "$mirror" "$suite" >"$dir/etc/$suite.sources"
  APT_SUITE_OPTS=(-o Dir::Etc::SourceList=/dev/null -o Dir::Etc::SourceParts="$dir/etc"
    -o Dir::State::Lists="$dir/lists" -o Dir::Cache="$dir/cache" -o APT::Sandbox::User=root
    -o Dir::State::Status=/dev/null -o APT::Architectures=amd64)
  # One update of DIR's index at a time, whoever asks (apt's own lock refuses a second one
  # outright: CI21's crun guest failed so, beside scripts/kmod-build.sh updating the same index),
  # and the age checked under the lock, so that the second finds the first's index fresh.
  (
    flock 7
    if [ -z "$(find "$dir/lists" \( -name '*_Packages*' -o -name '*_Sources*' \) -mtime -1 2>/dev/null | head -1)" ]; then
      apt-get "${APT_SUITE_OPTS[@]}" update -qq >&2
    fi
  ) 7>"$dir/.update-lock"
}

# apt_unstable: apt_suite for unstable's packages, in the kernel cache's configuration
# (scripts/debian-kernel.sh keeps the same one), holding that cache's lock on fd 8 until the
# calling script exits: two updates of one index at once fail on apt's lock.
apt_unstable() {
  local kc=${CACHESCOPE_KERNEL_CACHE:-/var/cache/cachescope/kernels}
  mkdir -p "$kc"
  exec 8>"$kc/.lock"
  flock 8
  apt_suite "$kc/apt-unstable" unstable deb
}
