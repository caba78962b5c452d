#!/usr/bin/env bash
# The learner's edit loop: wall seconds from a one-line kernel edit to the scorecard. On a GPU machine, from the repository root: `bash benchmarks/edit_loop.sh [EXERCISE [TRACK [KERNEL_FILE]]]` (default 02 cuda scale_kernels.cu).
#
# A copy of the solution's track in a fresh folder (its build cache cold), graded as a learner
# grades it: `python -m grader grade --exercise NN --submission TREE` and `make exercise-NN`.
# Rows: cold (nothing built), warm (nothing changed), a one-line edit checks only, a one-line
# edit with QUICK=1 timing (its baseline cache filled by one untimed run first), a one-line edit
# with full timing. The edit appends a comment line: ninja rebuilds and relinks exactly as for a
# real one-line change. Prints a markdown table (benchmarks/run.sh puts it into
# docs/performance.md). Without a GPU only the checks-only rows run. DRY_RUN=1 prints the
# commands instead.
set -u
EX=${1:-02}
TRACK=${2:-cuda}
KERNEL=${3:-scale_kernels.cu}
PY=${PY:-python3}
folder=$(ls -d exercises/${EX}_* 2>/dev/null | head -1)
[ -n "$folder" ] || { echo "edit_loop.sh: no exercise $EX (run it from the repository root)" >&2; exit 2; }
name=$(basename "$folder")
[ -f "solutions/$name/$TRACK/$KERNEL" ] || { echo "edit_loop.sh: no solutions/$name/$TRACK/$KERNEL" >&2; exit 2; }
tree=$(mktemp -d "${TMPDIR:-/tmp}/edit-loop-XXXXXX")
trap 'rm -rf "$tree"' EXIT
mkdir -p "$tree/$name"
cp -r "solutions/$name/$TRACK" "$tree/$name/"
if [ -n "${DRY_RUN:-}" ]; then
  gpu="(dry run)"
else
  gpu=$($PY -c "import torch; print(torch.cuda.get_device_name() if torch.cuda.is_available() else 'no GPU')")
fi

echo "$name [$TRACK], one-line edits of $KERNEL; $gpu; $(nproc) cores; $(date -u '+%F %H:%M UTC')"
echo
echo "| row | wall s | build | points |"
echo "|---|---|---|---|"
row() {  # row LABEL COMMAND...: grade once, one table row (wall time, the build column, the total)
  local label=$1; shift
  if [ -n "${DRY_RUN:-}" ]; then echo "| $label | + $* | | |"; return; fi
  local t0=$(date +%s%N)
  "$@" > "$tree/last.log" 2>&1
  local rc=$?
  local ms=$(( ($(date +%s%N) - t0) / 1000000 ))
  local built=$(grep -E "^$EX " "$tree/last.log" | grep -oE "built [0-9]+s|built|imported|loaded|build failed" | head -1)
  local pts=$(grep -E "^total:" "$tree/last.log" | head -1 | sed 's/^total: *//')
  printf "| %s | %d.%d | %s | %s%s |\n" "$label" $((ms / 1000)) $((ms % 1000 / 100)) "${built:-?}" \
    "${pts:-?}" "$([ $rc = 0 ] || echo " (exit $rc)")"
}
edit() { echo "// edit_loop.sh: a one-line change $(date +%s%N)" >> "$tree/$name/$TRACK/$KERNEL"; }

grade=($PY -m grader grade --exercise "$EX" --submission "$tree")
row "cold, checks only" "${grade[@]}" --no-bench
row "warm, checks only" "${grade[@]}" --no-bench
edit
row "one-line edit, checks only" "${grade[@]}" --no-bench
if [ "$gpu" != "no GPU" ]; then
  [ -n "${DRY_RUN:-}" ] || make "exercise-$EX" SUBMISSION="$tree" QUICK=1 > /dev/null 2>&1  # fills QUICK's baseline cache
  edit
  row "one-line edit, QUICK=1 with timing" make "exercise-$EX" SUBMISSION="$tree" QUICK=1
  edit
  row "one-line edit, full timing" make "exercise-$EX" SUBMISSION="$tree"
fi
