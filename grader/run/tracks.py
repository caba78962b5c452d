"""Tracks: grade one track in judge processes of their own, and leave the repository as it was.

`Judges` starts a grade's judges (grader.run.launch) the same way for every track: with the
grade's settings, through its zygote where it has one, followed by its `Follower` (the display
and the orchestrator read their events as they come). `check` runs a track's checks in one
judge; `time` times it in a second, fresh one (nothing the checks left behind, NaN-poisoned
allocations or torch.compile caches, touches the timings). A segfault, an illegal memory access,
`os._exit`, an infinite loop or a hung kernel ends only that judge (or its submission's
process); what it had said is in its event log (grader.run.results), and the grade goes on.
Where this machine has no Landlock, every file of the repository (and the measured ceilings) is
snapshotted around each judge, and anything changed is restored and reported as tampering.
`Ahead` keeps a grade's next timing judges started, each waiting at its gate.
"""
from __future__ import annotations

import tempfile
import threading
import time
from pathlib import Path

from grader.common import events as ev
from grader.common.discover import Exercise, Track
from grader.common.machine import landlock_available
from grader.common.paths import CACHE, CEILINGS, ROOT, warm_stop
from grader.common.settings import Settings
from grader.run.follow import Follower
from grader.run.launch import JudgeProcess, kill_judge, start_judge, wait_judge
from grader.run.results import Phase
from grader.run.snapshot import Snapshot

AHEAD = 4  # timing judges started ahead of their turn: getting one ready (its processes, torch,
#           CUDA, the baselines' callables) took ~15 s on the GPU host, longer than many timings
#           (1-20 s): with one ahead the GPU waited for it; with two, behind two timings of 1-2 s
#           (09's, 12's) the next one waited 4-7 s (the again run, 2026-11-29)
WARM_WAIT_S = 30  # the longest the first timing waits for the judges still warming up (13's
#                  warm-up, both modes at the benchmark case: 1.1-1.3 s on an H200)


def timeable(exercise: Exercise, checks: Phase) -> bool:
    """Is there a timing to make: a benchmark, a sound build, no crash, no tampering."""
    return not (exercise.benchmark is None or not checks.built or checks.ended
                or checks.tampering)


class Prepared:
    """A judge started ahead, waiting at its gate: a timing (see Judges.time), or the exercise's
    warming judge, which compiles the baselines and times them at its turn (Judges.release)."""

    def __init__(self, judges: "Judges", exercise: Exercise, track: Track, phase: str = "bench",
                 warm: bool = False):
        self.tmp = tempfile.TemporaryDirectory(prefix="grader-", ignore_cleanup_errors=True)
        self.gate = Path(self.tmp.name) / "go"
        # while this file exists no track is timing, and a timing judge may warm up on the GPU
        # before its gate (grader.judge.measure.warm_up), taking the file as it begins; the
        # grade removes it before any timing (Ahead.quiet)
        self.warm = Path(self.tmp.name) / "warm" if warm else None
        if self.warm is not None:
            self.warm.touch()
        self.track = track
        self.judge = judges.start(exercise, track, phase, Path(self.tmp.name), gate=self.gate,
                                  warm=self.warm)

    def ready(self, poll_s: float = 0.05, timeout_s: float | None = None) -> bool:
        """Wait until the judge waits at its gate (True) or has ended, or `timeout_s` passed
        (False)."""
        until = None if timeout_s is None else time.monotonic() + timeout_s
        while self.judge.proc.poll() is None:
            if any(isinstance(e, ev.Ready) for e in ev.read(self.judge.events)):
                return True
            if until is not None and time.monotonic() > until:
                return False
            time.sleep(poll_s)
        return False

    def cancel(self) -> None:
        """End it where it has not ended (one released and waited for is done: its process
        group, whose number may be another's by now, is not signalled again)."""
        if self.judge.proc.returncode is None:
            kill_judge(self.judge)
        self.tmp.cleanup()


