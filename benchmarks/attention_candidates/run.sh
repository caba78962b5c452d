#!/bin/bash
# Issue 38's candidates on the GPU machine, from the repository root with $OUT set:
#     bash benchmarks/attention_candidates/run.sh
# Stage 1 (<= 125 s): every variant of cand.py and the committed solution checked in parallel
# processes (bf16 forward + backward at modest shapes of both head dims against float64,
# determinism), which also fills Triton's cache. Stage 2 (until ~T0+210 s): the solution, SDPA
# cuDNN and each variant that passed, at both cases, fwd and fwd+bwd, do_bench_cudagraph median
# of 3; then "auto" (the best kernels combined) and the solution again. Logs in $OUT/a38/,
# packed into $OUT/a38.tgz after each stage. Finishes within 240 s.
set -u
T0=$(date +%s)
export PYTHONUNBUFFERED=1
cd "$(dirname "$0")/../.." || exit 1
L=$OUT/a38
mkdir -p "$L"
pack() { tar czf "$OUT/a38.tgz" -C "$OUT" a38 2>/dev/null; }
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,memory.total --format=csv
  nproc; python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
  git log -1 --format='%h %s' 2>/dev/null; } > "$L/env.txt" 2>&1
cat "$L/env.txt"

# stage 1: checks (and compiles), all at once
NAMES="sol base pipe pipe_tma pipe4w persist pipe_persist regkv regkv64 tma6432 dqpipe bwdpipe"
for n in $NAMES; do
  timeout 115 python3 benchmarks/attention_candidates/gpu.py check "$n" > "$L/check_$n.out" 2>&1 &
done
wait
echo "stage 1 done at $(( $(date +%s) - T0 )) s" | tee -a "$L/env.txt"
pack

# stage 2: timing
LEFT=$(( T0 + 232 - $(date +%s) ))
if [ "$LEFT" -gt 20 ]; then
  timeout "$LEFT" python3 benchmarks/attention_candidates/gpu.py time --deadline $(( T0 + 208 )) > "$L/time.out" 2>&1
  echo "stage 2 rc $? at $(( $(date +%s) - T0 )) s" | tee -a "$L/env.txt"
else
  echo "no time left for stage 2" | tee -a "$L/env.txt"
fi
pack

# what to read: the checks in one line each, then the table
echo "== checks (norm / max|err|/rms per tensor; details in a38/check_*.log)"
for n in $NAMES; do
  if [ -f "$L/check_$n.json" ]; then
    python3 - "$L/check_$n.json" <<'EOF'
import json, re, sys
d = json.load(open(sys.argv[1]))
bad = [l for l in d["lines"] if not l.startswith("ok")]
norms = [float(x) for l in d["lines"] for x in re.findall(r" (\d\.\d+e[-+]\d+)/", l)]
bits = [m.group(1) for l in d["lines"] for m in [re.search(r"same bits as base: (\S+)", l)] if m]
text = (f"worst norm {max(norms):.1e}" if norms else "") + (
    f"; same bits as base per shape: {' | '.join(bits)}" if bits else "")
print(f"{d['name']:13s} {'PASS' if d['ok'] else 'FAIL'} ({d['s']} s) "
      + (bad[0][:220] if bad else text))
EOF
  else
    echo "$n: no result ($(tail -c 300 "$L/check_$n.out" 2>/dev/null | tr '\n' ' '))"
  fi
done
echo "== timing"
if grep -q "^== issue 38" "$L/time.log" 2>/dev/null; then
  grep -v "^time \|vs solution at the case" "$L/time.log" | tail -n 40
elif [ -f "$L/time.log" ]; then   # cut off before its table: the rows it timed
  grep "^time \|WRONG\|Error\|error" "$L/time.log" | tail -n 40
else
  tail -n 30 "$L/time.out" 2>/dev/null
fi
echo "total $(( $(date +%s) - T0 )) s"
