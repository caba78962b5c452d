"""Phases: what the judge does once its submission's process is on its way (grader.judge, the
process's main, starts that process before importing anything heavy; this module imports torch,
pytest and the rest, while that process imports its own).

- `checks`: the review of the sources, then the exercise's checks through pytest and the
  grader's plugin, every call crossing to the submission's process;
- `bench`: a fresh judge and submission process time the track (grader.judge.measure), waiting
  at a gate where the grade started it ahead (warmed up first while its `--warm` file exists:
  no track is timing then);
- `sweep`: `make bench` for one exercise (grader.judge.sweep);
- `warm`: no submission at all: the exercise's compiled baselines, compiled ahead, then (at a
  gate, in a grade) every baseline timed with them, for the tracks' timings to read.
Everything the judge learns goes to its event log as it happens.
"""
from __future__ import annotations

import gc
import os
import threading
import time
from pathlib import Path

import _hypothesis_pytestplugin  # noqa: F401 (loaded by name below: imported here, early)
import pytest
import pytest_timeout  # noqa: F401 (as above)
import torch

from grader.common import events as ev
from grader.common.discover import load_exercise
from grader.common.paths import EXERCISES, HYPOTHESIS, ROOT, warm_stop
from grader.common.processes import crash_excerpt
from grader.common.seam import start_sharing
from grader.common.settings import current
from grader.judge.baselines import prepare_performance, time_warmed_baselines, warm_baselines
from grader.judge.measure import grade_performance, warm_up
from grader.judge.plugin import Grader
from grader.judge.proxy import SubmissionDied, record_compiles
from grader.judge.review import review_track
from grader.judge.sweep import bench_exercise


def run_phase(args, began: float, early, spawner) -> int:
    """One phase of the judge (its command line in `args`), the submission's process `early`
    started already (checks, bench) or not (warm, sweep, or under a sanitizer)."""
    record = ev.Recorder(args.events)
    exercise = load_exercise(EXERCISES / args.exercise)
    track = exercise.tracks[args.track]
    record(ev.JudgeStarted(pid=os.getpid(), began=began, torch=torch.__version__,
                           gpu=torch.cuda.get_device_name() if torch.cuda.is_available() else None))
    if args.phase == "warm":  # no submission: compile the baselines ahead, time them at the gate
        seconds, warmed = warm_baselines(exercise)
        record(ev.Warmed(seconds=seconds))
        if args.gate is not None and warmed is not None and current().run_cache:
            _wait_at(args.gate, record)
            record(ev.Warmed(seconds=time_warmed_baselines(exercise, *warmed), timed=True))
    elif args.phase == "sweep":  # make bench: every track of the tree, in processes of their own
        bench_exercise(args.tree.resolve(), exercise, record, repeats=current().bench_repeats,
                       spawner=spawner)
    else:
        if args.phase == "checks":  # read by the judge before any submission code runs
            record(ev.Review(findings=[str(f) for f in review_track(
                args.tree / exercise.id / track.name, list(track.files),
                extension=track.extension if track.sources else None)]))
        _with_submission(args, exercise, track, record, early, spawner)
    record(ev.Done())
    return 0


def _claim(warm: Path) -> bool:
    """Take the warm file (renamed, so that the grade's removal of it fails and tells it that
    this judge is warming up and must be waited for); False where the grade removed it first:
    a track times now, and this judge only waits at its gate."""
    try:
        warm.rename(warm.with_name(warm.name + ".taken"))
    except FileNotFoundError:
        return False
    return True


def _wait_at(gate, record, pid: int | None = None) -> None:
    """Ready: wait until the grade opens the gate (the GPU is this judge's then)."""
    record(ev.Ready(pid=pid))
    while not gate.exists():
        time.sleep(0.01)
    record(ev.Gate())


def cuda_meanwhile() -> None:
    """Make this judge's CUDA context while the submission's process builds and loads the
    track: the first check would make it otherwise, after the build, on a one-line edit's path.
    Not in a timing judge: another track may be timing on the GPU then."""
    if torch.cuda.is_available():
        threading.Thread(target=lambda: torch.empty(1, device="cuda"), daemon=True).start()


def _with_submission(args, exercise, track, record, early, spawner) -> None:
    """Phases checks and bench: open the submission's process, record its build, go on."""
    # hypothesis keeps what it stores (the constants it reads from source files) in the
    # grader's cache, not in a .hypothesis/ folder of the repository it runs in
    os.environ.setdefault("HYPOTHESIS_STORAGE_DIRECTORY", str(HYPOTHESIS))
    grader = Grader(args.events, spawner, prestarted=early)
    start_sharing()  # while the submission's process loads the track
    if args.phase == "checks":
        cuda_meanwhile()
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
        prepared = drawn = None
        if args.gate is not None:  # started ahead: another track may be timing right now
            prepared = prepare_performance(exercise)  # CPU only
            try:
                if "forward_backward" in exercise.benchmark.modes:
                    session.request("prepare")  # the imports of a first backward (CPU only)
                # a kernel before the gate only while the grade says no track is timing
                if args.warm is not None and _claim(args.warm):
                    began_warm = time.perf_counter()
                    # the grade asks the warm-up to end (its `.stop` file) before its first
                    # timing, and waits for it: the sets not drawn by then are drawn at the turn
                    drawn = warm_up(session, exercise, prepared[0],
                                    stop=warm_stop(args.warm).exists)
                    print(f"[timing] warmed up before the gate: "
                          f"{time.perf_counter() - began_warm:.2f} s" + (
                              f", {sum(map(len, drawn.sets.values()))} input sets drawn with "
                              f"their answers ({drawn.bytes / 2**30:.1f} GiB)" if drawn else ""),
                          flush=True)
            except SubmissionDied:
                pass  # the timing below meets the same end and reports it, as ever
            _wait_at(args.gate, record, session.proc.pid)
        grade_performance(exercise, track, session, record, prepared, drawn)
        record_compiles(session, record)
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
