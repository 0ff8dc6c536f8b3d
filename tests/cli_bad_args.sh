#!/bin/sh
# weave-bench's command line: every bad argument (and a bad WEAVE_* variable) exits with status 2 and
# names the flag or variable on stderr; every numeric flag refuses negative values, and zero where
# zero means nothing, naming the flag and the value (and takes zero where zero is meaningful); the
# defaults (strategy, reduce, slot, order, scales, fp8 accumulation, sizes) as a --dry-run prints
# them; --help exits 0 and lists every long option of the tool's option table (read from
# tools/weave_bench.c), and every option that takes a value is classified here as numeric or not.
# Needs no GPU: parsing comes before any device work, and --dry-run uses none.
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
# --op ag_gemm (AllGather + GEMM): its own flags, each value checked
expect_bad "-M" --op ag_gemm -M abc
expect_bad "-M" --op ag_gemm -M 0
expect_bad "-n" --op ag_gemm -n 0
expect_bad "-g" --op ag_gemm -g -1
expect_bad "-w" --op ag_gemm -w -1
expect_bad "--comm-blocks" --op ag_gemm --comm-blocks -1
expect_bad "-d" --op ag_gemm -d fp4
expect_bad "-l col" --op ag_gemm -d fp8 -l row
expect_bad "--fp8-accum" --op ag_gemm -d fp8 --fp8-accum exact
expect_bad "for -d fp8 only" --op ag_gemm --fp8-accum fast
expect_bad "-l" --op ag_gemm -l diag
expect_bad "--bogus" --op ag_gemm --bogus 1
expect_bad "-e" --op ag_gemm -b 1024 -e 512
expect_bad "-J" --op ag_gemm -J
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

# expect_bad_value FLAG VALUE: FLAG VALUE (or --FLAG=VALUE) exits 2, stderr names the flag and the
# value. --dry-run: a value let through must not start a benchmark on a machine with a GPU.
expect_bad_value() {
  checks=$((checks + 1))
  case $1 in
    --*) set -- "$1" "$2" "$1=$2" ;;
    *) set -- "$1" "$2" "$1" "$2" ;;
  esac
  flag=$1
  value=$2
  shift 2
  "$bench" --dry-run "$@" >"$tmp/out" 2>"$tmp/err"
  rc=$?
  if [ "$rc" -ne 2 ]; then
    fail "weave-bench $*: exit $rc, expected 2 (stderr: $(cat "$tmp/err"))"
  elif ! grep -qF -- "$flag" "$tmp/err" || ! grep -qF -- "'$value'" "$tmp/err"; then
    fail "weave-bench $*: stderr does not name $flag and '$value': $(cat "$tmp/err")"
  fi
}

# expect_good ARGS...: a --dry-run with ARGS exits 0.
expect_good() {
  checks=$((checks + 1))
  "$bench" --dry-run "$@" >"$tmp/out" 2>"$tmp/err"
  rc=$?
  [ "$rc" -eq 0 ] || fail "weave-bench --dry-run $*: exit $rc, expected 0 (stderr: $(cat "$tmp/err"))"
}

# Numeric flags, as long options (with their short ones where they have one). Zero means nothing for
# the sizes, ranks, sweep bounds, factor and iterations; it is meaningful for the warm-ups, the check
# switch, a device index and the block counts (0: the plan's choice).
zero_bad="rows:-M cols:-N k-total:-K ranks:-g min-rows:-b max-rows:-e factor:-f iters:-n"
zero_good="warmup:-w check:-c devices: gemm-blocks: comm-blocks:"
not_numeric="dtype layout scales fp8-accum strategy reduce slot order json trace op"
for spec in $zero_bad $zero_good; do
  long=${spec%%:*}
  short=${spec#*:}
  for flag in "--$long" $short; do
    expect_bad_value "$flag" -1
    expect_bad_value "$flag" -7
  done
  case " $zero_bad " in
    *" $spec "*) for flag in "--$long" $short; do expect_bad_value "$flag" 0; done ;;
    *) expect_good "--$long" 0 ;;
  esac
