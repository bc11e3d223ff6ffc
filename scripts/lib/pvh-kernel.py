#!/usr/bin/env python3
"""Prints the path of an uncompressed kernel QEMU can boot by its PVH entry, made from a bzImage.

    scripts/lib/pvh-kernel.py BZIMAGE

Under TCG a bzImage's decompressor is the slowest part of a guest's boot: on the RDT machine a
boot of Debian's xz-packed 6.1 took 15.6 s, 9 s of them before the kernel said a word, and 9.6 s
booted as an ELF vmlinux. QEMU boots an ELF vmlinux that carries Xen's PVH entry note (type 18, CONFIG_PVH)
straight into the kernel. The vmlinux is unpacked once (xz, gzip or zstd, whichever of the
bzImage's payloads unpacks to an ELF file), kept beside the bzImage under pvh/ keyed by the
bzImage's content, and its note checked. Where there is no such payload or note, BZIMAGE itself
is printed: the guest boots as before, only slower.
"""
import hashlib
import lzma
import os
import struct
import subprocess
import sys
import tempfile
import zlib

PT_NOTE = 4
XEN_ELFNOTE_PHYS32_ENTRY = 18


def has_pvh_note(elf: bytes) -> bool:
    """Whether a little-endian ELF64 image has a PT_NOTE with Xen's PVH entry."""
    try:
        return pvh_note_in(elf)
    except struct.error:  # headers past the end: not a whole ELF file
        return False


def pvh_note_in(elf: bytes) -> bool:
    if elf[:4] != b"\x7fELF" or elf[4] != 2 or elf[5] != 1:
        return False
    (phoff,) = struct.unpack_from("<Q", elf, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", elf, 0x36)
    for i in range(phnum):
        p_type, _, p_offset, _, _, p_filesz = struct.unpack_from("<IIQQQQ", elf, phoff + i * phentsize)
        if p_type != PT_NOTE:
            continue
        at, end = p_offset, p_offset + p_filesz
        while at + 12 <= end:
            namesz, descsz, kind = struct.unpack_from("<III", elf, at)
            name = elf[at + 12 : at + 12 + namesz].rstrip(b"\0")
            if name == b"Xen" and kind == XEN_ELFNOTE_PHYS32_ENTRY:
                return True
            at += 12 + (namesz + 3) // 4 * 4 + (descsz + 3) // 4 * 4
    return False


def unpack(data: bytes):
    """The first payload of `data` that unpacks to an ELF file with the PVH note, or None."""
    def unzstd(blob):
        return subprocess.run(["zstd", "-dcq"], input=blob, capture_output=True).stdout

    formats = [
        (b"\xfd7zXZ\x00", lambda b: lzma.LZMADecompressor(format=lzma.FORMAT_XZ).decompress(b)),
        (b"\x28\xb5\x2f\xfd", unzstd),
        # The payload is followed by the bzImage's trailer: a raw stream that stops at its end.
        (b"\x1f\x8b\x08", lambda b: zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(b)),
        # CONFIG_KERNEL_UNCOMPRESSED (Debian's 6.1 cloud kernel): the ELF file itself.
        (b"\x7fELF", lambda b: b),
    ]
    for magic, decode in formats:
        at = data.find(magic)
        while at >= 0:
            try:
                out = decode(data[at:])
            except (lzma.LZMAError, zlib.error, OSError, EOFError):
                out = b""
            if out[:4] == b"\x7fELF" and has_pvh_note(out):
                return out
            at = data.find(magic, at + 1)
    return None


def main() -> int:
    if len(sys.argv) != 2:
        print("usage: pvh-kernel.py BZIMAGE", file=sys.stderr)
        return 2
    bzimage = sys.argv[1]
    with open(bzimage, "rb") as f:
        data = f.read()
    key = hashlib.sha256(data).hexdigest()[:16]
    cache = os.path.join(os.path.dirname(os.path.abspath(bzimage)), "pvh")
    elf_path = os.path.join(cache, f"{os.path.basename(bzimage)}-{key}.elf")
    none_path = elf_path + ".none"
    if os.path.exists(elf_path):
        print(elf_path)
        return 0
    if os.path.exists(none_path):
        print(bzimage)
        return 0
    os.makedirs(cache, exist_ok=True)
    elf = unpack(data)
    good = elf is not None
    # Written whole under another name, then renamed: guests booting at once may race here.
    fd, tmp = tempfile.mkstemp(dir=cache)
    with os.fdopen(fd, "wb") as f:
        f.write(elf if good else b"")
    os.chmod(tmp, 0o644)
    os.replace(tmp, elf_path if good else none_path)
    if not good:
        print(f"pvh-kernel: {bzimage}: no payload unpacks to an ELF kernel with a PVH entry note; booting the bzImage", file=sys.stderr)
        print(bzimage)
    else:
        print(elf_path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
