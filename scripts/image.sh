#!/usr/bin/env bash
# Builds cachescope's container image without a registry: a base image made from a Debian root
# of this release (debootstrap, minbase, with the libraries the binary links; cached once per
# machine and imported with `ENGINE import`), then deploy/Containerfile.deb FROM it with the
# .deb scripts/package.sh built installed by dpkg (no network in the build). Tags
# cachescope:<version> and prints it as the last line.
#   scripts/image.sh docker|podman DEB
set -euo pipefail
cd "$(dirname "$0")/.."
engine=${1:?usage: image.sh docker|podman DEB}
deb=$(realpath "${2:?usage: image.sh docker|podman DEB}")
case $engine in docker|podman) ;; *) echo "image: the engine is docker or podman, not '$engine'" >&2; exit 2 ;; esac
version=$(dpkg-deb -f "$deb" Version)
suite=$(. /etc/os-release && echo "$VERSION_CODENAME")
# What the binary loads (the .deb's Depends), so that dpkg -i needs nothing from the network.
include=libelf1,zlib1g,libgcc-s1
roots=${CACHESCOPE_ROOT_CACHE:-/var/cache/cachescope/roots}
key=$(echo "$include" | md5sum | cut -c1-8)
root=$roots/image-$suite-$key
mkdir -p "$roots"
exec 9>"$roots/.lock"
flock 9
if [ ! -e "$root/.complete" ]; then
  command -v debootstrap >/dev/null || { echo "image: debootstrap missing (scripts/setup.sh installs it)" >&2; exit 1; }
  mirror=$(apt-get indextargets --format '$(REPO_URI)' 'Created-By: Packages' 2>/dev/null | grep -v -- '-security' | head -1)
  rm -rf "$root.part"
  echo "image: a $suite root for the base image (once)" >&2
  debootstrap --variant=minbase --include="$include" "$suite" "$root.part" "$mirror" >"$root.log" 2>&1 \
    || { tail -20 "$root.log" >&2; exit 1; }
  # What an image does not need: apt's lists and caches, docs, man pages.
  rm -rf "$root.part"/var/lib/apt/lists/* "$root.part"/var/cache/apt/*.bin "$root.part"/usr/share/doc/* \
    "$root.part"/usr/share/man/* "$root.part"/usr/share/locale/*
  touch "$root.part/.complete"
  mv "$root.part" "$root"
fi
exec 9>&-
base=cachescope-base:$suite-$key
if ! "$engine" image inspect "$base" >/dev/null 2>&1; then
  tar --exclude=./.complete -C "$root" -c . | "$engine" import - "$base" >&2
fi
ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
cp "$deb" "$ctx/cachescope.deb"
"$engine" build --network none --build-arg "BASE=$base" -f deploy/Containerfile.deb -t "cachescope:$version" "$ctx" >&2
echo "cachescope:$version"
