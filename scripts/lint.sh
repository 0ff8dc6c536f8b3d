#!/usr/bin/env bash
# Formatting and lint, run by scripts/test.sh: every C/CUDA file of the tree against .clang-format
# (clang-format 14, Debian 12's: other versions lay out some constructs differently, so they are not
# used to check) and the Python package and examples with ruff (its rules in python/pyproject.toml). A missing tool
# is named and its check skipped; a file that does not conform fails. Fix with
#   clang-format -i FILE...     ruff check --fix python
set -euo pipefail
cd "$(dirname "$0")/.."
rc=0
mapfile -t files < <(git ls-files '*.c' '*.h' '*.cu' '*.cuh' 2>/dev/null ||
                     find include src tests tools examples \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \))
cf=$(command -v clang-format-14 || command -v clang-format || true)
if [ -z "$cf" ]; then
  echo "lint: no clang-format: C/CUDA formatting not checked (apt-get install clang-format)"
elif ! "$cf" --version | grep -q 'version 14\.'; then
  echo "lint: $("$cf" --version | head -1) is not version 14: C/CUDA formatting not checked"
elif "$cf" --style=file --dry-run --Werror "${files[@]}"; then
  echo "lint: ${#files[@]} C/CUDA files formatted as .clang-format says"
else
  echo "lint: the files above differ from .clang-format (clang-format -i FILE...)"; rc=1
fi
python=${WEAVE_PYTHON:-python3}
if "$python" -m ruff --version >/dev/null 2>&1; then ruff=("$python" -m ruff)
elif command -v ruff >/dev/null; then ruff=(ruff)
else ruff=(); fi
if [ ${#ruff[@]} = 0 ]; then
  echo "lint: no ruff: Python not linted (pip install ruff)"
elif "${ruff[@]}" check --quiet --config python/pyproject.toml python examples; then
  echo "lint: python/ and examples/ pass ruff ($("${ruff[@]}" --version))"
else
  rc=1
fi
exit $rc
