#!/usr/bin/env python3
"""Reads the clock64() stamps of a WEAVE_HGEMM_PROFILE build (weave-bench --op gemm with
WEAVE_HGEMM_PROFILE_DIR set writes prof_MxNxK_B.bin, one cooperative launch per row) and prints where a
tile's cycles go: medians over every (block, consumer warpgroup, tile) but each block's first tile.
With --timeline: per block, when each item (tile or stream-K piece) starts and when the block exits
(globaltimer), and what a stream-K tail costs beyond its main loops: the last segment's wait-free
reads of the others' partials, the other segments' partial writes (docs/hopper_gemm.md, session 8).
fp8 runs 128 of K a k-block: pass --bk 128 (the default, 64, is the 16-bit types'). For the
three-warpgroup fp8 role, wg_spread is how far apart (max - min) its three warpgroups end a tile's
main loop, and idle_edge how long after the last of them ends it the first starts the next tile; over
the k-blocks it stamps (prof.cuh: 8 from k-block 8), grp_spread is how far apart the three
warpgroups' groups of one k-block end, grp_gap the shortest time between two of those ends (about a
group's 256 cycles where the tensor cores run the queued groups one after another, near 0 where they
end together) and grp_period a warpgroup's time from one group's end to its next; late_kb and
late_wait how many of a tile's k-blocks found their stage still on its way after the adds and the
cycles a warpgroup then waited for them, ring_full_kb and ring_full_wait the same for the producer
finding the stage it refills not yet released (a tile's sums; a look is an mbarrier.try_wait, which
suspends for a while itself, so they count only waits longer than that).
Usage: scripts/hgemm_profile.py [--bk 128] [--timeline] prof_*.bin"""
import re, statistics, struct, sys

BLOCKS, WHO, TILES, EV = 132, 4, 16, 24  # src/gemm/hopper/prof.cuh WEAVE_HGEMM_PROF_*
GROUP_EV, GROUPS = 16, 8  # WEAVE_HGEMM_PROF_GROUP_EV, WEAVE_HGEMM_PROF_GROUPS
LATE_EV = 15  # WEAVE_HGEMM_PROF_LATE_EV: count << 32 | cycles
PROD = 3  # WEAVE_HGEMM_PROF_PRODUCER: consumer warpgroups are 0, 1 and (three-warpgroup fp8 role) 2

