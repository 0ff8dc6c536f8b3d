"""scripts/hgemm_profile.py on a synthetic stamp file in prof.cuh's layout ([block][4][tile][event],
int64): the producer's slot (3) carries the edges, three consumer warpgroups give wg_spread and
idle_edge and, from their group-end stamps, grp_spread, grp_gap and grp_period, from event 15 the
late stages (consumers) and full rings (producer); two epilogue chunks
(128 columns of 16 bits) count alone; --bk 128 counts fp8's k-blocks. Usage: hgemm_profile_test.py
SCRIPT"""
import os
import re
import struct
import subprocess
import sys
import tempfile

BLOCKS, WHO, TILES, EV = 132, 4, 16, 24
GROUP_EV, GROUPS = 16, 8
PROD = 3
K = 1024  # 8 k-blocks of 128 (fp8)


def main(script):
    v = [0] * (BLOCKS * WHO * TILES * EV)

    def put(b, w, t, e, x):
        v[((b * WHO + w) * TILES + t) * EV + e] = x

    blocks = 2
    for b in range(blocks):
        for t in range(4):
            base = 100000 + 20000 * t
            for w in range(3):
                # warpgroup w ends its main loop 100 * w cycles after warpgroup 0; each tile's first
                # stage is full 10 cycles after its loop top, so the next tile's first full comes
                # 20010 - 16200 = 3810 cycles after this tile's last end
                put(b, w, t, 0, base)
                put(b, w, t, 1, base + 10)
                put(b, w, t, 2, base + 16000 + 100 * w)
                put(b, w, t, 3, base + 16100 + 100 * w)
                put(b, w, t, 4, base + 17000 + 100 * w)
                # two chunks: waits 50 + 100, writes 150 + 200
                for e, dt in ((5, 16150), (6, 16300), (7, 16400), (8, 16600)):
                    put(b, w, t, e, base + dt + 100 * w)
                # group ends: k-block i of warpgroup w at 851 i + 256 w (one after another on the tensor
                # cores: 256 apart, 512 from first to last)
                for i in range(GROUPS):
                    put(b, w, t, GROUP_EV + i, base + 1000 + 851 * i + 256 * w)
                put(b, w, t, 13, base + 17010 + 100 * w)
                # late stages: 2 of the tile's k-blocks, 300 cycles waited
                put(b, w, t, 15, (2 << 32) | 300)
                put(b, w, t, 14, 1000 * (t + 1))
            put(b, PROD, t, 0, base)
            put(b, PROD, t, 1, base + 30)
            put(b, PROD, t, 15, (5 << 32) | 7000)  # 5 refills found their stage not yet released
        put(b, PROD, TILES - 1, 0, 5000)  # entry: globaltimer ns, clock
        put(b, PROD, TILES - 1, 1, 10000)
        put(b, PROD, TILES - 1, 2, 5000 + 100000)  # exit after 100 us at 1 GHz
        put(b, PROD, TILES - 1, 3, 10000 + 100000)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, f"prof_8192x8192x{K}_{blocks}.bin")
        with open(path, "wb") as f:
            f.write(struct.pack(f"<{len(v)}q", *v))
        out = subprocess.run([sys.executable, script, "--bk", "128", path], capture_output=True, text=True,
                             check=True).stdout
    print(out)
    row = {m.group(1): float(m.group(2)) for m in re.finditer(r"^\s+(\w+)\s+median\s+(\S+)", out, re.MULTILINE)}
    checks = [
        ("8 k-blocks at --bk 128", "K=1024 (8 k-blocks)" in out),
        ("tiles per block 4..4 (three consumer warpgroups)", "tiles per block 4..4" in out),
        ("wg_spread 200", row.get("wg_spread") == 200.0),
        ("idle_edge 3810", row.get("idle_edge") == 3810.0),
        ("mainloop: the middle warpgroup's 16090", row.get("mainloop") == 16090.0),
        ("edges from the producer's slot: 100 us, 1 GHz", "first entry -> last exit 100.0 us" in out
         and "SM clock 1.000 GHz" in out),
        ("producer empty wait 30", row.get("prod_empty_wait") == 30.0),
        ("chunk_wait 150 over the two chunks", row.get("chunk_wait") == 150.0),
        ("chunk_write 350 over the two chunks", row.get("chunk_write") == 350.0),
        ("grp_spread 512", row.get("grp_spread") == 512.0),
        ("grp_gap 256", row.get("grp_gap") == 256.0),
        ("grp_period 851", row.get("grp_period") == 851.0),
        ("late_kb 2, late_wait 300", row.get("late_kb") == 2.0 and row.get("late_wait") == 300.0),
        ("ring_full_kb 5, ring_full_wait 7000", row.get("ring_full_kb") == 5.0 and row.get("ring_full_wait") == 7000.0),
    ]
    bad = [name for name, ok in checks if not ok]
    for name in bad:
        print("FAIL:", name)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
