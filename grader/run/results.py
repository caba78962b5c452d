"""Results: what grading one track found, built once from its judges' event logs.

The judges (grader.judge) write typed events (grader.common.events); `from_events` turns a
phase's events, plus how its process ended, into a `Phase`, and `track_result` the phases of one
track (its checks, and its timing if it was timed) into its `TrackResult`, which nothing changes
afterwards. A check that was started and never reported is the one that crashed or hung; checks
never started are "not run".
"""
from __future__ import annotations

from dataclasses import dataclass, field

from grader.common import events as ev
from grader.common.processes import crash_excerpt, describe_exit


@dataclass(frozen=True)
class Check:
    name: str
    category: str                 # "correctness" or "gradcheck"
    outcome: str                  # passed / failed / needs a GPU / skipped / crashed / not run
    message: str = ""             # for a failure: what differed, where, the likely cause
    where: str = ""               # file:line in the learner's file, when known
    not_implemented: bool = False
    example: str = ""             # a property check's failing example (the drawn values)
    repro: str = ""               # the command that runs that example again, alone
    hint: str = ""                # the exercise's hint for this check (exercise.toml [hints])
    seconds: float = 0.0          # how long it ran (pytest's duration, summed over its phases)

    def details(self) -> list[str]:
        """The lines under a failure's message: the example, how to rerun it, the hint."""
        return [line for line in (self.example and f"failing example: {self.example}",
                                  self.repro and f"run it alone: {self.repro}",
                                  self.hint and f"hint: {self.hint}") if line]


@dataclass(frozen=True)
class TrackResult:
    exercise: str                 # "02_scale"
    track: str
    tree: str
    build: dict = field(default_factory=dict)   # ok, stage, seconds, rebuilt, message
    checks: tuple = ()                          # (Check, ...)
    ended: str = ""               # "" when the judge finished; else why it did not
    stopped: str = ""             # the checks stopped early (a broken CUDA context)
    performance: dict | None = None
    gpu: str | None = None
    log_tail: str = ""
    tampering: tuple = ()         # repository files the submission changed or tried to write
    sanitizer: dict | None = None  # SANITIZE=tool: {"tool", "findings" or "unavailable"}
    review: tuple = ()            # "file:line: what" an honest kernel never does
    #                               (grader.judge.review): the track needs review
    times: dict = field(default_factory=dict)  # where the track's seconds went (`_times`)

    def count(self, category: str, outcome: str) -> int:
        return sum(c.category == category and c.outcome == outcome for c in self.checks)

    def total(self, category: str) -> int:
        return sum(c.category == category for c in self.checks)

    @property
    def all_correct(self) -> bool:
        """Every correctness check that ran passed (and some ran): performance may earn points."""
        ran = [c for c in self.checks if c.category == "correctness"
               and c.outcome not in ("skipped", "needs a GPU")]
        return bool(ran) and all(c.outcome == "passed" for c in ran)

    @property
    def not_implemented(self) -> bool:
        """Every check that ran failed on a stub ('not implemented yet')."""
        ran = [c for c in self.checks if c.outcome in ("passed", "failed")]
        return bool(ran) and all(c.outcome == "failed" and c.not_implemented for c in ran)


