"""Profile child: the process `make exercise-NN PROFILE=1` runs under ncu (grader.tools.profile):
the track loaded as the submission's process loads it, then one profiled step of the graded case.

    python -m grader.tools.profile_child TREE EXERCISE TRACK MODE
"""
from __future__ import annotations

import sys
from pathlib import Path

import torch

from grader.common.discover import discover
from grader.common.reference import load_reference
from grader.common.timing import make_step
from grader.judge.cases import dy_for, make_inputs
from grader.submission.loader import load_track


def main(tree: str, exercise: str, track: str, mode: str) -> None:
    """One warm-up call, then one profiled call of the graded case."""
    ex = discover(only=exercise)[0]
    impl = load_track(Path(tree), ex, ex.tracks[track])
    ref = load_reference(ex)
    args = make_inputs(ex, ref, ex.benchmark.case, 0)
    dy = dy_for(ref, args, ex) if mode != "forward" else None
    run = make_step(getattr(impl, ex.benchmark.call), args, mode, ex.benchmark.grad_args, dy)
    run()  # compiles, autotunes: not what the learner's kernel costs
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    run()
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()


if __name__ == "__main__":
    main(*sys.argv[1:5])