done
expect_bad_value --devices 0,-1

# Every option of the table that takes a value is one of the above: a new numeric flag gets its
# checks here.
sed -n '/bench_options\[\] = {/,/{NULL/p' "$src" | sed -n 's/^ *{"\([a-z0-9-]*\)", [^,]*, "[^"]*",.*/\1/p' >"$tmp/valued"
[ "$(wc -l <"$tmp/valued")" -ge 10 ] || fail "read only $(wc -l <"$tmp/valued") options with a value from $src"
while read -r opt; do
  checks=$((checks + 1))
  case " $zero_bad $zero_good $not_numeric " in
    *" $opt:"* | *" $opt "*) ;;
    *) fail "--$opt takes a value but tests/cli_bad_args.sh does not say whether it is numeric" ;;
  esac
done <"$tmp/valued"

# expect_dry LINE ARGS...: weave-bench --dry-run ARGS exits 0 and prints LINE exactly.
expect_dry() {
  want=$1
  shift
  checks=$((checks + 1))
  "$bench" --dry-run "$@" >"$tmp/out" 2>"$tmp/err"
  rc=$?
  if [ "$rc" -ne 0 ]; then
    fail "weave-bench --dry-run $*: exit $rc, expected 0 (stderr: $(cat "$tmp/err"))"
  elif ! grep -qxF -- "$want" "$tmp/out"; then
    fail "weave-bench --dry-run $*: no line '$want' in: $(grep '^# [a-zA-Z]' "$tmp/out")"
  fi
}

# The defaults, as the dry run prints them.
expect_dry "# weave-bench  GEMM + ReduceScatter   bf16"
expect_dry "# M 8192..8192 (x2)  N 8192  K_total 28672  ranks 1 (threads of one process)  B [K,N]  iters 20  warmup 5  check 1"
expect_dry "# options: --strategy all --reduce both --slot dtype --order own-last --scales none --fp8-accum fp32 --gemm-blocks 0 --comm-blocks 0"
expect_dry "# variants: baseline fused/det/bf16 fused/det/fp32 fused/atomic/f32 bulk/bf16 auto"
expect_dry "# --dry-run: printing the plan and roofline only"
# fp8: per-tensor scales, fp32 accumulation, B as [N,K]
expect_dry "# weave-bench  GEMM + ReduceScatter   fp8_e4m3 -> bf16, tensor scales (each rank its own), fp32 accumulation (weave and the baseline's cuBLASLt fp8)" -d fp8
expect_dry "# options: --strategy all --reduce both --slot dtype --order own-last --scales tensor --fp8-accum fp32 --gemm-blocks 0 --comm-blocks 0" -d fp8
expect_dry "# M 8192..8192 (x2)  N 8192  K_total 28672  ranks 1 (threads of one process)  B [N,K]  iters 20  warmup 5  check 1" -d fp8
# and the choices reach the variants
expect_dry "# variants: baseline fused/det/bf16 fused/det/fp32 bulk/bf16 auto" --reduce det
expect_dry "# variants: baseline fused/atomic/f32" --strategy fused --reduce atomic
expect_dry "# variants: baseline fused/det/fp32 fused/atomic/f32 bulk/fp32 auto" --slot fp32
expect_dry "# options: --strategy bulk --reduce both --slot dtype --order own-first --scales row --fp8-accum fast --gemm-blocks 0 --comm-blocks 0" \
  -d fp8 --strategy bulk --order own-first --scales row --fp8-accum fast
expect_dry "# M 1024..4096 (x2)  N 512  K_total 768  ranks 3 (threads of one process)  B [K,N]  iters 7  warmup 0  check 0" \
  -b 1024 -e 4096 -N 512 -K 768 -g 3 -n 7 -w 0 -c 0

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
