"""Judge: grades one phase of one track of one tree, in a process of its own (grader.run.tracks).

    python -m grader.judge --tree starter --exercise 02_scale --track cuda --events E.jsonl \
        [--phase checks|bench|sweep|warm] [--gate FILE]

The judge never imports the submission. It starts the submission's process (grader.run.launch,
adopted by grader.judge.proxy), which builds and imports the track; phase `checks` then runs the
exercise's checks through pytest and the grader plugin, every call crossing to that process;
phase `bench` (a fresh judge and submission process) times it (grader.judge.measure); phase `sweep`
runs `make bench` for one exercise (grader.tools.bench); phase `warm` (no submission at all) compiles
the exercise's baselines while checks run (grader.judge.baselines). Everything the judge learns goes
to the events file as it happens; whatever kills a process, the parent reads what was written.
The events file is the judge's alone: the submission's process is never told its path and
cannot write outside its scratch folder.
"""
from __future__ import annotations

import time

BEGAN = time.time()  # the process's start, before any import (the timeline shows the imports)

import argparse  # noqa: E402
import gc  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

# Nothing imported at the top imports torch: the submission's process starts first (below).
from grader.common import events as ev  # noqa: E402
from grader.common.discover import load_exercise  # noqa: E402
from grader.common.paths import EXERCISES, HYPOTHESIS, ROOT  # noqa: E402
from grader.common.processes import crash_excerpt  # noqa: E402
from grader.common.settings import current  # noqa: E402
from grader.judge.spawn import Spawner  # noqa: E402


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m grader.judge")
    p.add_argument("--tree", required=True, type=Path)
    p.add_argument("--exercise", required=True)
    p.add_argument("--track", required=True)
    p.add_argument("--events", required=True)
    p.add_argument("--phase", choices=["checks", "bench", "sweep", "warm"], default="checks")
    p.add_argument("--gate", type=Path, help="(bench) get ready, then wait for this file to "
                                             "exist before timing anything")
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
    import torch  # after the early start (above)
    record = ev.Recorder(args.events)
    exercise = load_exercise(EXERCISES / args.exercise)
    track = exercise.tracks[args.track]
    record(ev.JudgeStarted(pid=os.getpid(), began=BEGAN, torch=torch.__version__,
                           gpu=torch.cuda.get_device_name() if torch.cuda.is_available() else None))
    # each phase's modules import torch, pytest or Triton: imported here, after the early start
    if args.phase == "warm":  # no submission: compile the baselines ahead
        from grader.judge.baselines import warm_baselines
        record(ev.Warmed(seconds=warm_baselines(exercise)))
    elif args.phase == "sweep":  # make bench: every track of the tree, in processes of their own
        from grader.judge.sweep import bench_exercise
        bench_exercise(args.tree.resolve(), exercise, record, repeats=current().bench_repeats,
                       spawner=spawner)
    else:
        if args.phase == "checks":  # read by the judge before any submission code runs
            from grader.judge.review import review_track  # standard library only: cheap
            record(ev.Review(findings=[str(f) for f in review_track(
                args.tree / exercise.id / track.name, list(track.files))]))
        _with_submission(args, exercise, track, record, early, spawner)
    record(ev.Done())
    return 0


def _with_submission(args, exercise, track, record, early, spawner) -> None:
    """Phases checks and bench: open the submission's process, record its build, go on."""
    # hypothesis keeps what it stores (the constants it reads from source files) in the
    # grader's cache, not in a .hypothesis/ folder of the repository it runs in
    os.environ.setdefault("HYPOTHESIS_STORAGE_DIRECTORY", str(HYPOTHESIS))
    # pytest and the plugins the checks use, imported while the submission's process is still
    # importing torch and loading the track (open_session waits for it): off the critical path
    import _hypothesis_pytestplugin  # noqa: F401
    import pytest
    import pytest_timeout  # noqa: F401
    from grader.common.seam import start_sharing
    from grader.judge.plugin import Grader
    from grader.judge.proxy import SubmissionDied
    grader = Grader(args.events, spawner, prestarted=early)
    start_sharing()  # while the submission's process loads the track
    # what was imported lives as long as the process: out of the collector's sight, so that a
    # full collection (Python's own, and pytest's at its end: 0.1-0.4 s each here) walks only
    # what the checks make
    gc.freeze()
    try:
        session = grader.open_session(args.tree, exercise, track)
    except SubmissionDied as e:
        record(ev.Build(ok=False, stage="import", message=e.reason + (
            ("\n" + crash_excerpt(e.log, 15)) if e.log.strip() else "")))
        return
    loaded = session.loaded
    if "error" in loaded:  # the load itself raised
        err = loaded["error"]
        loaded = {"built": False, "stage": "import",
                  "message": f"loading the track failed: {err.get('type')}: {err.get('message')}"}
    record(ev.Build(ok=bool(loaded.get("built")), stage=loaded.get("stage"),
                    message=loaded.get("message", ""), seconds=loaded.get("seconds"),
                    rebuilt=loaded.get("rebuilt"), sandbox=loaded.get("sandbox")))
    if not loaded.get("built"):
        session.close()
        return
    if args.phase == "bench":  # the parent saw the build load; it is cached
        from grader.judge.baselines import prepare_performance
        from grader.judge.measure import grade_performance
        prepared = None
        if args.gate is not None:  # started ahead: another track may be timing right now
            prepared = prepare_performance(exercise)  # CPU only: no kernel runs before the gate
            record(ev.Ready())
            while not args.gate.exists():
                time.sleep(0.01)
            record(ev.Gate())
        grade_performance(exercise, track, session, record, prepared)
        if session.attempts:  # the repository written, or the evidence redirected, while timed
            record(ev.Tampering(paths=list(session.attempts)))
        session.close()
        return
    select = current().select  # a pytest -k expression: the project's own tests
    # Only the plugins the checks need, whatever else this machine has installed (a plugin that
    # reorders, reruns or times tests would change what a check means; loading them all cost
    # ~1 s), and plain asserts: the checks explain their own failures (grader.judge.check), so
    # pytest's assertion rewriting would only recompile every imported plugin module, each run
    os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    code = pytest.main([str(exercise.dir), "-p", "_hypothesis_pytestplugin", "-p",
                        "pytest_timeout", "-p", "grader.judge.plugin", "--tree", str(args.tree),
                        "--track", track.name, "--rootdir", str(ROOT), "-q", "--no-header",
                        "-p", "no:cacheprovider", "-rN", "--tb=short", "--assert=plain"]
                       + (["-k", select] if select else []), plugins=[grader])
    record(ev.ChecksExited(exit_code=int(code)))
    session.close()


if __name__ == "__main__":
    code = main()
    # All the judge has to say is in its events file (each line flushed as it happened) and its
    # log: end here. Python's shutdown with torch loaded (module teardown, torch's destructors)
    # took 1-2 s on the 2-core machine, with the grade waiting for this process to end.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
