#!/usr/bin/env bash
# Installs what the build needs when it is missing (Debian). The CUDA toolkit is expected at
# /usr/local/cuda; without it weave builds its host parts only.
set -euo pipefail
need=()
command -v cmake >/dev/null || need+=(cmake)
command -v cc >/dev/null || need+=(gcc)
command -v c++ >/dev/null || need+=(g++)
command -v make >/dev/null || need+=(make)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    apt-get update -qq && apt-get install -y -qq "${need[@]}"
  else
    echo "weave: please install: ${need[*]}" >&2; exit 1
  fi
fi
