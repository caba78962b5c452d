"""Tracks: grade one track in judge processes of their own, and leave the repository as it was.

`check_track` runs the checks in one judge; `time_track` times the track in a second, fresh one
(nothing the checks left behind, NaN-poisoned allocations or torch.compile caches, touches the
timings). A segfault, an illegal memory access, `os._exit`, an infinite loop or a hung kernel
ends only that judge (or its submission's process); the result is rebuilt from the judge's event
log (grader.run.results) and the grade goes on. Where this machine has no Landlock, every file of the
repository (and the measured ceilings) is snapshotted around each judge, and anything changed is
restored and reported as tampering.
"""
from __future__ import annotations

import tempfile
from pathlib import Path

from grader.common.discover import Exercise, Track
from grader.run.launch import JudgeProcess, kill_judge, start_judge, wait_judge
from grader.common.paths import CACHE, CEILINGS, ROOT
from grader.run.results import TrackResult, from_events, read_events
from grader.submission.sandbox import Snapshot, landlock_available
from grader.common.settings import Settings


def run_judge(tree: Path, exercise: Exercise, track: Track, phase: str, settings: Settings,
              timeout_s: float, progress=None) -> TrackResult:
    """One judge phase (checks, bench, sweep, warm), start to end: its TrackResult."""
    with tempfile.TemporaryDirectory(prefix="grader-", ignore_cleanup_errors=True) as tmp:
        events = Path(tmp) / f"{phase}.jsonl"
        j = start_judge(tree, exercise, track, phase, events, settings)
        return _ended(j, tree, exercise, track, timeout_s, settings, progress)


def _ended(j: JudgeProcess, tree, exercise, track, timeout_s, settings, progress) -> TrackResult:
    code, timed_out, log = wait_judge(j, timeout_s, settings, progress, track.sources)
    return from_events(read_events(j.events), exercise=exercise.id, track=track.name,
                       tree=str(tree), returncode=code, timed_out=timed_out, log=log)


def check_track(tree, exercise, track, settings: Settings, *, progress=None) -> TrackResult:
    tree = Path(tree).resolve()
    with _guarded(tree, settings) as guard:
        guard.result = run_judge(tree, exercise, track, "checks", settings,
                                 settings.track_timeout or exercise.timeout_s, progress)
    return guard.result


def timeable(exercise, result: TrackResult) -> bool:
    """Is there a timing to make: a benchmark, a sound build, no crash, no tampering."""
    return not (exercise.benchmark is None or not result.build.get("ok") or result.ended
                or result.tampering)


class Prepared:
    """A timing judge started ahead, waiting at its gate (see time_track)."""

    def __init__(self, tree, exercise, track, settings: Settings):
        self.tmp = tempfile.TemporaryDirectory(prefix="grader-", ignore_cleanup_errors=True)
        self.gate = Path(self.tmp.name) / "go"
        self.judge = start_judge(Path(tree).resolve(), exercise, track, "bench",
                                 Path(self.tmp.name) / "bench.jsonl", settings, gate=self.gate)

    def cancel(self):
        kill_judge(self.judge)
        self.tmp.cleanup()


def time_track(tree, exercise, track, result: TrackResult, settings: Settings, *,
               progress=None, prepared: Prepared | None = None) -> None:
    """Time a track whose build is sound, even when some checks failed: the learner sees the
    figures (the output at the benchmark case is validated either way); points only when every
    correctness check passed (grader.run.score). `prepared`: its judge, started ahead and waiting at
    its gate (only where Landlock sandboxes the submission: no snapshot to take around it)."""
    if not timeable(exercise, result):
        if prepared is not None:
            prepared.cancel()
        return
    tree = Path(tree).resolve()
    if prepared is not None:
        prepared.gate.touch()  # go: the GPU is this judge's now
        with prepared.tmp:
            timed = _ended(prepared.judge, tree, exercise, track,
                           settings.track_timeout or exercise.timeout_s, settings, progress)
    else:
        with _guarded(tree, settings) as guard:
            timed = run_judge(tree, exercise, track, "bench", settings,
                              settings.track_timeout or exercise.timeout_s, progress)
            guard.result = result
    result.performance = timed.performance or {
        "status": f"not measured: the timing judge failed ({timed.ended or 'no result'})"}
    result.tampering += [t for t in timed.tampering if t not in result.tampering]


class _guarded:
    """Where this machine has no Landlock, snapshot the repository (and the measured ceilings)
    around a judge, undo any change and report it as tampering. Where it has Landlock, the
    submission's process closes the file system to itself before any submission code runs
    (grader.submission.sandbox), so nothing can change: no snapshot, and a change someone else makes
    meanwhile (an editor, a parallel run) is never undone or blamed on the submission."""

    def __init__(self, tree: Path, settings: Settings):
        self.result = None
        self.snapshot = None
        if landlock_available():
            return
        keep = settings.keep_logs
        skip = {str(CACHE)} | ({str(Path(keep).resolve())} if keep else set())
        roots = [ROOT, CEILINGS] + ([] if tree.is_relative_to(ROOT) else [tree])
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
