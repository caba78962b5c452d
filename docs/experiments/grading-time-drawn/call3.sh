#!/usr/bin/env bash
# Session 20, call 3: main + measure.Drawn (13's `validating`) + dq_in_bf16's fix, uncommitted:
# the whole scorecard fresh and again, 13 full and QUICK twice, then the known-bad.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
L=$OUT/logs; mkdir -p $L
{ date -u; nvidia-smi --query-gpu=name,uuid,driver_version --format=csv; nproc; } > $L/env.txt 2>&1
t0=$(date +%s); mark() { echo "$1 done $(( $(date +%s) - t0 )) s" >> $L/env.txt; }
ROWS="grade" GRADER_SETTINGS="{\"keep_logs\": \"$L/fresh\"}" timeout 230 bash benchmarks/grading_time.sh $L/gt-fresh > $L/fresh.md 2>&1; mark fresh
ROWS="again" timeout 120 bash benchmarks/grading_time.sh $L/gt-again > $L/again.md 2>&1; mark again
tar czf $OUT/logs.tgz -C $OUT logs
for r in 1 2; do
  WARM=900 ROWS="ex13full ex13quick" GRADER_SETTINGS="{\"keep_logs\": \"$L/k$r\"}" timeout 80 bash benchmarks/grading_time.sh $L/gt-q$r > $L/q$r.md 2>&1; mark q$r
  cp $L/k$r/13_flash_attention-triton-bench.log $L/q$r-bench.log 2>/dev/null
done
python3 -m grader.run.keeper --stop > /dev/null 2>&1
tar czf $OUT/logs.tgz -C $OUT logs
rem=$(( 575 - ($(date +%s) - t0) ))
timeout $rem python3 -m pytest -m gpu -q -p no:cacheprovider -rA tests/test_wrong.py -k "dq_in_bf16" > $L/gpu.txt 2>&1; echo "gpu tests rc=$? (limit $rem s)" >> $L/env.txt; mark gpu
tar czf $OUT/logs.tgz -C $OUT logs
cat $L/env.txt; grep -h "^| [mtQe]" $L/fresh.md $L/again.md $L/q*.md
grep -rh "never had the GPU alone\|another process ran kernels" $L/fresh $L/gt-fresh $L/gt-again 2>/dev/null | sort | uniq -c | head -5
grep -rh "warmed up" $L/fresh $L/q*-bench.log 2>/dev/null | head -12
grep -h "^total\|points" $L/gt-fresh/grade.txt | tail -2; grep -E "FAILED|ERROR|passed|failed" $L/gpu.txt | tail -4
