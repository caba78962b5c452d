"""Isolate: grade each track in a worker process of its own, under a time limit, and leave the
repository as it was.

A segfault, an illegal memory access, `os._exit`, an infinite loop or a hung kernel ends only
that worker (or its submission process); the parent rebuilds what happened from the worker's
event log and the scorecard goes on with the next track. Before a track, every file of the
repository (and the measured ceilings) is snapshotted; after it, anything changed is restored and
reported as tampering, which scores the track 0.
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from grader.build import CACHE
from grader.discover import ROOT, Exercise, Track
from grader.results import TrackResult, from_events, read_events
from grader.trust import Snapshot


def run_track(tree: Path, exercise: Exercise, track: Track, *, bench: bool = False,
              timeout_s: float | None = None) -> TrackResult:
    """Check the track in one worker; then, if asked and every correctness check passed, time
    it in a second, fresh one (so nothing the checks left behind, such as NaN-poisoned
    allocations or torch.compile caches, touches the timings)."""
    tree = Path(tree).resolve()
    keep = os.environ.get("GRADER_KEEP_LOGS")
    skip = {str(CACHE)} | ({str(Path(keep).resolve())} if keep else set())
    roots = [ROOT, CACHE / "ceilings"] + ([] if tree.is_relative_to(ROOT) else [tree])
    snapshot = Snapshot.take([r for r in roots if r.exists()], skip=skip)
    result = _run_track(tree, exercise, track, bench=bench, timeout_s=timeout_s)
    if str(result.build.get("sandbox", "")).startswith("Landlock"):
        # the submission's process could not write anywhere in the repository: whatever changed
        # meanwhile was someone else (an editor, a second grading run), never to be undone here
        return result
    changed = snapshot.restore()
    if changed:
        result.tampering += [f"changed {p} (restored)" for p in changed]
    return result


def _run_track(tree, exercise, track, *, bench, timeout_s) -> TrackResult:
    timeout_s = timeout_s or exercise.timeout_s
    with tempfile.TemporaryDirectory(prefix="grader-") as tmp:
        events = Path(tmp) / "events.jsonl"
        start = time.monotonic()
        code, timed_out, log = _worker(tree, exercise, track, "checks", events, timeout_s)
        result = from_events(read_events(events), exercise=exercise.id, track=track.name,
                             tree=str(tree), returncode=code, timed_out=timed_out, log=log)
        if not bench or exercise.benchmark is None or not result.build.get("ok") or result.ended:
            return result
        ran = [c for c in result.checks if c.category == "correctness" and c.outcome != "skipped"]
        if not ran or any(c.outcome != "passed" for c in ran) or result.tampering:
            result.performance = {"status": "not measured: every correctness check must pass first"}
            return result
        left = max(60.0, timeout_s - (time.monotonic() - start))
        timings = events.with_name("bench.jsonl")
        code, timed_out, log = _worker(tree, exercise, track, "bench", timings, left)
        timed = from_events(read_events(timings), exercise=exercise.id, track=track.name,
                            tree=str(tree), returncode=code, timed_out=timed_out, log=log)
        result.performance = timed.performance or {
            "status": f"not measured: the benchmark worker failed ({timed.ended or 'no result'})"}
        result.tampering += [t for t in timed.tampering if t not in result.tampering]
        return result


def _worker(tree, exercise, track, phase, events, timeout_s):
    """Run one worker phase; return its exit code, the limit if it hit it, and its output."""
    log = events.with_suffix(".log")
    cmd = [sys.executable, "-m", "grader.worker", "--tree", str(tree), "--exercise", exercise.id,
           "--track", track.name, "--events", str(events), "--phase", phase]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]),
        "PYTHONUNBUFFERED": "1", "PYTHONDONTWRITEBYTECODE": "1"}
    timed_out = None
    with open(log, "wb") as out:
        # a session of its own, so a timeout kills the worker and everything it started
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = timeout_s
        try:  # the worker and whatever it left running (its submission process)
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()
    keep = os.environ.get("GRADER_KEEP_LOGS")  # a folder: keep each worker's full log
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        shutil.copy(log, Path(keep) / f"{exercise.id}-{track.name}-{phase}.log")
    return proc.returncode, timed_out, log.read_text(errors="replace")
