#!/bin/sh
# weave-bench's command line: every bad argument (and a bad WEAVE_* variable) exits with status 2 and
# names the flag or variable on stderr; --help exits 0 and lists every long option of the tool's
# option table (read from tools/weave_bench.c). Needs no GPU: parsing comes before any device work.
#
# Usage: sh tests/cli_bad_args.sh path/to/weave-bench
set -u
bench=${1:?usage: sh tests/cli_bad_args.sh path/to/weave-bench}
src="$(dirname "$0")/../tools/weave_bench.c"
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
failures=0
checks=0

fail() {
  failures=$((failures + 1))
  echo "FAIL: $*" >&2
}

# expect_bad NAME_ON_STDERR ARGS...: status 2, stderr names NAME_ON_STDERR.
expect_bad() {
  want=$1
  shift
  checks=$((checks + 1))
  "$bench" "$@" >"$tmp/out" 2>"$tmp/err"
  rc=$?
  if [ "$rc" -ne 2 ]; then
    fail "weave-bench $*: exit $rc, expected 2 (stderr: $(cat "$tmp/err"))"
  elif ! grep -qF -- "$want" "$tmp/err"; then
    fail "weave-bench $*: stderr does not name '$want': $(cat "$tmp/err")"
  fi
}

expect_bad "-M" -M abc
expect_bad "--rows" --rows=12x
expect_bad "-M" -M
expect_bad "-d" -d fp64
expect_bad "--fp8-accum" -d fp8 --fp8-accum fp16
expect_bad "--fp8-accum" --op gemm -d fp8 --fp8-accum slow
expect_bad "--fp8-accum" -d bf16 --fp8-accum fast
expect_bad "--fp8-accum" --op gemm -d bf16 --fp8-accum fast
expect_bad "--scales" -d bf16 --scales row
expect_bad "--scales" --op gemm -d fp16 --scales tensor
expect_bad "--layout" -d fp8 --layout row
expect_bad "--layout" --op gemm -d fp8 --layout row
expect_bad "-g" -g 0
expect_bad "-n" -n 0
expect_bad "--strategy" --strategy x
expect_bad "--devices" --devices 0,x
expect_bad "-f" -f 1
expect_bad "--no-such-option" --no-such-option
expect_bad "stray" -M 64 stray

# A bad WEAVE_* variable, the arguments good.
checks=$((checks + 1))
WEAVE_TIMEOUT_MS=abc "$bench" -M 64 -N 64 -K 64 >"$tmp/out" 2>"$tmp/err"
rc=$?
if [ "$rc" -ne 2 ]; then
  fail "WEAVE_TIMEOUT_MS=abc weave-bench: exit $rc, expected 2"
elif ! grep -qF WEAVE_TIMEOUT_MS "$tmp/err"; then
  fail "WEAVE_TIMEOUT_MS=abc weave-bench: stderr does not name WEAVE_TIMEOUT_MS: $(cat "$tmp/err")"
fi

# --help: exit 0, every long option of the table listed.
checks=$((checks + 1))
"$bench" --help >"$tmp/help" 2>"$tmp/err"
rc=$?
[ "$rc" -eq 0 ] || fail "weave-bench --help: exit $rc, expected 0"
sed -n '/bench_options\[\] = {/,/{NULL/p' "$src" | sed -n 's/^ *{"\([a-z0-9-]*\)",.*/\1/p' >"$tmp/longopts"
n=$(wc -l <"$tmp/longopts")
[ "$n" -ge 10 ] || fail "read only $n long options from $src"
while read -r opt; do
  checks=$((checks + 1))
  grep -qE -- "--$opt( |$)" "$tmp/help" || fail "weave-bench --help does not list --$opt"
done <"$tmp/longopts"

echo "cli_bad_args: $checks checks ($n long options), $failures failed"
[ "$failures" -eq 0 ]
