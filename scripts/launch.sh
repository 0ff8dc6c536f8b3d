#!/usr/bin/env bash
# Runs N copies of a command as the ranks of one job on this host, with the variables torchrun sets
# (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT), so that a program using
# weave_bootstrap_create_env runs as it would under torchrun. Several processes share a GPU
# concurrently only under CUDA MPS: --mps starts a private MPS daemon when none is running and stops
# it afterwards; when MPS cannot start, the ranks are told (WEAVE_LAUNCH_TIME_SLICED=1: the tests then
# run their small cases only) and waits get a longer bound (WEAVE_TIMEOUT_MS=120000 unless set).
# When a rank fails the others get WEAVE_TIMEOUT_MS to notice, then are killed. With
# WEAVE_LAUNCH_PIDFILE set, each rank's "RANK PID" goes there as it starts (tests/kill_rank.sh).
# Usage: scripts/launch.sh -n N [--mps] [--] command [args...]   Exit: the first non-zero rank status.
set -uo pipefail
n=1 mps=0
while [ $# -gt 0 ]; do
  case $1 in
    -n) n=$2; shift 2;;
    --mps) mps=1; shift;;
    --) shift; break;;
    *) break;;
  esac
done
[[ $n =~ ^[1-9][0-9]*$ ]] && [ $# -gt 0 ] || { echo "usage: $0 -n N [--mps] [--] command [args...]" >&2; exit 2; }

mps_dir=
if [ $mps = 1 ] && ! pgrep -f nvidia-cuda-mps-control >/dev/null 2>&1; then
  ctl=$(command -v nvidia-cuda-mps-control || echo /usr/local/nvidia/bin/nvidia-cuda-mps-control)
  mps_dir=$(mktemp -d /tmp/weave-mps.XXXXXX)
  export CUDA_MPS_PIPE_DIRECTORY=$mps_dir CUDA_MPS_LOG_DIRECTORY=$mps_dir
  if "$ctl" -d; then
    echo "launch.sh: started a private MPS daemon ($mps_dir)" >&2
  else
    echo "launch.sh: MPS could not start: ranks on one GPU run time-sliced (small cases, longer bound)" >&2
    rm -rf "$mps_dir"; mps_dir=
    export WEAVE_LAUNCH_TIME_SLICED=1 WEAVE_TIMEOUT_MS=${WEAVE_TIMEOUT_MS:-120000}
  fi
fi
stop_mps() {
  if [ -n "$mps_dir" ]; then
    echo quit | "${ctl}" >/dev/null 2>&1
    # the daemon and its server exit asynchronously; a next daemon must not meet them on the GPU
    for _ in $(seq 100); do pgrep -f 'nvidia-cuda-mps-(control|server)' >/dev/null || break; sleep 0.1; done
    rm -rf "$mps_dir"
  fi
}
trap stop_mps EXIT

export WORLD_SIZE=$n LOCAL_WORLD_SIZE=$n MASTER_ADDR=${MASTER_ADDR:-127.0.0.1}
export MASTER_PORT=${MASTER_PORT:-$(python3 -c 'import socket; s=socket.socket(); s.bind(("",0)); print(s.getsockname()[1])' 2>/dev/null || echo $((20000 + RANDOM % 20000)))}
export WEAVE_TEST_SEED=${WEAVE_TEST_SEED:-$RANDOM$RANDOM}
# One rank a process needs no extra hardware queues (CUDA_DEVICE_MAX_CONNECTIONS is for ranks that
# are threads of one process; under MPS, 32 of them a process made the 4th client's context fail with
# "out of memory"): it is dropped for the ranks.
unset CUDA_DEVICE_MAX_CONNECTIONS
export CUDA_MODULE_LOADING=${CUDA_MODULE_LOADING:-EAGER}
pids=()
for ((r = 0; r < n; r++)); do
  RANK=$r LOCAL_RANK=$r "$@" &
  pids+=($!)
  [ -z "${WEAVE_LAUNCH_PIDFILE:-}" ] || echo "$r $!" >> "$WEAVE_LAUNCH_PIDFILE"
done
status=0 grace=$(( (${WEAVE_TIMEOUT_MS:-10000} + 999) / 1000 + 5 ))
# A rank is running while /proc says it is this shell's child and not a zombie. Polled, not `wait -n
# PID...`: bash 5.2's wait -n can block on ranks that have already exited until another child (the
# killer below, asleep for the grace) ends.
running() {
  local s
  { read -r s < "/proc/$1/stat"; } 2>/dev/null || return 1
  s=${s##*) }
  set -- $s
  [ "$1" != Z ] && [ "$2" = "$$" ]
}
live=("${pids[@]}")
while [ ${#live[@]} -gt 0 ]; do
  rest=()
  for p in "${live[@]}"; do
    if running "$p"; then rest+=("$p"); continue; fi
    wait "$p"; rc=$?
    if [ $rc != 0 ] && [ $status = 0 ]; then
      status=$rc
      echo "launch.sh: a rank exited with $rc; the others have ${grace}s" >&2
      # (its output away from ours: a caller reading our output must not wait for its sleep)
      ( sleep $grace; kill -9 "${pids[@]}" 2>/dev/null ) >/dev/null 2>&1 & killer=$!
    fi
  done
  live=("${rest[@]}")
  [ ${#live[@]} -eq 0 ] || sleep 0.05
done
[ -n "${killer:-}" ] && { pkill -P $killer 2>/dev/null; kill $killer 2>/dev/null; }
exit $status
