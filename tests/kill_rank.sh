#!/usr/bin/env bash
# GPU test: one rank of a job of N processes (scripts/launch.sh, MPS where it starts) is killed with
# SIGKILL in the middle of the GPU suite. Every other rank must fail naming it, the whole job must be
# down within the bound (WEAVE_TIMEOUT_MS = 3 s, launch.sh's grace of timeout + 5 s, and 10 s of
# slack), and nothing may be left behind: no process of the job, no MPS daemon started for it, no
# new POSIX shared memory or abstract socket of weave's.
# Usage: tests/kill_rank.sh PROGRAM [N=4] [VICTIM=2]   Exit: 0 passed, 77 no GPU, 1 failed.
set -uo pipefail
cd "$(dirname "$0")/.."
prog=$1 n=${2:-4} victim=${3:-2}
if ! nvidia-smi -L >/dev/null 2>&1; then echo "kill_rank: no GPU: skipped"; exit 77; fi
export WEAVE_TIMEOUT_MS=3000
log=$(mktemp /tmp/weave-kill.XXXXXX)
shm_before=$(ls /dev/shm 2>/dev/null | grep -ci weave || true)
unix_before=$(grep -c weave /proc/net/unix 2>/dev/null || true)
fail() { echo "kill_rank: FAILED: $*"; echo "--- the job's output:"; cat "$log"; rm -f "$log" "$pidfile"; exit 1; }
# the job's ranks, from launch.sh's pid file (reading /proc/PID/environ is not allowed everywhere)
pidfile=$(mktemp /tmp/weave-kill-pids.XXXXXX)
job_pids() {
  while read -r _ p; do kill -0 "$p" 2>/dev/null && echo "$p"; done <"$pidfile"
}

WEAVE_LAUNCH_PIDFILE=$pidfile stdbuf -oL -eL scripts/launch.sh -n "$n" --mps "$prog" >"$log" 2>&1 &
launcher=$!
# every rank is past its team (a case has finished) before the kill
for _ in $(seq 600); do grep -q "checked calls" "$log" && break; kill -0 $launcher 2>/dev/null || break; sleep 0.1; done
grep -q "checked calls" "$log" || fail "no case finished within 60 s before the kill"
victim_pid=$(awk -v r="$victim" '$1 == r {print $2}' "$pidfile")
[ -n "$victim_pid" ] || fail "rank $victim's process not found"
t0=$(date +%s%N)
kill -9 "$victim_pid" 2>/dev/null || fail "rank $victim (pid $victim_pid) had exited before the kill"
deadline=$(( 3 + 5 + 10 ))
for _ in $(seq $((deadline * 10))); do kill -0 $launcher 2>/dev/null || break; sleep 0.1; done
if kill -0 $launcher 2>/dev/null; then
  kill -9 $launcher $(job_pids) 2>/dev/null
  fail "the job still ran ${deadline} s after rank $victim was killed"
fi
wait $launcher; rc=$?
secs=$(( ($(date +%s%N) - t0) / 1000000 ))
[ $rc != 0 ] || fail "the job exited 0 after rank $victim was killed"
# every other rank that printed an error names the victim, and at least one did
named=$(grep -E "FAIL|error|timeout|closed" "$log" | grep -c "rank $victim" || true)
[ "$named" -ge 1 ] || fail "no rank's error names rank $victim"
sleep 1
[ -z "$(job_pids)" ] || fail "processes of the job left: $(job_pids)"
shm_after=$(ls /dev/shm 2>/dev/null | grep -ci weave || true)
[ "$shm_after" -le "$shm_before" ] || fail "shared memory left in /dev/shm: $(ls /dev/shm | grep -i weave)"
unix_after=$(grep -c weave /proc/net/unix 2>/dev/null || true)
[ "$unix_after" -le "$unix_before" ] || fail "sockets of weave's left: $(grep weave /proc/net/unix)"
echo "kill_rank: PASSED: rank $victim of $n killed; the job was down $secs ms later (exit $rc), $named error lines name it, nothing left"
rm -f "$log" "$pidfile"
