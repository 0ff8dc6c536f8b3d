"""Summaries of Nsight Compute CSV output for scripts/device_run.sh fp8ncu.

  ncu_fp8.py raw FILE...   per kernel of each `ncu --csv --page raw` file: its metrics, one a line
  ncu_fp8.py sass FILE     from `ncu --import R --page source --csv --print-source sass`: the
                           instructions executed at least MIN times (default 100000) with their
                           share of all warp stall samples, in program order
"""

import csv
import sys


def quoted_rows(path):
    with open(path, newline="", errors="replace") as f:
        return list(csv.reader(ln for ln in f if ln.startswith('"')))


def raw(paths):
    for path in paths:
        rows = quoted_rows(path)
        print(f"## {path.rsplit('/', 1)[-1]}")
        if len(rows) < 3:
            print("  no rows")
            continue
        head, units = rows[0], rows[1]
        for r in rows[2:]:
            d = dict(zip(head, r))
            print("  kernel:", d.get("Kernel Name", "")[:100])
            for h, u, v in zip(head, units, r):
                if "__" in h and not h.startswith("device__"):
                    print(f"    {h} = {v} {u}")


def sass(path, min_exec=100000):
    with open(path, newline="", errors="replace") as f:
        rows = list(csv.reader(f))
    hi = next(i for i, r in enumerate(rows) if "Source" in r)
    head = rows[hi]
    body = [r for r in rows[hi + 1 :] if len(r) == len(head)]
    src, ex = head.index("Source"), head.index("Instructions Executed")
    stall = next(i for i, c in enumerate(head) if c.startswith("Warp Stall Sampling (All"))
    total = sum(float(r[stall] or 0) for r in body) or 1.0
    hot = [r for r in body if float(r[ex] or 0) >= min_exec]
    print(f"instructions {len(body)}, executed >= {min_exec}: {len(hot)}")
    for r in hot:
        print(f"{float(r[ex]):10.0f} {100 * float(r[stall] or 0) / total:5.1f}% {r[src][:90]}")


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "raw":
        raw(sys.argv[2:])
    elif len(sys.argv) in (3, 4) and sys.argv[1] == "sass":
        sass(sys.argv[2], int(sys.argv[3]) if len(sys.argv) == 4 else 100000)
    else:
        sys.exit(__doc__)