@dataclass(frozen=True)
class Phase:
    """What one judge phase left: its events, and how its process ended."""
    events: tuple
    returncode: int | None = 0
    timed_out: float | None = None
    log: str = ""
    restored: tuple = ()  # repository files changed and restored around it (no Landlock)

    @classmethod
    def merged(cls, shares: list["Phase"]) -> "Phase":
        """One phase of the shares of a track's checks run in judges of their own: their events
        together; ended if any ended (the first one's reason). Where one share's forward stage
        failed, the backward checks another share ran say what one judge would have said of
        them (events.AWAITS_FORWARD): a share does not wait for the others' forward."""
        if len(shares) == 1:
            return shares[0]
        events = [e for p in shares for e in p.events if not isinstance(e, (ev.Done, ev.Ended))]
        stage = {t["id"]: t.get("backward") for e in events if isinstance(e, ev.Collected)
                 for t in e.tests}
        if any(isinstance(e, ev.Result) and e.outcome == "failed" and stage.get(e.test) is False
               for e in events):
            # (a check skipped for its own reason, a GPU or QUICK, keeps it: one judge's too)
            events = [ev.Result(test=e.test, outcome="skipped", reason=ev.AWAITS_FORWARD, t=e.t)
                      if isinstance(e, ev.Result) and stage.get(e.test) and
                      e.outcome != "skipped" else e for e in events]
        ended = next((p for p in shares if p.ended), None)
        if ended is not None:
            log = next((e.log for e in ended.events if isinstance(e, ev.Ended) and e.log),
                       ended.log)
            events.append(ev.Ended(reason=ended.ended, log=log))
        events.append(ev.Done())
        return cls(tuple(events), ended.returncode if ended else 0,
                   ended.timed_out if ended else None, ended.log if ended else shares[0].log,
                   tuple(p for s in shares for p in s.restored))

    @property
    def ended(self) -> str:
        """"" when the judge finished its phase; else why it did not."""
        said = next((e.reason for e in self.events if isinstance(e, ev.Ended)), "")
        if said or any(isinstance(e, ev.Done) for e in self.events):
            return said
        return (describe_exit(self.returncode, self.timed_out, self.log)
                or "the judge stopped before finishing")

    @property
    def seconds(self) -> float | None:
        """Its judges' own seconds: from the first one's start to the last event (not the time
        it waited for a free slot before it started)."""
        began = [e.began for e in self.events if isinstance(e, ev.JudgeStarted) and e.began]
        ends = [e.t for e in self.events if e.t]
        return max(ends) - min(began) if began and ends else None

    @property
    def repeat_seconds(self) -> float | None:
        """What this phase's checks will take the next time here (grader.run.order): its
        seconds less its build and its Triton compiles, which the next grade finds in the
        grader's cache. Per judge (a share orders by it): 13's shares took 80-93 s in a fresh
        grade, 43-68 s of them compiling, and 20-22 s in the run again (an H200, 2026-11-30):
        ordered by the fresh seconds, the run again started them first and 04's checks (27 s)
        behind them, last to end."""
        if self.seconds is None:
            return None
        cached = sum(e.seconds or 0.0 for e in self.events
                     if isinstance(e, ev.Build) and e.ok and e.rebuilt)
        compiles = [e for e in self.events if isinstance(e, ev.Compiles)]
        cached += compiles[-1].seconds if compiles else 0.0
        return max(self.seconds - cached, 0.1)

    @property
    def built(self) -> bool:
        return any(isinstance(e, ev.Build) and e.ok for e in self.events)

    @property
    def tampering(self) -> tuple:
        seen = [p for e in self.events if isinstance(e, ev.Tampering) for p in e.paths]
        seen += [f"changed {p} (restored)" for p in self.restored]
        return tuple(dict.fromkeys(seen))


def _failure(e: ev.Result) -> dict:
    parts = [e.message] + list(e.notes)
    if e.phase not in (None, "call"):
        parts[0] = f"[in {e.phase}] {parts[0]}"
    return {"outcome": "crashed" if e.crashed else "failed",
            "message": "\n".join(p for p in parts if p), "where": e.where,
            "example": e.example, "repro": e.repro, "hint": e.hint,
            "not_implemented": bool(e.not_implemented)}


def _checks(phase: Phase, ended: str) -> tuple:
    """The checks as collected, each with its outcome (results of several pytest phases of one
    check: a failure anywhere is its outcome)."""
    checks: dict[str, dict] = {}
    started: set[str] = set()  # started and never reported: what the process died in
    for e in phase.events:
        if isinstance(e, ev.Collected):  # one per judge (several for a track run in shares)
            for t in e.tests:
                checks.setdefault(t["id"], {"name": t["name"], "category": t["category"],
                                            "outcome": "not run", "seconds": 0.0,
                                            "order": t.get("order", len(checks))})
        elif isinstance(e, ev.Start):
            started.add(e.test)
        elif isinstance(e, ev.Result) and e.test in checks:
            started.discard(e.test)
            c = checks[e.test]
            c["seconds"] += e.seconds or 0.0
            if e.outcome == "skipped":
                c.update(outcome="needs a GPU" if e.reason.startswith("needs a GPU")
                         else "skipped", message=e.reason)
            elif e.outcome == "passed" and c["outcome"] != "failed":
                c["outcome"] = "passed"
            elif e.outcome == "failed":
                c.update(_failure(e))
    if ended and phase.built:  # the check that was running when a judge died
        for test_id in started:
            c = checks.get(test_id)
            if c is not None and c["outcome"] in ("not run", "passed"):
                c.update(outcome="crashed", message=ended)
    ordered = sorted(checks.values(), key=lambda c: c.pop("order"))  # the exercise's order
    return tuple(Check(**c) for c in ordered)


