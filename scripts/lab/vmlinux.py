#!/usr/bin/python3
"""Unpacks the ELF kernel inside an x86 bzImage, for a direct PVH boot.

    vmlinux.py BZIMAGE OUT

A bzImage is a real-mode setup stub, then a protected-mode stub that decompresses the
kernel proper (an ELF file) before jumping to it. Under QEMU's TCG that decompression
costs seconds of emulated CPU at every boot; QEMU can instead load the ELF itself and
enter it through its PVH entry point (the Xen `PHYS32_ENTRY` ELF note, CONFIG_PVH).

Where the compressed payload lies is in the boot protocol's setup header
(Documentation/arch/x86/boot.rst): the protected-mode part starts after
`(setup_sects + 1) * 512` bytes (`setup_sects` at 0x1f1, 0 meaning 4), and
`payload_offset` / `payload_length` (0x248 / 0x24c, protocol 2.08 and later) place the
compressed kernel inside it. Formats Python's standard library reads (xz, gzip, bzip2,
lzma) are unpacked; any other (zstd, lz4, lzo) is refused, and so is an ELF without the
PVH note. Exit status 0: OUT written; 3: the image cannot be unpacked for a PVH boot
(the caller boots the bzImage instead); anything else: an error.
"""

import bz2
import lzma
import os
import struct
import sys
import zlib

PT_NOTE = 4
XEN_ELFNOTE_PHYS32_ENTRY = 18


class Unusable(Exception):
    """The image is fine but cannot be booted through PVH."""


def payload(image: bytes) -> bytes:
    if image[0x202:0x206] != b"HdrS":
        raise Unusable("no bzImage setup header")
    (version,) = struct.unpack_from("<H", image, 0x206)
    if version < 0x0208:
        raise Unusable(f"boot protocol {version:#x} has no payload fields")
    setup_sects = image[0x1F1] or 4
    start = (setup_sects + 1) * 512
    offset, length = struct.unpack_from("<II", image, 0x248)
    data = image[start + offset : start + offset + length]
    if len(data) != length:
        raise Unusable("the payload runs past the end of the file")
    return data


def decompress(data: bytes) -> bytes:
    if data.startswith(b"\xfd7zXZ\x00"):
        d = lzma.LZMADecompressor(lzma.FORMAT_XZ)
    elif data.startswith(b"\x5d\x00\x00"):
        d = lzma.LZMADecompressor(lzma.FORMAT_ALONE)
    elif data.startswith(b"\x1f\x8b"):
        d = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    elif data.startswith(b"BZh"):
        d = bz2.BZ2Decompressor()
    else:
        raise Unusable(f"payload compressed in a format not handled here ({data[:4].hex()})")
    # The build appends the uncompressed size after the stream: left unused here.
    out = d.decompress(data)
    if not getattr(d, "eof", True):
        raise Unusable("the compressed stream is truncated")
    return out


def has_pvh_entry(elf: bytes) -> bool:
    if elf[:4] != b"\x7fELF" or elf[4] != 2 or elf[5] != 1:
        raise Unusable("the payload is not a 64-bit little-endian ELF")
    phoff, = struct.unpack_from("<Q", elf, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", elf, 0x36)
    for i in range(phnum):
        p_type, _flags, p_offset, _va, _pa, p_filesz = struct.unpack_from(
            "<IIQQQQ", elf, phoff + i * phentsize
        )
        if p_type != PT_NOTE:
            continue
        at, end = p_offset, p_offset + p_filesz
        while at + 12 <= end:
            namesz, descsz, n_type = struct.unpack_from("<III", elf, at)
            name = elf[at + 12 : at + 12 + namesz].rstrip(b"\0")
            if name == b"Xen" and n_type == XEN_ELFNOTE_PHYS32_ENTRY:
                return True
            at += 12 + (namesz + 3) // 4 * 4 + (descsz + 3) // 4 * 4
    return False


def main() -> int:
    if len(sys.argv) != 3:
        print("usage: vmlinux.py BZIMAGE OUT", file=sys.stderr)
        return 2
    src, dst = sys.argv[1:]
    try:
        with open(src, "rb") as f:
            elf = decompress(payload(f.read()))
        if not has_pvh_entry(elf):
            raise Unusable("the kernel has no PVH entry point (CONFIG_PVH)")
    except Unusable as e:
        print(f"vmlinux.py: {src}: {e}", file=sys.stderr)
        return 3
    with open(dst + ".tmp", "wb") as f:
        f.write(elf)
    os.replace(dst + ".tmp", dst)
    return 0


if __name__ == "__main__":
    sys.exit(main())
