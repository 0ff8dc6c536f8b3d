#!/usr/bin/env bash
# One batch on a lent GPU machine (binaries built elsewhere, carried in build/): GPU tests, sanitizers,
# benchmark tables, a trace picture; logs under $OUT (or ./device-out): gpu_tests.log, gemm_rs.log,
# bench.log, bench.json, trace_g4.json, trace_g4.png, weave.tune (the device tool brings back at most 8 files).
# Usage: scripts/device_run.sh [quick|full|hgemm|san|fp8san|narrow|tune|bench|gemm|hold|ab|agab|fp8sweep|fp8wgs|fp8ab|rsab|fp8ncu|probe|fp8acc|prof|trace|multi|lifecycle|autotune|autosweep|ag|owed|freshsuite|pytest|nodes]...
# WEAVE_BUILD: the build folder (default build).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-device-out}
mkdir -p "$out"
export CUDA_MODULE_LOADING=EAGER CUDA_DEVICE_MAX_CONNECTIONS=32
b=${WEAVE_BUILD:-build}
log=$out/gpu_tests.log

# gpu_ag_gemm in threads at worlds 1, 2, 3, 4, 8; the three sanitizers on it at world 1 (they serialize
# kernels, so ranks that wait for each other time out at larger worlds)
ag_worlds() {
  for w in 1 2 3 4 8; do
    WEAVE_TIMEOUT_MS=5000 timeout 200 $b/tests/gpu_ag_gemm --world $w > "$out/ag_w$w.log" 2>&1
    echo "gpu_ag_gemm world $w: rc=$?"; grep -E "^FAIL|cases passed" "$out/ag_w$w.log" | head -6
  done
}
ag_sanitizers() {
  for tool in memcheck racecheck synccheck; do
    WEAVE_TIMEOUT_MS=20000 timeout 200 compute-sanitizer --tool $tool --error-exitcode 9 $b/tests/gpu_ag_gemm \
      --world 1 --quick >> "$out/ag_san.log" 2>&1
    echo "sanitizer $tool (ag_gemm, world 1): rc=$?"
  done
}
# fp8's five target shapes (issue 33)
fp8_shapes="-s 8192x8192x8192 -s 8192x8192x3584 -s 8192x8192x1024 -s 4096x8192x3584 -s 16384x8192x3584"
# fp8 with FP8_ACCUM accumulation (default fp32; AB_DTYPE=bf16|fp16: that dtype instead) on fp8_shapes for several
# carried builds (scripts/build_variants.sh builds compile-time variants to carry) and knob settings: $1 holds
# "label=dir[@VAR=value...] ..." (dir holds a weave-bench; each @ sets a knob), each its own process
# with cuBLASLt's default beside it, all alternating, twice; rows to fp8ab.log: M N K weave-TFLOP/s
# lt_def-TFLOP/s weave/lt_def #wrong
# One entry "label=dir[@VAR=value...]" of an A/B of carried builds: runs $dir/weave-bench with the entry's knobs, a fresh tuning cache and the arguments after the
# timeout ($2 seconds); its rows (no comments, spaces squeezed) to stdout, its status returned.
bench_entry() {
  local entry=$1 limit=$2; shift 2
  local rest=${entry#*=} e=; local dir=${rest%%@*}
  [ "$rest" != "$dir" ] && e=${rest#*@}; e=${e//@/ }
  env $e XDG_CACHE_HOME=$(mktemp -d) WEAVE_TUNE_FILE= timeout $limit $dir/weave-bench "$@" > "$out/entry.tmp" 2>&1 < /dev/null
  local rc=$?
  grep -vE '^#|WARN|^$' "$out/entry.tmp" | tr -s ' '
  rm -f "$out/entry.tmp"
  return $rc
}
fp8_alternate() {
  local acc=; [ "${AB_DTYPE:-fp8}" = fp8 ] && acc="--fp8-accum ${FP8_ACCUM:-fp32}"
  for i in 1 2; do for entry in $1; do
    rows=$(bench_entry "$entry" 100 --op gemm -d ${AB_DTYPE:-fp8} $acc $fp8_shapes -B 132 -n 20 -w 5 -c 1)
    echo "=== fp8ab ${entry%%=*} run $i rc=$?" | tee -a "$out/fp8ab.log"
    [ -n "$rows" ] && echo "$rows" | cut -d' ' -f2-4,9,12,15,18 | tee -a "$out/fp8ab.log"
  done; done
  fp8_means < "$out/fp8ab.log"
}
# per label of fp8ab rows on stdin: how many rows, the least and largest weave/lt_def and their mean
fp8_means() {
  awk '/^=== fp8ab/ { label = $3; next }
       NF == 7 { n[label]++; s[label] += $6; if (!(label in lo) || $6 < lo[label]) lo[label] = $6
                 if (!(label in hi) || $6 > hi[label]) hi[label] = $6 }
       END { for (l in n) printf "fp8ab %s: %d rows, weave/lt_def %.3f-%.3f, mean %.3f\n", l, n[l], lo[l], hi[l], s[l] / n[l] }'
}
# gpu_fp8_gemm_test's tiny cases under memcheck, racecheck and synccheck (fp8san.log)
fp8_sanitizers() {
  for tool in memcheck racecheck synccheck; do
    FP8_TEST_TINY=1 timeout ${SAN_TIMEOUT:-300} stdbuf -oL -eL compute-sanitizer --tool $tool --error-exitcode 9 \
      $b/tests/gpu_fp8_gemm_test >> "$out/fp8san.log" 2>&1
    echo "sanitizer $tool (fp8 gemm, tiny): rc=$?"
  done
  grep -E "ERROR SUMMARY|RACECHECK SUMMARY|^FAIL" "$out/fp8san.log" | head -12
}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv >> "$log" 2>&1
for mode in "$@"; do
  case $mode in
    lifecycle) # gpu_lifecycle_test, LIFE_RUNS times (default 5); on a timeout every rank prints its
               # plan's finished call and tile flags (life.log keeps them)
      for i in $(seq ${LIFE_RUNS:-5}); do
        WEAVE_TIMEOUT_MS=3000 timeout 120 $b/tests/gpu_lifecycle_test > "$out/life_run.log" 2>&1
        rc=$?; echo "lifecycle run $i: rc=$rc"
        if [ $rc != 0 ]; then cat "$out/life_run.log" >> "$out/life.log"; grep -E "FAIL|tile flags|finished call" "$out/life_run.log" | head -24; fi
      done
      rm -f "$out/life_run.log"
      ;;
    quick|full)
      flag=--quick; [ "$mode" = full ] && flag=
      WEAVE_TIMEOUT_MS=3000 timeout ${TEST_TIMEOUT:-300} $b/tests/gpu_gemm_rs $flag > "$out/gemm_rs.log" 2>&1
      echo "gpu_gemm_rs $mode: rc=$?"; grep -E "^FAIL" "$out/gemm_rs.log" | head -12; grep -E "cases passed" "$out/gemm_rs.log"
      timeout 120 $b/tests/gpu_hopper_gemm_test >> "$log" 2>&1; echo "hopper gemm test rc=$?"
      timeout 120 $b/tests/gpu_rma_test --quick >> "$log" 2>&1; echo "rma test rc=$?"
      ;;
    hgemm) # the Hopper GEMM's test alone (every layout x dtype x schedule, tails, stream-K, vs fp64 and
           # cuBLASLt), then again with 2-CTA clusters (WEAVE_HGEMM_CLUSTER=2: both schedules clustered
           # where the tile rows pair up), and the clustered small cases under the three sanitizers
      timeout 300 $b/tests/gpu_hopper_gemm_test > "$out/hgemm_test.log" 2>&1; echo "hopper gemm test rc=$?"
      grep -E "^FAIL" "$out/hgemm_test.log" | head -12; tail -1 "$out/hgemm_test.log"
      WEAVE_HGEMM_CLUSTER=2 timeout 300 $b/tests/gpu_hopper_gemm_test > "$out/hgemm_test_cl2.log" 2>&1
      echo "hopper gemm test, clusters: rc=$?"; grep -E "^FAIL" "$out/hgemm_test_cl2.log" | head -12; tail -1 "$out/hgemm_test_cl2.log"
      for tool in memcheck racecheck synccheck; do
        WEAVE_HGEMM_CLUSTER=2 HGEMM_TEST_QUICK=1 timeout 300 compute-sanitizer --tool $tool --error-exitcode 9 \
          $b/tests/gpu_hopper_gemm_test >> "$log" 2>&1
        echo "sanitizer $tool (hopper gemm, clusters): rc=$?"
      done
      ;;
    san)
      for tool in memcheck racecheck synccheck; do
        # line-buffered: a run cut by the timeout still shows how far it got
        timeout ${SAN_TIMEOUT:-120} stdbuf -oL -eL \
          compute-sanitizer --tool $tool --error-exitcode 9 $b/tests/gpu_gemm_rs --tiny --world 1 >> "$log" 2>&1
        echo "sanitizer $tool: rc=$?"
        # the Hopper GEMM's small shapes, data-parallel and stream-K (HGEMM_TEST_QUICK: no large cases)
        HGEMM_TEST_QUICK=1 timeout 300 compute-sanitizer --tool $tool --error-exitcode 9 $b/tests/gpu_hopper_gemm_test >> "$log" 2>&1
        echo "sanitizer $tool (hopper gemm): rc=$?"
      done
      grep -E "ERROR SUMMARY|RACECHECK SUMMARY|cases passed" "$log"
      ;;
    fp8san) # the fp8 kernels under the three sanitizers: gpu_fp8_gemm_test's tiny cases (every scale
            # mode, output type, accumulation and schedule on three small shapes: the three-warpgroup
            # role for fp32 accumulation, cooperative (both tiles) and ping-pong for fast)
      fp8_sanitizers
      ;;
    narrow) # the narrow fp8 tile, owed its first GPU run: gpu_fp8_gemm_test quick with
            # WEAVE_HGEMM_FP8_NARROW=0 (every fast cooperative case also forced to 128 x 192), =1 (the
            # plan's choice) and WEAVE_HGEMM_CLUSTER=2 (sharing B), fp8san, then fast fp8 on the five
            # shapes, 128 x 256 against the plan's narrow choice, unclustered and sharing B (fp8ab);
            # NARROW_AB adds entries of carried builds, e.g. "n5=.variants/n5@WEAVE_HGEMM_FP8_NARROW=1"
      for e in WEAVE_HGEMM_FP8_NARROW=0 WEAVE_HGEMM_FP8_NARROW=1 WEAVE_HGEMM_CLUSTER=2; do
        env $e FP8_TEST_QUICK=1 timeout 300 $b/tests/gpu_fp8_gemm_test > "$out/narrow_test.log" 2>&1
        echo "gpu_fp8_gemm_test quick, $e: rc=$?"; grep -E "^FAIL|PASSED|FAILED" "$out/narrow_test.log" | head -8
      done
      fp8_sanitizers
      FP8_ACCUM=fast fp8_alternate "wide=$b@WEAVE_HGEMM_FP8_NARROW=0 narrow=$b@WEAVE_HGEMM_FP8_NARROW=1 \
narrowB=$b@WEAVE_HGEMM_FP8_NARROW=1@WEAVE_HGEMM_CLUSTER=2 ${NARROW_AB:-}"
      ;;
    autotune) # AUTO plans: gpu_autotune_test in threads (worlds 1, 2, 4), then 4 processes under MPS
      XDG_CACHE_HOME=$(mktemp -d) timeout 300 $b/tests/gpu_autotune_test > "$out/autotune.log" 2>&1
      echo "gpu_autotune_test: rc=$?"; grep -E "^FAIL|^# world|passed" "$out/autotune.log" | head -30
      XDG_CACHE_HOME=$(mktemp -d) timeout 300 scripts/launch.sh -n 4 --mps $b/tests/gpu_autotune_test >> "$out/autotune.log" 2>&1
      echo "gpu_autotune_test, 4 processes: rc=$?"; grep -E "^FAIL|passed" "$out/autotune.log" | tail -3
      ;;
    autosweep) # auto with nothing tuned beforehand (a fresh cache each run) against baseline, fused and
               # bulk: M 128..16384 x 1/4/8 ranks sharing the GPU x bf16/fp8, N 8192, K_total 28672;
               # weave-bench's tables in autosweep.log, the summary in autosweep.md (scripts/auto_sweep_table.py)
      for d in ${SWEEP_DTYPES:-bf16 fp8}; do
        for g in ${BENCH_G:-1 4 8}; do
          for range in "-b 128 -e 8192 -f 4" "-M 16384"; do
            echo "=== autosweep $d g=$g $range" >> "$out/autosweep.log"
            XDG_CACHE_HOME=$(mktemp -d) WEAVE_TUNE_FILE= timeout ${BENCH_TIMEOUT:-200} $b/weave-bench $range -N 8192 \
              -K 28672 -g $g -d $d --strategy all --reduce det -n ${BENCH_N:-30} -w 3 -c 0 >> "$out/autosweep.log" 2>&1
            echo "autosweep $d g=$g $range rc=$?"; grep -E "^# auto ->" "$out/autosweep.log" | tail -1 | cut -c1-160
          done
        done
      done
      python3 scripts/auto_sweep_table.py "$out/autosweep.log" | tee "$out/autosweep.md" | tail -40
      ;;
    ag) # AllGather + GEMM: gpu_ag_gemm in threads (worlds 1, 2, 3, 4, 8) and 4 processes under MPS, the
        # strategies' table in bf16 and fp8 at 1, 4 and 8 ranks sharing the GPU, M 128 to 8192 (the
        # issue's rows; ag_bench_bf16.log, ag_bench_fp8.log), the sanitizers at world 1 (they serialize
        # kernels, so ranks that wait for each other time out at larger worlds)
      ag_worlds
      timeout 200 scripts/launch.sh -n 4 --mps $b/tests/gpu_ag_gemm > "$out/ag_procs4.log" 2>&1
      echo "gpu_ag_gemm, 4 processes: rc=$?"; grep -E "^FAIL|cases passed" "$out/ag_procs4.log" | tail -2
      for d in bf16 fp8; do
        for g in ${BENCH_G:-1 4 8}; do
          n=$((28672 / g)); [ $g = 1 ] && n=8192
          timeout ${BENCH_TIMEOUT:-200} $b/weave-bench --op ag_gemm -d $d -M 128 -M 512 -M 2048 -M 8192 -N $n -K 8192 \
            -g $g -n ${BENCH_N:-20} -w 3 >> "$out/ag_bench_$d.log" 2>&1
          echo "ag bench $d g=$g: rc=$?"
        done
        grep -v "WARN" "$out/ag_bench_$d.log" | tail -18
      done
      ag_sanitizers
      ;;
    owed) # what landed without a GPU run: gpu_ag_gemm (fp8 cases, refusals) at worlds 1, 2, 3, 4, 8 and 4
          # processes, gpu_team_test (the one-rank NCCL team: LD_LIBRARY_PATH should reach a
          # libnccl.so.2, e.g. torch's nvidia/nccl/lib), gpu_graph_test and gpu_soak_test (SOAK_CALLS,
          # default 3000) with AllGather + GEMM plans among them, the sanitizers on AllGather + GEMM fp8 at world
          # 1, weave-bench --op ag_gemm -d fp8 at 1 and 4 ranks (then run mode pytest: watchdog,
          # parallelize_block, ag_gemm_scaled and gemm_rs's backward by ag_gemm are among its cases)
      ag_worlds
      # MPS runs without this script's CUDA_DEVICE_MAX_CONNECTIONS, as ctest's procs tests run
      timeout 200 env -u CUDA_DEVICE_MAX_CONNECTIONS scripts/launch.sh -n 4 --mps $b/tests/gpu_ag_gemm --quick \
        > "$out/ag_procs4.log" 2>&1
      echo "gpu_ag_gemm, 4 processes: rc=$?"; grep -E "^FAIL|cases passed" "$out/ag_procs4.log" | tail -2
      timeout 200 $b/tests/gpu_team_test 50 > "$out/team.log" 2>&1
      echo "gpu_team_test: rc=$?"; grep -E "from_nccl|split|PASSED|FAILED" "$out/team.log"
      timeout 200 $b/tests/gpu_graph_test > "$out/graph.log" 2>&1
      echo "gpu_graph_test (with AllGather + GEMM): rc=$?"; grep -E "^ag |FAIL|PASSED|FAILED" "$out/graph.log" | head -8
      WEAVE_TIMEOUT_MS=10000 timeout 400 $b/tests/gpu_soak_test --calls ${SOAK_CALLS:-3000} > "$out/soak.log" 2>&1
      echo "gpu_soak_test (both ops): rc=$?"; grep -E "FAIL|gpu_soak_test:" "$out/soak.log" | head -6
      ag_sanitizers
      for g in 1 4; do
        timeout 200 $b/weave-bench --op ag_gemm -d fp8 -M 2048 -M 8192 -N $((28672 / g)) -K 8192 -g $g -n 10 -w 3 \
          >> "$out/ag_bench.log" 2>&1
        echo "ag bench fp8 g=$g: rc=$?"
      done
      grep -v "WARN\|^# rank" "$out/ag_bench.log" | tail -8
      ;;
    nodes) # the plans past one node between pretend nodes of 2 ranks (docs/multinode.md): gpu_gemm_rs and
           # gpu_ag_gemm quick at worlds 4 and 8 in threads, then gpu_gemm_rs in 4 processes under MPS
      for t in gpu_gemm_rs gpu_ag_gemm; do
        for w in 4 8; do
          WEAVE_TIMEOUT_MS=5000 timeout 300 $b/tests/$t --quick --ranks-per-node 2 --world $w > "$out/nodes_${t}_w$w.log" 2>&1
          echo "$t past one node, world $w: rc=$?"; grep -E "^FAIL|cases passed" "$out/nodes_${t}_w$w.log" | head -6
        done
      done
      timeout 300 env -u CUDA_DEVICE_MAX_CONNECTIONS scripts/launch.sh -n 4 --mps $b/tests/gpu_gemm_rs --quick \
        --ranks-per-node 2 > "$out/nodes_procs4.log" 2>&1
      echo "gpu_gemm_rs past one node, 4 processes: rc=$?"; grep -E "^FAIL|cases passed" "$out/nodes_procs4.log" | tail -4
      ;;
    freshsuite) # the GPU suite of a fresh checkout: copies this tree to $FRESH (default /tmp/weave-fresh) and
                # builds it as README says (Release, every target; not again while the machine stays
                # warm), then runs ctest -L gpu over SUITE_RANGE (ctest -I, which counts the GPU tests
                # alone, e.g. "7,41"; default all) within SUITE_TIMEOUT seconds (default 500);
                # suite.log. pytest on that build:
                # WEAVE_BUILD=$FRESH/build scripts/device_run.sh pytest
      fresh=${FRESH:-/tmp/weave-fresh}
      if [ ! -e "$fresh/build/weave-bench" ]; then
        # the files of the tree as received that git tracks or does not ignore (not a clone: the
        # .git beside them may predate the tree), without carried folders or build outputs
        rm -rf "$fresh"; mkdir -p "$fresh"
        git ls-files -co --exclude-standard | tar -cf - --ignore-failed-read -T - 2> /dev/null | tar -xf - -C "$fresh"
        echo "fresh copy: $(find "$fresh" -type f | wc -l) files; .git here at $(git log --oneline -1 | cut -c1-60)"
        t0=$(date +%s)
        (cmake -S "$fresh" -B "$fresh/build" -DCMAKE_BUILD_TYPE=Release > /dev/null && cmake --build "$fresh/build" -j "$(nproc)") \
          > "$out/fresh_build.log" 2>&1
        echo "fresh build: rc=$? in $(($(date +%s) - t0)) s"; grep -E "(error|warning) *:" "$out/fresh_build.log" | head -5
      fi
      (cd "$fresh/build" && timeout ${SUITE_TIMEOUT:-500} ctest -L gpu --output-on-failure ${SUITE_RANGE:+-I $SUITE_RANGE}) \
        > "$out/suite.log" 2>&1
      echo "gpu suite ${SUITE_RANGE:-all}: rc=$?"; grep -E "tests passed|Failed|\*\*\*|Test +#" "$out/suite.log" | tail -40
      ;;
    pytest) # the Python package's tests with the GPU (the worker at 1, 2 and 4 processes, the examples)
      lib=$b/libweave.so; case $b in /*) ;; *) lib=$PWD/$lib ;; esac
      WEAVE_LIBRARY=$lib timeout ${PY_TIMEOUT:-400} env -u CUDA_DEVICE_MAX_CONNECTIONS -u CUDA_MODULE_LOADING \
        /opt/torch/.venv/bin/python -m pytest -q python/tests \
        > "$out/pytest.log" 2>&1
      echo "pytest with the GPU: rc=$?"; tail -4 "$out/pytest.log"
      ;;
    tune) # sweep strategies and the fused split per world; the winners go to $out/weave.tune, which
          # later modes of this batch read (AUTO and the fused split come from it)
      export WEAVE_TUNE_FILE=$out/weave.tune
      for g in ${BENCH_G:-1 4 8}; do
        echo "=== weave-bench --tune g=$g" >> "$out/bench.log"
        timeout ${BENCH_TIMEOUT:-120} $b/weave-bench -M 8192 -N 8192 -K 28672 -g $g -d bf16 --tune -n 10 -w 3 -c 1 \
          >> "$out/bench.log" 2>&1
        echo "tune g=$g rc=$?"; grep "^# tune" "$out/bench.log" | tail -1
      done
      ;;
    bench)
      for g in ${BENCH_G:-1 4 8}; do
        extra=; [ $g = 4 ] && extra="--trace $out/trace_g4.json"
        [ $g = 1 ] && extra="--trace /tmp/weave_trace_g1.json" # its per-rank summary lands in bench.log
        echo "=== weave-bench g=$g" >> "$out/bench.log"
        timeout ${BENCH_TIMEOUT:-120} $b/weave-bench -M 8192 -N 8192 -K 28672 -g $g -d bf16 --strategy all -n ${BENCH_N:-20} -w 5 -c 1 $extra \
          -J "$out/bench_g$g.json" > "$out/bench_g$g.tmp" 2>&1
        echo "bench g=$g rc=$?"; grep -v "^#   " "$out/bench_g$g.tmp" | grep -v "^# rank ->" | tail -14
        cat "$out/bench_g$g.tmp" >> "$out/bench.log"; rm -f "$out/bench_g$g.tmp"
      done
      python3 - "$out" <<'PY'
import json, sys, glob, os
out = sys.argv[1]; rows = []
path = os.path.join(out, "bench.json")
if os.path.exists(path): rows = json.load(open(path))
for f in sorted(glob.glob(os.path.join(out, "bench_g*.json"))):
    d = json.load(open(f)); d["file"] = os.path.basename(f); rows.append(d); os.remove(f)
json.dump(rows, open(path, "w"), indent=1)
PY
      ;;
    trace)
      if [ -f "$out/trace_g4.json.csv" ]; then
        python3 scripts/trace_png.py "$out/trace_g4.json.csv" "$out/trace_g4.png" && echo "trace png ok"
        rm -f "$out/trace_g4.json.csv"
      fi
      ;;
    multi) # on a machine with several GPUs (one rank per GPU): topology, the GPU suite on
           # distinct GPUs, compute-sanitizer at world 2, the M x (N, K_total) sweep of every strategy
           # against cuBLASLt + ncclReduceScatter (bench.log; the '# ... hides' lines give the share of
           # the reduce-scatter each fused variant hides)
      ng=$(nvidia-smi -L | wc -l)
      nvidia-smi topo -m >> "$log" 2>&1
      for w in 2 4 8; do
        [ $w -le $ng ] || continue
        WEAVE_TIMEOUT_MS=3000 timeout ${TEST_TIMEOUT:-300} $b/tests/gpu_gemm_rs --world $w >> "$out/gemm_rs.log" 2>&1
        echo "gpu_gemm_rs world $w on $ng GPUs: rc=$?"
      done
      timeout 300 compute-sanitizer --tool memcheck --error-exitcode 9 $b/tests/gpu_gemm_rs --tiny --world 2 >> "$log" 2>&1
      echo "memcheck world 2: rc=$?"
      for nk in "8192 28672" "4096 14336" "8192 8192" "4608 36864"; do
        set -- $nk
        echo "=== weave-bench multi N=$1 K=$2 g=$ng" >> "$out/bench.log"
        timeout ${BENCH_TIMEOUT:-300} $b/weave-bench -b 1024 -e 32768 -f 2 -N $1 -K $2 -g $ng -d bf16 --strategy all \
          -n ${BENCH_N:-20} -w 5 -c 1 >> "$out/bench.log" 2>&1
        echo "sweep N=$1 K=$2: rc=$?"
      done
      ;;
    fp8sweep) # the two fp8 shapes below cuBLASLt fp8: every schedule x stream-K x group size
              # (WEAVE_HGEMM_*; one process each, cuBLASLt fp8 timed in each), then the default again
      for pp in 0 2; do for sk in 0 2; do for gm in 8 16 32; do
        echo "=== fp8sweep PINGPONG=$pp STREAMK=$sk GROUP_M=$gm" >> "$out/bench_fp8.log"
        WEAVE_HGEMM_PINGPONG=$pp WEAVE_HGEMM_STREAMK=$sk WEAVE_HGEMM_GROUP_M=$gm timeout 60 $b/weave-bench --op gemm \
          -d fp8 -s 8192x8192x3584 -s 4096x8192x3584 -B 132 -n 20 -w 5 -c 0 >> "$out/bench_fp8.log" 2>&1
        echo "fp8sweep pp=$pp sk=$sk gm=$gm rc=$?"
      done; done; done
      echo "=== fp8sweep default" >> "$out/bench_fp8.log"
      timeout 60 $b/weave-bench --op gemm -d fp8 -s 8192x8192x3584 -s 4096x8192x3584 -B 132 -n 20 -w 5 -c 0 \
        >> "$out/bench_fp8.log" 2>&1
      # the linear-share target: the five shapes at 132 blocks and at 128 (4 left to communication)
      echo "=== fp8sweep linear share" >> "$out/bench_fp8.log"
      timeout 120 $b/weave-bench --op gemm -d fp8 $fp8_shapes -B 132,128 -n 20 -w 5 -c 0 >> "$out/bench_fp8.log" 2>&1
      grep -E "^===|[0-9]x[0-9]+x[0-9]" "$out/bench_fp8.log"
      ;;
    probe) # tensor-core occupancy of promoted fp8 schedules outside any GEMM (tools/bench/probe_promote.cu;
           # PROBE names the binary, default $b/weave-probe-promote, built with --target weave-probe-promote)
      timeout 120 ${PROBE:-$b/weave-probe-promote} > "$out/probe_promote.log" 2>&1
      echo "probe rc=$?"; cat "$out/probe_promote.log"
      ;;
    fp8acc) # builds of the promoted fp8 accumulation against each other: FP8ACC_DIRS names folders,
            # each with a weave-bench and a gpu_fp8_gemm_test (e.g. main's and a branch's); each
            # folder's quick fp8 test (correctness, the accuracy
            # case), then fp8ab over the folders (labelled by their names)
      for d in ${FP8ACC_DIRS:-}; do
        FP8_TEST_QUICK=1 timeout 120 $d/gpu_fp8_gemm_test > "$out/fp8acc_test_$(basename $d).log" 2>&1
        echo "fp8acc $d test rc=$?"; grep -E "^FAIL|^info" "$out/fp8acc_test_$(basename $d).log" | head -5
      done
      fp8_alternate "$(for d in ${FP8ACC_DIRS:-}; do printf '%s=%s ' "$(basename "$d")" "$d"; done)"
      ;;
    fp8ncu) # Nsight Compute at 8192^3, fp32 accumulation (ncu --clock-control none: the clock as it
            # runs): weave's three-warpgroup kernel (one launch after two warm-ups) and cuBLASLt's first
            # four (its default and its fast kernel, each named): cycles, tensor-pipe use, FADDs, L2
            # and DRAM (fp8ncu.txt); then the source views of weave's kernel and cuBLASLt's first:
            # their hot instructions with their share of the stall samples (fp8ncu_sass_<kernel>.txt;
            # scripts/ncu_fp8.py reads both)
      met='sm__cycles_elapsed.avg,sm__pipe_tensor_op_hmma_type_hmma_hgmma_qgmma_cycles_active.avg.pct_of_peak_sustained_active'
      met="$met,smsp__sass_thread_inst_executed_op_fadd_pred_on.sum,lts__t_sectors.sum,lts__t_sector_hit_rate.pct"
      met="$met,dram__bytes_read.sum,lts__throughput.avg.pct_of_peak_sustained_elapsed,launch__registers_per_thread"
      run8=(--op gemm -d fp8 --fp8-accum fp32 -s 8192x8192x8192 -B 132 -n 3 -w 1 -c 0)
      # shared memory's banks (the stages' TMA writes, the wgmmas' operand reads) in runs of their own:
      # a metric name this ncu lacks then fails only these
      smem='l1tex__data_bank_reads.avg.pct_of_peak_sustained_elapsed,l1tex__data_bank_writes.avg.pct_of_peak_sustained_elapsed'
      smem="$smem,l1tex__throughput.avg.pct_of_peak_sustained_elapsed"
      # set:kernel regex:launches skipped:launches taken:the variable naming the metrics
      for k in main:kernel_p3:2:1:met main:nvjet:0:4:met smem:kernel_p3:2:1:smem smem:nvjet:0:1:smem; do
        IFS=: read -r set name skip count var <<< "$k"
        timeout 150 ncu --clock-control none -k "regex:$name" --launch-skip $skip --launch-count $count --metrics "${!var}" \
          --csv --page raw $b/weave-bench "${run8[@]}" > "$out/ncu_${set}_$name.csv" 2>> "$out/fp8ncu_err.log"
        echo "ncu $set $name rc=$?"
      done
      python3 scripts/ncu_fp8.py raw "$out"/ncu_main_kernel_p3.csv "$out"/ncu_main_nvjet.csv "$out"/ncu_smem_*.csv \
        > "$out/fp8ncu.txt"
      rm -f "$out"/ncu_*.csv; cat "$out/fp8ncu.txt"
      for k in kernel_p3:2 nvjet:0; do
        IFS=: read -r name skip <<< "$k"
        timeout 150 ncu --clock-control none -k "regex:$name" --launch-skip $skip --launch-count 1 --section SourceCounters \
          -o /tmp/fp8ncu_src -f $b/weave-bench "${run8[@]}" >> "$out/fp8ncu_err.log" 2>&1
        echo "ncu source view of $name rc=$?"
        ncu --import /tmp/fp8ncu_src.ncu-rep --page source --csv --print-source sass > /tmp/fp8ncu_src.csv 2>> "$out/fp8ncu_err.log"
        python3 scripts/ncu_fp8.py sass /tmp/fp8ncu_src.csv > "$out/fp8ncu_sass_$name.txt"; head -80 "$out/fp8ncu_sass_$name.txt"
      done
      tail -3 "$out/fp8ncu_err.log"
      ;;
    fp8ab) # fp8_alternate (above) over FP8_AB="label=dir[@VAR=value...] ...", builds carried beside
           # this one, e.g. "main=build cl=build@WEAVE_HGEMM_CLUSTER=3"; then each label's range and
           # mean of weave/lt_def over fp8ab.log (every fp8ab of this command so far)
      fp8_alternate "${FP8_AB:-}"
      ;;
    rsab) # GEMM + ReduceScatter of several carried builds (scripts/build_variants.sh): RS_AB="label=dir
          # [@VAR=value...] ..." as fp8ab's, each its own process per world in RS_G (default "4 8"),
          # ranks as threads, M = N = 8192, K 28672, -d RS_D (default fp8; RS_ARGS adds options, e.g.
          # "--fp8-accum fast"), the fused kernel in both reductions beside the baseline, -c 1; the
          # labels alternate, twice; rows (variant, blocks, ms, ..., speed-up) to rsab.log
      for i in 1 2; do for g in ${RS_G:-4 8}; do for entry in ${RS_AB:-}; do
        rows=$(bench_entry "$entry" ${RS_TIMEOUT:-90} -M 8192 -N 8192 -K 28672 -g $g -d ${RS_D:-fp8} ${RS_ARGS:-} \
          --strategy fused --reduce both -n 10 -w 3 -c 1)
        echo "=== rsab ${entry%%=*} g=$g run $i rc=$?" | tee -a "$out/rsab.log"
        [ -n "$rows" ] && echo "$rows" | tee -a "$out/rsab.log"
      done; done; done
      ;;
    fp8wgs) # fp8 with fp32 accumulation: the three-warpgroup kernel against the two-warpgroup one
            # (WEAVE_HGEMM_PROMOTE_WGS) and cuBLASLt on the five target shapes and the auto sweep's
            # one-rank bulk shapes at M 512 and 16384 (N 8192, K 28672: bulk moved there when three
            # warpgroups became the default), alternating, twice; the linear share (132 and 128
            # blocks); then GEMM + ReduceScatter fp8 at 4 and 8 ranks
      S="$fp8_shapes -s 512x8192x28672 -s 16384x8192x28672"
      for i in 1 2; do for w in 3 2; do
        echo "=== fp8wgs wgs $w run $i" >> "$out/bench_fp8wgs.log"
        WEAVE_HGEMM_PROMOTE_WGS=$w timeout 100 $b/weave-bench --op gemm -d fp8 --fp8-accum fp32 $S -B 132 -n 20 -w 5 \
          -c 1 >> "$out/bench_fp8wgs.log" 2>&1
        echo "fp8wgs wgs=$w run $i rc=$?"
      done; done
      echo "=== fp8wgs linear share" >> "$out/bench_fp8wgs.log"
      timeout 100 $b/weave-bench --op gemm -d fp8 --fp8-accum fp32 $S -B 132,128 -n 20 -w 5 -c 0 \
        >> "$out/bench_fp8wgs.log" 2>&1
      echo "fp8wgs share rc=$?"
      grep -E "^===|^ +[0-9]+ +[0-9]+ +[0-9]+ " "$out/bench_fp8wgs.log"
      for g in 4 8; do
        timeout ${BENCH_TIMEOUT:-200} $b/weave-bench -M 8192 -N 8192 -K 28672 -g $g -d fp8 --fp8-accum fp32 --strategy all \
          -n 10 -w 3 -c 1 >> "$out/bench_fp8wgs.log" 2>&1
        echo "fp8 gemm_rs g=$g rc=$?"
      done
      grep -v "^#" "$out/bench_fp8wgs.log" | tail -4
      ;;
    ab) # A/B of two builds of the local GEMM in one run: build/weave-bench (this build) against
        # build/weave-bench-base (a copy of another build's, e.g. the default one; carry it), on the
        # four 132-block target shapes, alternating twice (AB_SHAPES / AB_BLOCKS to change them)
      if [ -x $b/weave-bench-base ]; then
        for i in 1 2; do
          for v in base this; do
            exe=$b/weave-bench; [ $v = base ] && exe=$b/weave-bench-base
            echo "=== ab $v $i" >> "$out/bench_ab.log"
            timeout 120 $exe --op gemm ${AB_SHAPES:--s 8192x8192x8192 -s 8192x8192x3584 -s 8192x8192x1024 -s 4096x8192x3584} \
              -B ${AB_BLOCKS:-132} >> "$out/bench_ab.log" 2>&1
            echo "ab $v $i rc=$?"
          done
        done
        grep -v "^# " "$out/bench_ab.log"
      else
        echo "ab: no $b/weave-bench-base to compare with"
      fi
      ;;
    agab) # A/B of two builds' AllGather + GEMM in one run: build/weave-bench against
          # build/weave-bench-base (carry it), bf16 and fp8 at 8 and 4 ranks (M 2048, 8192), then
          # 8 ranks with one communication block a rank (one SM's push rate), alternating twice
      if [ -x $b/weave-bench-base ]; then
        for i in 1 2; do
          for v in base this; do
            exe=$b/weave-bench; [ $v = base ] && exe=$b/weave-bench-base
            for a in "-d bf16 -g 8 -N 3584" "-d fp8 -g 8 -N 3584" "-d bf16 -g 4 -N 7168" "-d fp8 -g 4 -N 7168" \
                     "-d bf16 -g 8 -N 3584 --comm-blocks 1"; do
              echo "=== agab $v $i $a" >> "$out/bench_agab.log"
              timeout 90 $exe --op ag_gemm $a -M 2048 -M 8192 -K 8192 -n 10 -w 3 >> "$out/bench_agab.log" 2>&1
              echo "agab $v $i $a: rc=$?"
            done
          done
        done
        grep -E "^===|^ +[0-9]+ " "$out/bench_agab.log"
      else
        echo "agab: no $b/weave-bench-base to compare with"
      fi
      ;;
    prof) # clock64 breakdown of the cooperative kernel or the three-warpgroup fp8 one
          # (PROF_ARGS="-d fp8 --fp8-accum fp32"; docs/hopper_gemm.md, Profiling build): needs a
          # diagnostic build in PROF_BUILD (default build-prof: cmake -S . -B build-prof
          # -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_FLAGS=-DWEAVE_HGEMM_PROFILE=1; carry its
          # weave-bench); the stamps come back as prof.tar, read with scripts/hgemm_profile.py [--bk 128]
          # [--timeline] (PROF_SHAPES, PROF_BLOCKS=124,132 to change the shapes and block counts)
      pb=${PROF_BUILD:-build-prof}
      if [ -x "$pb/weave-bench" ]; then
        mkdir -p "$out/prof"
        WEAVE_HGEMM_PINGPONG=0 WEAVE_HGEMM_PROFILE_DIR="$out/prof" timeout 150 "$pb/weave-bench" --op gemm ${PROF_ARGS:-} \
          ${PROF_SHAPES:--s 4096x8192x3584 -s 8192x8192x1024} -B ${PROF_BLOCKS:-132} -n 5 -w 2 -c 0 >> "$out/bench.log" 2>&1
        echo "prof rc=$?"; (cd "$out/prof" && tar cf ../prof.tar *.bin) && rm -rf "$out/prof"
      else
        echo "prof: no $pb/weave-bench"
      fi
      ;;
    hold) # the SM clock and power under weave's kernel and cuBLASLt's, each alone for 3 s (weave-bench
          # --op gemm --hold; nvidia-smi sampled every 100 ms beside it): HOLD_DTYPE (default fp8),
          # HOLD_ACCUM (fp8: fp32 fast), HOLD_SHAPES; the table by scripts/hold_table.py (hold.md)
      nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,clocks_event_reasons.active \
        --format=csv,noheader,nounits -lms 100 > "$out/smi.csv" 2>&1 &
      smi=$!
      logs=
      for acc in ${HOLD_ACCUM:-fp32 fast}; do
        a=; [ "${HOLD_DTYPE:-fp8}" = fp8 ] && a="--fp8-accum $acc"
        timeout 120 $b/weave-bench --op gemm -d ${HOLD_DTYPE:-fp8} $a ${HOLD_SHAPES:--s 8192x8192x8192 -s 4096x8192x3584} \
          -B 132 -n 5 -w 2 -c 0 --hold 3000 > "$out/hold_$acc.log" 2>&1
        echo "hold ${HOLD_DTYPE:-fp8} $acc: rc=$?"; logs="$logs $out/hold_$acc.log"
        [ "${HOLD_DTYPE:-fp8}" = fp8 ] || break
      done
      kill $smi 2>/dev/null; wait $smi 2>/dev/null
      python3 scripts/hold_table.py "$out/smi.csv" $logs | tee "$out/hold.md"
      ;;
    gemm) # the --op gemm table (GEMM_ENV: e.g. WEAVE_HGEMM_CLUSTER=2 for a clustered table)
      echo "=== weave-bench --op gemm ${GEMM_ENV:-}" >> "$out/bench.log"
      env ${GEMM_ENV:-} timeout ${GEMM_TIMEOUT:-200} $b/weave-bench --op gemm -J "$out/bench_gemm.json" > "$out/bench_gemm.tmp" 2>&1
      echo "gemm bench ${GEMM_ENV:-} rc=$?"; grep -v "^# lt_def" "$out/bench_gemm.tmp" | tail -26
      cat "$out/bench_gemm.tmp" >> "$out/bench.log"; rm -f "$out/bench_gemm.tmp"
      # the GEMM table joins bench.json (at most 8 files come back)
      python3 - "$out" <<'PY'
import json, sys, os
out = sys.argv[1]; path = os.path.join(out, "bench.json"); g = os.path.join(out, "bench_gemm.json")
rows = json.load(open(path)) if os.path.exists(path) else []
if os.path.exists(g):
    d = json.load(open(g)); d["file"] = "bench_gemm.json"; d["env"] = os.environ.get("GEMM_ENV", "")
    rows.append(d); os.remove(g)
json.dump(rows, open(path, "w"), indent=1)
PY
      ;;
  esac
done
ls -la "$out"