def the_build(checks: Phase):
    """The track's build among its judges' (a track in shares: each share's process loads it): a
    failed one first, then the one that compiled, the longest. The others found it built (the
    build folder's lock), and the last of them said "cached" of a track built in 21 s (03 on the
    2-core machine)."""
    builds = [e for e in checks.events if isinstance(e, ev.Build)]
    return max(builds, key=lambda e: (not e.ok, bool(e.rebuilt), e.seconds or 0.0),
               default=None)


def _times(checks: Phase, timing: Phase | None) -> dict:
    """Where a track's seconds went, from its judges' events (each stamped with its time):
    ready (the judge's start to the track built and imported), build, checks (the first to the
    last), the slowest check, references (the float64 expectations), compiles (Triton's
    specializations and their seconds), timing (its judge's phase from its gate, and its parts;
    the baselines' with the warming judge's seconds where it timed them for this track)."""
    def last(kind, phase):
        return next((e for e in reversed(phase.events) if isinstance(e, kind)), None)
    out: dict = {}
    judge, build = last(ev.JudgeStarted, checks), the_build(checks)
    collected, finished = last(ev.Collected, checks), last(ev.Finished, checks)
    if judge is not None and build is not None:
        out["ready"] = round(build.t - judge.began, 1)
        if build.seconds is not None:
            out["build"] = round(build.seconds, 1)
    if collected is not None and finished is not None:
        out["checks"] = round(finished.t - collected.t, 1)
    results = [e for e in checks.events if isinstance(e, ev.Result) and e.seconds]
    if results:
        slowest = max(results, key=lambda e: e.seconds)
        out["slowest"] = (slowest.test.split("::", 1)[-1], round(slowest.seconds, 1))
    if (refs := last(ev.References, checks)) is not None:
        out["references"] = refs.seconds
    if (comp := last(ev.Compiles, checks)) is not None:
        out["compiles"] = comp.fields()
    if timing is not None and (tj := last(ev.JudgeStarted, timing)) is not None and timing.events:
        # a judge started ahead: from its gate (its seconds on the GPU, not its wait for them)
        gate = last(ev.Gate, timing)
        out["timing"] = round(timing.events[-1].t - (gate.t if gate else tj.began), 1)
        parts = dict(perf.seconds) if (perf := last(ev.Performance, timing)) is not None and \
            perf.seconds else {}
        if (warmed := last(ev.Warmed, timing)) is not None and warmed.timed:
            # the exercise's baselines, timed by its warming judge before this track (its first)
            parts["baselines"] = round(parts.get("baselines", 0.0) + warmed.seconds, 2)
        if parts:
            out["timing_parts"] = parts
        if (comp := last(ev.Compiles, timing)) is not None:
            out["timing_compiles"] = comp.fields()
    return out


def track_result(exercise: str, track: str, tree: str, checks: Phase,
                 timing: Phase | None = None, performance: dict | None = None) -> TrackResult:
    """A track's result, built once: its checks' phase, and its timing's (`timing`, where it was
    timed) or a performance status given instead (`performance`: needs a GPU, not measured)."""
    last = lambda kind, phase: next((e for e in reversed(phase.events) if isinstance(e, kind)),
                                    None)
    ended = checks.ended
    log = next((e.log for e in checks.events if isinstance(e, ev.Ended) and e.log), "") \
        or checks.log
    build, judge = the_build(checks), last(ev.JudgeStarted, checks)
    finished, review = last(ev.Finished, checks), last(ev.Review, checks)
    sanitizer = last(ev.Sanitizer, checks)
    if timing is not None:
        timed = last(ev.Performance, timing)
        performance = timed.fields() if timed is not None else {
            "status": f"not measured: the timing judge failed ({timing.ended or 'no result'})"}
    else:
        timed = last(ev.Performance, checks)  # a checks phase never times; kept if it did
        performance = performance if timed is None else timed.fields()
    tampering = checks.tampering + (timing.tampering if timing is not None else ())
    return TrackResult(
        exercise=exercise, track=track, tree=tree,
        build=build.fields() if build is not None else {},
        checks=_checks(checks, ended), ended=ended,
        stopped=(finished.stopped or "") if finished is not None else "",
        performance=performance, gpu=judge.gpu if judge is not None else None,
        log_tail=crash_excerpt(log), tampering=tuple(dict.fromkeys(tampering)),
        sanitizer=sanitizer.fields() if sanitizer is not None else None,
        review=tuple(review.findings) if review is not None else (),
        times=_times(checks, timing))
