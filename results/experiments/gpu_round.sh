#!/usr/bin/env bash
# One device call of a GPU round: the stages named on the command line, in order, each with its
# log under $LOGS/<stage>.txt and one summary line (wall seconds, exit code) in $LOGS/summary.txt.
# From the repository root of a GPU machine (python3 with torch and triton; the wheels this
# project needs beside them carried in .whl/, see the device notes in results/RESULTS.md):
#
#   bash results/experiments/gpu_round.sh LOGS STAGE [STAGE ...]
#
# Stages:
#   env         the machine: GPU, driver, versions, cores
#   grade       make grade IMPL=solutions, every exercise, cold caches (the scorecard, its JSON,
#               the grading time, and every worker's log)
#   regrade     the same again, warm (build caches and compiled baselines kept; workers' logs kept)
#               (both: the load average and the count of python processes every 2 s, *-cpu.txt)
#   grade:NN,MM the named exercises only (warm or cold, as the caches are)
#   loop        results/experiments/loop_figures.sh 02 and 06 (the learner's edit loop)
#   loop:NN     the same for one exercise's CUDA track, its workers' logs kept
#   gputest:NN,MM  the GPU-only tests of tests/test_exNN_*.py, ...
#   ncu12stalls where 12's CUTLASS kernel and cuBLAS's wait (ncu warp-state, scheduler sections)
#   knownbad    the GPU known-bad variants of the exercises' tests (pytest -m gpu tests/test_ex*)
#   gpu-tests   every GPU-only test of the suite (pytest -m gpu tests)
#   ship        results/experiments/ship_demo.sh (AOT build, SANITIZE=racecheck, a batch of 23)
#   batch       only the batch of 23 of ship_demo.sh (python -m grader batch, checks of 01)
#   why09       results/experiments/09_why_slower.py, then its --ncu run under Nsight Compute
#   ncu12       results/experiments/12_ncu.py and its --ncu run
#   bench:NN,MM make bench EXERCISE=NN,MM REPEATS=5 into results/bench (the other rows kept)
#   py:SCRIPT[:ARGS]  python3 results/experiments/SCRIPT --out $LOGS/SCRIPT-stem ARGS (a sweep)
set -u
LOGS=$1
shift
mkdir -p "$LOGS"
if [ -d .whl ] && ! python3 -c "import landlock, liger_kernel, cutlass_library, junitparser" 2>/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl >/dev/null && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONUNBUFFERED=1
summary() { echo "$*" | tee -a "$LOGS/summary.txt"; }
sampler() {  # sampler FILE: every 2 s, the load average and the python processes (compile workers apart)
  while :; do
    echo "$(date +%s) load $(cut -d' ' -f1-3 /proc/loadavg) python $(pgrep -c python) compile_workers $(pgrep -fc compile_worker)"
    sleep 2
  done > "$1"
}

stage() {  # stage NAME COMMAND...: run it, log it, time it
  local name=$1; shift
  local t0=$(date +%s)
  summary "== $name: started $(date -u +%H:%M:%S)"
  "$@" > "$LOGS/$name.txt" 2>&1
  local rc=$?
  summary "== $name: rc=$rc, $(( $(date +%s) - t0 )) s"
}

