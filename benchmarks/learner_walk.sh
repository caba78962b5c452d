#!/usr/bin/env bash
# The newcomer's walk of 08 and 13 (issue 37): the first message of a grade for each usual mistake. On the CPU machine or a GPU machine, from the repository root: `bash benchmarks/learner_walk.sh` (QUICK=1: one example per property check).
#
# Each mistake is a known-bad beside its exercise (exercises/NN_name/wrong/<mistake>.toml: the
# solution's edits, and what its grade must say): applied in turn to a fresh copy of the
# solution, graded as `make exercise-NN SUBMISSION=...` grades it (the checks, no timing: the
# messages are the checks'), and the first failure of the grade printed, as the learner reads it
# first. WALK="08_add_rmsnorm/returns_only_y ..." walks those instead; DRY_RUN=1 makes each tree
# and prints the command instead of grading; KEEP=DIR keeps each grade's whole output there.
set -u
[ -d exercises ] || { echo "learner_walk.sh: run it from the repository root" >&2; exit 2; }
# python3 where it has the grader's packages (a GPU machine), else the checkout's venv
PY=${PY:-python3}
"$PY" -c "import torch, triton, pytest, hypothesis, rich" 2>/dev/null || PY=.venv/bin/python
WALK=${WALK:-"
  08_add_rmsnorm/eps_outside_the_square_root
  08_add_rmsnorm/sum_of_squares_in_16_bit
  08_add_rmsnorm/returns_only_y
  08_add_rmsnorm/undeclared_mutation
  13_flash_attention/no_online_rescale
  13_flash_attention/scale_applied_twice
  13_flash_attention/backward_writes_nothing
  13_flash_attention/diagonal_mask_strict"}
work=$(mktemp -d "${TMPDIR:-/tmp}/learner-walk-XXXXXX")
trap 'rm -rf "$work"' EXIT

# the trees, in one process: each the solution with its known-bad's edits (tests/conftest.py,
# make_variant, as tests/test_wrong.py makes them); one line each: mistake, tree, why
MAKE_TREES='
import sys, tomllib
from pathlib import Path
sys.path[:0] = [".", "tests"]
from conftest import make_variant
work = Path(sys.argv[1])
for mistake in sys.argv[2:]:
    exercise, name = mistake.split("/")
    spec = tomllib.loads(Path(f"exercises/{exercise}/wrong/{name}.toml").read_text())
    make_variant(work / name, exercise, spec["track"],
                 {f: [tuple(pair) for pair in pairs] for f, pairs in spec["edits"].items()})
    print(mistake, work / name, spec["why"], sep="\t")
'
# shellcheck disable=SC2086  # WALK is a list of words
"$PY" -c "$MAKE_TREES" "$work" $WALK > "$work/trees" \
  || { echo "learner_walk.sh: the trees could not be made" >&2; exit 1; }

first_failure() {  # the first "  FAIL" block of a grade's output: its message and example
  awk '/^  FAIL / { if (seen) exit; seen = 1; print; next }
       seen && /^      / { if ($0 !~ /^      run it alone:/) print; next }
       seen { exit }' "$1"
}

while IFS=$'\t' read -r mistake tree why; do
  number=${mistake:0:2}
  cmd=("$PY" -m grader grade --exercise "$number" --submission "$tree" --no-bench
       ${QUICK:+--quick})
  echo "== $mistake: $why"
  if [ -n "${DRY_RUN:-}" ]; then
    echo "+ ${cmd[*]}"
    continue
  fi
  began=$SECONDS
  "${cmd[@]}" > "$work/out.txt" 2>&1
  message=$(first_failure "$work/out.txt")
  echo "${message:-(no check failed: $(grep -m1 -E "^ *$number " "$work/out.txt"))}"
  echo "   ($((SECONDS - began)) s)"
  if [ -n "${KEEP:-}" ]; then
    mkdir -p "$KEEP" && cp "$work/out.txt" "$KEEP/$(basename "$tree").txt"
  fi
  echo
done < "$work/trees"
