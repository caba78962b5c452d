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
from grader.trust import Snapshot, landlock_available


def run_track(tree: Path, exercise: Exercise, track: Track, *, bench: bool = False,
              timeout_s: float | None = None, progress=None) -> TrackResult:
    """Check the track in one worker; then, if asked, time it in a second, fresh one (so
    nothing the checks left behind, such as NaN-poisoned allocations or torch.compile caches,
    touches the timings)."""
    result = check_track(tree, exercise, track, timeout_s=timeout_s, progress=progress)
    if bench:
        time_track(tree, exercise, track, result, timeout_s=timeout_s, progress=progress)
    return result


def check_track(tree, exercise, track, *, timeout_s=None, progress=None) -> TrackResult:
    tree = Path(tree).resolve()
    with _guarded(tree) as guard, tempfile.TemporaryDirectory(prefix="grader-") as tmp:
        events = Path(tmp) / "events.jsonl"
        code, timed_out, log = _worker(tree, exercise, track, "checks", events,
                                       timeout_s or exercise.timeout_s, progress)
        result = from_events(read_events(events), exercise=exercise.id, track=track.name,
                             tree=str(tree), returncode=code, timed_out=timed_out, log=log)
        guard.result = result
    return result


def timeable(exercise, result: TrackResult) -> bool:
    """Is there a timing to make: a benchmark, a sound build, no crash, no tampering."""
    return not (exercise.benchmark is None or not result.build.get("ok") or result.ended
                or result.tampering)


class Prepared:
    """A timing worker started ahead, waiting at its gate (see time_track)."""

    def __init__(self, tree, exercise, track):
        self.tmp = tempfile.TemporaryDirectory(prefix="grader-")
        self.events = Path(self.tmp.name) / "bench.jsonl"
        self.gate = Path(self.tmp.name) / "go"
        self.worker = _spawn(Path(tree).resolve(), exercise, track, "bench", self.events,
                             gate=self.gate)

    def cancel(self):
        try:
            os.killpg(self.worker.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.worker.proc.wait()
        self.worker.out.close()
        self.tmp.cleanup()


def time_track(tree, exercise, track, result: TrackResult, *, timeout_s=None,
               progress=None, prepared: Prepared | None = None) -> None:
    """Time a track whose build is sound, even when some checks failed: the learner sees the
    figures (the output at the benchmark case is validated either way); points only when every
    correctness check passed (grader.score). `prepared`: its worker, started ahead and waiting
    at its gate (only where Landlock sandboxes the submission: no snapshot to take around it)."""
    if not timeable(exercise, result):
        if prepared is not None:
            prepared.cancel()
        return
    tree = Path(tree).resolve()
    if prepared is not None:
        prepared.gate.touch()  # go: the GPU is this worker's now
        with prepared.tmp as tmp:
            code, timed_out, log = _wait(prepared.worker, exercise, track, "bench",
                                         prepared.events, timeout_s or exercise.timeout_s,
                                         progress)
            timed = from_events(read_events(prepared.events), exercise=exercise.id,
                                track=track.name, tree=str(tree), returncode=code,
                                timed_out=timed_out, log=log)
        _merge_timing(result, timed)
        return
    with _guarded(tree) as guard, tempfile.TemporaryDirectory(prefix="grader-") as tmp:
        timings = Path(tmp) / "bench.jsonl"
        code, timed_out, log = _worker(tree, exercise, track, "bench", timings,
                                       timeout_s or exercise.timeout_s, progress)
        timed = from_events(read_events(timings), exercise=exercise.id, track=track.name,
                            tree=str(tree), returncode=code, timed_out=timed_out, log=log)
        guard.result = result
    _merge_timing(result, timed)


def _merge_timing(result: TrackResult, timed: TrackResult) -> None:
    result.performance = timed.performance or {
        "status": f"not measured: the benchmark worker failed ({timed.ended or 'no result'})"}
    result.tampering += [t for t in timed.tampering if t not in result.tampering]


class _guarded:
    """Where this machine has no Landlock, snapshot the repository (and the measured ceilings)
    around a worker, undo any change and report it as tampering. Where it has Landlock, the
    submission's process closes the file system to itself before any submission code runs (see
    grader.runner), so nothing can change: no snapshot, and a change someone else makes meanwhile
    (an editor, a parallel run) is never undone or blamed on the submission."""

    def __init__(self, tree: Path):
        self.result = None
        self.snapshot = None
        if landlock_available():
            return
        keep = os.environ.get("GRADER_KEEP_LOGS")
        skip = {str(CACHE)} | ({str(Path(keep).resolve())} if keep else set())
        roots = [ROOT, CACHE / "ceilings"] + ([] if tree.is_relative_to(ROOT) else [tree])
        self.snapshot = Snapshot.take([r for r in roots if r.exists()], skip=skip)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        r = self.result
        if self.snapshot is None:
            return False
        changed = self.snapshot.restore()
        if changed and r is not None:
            r.tampering += [f"changed {p} (restored)" for p in changed if
                            f"changed {p} (restored)" not in r.tampering]
        return False


class Started:
    """A worker process started by _spawn and not yet waited for."""

    def __init__(self, proc, log, out, label):
        self.proc, self.log, self.out, self.label = proc, log, out, label


def _spawn(tree, exercise, track, phase, events, gate: Path | None = None) -> Started:
    """Start one worker phase. With `gate`, the worker gets ready (its submission's process
    started and the track loaded) and then waits until that file exists before it measures
    anything: grader.__main__ prepares the next track's timing while this one's runs alone."""
    log = events.with_suffix(".log")
    cmd = [sys.executable, "-m", "grader.worker", "--tree", str(tree), "--exercise", exercise.id,
           "--track", track.name, "--events", str(events), "--phase", phase]
    if gate is not None:
        cmd += ["--gate", str(gate)]
    from grader.spawn import compile_in_process
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]),
        "PYTHONUNBUFFERED": "1", "PYTHONDONTWRITEBYTECODE": "1"}
    # the judge's torch.compile caches (the baselines) in the grader's cache, beside the marker
    # that says they are warm (grader.measure.warm_marker); a submission's are its runner's own
    env.setdefault("TORCHINDUCTOR_CACHE_DIR", str(CACHE / "inductor"))
    compile_in_process(env)
    if phase == "checks" and os.environ.get("GRADER_CHECK_THREADS"):
        # the checks of several tracks at once: each process (judge and submission) gets its
        # share of the cores for torch's CPU ops, instead of one thread per core each (8 tracks
        # x 2 processes x 16 OpenMP threads: a load of 25 on 16 cores, 2026-11-25)
        env.setdefault("OMP_NUM_THREADS", os.environ["GRADER_CHECK_THREADS"])
    out = open(log, "wb")
    # a session of its own, so a timeout kills the worker and everything it started
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, start_new_session=True)
    return Started(proc, log, out, f"{exercise.id} [{track.name}]")


