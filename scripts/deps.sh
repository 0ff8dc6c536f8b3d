#!/usr/bin/env bash
# What the build needs, installed with apt-get where it is missing, as root, on Debian/Ubuntu; every
# install is announced on a line of its own before apt-get runs. WEAVE_NO_INSTALL=1 installs
# nothing: a missing requirement then stops the script with what to install. The CUDA toolkit is
# expected at /usr/local/cuda; without it weave builds its host parts only.
set -euo pipefail
can_install() { [ "${WEAVE_NO_INSTALL:-0}" != 1 ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; }
need=()
command -v cmake >/dev/null || need+=(cmake)
command -v cc >/dev/null || need+=(gcc)
command -v c++ >/dev/null || need+=(g++)
command -v make >/dev/null || need+=(make)
if [ ${#need[@]} -gt 0 ]; then
  if can_install; then
    echo "weave: installing ${need[*]} with apt-get (the build needs them; WEAVE_NO_INSTALL=1 to install them yourself)" >&2
    apt-get update -qq && apt-get install -y -qq "${need[@]}"
  else
    echo "weave: please install: ${need[*]}" >&2; exit 1
  fi
fi

# Optional: Open MPI, for libweave_mpi (weave_bootstrap_create_mpi) and its test. Never fails the
# script: weave builds without MPI, and a machine without network (the GPU machine, which has Open
# MPI already) must still get through here.
if ! command -v mpicc >/dev/null; then
  if can_install; then
    echo "weave: installing libopenmpi-dev and openmpi-bin with apt-get (optional: for libweave_mpi; WEAVE_NO_INSTALL=1 to skip)" >&2
    if { timeout 300 apt-get update -qq && DEBIAN_FRONTEND=noninteractive timeout 600 apt-get install -y -qq \
           --no-install-recommends libopenmpi-dev openmpi-bin; } >/dev/null 2>&1 && command -v mpicc >/dev/null; then
      echo "weave: installed Open MPI: libweave_mpi and test_bootstrap_mpi will be built"
    else
      echo "weave: note: could not install Open MPI (no network?): libweave_mpi is not built" >&2
    fi
  else
    echo "weave: note: no mpicc: libweave_mpi is not built (install libopenmpi-dev and openmpi-bin for it)" >&2
  fi
fi

# Optional: clang-format 14, for scripts/lint.sh's formatting check (it says so and skips without).
if ! command -v clang-format-14 >/dev/null && ! command -v clang-format >/dev/null; then
  if can_install; then
    echo "weave: installing clang-format with apt-get (optional: scripts/lint.sh checks the C/CUDA layout; WEAVE_NO_INSTALL=1 to skip)" >&2
    { timeout 300 apt-get update -qq && DEBIAN_FRONTEND=noninteractive timeout 300 apt-get install -y -qq \
        --no-install-recommends clang-format; } >/dev/null 2>&1 ||
      echo "weave: note: could not install clang-format (no network?): formatting is not checked" >&2
  else
    echo "weave: note: no clang-format: formatting is not checked (install clang-format 14 for it)" >&2
  fi
fi
