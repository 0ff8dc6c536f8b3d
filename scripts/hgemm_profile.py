#!/usr/bin/env python3
"""Reads the clock64() stamps of a WEAVE_HGEMM_PROFILE build (weave-bench --op gemm with
WEAVE_HGEMM_PROFILE_DIR set writes prof_MxNxK_B.bin, one cooperative launch per row) and prints where a
tile's cycles go: medians over every (block, consumer warpgroup, tile) but each block's first tile.
Usage: scripts/hgemm_profile.py prof_*.bin"""
import re, statistics, struct, sys

BLOCKS, WHO, TILES, EV = 132, 3, 16, 16  # gemm_hopper.cuh WEAVE_HG_PROF_*

def load(path):
    raw = open(path, "rb").read()
    v = struct.unpack("<%dq" % (len(raw) // 8), raw)
    return lambda b, w, t, e: v[((b * WHO + w) * TILES + t) * EV + e]

def med(xs):
    return statistics.median(xs) if xs else float("nan")

for path in sys.argv[1:]:
    m = re.search(r"prof_(\d+)x(\d+)x(\d+)_(\d+)\.bin", path)
    K = int(m.group(3)) if m else 0
    kt = max(1, (K + 63) // 64)
    at = load(path)
    rows = {k: [] for k in ("first_full", "mainloop", "per_kblock", "to_epi", "epilogue", "chunk_wait",
                             "chunk_write", "tail_bar", "gap_next", "tile", "prod_empty_wait")}
    ntiles = []
    for b in range(BLOCKS):
        for w in (0, 1):
            n = 0
            while n < TILES and at(b, w, n, 0):
                n += 1
            ntiles.append(n)
            for t in range(1, n):
                e = [at(b, w, t, i) for i in range(EV)]
                rows["first_full"].append(e[1] - e[0])
                rows["mainloop"].append(e[2] - e[1])
                rows["per_kblock"].append((e[2] - e[1]) / kt)
                rows["to_epi"].append(e[3] - e[2])
                rows["epilogue"].append(e[4] - e[3])
                rows["chunk_wait"].append(sum(e[5 + 2 * c] - (e[4 + 2 * c] if c else e[3]) for c in range(4)))
                rows["chunk_write"].append(sum(e[6 + 2 * c] - e[5 + 2 * c] for c in range(4)))
                rows["tail_bar"].append(e[13] - e[4])
                if t + 1 < n:
                    rows["gap_next"].append(at(b, w, t + 1, 0) - e[13])
                    rows["tile"].append(at(b, w, t + 1, 0) - e[0])
        for t in range(1, TILES - 1):  # the producer's last slot holds the block's entry / exit
            if at(b, 2, t, 0):
                rows["prod_empty_wait"].append(at(b, 2, t, 1) - at(b, 2, t, 0))
    print("%s: K=%d (%d k-blocks), tiles per block %d..%d" % (path, K, kt, min(ntiles), max(ntiles)))
    edge = [[at(b, 2, TILES - 1, i) for i in range(4)] for b in range(BLOCKS)]
    edge = [e for e in edge if e[0] and e[2]]
    if edge:
        t0 = min(e[0] for e in edge)
        ent = sorted(e[0] - t0 for e in edge)
        ext = sorted(e[2] - t0 for e in edge)
        ghz = [(e[3] - e[1]) / (e[2] - e[0]) for e in edge]
        print("  kernel (globaltimer): first entry -> last exit %.1f us; entries spread %.1f us (median %.1f);"
              " exits %.1f..%.1f us (median %.1f); SM clock %.3f GHz (median over blocks)"
              % (ext[-1] / 1e3, ent[-1] / 1e3, ent[len(ent) // 2] / 1e3, ext[0] / 1e3, ext[-1] / 1e3,
                 ext[len(ext) // 2] / 1e3, statistics.median(ghz)))
        body = [e[2] - e[0] for e in edge]
        print("  block entry -> exit median %.1f us, max %.1f us" % (statistics.median(body) / 1e3, max(body) / 1e3))
    for k, xs in rows.items():
        print("  %-16s median %9.1f  mean %9.1f  n=%d" % (k, med(xs), statistics.fmean(xs) if xs else 0, len(xs)))
