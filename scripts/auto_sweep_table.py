#!/usr/bin/env python3
"""auto against the best of baseline / fused / bulk, from weave-bench's text output.

  auto_sweep_table.py LOG...      the markdown table of docs/performance.md from device_run.sh autosweep logs

Per (dtype, ranks, M): the median times of the baseline, the deterministic fused kernel with the
default slots, bulk and auto (what it ran, how it chose), auto's ratio best / auto (>= 0.98 is the
goal), the choice's ratio best / (the row of the strategy auto ran: 1.000 where auto ran the fastest;
the gap between the two ratios is the spread between two plans of one strategy), and the first
call's extra time: the time auto spent choosing at plan creation (weave-bench's "# auto -> ...,
measured in X ms" line; 0 where a cached entry or the model chose). Below the table: how many rows
reach 0.98 by either ratio.
"""
import re
import sys

HEADER = re.compile(r"^# weave-bench .*?\s(bf16|fp16|fp8_e4m3|fp8_e5m2)\b")
RANKS = re.compile(r"\branks (\d+) ")
ROW = re.compile(r"^\s+(\d+) (\S+)\s+\d+\s+\d+\s+([0-9.]+)\s")
AUTO = re.compile(r"^# auto -> (\S+?), (measured|cached|model)\S*(?: in ([0-9.]+) ms)?")


def kind(label):
    if label == "baseline" or label.startswith("auto->"):
        return label.split("->")[0]
    if label.startswith("bulk/"):
        return "bulk"
    if label.startswith("fused/det/") and not label.endswith("fp32") and "*" not in label:
        return "fused"
    return None


def parse(paths):
    groups, dtype, ranks, last_m = {}, None, None, None
    for path in paths:
        for line in open(path):
            if m := HEADER.match(line):
                dtype = m.group(1)
            elif line.startswith("# M ") and (m := RANKS.search(line)):
                ranks = int(m.group(1))
            elif m := ROW.match(line):
                last_m = int(m.group(1))
                k = kind(m.group(2))
                if k:
                    g = groups.setdefault((dtype, ranks, last_m), {})
                    g[k] = float(m.group(3))
                    if k == "auto":
                        g["ran"] = m.group(2).split("->")[1]
            elif m := AUTO.match(line):
                g = groups.setdefault((dtype, ranks, last_m), {})
                g["by"], g["extra"] = m.group(2), float(m.group(3) or 0)
    return groups


def table(groups):
    print("| dtype | ranks | M | baseline ms | fused ms | bulk ms | auto ms | auto ran | chosen by | best / auto "
          "| best / ran | choosing ms |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    worst, rows, auto_ok, choice_ok = None, 0, 0, 0
    for key in sorted(groups, key=lambda k: (k[0], k[1], k[2])):
        g = groups[key]
        t = {k: g[k] for k in ("baseline", "fused", "bulk") if k in g}
        if "auto" not in g or not t:
            continue
        best = min(t.values())
        ratio = best / g["auto"]
        ran = t.get(g.get("ran", ""))
        choice = best / ran if ran else None
        worst = ratio if worst is None else min(worst, ratio)
        rows += 1
        auto_ok += ratio >= 0.98
        choice_ok += choice is not None and choice >= 0.98
        cells = [key[0], str(key[1]), str(key[2])] + [f"{t[k]:.3f}" if k in t else "-" for k in ("baseline", "fused", "bulk")]
        cells += [f"{g['auto']:.3f}", g.get("ran", "?"), g.get("by", "?"), f"{ratio:.3f}"]
        cells += [f"{choice:.3f}" if choice is not None else "-", f"{g.get('extra', 0):.0f}"]
        print("| " + " | ".join(cells) + " |")
    if worst is None:
        print("\nno rows")
        return
    print(f"\nworst best/auto: {worst:.3f}")
    print(f"best/auto >= 0.98 on {auto_ok} of {rows} rows; the strategy auto ran within 2% of the fastest on "
          f"{choice_ok} of {rows}")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    table(parse(sys.argv[1:]))
