"""Grade: the one path from a submission tree to its scorecard, driven by the CLI and the tests.

    discover -> build -> check -> time -> score -> report

`grade(Submission(...))` checks every track in judges of their own (grader.run.tracks), side by side
(`jobs` at once; the GPU is shared fine for checks), then times each timeable track alone on
the GPU, then scores (grader.run.score) and returns a `Grade` whose rows the reports are made from
(grader.run.report). While the checks run, the exercises' compiled baselines are warmed in judges of
their own, and the first timings' judges get ready (their processes, torch, CUDA, the baselines'
callables), each waiting at its gate until the GPU is its own.
"""
from __future__ import annotations

import json
import os
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from grader.run import launch
from grader.submission.aot import aot_dir, build_aot
from grader.submission.build import start_pch
from grader.submission.build_errors import BuildError
from grader.common.discover import Exercise, Track
from grader.run.gradescope import gradescope, junit, write_json
from grader.common.paths import DURATIONS, ROOT
from grader.run.report import feedback, machine, scorecard
from grader.run.results import TrackResult
from grader.submission.sandbox import landlock_available
from grader.run.score import Score, score
from grader.common.settings import Settings, from_environment
from grader.run.tracks import Prepared, check_track, run_judge, time_track, timeable

WARM_JOBS = 3  # exercises whose baselines compile at once beside the checks (CPU-heavy)
FORK_AT = 2  # tracks in one grade from which, on a machine without a GPU, its processes are
#             forked from zygotes (below)
AHEAD = 2  # timing judges started ahead of their turn: getting one ready (its processes, torch,
#           CUDA, the baselines' callables) took ~15 s on the GPU host, longer than many timings
#           (2-20 s): with one ahead the GPU waited for it


@dataclass(frozen=True)
class Submission:
    """What to grade and how: a tree shaped like starter/, its exercises (and tracks), settings."""
    tree: Path
    exercises: tuple[Exercise, ...]
    tracks: tuple[str, ...] | None = None  # only these tracks (None: every track)
    settings: Settings = field(default_factory=Settings)
    bench: bool = True          # time the tracks (where there is a GPU)
    jobs: int = 0               # tracks checked at once (0: half the cores)

    def pairs(self) -> list[tuple[Exercise, Track]]:
        return [(ex, t) for ex in self.exercises for t in ex.tracks.values()
                if self.tracks is None or t.name in self.tracks]


@dataclass
class Grade:
    """What grading found: a row per track (exercise, result, score), and how long it took."""
    tree: Path
    rows: list[tuple[Exercise, TrackResult, Score]]
    seconds: float
    gpu: str | None

    @property
    def total(self) -> float:
        return sum(s.total for _, _, s in self.rows)


