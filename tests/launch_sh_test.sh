#!/usr/bin/env bash
# scripts/launch.sh on the CPU: the variables each rank gets (torchrun's), the exit status (0 when
# every rank passes, else the first non-zero one), a prompt return once every rank has exited (also
# after a failure, when the killer of the others is waiting), and a rank that hangs after another
# failed killed after WEAVE_TIMEOUT_MS + 5 s. Needs no GPU.
# Usage: bash tests/launch_sh_test.sh [path/to/launch.sh]
set -u
launch=${1:-$(dirname "$0")/../scripts/launch.sh}
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
failures=0 checks=0
fail() {
  failures=$((failures + 1))
  echo "FAIL: $*" >&2
}
now_ms() { echo $(($(date +%s%N) / 1000000)); }

# expect STATUS MAX_MS N COMMAND: launch.sh -n N bash -c COMMAND exits STATUS within MAX_MS
expect() {
  local want=$1 max=$2 n=$3 cmd=$4 t0 rc ms
  checks=$((checks + 1))
  t0=$(now_ms)
  WEAVE_TIMEOUT_MS=20000 bash "$launch" -n "$n" bash -c "$cmd" >"$tmp/out" 2>"$tmp/err"
  rc=$? ms=$(($(now_ms) - t0))
  [ "$rc" = "$want" ] || fail "[-n $n $cmd]: status $rc, want $want ($(head -c 300 "$tmp/err"))"
  [ "$ms" -le "$max" ] || fail "[-n $n $cmd]: returned after $ms ms, want <= $max (the killer's 25 s grace?)"
}

expect 0 5000 3 'exit 0'
expect 7 5000 3 '[ $RANK = 1 ] && exit 7; exit 0'
expect 77 5000 4 'exit 77'
# every rank fails, one after another: the first status, no wait for the killer
for _ in 1 2 3 4 5; do expect 77 5000 3 'sleep 0.0$RANK; exit 77'; done
expect 2 5000 3 'sleep 0.$((3 - RANK)); exit $RANK'

# torchrun's variables, one line a rank
checks=$((checks + 1))
WEAVE_TIMEOUT_MS=20000 bash "$launch" -n 3 bash -c 'echo "$RANK $LOCAL_RANK $WORLD_SIZE $LOCAL_WORLD_SIZE $MASTER_ADDR ${MASTER_PORT:+port}" >> '"$tmp"'/vars' 2>/dev/null
got=$(sort "$tmp/vars" | tr '\n' ';')
want="0 0 3 3 127.0.0.1 port;1 1 3 3 127.0.0.1 port;2 2 3 3 127.0.0.1 port;"
[ "$got" = "$want" ] || fail "variables: got '$got', want '$want'"

# a rank that hangs after another failed: killed after WEAVE_TIMEOUT_MS (1 s) + 5 s
checks=$((checks + 1))
t0=$(now_ms)
WEAVE_TIMEOUT_MS=1000 bash "$launch" -n 3 bash -c '[ $RANK = 0 ] && exit 5; exec sleep 60' >/dev/null 2>"$tmp/err"
rc=$? ms=$(($(now_ms) - t0))
[ "$rc" = 5 ] || fail "hanging rank: status $rc, want 5"
[ "$ms" -ge 5500 ] && [ "$ms" -le 15000 ] || fail "hanging rank: killed after $ms ms, want about 6000"
grep -q "the others have 6s" "$tmp/err" || fail "hanging rank: no notice of the grace ($(head -c 300 "$tmp/err"))"

# bad usage
checks=$((checks + 1))
bash "$launch" -n 0 true >/dev/null 2>&1
[ $? = 2 ] || fail "-n 0: want status 2"

echo "launch_sh_test: $checks checks, $failures failed"
[ "$failures" = 0 ]
