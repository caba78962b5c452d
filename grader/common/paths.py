"""Paths: where the repository, the exercises, the shared headers and every cache live.

The bottom of the grader: it imports no other grader module, so any module may import it. A
submission tree's builds and caches live under CACHE, named by `tree_tag`, never inside the tree.
`GRADER_CACHE` (one of the grader's two environment variables, see grader.common.settings) moves CACHE.
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # grader/common/paths.py
EXERCISES = ROOT / "exercises"
INCLUDE = ROOT / "include"  # common.cuh (kernel side) and aten_cuda.h (binding side)
CACHE = Path(os.environ.get("GRADER_CACHE") or ROOT / ".cache")

HYPOTHESIS = CACHE / "hypothesis"   # hypothesis' store (constants read from sources)
INDUCTOR = CACHE / "inductor"       # the judge's torch.compile caches (the baselines)
CEILINGS = CACHE / "ceilings"       # this GPU's measured ceilings
WARM = CACHE / "warm"               # markers: an exercise's compiled baselines are warm
BASELINES = CACHE / "baselines"     # QUICK: the baselines' last timings on this GPU
DURATIONS = CACHE / "durations.json"  # how long each track's checks took last time


def tree_tag(tree: Path) -> str:
    """A short stable name for a submission tree: 'starter', 'solutions', or name-hash."""
    tree = Path(tree).resolve()
    if tree.parent == ROOT:
        return tree.name
    return f"{tree.name}-{hashlib.sha1(str(tree).encode()).hexdigest()[:8]}"


def build_dir(tree: Path, exercise_id: str, track: str) -> Path:
    """The JIT build folder of one track (grader.submission.build)."""
    return CACHE / "build" / tree_tag(tree) / f"{exercise_id}-{track}"


def aot_dir(tree: Path, exercise_id: str, track: str) -> Path:
    """The ahead-of-time build folder of one track (grader.submission.aot)."""
    return CACHE / "aot" / tree_tag(tree) / f"{exercise_id}-{track}"


def submission_caches(tree: Path) -> Path:
    """Caches the submission's process may write (Triton, Inductor, nvcc's): one per tree."""
    return CACHE / "submission" / tree_tag(tree)


def tree_caches(tree: Path) -> list[Path]:
    """Everything cached for one tree (dropped after grading a temporary tree)."""
    tag = tree_tag(tree)
    return [CACHE / sub / tag for sub in ("build", "aot", "submission")]
