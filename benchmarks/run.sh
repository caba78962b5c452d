#!/usr/bin/env bash
# One GPU session's benchmarks in one go, each stage's log in LOGS/<stage>.txt and its wall time in LOGS/summary.txt, its figures written into docs/performance.md. On a GPU machine, from the repository root: `bash benchmarks/run.sh LOGS STAGE [STAGE ...]`.
#
# Stages (each runs only the grader's public commands):
#   env             the machine: GPU, driver, versions, cores
#   grading-time    benchmarks/grading_time.sh: make grade IMPL=solutions cold, then warm
#   loop[:NN]       benchmarks/edit_loop.sh for 02's CUDA track (or NN's first kernels file)
#   bench[:NN,MM]   make bench REPEATS=5 (EXERCISE=NN,MM: those rows only, the others kept)
#   repeat[:N]      benchmarks/repeatability.py --times N (default 5)
#   gpu-tests       every GPU-only test of the suite (pytest -m gpu tests)
#   cpu-loop[:N]    benchmarks/cpu_loop.sh, N runs each (default 3): the learner's one-shot
#                   commands on a machine without a GPU (run it there, with PY=.venv/bin/python)
# A GPU machine without network: wheels carried in .whl/ are installed for this run first.
# DRY_RUN=1 prints each stage's command and runs nothing.
set -u
LOGS=${1:?usage: bash benchmarks/run.sh LOGS STAGE [STAGE ...]}
shift
[ -d exercises ] || { echo "run.sh: run it from the repository root" >&2; exit 2; }
PY=${PY:-python3}
export PY PYTHONUNBUFFERED=1
mkdir -p "$LOGS"
if [ -z "${DRY_RUN:-}" ] && [ -d .whl ] && ls .whl/*.whl > /dev/null 2>&1; then
  site=$(mktemp -d "${TMPDIR:-/tmp}/site-XXXXXX")
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$site" .whl/*.whl \
    > /dev/null && export PYTHONPATH=$site${PYTHONPATH:+:$PYTHONPATH}
fi
summary() { echo "$*" | tee -a "$LOGS/summary.txt"; }

stage() {  # stage NAME COMMAND...: run it, log it, time it
  local name=$1; shift
  if [ -n "${DRY_RUN:-}" ]; then echo "$name: + $*"; return 0; fi
  local t0=$(date +%s)
  summary "== $name: started $(date -u +%H:%M:%S)"
  "$@" > "$LOGS/$name.txt" 2>&1
  local rc=$?
  summary "== $name: rc=$rc, $(( $(date +%s) - t0 )) s"
  return $rc
}

section() {  # section NAME COMMAND_SHOWN LOG: the stage's table into docs/performance.md
  [ -n "${DRY_RUN:-}" ] && return 0
  local device
  device=$($PY -c "import torch; print(torch.cuda.get_device_name() if torch.cuda.is_available() else '')") || return 1
  [ -n "$device" ] || device="no GPU: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')"
  $PY -m grader.tools.benchdoc section "$1" --device "$device" --command "$2" < "$3"
}

for s in "$@"; do
  case $s in
    env)
      stage env bash -c "nvidia-smi; nproc; $PY -c 'import torch, triton; print(torch.__version__, triton.__version__, torch.cuda.get_device_name())'; nvcc --version | tail -2" ;;
    grading-time)
      stage grading-time bash benchmarks/grading_time.sh "$LOGS/grading-time" \
        && section grading-time "bash benchmarks/grading_time.sh" "$LOGS/grading-time.txt" ;;
    loop|loop:*)
      ex=02; kf=scale_kernels.cu
      if [ "$s" != loop ]; then
        ex=${s#loop:}; kf=$(basename "$(ls solutions/${ex}_*/cuda/*_kernels.cu | head -1)")
      fi
      stage "loop-$ex" bash benchmarks/edit_loop.sh "$ex" cuda "$kf" \
        && section edit-loop "bash benchmarks/edit_loop.sh $ex cuda $kf" "$LOGS/loop-$ex.txt" ;;
    bench|bench:*)
      ex=${s#bench}; ex=${ex#:}
      stage "bench${ex:+-$ex}" make bench REPEATS=5 ${ex:+EXERCISE=$ex} ;;
    repeat|repeat:*)
      n=${s#repeat}; n=${n#:}
      stage repeat $PY benchmarks/repeatability.py --times "${n:-5}" --keep "$LOGS/repeat" ;;
    gpu-tests)
      stage gpu-tests $PY -m pytest -m gpu -q -p no:cacheprovider tests ;;
    cpu-loop|cpu-loop:*)
      n=${s#cpu-loop}; n=${n#:}
      stage cpu-loop bash benchmarks/cpu_loop.sh "${n:-3}" \
        && section cpu-loop "bash benchmarks/cpu_loop.sh ${n:-3}" "$LOGS/cpu-loop.txt" ;;
    *) summary "unknown stage $s"; exit 2 ;;
  esac
done
