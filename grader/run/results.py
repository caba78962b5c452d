"""Results: what grading one track found, rebuilt from the judge's event log.

The judge (grader.judge) appends JSON lines (build, collected, start, result, checks, performance, done);
`from_events` turns them, plus how the process ended, into a `TrackResult`. A check that was
started and never reported is the one that crashed or hung; checks never started are "not run".
"""
from __future__ import annotations

import json
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
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


@dataclass
class TrackResult:
    exercise: str                 # "02_scale"
    track: str
    tree: str
    build: dict = field(default_factory=dict)   # ok, stage, seconds, rebuilt, message
    checks: list = field(default_factory=list)  # [Check]
    ended: str = ""               # "" when the judge finished; else why it did not
    stopped: str = ""             # the checks stopped early (a broken CUDA context)
    performance: dict | None = None
    gpu: str | None = None
    log_tail: str = ""
    tampering: list = field(default_factory=list)  # repository files the submission changed
                                                   # or tried to write
    sanitizer: dict | None = None  # SANITIZE=tool: {"tool", "findings" or "unavailable"}
    review: list = field(default_factory=list)  # "file:line: what" an honest kernel never does
    #                                             (grader.judge.review): the track needs review

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


class Recorder:
    """Appends events as JSON lines, flushed at once: a crash loses nothing already said (what a
    killed process wrote is the kernel's; an fsync, which only a crash of the machine needs,
    cost 3 ms an event here, 0.25 s of a make exercise-05)."""

    def __init__(self, path):
        self.file = open(path, "a", buffering=1) if path else None

    def __call__(self, **event):
        if self.file:
            event.setdefault("t", round(time.time(), 3))  # when: where a grade's seconds go
            self.file.write(json.dumps(event) + "\n")
            self.file.flush()


def read_events(path: Path) -> list[dict]:
    events = []
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                events.append(json.loads(line))
            except json.JSONDecodeError:
                pass  # a line cut off by a crash
    return events


def describe_exit(returncode: int | None, timed_out: float | None, log: str) -> str:
    if timed_out is not None:
        return f"timed out: the track did not finish within its {timed_out:.0f} s limit"
    if "+ Timeout +" in log:
        return "timed out: a check ran past its time limit (an infinite loop or a hung kernel?)"
    if returncode is None or returncode == 0:
        return ""
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        what = {"SIGSEGV": "a segmentation fault", "SIGABRT": "an abort",
                "SIGKILL": "killed (out of memory?)", "SIGFPE": "a floating-point exception",
                "SIGBUS": "a bus error"}.get(name, name)
        return f"crashed: {what} ({name})"
    return f"the process exited early with code {returncode}"


def crash_excerpt(log: str, limit: int = 30) -> str:
    """What a learner needs from a dead judge's output: the fatal error and the innermost
    frames of the thread that died (faulthandler prints them), else the log's last lines."""
    lines = log.splitlines()
    fatal = next((i for i, l in enumerate(lines) if l.startswith(("Fatal Python error", "+++"))), None)
    if fatal is None:
        return "\n".join(lines[-limit:])
    current = next((i for i in range(fatal, len(lines)) if lines[i].startswith("Current thread")),
                   fatal + 1)
    block = [lines[fatal]]
    for l in lines[current:]:
        if l.startswith("Extension modules") or (len(block) > 2 and not l.strip()):
            break
        if "pluggy" not in l and "_pytest" not in l:  # pytest's plumbing tells nothing
            block.append(l)
    return "\n".join(block[:limit])


def from_events(events: list[dict], *, exercise: str, track: str, tree: str,
                returncode: int | None = 0, timed_out: float | None = None,
                log: str = "") -> TrackResult:
    result = TrackResult(exercise=exercise, track=track, tree=tree)
    checks: dict[str, Check] = {}
    started: set[str] = set()
    finished = False
    ended = ""
    for e in events:
        kind = e.get("event")
        if kind == "judge":
            result.gpu = e.get("gpu")
        elif kind == "build":
            result.build = {k: v for k, v in e.items() if k not in ("event", "t")}
        elif kind == "collected":
            checks = {t["id"]: Check(t["name"], t["category"], "not run") for t in e["tests"]}
        elif kind == "start":
            started.add(e["test"])
        elif kind == "result" and e["test"] in checks:
            c = checks[e["test"]]
            c.seconds += e.get("seconds") or 0.0
            if e["outcome"] == "skipped":
                c.outcome = ("needs a GPU" if e.get("reason", "").startswith("needs a GPU")
                             else "skipped")
                c.message = e.get("reason", "")
            elif e["outcome"] == "passed" and c.outcome != "failed":
                c.outcome = "passed"
            elif e["outcome"] == "failed":
                c.outcome = "crashed" if e.get("crashed") else "failed"
                parts = [e.get("message", "")] + e.get("notes", [])
                if e.get("phase") not in (None, "call"):
                    parts[0] = f"[in {e['phase']}] {parts[0]}"
                c.message = "\n".join(p for p in parts if p)
                c.where = e.get("where", "")
                c.example, c.repro, c.hint = (e.get(k, "") for k in ("example", "repro", "hint"))
                c.not_implemented = bool(e.get("not_implemented"))
        elif kind == "finished" and e.get("stopped"):
            result.stopped = e["stopped"]
        elif kind == "ended":
            ended = e.get("reason", "")
            log = e.get("log", "") or log
        elif kind == "sanitizer":
            result.sanitizer = {k: v for k, v in e.items() if k not in ("event", "t")}
        elif kind == "review":
            result.review = list(e.get("findings") or [])
        elif kind == "tampering":
            result.tampering += [p for p in e.get("paths", []) if p not in result.tampering]
        elif kind == "performance":
            result.performance = {k: v for k, v in e.items() if k not in ("event", "t")}
        elif kind == "done":
            finished = True
    result.ended = ended or ("" if finished else (describe_exit(returncode, timed_out, log)
                                                  or "the judge stopped before finishing"))
    if result.ended and result.build.get("ok"):
        for test_id in started:
            c = checks.get(test_id)
            if c is not None and c.outcome == "not run":
                c.outcome = "crashed"
                c.message = result.ended
    result.checks = list(checks.values())
    result.log_tail = crash_excerpt(log)
    return result