for s in "$@"; do
  case $s in
    env)
      stage env bash -c 'nvidia-smi; nproc; python3 -c "import torch, triton; print(torch.__version__, triton.__version__, torch.cuda.get_device_name())"; python3 -c "from grader.trust import landlock_available as l; print(\"landlock\", l())"; nvcc --version | tail -2' ;;
    grade)
      rm -rf .cache /tmp/torchinductor_root
      sampler "$LOGS/grade-cpu.txt" & sp=$!
      stage grade env GRADER_KEEP_LOGS="$LOGS/grade-workers" make grade IMPL=solutions RESULTS="$LOGS/grade.json"
      kill $sp
      grep -E "^[0-9]{2} |^total|checked|timed|compiled ahead" "$LOGS/grade.txt" | tail -45 >> "$LOGS/summary.txt" ;;
    regrade)
      sampler "$LOGS/regrade-cpu.txt" & sp=$!
      stage regrade env GRADER_KEEP_LOGS="$LOGS/regrade-workers" make grade IMPL=solutions RESULTS="$LOGS/regrade.json"
      kill $sp
      grep -E "^[0-9]{2} |^total" "$LOGS/regrade.txt" >> "$LOGS/summary.txt" ;;
    grade:*)
      stage "grade-${s#grade:}" python3 -m grader grade --impl solutions --exercise "${s#grade:}" --json "$LOGS/grade-${s#grade:}.json"
      grep -E "^[0-9]{2} |^total" "$LOGS/grade-${s#grade:}.txt" >> "$LOGS/summary.txt" ;;
    loop)
      LOOP_KEEP="$LOGS/loop-02-workers" stage loop-02 bash results/experiments/loop_figures.sh 02 cuda scale_kernels.cu
      stage loop-06 bash results/experiments/loop_figures.sh 06 cuda rmsnorm_kernels.cu
      cat "$LOGS/loop-02.txt" "$LOGS/loop-06.txt" >> "$LOGS/summary.txt" ;;
    loop:*)  # loop:02 — one exercise's CUDA loop, its workers' logs kept
      ex=${s#loop:}; kf=$(ls solutions/${ex}_*/cuda/*_kernels.cu | head -1)
      LOOP_KEEP="$LOGS/loop-$ex-workers" stage "loop-$ex" bash results/experiments/loop_figures.sh "$ex" cuda "$(basename "$kf")"
      cat "$LOGS/loop-$ex.txt" >> "$LOGS/summary.txt" ;;
    gputest:*)  # gputest:04,12 — the GPU-only tests of those exercises' test files
      files=$(echo ${s#gputest:} | tr , '\n' | sed 's|^|tests/test_ex|; s|$|_*.py|')
      stage "gputest-${s#gputest:}" python3 -m pytest -m gpu -q -p no:cacheprovider $files
      tail -3 "$LOGS/gputest-${s#gputest:}.txt" >> "$LOGS/summary.txt" ;;
    ncu12stalls)  # where the CUTLASS and cuBLAS GEMM warps wait, side by side
      stage ncu12stalls ncu --clock-control none -k regex:'device_kernel|nvjet' --launch-count 2 \
        --section WarpStateStats --section SchedulerStats --section ComputeWorkloadAnalysis \
        --section MemoryWorkloadAnalysis python3 results/experiments/12_ncu.py --ncu
      grep -E "device_kernel|nvjet|Stall|Issued|Eligible|Active Warps|Warp Cycles|Pipe|L2 Hit|Mem Busy" "$LOGS/ncu12stalls.txt" | cut -c1-160 >> "$LOGS/summary.txt" ;;
    knownbad)
      stage knownbad python3 -m pytest -m gpu -n 6 -q -p no:cacheprovider tests/test_ex04_reduce_sum.py tests/test_ex07_layernorm.py tests/test_ex08_add_rmsnorm.py tests/test_ex09_rmsnorm_quant.py tests/test_ex10_layernorm_dropout.py tests/test_ex11_tiled_matmul.py tests/test_ex12_matmul_tc.py
      tail -5 "$LOGS/knownbad.txt" >> "$LOGS/summary.txt" ;;
    gpu-tests)
      stage gpu-tests python3 -m pytest -m gpu -n 6 -q -p no:cacheprovider tests
      tail -5 "$LOGS/gpu-tests.txt" >> "$LOGS/summary.txt" ;;
    ship)
      stage ship bash results/experiments/ship_demo.sh "$LOGS/ship"
      cat "$LOGS/ship/summary.txt" >> "$LOGS/summary.txt" 2>/dev/null ;;
    batch)
      stage batch env GRADER_BATCH_OUT="$LOGS/batch" python3 -m pytest tests/test_batch.py -m gpu -s -q -p no:cacheprovider
      grep -E "wall time|passed|failed" "$LOGS/batch.txt" | tail -4 >> "$LOGS/summary.txt" ;;
    why09)
      stage why09 python3 results/experiments/09_why_slower.py
      stage why09-ncu ncu --clock-control none -k regex:rmsnorm_quant --launch-skip 4 --launch-count 2 \
        --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy \
        --section WarpStateStats python3 results/experiments/09_why_slower.py --ncu
      tail -12 "$LOGS/why09.txt" >> "$LOGS/summary.txt" ;;
    ncu12)
      stage ncu12 python3 results/experiments/12_ncu.py
      stage ncu12-ncu ncu --clock-control none -k regex:'matmul|device_kernel|nvjet|gemm|sm90' \
        --section SpeedOfLight --section Occupancy --section LaunchStats \
        python3 results/experiments/12_ncu.py --ncu
      tail -12 "$LOGS/ncu12.txt" >> "$LOGS/summary.txt" ;;
    bench:*)
      stage "bench-${s#bench:}" make bench EXERCISE="${s#bench:}" REPEATS=5
      cp results/bench/bench.md results/bench/bench.json results/bench/bench.png "$LOGS/" ;;
    py:*)
      spec=${s#py:}; script=${spec%%:*}; args=""; [ "$spec" != "$script" ] && args=${spec#*:}
      stem=${script%.py}
      stage "$stem" python3 "results/experiments/$script" --out "$LOGS/$stem" $args
      tail -25 "$LOGS/$stem.txt" >> "$LOGS/summary.txt" ;;
    *) summary "unknown stage $s" ;;
  esac
done
