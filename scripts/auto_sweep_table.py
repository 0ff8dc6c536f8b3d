#!/usr/bin/env python3
"""auto against the best of baseline / fused / bulk, from weave-bench --json rows.

  auto_sweep_table.py --merge OUT.json FILE.json...   rows of files named autosweep_<dtype>_g<ranks>_*.json,
                                                       tagged with dtype and ranks, into one file
  auto_sweep_table.py OUT.json                         the markdown table of docs/performance.md

Per (dtype, ranks, M): the median times of the baseline, the deterministic fused kernel with the
default slots, bulk and auto (what it ran, how it chose), auto's ratio best / auto (>= 0.98 is the
goal), and the first call's extra time: auto's plan creation less that of an explicit plan of the
strategy it chose.
"""
import json
import re
import sys


def kind(label):
    if label == "baseline":
        return "baseline"
    if label == "auto":
        return "auto"
    if label.startswith("bulk/"):
        return "bulk"
    if label.startswith("fused/det/") and not label.endswith("fp32") and "*" not in label:
        return "fused"
    return None


def merge(out, files):
    rows = []
    for f in files:
        m = re.search(r"autosweep_([a-z0-9]+)_g(\d+)_", f)
        for r in json.load(open(f)):
            r["dtype"], r["ranks"] = m.group(1), int(m.group(2))
            rows.append(r)
    json.dump(rows, open(out, "w"), indent=0)


def table(path):
    rows = json.load(open(path))
    groups = {}
    for r in rows:
        k = kind(r["strategy"])
        if k:
            groups.setdefault((r["dtype"], r["ranks"], r["M"]), {})[k] = r
    print("| dtype | ranks | M | baseline ms | fused ms | bulk ms | auto ms | auto ran | chosen by | best / auto | first call extra ms |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    worst = None
    for key in sorted(groups, key=lambda k: (k[0], k[1], k[2])):
        g = groups[key]
        a = g.get("auto")
        t = {k: g[k]["time_ms"] for k in ("baseline", "fused", "bulk") if k in g}
        if not a or not t:
            continue
        best = min(t.values())
        ratio = best / a["time_ms"]
        worst = ratio if worst is None else min(worst, ratio)
        chosen = a.get("auto_strategy", "?")
        same = {"baseline": "baseline", "fused": "fused", "bulk": "bulk"}.get(chosen)
        extra = a["create_ms"] - g[same]["create_ms"] if same in g else float("nan")
        cells = [key[0], str(key[1]), str(key[2])] + [f"{t[k]:.3f}" if k in t else "-" for k in ("baseline", "fused", "bulk")]
        cells += [f"{a['time_ms']:.3f}", chosen, a.get("chosen_by", "?"), f"{ratio:.3f}", f"{extra:.0f}"]
        print("| " + " | ".join(cells) + " |")
    print(f"\nworst best/auto: {worst:.3f}" if worst is not None else "\nno rows")


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--merge":
        merge(sys.argv[2], sys.argv[3:])
    elif len(sys.argv) == 2:
        table(sys.argv[1])
    else:
        sys.exit(__doc__)
