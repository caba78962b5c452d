"""Watch: `make watch-02` regrades one exercise on every save of your files, in seconds.

    python -m grader watch --exercise 02 [--impl starter|solutions | --submission PATH] [--quick]

After each save it prints what `python -m grader grade --exercise 02 --no-bench` prints for the
same files (with --quick, what `make exercise-02 QUICK=1` prints: QUICK's examples and the
timing), failures in full, then the seconds from the save to that result. How:

- Two zygotes (grader.run.zygote), made once: processes that have imported torch, triton, numpy,
  hypothesis, pytest and the grader's modules, never the submission and never CUDA. A regrade
  forks a fresh judge from one, and the judge a fresh submission's process from the other, which
  sandboxes itself before importing the submission as ever. The regrade is the one grade path
  (grader.run.grade) with its process starts made forks (its `forker`): the same checks,
  messages and scorecard, without 3-4 s of imports per process.
- Saves are seen by polling the tracks' files every 0.1 s; an editor's several writes (a
  rename, a write) are one save once the files have been still for one poll.
- A CUDA track's ninja rebuild starts the moment a save is seen (grader.submission.early), while
  the save settles and the judge starts; the submission's process takes over its report.
- Only the tracks whose files changed are regraded (the others' last results are shown again),
  and the checks that failed last time run first. A run in that order that stops early (a crash,
  a stub: what follows is not run, where in the usual order more might have run first) is run
  again in the usual order, so the verdicts are always those of the usual order.
- A save during a regrade cancels it (its processes are killed) and regrades the newer files.
- Ctrl-C stops every process it started and exits; it writes nothing into your tree or the
  repository (its zygotes' logs and the early rebuilds' reports go to a temporary folder).
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from grader.common import events as ev
from grader.common.discover import Exercise
from grader.common.paths import ROOT, build_dir
from grader.common.settings import Settings, from_environment
from grader.run.grade import Grade, Submission, grade, write_reports
from grader.run.progress import Progress
from grader.run.results import TrackResult
from grader.run.zygotes import Zygote, ZygoteError, start_zygotes
from grader.submission.early import start_early_rebuild

POLL_S = 0.1      # how often the files are looked at (a few stat calls)
MISSING_S = 2.0   # how long a file may be missing mid-save (an editor's rename) before it counts


class _Started:
    """Without zygotes (one refused to serve): judges started as ever, remembered so that a
    cancelled regrade can kill them."""

    def __init__(self):
        self.lock = threading.Lock()
        self.procs: list[subprocess.Popen] = []
        self.cancelled = False

    def handles(self, cmd) -> bool:
        return cmd[1:3] == ["-m", "grader.judge"]

    def start(self, cmd, *, cwd, env, stdout, pass_fds=(), new_session=False):
        with self.lock:
            if self.cancelled:
                raise ZygoteError("cancelled: a newer save is being graded")
            p = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=stdout, stderr=subprocess.STDOUT,
                                 stdin=subprocess.DEVNULL, pass_fds=pass_fds,
                                 start_new_session=new_session)
            self.procs.append(p)
            return p

    def kill_all(self) -> None:
        with self.lock:
            for p in self.procs:
                if p.poll() is None:
                    try:
                        os.killpg(p.pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
            self.procs = [p for p in self.procs if p.poll() is None]


class _WatchProgress(Progress):
    """The grade's progress display, plus one early line: how the checks that failed last time
    did, as soon as they have all run (they run first)."""

    def __init__(self, stream=None):
        super().__init__(stream)
        self.expect((), time.monotonic())

    def expect(self, first, began: float) -> None:
        self.first, self.began, self.said = set(first), began, set()
        self.wanted: dict[str, set] = {}   # label -> the ids of last time's failures
        self.seen: dict[str, dict] = {}    # label -> test id -> outcome

    def on_event(self, label: str, phase: str, event: ev.Event) -> None:
        super().on_event(label, phase, event)
        if not self.first or phase != "checks" or label in self.said:
            return
        if isinstance(event, ev.Collected):  # one per judge: a track checked in shares has n
            self.wanted.setdefault(label, set()).update(
                x["id"] for x in event.tests if x["name"] in self.first)
        elif isinstance(event, ev.Result):
            self.seen.setdefault(label, {})[event.test] = event.outcome
        wanted = self.wanted.get(label)
        mine = {test: o for test, o in self.seen.get(label, {}).items() if test in (wanted or ())}
        track = self.tracks.get((label, phase))  # its judges collected, of how many (Progress)
        collected, judges = track.collected if track else (1, 1)
        if not wanted or set(mine) < wanted or collected < judges:
            return
        self.said.add(label)
        still = sorted(test.split("::", 1)[-1] for test, o in mine.items() if o == "failed")
        what = (f"all {len(wanted)} pass now" if not still else
                f"{len(wanted) - len(still)} of {len(wanted)} pass now; still failing: "
                f"{', '.join(still[:4])}{' ...' if len(still) > 4 else ''}")
        self.print(f"{label}: the checks that failed last time: {what} "
                   f"({time.monotonic() - self.began:.1f} s; the rest are running)")


class _Job:
    """One regrade in a thread of its own: the main thread keeps watching the files meanwhile."""

    def __init__(self, run, tracks: set[str], saved_at: float | None):
        self.tracks, self.saved_at = set(tracks), saved_at
        self.began = time.time()
        self.result = self.error = None
        self.cancelled = False
        self.finished = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(run,), daemon=True)
        self.thread.start()

    def _run(self, run) -> None:
        try:
            self.result = run(self.tracks)
        except BaseException as e:  # reported by the main thread (or dropped, if cancelled)
            self.error = e
        finally:
            self.finished.set()


class Watcher:
    """The watch loop for one exercise of one tree (`run`), or its parts for the tests
    (`start`, `regrade`, `close`)."""

    def __init__(self, tree: Path, exercise: Exercise, *, quick: bool = False,
                 settings: Settings | None = None, stream=None, fork: bool = True,
                 poll_s: float = POLL_S):
        self.tree = Path(tree).resolve()
        self.exercise = exercise
        base = settings or from_environment()
        self.settings = base.replace(quick=quick or base.quick)
        self.bench = quick  # the timing only with --quick (QUICK's cached baselines): the loop
        self.stream = stream or sys.stdout
        self.progress = _WatchProgress(self.stream)
        self.fork, self.poll_s = fork, poll_s
        self.results: dict[str, tuple[TrackResult, object]] = {}  # track -> (result, score)
        self.tmp = Path(tempfile.mkdtemp(prefix="grader-watch-"))
        self.zygotes: list[Zygote] = []
        self.launcher = None
        self.gpu: str | None = None
        self.early: list[subprocess.Popen] = []
        self.ready_s = 0.0
        self.job: _Job | None = None

    # -- the parts ----------------------------------------------------------------------------

    def start(self) -> None:
        """Make the zygotes (both import at once: a few seconds, once)."""
        import torch  # this process never forks: it may ask about the GPU
        self.gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else None
        began = time.perf_counter()
        self.launcher = None
        if self.fork:
            try:
                self._start_zygotes()
            except ZygoteError as e:
                self.say(f"watch: {e}\nwatch: every regrade starts its processes afresh instead")
        if self.launcher is None:
            self.launcher = _Started()
        self.ready_s = time.perf_counter() - began

    def _start_zygotes(self) -> None:
        self.zygotes = start_zygotes(self.settings, self.gpu is not None, self.tmp)
        self.launcher = self.zygotes[0].forker()

    def _revive(self) -> bool:
        """Make the zygotes again if one has died (killed, out of memory); True if it had."""
        if not self.zygotes or all(z.alive() for z in self.zygotes):
            return False
        self.say("watch: a zygote process died; making the processes ready again")
        self._stop_zygotes()
        self.start()
        return True

    def _stop_zygotes(self) -> None:
        for z in self.zygotes:
            z.stop()
        self.zygotes = []

    def regrade(self, tracks=None) -> Grade:
        """Grade `tracks` (default: every track) through the one grade path, the checks that
        failed last time first; returns the exercise's Grade (the other tracks' rows as last
        graded)."""
        names = [t for t in self.exercise.tracks if tracks is None or t in tracks]
        began = time.perf_counter()
        self._revive()
        # by name, as the scorecard shows them (the grader's own, 'your kernels do the work',
        # are not pytest's to order)
        first = sorted({c.name for t in names if t in self.results
                        for c in self.results[t][0].checks
                        if c.outcome in ("failed", "crashed") and c.name.startswith("test_")})
        g = self._grade(names, first)
        if self._revive():  # one died meanwhile: what its children reported is not a verdict
            g = self._grade(names, first)
        again = [r.track for _, r, _ in g.rows if first and _stopped_early(r)]
        if again:
            self.say(f"watch: the checks stopped early in the order that puts last time's "
                     f"failures first; {', '.join(again)} again in the usual order")
            redo = {r.track: (ex, r, s) for ex, r, s in self._grade(again, []).rows}
            g.rows = [redo.get(r.track, (ex, r, s)) for ex, r, s in g.rows]
        for _, r, s in g.rows:
            self.results[r.track] = (r, s)
        return Grade(self.tree, [(self.exercise, *self.results[t])
                                 for t in self.exercise.tracks if t in self.results],
                     time.perf_counter() - began, self.gpu)

    def _grade(self, names, first) -> Grade:
        self.progress.expect(first, time.monotonic())
        sub = Submission(self.tree, (self.exercise,), tuple(names),
                         self.settings.replace(first=tuple(first)), bench=self.bench,
                         forker=self.launcher)
        return grade(sub, self.progress)

    def close(self) -> None:
        """Stop everything this loop started: a regrade under way, the zygotes (and so every
        process forked from them), the early rebuilds; drop the temporary folder."""
        if self.job is not None and not self.job.finished.is_set():
            self._cancel(self.job)
        self._stop_zygotes()
        for p in self.early:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            p.wait()
        self.early = []
        shutil.rmtree(self.tmp, ignore_errors=True)

    def say(self, text: str) -> None:
        self.progress.print(text)

    # -- the loop ------------------------------------------------------------------------------

    def run(self) -> None:
        """Grade every track, then regrade on every save, until interrupted."""
        self.say(f"watch: {self.exercise.id} in {_shown(self.tree)}: making the grader's "
                 f"processes ready (once)")
        self.start()
        seen = self._snapshot()
        todo, saved_at = set(self.exercise.tracks), None
        while True:
            self.job = job = _Job(self.regrade, todo, saved_at)
            changed, seen, at = self._wait(seen, job.finished)
            if changed and not job.finished.is_set():
                self.say("watch: saved again: the regrade of the older files is cancelled")
                self._cancel(job)
                todo, saved_at = changed | job.tracks, at
                continue
            if isinstance(job.error, ZygoteError) and self.zygotes:  # one went away: again
                self.say(f"watch: {job.error}; making the processes ready again")
                self._stop_zygotes()
                self.start()
                todo, saved_at = job.tracks | changed, job.saved_at
                continue
            self._report(job)
            if not changed:
                changed, seen, at = self._wait(seen)
            todo, saved_at = changed, at

    def _report(self, job: _Job) -> None:
        if job.error is not None:
            self.say(f"watch: the regrade failed: {type(job.error).__name__}: {job.error}")
            return
        print(write_reports(job.result, full=True), file=self.stream, flush=True)
        kept = [t for t in self.exercise.tracks if t not in job.tracks and t in self.results]
        if kept:
            self.say(f"watch: {', '.join(kept)}: not regraded (no file of it changed); the "
                     f"result above is the last one")
        now = time.time()
        if job.saved_at is None:
            head = (f"the first grade took {now - job.began + self.ready_s:.1f} s "
                    f"({self.ready_s:.1f} s of it making the processes ready)")
        else:
            head = f"{now - job.saved_at:.1f} s from your save to this result"
        only = "; checks only (QUICK=1 times the op too)" if self.gpu and not self.bench else ""
        self.say(f"watch: {head}{only}; watching {_shown(self.tree / self.exercise.id)} for "
                 f"saves (Ctrl-C to stop)")

    def _cancel(self, job: _Job) -> None:
        job.cancelled = True
        self.launcher.cancelled = True
        try:
            if self.zygotes:
                for z in self.zygotes:
                    z.request({"op": "killall"})
            else:
                self.launcher.kill_all()
            while not job.finished.wait(0.05):  # a judge started meanwhile is killed too
                if self.zygotes:
                    self.zygotes[0].request({"op": "killall"})
                else:
                    self.launcher.kill_all()
        finally:
            self.launcher.cancelled = False

    # -- the files -----------------------------------------------------------------------------

    def _files(self) -> dict[Path, str]:
        return {self.tree / self.exercise.id / t.name / f: t.name
                for t in self.exercise.tracks.values() for f in t.files}

    def _snapshot(self) -> dict[Path, tuple | None]:
        state = {}
        for path in self._files():
            try:
                st = path.stat()
                state[path] = (st.st_mtime_ns, st.st_size, st.st_ino)
            except OSError:
                state[path] = None
        return state

    def _wait(self, seen: dict, stop: threading.Event | None = None):
        """Until a save settles (its tracks, the new state, the save's time) or `stop` is set
        (nothing, the same state)."""
        while True:
            if stop is not None:
                if stop.wait(self.poll_s):
                    return set(), seen, None
            else:
                time.sleep(self.poll_s)
            now = self._snapshot()
            if now == seen:
                continue
            files = self._files()
            changed = {p for p in now if now[p] != seen.get(p)}
            self._rebuild_early(changed)  # at once: ninja needs no settled save to start
            began = time.monotonic()
            while True:  # still for one poll, and nothing that was there missing (for long)
                time.sleep(self.poll_s)
                later = self._snapshot()
                moved = {p for p in later if later[p] != now[p]}
                if moved:
                    self._rebuild_early(moved - changed)
                    changed |= moved
                    now = later
                    continue
                gone = [p for p in changed if later[p] is None and seen.get(p) is not None]
                if not gone or time.monotonic() - began > MISSING_S:
                    break
            times = [now[p][0] / 1e9 for p in changed if now[p] is not None]
            return {files[p] for p in changed}, now, max(times) if times else time.time()

    def _rebuild_early(self, paths) -> None:
        """Start the ninja rebuild of each CUDA track whose sources changed, now; the next
        submission's process of that track takes over its report (grader.submission.early)."""
        if self.settings.build != "jit" or self.settings.sanitize:
            return
        self.early = [p for p in self.early if p.poll() is None]
        for t in self.exercise.tracks.values():
            folder = self.tree / self.exercise.id / t.name
            if not t.sources or not any(p.parent == folder and p.name in t.sources
                                        for p in paths):
                continue
            out = build_dir(self.tree, self.exercise.id, t.name)
            # the child may write only the build folder and a folder of its own (nvcc's
            # temporary files, its report): the build.ninja it runs is the submission's
            work = Path(tempfile.mkdtemp(prefix="early-", dir=self.tmp))
            env = dict(os.environ, TMPDIR=str(work))
            p = start_early_rebuild(self.tree, self.exercise.id, t.name, [out, work, Path("/dev")],
                                    work / "report.json", env=env, new_session=True)
            if p is None:  # never built: the regrade builds it all
                continue
            self.early.append(p)
            if len(self.zygotes) == 2:
                self.zygotes[1].request({"op": "adopt", "report": str(work / "report.json"),
                                         "key": [str(self.tree), self.exercise.id, t.name]})


def _stopped_early(r: TrackResult) -> bool:
    """Did the checks stop before the end (a crash, a stub, a broken CUDA context)? In another
    order, other checks might have run first."""
    if not r.build.get("ok"):
        return False  # nothing ran: the order did not matter
    return bool(r.stopped or r.ended or any(c.outcome in ("crashed", "not run") or
                                            c.not_implemented for c in r.checks))


def _shown(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def watch_command(tree: Path, exercise: Exercise, *, quick: bool) -> int:
    # Ctrl-C, and a kill: a clean stop either way (also where the shell started this in the
    # background, with SIGINT ignored: a script's `kill -INT` still stops it)
    signal.signal(signal.SIGINT, _interrupt)
    signal.signal(signal.SIGTERM, _interrupt)
    w = Watcher(tree, exercise, quick=quick)
    try:
        w.run()
    except KeyboardInterrupt:
        pass
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):  # a second Ctrl-C: still a clean stop
            signal.signal(sig, signal.SIG_IGN)
        w.close()
    print("\nwatch: stopped", flush=True)
    return 0
