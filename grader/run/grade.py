"""Grade: the one path from a submission tree to its scorecard, driven by the CLI and the tests.

    discover -> build -> check -> time -> score -> report

`grade(Submission(...))` checks every track in judges of their own (grader.run.tracks), side by side
(`jobs` at once; the GPU is shared fine for checks), then times each timeable track alone on
the GPU, then scores (grader.run.score) and returns a `Grade` whose rows the reports are made from
(grader.run.report). While the checks run, the exercises' compiled baselines are warmed in judges of
their own (which then time every baseline at their turn, before the exercise's tracks), and the
first timings' judges get ready (their processes, torch, CUDA, the baselines' callables), each
waiting at its gate until the GPU is its own.
"""
from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from grader.common import events as ev
from grader.common.discover import Exercise, Track
from grader.common.machine import cuda_device_name, cuda_devices, driver_loaded, \
    landlock_available
from grader.common.paths import ROOT, aot_dir, warm_marker
from grader.common.pristine import unchanged_starter
from grader.common.processes import child_env, short_tempdir
from grader.common.settings import Settings, from_environment
from grader.run import keeper
from grader.run.follow import Follower
from grader.run.gradescope import gradescope, junit, write_json
from grader.run.order import durations, longest_first
from grader.run.report import feedback, machine, scorecard, time_report
from grader.run.results import Phase, TrackResult, track_result
from grader.run.score import Score, score
from grader.run.tracks import AHEAD, Ahead, Judges, Prepared, timeable
from grader.run.zygotes import zygote_forker

# exercises whose baselines compile at once beside the checks (CPU-heavy); the timing phase
# waits for all of them (their compiles run on the GPU): with 3, the again run's last one (13)
# was ready 6-14 s after the checks had ended (docs/performance.md, "Grading time")
WARM_JOBS = 4
FORK_AT = 2  # judges in one grade from which its processes are forked from zygotes (below)