def _wait(w: Started, exercise, track, phase, events, timeout_s, progress=None):
    """Wait for a started worker under its time limit (counted from now); return its exit code,
    the limit if it hit it, and its output."""
    proc, log, label = w.proc, w.log, w.label
    timed_out = None
    if progress is not None:
        progress.begin(label, events, phase, track.sources)
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            left = deadline - time.monotonic()
            try:
                proc.wait(timeout=min(left, 0.5) if progress is not None else left)
                break
            except subprocess.TimeoutExpired:
                if time.monotonic() >= deadline:
                    timed_out = timeout_s
                    break
                if progress is not None:
                    progress.tick(label)
    finally:
        if progress is not None:
            progress.end(label)
    try:  # the worker and whatever it left running (its submission process)
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()
    w.out.close()
    keep = os.environ.get("GRADER_KEEP_LOGS")  # a folder: keep each worker's full log
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        shutil.copy(log, Path(keep) / f"{exercise.id}-{track.name}-{phase}.log")
        if events.exists():  # its events too, each stamped with its time (grader.results)
            shutil.copy(events, Path(keep) / f"{exercise.id}-{track.name}-{phase}.jsonl")
    return proc.returncode, timed_out, log.read_text(errors="replace")


def _worker(tree, exercise, track, phase, events, timeout_s, progress=None):
    """Run one worker phase; return its exit code, the limit if it hit it, and its output.
    `progress` (grader.progress.Progress) is told what the worker's event log says meanwhile."""
    return _wait(_spawn(tree, exercise, track, phase, events), exercise, track, phase, events,
                 timeout_s, progress)
