"""Events: the one vocabulary of what happens while a track is graded, as typed records.

A judge writes what it learns to its event log, one JSON line per event, flushed as it happens:
whatever kills a process, what it had said is on disk (`Recorder`). The grade process reads the
log whole when the judge has ended (`read`, grader.run.results) and as it grows (`Tail`,
grader.run.follow, whose subscribers are the live display and the orchestrator). Every event is a
dataclass below; a line names its kind in `"event"`, and a field a reader does not know is
ignored (a log from an older grader still reads). Two notices are the grade process's own and
never written to a log: `Began` and `Exited`, a judge's start and end.

Standard library only: every process reads and writes events.
"""
from __future__ import annotations

import dataclasses
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

KINDS: dict[str, type] = {}


def _kind(name: str):
    def register(cls):
        cls.kind = name
        KINDS[name] = cls
        return cls
    return register


@dataclass
class Event:
    kind: ClassVar[str] = ""
    t: float = field(default=0.0, kw_only=True)  # when (time.time()): where a grade's seconds go

    def fields(self) -> dict:
        """The event's data, without its kind and time (what TrackResult keeps of some)."""
        return {k: v for k, v in dataclasses.asdict(self).items() if k != "t"}


@_kind("judge")
@dataclass
class JudgeStarted(Event):
    pid: int = 0
    began: float = 0.0        # the process's start, before its imports
    gpu: str | None = None
    torch: str = ""


@_kind("build")
@dataclass
class Build(Event):
    """The track was built and imported in the submission's process (or was not: `ok`)."""
    ok: bool = False
    stage: str | None = None  # "build" or "import"
    message: str = ""
    seconds: float | None = None
    rebuilt: bool | None = None
    sandbox: str | None = None  # how the submission's sandbox stands (the scorecard's line)


@_kind("review")
@dataclass
class Review(Event):
    findings: list = field(default_factory=list)  # "file:line: what" (grader.judge.review)


@_kind("collected")
@dataclass
class Collected(Event):
    # [{"id", "name", "category", "order", "backward"}]: "backward", a check of the backward
    # stage, which waits for the forward's (AWAITS_FORWARD)
    tests: list = field(default_factory=list)
    share: list | None = None  # [i, n]: the judge that runs the i-th of n shares of the track's
    #                            checks (grader.judge.strategies.share_of); None: all of them


# Staged verdicts: an exercise's checks that need the backward (marked `backward`, and every
# gradcheck) run after its forward checks, and only while those all pass: a wrong forward makes
# every gradient wrong, and the backward's failures would each name a cause that is not theirs.
# A judge skips them with this reason (grader.judge.plugin); the merge of a track's shares says
# it of a share's backward checks where another share's forward failed (grader.run.results).
AWAITS_FORWARD = "not checked until the forward passes"


@_kind("start")
@dataclass
class Start(Event):
    test: str = ""


@_kind("result")
@dataclass
class Result(Event):
    """A check's outcome: passed, failed, skipped (a reason), with a failure's explanation."""
    test: str = ""
    outcome: str = ""          # passed / failed / skipped
    seconds: float = 0.0
    reason: str = ""           # a skip's
    type: str = ""             # a failure's exception type
    message: str = ""
    notes: list = field(default_factory=list)
    where: str = ""            # file:line in the learner's files
    example: str = ""          # a property check's failing example
    repro: str = ""            # the command that reruns it
    hint: str = ""
    not_implemented: bool = False
    crashed: bool = False
    sticky: bool = False       # the CUDA context broke
    phase: str | None = None   # pytest's: setup / call / teardown


@_kind("compiles")
@dataclass
class Compiles(Event):
    """The Triton specializations the phase's kernels were compiled for (on the interpreter:
    would have been), and the seconds compiling took (grader.submission.compiles)."""
    specializations: int = 0
    kernels: dict = field(default_factory=dict)   # kernel name -> specializations
    seconds: float = 0.0
    compiled: int = 0          # of those, compiled afresh (not loaded from Triton's cache)
    emulated: bool = False     # counted on the interpreter, by Triton's rule


@_kind("references")
@dataclass
class References(Event):
    """The seconds the checks spent in the exercise's reference (the float64 expectations)."""
    seconds: float = 0.0
    calls: int = 0


