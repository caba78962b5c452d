"""Paths: where the repository, the exercises, the shared headers and every cache live.

The bottom of the grader: it imports no other grader module, so any module may import it. A
submission tree's builds and caches live under CACHE, named by `tree_tag`, never inside the tree.
`GRADER_CACHE` (one of the grader's two environment variables, see grader.common.settings) moves CACHE.
"""
from __future__ import annotations

import hashlib
import json
import os
from importlib.metadata import version
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
PCH_DIR = CACHE / "pch"             # the bindings' precompiled header (grader.submission.pch)
PYCACHE = CACHE / "pycache"         # Python's bytecode of the packages, where they keep none
PCH_LOCK = PCH_DIR / "building.lock"  # held while a PCH is being made (whichever its flags)


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


def warm_stop(warm: Path) -> Path:
    """The file the grade touches beside a timing judge's warm file (grader.run.tracks.Ahead.quiet)
    to end that judge's warm-up at its next input set, before the grade's first timing
    (grader.judge.measure.warm_up)."""
    return warm.with_name(warm.name + ".stop")


def warm_marker(exercise, device: str) -> Path:
    """The file the judge leaves when every compiled baseline of the exercise compiled and ran
    on this GPU (grader.judge.baselines.warm_baselines): the judge's Inductor cache (INDUCTOR)
    then holds them, and a later grade on this GPU with this torch, Triton and reference.py skips
    the warm-up (a dozen processes of ~20 s each). Should the cache have been emptied since, the
    timing phase compiles them itself (the first call is outside every timing either way)."""
    b = exercise.benchmark
    key = json.dumps([device, version("torch"), version("triton"), exercise.id, b.case, b.dtype,
                      b.modes, b.baselines, b.grad_args])
    digest = hashlib.sha256(key.encode() + (exercise.dir / "reference.py").read_bytes())
    return WARM / f"{exercise.id}-{digest.hexdigest()[:16]}"
