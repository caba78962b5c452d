"""Judge: grades one phase of one track of one tree, in a process of its own (grader.run.tracks).

    python -m grader.judge --tree starter --exercise 02_scale --track cuda --events E.jsonl \
        [--phase checks|bench|sweep|warm] [--gate FILE [--warm FILE]]

What runs here: the judge's process, which never imports the submission. It starts the
submission's process first (grader.judge.spawn; adopted by grader.judge.proxy), so that process
builds and imports the track while this one imports torch and pytest, then runs its phase
(grader.judge.phases: checks, bench, sweep or warm). Everything the judge learns goes to the
events file as it happens (grader.common.events); whatever kills a process, the parent reads
what was written. The events file is the judge's alone: the submission's process is never told
its path and cannot write outside its scratch folder.

What the judge's modules may import: grader.common, and each other; never grader.run (the grade
process), grader.submission (the sandboxed process) nor grader.tools (.importlinter).
"""
from __future__ import annotations

import time

BEGAN = time.time()  # the process's start, before any import (the timeline shows the imports)

import argparse  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

# Nothing imported at the top imports torch: the submission's process starts first (below).
from grader.common.processes import step_aside  # noqa: E402
from grader.common.settings import current  # noqa: E402
from grader.judge.spawn import Spawner  # noqa: E402


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m grader.judge")
    p.add_argument("--tree", required=True, type=Path)
    p.add_argument("--exercise", required=True)
    p.add_argument("--track", required=True)
    p.add_argument("--events", required=True)
    p.add_argument("--phase", choices=["checks", "bench", "sweep", "warm"], default="checks")
    p.add_argument("--gate", type=Path, help="(bench, warm) get ready, then wait for this file to "
                                             "exist before timing anything")
    p.add_argument("--warm", type=Path, help="(bench, with --gate) while this file exists, no "
                                             "track is timing: warm up before the gate")
    p.add_argument("--scratch-in", type=Path, help="the folder to make the submission's "
                                                   "scratch folder in (the caller removes it)")
    p.add_argument("--fork-via", type=int, help="a zygote's channel: fork the submission's "
                                                "process through it (grader.run.zygote)")
    args = p.parse_args(argv)
    spawner = Spawner.from_args(args.scratch_in, args.fork_via)
    early = None
    if args.phase in ("checks", "bench") and not current().sanitize:
        # the submission's process starts now and imports its torch while this one imports its
        # own (torch is not imported yet here): 2-4 s less per track
        early = spawner.start(args.tree, args.exercise, args.track)
    if args.phase == "checks":
        step_aside()  # after the start above: a submission's process started here inherits it
    # torch, pytest and the rest, imported only now: after the start above
    from grader.judge.phases import run_phase
    return run_phase(args, BEGAN, early, spawner)


if __name__ == "__main__":
    code = main()
    # All the judge has to say is in its events file (each line flushed as it happened) and its
    # log: end here. Python's shutdown with torch loaded (module teardown, torch's destructors)
    # took 1-2 s on the 2-core machine, with the grade waiting for this process to end.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