@dataclass(frozen=True)
class Submission:
    """What to grade and how: a tree shaped like starter/, its exercises (and tracks), settings."""
    tree: Path
    exercises: tuple[Exercise, ...]
    tracks: tuple[str, ...] | None = None  # only these tracks (None: every track)
    settings: Settings = field(default_factory=Settings)
    bench: bool = True          # time the tracks (where there is a GPU)
    jobs: int = 0               # tracks checked at once (0: half the cores)
    forker: object = field(default=None, compare=False)  # fork the grade's processes through
    #                             it (grader.common.forking: the watch loop's zygotes)

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
    """discover (done: `sub.exercises`) -> build -> check -> time -> score. `progress`: the
    display (grader.run.progress), a subscriber of the judges' events like the orchestrator."""
    start = time.perf_counter()
    short_tempdir()
    tree, settings = Path(sub.tree).resolve(), sub.settings
    every = sub.pairs()
    unstarted = _unstarted(tree, every, settings)
    pairs = [(ex, t) for ex, t in every if (ex.id, t.name) not in unstarted]
    # the shares of a long track run beside the other tracks, not in their place
    extra = sum(len(_shares(t, settings, len(pairs))) - 1 for _, t in pairs)
    judges = len(pairs) + extra  # judges of the checks: a track's, or each of its shares
    jobs = _jobs(sub.jobs, len(pairs)) + extra
    # each checking process's share of the cores for torch's CPU ops (grader.run.launch)
    settings = settings.replace(check_threads=max(1, (os.cpu_count() or 2) // jobs))
    if settings.build == "jit" and any(s.endswith(".cpp") for _, t in pairs for s in t.sources):
        _start_pch()
    say = progress.print if progress is not None else (lambda text: None)
    checking = _checking(settings, pairs, judges)
    ahead = Ahead()
    with Follower() as follower, _forking(sub.forker, judges, settings, say) as forker, \
            ThreadPoolExecutor(jobs) as pool, ThreadPoolExecutor(WARM_JOBS) as warming, \
            tempfile.TemporaryDirectory(prefix="grader-run-") as run_cache:
        for subscriber in ([progress.on_event] if progress is not None else []) + [ahead.on_event]:
            follower.subscribe(subscriber)
        todo = {pool.submit(_check, Judges(tree, share, follower, forker), ex, t, say): (ex, t)
                for ex, t in longest_first(pairs, driver_loaded())
                for share in _shares(t, checking, len(pairs))}
        shares_of: dict[tuple, int] = {}
        for ex, t in todo.values():
            shares_of[(ex.id, t.name)] = shares_of.get((ex.id, t.name), 0) + 1
        done_shares: dict[tuple, list] = {}
        gpu = cuda_device_name()
        bench = sub.bench and gpu is not None
        if bench and not settings.quick and landlock_available():
            # the tracks of one exercise share one baseline measurement (the judge writes it; a
            # sandboxed submission cannot): grader.judge.baselines.baseline_times. A batch
            # passes its own folder: the whole class on one GPU shares one measurement
            settings = settings.replace(run_cache=settings.run_cache or run_cache)
        judges = Judges(tree, settings, follower, forker)
        if bench and landlock_available():  # no snapshot to take around a judge started ahead
            ahead.start(judges, [(ex, t) for ex, t in pairs if ex.benchmark is not None])
        # the last exercises' first: the largest cases and the most to compile (13's compiled
        # attention and FlexAttention, each forward and backward). In exercise order, 13's
        # started only once nine others had ended (WARM_JOBS at a time), and in a fresh
        # scorecard the last was ready 14 s after the checks had ended, the timing waiting on
        # it (docs/performance.md, "Grading time")
        warm = [(ex, warming.submit(_warm, judges, ex, gpu))
                for ex in sorted(sub.exercises, key=lambda e: -int(e.number))
                if bench and ex.benchmark]
        checked: dict[tuple, Phase] = {}
        for done in as_completed(todo):
            ex, t = todo[done]
            shares = done_shares.setdefault((ex.id, t.name), [])
            shares.append(done.result())
            if len(shares) < shares_of[(ex.id, t.name)]:
                continue  # the track's other shares still run
            phase = checked[(ex.id, t.name)] = Phase.merged(shares)
            repeat = [s.repeat_seconds for s in shares if s.repeat_seconds is not None]
            seconds = phase.seconds or time.perf_counter() - start
            durations({f"{ex.id}/{t.name}": (seconds, max(repeat, default=seconds))})
            r = track_result(ex.id, t.name, str(tree), phase)
            say(f"checked {ex.id} [{t.name}]: {r.count('correctness', 'passed')}/"
                f"{r.total('correctness')} correctness checks passed "
                f"({time.perf_counter() - start:.0f} s)")
        warmed = {}  # exercise id -> its warming judge, at its gate
        try:
            for ex, w in warm:
                if (waiting := w.result()) is not None:
                    warmed[ex.id] = waiting
            if warm:
                say(f"baselines compiled ahead ({time.perf_counter() - start:.0f} s)")
            timed = _time_all(judges, pairs, checked, bench, ahead, say, start, warmed)
        finally:
            ahead.cancel()  # a timing that raised: no judge left at its gate
            for _, w in warm:  # warming judges of exercises with no track timed (or a raise)
                if w.done() and not w.exception() and w.result() is not None:
                    w.result().cancel()
    rows = []
    for ex, t in every:
        if (ex.id, t.name) in unstarted:
            # no figure either way; without a GPU it says so, as a started track's does
            r = track_result(ex.id, t.name, str(tree), unstarted[(ex.id, t.name)],
                             performance={"status": "needs a GPU" if gpu is None and
                                          ex.benchmark is not None else "not started"})
            rows.append((ex, r, score(ex, r)))
            continue
        phase = checked[(ex.id, t.name)]
        status = None if (ex.id, t.name) in timed or ex.benchmark is None or bench else \
            {"status": "needs a GPU" if gpu is None else "not measured"}
        r = track_result(ex.id, t.name, str(tree), phase, timed.get((ex.id, t.name)), status)
        rows.append((ex, r, score(ex, r)))
    return Grade(tree, rows, time.perf_counter() - start, gpu)


STARTER_CHECK = "grader::starter"


def _unstarted(tree: Path, pairs, settings: Settings) -> dict:
    """The tracks that are the starter as shipped (grader.common.pristine), each with the phase
    its judge would have left, without a build or a judge: every entry point of a starter raises
    "not implemented yet". Not where one check is asked for (REPRO, the project's -k), nor where
    the starters are to be built (Settings.build_starters: the project's own tests)."""
    if settings.build_starters or settings.repro or settings.select:
        return {}
    said = ("not implemented yet: the starter as shipped (no file of the track changed since), "
            "so it was not built or run")
    return {(ex.id, t.name): Phase((
        ev.Build(ok=True, stage="starter", message="unchanged: not built"),
        ev.Collected(tests=[{"id": STARTER_CHECK, "name": "the starter, unchanged",
                             "category": "correctness", "order": 0}]),
        ev.Result(test=STARTER_CHECK, outcome="failed", message=said, not_implemented=True),
        ev.Finished(), ev.Done())) for ex, t in pairs if unchanged_starter(tree, ex, t)}


def grade_track(tree: Path, exercise: Exercise, track: Track, *, bench: bool = False,
                settings: Settings | None = None, forker=None) -> TrackResult:
    """One track through the same path (the project's own tests drive this). Settings: given,
    or those of this process's environment (a test sets them as the CLI passes them on).
    `forker`: the processes forked from zygotes (Submission.forker), as `make grade` keeps them."""
    sub = Submission(Path(tree), (exercise,), (track.name,), settings or from_environment(),
                     bench, forker=forker)
    return grade(sub).rows[0][1]


@contextmanager
def _forking(forker, judges: int, settings: Settings, say):
    """The forker the grade's processes start through: the caller's (the watch loop's zygotes),
    or, where the grade has several `judges` (tracks, or the shares of one), two zygotes of the
    grade's own that have imported torch, triton and pytest once (grader.run.zygote), instead
    of starting each process afresh: on 2 cores those imports were most of the CPU time of
    `make grade` of starter/ (30 processes, ~2 CPU s each); on a 16-core GPU host the checks of
    a whole grade keep every core busy (docs/performance.md, "Grading time"), and its ~40
    processes' imports are CPU seconds taken from them. The zygotes never touch CUDA: each
    forked process initializes it for itself; where CUDA has no device (no GPU, or a driver
    without one), the submission's zygote imports Triton as its interpreter. Not for one judge
    (nothing to share), unless the grade keeps its processes for the next command
    (Settings.keep: then the kept zygotes, grader.run.keeper, whatever the judges). A zygote
    that refuses to serve only means the processes start afresh."""
    if forker is not None:
        yield forker
        return
    if judges and keeper.allowed(settings):  # zygotes kept between commands (asked for, and
        #                                        out of the submission's reach)
        kept = keeper.kept_forker(settings, cuda_devices() > 0, say)
        if kept is not None:
            try:
                yield kept
            finally:
                kept.channel.close()
            return
    if judges < FORK_AT:
        yield forker
        return
    with tempfile.TemporaryDirectory(prefix="grader-zygotes-") as folder, \
            zygote_forker(settings, cuda_devices() > 0, Path(folder), say) as made:
        yield made


QUICK_SHARDS = 2  # judges per track at most under QUICK on a GPU host (_shares)


def _shares(track: Track, settings: Settings, tracks: int = 1) -> list[Settings]:
    """The settings of each judge that checks `track`: one, or (a track whose exercise declares
    `shards`, with the sandbox that lets judges run side by side) one per share of its checks:
    each its share of the property checks' examples and of the other checks
    (grader.judge.plugin). On a GPU machine, `shards` of them in a grade of several tracks:
    their Triton compiles then run side by side instead of one after another (13's checks: most
    of a cold grade). Graded alone (`make exercise-13`, `make watch-13`), up to `shards_alone`,
    one per core: a share is mostly its submission's process compiling on one core, and 4 of
    them left 12 of a GPU host's 16 cores idle while 13's checks compiled for 67 s of their 81
    (an H200, 2026-11-29). On a machine without a GPU, as many as the cores the grade's `tracks`
    leave idle, up to the same (the interpreter runs each check on one core: what 13 gains on 2
    cores is in docs/performance.md, "Grading time on the CPU"); not for the project's own tests
    (fixed examples, a selection of checks), nor under QUICK. Not for one check (REPRO), under a
    sanitizer. In the watch loop's order (last time's failures first) each share runs its own
    failures first."""
    most = max(track.shards, track.shards_alone or 1)
    cores = os.cpu_count() or 1
    if not driver_loaded():
        # QUICK's few checks are done before a second judge pays off: 13's took 10.2-11.6 s in
        # one judge, 14.1-14.6 s in two (2 cores, 4 alternated runs each, 2026-11-29)
        # a CUDA track without a C++ CPU path runs one check here: one judge
        n = 1 if settings.examples or settings.select or settings.quick or \
            (track.sources and not track.cpu) else min(most, cores // max(1, tracks))
    elif settings.quick:
        # QUICK's few examples: more judges would each start up for one or two of them, and
        # the driver makes CUDA contexts one at a time (~0.2 s each with 16 at once, an H200):
        # 13's QUICK took 6.8 s in 8 judges, 4.8-5.4 in 4, 4.2-4.5 in 2, 4.4-4.6 in 1 (two
        # runs each, docs/performance.md, "Grading time")
        n = min(track.shards, QUICK_SHARDS)
    else:
        n = track.shards if tracks > 1 else min(most, max(track.shards, cores))
    if n <= 1 or not landlock_available() or settings.repro or settings.sanitize:
        return [settings]
    return [settings.replace(shard=(i, n)) for i in range(n)]


STEP_ASIDE_CORES = 8  # the cores a machine needs before checks step aside for builds


def _checking(settings: Settings, pairs, judges: int) -> Settings:
    """The checking judges' settings: they step aside for the builds beside them
    (grader.common.processes.step_aside) where several judges run, a track builds here, and
    the machine is a GPU host with cores to spare beside the builds (measured on 16). On 2
    cores a build's ninja takes both, and a check stepped aside could wait out its own time
    limit behind a row of builds: there the checks keep their priority."""
    return settings.replace(niced=judges > 1 and settings.build == "jit" and any(
        t.sources for _, t in pairs) and driver_loaded() and
        (os.cpu_count() or 1) >= STEP_ASIDE_CORES)


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


def _start_pch() -> None:
    """The bindings' precompiled header, made beside the checks by a child of its own
    (grader.submission.pch); its first line comes once it holds the lock the builds wait on
    (or knows there is nothing to make), before any judge starts."""
    child = subprocess.Popen([sys.executable, "-m", "grader.submission.pch"], cwd=ROOT,
                             env=child_env(), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, start_new_session=True)
    child.stdout.readline()
    child.stdout.close()


def _check(judges: Judges, ex, t, say) -> Phase:
    if t.sources and judges.settings.build == "aot":
        _build_ahead(judges, ex, t, say)
    return judges.check(ex, t)


def _build_ahead(judges: Judges, ex, t, say) -> None:
    """With --build aot, build the track's library before its checks, in a process of its own
    (grader.submission.aot): the submission's process then only loads the binary (it may not
    write the AOT folder). A failed build is recorded beside it, and that process reports it
    as the track's build failure."""
    tree = judges.tree
    run = subprocess.run([sys.executable, "-m", "grader.submission.aot", "--tree", str(tree),
                          "--exercise", ex.id, "--track", t.name], cwd=ROOT,
                         env=child_env(judges.settings), capture_output=True, text=True)
    lines = run.stdout.strip().splitlines()
    m = json.loads(lines[-1]) if lines and lines[-1].startswith("{") else {
        "error": run.stderr[-500:] or "no manifest"}
    if "error" in m or not m.get("ok"):
        say(f"built ahead of time {ex.id} [{t.name}]: failed (see the scorecard)")
        return
    where = aot_dir(tree, ex.id, t.name) / m["library"]
    where = where.relative_to(ROOT) if where.is_relative_to(ROOT) else where
    state = f"built in {m['seconds']:.0f} s" if m.get("fresh") else "up to date"
    say(f"built ahead of time {ex.id} [{t.name}]: {where} ({state}, torch {m['torch']}, "
        f"TORCH_CUDA_ARCH_LIST={m['arch_list']})")


def _warm(judges: Judges, ex, gpu: str) -> Prepared | None:
    """The exercise's compiled baselines, compiled ahead in a judge without a submission
    (grader.judge.baselines.warm_baselines), which then waits at its gate: opened before the
    exercise's first timing, it times every baseline into the run's cache with what it compiled
    (time_warmed_baselines). Returns it, waiting (None: it ended; a failure only means the
    timing phase compiles and times the baselines itself). Also where they were compiled before
    on this GPU (the warm marker): it then runs the peers beside the checks and re-times the
    kept figures at its gate (compiling nothing where every mode's figures are kept); a timing
    judge doing that at its turn spent 7-9 s on a peer's first call (Liger-Kernel's) in each of
    05-08 (the again run, docs/performance.md, "Grading time"). QUICK (the baselines' times come from a cache):
    nothing to do."""
    b = ex.benchmark
    if not (b.peers or any(b.compiles(n) for n in b.baselines)) or judges.settings.quick:
        return None
    track = next(iter(ex.tracks.values()))
    if not judges.settings.run_cache:  # nowhere to leave the figures: compile only, once
        if not warm_marker(ex, gpu).exists():
            judges.run(ex, track, "warm", min(ex.timeout_s, 600))
        return None
    warming = Prepared(judges, ex, track, "warm")
    if warming.ready():
        return warming
    judges.wait(warming.judge, track, 0)  # ended (its events and log, as any judge's)
    warming.tmp.cleanup()
    return None


def _time_all(judges: Judges, pairs, checked, bench, ahead: Ahead, say, start,
              warmed: dict) -> dict:
    """Each timing alone on the GPU, in exercise order, the next AHEAD tracks' judges started
    while one times (each waits at its gate), an exercise's baselines timed first by its
    warming judge (`warmed`: exercise id -> that judge, at its gate; taken from it as it goes);
    the timing phases by (exercise id, track)."""
    if not bench:
        return {}
    order = [(ex, t) for ex, t in pairs if timeable(ex, checked[(ex.id, t.name)])]
    ahead.drop(keep=order)  # tracks that turned out not to be timed
    timed = {}
    ahead.quiet()  # no judge warms up on the GPU from here on: the timings need it alone
    for k, (ex, t) in enumerate(order):
        began = time.perf_counter()
        if ahead.judges is not None:
            ahead.ensure(order[k:k + 1 + AHEAD])
        baselines = ()
        if ex.id in warmed:
            phase = judges.release(ex, warmed.pop(ex.id))
            baselines = tuple(e for e in phase.events if isinstance(e, ev.Warmed) and e.timed)
            say(f"timed {ex.id}'s baselines in {time.perf_counter() - began:.0f} s "
                f"({time.perf_counter() - start:.0f} s)")
            began = time.perf_counter()
        phase = judges.time(ex, t, ahead.take(ex, t))
        # the time report counts the baselines' seconds with the track they were timed for
        timed[(ex.id, t.name)] = dataclasses.replace(phase, events=baselines + phase.events)
        say(f"timed {ex.id} [{t.name}] in {time.perf_counter() - began:.0f} s "
            f"({time.perf_counter() - start:.0f} s)")
    return _named(timed)


def _named(timed: dict) -> dict:
    """A figure that another process shared (grader.judge.alone) names that process by its
    track where it was a submission's of this grade (its timing judge, at its gate, said its
    pid): a pid alone means nothing once the grade has ended."""
    whose = {e.pid: f"{ex_id} [{track}]" for (ex_id, track), phase in timed.items()
             for e in phase.events if isinstance(e, ev.Ready) and e.pid}
    name = lambda m: m[0] + (f" ({whose[int(m[1])]}'s process)" if int(m[1]) in whose else "")
    return {key: dataclasses.replace(phase, events=tuple(
        dataclasses.replace(e, problem=re.sub(r"pid (\d+)", name, e.problem))
        if isinstance(e, ev.Performance) and e.problem else e for e in phase.events))
        for key, phase in timed.items()}


def write_reports(grade: Grade, *, full: bool, repro: str | None = None, json_path=None,
                  junit_path=None, visibility=(), times: bool = False) -> str:
    """The last step: the scorecard and feedback a learner reads (returned; grader.run.report), and
    the files asked for, Gradescope's results.json and JUnit XML (grader.run.gradescope)."""
    rel = grade.tree.relative_to(ROOT) if grade.tree.is_relative_to(ROOT) else grade.tree
    table = scorecard(grade.rows, title=f"Scorecard for {rel}  ({machine(grade.gpu)})",
                      points=not repro)
    notes = [n for n in (feedback(ex, r, s, full=full) for ex, r, s in grade.rows) if n]
    sandbox = sorted({r.build["sandbox"] for _, r, _ in grade.rows if r.build.get("sandbox")})
    out = ["", table] + [f"sandbox: {s}" for s in sandbox[:2]]
    out += ["", "\n\n".join(notes)] if notes else []
    if times:
        out += ["", time_report(grade.rows, grade.seconds)]
    name = (repro or "").partition("@")[0]
    if any(c.name == name and c.outcome != "not run" for _, r, _ in grade.rows for c in r.checks):
        out.append(f"\nREPRO: only {name} ran, on its failing example: no points (run without "
                   f"REPRO for the score)")
    if json_path:
        write_json(Path(json_path), gradescope(grade.rows, seconds=grade.seconds, summary=table,
                                               visibility=visibility))
        out.append(f"\nresults.json (Gradescope format): {json_path}")
    if junit_path:
        Path(junit_path).parent.mkdir(parents=True, exist_ok=True)
        Path(junit_path).write_text(junit(grade.rows, seconds=grade.seconds))
        out.append(f"JUnit XML: {junit_path}")
    return "\n".join(out)
