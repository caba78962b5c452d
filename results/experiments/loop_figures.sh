#!/usr/bin/env bash
# The learner's loop (issue 14), measured: seconds from an edit of a kernel to its scorecard.
# From the repository root, on any machine (the timed rows only where there is a GPU):
#
#   bash results/experiments/loop_figures.sh [EXERCISE [TRACK [KERNEL_FILE]]]   # default 02 cuda scale_kernels.cu
#
# A copy of the solution's track in a fresh folder (its build cache is cold), graded as a
# learner grades it with `make exercise-NN SUBMISSION=...`, i.e. `python -m grader grade
# --exercise NN --submission TREE`:
#   cold      nothing built for this tree yet (ninja builds every source)
#   warm      again, nothing changed (ninja: nothing to do)
#   edit      a one-line change to the kernel file (a comment line appended: ninja rebuilds
#             that object and relinks, exactly as for a real one-line change)
#   QUICK     with timing, QUICK=1 (3 examples per property check; the baselines' times cached
#             per device and case: the first QUICK run fills that cache, so it is run once
#             before the measured one), after another one-line edit
# Prints one line per row: wall seconds, and the scorecard's "built N s". LOOP_KEEP=DIR keeps
# each row's worker logs (GRADER_KEEP_LOGS) in DIR/row1, row2, ...
set -u
EX=${1:-02}
TRACK=${2:-cuda}
KERNEL=${3:-scale_kernels.cu}
PY=${PY:-python3}
folder=$(ls -d exercises/${EX}_* | head -1)
name=$(basename "$folder")
tree=$(mktemp -d /tmp/loop-XXXXXX)
mkdir -p "$tree/$name"
cp -r "solutions/$name/$TRACK" "$tree/$name/"
gpu=$($PY -c "import torch; print(torch.cuda.get_device_name() if torch.cuda.is_available() else 'no GPU')")
echo "loop figures: $name [$TRACK], edits of $KERNEL; $gpu; $(nproc) cores; $(date -u +%F)"

n=0
row() {  # row LABEL ARGS...: grade once, print wall time and the build column
  local label=$1; shift
  n=$((n + 1))
  # LOOP_KEEP=DIR: every row's worker logs and events under DIR/row<N> (timeline.py reads them)
  local keep=${LOOP_KEEP:+$LOOP_KEEP/row$n}
  local t0=$(date +%s%N)
  GRADER_KEEP_LOGS=$keep "$@" > "$tree/last.log" 2>&1
  local rc=$?
  local ms=$(( ($(date +%s%N) - t0) / 1000000 ))
  local built=$(grep -E "^$EX " "$tree/last.log" | grep -oE "built [0-9]+s|built|imported|loaded|build failed" | head -1)
  local pts=$(grep -E "^total:" "$tree/last.log" | head -1)
  printf "%-36s %3d.%d s   (%s; %s; rc=%s)\n" "$label" $((ms / 1000)) $((ms % 1000 / 100)) "${built:-?}" "${pts:-?}" "$rc"
}
edit() { echo "// loop_figures.sh: a one-line change $(date +%s%N)" >> "$tree/$name/$TRACK/$KERNEL"; }

grade=($PY -m grader grade --exercise "$EX" --submission "$tree")
row "cold, checks only" "${grade[@]}" --no-bench
row "warm, checks only" "${grade[@]}" --no-bench
edit
row "one-line edit, checks only" "${grade[@]}" --no-bench --junit "$tree/junit.xml"
# where those seconds went: the checks' own times (JUnit time=), the rest is process starts,
# the build and pytest's collection
$PY - "$tree/junit.xml" <<'PYEOF'
import sys, xml.etree.ElementTree as ET
cases = [(float(c.get("time") or 0), c.get("name")) for c in ET.parse(sys.argv[1]).iter("testcase")]
print(f"  {len(cases)} checks, {sum(t for t, _ in cases):.1f} s in the checks themselves; slowest: "
      + ", ".join(f"{n} {t:.1f} s" for t, n in sorted(cases, reverse=True)[:4]))
PYEOF
if [ "$gpu" != "no GPU" ] && [ "${LOOP_TIMING:-1}" != 0 ]; then  # LOOP_TIMING=0: checks only
  GRADER_QUICK=1 "${grade[@]}" > /dev/null 2>&1  # fills the QUICK baseline cache (not timed)
  edit
  row "one-line edit, QUICK=1 with timing" env GRADER_QUICK=1 "${grade[@]}"
  edit
  row "one-line edit, with timing (full)" "${grade[@]}"
fi
cp "$tree/last.log" "${LOOP_LOG:-/dev/null}" 2>/dev/null
rm -rf "$tree"
