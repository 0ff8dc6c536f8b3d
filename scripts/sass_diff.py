#!/usr/bin/env python3
"""Compare the machine code of two CUDA cubins, function by function.

    scripts/sass_diff.py [--map OLD=NEW ...] [--quiet] old.cubin new.cubin

Exit 0 when every function (.text.<name> section) of old.cubin has a function in new.cubin with
byte-identical code and the same resources, and new.cubin has no extra functions; 1 otherwise; 2 on
a usage or file error. Needs no GPU, no cuobjdump/nvdisasm and no pyelftools: the ELF64 file is
parsed by hand with struct.

Why: a refactoring that is meant to leave the kernels alone (renamed types, code moved between
headers, comments) must leave their SASS byte-identical. Produce the cubins of both trees with the
build's flags (scripts/sass_cubins.sh TREE OUTDIR does that for every CUDA unit), then run this on
each pair. `-lineinfo` lives in .nv_debug_* sections, so moved lines do not count.

Per function it compares:
  code       the bytes of .text.<name> (relocation targets are zero there; see relocs)
  relocs     .rel(a).text.<name>: (offset, type, addend, symbol name) of each entry
  flags      the section's sh_flags (named-barrier count and other per-function bits)
  info       .nv.info.<name> (parameter layout, exit offsets, ...), byte for byte
  regs       EIATTR_REGCOUNT, FRAME_SIZE, MIN_STACK_SIZE, MAX_STACK_SIZE of .nv.info (keyed by
             symbol name there; the count printed is the register count)
  shared     size of .nv.shared.<name> (static shared memory)
  param      size of .nv.constant0.<name> (kernel parameter space)

Matching: by name. Renaming a type renames the mangled names of the templates that use it
(kernels whose parameters or template arguments have that type), not their code: give
--map OLD=NEW (repeatable; plain substring replacement on the old names, e.g.
--map 21WeaveHopperGemmParams=22weave_hgemm_params_t; mind the length prefix of mangled names).
Functions still unmatched after that are paired by identical code where that is unambiguous and
reported as "matched by code"; the rest are reported as missing / added, and fail.
"""
import signal
import struct
import sys

SHT_REL, SHT_RELA = 9, 4


