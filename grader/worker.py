"""The worker: grades one track of one tree in a process of its own (started by grader.isolate).

    python -m grader.worker --tree starter --exercise 02_scale --track cuda --events E.jsonl \
        [--phase checks|bench]

This is the judge: it never imports the submission. It starts the submission's process
(grader.runner, through grader.proxy), which builds and imports the track; phase `checks` then
runs the exercise's checks through pytest and the grader plugin, every call crossing to that
process; phase `bench` (a fresh judge and runner, once every check passed) times it
(grader.measure); phase `sweep` runs `make bench` for one exercise (grader.bench); phase `warm`
(no submission at all) compiles the exercise's baselines while checks run. Everything the
judge learns goes to the events file as it happens; whatever kills a process, the parent reads
what was written. The events file is the judge's alone: the runner is never told its path and
cannot write outside its scratch folder.
"""
from __future__ import annotations

import time

BEGAN = time.time()  # the process's start, before any import (the timeline shows the imports)

import argparse  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

from grader.discover import EXERCISES, ROOT, load_exercise
from grader.results import Recorder


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m grader.worker")
    p.add_argument("--tree", required=True, type=Path)
    p.add_argument("--exercise", required=True)
    p.add_argument("--track", required=True)
    p.add_argument("--events", required=True)
    p.add_argument("--phase", choices=["checks", "bench", "sweep", "warm"], default="checks")
    p.add_argument("--gate", type=Path, help="(bench) get ready, then wait for this file to "
                                             "exist before timing anything")
    args = p.parse_args(argv)
    early = None
    if args.phase in ("checks", "bench") and not os.environ.get("GRADER_SANITIZE"):
        # the submission's process starts now and imports its torch while this one imports its
        # own (torch is not imported yet here): 2-4 s less per track (grader.spawn)
        from grader import spawn
        early = spawn.start_runner(args.tree, args.exercise, args.track)
    import torch
    record = Recorder(args.events)
    exercise = load_exercise(EXERCISES / args.exercise)
    track = exercise.tracks[args.track]
    record(event="worker", pid=os.getpid(), began=BEGAN,
           gpu=torch.cuda.get_device_name() if torch.cuda.is_available() else None,
           torch=torch.__version__)

    if args.phase == "warm":  # no submission: compile the baselines ahead (grader.measure)
        from grader.measure import warm_baselines
        record(event="warm", seconds=warm_baselines(exercise))
        record(event="done")
        return 0
    if args.phase == "sweep":  # make bench: every track of the tree, in runners of their own
        from grader.bench import bench_exercise
        bench_exercise(args.tree.resolve(), exercise, record,
                       repeats=int(os.environ.get("GRADER_BENCH_REPEATS") or 2))
        record(event="done")
        return 0
    # hypothesis keeps what it stores (the constants it reads from source files) in the
    # grader's cache, not in a .hypothesis/ folder of the repository it runs in
    from grader.build import CACHE
    os.environ.setdefault("HYPOTHESIS_STORAGE_DIRECTORY", str(CACHE / "hypothesis"))
    # pytest and the plugins the checks use, imported while the submission's process is still
    # importing torch and loading the track (open_session waits for it): off the critical path
    import _hypothesis_pytestplugin  # noqa: F401
    import pytest
    import pytest_timeout  # noqa: F401
    from grader import plugin
    from grader.proxy import RunnerDied
    plugin.PRESTARTED = early
    try:
        session = plugin.open_session(args.tree, exercise, track)
    except RunnerDied as e:
        record(event="build", ok=False, stage="import", message=e.reason + _excerpt(e.log))
        return 0
    loaded = session.loaded
    if "error" in loaded:  # the load itself raised
        err = loaded["error"]
        loaded = {"built": False, "stage": "import",
                  "message": f"loading the track failed: {err.get('type')}: {err.get('message')}"}
    record(event="build", ok=bool(loaded.get("built")), stage=loaded.get("stage"),
           message=loaded.get("message", ""), seconds=loaded.get("seconds"),
           rebuilt=loaded.get("rebuilt"), sandbox=loaded.get("sandbox"))
    if not loaded.get("built"):
        session.close()
        return 0
    if args.phase == "bench":  # the parent saw every check pass; the build is cached
        from grader.measure import grade_performance, prepare_performance
        prepared = None
        if args.gate is not None:  # started ahead: another track may be timing right now
            prepared = prepare_performance(exercise)  # CPU only: no kernel runs before the gate
            record(event="ready")
            while not args.gate.exists():
                time.sleep(0.01)
            record(event="gate")
        grade_performance(exercise, track, session, record, prepared)
        session.close()
        record(event="done")
        return 0

    select = os.environ.get("GRADER_SELECT")  # a pytest -k expression: the project's own tests
    # Only the plugins the checks need, whatever else this machine has installed (a plugin that
    # reorders, reruns or times tests would change what a check means; loading them all cost
    # ~1 s), and plain asserts: the checks explain their own failures (grader.check), so
    # pytest's assertion rewriting would only recompile every imported plugin module, each run
    os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    code = pytest.main([str(exercise.dir), "-p", "_hypothesis_pytestplugin", "-p",
                        "pytest_timeout", "-p", "grader.plugin", "--tree", str(args.tree),
                        "--track", track.name, "--events", args.events, "--rootdir", str(ROOT),
                        "-q", "--no-header", "-p", "no:cacheprovider", "-rN", "--tb=short",
                        "--assert=plain"]
                       + (["-k", select] if select else []))
    record(event="checks", exit_code=int(code))
    session.close()
    record(event="done")
    return 0


def _excerpt(log: str) -> str:
    from grader.results import crash_excerpt
    return ("\n" + crash_excerpt(log, 15)) if log.strip() else ""


if __name__ == "__main__":
    sys.exit(main())
