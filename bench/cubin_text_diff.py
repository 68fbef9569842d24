#!/usr/bin/env python3
"""Compare the machine code of two kjit cubin caches, kernel by kernel.

A template change that must not change any kernel (a comment, a helper
moved, a switch whose default keeps the old code) can be checked without a
GPU: compile the same kernels from both template sets into two caches
(`KJIT_TEMPLATE_DIR=OLD kjit prewarm ... --cache-dir A`, then the same
with the new templates into B) and compare the `.text.<kernel>` sections
of the cubins. The cache key hashes the templates, so the file names differ;
the kernels are matched by their mangled names.

Usage: cubin_text_diff.py A B [--list]
Prints how many kernels each cache holds and how many differ (with --list,
their names). Exit 0 when both caches hold the same kernels with the same
code; 1 when a kernel differs or is only in one cache; 2 on bad usage or a
cache with no readable entry. Messages go to stderr and name the file.
"""

import hashlib
import os
import struct
import sys

MAGIC = b"KJITCBN\0"
HDR = 56


def fail(msg, rc=2):
    print(f"cubin_text_diff: {msg}", file=sys.stderr)
    return rc


def entry_image(path):
    """The ELF image of one cache entry (layout: src/cache/cache_file.c)."""
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < HDR or raw[:8] != MAGIC:
        raise ValueError("is not a kjit cache entry (no KJITCBN header)")
    (hdr,) = struct.unpack_from("<I", raw, 12)
    name_len, _, image_len = struct.unpack_from("<IIQ", raw, 32)
    if hdr != HDR or HDR + name_len + image_len != len(raw):
        raise ValueError("has header lengths that do not match its size")
    return raw[HDR + name_len:]


def text_sections(image):
    """{section name: sha1 of its bytes} for every .text.* section."""
    if image[:4] != b"\x7fELF" or image[4] != 2 or image[5] != 1:
        raise ValueError("holds no little-endian ELF64 image")
    shoff, = struct.unpack_from("<Q", image, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", image, 0x3A)
    if shentsize < 64 or shoff + shnum * shentsize > len(image) or shstrndx >= shnum:
        raise ValueError("has a section table outside its image")

    def header(i):
        name, _, _, _, off, size = struct.unpack_from("<IIQQQQ", image, shoff + i * shentsize)
        return name, off, size

    _, stroff, strsize = header(shstrndx)
    strtab = image[stroff:stroff + strsize]
    out = {}
    for i in range(shnum):
        name, off, size = header(i)
        end = strtab.find(b"\0", name)
        sname = strtab[name:end].decode("ascii", "replace")
        if sname.startswith(".text."):
            if off + size > len(image):
                raise ValueError(f"has section {sname} outside its image")
            out[sname[len(".text."):]] = hashlib.sha1(image[off:off + size]).hexdigest()
    return out


def cache_kernels(d):
    if not os.path.isdir(d):
        raise ValueError(f"{d}: not a directory")
    kernels = {}
    for f in sorted(os.listdir(d)):
        if not f.endswith(".cubin"):
            continue
        p = os.path.join(d, f)
        try:
            for k, h in text_sections(entry_image(p)).items():
                # One kernel compiled for two archs: keep them apart; one
                # kernel in several entries: every code seen counts.
                arch = f.split(".")[-3] if f.count(".") >= 4 else "?"
                kernels.setdefault((arch, k), set()).add(h)
        except (OSError, ValueError, struct.error) as e:
            raise ValueError(f"{p}: {e}")
    if not kernels:
        raise ValueError(f"{d}: no kernel in any cache entry")
    return kernels


def main():
    args = sys.argv[1:]
    if args and args[0] in ("-h", "--help"):
        print(__doc__.strip())
        return 0
    listing = "--list" in args
    dirs = [a for a in args if a != "--list"]
    if len(dirs) != 2 or any(a.startswith("-") for a in dirs):
        return fail("usage: cubin_text_diff.py A B [--list]")
    try:
        a, b = cache_kernels(dirs[0]), cache_kernels(dirs[1])
    except ValueError as e:
        return fail(str(e))
    differ = sorted(k for k in a.keys() & b.keys() if a[k] != b[k])
    only_a = sorted(a.keys() - b.keys())
    only_b = sorted(b.keys() - a.keys())
    print(f"kernels: {len(a)} in {dirs[0]}, {len(b)} in {dirs[1]}; "
          f"{len(differ)} differ, {len(only_a)} only in the first, {len(only_b)} only in the second")
    if listing:
        for tag, ks in (("differs", differ), ("only first", only_a), ("only second", only_b)):
            for arch, k in ks:
                print(f"  {tag}: {arch} {k}")
    return 1 if differ or only_a or only_b else 0


if __name__ == "__main__":
    sys.exit(main())
