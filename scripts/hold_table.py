#!/usr/bin/env python3
"""The SM clock and power each kernel ran at, from weave-bench --op gemm --hold and nvidia-smi.

  hold_table.py SMI_CSV LOG...

SMI_CSV: `nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,clocks_event_reasons.active
--format=csv,noheader,nounits -lms 100` taken while the bench ran (the machine's clock in UTC).
LOG: weave-bench's output with its "# hold ..." lines (each a kernel's rate over its wall-clock span).
Per hold line: the rate, and the medians of the samples inside its span, its first half second left
out (the clock settles); nvidia-smi's local time is moved by the whole hours that put the most
samples inside the spans. Under the power cap the rate follows the clock the kernel's own draw allows.
"""
import datetime
import re
import statistics
import sys

HOLD = re.compile(r"^# hold (\S+) +(\S+) .*: ([0-9.]+) TFLOP/s, wall ([0-9.]+)-([0-9.]+) ms")


def samples(path):
    out = []
    with open(path) as fh:
        lines = fh.readlines()
    for line in lines:
        f = [x.strip() for x in line.split(",")]
        try:
            t = datetime.datetime.strptime(f[0], "%Y/%m/%d %H:%M:%S.%f")
            ms = t.replace(tzinfo=datetime.timezone.utc).timestamp() * 1e3
            out.append((ms, float(f[1]), float(f[2]), f[3]))
        except (ValueError, IndexError):
            continue
    return out


def main(argv):
    if len(argv) < 3:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    smp = samples(argv[1])
    holds = []
    for log in argv[2:]:
        with open(log) as fh:
            holds += [(log, m) for m in map(HOLD.match, fh.readlines()) if m]
    # nvidia-smi prints local time: the whole-hour offset that puts the most samples inside the spans
    spans = [(float(m.group(4)), float(m.group(5))) for _, m in holds]

    def inside(shift):
        return sum(1 for x in smp for lo, hi in spans if lo <= x[0] + shift <= hi)

    shift = max((h * 3600e3 for h in range(-14, 15)), key=lambda d: (inside(d), -abs(d)), default=0.0)
    smp = [(x[0] + shift, *x[1:]) for x in smp]
    print("| log | shape | kernel | TFLOP/s | SM clock (MHz) | power (W) | clock event reasons | samples |")
    print("|---|---|---|---|---|---|---|---|")
    for log, m in holds:
        lo, hi = float(m.group(4)) + 500, float(m.group(5))
        s = [x for x in smp if lo <= x[0] <= hi]
        if not s:
            print(f"| {log} | {m.group(1)} | {m.group(2)} | {m.group(3)} | - | - | no samples in its span | 0 |")
            continue
        clock = statistics.median(x[1] for x in s)
        power = statistics.median(x[2] for x in s)
        reasons = " ".join(sorted(set(x[3] for x in s)))
        row = [log, m.group(1), m.group(2), m.group(3), f"{clock:.0f}", f"{power:.0f}", reasons, str(len(s))]
        print("| " + " | ".join(row) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