def load(path):
    raw = open(path, "rb").read()
    v = struct.unpack("<%dq" % (len(raw) // 8), raw)
    return lambda b, w, t, e: v[((b * WHO + w) * TILES + t) * EV + e]

def med(xs):
    return statistics.median(xs) if xs else float("nan")

def launch(path):
    """K, k-blocks a tile and blocks of a launch, from the file's name (prof_MxNxK_blocks.bin); rows
    past the launch's blocks are stale"""
    m = re.search(r"prof_(\d+)x(\d+)x(\d+)_(\d+)\.bin", path)
    K = int(m.group(3)) if m else 0
    return K, max(1, (K + BK - 1) // BK), min(BLOCKS, int(m.group(4))) if m else BLOCKS

def timeline(path):
    """Per-block item starts and exits; stream-K fixup costs (items past the data-parallel rounds)."""
    K, kt, B = launch(path)
    at = load(path)
    t0 = min(at(b, PROD, TILES - 1, 0) for b in range(B))
    rows = []
    for b in range(B):
        items = []  # a slot of an earlier launch (the array keeps the last write) starts before its predecessor
        for t in range(TILES):
            if not at(b, 0, t, 0) or (items and at(b, 0, t, 14) < at(b, 0, items[-1], 14)):
                break
            items.append(t)
        rows.append((b, items, (at(b, PROD, TILES - 1, 2) - t0) / 1e3))
    print("%s: %d blocks, %d k-blocks a tile" % (path, B, kt))
    for b, items, ex in rows[:4] + rows[-2:]:
        print("  block %3d exit %7.1f us | " % (b, ex) + " ".join(
            "%.1f%s(%dk)" % ((at(b, 0, t, 14) - t0) / 1e3, "E" if at(b, 0, t, 4) else "-",
                             (at(b, 0, t, 2) - at(b, 0, t, 1)) // 1000) for t in items))
    print("  (item start in us, E: ran the epilogue, -: wrote a partial; main loop in k cycles)")
    ex = sorted(r[2] for r in rows)
    print("  exits (us): min %.1f median %.1f max %.1f" % (ex[0], ex[len(ex) // 2], ex[-1]))
    reads, writes, per_kb = [], [], []
    for b, items, _ in rows:
        for i, t in enumerate(items):
            e = [at(b, 0, t, k) for k in range(EV)]
            kbs = (e[2] - e[1]) / 1026.0  # ~k-blocks of this item (a k-block is ~1,026 cycles)
            if kbs > kt - 0.5:
                per_kb.append((e[2] - e[1]) / kt)
                continue
            if e[4] and 0 < e[3] - e[2] < 10 ** 6:  # last segment: main loop end -> epilogue start = flag + reads
                reads.append(e[3] - e[2])
            elif i + 1 < len(items):  # not last: main loop end -> next item = its partial written
                writes.append(at(b, 0, items[i + 1], 0) - e[2])
    for name, xs in (("whole-tile cycles per k-block", per_kb), ("split tile, last segment: reads", reads),
                     ("split tile, other segments: partial write", writes)):
        if xs:
            print("  %-42s median %7.0f  max %7.0f  n=%d" % (name, med(xs), max(xs), len(xs)))

BK = 64
if sys.argv[1:2] == ["--bk"]:
    BK = int(sys.argv[2])
    del sys.argv[1:3]

if sys.argv[1:2] == ["--timeline"]:
    for path in sys.argv[2:]:
        timeline(path)
    sys.exit(0)

for path in sys.argv[1:]:
    K, kt, B = launch(path)
    at = load(path)
    rows = {k: [] for k in ("first_full", "mainloop", "per_kblock", "to_epi", "epilogue", "chunk_wait",
                             "chunk_write", "tail_bar", "gap_next", "tile", "prod_empty_wait", "wg_spread",
                             "idle_edge", "grp_spread", "grp_gap", "grp_period", "late_kb", "late_wait",
                             "ring_full_kb", "ring_full_wait")}
    ntiles = []
    for b in range(B):
        for w in (0, 1, 2):
            n = 0
            while n < TILES and at(b, w, n, 0):
                n += 1
            if w == 2 and n == 0:  # the cooperative role's two consumer warpgroups
                continue
            ntiles.append(n)
            for t in range(1, n):
                e = [at(b, w, t, i) for i in range(EV)]
                rows["first_full"].append(e[1] - e[0])
                rows["mainloop"].append(e[2] - e[1])
                rows["per_kblock"].append((e[2] - e[1]) / kt)
                rows["to_epi"].append(e[3] - e[2])
                rows["epilogue"].append(e[4] - e[3])
                chunks = [c for c in range(4) if e[5 + 2 * c] and e[6 + 2 * c]]  # 128 columns of 16 bits: 2
                rows["chunk_wait"].append(sum(e[5 + 2 * c] - (e[4 + 2 * c] if c else e[3]) for c in chunks))
                rows["chunk_write"].append(sum(e[6 + 2 * c] - e[5 + 2 * c] for c in chunks))
                g = [e[GROUP_EV + i] for i in range(GROUPS)]
                rows["grp_period"] += [y - x for x, y in zip(g, g[1:]) if x and y]
                rows["tail_bar"].append(e[13] - e[4])
                if w == 2 or at(b, 2, t, 0):  # the three-warpgroup role stamps its late stages
                    rows["late_kb"].append(e[LATE_EV] >> 32)
                    rows["late_wait"].append(e[LATE_EV] & 0xFFFFFFFF)
                if t + 1 < n:
                    rows["gap_next"].append(at(b, w, t + 1, 0) - e[13])
                    rows["tile"].append(at(b, w, t + 1, 0) - e[0])
        for t in range(1, TILES - 1):  # three warpgroups: how far apart they end a tile, the gap to the next
            if at(b, 2, t, 0) and at(b, 2, t + 1, 0):
                ends = [at(b, w, t, 2) for w in (0, 1, 2)]
                rows["wg_spread"].append(max(ends) - min(ends))
                rows["idle_edge"].append(min(at(b, w, t + 1, 1) for w in (0, 1, 2)) - max(ends))
        for t in range(1, TILES):  # three warpgroups: how their groups of one k-block end
            for i in range(GROUPS):
                ends = sorted(at(b, w, t, GROUP_EV + i) for w in (0, 1, 2))
                if ends[0] and at(b, 2, t, 0):
                    rows["grp_spread"].append(ends[2] - ends[0])
                    rows["grp_gap"].append(min(ends[1] - ends[0], ends[2] - ends[1]))
        for t in range(1, TILES - 1):  # the producer's last slot holds the block's entry / exit
            if at(b, PROD, t, 0):
                rows["prod_empty_wait"].append(at(b, PROD, t, 1) - at(b, PROD, t, 0))
                if at(b, 2, t, 0):
                    rows["ring_full_kb"].append(at(b, PROD, t, LATE_EV) >> 32)
                    rows["ring_full_wait"].append(at(b, PROD, t, LATE_EV) & 0xFFFFFFFF)
    print("%s: K=%d (%d k-blocks), tiles per block %d..%d" % (path, K, kt, min(ntiles), max(ntiles)))
    edge = [[at(b, PROD, TILES - 1, i) for i in range(4)] for b in range(B)]
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
