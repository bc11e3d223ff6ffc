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
key=$(echo "$include" | md5sum | cut -c1-8)
root=${CACHESCOPE_ROOT_CACHE:-/var/cache/cachescope/roots}/image-$suite-$key
# shellcheck source=scripts/lib/debootstrap.sh
. scripts/lib/debootstrap.sh
debootstrap_once "$root" "$suite" "$include" image trim
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