class Judges:
    """How one grade (or watch loop) runs its judges: on `tree`, with `settings`, forked from a
    zygote through `forker` where there is one, each followed by `follower`."""

    def __init__(self, tree: Path, settings: Settings, follower: Follower | None = None,
                 forker=None):
        self.tree = Path(tree).resolve()
        self.settings, self.follower, self.forker = settings, follower, forker

    def start(self, exercise: Exercise, track: Track, phase: str, folder: Path,
              gate: Path | None = None, warm: Path | None = None) -> JudgeProcess:
        return start_judge(self.tree, exercise, track, phase, folder / f"{phase}.jsonl",
                           self.settings, gate=gate, forker=self.forker, warm=warm)

    def wait(self, j: JudgeProcess, track: Track, timeout_s: float) -> Phase:
        """Follow a judge to its end (under its time limit); what it left."""
        if self.follower is not None:
            self.follower.begin(j.label, j.phase, j.events, track.sources)
        try:
            code, timed_out, log = wait_judge(j, timeout_s, self.settings.keep_logs)
        finally:
            if self.follower is not None:
                self.follower.end(j.label, j.phase)
        return Phase(tuple(ev.read(j.events)), code, timed_out, log)

    def run(self, exercise: Exercise, track: Track, phase: str, timeout_s: float) -> Phase:
        """One judge phase (checks, bench, sweep, warm), start to end."""
        with tempfile.TemporaryDirectory(prefix="grader-", ignore_cleanup_errors=True) as tmp:
            return self.wait(self.start(exercise, track, phase, Path(tmp)), track, timeout_s)

    def _limit(self, exercise: Exercise) -> float:
        return self.settings.track_timeout or exercise.timeout_s

    def check(self, exercise: Exercise, track: Track) -> Phase:
        with _Guard(self.tree, self.settings) as guard:
            phase = self.run(exercise, track, "checks", self._limit(exercise))
        return guard.restored(phase)

    def release(self, exercise: Exercise, prepared: Prepared) -> Phase:
        """Open a judge's gate (the GPU is its own now) and follow it to its end."""
        prepared.gate.touch()
        with prepared.tmp:
            return self.wait(prepared.judge, prepared.track, self._limit(exercise))

    def time(self, exercise: Exercise, track: Track, prepared: Prepared | None = None) -> Phase:
        """Time a track whose checks were timeable, even when some checks failed: the learner
        sees the figures (the output at the benchmark case is validated either way); points
        only when every correctness check passed (grader.run.score). `prepared`: its judge,
        started ahead and waiting at its gate (only where Landlock sandboxes the submission: no
        snapshot to take around it)."""
        if prepared is not None:
            return self.release(exercise, prepared)
        with _Guard(self.tree, self.settings) as guard:
            phase = self.run(exercise, track, "bench", self._limit(exercise))
        return guard.restored(phase)


class _Guard:
    """Where this machine has no Landlock, snapshot the repository (and the measured ceilings)
    around a judge, undo any change and report it. Where it has Landlock, the submission's
    process closes the file system to itself before any submission code runs
    (grader.submission.sandbox), so nothing can change: no snapshot, and a change someone else
    makes meanwhile (an editor, a parallel run) is never undone or blamed on the submission."""

    def __init__(self, tree: Path, settings: Settings):
        self.snapshot, self.changed = None, []
        if landlock_available():
            return
        keep = settings.keep_logs
        skip = {str(CACHE)} | ({str(Path(keep).resolve())} if keep else set())
        roots = [ROOT, CEILINGS] + ([] if tree.is_relative_to(ROOT) else [tree])
        self.snapshot = Snapshot.take([r for r in roots if r.exists()], skip=skip)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.snapshot is not None:
            self.changed = self.snapshot.restore()
        return False

    def restored(self, phase: Phase) -> Phase:
        """The phase, with what was changed (and restored) around it."""
        if not self.changed:
            return phase
        return Phase(phase.events, phase.returncode, phase.timed_out, phase.log,
                     tuple(self.changed))


