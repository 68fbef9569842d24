#!/usr/bin/env python3
"""Compare the kernels of two kjit cubin caches: code and everything the
driver loads with it.

A template change that must not change any kernel (a comment, a helper
moved, a switch whose default keeps the old code) can be checked without a
GPU: compile the same kernels from both template sets into two fresh caches
(`KJIT_TEMPLATE_DIR=OLD kjit prewarm ... --cache-dir A`, then the same with
the new templates into B) and compare them here. The cache key hashes the
templates, so the file names differ; kernels are matched by their mangled
names (and arch).

Per kernel it compares its code (`.text.<k>`, its relocations) and its
attributes: the `.nv.info.<k>` records, the global `.nv.info` records of its
symbol (registers, stack and frame sizes), its shared-memory and parameter
bank sizes, its `.nv.constant2.<k>` data. Per entry ("module") it compares
the rest that code can reach: the constant banks shared by the module
(`.nv.constant3`, `.nv.constant4` with its slot-to-symbol relocations), the
globals' initial data and sizes, and the call graph. Symbol indices are
compared by name. Left out: string tables, debug sections, `.note.nv.tkinfo`
(the compile options).

Usage: cubin_text_diff.py A B [--list]
Prints the kernels in each cache, how many differ in code or attributes,
how many differ only in their module's data, and how many are in one cache
only (with --list, the names). Exit 0 when both caches hold the same kernels
and nothing differs; 1 otherwise; 2 on bad usage, an unreadable entry, or a
cache that holds one kernel in two entries (use fresh cache directories).
Messages go to stderr and name the file.
"""

import hashlib
import os
import struct
import sys

MAGIC = b"KJITCBN\0"
HDR = 56
SHT_SYMTAB, SHT_RELA, SHT_NOBITS, SHT_REL = 2, 4, 8, 9
NOISE = (".shstrtab", ".strtab", ".note.nv.tkinfo")


class Bad(Exception):
    pass


def fail(msg, rc=2):
    print(f"cubin_text_diff: {msg}", file=sys.stderr)
    return rc


def entry_image(raw):
    """The ELF image of one cache entry (layout: src/cache/cache_file.c)."""
    if len(raw) < HDR or raw[:8] != MAGIC:
        raise Bad("is not a kjit cache entry (no KJITCBN header)")
    (hdr,) = struct.unpack_from("<I", raw, 12)
    name_len, _, image_len = struct.unpack_from("<IIQ", raw, 32)
    if hdr != HDR or HDR + name_len + image_len != len(raw):
        raise Bad("has header lengths that do not match its size")
    return raw[HDR + name_len:]


