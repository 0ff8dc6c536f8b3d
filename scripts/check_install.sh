#!/usr/bin/env bash
# Tests the package, not just the build tree: installs build/ into a temporary prefix, builds
# examples/gemm_rs against the installed tree (CMake package, then pkg-config), runs it (exit 77 = no
# GPU = skipped), and checks that libweave.so exports only the public API.
# Usage: scripts/check_install.sh [build-dir]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
prefix=$(mktemp -d /tmp/weave-install.XXXXXX)
work=$(mktemp -d /tmp/weave-example.XXXXXX)
trap 'rm -rf "$prefix" "$work"' EXIT
fail() { echo "check_install: FAILED: $*" >&2; exit 1; }

cmake --install "$build" --prefix "$prefix" >/dev/null
for f in include/weave.h include/weave_version.h include/weave_device.cuh bin/weave-bench; do
  [ -e "$prefix/$f" ] || fail "$f not installed"
done
lib=$(ls -d "$prefix"/lib*/libweave.so 2>/dev/null | head -1)
[ -n "$lib" ] || fail "libweave.so not installed"
libdir=$(dirname "$lib")
[ -e "$libdir/libweave.a" ] || fail "libweave.a not installed"
[ -e "$libdir/pkgconfig/weave.pc" ] || fail "weave.pc not installed"

# The shared library's interface: a SONAME with the version, and only weave_* symbols, each declared
# in a public header (and every function a public header declares is exported).
version=$(sed -n 's/^project(weave VERSION \([0-9.]*\).*/\1/p' CMakeLists.txt)
soname=$(readelf -d "$lib" | sed -n 's/.*SONAME.*\[\(.*\)\]/\1/p')
[ "$soname" = "libweave.so.${version%.*}" ] || fail "SONAME '$soname', expected libweave.so.${version%.*}"
exported=$(nm -D --defined-only "$lib" | awk '{print $3}' | sort)
bad=$(echo "$exported" | grep -v '^weave_' || true)
[ -z "$bad" ] || fail "libweave.so exports symbols outside the API: $(echo $bad | head -c 300)"
declared=$(grep -ho 'WEAVE_API [^(]*\bweave_[a-z0-9_]*(' "$prefix"/include/*.h | grep -o 'weave_[a-z0-9_]*(' | tr -d '(' | sort -u)
[ "$exported" = "$declared" ] || fail "exported and declared API differ: $(diff <(echo "$declared") <(echo "$exported") | tr '\n' ' ')"
echo "check_install: $lib (SONAME $soname) exports $(echo "$exported" | wc -l) symbols, all weave_* and declared"

# "$prefix/bin/weave-bench" --version must say the project's version.
# (outputs are read whole before grep: with pipefail, `cmd | grep -q` fails when grep quits before
# cmd has written everything and cmd dies of SIGPIPE)
bench_version=$("$prefix/bin/weave-bench" --version)
grep -q "weave-bench $version" <<<"$bench_version" || fail "weave-bench --version does not say $version"

# The example against the installed CMake package.
cmake -S examples/gemm_rs -B "$work/cmake" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$work/cmake" >/dev/null
deps=$(ldd "$work/cmake/gemm_rs_example")
grep -q "libweave.so.${version%.*} => $libdir" <<<"$deps" ||
  fail "the example does not load the installed libweave.so: $(grep weave <<<"$deps")"
echo "check_install: examples/gemm_rs built with find_package(weave ${version%.*}) links $(grep -o 'libweave.so[^ ]* => [^ ]*' <<<"$deps")"

# The example through pkg-config (where pkg-config is installed).
if command -v pkg-config >/dev/null; then
  # the CUDA runtime the example calls itself, from the toolkit CMake finds (CUDACXX, PATH, /usr/local/cuda)
  nvcc=${CUDACXX:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
  cuda_root=$(dirname "$(dirname "$(readlink -f "$nvcc")")")
  cuda_inc=$cuda_root/include
  cuda_lib=$cuda_root/lib64
  [ -d "$cuda_lib" ] || cuda_lib=$cuda_root/lib
  PKG_CONFIG_PATH="$libdir/pkgconfig" cc -std=c11 -O2 examples/gemm_rs/main.c -o "$work/example_pc" \
    $(PKG_CONFIG_PATH="$libdir/pkgconfig" pkg-config --cflags --libs weave) -I"$cuda_inc" -L"$cuda_lib" \
    -lcudart -lpthread -lm -Wl,-rpath,"$libdir" -Wl,-rpath,"$cuda_lib" || fail "pkg-config build of the example"
  echo "check_install: examples/gemm_rs built with pkg-config: $(PKG_CONFIG_PATH="$libdir/pkgconfig" pkg-config --modversion weave)"
else
  echo "check_install: pkg-config not installed: its check skipped"
fi

# Run it: 0 passes, 77 means no GPU here.
set +e
"$work/cmake/gemm_rs_example" 2
rc=$?
set -e
case $rc in
  0) echo "check_install: PASSED (example ran on the GPU)";;
  77) echo "check_install: PASSED (no GPU: the example was built and linked, its run skipped)";;
  *) fail "the example exited with $rc";;
esac