class Ahead:
    """Timing judges started ahead of their turn, each waiting at its gate: the first 1 + AHEAD
    timed tracks' once their checks have loaded the build (told by the checks' `Build` event;
    at once for a track with nothing to build), so that their process start, torch import,
    track load and the baselines' callables (~10 s each on a GPU host) overlap the checks
    instead of following them; and while one track times, the next AHEAD. Those started while
    the checks run also warm up on the GPU before their gate (no track is timing yet); `quiet`
    ends that before the first timing. One that turns out not to be timed is cancelled."""

    def __init__(self):
        self.lock = threading.Lock()
        self.judges: Judges | None = None
        self.first: dict[str, tuple] = {}      # label -> (exercise, track): prepared on load
        self.loaded: set[str] = set()          # labels whose checks reported their build
        self.prepared: dict[str, Prepared] = {}
        self.warming = True                    # no track timing yet: judges started warm up

    def on_event(self, label: str, phase: str, event) -> None:
        if phase == "checks" and isinstance(event, ev.Build) and event.ok:
            with self.lock:
                self.loaded.add(label)
                if label in self.first:
                    self._prepare(label, *self.first[label])

    def start(self, judges: Judges, candidates) -> None:
        with self.lock:
            self.judges = judges
            self.first = {_label(ex, t): (ex, t) for ex, t in candidates[:1 + AHEAD]}
            for label, (ex, t) in self.first.items():
                # a track with nothing to compile (Triton, Python) is only imported: its judge
                # starts with the checks instead of after their `Build` (~1 s, then its warm-up
                # overlaps them: QUICK of 13 waited 0.4 s for it, an H200, 2026-11-30)
                if label in self.loaded or not t.sources:
                    self._prepare(label, ex, t)

    def ensure(self, pairs) -> None:
        with self.lock:
            for ex, t in pairs:
                self._prepare(_label(ex, t), ex, t)

    def drop(self, keep) -> None:
        with self.lock:
            for label in set(self.prepared) - {_label(ex, t) for ex, t in keep}:
                self.prepared.pop(label).cancel()

    def quiet(self, timeout_s: float = WARM_WAIT_S) -> None:
        """Before a timing: no judge started from now on warms up, and every one that is
        warming is done (at its gate, or ended). A judge takes its warm file when it begins to
        warm up (grader.judge.phases._claim): one whose file is still there is removed here and
        never warms (a judge still importing is not waited for). One still warming after
        `timeout_s` (a hung kernel, or a very slow first call) is cancelled: its track is timed
        by a judge started at its turn, under the track's time limit, as without warming."""
        with self.lock:
            if not self.warming:
                return
            self.warming = False
            waiting = {}
            for label, p in self.prepared.items():
                if p.warm is None:
                    continue
                try:
                    p.warm.unlink()  # not taken: that judge will not warm up
                except FileNotFoundError:
                    waiting[label] = p
                    # taken: it ends its warm-up at its next input set (answers.Drawn)
                    warm_stop(p.warm).touch()
        until = time.monotonic() + timeout_s
        for label, p in waiting.items():
            if not p.ready(timeout_s=max(0.0, until - time.monotonic())) \
                    and p.judge.proc.poll() is None:
                with self.lock:
                    if self.prepared.get(label) is p:
                        self.prepared.pop(label).cancel()

    def take(self, ex, t) -> Prepared | None:
        with self.lock:
            return self.prepared.pop(_label(ex, t), None)

    def cancel(self) -> None:
        with self.lock:
            self.judges = None  # nothing is started after this
            for p in self.prepared.values():
                p.cancel()
            self.prepared.clear()

    def _prepare(self, label, ex, t) -> None:
        if self.judges is not None and label not in self.prepared:
            self.prepared[label] = Prepared(self.judges, ex, t, warm=self.warming)


def _label(ex, t) -> str:
    return f"{ex.id} [{t.name}]"
