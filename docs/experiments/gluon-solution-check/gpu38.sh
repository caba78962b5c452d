#!/bin/bash
# Issue 38 on an H200: exercise 13's solution with the Gluon forward (branch wip-38-gluon, not yet
# run on a GPU). Run from /work/main's checkout on the device machine, .whl carried, after
#   python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
#       --target /tmp/site .whl/*.whl; export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
# then: bash .whl/s17/gpu38.sh            (~8 minutes at most; every step has its own limit)
#
# The branch's tree (.whl/wt38.tar: git archive wip-38-gluon) goes to /tmp/wt38, and from there:
#   (a) .whl/s17/gpu38_check.py: the Gluon forward against float64 and against the Triton forward
#       (same bits expected) at (1,2,128,128), (1,2,1024,128), (2,3,4096,128) (+ q x 4), bf16,
#       not causal; fwd+bwd through it; torch.compile uses the Triton kernels; the fallbacks
#       (causal, D 64, fp16, fp32, S 1000, strided, unaligned); a timing at (4,32,4096,128);
#   (b) python3 -m grader grade --exercise 13 --impl solutions (18/18 expected: correctness 8,
#       gradcheck 2, performance 8; its checks never draw a shape the Gluon path serves, so this
#       says the rest is unchanged);
#   (c) python3 benchmarks/flash_attention.py --final --base (issue 38's "done when"; its own
#       three repeats per row), with the time left.
# Logs under $OUT/logs, tarred into $OUT/gpu38-logs.tgz at the end (with summary.txt beside it).
set -u
START=$SECONDS
BUDGET=${BUDGET:-540}            # seconds for the whole script (the call's limit is 600)
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-$PWD/out}
LOGS=$OUT/logs
WT=/tmp/wt38
mkdir -p "$LOGS"
SUMMARY=$OUT/summary.txt
: > "$SUMMARY"

note() { echo "[$((SECONDS - START))s] $*" | tee -a "$SUMMARY"; }
left() { echo $((BUDGET - (SECONDS - START))); }

finish() {
  note "done in $((SECONDS - START)) s"
  cp "$SUMMARY" "$LOGS/"
  tar -czf "$OUT/gpu38-logs.tgz" -C "$OUT" logs && rm -rf "$LOGS"
  ls -la "$OUT"
}
trap finish EXIT

# step NAME LIMIT CMD...: run CMD with a hard limit, its output in $LOGS/NAME.log, its tail shown
step() {
  local name=$1 limit=$2
  shift 2
  if [ "$limit" -lt 20 ]; then note "$name: SKIPPED (only ${limit}s left)"; return 1; fi
  note "$name: start (limit ${limit}s): $*"
  local t=$SECONDS
  timeout -k 10 "$limit" "$@" > "$LOGS/$name.log" 2>&1
  local rc=$?
  note "$name: rc=$rc in $((SECONDS - t))s$([ $rc -eq 124 ] && echo ' (TIMED OUT)')"
  return $rc
}

rm -rf "$WT" && mkdir -p "$WT" && tar -xf "$HERE/../wt38.tar" -C "$WT" || { note "no tree"; exit 1; }
export PYTHONPATH=/tmp/site:$WT PYTHONUNBUFFERED=1   # the branch's grader, not the checkout's
cd "$WT"
{ nvidia-smi; python3 -c "import torch, triton; print(torch.__version__, triton.__version__)"; } \
  > "$LOGS/machine.log" 2>&1
note "machine: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1); $(tail -1 "$LOGS/machine.log")"

# (a) correctness, dispatch, a timing: ~1 minute
step a_check 200 env WT="$WT" python3 "$HERE/gpu38_check.py"
grep -E "PASS|FAIL|ms  |EXCEPTION" "$LOGS/a_check.log" | tail -60 | tee -a "$SUMMARY"

# (b) the grade of 13 (fresh machine: ~40-90 s, Triton's cache cold)
LIMIT_B=$(( $(left) - 150 )); [ "$LIMIT_B" -gt 240 ] && LIMIT_B=240
step b_grade "$LIMIT_B" python3 -m grader grade --exercise 13 --impl solutions --time-report
grep -E "points|total:|correctness|checks passed|FAIL|failed|specializations|13 +\[triton\]" \
  "$LOGS/b_grade.log" | tail -25 | tee -a "$SUMMARY"

# (c) the benchmark, with what is left (it logs line by line: a run cut short keeps its rows)
step c_bench "$(left)" env OUT="$LOGS" python3 benchmarks/flash_attention.py --final --base
grep -E "^\||matmul|failed|Traceback|Error" "$LOGS/c_bench.log" | tail -40 | tee -a "$SUMMARY"
