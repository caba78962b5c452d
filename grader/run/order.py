"""Order: which tracks' checks start first in a grade. The checks phase is as long as its last
track, and a grade checks a few tracks at a time (grader.run.grade._jobs), so the longest start
first: by how long each took here last time (the grader's cache), else, on a GPU host, by the
figures shipped beside this module (a fresh machine, a class's first grade), else by what the
tracks declare.

The shipped figures (durations.json) are each track's checks, in seconds, in a whole grade of
the solutions with `.cache` removed on a GPU host: one measurement, stamped with its device,
date, commit and command, written by `benchmarks/grading_time.sh` after its fresh grade
(`python -m grader.tools.benchdoc durations`). They only order the tracks: nothing is scored or
reported from them.
"""
from __future__ import annotations

import json
import os
import threading
from pathlib import Path

from grader.common.discover import Track
from grader.common.paths import DURATIONS

SHIPPED = Path(__file__).with_name("durations.json")


def durations(record: dict | None = None) -> dict:
    """How long each track's checks took here last time, kept in the grader's cache: "seconds",
    its judges' own seconds (Phase.seconds: not the time it waited for a free slot, which would
    put the tracks started last first next time), what ship() writes; and "repeat", the slowest
    share's seconds less its build and Triton compiles (Phase.repeat_seconds), which the next
    grade here finds cached: what orders it. `record`: "exercise id/track" -> (seconds,
    repeat) to add."""
    try:
        known = json.loads(DURATIONS.read_text())
    except (OSError, ValueError):
        known = {}
    if not isinstance(known.get("repeat"), dict):  # none, or an older flat cache
        known = {"seconds": {}, "repeat": {}}
    if record:
        for key, (seconds, repeat) in record.items():
            known["seconds"][key], known["repeat"][key] = round(seconds, 1), round(repeat, 1)
        DURATIONS.parent.mkdir(parents=True, exist_ok=True)
        tmp = DURATIONS.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
        tmp.write_text(json.dumps(known, indent=1, sort_keys=True))
        tmp.replace(DURATIONS)
    return known


def shipped() -> dict:
    """The shipped figures: "exercise id/track" -> seconds ({} if there are none)."""
    try:
        return dict(json.loads(SHIPPED.read_text())["seconds"])
    except (OSError, ValueError, KeyError, TypeError):
        return {}


def longest_first(pairs, gpu: bool) -> list:
    """The order the checks start in: the longest first. A track never measured here takes the
    shipped figure on a GPU host (the CPU's interpreter and skipped GPU checks order the tracks
    otherwise). With neither: first, in the order of what it declares: in shares (declared
    long), then the tracks that compile, the heaviest builds (CUTLASS's headers, a pybind11
    module's torch/extension.h) before the rest, then higher exercise numbers (bigger shapes).

    Why the shipped figures: on an H200 with `.cache` removed, the declared order started 12
    [triton] (75 s of checks, 69 Triton specializations) and 10 [triton] (60 s) behind six CUDA
    builds, at 47-48 s, and the phase ended at 121-129 s with the host's cores mostly idle after
    75 s; the same spans in the shipped figures' order end at 96 s (a list-scheduling replay of the
    run's spans: docs/performance.md, "Grading time"). A fresh clone's `make grade` on 2 cores
    ended on 03's build, started last, 17 s after every other track: builds before the rest."""
    known = {**(shipped() if gpu else {}), **durations()["repeat"]}
    return sorted(pairs, key=lambda p: (-known.get(f"{p[0].id}/{p[1].name}", 1e9),
                                        -p[1].shards, -_build_weight(p[1]),
                                        -int(p[0].number)))


def _build_weight(track: Track) -> int:
    if not track.sources:
        return 0
    return 2 if track.headers or track.python_module else 1


def ship(device: str, date: str, commit: str, command: str) -> None:
    """Write the cache's figures (a whole grade's, just made) as the shipped ones."""
    SHIPPED.write_text(json.dumps({"device": device, "date": date, "commit": commit,
                                   "command": command, "seconds": durations()["seconds"]},
                                  indent=1, sort_keys=True) + "\n")
