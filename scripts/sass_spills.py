#!/usr/bin/env python3
"""Where do a kernel's spills sit? Reads `cuobjdump -sass` output on stdin and prints, per kernel
matching argv[1] (a substring), the local-memory spill instructions (STL/LDL) counted by region:
inside a main loop (between two wgmma of one run of them: HGMMA for 16-bit, QGMMA for fp8), else
after which landmark they come (the last wgmma, TMA store, barrier...). A diagnostic for ptxas's
'bytes spill' report. Where the CUDA install lacks cuobjdump and nvdisasm (the CPU machines' does),
PyPI's wheels nvidia-cuda-cuobjdump and nvidia-cuda-nvdisasm hold them (`pip download --no-deps`,
unzip, their nvidia/cu13/bin on PATH)."""
import re, sys

want = sys.argv[1] if len(sys.argv) > 1 else ""
func, body = None, []
funcs = []
for line in sys.stdin:
    m = re.search(r"Function : (\S+)", line)
    if m:
        if func: funcs.append((func, body))
        func, body = m.group(1), []
        continue
    m = re.search(r"/\*[0-9a-f]{4,}\*/\s+(@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]+)", line)
    if m and func: body.append(m.group(2))
if func: funcs.append((func, body))
land = ("HGMMA", "QGMMA", "UTMASTG", "UTMALDG", "BAR", "SYNCS", "WARPGROUP", "USETMAXREG", "RED", "ATOM", "EXIT")
for name, ops in funcs:
    if want not in name: continue
    spills = [i for i, o in enumerate(ops) if o.startswith(("STL", "LDL"))]
    hg = [i for i, o in enumerate(ops) if o.startswith(("HGMMA", "QGMMA"))]
    inside = sum(1 for i in spills if any(a < i < b and b - a < 400 for a, b in zip(hg, hg[1:])))
    after = {}
    for i in spills:
        k = next((ops[j].split(".")[0] for j in range(i - 1, -1, -1) if ops[j].startswith(land)), "start")
        after[k] = after.get(k, 0) + 1
    print(f"{name[:90]}: {len(ops)} instr, {len(hg)} wgmma, {len(spills)} STL/LDL, {inside} inside main loops; "
          f"after: {after}")
