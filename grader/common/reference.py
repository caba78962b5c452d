"""Reference: the one loader of an exercise's `reference.py` (the op in PyTorch, the benchmark
inputs, the traffic model, the baselines). Trusted code: it is part of the exercise, never of a
submission. A broken reference.py raises `LoadError` naming the file and line.
"""
from __future__ import annotations

from functools import cache

from grader.common.discover import Exercise
from grader.common.pyfile import import_file


def load_reference(exercise: Exercise):
    return _load(exercise.dir)


@cache
def _load(folder):
    return import_file(folder / "reference.py", f"reference_{folder.name}")
