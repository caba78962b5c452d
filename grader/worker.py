"""The worker: grades one track of one tree in a process of its own (started by grader.isolate).

    python -m grader.worker --tree starter --exercise 02_scale --track cuda --events E.jsonl \
        [--phase checks|bench]

Phase `checks` builds/imports the track and runs the exercise's checks through pytest and the
grader plugin; phase `bench` (a fresh process, once every check passed) times it. Everything it
learns goes to the events file as it happens; whatever kills this process, the parent reads
what was written.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import torch

from grader.discover import EXERCISES, ROOT, load_exercise
from grader.results import Recorder

HAS_GPU = torch.cuda.is_available()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m grader.worker")
    p.add_argument("--tree", required=True, type=Path)
    p.add_argument("--exercise", required=True)
    p.add_argument("--track", required=True)
    p.add_argument("--events", required=True)
    p.add_argument("--phase", choices=["checks", "bench"], default="checks")
    args = p.parse_args(argv)
    if not HAS_GPU:
        os.environ.setdefault("TRITON_INTERPRET", "1")  # before anything imports triton
    record = Recorder(args.events)
    exercise = load_exercise(EXERCISES / args.exercise)
    track = exercise.tracks[args.track]
    record(event="worker", pid=os.getpid(), gpu=torch.cuda.get_device_name() if HAS_GPU else None,
           torch=torch.__version__)

    from grader.build import BuildError
    from grader.loader import LoadError, load_track
    if args.phase == "bench":  # the parent saw every check pass; the build is cached
        from grader.benchmark import grade_performance
        grade_performance(exercise, track, load_track(args.tree, exercise, track), record)
        record(event="done")
        return 0
    start = time.perf_counter()
    try:
        impl = load_track(args.tree, exercise, track)
    except BuildError as e:
        record(event="build", ok=False, stage="build", message=str(e),
               seconds=round(time.perf_counter() - start, 2))
        return 0
    except LoadError as e:
        record(event="build", ok=False, stage="import", message=str(e),
               seconds=round(time.perf_counter() - start, 2))
        return 0
    built = impl._built
    record(event="build", ok=True, stage="build" if built else "import",
           seconds=round(built.seconds if built else time.perf_counter() - start, 2),
           rebuilt=built.rebuilt if built else None)

    import pytest
    code = pytest.main([str(exercise.dir), "-p", "grader.plugin", "--tree", str(args.tree),
                        "--track", track.name, "--events", args.events, "--rootdir", str(ROOT),
                        "-q", "--no-header", "-p", "no:cacheprovider", "-rN", "--tb=short"])
    record(event="checks", exit_code=int(code))
    record(event="done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