class Elf:
    def __init__(self, img):
        if len(img) < 0x40 or img[:4] != b"\x7fELF" or img[4] != 2 or img[5] != 1:
            raise Bad("holds no little-endian ELF64 image")
        self.img = img
        (shoff,) = struct.unpack_from("<Q", img, 0x28)
        es, n, si = struct.unpack_from("<HHH", img, 0x3A)
        if es < 64 or n == 0 or shoff + n * es > len(img) or si >= n:
            raise Bad("has a section table outside its image")
        self.sec = []
        for i in range(n):
            name, typ, _, _, off, size, link, info, _, ent = struct.unpack_from("<IIQQQQIIQQ", img, shoff + i * es)
            if typ != SHT_NOBITS and off + size > len(img):
                raise Bad(f"has section {i} outside its image")
            self.sec.append(dict(name=name, type=typ, off=off, size=size, link=link, info=info, ent=ent))
        shstr = self.data(si)
        for s in self.sec:
            s["name"] = self.cstr(shstr, s["name"])
        self.syms = []
        for i, s in enumerate(self.sec):
            if s["type"] == SHT_SYMTAB:
                strtab = self.data(s["link"])
                d = self.data(i)
                for j in range(len(d) // 24):
                    nm, info, other, shndx, value, size = struct.unpack_from("<IBBHQQ", d, j * 24)
                    sname = self.cstr(strtab, nm)
                    if not sname and shndx < len(self.sec):
                        sname = "[" + self.sec[shndx]["name"] + "]"
                    self.syms.append((sname, info, other, shndx, value, size))

    @staticmethod
    def cstr(tab, off):
        if off >= len(tab):
            raise Bad("has a name outside its string table")
        end = tab.find(b"\0", off)
        if end < 0:
            raise Bad("has a name without its terminating NUL")
        return tab[off:end].decode("ascii", "replace")

    def data(self, i):
        s = self.sec[i]
        return b"" if s["type"] == SHT_NOBITS else self.img[s["off"]:s["off"] + s["size"]]

    def sym(self, i):
        return self.syms[i][0] if 0 <= i < len(self.syms) else f"#{i}"

    def relocs(self, i):
        s, d = self.sec[i], self.data(i)
        step = 24 if s["type"] == SHT_RELA else 16
        out = []
        for j in range(len(d) // step):
            off, info = struct.unpack_from("<QQ", d, j * step)
            add = struct.unpack_from("<q", d, j * step + 16)[0] if step == 24 else 0
            out.append((off, info & 0xFFFFFFFF, self.sym(info >> 32), add))
        return out

    def nvinfo(self, i):
        """Records (format, attribute, payload); a symbol index in a payload
        named (PARAM_CBANK, and the global (symbol, value) records)."""
        d, p, out = self.data(i), 0, []
        is_global = self.sec[i]["name"] == ".nv.info"
        while p + 4 <= len(d):
            fmt, attr = d[p], d[p + 1]
            if fmt == 4:  # size-prefixed payload
                (n,) = struct.unpack_from("<H", d, p + 2)
                pay = d[p + 4:p + 4 + n]
                p += 4 + n
                if len(pay) >= 4 and (is_global or attr == 0x0A):
                    pay = (self.sym(struct.unpack_from("<I", pay, 0)[0]), pay[4:].hex())
                else:
                    pay = pay.hex()
            else:
                pay = d[p + 2:p + 4].hex()
                p += 4
            out.append((fmt, attr, pay))
        if p != len(d):
            out.append(("tail", d[p:].hex()))
        return out


def digest(x):
    return hashlib.sha1(repr(x).encode()).hexdigest()


def entry_kernels(img):
    """{kernel: (its own fingerprint, its module's fingerprint)}."""
    e = Elf(img)
    kernels = sorted(s["name"][len(".text."):] for s in e.sec if s["name"].startswith(".text."))
    own = {k: [] for k in kernels}
    module = []
    for i, s in enumerate(e.sec):
        nm = s["name"]
        if not nm or nm in NOISE or "debug" in nm:
            continue
        if s["type"] in (SHT_RELA, SHT_REL):
            content = e.relocs(i)
        elif nm == ".nv.info" or nm.startswith(".nv.info."):
            content = e.nvinfo(i)
        elif nm == ".nv.callgraph":
            d = e.data(i)
            content = [tuple(e.sym(v) if v < len(e.syms) else v for v in struct.unpack_from("<II", d, j * 8))
                       for j in range(len(d) // 8)]
        elif s["type"] == SHT_SYMTAB:
            content = sorted((n, info, other, e.sec[x]["name"] if x < len(e.sec) else x, v, sz)
                             for n, info, other, x, v, sz in e.syms)
        elif s["type"] == SHT_NOBITS:
            content = ("size", s["size"])
        else:
            content = hashlib.sha1(e.data(i)).hexdigest()
        item = (nm, s["type"], content)
        if nm == ".nv.info":  # global records: each goes to its kernel, the rest to the module
            for rec in content:
                k = rec[2][0] if isinstance(rec[2], tuple) else None
                (own[k] if k in own else module).append((nm, rec))
            continue
        owner = next((k for k in kernels if nm.endswith("." + k)), None)
        (own[owner] if owner else module).append(item)
    m = digest(module)
    return {k: (digest(own[k]), m) for k in kernels}


def cache_kernels(d):
    if not os.path.isdir(d):
        raise Bad(f"{d}: not a directory")
    try:
        names = sorted(os.listdir(d))
    except OSError as err:
        raise Bad(f"{d}: {err.strerror}")
    kernels, where = {}, {}
    for f in names:
        if not f.endswith(".cubin"):
            continue
        p = os.path.join(d, f)
        try:
            with open(p, "rb") as fh:
                found = entry_kernels(entry_image(fh.read()))
        except OSError as err:
            raise Bad(f"{p}: {err.strerror}")
        except (Bad, struct.error, IndexError, ValueError) as err:
            raise Bad(f"{p}: {err}")
        arch = f.split(".")[-3] if f.count(".") >= 4 else "?"
        for k, fp in found.items():
            if (arch, k) in kernels:
                raise Bad(f"{d}: holds {arch} {k} in two entries ({where[(arch, k)]}, {f}); use fresh cache directories")
            kernels[(arch, k)], where[(arch, k)] = fp, f
    if not kernels:
        raise Bad(f"{d}: no kernel in any cache entry")
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
    except Bad as err:
        return fail(str(err))
    both = sorted(a.keys() & b.keys())
    code = [k for k in both if a[k][0] != b[k][0]]
    data = [k for k in both if a[k][0] == b[k][0] and a[k][1] != b[k][1]]
    only_a = sorted(a.keys() - b.keys())
    only_b = sorted(b.keys() - a.keys())
    print(f"kernels: {len(a)} in {dirs[0]}, {len(b)} in {dirs[1]}; {len(code)} differ in code or attributes, "
          f"{len(data)} only in their module's data, {len(only_a)} only in the first, {len(only_b)} only in the second")
    if listing:
        for tag, ks in (("code", code), ("module data", data), ("only first", only_a), ("only second", only_b)):
            for arch, k in ks:
                print(f"  {tag}: {arch} {k}")
    return 1 if code or data or only_a or only_b else 0


if __name__ == "__main__":
    sys.exit(main())
