#!/usr/bin/env bash
# Builds weave-bench once per compile-time variant here, for a device call to carry and time them
# against each other with nothing built on the GPU machine (a device build of several variants
# costs minutes of device time; these binaries link weave statically, ~14 MB each, and a call
# carries 64 MiB at most). Each variant builds from a clean worktree of REV (default HEAD), so edits
# made in the working tree meanwhile do not leak into a build half way.
#   VARIANTS="base=;st5=-DWEAVE_HGEMM_P3_STAGES=5 -DWEAVE_HGEMM_EPI_BUFS=1" scripts/build_variants.sh [REV]
#   then on the device, carrying [".variants"]:
#   FP8_ACCUM=fast FP8_AB="base=.variants/base st5=.variants/st5" scripts/device_run.sh fp8ab
# VARIANTS: "label=CUDA flags" entries, ';' between them; OUTDIR: where <label>/weave-bench goes
# (default .variants, which git ignores); JOBS: parallel compile jobs (default: the CPUs).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
rev=${1:-HEAD}
outdir=${OUTDIR:-$root/.variants}
jobs=${JOBS:-$(nproc)}
[ -n "${VARIANTS:-}" ] || { echo "usage: VARIANTS=\"label=flags;...\" $0 [REV]" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'git -C "$root" worktree remove --force "$tmp/src" >/dev/null 2>&1 || true; rm -rf "$tmp"' EXIT
git -C "$root" worktree add -q --detach "$tmp/src" "$rev"
IFS=';' read -ra vs <<< "$VARIANTS"
for v in "${vs[@]}"; do
  label=${v%%=*}
  flags=${v#*=}
  case $label in '' | *[!A-Za-z0-9_.-]*) echo "bad label '$label' (letters, digits, _ . -)" >&2; exit 2 ;; esac
  build=$tmp/build_$label
  log=$tmp/build_$label.log
  if (cmake -S "$tmp/src" -B "$build" -DCMAKE_BUILD_TYPE=Release "-DCMAKE_CUDA_FLAGS=$flags" &&
      cmake --build "$build" -j "$jobs" --target weave-bench) > "$log" 2>&1; then
    mkdir -p "$outdir/$label"
    cp "$build/weave-bench" "$outdir/$label/weave-bench"
    echo "variant $label ($rev${flags:+, $flags}): $outdir/$label/weave-bench"
  else
    echo "variant $label: build FAILED" >&2
    tail -n 20 "$log" >&2
    exit 1
  fi
done
