#!/usr/bin/env python3
"""PNG timeline of a weave per-tile trace.

Reads the CSV written by weave_trace_write_csv (or the Chrome trace JSON of weave_trace_write_json)
and draws one panel per rank, stacked vertically on a shared time axis: block on y, time (us) on x,
one horizontal bar per event coloured by role (GEMM, WAIT, REDUCE, SEND).

Usage: python3 scripts/trace_png.py trace.csv out.png [--title TITLE]
       (scripts/trace_png.sh installs matplotlib first when it is missing)
"""
import argparse
import csv
import json
import sys

ROLES = ["GEMM", "WAIT", "REDUCE", "SEND"]
COLORS = {"GEMM": "#4C72B0", "WAIT": "#C8C8C8", "REDUCE": "#DD8452", "SEND": "#55A868", "ROLE?": "#8172B3"}


def read_csv(path):
    """Returns (title from the '# ' comment line or None, list of (rank, block, role, begin_us, end_us))."""
    title, rows = None, []
    with open(path, newline="") as f:
        lines = []
        for line in f:
            if line.startswith("#"):
                if title is None:
                    title = line[1:].strip() or None
                continue
            lines.append(line)
    for r in csv.DictReader(lines):
        rows.append((int(r["rank"]), int(r["block"]), r["role"], float(r["begin_us"]), float(r["end_us"])))
    return title, rows


def read_json(path):
    with open(path) as f:
        d = json.load(f)
    events = d["traceEvents"] if isinstance(d, dict) else d
    title = d.get("otherData", {}).get("title") if isinstance(d, dict) else None
    rows = []
    for e in events:
        if e.get("ph") != "X":
            continue
        role = e.get("cat") or str(e.get("name", "")).split(" ")[0]
        ts, dur = float(e["ts"]), float(e.get("dur", 0.0))
        rows.append((int(e["pid"]), int(e["tid"]), role, ts, ts + dur))
    return title or None, rows


def read_trace(path):
    with open(path) as f:
        head = f.read(64).lstrip()
    return read_json(path) if head.startswith("{") or head.startswith("[") else read_csv(path)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trace", help="trace CSV (weave_trace_write_csv) or JSON (weave_trace_write_json)")
    ap.add_argument("png", help="output PNG")
    ap.add_argument("--title", default=None, help="figure title (default: the title stored in the trace)")
    ap.add_argument("--dpi", type=int, default=150)
    args = ap.parse_args(argv)

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    stored_title, rows = read_trace(args.trace)
    title = args.title if args.title is not None else (stored_title or args.trace)
    if not rows:
        print(f"trace_png: no events in {args.trace}", file=sys.stderr)
        return 1

    ranks = sorted({r[0] for r in rows})
    blocks = {rk: sorted({r[1] for r in rows if r[0] == rk}) for rk in ranks}
    t_max = max(r[4] for r in rows)
    nb_max = max(len(b) for b in blocks.values())
    # About 0.12 inch per block row, each panel between 1.6 and 8 inches.
    panel_h = min(8.0, max(1.6, 0.12 * nb_max + 0.8))
    panel_h = min(panel_h, max(1.6, 40.0 / len(ranks)))  # keep many ranks within ~40 inches
    fig, axes = plt.subplots(len(ranks), 1, sharex=True, squeeze=False,
                             figsize=(14, panel_h * len(ranks) + 1.0))
    axes = axes[:, 0]
    used_roles = set()
    for ax, rk in zip(axes, ranks):
        # Map block -> row so gaps in block numbers do not leave empty rows.
        row_of = {b: i for i, b in enumerate(blocks[rk])}
        by_role = {}
        for (r, b, role, t0, t1) in rows:
            if r != rk:
                continue
            role = role if role in COLORS else "ROLE?"
            by_role.setdefault(role, {}).setdefault(b, []).append((t0, max(t1 - t0, 0.0)))
        for role in ROLES + ["ROLE?"]:
            for b, bars in by_role.get(role, {}).items():
                ax.broken_barh(bars, (row_of[b] - 0.4, 0.8), facecolors=COLORS[role], edgecolor="none")
                used_roles.add(role)
        # Where the last GEMM tile of this rank ends: everything to its right is the tail.
        gemm_end = [t1 for (r, b, role, t0, t1) in rows if r == rk and role == "GEMM"]
        if gemm_end:
            ax.axvline(max(gemm_end), color="black", linestyle="--", linewidth=0.8)
        nb = len(blocks[rk])
        step = max(1, nb // 16)
        ticks = list(range(0, nb, step))
        ax.set_yticks(ticks)
        ax.set_yticklabels([str(blocks[rk][i]) for i in ticks], fontsize=7)
        ax.set_ylim(nb - 0.5, -0.5)  # block 0 on top
        ax.set_ylabel(f"rank {rk}\nblock")
        ax.set_xlim(0, t_max * 1.01)
        ax.grid(axis="x", linewidth=0.3, alpha=0.5)
    axes[-1].set_xlabel("time (µs)")
    handles = [Patch(facecolor=COLORS[r], label=r) for r in ROLES + ["ROLE?"] if r in used_roles or r in ROLES]
    handles.append(plt.Line2D([0], [0], color="black", linestyle="--", linewidth=0.8, label="last GEMM end"))
    fig.legend(handles=handles, loc="upper right", ncol=len(handles), fontsize=8, frameon=False)
    fig.suptitle(title, x=0.01, ha="left", fontsize=11)
    fig.tight_layout(rect=(0, 0, 1, 0.97))
    fig.savefig(args.png, dpi=args.dpi)
    print(f"trace_png: wrote {args.png} ({len(rows)} events, {len(ranks)} ranks)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
