#!/usr/bin/env bash
# PNG timeline of a weave trace: installs matplotlib (user site) when it is missing, then runs
# scripts/trace_png.py. Usage: scripts/trace_png.sh trace.csv|trace.json out.png [--title TITLE]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
py="${PYTHON:-python3}"
if ! "$py" -c "import matplotlib" >/dev/null 2>&1; then
  echo "trace_png: installing matplotlib (python3 -m pip install --user matplotlib)" >&2
  # Where the system Python is marked externally managed (PEP 668), the user site still is ours.
  "$py" -m pip install --user --quiet matplotlib ||
    "$py" -m pip install --user --quiet --break-system-packages matplotlib || {
      echo "trace_png: could not install matplotlib; install it and run $here/trace_png.py" >&2
      exit 1
    }
fi
exec "$py" "$here/trace_png.py" "$@"
