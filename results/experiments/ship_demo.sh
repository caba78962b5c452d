#!/usr/bin/env bash
# Issue 15 on a GPU machine, from the repository root: an ahead-of-time build graded, a
# compute-sanitizer run on a racy kernel, and a class of 23 graded by `python -m grader batch`.
# Writes its logs under $1 (default /tmp/ship-demo). About 6-8 minutes on one H200.
#
#   bash results/experiments/ship_demo.sh OUTDIR
set -u
OUT=${1:-/tmp/ship-demo}
mkdir -p "$OUT"
PY=${PY:-python3}
stamp() { date +%s; }

# 1. AOT: setup.py-style build of 04's CUDA track outside the tree, loaded as a shipped binary
t0=$(stamp)
timeout 400 $PY -m grader grade --exercise 04 --impl solutions --build aot --no-bench \
  > "$OUT/aot-04.txt" 2>&1
echo "aot: rc=$? $(( $(stamp) - t0 )) s (build + checks)" | tee -a "$OUT/summary.txt"
grep -E "built|Scorecard|^04" "$OUT/aot-04.txt" | head -8 | tee -a "$OUT/summary.txt"

# 2. SANITIZE: 04 with the barrier before its shared-memory reads removed, under racecheck
tree=$(mktemp -d)
mkdir -p "$tree/04_reduce_sum"
cp -r solutions/04_reduce_sum/cuda "$tree/04_reduce_sum/"
$PY - "$tree/04_reduce_sum/cuda/reduce_sum_kernels.cu" <<'EOF'
import sys
p = sys.argv[1]
s = open(p).read()
old = "  __syncthreads();  // every thread's value is in smem before any thread reads another's\n"
assert old in s, "the solution changed: update ship_demo.sh"
open(p, "w").write(s.replace(old, "", 1))
EOF
t0=$(stamp)
timeout 420 make exercise-04 SANITIZE=racecheck SUBMISSION="$tree" > "$OUT/sanitize-04.txt" 2>&1
echo "sanitize: rc=$? $(( $(stamp) - t0 )) s" | tee -a "$OUT/summary.txt"
grep -iE -A12 "sanitizer|racecheck" "$OUT/sanitize-04.txt" | head -30 | tee -a "$OUT/summary.txt"

# 3. batch: 23 submissions of exercise 01 (solutions, starters, known-bad, zips), checks only
t0=$(stamp)
GRADER_BATCH_OUT="$OUT/batch" timeout 900 $PY -m pytest tests/test_batch.py -m gpu -s -q \
  -p no:cacheprovider > "$OUT/batch.txt" 2>&1
echo "batch: rc=$? $(( $(stamp) - t0 )) s" | tee -a "$OUT/summary.txt"
grep -E "wall time|passed|failed" "$OUT/batch.txt" | tail -4 | tee -a "$OUT/summary.txt"
cp "$OUT/batch/summary.csv" "$OUT/batch-summary.csv" 2>/dev/null
