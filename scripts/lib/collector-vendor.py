#!/usr/bin/env python3
"""Makes the vendored dependencies of the unvariance/collector baseline (scripts/lib/collector.sh)
as a reproducible tarball: the same inputs give the same bytes, so its sha256 can be pinned.

    collector-vendor.py SRC_TGZ TTRPC_GIT TTRPC_REV TTRPC_PATCH VMLINUX_GIT OUT_TGZ

SRC_TGZ is `git archive` of the collector; its Cargo.lock says what to vendor:
- every crates.io package, downloaded from static.crates.io (CRATES_URL overrides it) and
  checked against the lock's sha256;
- its two git packages from clones or mirrors: ttrpc (the locked revision no longer exists, so
  TTRPC_REV, its base, plus TTRPC_PATCH) and vmlinux at its locked revision.

Each package is unpacked under vendor/NAME-VERSION with the .cargo-checksum.json cargo's
directory sources expect ("package": the registry checksum, null for git packages). The
tarball holds vendor/..., sorted, with zero times and owners, gzip without a name or time.
"""
import gzip
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import urllib.request


def fail(msg):
    print(f"collector-vendor: {msg}", file=sys.stderr)
    sys.exit(1)


def lock_packages(lock_text):
    """(name, version, source, checksum) of each [[package]] of a Cargo.lock."""
    out = []
    for block in lock_text.split("[[package]]")[1:]:
        field = lambda k: (re.search(rf'^{k} = "([^"]*)"', block, re.M) or [None, None])[1]
        out.append((field("name"), field("version"), field("source"), field("checksum")))
    return out


def checksum_file(pkg_dir, package):
    files = {}
    for root, _, names in os.walk(pkg_dir):
        for n in names:
            p = os.path.join(root, n)
            if os.path.islink(p) or not os.path.isfile(p):
                continue
            rel = os.path.relpath(p, pkg_dir)
            with open(p, "rb") as f:
                files[rel] = hashlib.sha256(f.read()).hexdigest()
    with open(os.path.join(pkg_dir, ".cargo-checksum.json"), "w") as f:
        json.dump({"files": files, "package": package}, f, sort_keys=True)


def untar(data, dest, strip):
    with tarfile.open(fileobj=io.BytesIO(data)) as t:
        for m in t.getmembers():
            parts = m.name.split("/")[strip:]
            if not parts or not parts[0] or ".." in parts or m.name.startswith("/"):
                continue
            if not (m.isfile() or m.isdir()):
                continue  # links and devices: none in a crate that builds here
            m.name = "/".join(parts)
            # The "data" filter (no absolute paths, links or devices) where Python has it.
            t.extract(m, dest, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))


def git_package(git_dir, rev, dest, patch=None):
    """The tree of REV, its symbolic links replaced by what they point at (as `cargo vendor`
    copies a git package: vmlinux's headers are links)."""
    with tempfile.TemporaryDirectory() as tree:
        archive = subprocess.run(["git", "-C", git_dir, "archive", "--format=tar", rev], check=True,
                                 capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", tree], input=archive, check=True)
        shutil.copytree(tree, dest, symlinks=False)
    if patch:
        subprocess.run(["patch", "-s", "-p1", "-d", dest, "-i", os.path.abspath(patch)], check=True)
    checksum_file(dest, None)


def main():
    if len(sys.argv) != 7:
        fail("usage: collector-vendor.py SRC_TGZ TTRPC_GIT TTRPC_REV TTRPC_PATCH VMLINUX_GIT OUT_TGZ")
    src, ttrpc_git, ttrpc_rev, ttrpc_patch, vmlinux_git, out = sys.argv[1:]
    with tarfile.open(src) as t:
        member = t.extractfile("Cargo.lock")
        if member is None:
            fail(f"{src} has no Cargo.lock")
        lock = member.read().decode()
    base = os.environ.get("CRATES_URL", "https://static.crates.io/crates")
    with tempfile.TemporaryDirectory() as tmp:
        vendor = os.path.join(tmp, "vendor")
        os.makedirs(vendor)
        n = 0
        for name, version, source, checksum in lock_packages(lock):
            if source is None:
                continue  # the collector's own crates
            dest = os.path.join(vendor, f"{name}-{version}")
            if source.startswith("registry+"):
                url = f"{base}/{name}/{name}-{version}.crate"
                with urllib.request.urlopen(url, timeout=60) as r:
                    data = r.read()
                got = hashlib.sha256(data).hexdigest()
                if got != checksum:
                    fail(f"{url}: sha256 {got}, the lock says {checksum}")
                os.makedirs(dest)
                untar(data, dest, 1)
                checksum_file(dest, checksum)
            elif name == "ttrpc":
                git_package(ttrpc_git, ttrpc_rev, dest, ttrpc_patch)
            elif name == "vmlinux":
                rev = source.rsplit("#", 1)[1]
                git_package(vmlinux_git, rev, dest)
            else:
                fail(f"{name} {version}: a source this script does not know: {source}")
            n += 1
        raw = io.BytesIO()
        with tarfile.open(fileobj=raw, mode="w", format=tarfile.GNU_FORMAT) as t:
            for root, dirs, names in os.walk(vendor):
                dirs.sort()
                for p in [root] + [os.path.join(root, x) for x in sorted(names)]:
                    info = t.gettarinfo(p, os.path.relpath(p, tmp))
                    info.mtime = 0
                    info.uid = info.gid = 0
                    info.uname = info.gname = ""
                    info.mode = 0o755 if info.isdir() or info.mode & 0o100 else 0o644
                    if info.isfile():
                        with open(p, "rb") as f:
                            t.addfile(info, f)
                    elif info.isdir():
                        t.addfile(info)
        with open(out + ".part", "wb") as f, gzip.GzipFile(filename="", mode="wb", fileobj=f, mtime=0) as z:
            z.write(raw.getvalue())
        os.replace(out + ".part", out)
    print(f"collector-vendor: {n} packages in {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