@_kind("checks")
@dataclass
class ChecksExited(Event):
    exit_code: int = 0


@_kind("finished")
@dataclass
class Finished(Event):
    stopped: str | None = None  # why the checks stopped early, if they did


@_kind("ended")
@dataclass
class Ended(Event):
    """The judge could not go on (the submission's process died, a REPRO named no check)."""
    reason: str = ""
    log: str = ""


@_kind("sanitizer")
@dataclass
class Sanitizer(Event):
    tool: str | None = None
    unavailable: str | None = None
    findings: list = field(default_factory=list)


@_kind("tampering")
@dataclass
class Tampering(Event):
    paths: list = field(default_factory=list)


@_kind("performance")
@dataclass
class Performance(Event):
    """The figures of a timing (grader.judge.measure); the credit is grader.run.score's."""
    status: str = ""           # measured / rejected / needs a GPU
    case: dict | None = None
    dtype: str | None = None
    ceiling_name: str | None = None
    ceiling_unit: str | None = None
    ceiling_value: float | None = None
    figures: dict = field(default_factory=dict)
    problem: str | None = None
    warnings: list = field(default_factory=list)
    seconds: dict = field(default_factory=dict)   # where the timing's seconds went


@_kind("warm")
@dataclass
class Warmed(Event):
    """The baselines compiled ahead (or, `timed`, timed at the warming judge's gate)."""
    seconds: float = 0.0
    timed: bool = False


@_kind("ready")
@dataclass
class Ready(Event):
    """A timing judge started ahead is ready and waits at its gate."""
    pid: int | None = None  # its submission's process: named by its track if it shares the GPU


@_kind("gate")
@dataclass
class Gate(Event):
    """... and was let through: the GPU is its own."""


@_kind("bench")
@dataclass
class Bench(Event):
    result: dict = field(default_factory=dict)  # one exercise's sweep (grader.judge.sweep)


@_kind("done")
@dataclass
class Done(Event):
    """The judge finished its phase (a log without it: the judge died)."""


# --- the grade process's own notices (never in a log) ------------------------------------------

@dataclass
class Began(Event):
    label: str = ""            # "02_scale [cuda]"
    phase: str = ""            # checks / bench / sweep / warm
    sources: tuple = ()        # the files its build compiles


@dataclass
class Exited(Event):
    label: str = ""


# --- reading and writing -----------------------------------------------------------------------

def to_line(event: Event) -> str:
    data = {"event": event.kind, **dataclasses.asdict(event)}
    data["t"] = data.get("t") or round(time.time(), 3)
    return json.dumps(data)


def parse(line: str) -> Event | None:
    """One log line as its event; None for a line cut off by a crash or of an unknown kind."""
    try:
        data = json.loads(line)
        cls = KINDS[data.pop("event")]
    except (ValueError, KeyError, TypeError, AttributeError):
        return None
    known = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v for k, v in data.items() if k in known})


class Recorder:
    """Appends events as JSON lines, flushed at once: a crash loses nothing already said (what a
    killed process wrote is the kernel's; an fsync, which only a crash of the machine needs,
    cost 3 ms an event here, 0.25 s of a make exercise-05). No path: events are dropped (a
    pytest run outside the grader)."""

    def __init__(self, path):
        self.file = open(path, "a", buffering=1) if path else None

    def __call__(self, event: Event) -> None:
        if self.file:
            self.file.write(to_line(event) + "\n")
            self.file.flush()


def read(path: Path) -> list[Event]:
    """Every event of a log."""
    try:
        text = Path(path).read_text()
    except OSError:
        return []
    return [e for e in map(parse, text.splitlines()) if e is not None]


class Tail:
    """A log read as it grows: `new()` gives the events of the lines completed since the last
    call (a line still being written waits for its end)."""

    def __init__(self, path: Path):
        self.path, self.offset = Path(path), 0

    def new(self) -> list[Event]:
        try:
            with open(self.path, "rb") as f:  # bytes: an offset in characters drifts on "×"
                f.seek(self.offset)
                chunk = f.read()
        except OSError:
            return []
        complete = chunk[:chunk.rfind(b"\n") + 1]
        self.offset += len(complete)
        lines = complete.decode(errors="replace").splitlines()
        return [e for e in map(parse, lines) if e is not None]
