#!/usr/bin/env bash
# Next session (prepared 2026-11-30 19:25 UTC, not run): does giving 13's checks more judges in a
# scorecard (exercise.toml shards, 4 today) end them sooner? In both of this session's fresh
# scorecards 13's checks were the last done (106 s against 96 s for the rest), with 4 judges
# compiling its specializations on a 16-core machine whose other tracks were done. A: shards = 4,
# B: shards = 8, fresh (.cache removed) one after the other; ORDER="B A" on the next machine.
set -u
[ -d /tmp/site ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
L=$OUT/logs; mkdir -p $L
{ date -u; nvidia-smi --query-gpu=name,uuid --format=csv,noheader; } > $L/env.txt 2>&1
T=exercises/13_flash_attention/exercise.toml; cp $T /tmp/toml-A
sed 's/^shards = 4$/shards = 8/' /tmp/toml-A > /tmp/toml-B; cmp -s /tmp/toml-A /tmp/toml-B && exit 1
for v in ${ORDER:-A B}; do
  cp /tmp/toml-$v $T
  ROWS="grade" timeout 250 bash benchmarks/grading_time.sh $L/gt-$v > $L/$v.md 2>&1
  echo "$v: $(grep -h '^| make grade' $L/$v.md)" >> $L/env.txt
  grep -h "checked 13_\|checked 12_matmul_tc \[cutlass\]\|baselines compiled ahead\|timed 13_flash_attention \[" $L/gt-$v/grade.txt >> $L/env.txt
done
cp /tmp/toml-A $T
tar czf $OUT/logs.tgz -C $OUT logs; cat $L/env.txt