def grade(sub: Submission, progress=None) -> Grade:
    """discover (done: `sub.exercises`) -> build -> check -> time -> score."""
    start = time.perf_counter()
    launch.short_tempdir()
    tree, settings = Path(sub.tree).resolve(), sub.settings
    pairs = sub.pairs()
    jobs = _jobs(sub.jobs, len(pairs))
    # each checking process's share of the cores for torch's CPU ops (grader.run.launch)
    settings = settings.replace(check_threads=max(1, (os.cpu_count() or 2) // jobs))
    results: dict[tuple, TrackResult] = {}
    if settings.build == "jit":  # the bindings' precompiled header, made beside the checks
        start_pch([t for _, t in pairs])
    with _forking(pairs, settings, progress), ThreadPoolExecutor(jobs) as pool, \
            ThreadPoolExecutor(WARM_JOBS) as warming:
        todo = {pool.submit(_check, tree, ex, t, settings, progress): (ex, t)
                for ex, t in _longest_first(pairs)}
        gpu = _gpu_name()  # here, while the judges start
        bench = sub.bench and gpu is not None
        with tempfile.TemporaryDirectory(prefix="grader-run-") as run_cache:
            if bench and not settings.quick and landlock_available():
                # the tracks of one exercise share one baseline measurement (the judge writes
                # it; a sandboxed submission cannot): grader.judge.baselines.baseline_times. A batch
                # passes its own folder: the whole class on one GPU shares one measurement
                settings = settings.replace(run_cache=settings.run_cache or run_cache)
            warm = [warming.submit(_warm, tree, ex, gpu, settings) for ex in sub.exercises
                    if bench and ex.benchmark]
            ahead = bench and landlock_available()
            prepared: dict[tuple, Prepared] = {}
            early = threading.Thread(target=_prepare_first, daemon=True, args=(
                tree, pairs, todo, settings, progress, prepared)) if ahead else None
            if early is not None:
                early.start()
            for done in as_completed(todo):
                ex, t = todo[done]
                r = results[(ex.id, t.name)] = done.result()
                _durations({f"{ex.id}/{t.name}": time.perf_counter() - start})
                _say(progress, f"checked {ex.id} [{t.name}]: {r.count('correctness', 'passed')}/"
                               f"{r.total('correctness')} correctness checks passed "
                               f"({time.perf_counter() - start:.0f} s)")
            for w in warm:
                w.result()
            if early is not None:
                early.join()
            if warm:
                _say(progress, f"baselines compiled ahead ({time.perf_counter() - start:.0f} s)")
            try:
                _time_all(tree, pairs, results, gpu, bench, ahead, prepared, settings, progress,
                          start)
            finally:
                for p in prepared.values():  # a timing that raised: no judge left at its gate
                    p.cancel()
    rows = [(ex, results[(ex.id, t.name)], score(ex, results[(ex.id, t.name)]))
            for ex, t in pairs]
    return Grade(tree, rows, time.perf_counter() - start, gpu)


def grade_track(tree: Path, exercise: Exercise, track: Track, *, bench: bool = False,
                settings: Settings | None = None) -> TrackResult:
    """One track through the same path (the project's own tests drive this). Settings: given,
    or those of this process's environment (a test sets them as the CLI passes them on)."""
    sub = Submission(Path(tree), (exercise,), (track.name,), settings or from_environment(),
                     bench)
    return grade(sub).rows[0][1]


# What the NVIDIA driver shows where it is loaded (WSL: /dev/dxg); without any of them
# torch.cuda.is_available() is False whatever torch says
DRIVER = ("/proc/driver/nvidia", "/dev/nvidiactl", "/dev/nvidia0", "/dev/dxg")


def _gpu_name() -> str | None:
    """This machine's GPU, or None. torch is imported only where a driver is loaded: on a
    machine without one, importing it here only to hear "no" cost 1.3 s of CPU, competing with
    the judge's and the submission's own imports (~0.7 s of a one-exercise grade on 2 cores)."""
    if not _driver_loaded():
        return None
    import torch  # 2-3 s, overlapping the judges' start
    return torch.cuda.get_device_name() if torch.cuda.is_available() else None


@contextmanager
def _forking(pairs, settings: Settings, progress):
    """Where this machine has no GPU, a grade of several tracks forks its processes (a judge
    and a submission's process per track) from two zygotes that have imported torch, triton and
    pytest once (grader.run.zygote, as the watch loop does), instead of starting each afresh: on 2
    cores those imports were most of the CPU time of `make grade` of starter/ (30 processes,
    ~2 CPU s each). Not inside the watch loop (its own zygotes), not for one track (nothing to
    share), and not on a GPU machine, where a grade's processes start as before. A zygote that
    refuses to serve only means the processes start afresh."""
    from grader.run import zygote
    if launch.FORKER is not None or len(pairs) < FORK_AT or _driver_loaded():
        yield
        return
    with tempfile.TemporaryDirectory(prefix="grader-zygotes-") as folder:
        try:
            zygotes = zygote.start_zygotes(settings, False, Path(folder))
        except zygote.ZygoteError as e:
            _say(progress, f"grade: {e}; every process starts afresh instead")
            yield
            return
        launch.FORKER = zygotes[0].forker()
        try:
            yield
        finally:
            launch.FORKER = None
            for z in zygotes:
                z.stop()


def _driver_loaded() -> bool:
    return any(os.path.exists(p) for p in DRIVER)


def _jobs(asked: int, n: int) -> int:
    """Tracks checked at once: half the cores (each check is a judge and a submission's process,
    mostly waiting on each other and on the GPU; 8 on a 16-core GPU host), at least two (one
    track's pair keeps about one core busy: on 2 cores `make grade` of starter/, built, took
    173 s one track at a time and 122 s two at a time, the same CPU seconds), and one where the
    submission's process cannot be sandboxed (then a repository change must be pinned on one
    track)."""
    if not landlock_available():
        return 1
    return max(1, min(n, asked or max(2, (os.cpu_count() or 2) // 2)))


def _say(progress, text: str) -> None:
    if progress is not None:
        progress.print(text)


def _durations(record: dict | None = None) -> dict:
    """How long each track's checks took here last time (seconds from the run's start to its
    result), kept in the grader's cache; `record` adds to it."""
    try:
        known = json.loads(DURATIONS.read_text())
    except (OSError, ValueError):
        known = {}
    if record:
        known.update({k: round(v, 1) for k, v in record.items()})
        DURATIONS.parent.mkdir(parents=True, exist_ok=True)
        tmp = DURATIONS.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
        tmp.write_text(json.dumps(known, indent=1, sort_keys=True))
        tmp.replace(DURATIONS)
    return known


def _longest_first(pairs):
    """The order the checks start in: the longest last time first (the whole phase is as long
    as its last track). Never measured here: the tracks that compile first, the heaviest builds
    (CUTLASS's headers, a pybind11 module's torch/extension.h) before the rest, then higher
    exercise numbers first (bigger shapes). A fresh clone's `make grade` on 2 cores ended on
    03's build, started last, 17 s after every other track."""
    known = _durations()
    return sorted(pairs, key=lambda p: (-known.get(f"{p[0].id}/{p[1].name}", 1e9),
                                        -_build_weight(p[1]), -int(p[0].number)))


def _build_weight(track: Track) -> int:
    if not track.sources:
        return 0
    return 2 if track.headers or track.python_module else 1


def _check(tree, ex, t, settings, progress):
    if t.sources and settings.build == "aot":
        _build_ahead(tree, ex, t, progress)
    return check_track(tree, ex, t, settings, progress=progress)


def _build_ahead(tree, ex, t, progress) -> None:
    """With --build aot, build the track's library here, before its checks: the submission's
    process then only loads the binary (it may not write the AOT folder). A failed build is
    recorded beside it, and that process reports it as the track's build failure."""
    try:
        m = build_aot(tree, ex, t)
    except BuildError:
        _say(progress, f"built ahead of time {ex.id} [{t.name}]: failed (see the scorecard)")
        return
    where = aot_dir(tree, ex, t) / m["library"]
    where = where.relative_to(ROOT) if where.is_relative_to(ROOT) else where
    state = f"built in {m['seconds']:.0f} s" if m.get("fresh") else "up to date"
    _say(progress, f"built ahead of time {ex.id} [{t.name}]: {where} ({state}, torch "
                   f"{m['torch']}, TORCH_CUDA_ARCH_LIST={m['arch_list']})")


def _warm(tree, ex, gpu: str, settings: Settings) -> None:
    """The exercise's compiled baselines, compiled ahead in a judge without a submission
    (grader.judge.baselines.warm_baselines). A failure only means the timing phase compiles; compiled
    already on this GPU (the warm marker), or QUICK (the baselines' times come from a cache):
    nothing to do."""
    from grader.judge.baselines import warm_marker  # imports torch: only where there is a GPU
    if not any(n == "compile" or n.startswith("compile:") for n in ex.benchmark.baselines):
        return
    if settings.quick or warm_marker(ex, gpu).exists():
        return
    run_judge(tree, ex, next(iter(ex.tracks.values())), "warm", settings,
              min(ex.timeout_s, 600))


def _prepare_first(tree, pairs, todo, settings, progress, prepared) -> None:
    """Start the first timings' judges (the first 1 + AHEAD) once each track's checks have
    loaded its build: their process starts, torch imports, track loads and the baselines'
    callables (~10 s each on a GPU host) then overlap the checks instead of following them. A
    track that turns out not timeable has it cancelled (grader.run.tracks.time_track)."""
    for ex, t in [p for p in pairs if p[0].benchmark is not None][:1 + AHEAD]:
        check = next(f for f, pair in todo.items() if pair == (ex, t))
        label = f"{ex.id} [{t.name}]"
        while not check.done() and not (progress is not None and progress.loaded(label)):
            time.sleep(0.1)
        if check.done() and check.exception() is not None:
            continue
        prepared[(ex.id, t.name)] = Prepared(tree, ex, t, settings)


def _time_all(tree, pairs, results, gpu, bench, ahead, prepared, settings, progress,
                          start) -> None:
    """Each timing alone on the GPU, in exercise order; with `ahead`, the next AHEAD tracks'
    judges are started while this one times (each waits at its gate)."""
    timed = [(ex, t) for ex, t in pairs if bench and timeable(ex, results[(ex.id, t.name)])]
    for ex, t in pairs:
        r = results[(ex.id, t.name)]
        if not bench:
            if ex.benchmark is not None and r.performance is None:
                r.performance = {"status": "needs a GPU" if gpu is None else "not measured"}
            continue
        began = time.perf_counter()
        k = timed.index((ex, t)) if (ex, t) in timed else -1
        if ahead and k >= 0:
            for nex, nt in timed[k:k + 1 + AHEAD]:
                if (nex.id, nt.name) not in prepared:
                    prepared[(nex.id, nt.name)] = Prepared(tree, nex, nt, settings)
        time_track(tree, ex, t, r, settings, progress=progress,
                   prepared=prepared.pop((ex.id, t.name), None))
        if k >= 0:
            _say(progress, f"timed {ex.id} [{t.name}] in {time.perf_counter() - began:.0f} s "
                           f"({time.perf_counter() - start:.0f} s)")


def write_reports(grade: Grade, *, full: bool, repro: str | None = None, json_path=None,
                  junit_path=None, visibility=()) -> str:
    """The last step: the scorecard and feedback a learner reads (returned; grader.run.report), and
    the files asked for, Gradescope's results.json and JUnit XML (grader.run.gradescope)."""
    rel = grade.tree.relative_to(ROOT) if grade.tree.is_relative_to(ROOT) else grade.tree
    table = scorecard(grade.rows, title=f"Scorecard for {rel}  ({machine(grade.gpu)})")
    notes = [n for n in (feedback(ex, r, s, full=full) for ex, r, s in grade.rows) if n]
    sandbox = sorted({r.build["sandbox"] for _, r, _ in grade.rows if r.build.get("sandbox")})
    out = ["", table] + [f"sandbox: {s}" for s in sandbox[:2]]
    out += ["", "\n\n".join(notes)] if notes else []
    if repro:
        out.append(f"\nREPRO: only {repro.partition('@')[0]} ran, on its failing example; the "
                   f"points above are not a score (run without REPRO for that)")
    if json_path:
        write_json(Path(json_path), gradescope(grade.rows, seconds=grade.seconds, summary=table,
                                               visibility=visibility))
        out.append(f"\nresults.json (Gradescope format): {json_path}")
    if junit_path:
        Path(junit_path).parent.mkdir(parents=True, exist_ok=True)
        Path(junit_path).write_text(junit(grade.rows, seconds=grade.seconds))
        out.append(f"JUnit XML: {junit_path}")
    return "\n".join(out)