class Elf:
    def __init__(self, path):
        with open(path, "rb") as f:
            self.b = f.read()
        b = self.b
        if b[:4] != b"\x7fELF" or b[4] != 2 or b[5] != 1:
            raise ValueError(f"{path}: not a little-endian ELF64 file")
        (self.shoff,) = struct.unpack_from("<Q", b, 0x28)
        self.shentsize, self.shnum, self.shstrndx = struct.unpack_from("<HHH", b, 0x3A)
        self.sec = []
        for i in range(self.shnum):
            o = self.shoff + i * self.shentsize
            name, typ, flags, addr, off, size, link, info, align, entsize = struct.unpack_from(
                "<IIQQQQIIQQ", b, o)
            self.sec.append(dict(name_off=name, type=typ, flags=flags, off=off, size=size, link=link,
                                 info=info, entsize=entsize))
        strtab = self.sec[self.shstrndx]
        for s in self.sec:
            s["name"] = self.cstr(strtab["off"] + s["name_off"])
        self.by_name = {s["name"]: s for s in self.sec}
        self.syms = self._symbols()

    def cstr(self, o):
        return self.b[o:self.b.index(b"\0", o)].decode("latin-1")

    def data(self, s):
        return self.b[s["off"]:s["off"] + s["size"]] if s["type"] != 8 else b""  # 8: NOBITS

    def _symbols(self):
        st = next((s for s in self.sec if s["type"] == 2), None)  # SHT_SYMTAB
        if st is None:
            return []
        strs = self.sec[st["link"]]
        out = []
        for i in range(st["size"] // 24):
            name, info, other, shndx, value, size = struct.unpack_from("<IBBHQQ", self.b, st["off"] + 24 * i)
            out.append(self.cstr(strs["off"] + name))
        return out

    def relocs(self, target):
        out = []
        for s in self.sec:
            if s["type"] not in (SHT_REL, SHT_RELA) or self.sec[s["info"]]["name"] != target:
                continue
            ent = 24 if s["type"] == SHT_RELA else 16
            for i in range(s["size"] // ent):
                o = s["off"] + ent * i
                off, inf = struct.unpack_from("<QQ", self.b, o)
                add = struct.unpack_from("<q", self.b, o + 16)[0] if ent == 24 else 0
                sym = inf >> 32
                out.append((off, inf & 0xFFFFFFFF, add, self.syms[sym] if sym < len(self.syms) else sym))
        return sorted(out)

    def global_info(self):
        """{symbol name: {attr: value}} for the per-function attributes of .nv.info."""
        s = self.by_name.get(".nv.info")
        res = {}
        if not s:
            return res
        d, i = self.data(s), 0
        names = {0x11: "frame", 0x12: "min_stack", 0x23: "max_stack", 0x2F: "regcount"}
        while i + 4 <= len(d):
            fmt, attr = d[i], d[i + 1]
            if fmt == 0x04:  # EIFMT_SVAL: u16 size, payload
                (size,) = struct.unpack_from("<H", d, i + 2)
                payload = d[i + 4:i + 4 + size]
                i += 4 + size
                if attr in names and size == 8:
                    sym, val = struct.unpack_from("<II", payload)
                    key = self.syms[sym] if sym < len(self.syms) else sym
                    res.setdefault(key, {})[names[attr]] = val
            else:  # NVAL / BVAL / HVAL: 4 bytes in all
                i += 4
        return res


def functions(e):
    gi = e.global_info()
    out = {}
    for s in e.sec:
        n = s["name"]
        if not n.startswith(".text."):
            continue
        f = n[len(".text."):]
        info = e.by_name.get(".nv.info." + f)
        shared = e.by_name.get(".nv.shared." + f)
        param = e.by_name.get(".nv.constant0." + f)
        out[f] = dict(
            code=e.data(s),
            relocs=e.relocs(n),
            flags=s["flags"],
            info=e.data(info) if info else b"",
            regs=gi.get(f, {}),
            shared=shared["size"] if shared else 0,
            param=param["size"] if param else 0,
        )
    return out


def diff(a, b):
    return [k for k in ("code", "relocs", "flags", "info", "regs", "shared", "param") if a[k] != b[k]]


def main(argv):
    maps, quiet, files = [], False, []
    it = iter(argv)
    for a in it:
        if a == "--map":
            old, _, new = next(it).partition("=")
            maps.append((old, new))
        elif a.startswith("--map="):
            old, _, new = a[6:].partition("=")
            maps.append((old, new))
        elif a in ("-q", "--quiet"):
            quiet = True
        elif a in ("-h", "--help"):
            print(__doc__)
            return 0
        else:
            files.append(a)
    if len(files) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    try:
        old, new = functions(Elf(files[0])), functions(Elf(files[1]))
    except (OSError, ValueError) as ex:
        print(f"sass_diff: {ex}", file=sys.stderr)
        return 2

    def mapped(n):
        for o, w in maps:
            n = n.replace(o, w)
        return n

    pairs, left = [], []
    unused = set(new)
    for n in old:
        m = mapped(n)
        if m in unused:
            pairs.append((n, m, "name"))
            unused.discard(m)
        else:
            left.append(n)
    still = []
    for n in left:  # pair by identical code where exactly one candidate is left
        cand = [m for m in unused if new[m]["code"] == old[n]["code"]]
        if len(cand) == 1:
            pairs.append((n, cand[0], "code"))
            unused.discard(cand[0])
        else:
            still.append(n)

    bad = same = 0
    for n, m, how in sorted(pairs):
        d = diff(old[n], new[m])
        if "relocs" in d:  # the same relocations once the old symbol names are mapped
            named = [r[:3] + (mapped(r[3]) if isinstance(r[3], str) else r[3],) for r in old[n]["relocs"]]
            if named == new[m]["relocs"]:
                d.remove("relocs")
        if d:
            bad += 1
        else:
            same += 1
        if d or not quiet:
            tag = "identical" if not d else "DIFFERS in " + ", ".join(d)
            via = "" if n == m else f"  (new: {m}, matched by {how})"
            regs = old[n]["regs"].get("regcount", "-")
            print(f"{tag:<12} {len(old[n]['code']):>7} B {regs:>4} regs  {n}{via}")
    for n in sorted(still):
        bad += 1
        print(f"MISSING      {len(old[n]['code']):>7} B  only in {files[0]}: {n}")
    for m in sorted(unused):
        bad += 1
        print(f"ADDED        {len(new[m]['code']):>7} B  only in {files[1]}: {m}")
    print(f"sass_diff: {same} of {len(old)} functions identical, {bad} problem(s): {files[0]} -> {files[1]}")
    return 1 if bad else 0


if __name__ == "__main__":
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # quiet under `| head`
    sys.exit(main(sys.argv[1:]))
