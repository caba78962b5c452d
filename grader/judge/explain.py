"""Explain: a failed check as a learner reads it: the message (a long compiler error cut to its
head and end), the failing example drawn by hypothesis and the command that reruns it alone,
where in the learner's files it was raised, the exercise's hint when it is about this failure,
and whether it was a stub ("not implemented yet") or broke the CUDA context.
"""
from __future__ import annotations

import re
import traceback
from functools import cache
from pathlib import Path

import hypothesis
import pytest

from grader.common import events as ev
from grader.common.discover import load_exercise
from grader.common.paths import ROOT
from grader.common.settings import current
from grader.judge.proxy import SubmissionDied

# Errors after which the CUDA context is unusable: stop instead of failing every later check.
STICKY = re.compile(r"illegal memory access|device-side assert|unspecified launch failure|"
                    r"misaligned address|illegal instruction|CUDA error: an? (?!out of memory)")
NOT_IMPLEMENTED = re.compile(r"not implemented yet", re.I)


@cache
def exercise_of(folder: str):
    """The exercise whose checks live in `folder` (read once per judge)."""
    return load_exercise(Path(folder))


def short(nodeid: str) -> str:
    """A check's name as the scorecard shows it: the test id without its file."""
    return nodeid.split("::", 1)[-1]


_BLOB = re.compile(r"@reproduce_failure\('([^']+)', b'([^']+)'\)")
_DRAW = re.compile(r"^Draw \d+(?: \((.*?)\))?: (.*)$")
_ARG = re.compile(r"^    (\w+)=(.*?),?$")  # a top-level argument; nested values are indented more


def hypothesis_report(notes: list[str], item) -> tuple[str, str, list[str]]:
    """Split hypothesis' notes into the failing example (the drawn values only, not the
    fixtures), the reproduction blob, and the notes that are not hypothesis'."""
    values, blob, rest = [], "", []
    for note in notes:
        if "Failing test case" not in note and "reproduce_failure" not in note \
                and not note.lstrip().startswith("Draw "):
            rest.append(note)
            continue
        inside = False
        for line in note.splitlines():
            if line.startswith("Failing test case"):
                inside = True
            elif inside and line.strip() == ")":
                inside = False
            elif inside and (m := _ARG.match(line)):
                name, value = m.groups()
                opened = sum(value.count(c) for c in "([{") > sum(value.count(c) for c in ")]}")
                if name not in item.fixturenames and value != "data(...)" and not opened:
                    values.append(f"{name}={value[:80]}")
            elif m := _DRAW.match(line.strip()):
                values.append(f"{m.group(1) or 'drawn'}={m.group(2)}")
            elif m := _BLOB.search(line):
                blob = m.group(2)
    return ", ".join(values), blob, rest


def _repro_command(item, blob: str) -> str:
    """The make command that runs exactly this failing example again, alone."""
    tree = Path(item.config.getoption("--tree")).resolve()
    which = ("" if tree == ROOT / "starter" else "IMPL=solutions " if tree == ROOT / "solutions"
             else f"SUBMISSION={tree} ")
    number = exercise_of(str(item.path.parent)).number
    return f"make exercise-{number} {which}REPRO='{short(item.nodeid)}@{blob}'"


def repro_items(items, record) -> list:
    """REPRO=check@blob (make exercise-NN REPRO=...): only that check, on that one example."""
    name, _, blob = current().repro.partition("@")
    chosen = [i for i in items if short(i.nodeid) == name]
    if not chosen:
        reason = (f"REPRO: no check named {name!r} here; the checks are: "
                  f"{', '.join(short(i.nodeid) for i in items)}")
        record(ev.Ended(reason=reason))
        raise pytest.UsageError(reason)
    for item in chosen:
        if hasattr(item.obj, "hypothesis"):  # a property check: that example, not new ones
            item.obj = hypothesis.reproduce_failure(hypothesis.__version__, blob)(item.obj)
    return chosen


def explain(exc: BaseException, item) -> dict:
    tree = Path(item.config.getoption("--tree")).resolve()
    frames = [f for f in traceback.extract_tb(exc.__traceback__)
              if Path(f.filename).resolve().is_relative_to(tree)]
    if isinstance(exc, SubmissionDied):
        return {"type": "crashed", "message": exc.reason, "notes": [], "crashed": True,
                "not_implemented": False, "sticky": False}
    message = str(exc) if not isinstance(exc, AssertionError) or str(exc) else "assertion failed"
    example, blob, notes = hypothesis_report([n for n in getattr(exc, "__notes__", []) if n.strip()],
                                       item)
    lines = message.splitlines()
    # a long message keeps its head and its end: a compiler's error (Triton's CompilationError
    # prints the kernel's source first) says what went wrong in its last lines
    shown = lines if len(lines) <= 40 else lines[:24] + ["    ..."] + lines[-15:]
    info = {"type": type(exc).__name__, "message": "\n".join(shown),
            "notes": notes[:6]}
    if example:
        info["example"] = example
    if blob:
        info["repro"] = _repro_command(item, blob)
    hint = exercise_of(str(item.path.parent)).hints.get(item.originalname)
    # the check's hint is about its own subject: not shown for a failure that is not (a stage
    # not written yet, an op wrong on plain inputs: grader.judge.testing.off_topic) nor for an
    # out-of-bounds access, whose message names its own fix
    if hint and not getattr(exc, "grader_off_topic", False) \
            and type(exc).__name__ != "OutOfBounds":
        info["hint"] = hint
    if getattr(exc, "grader_where", ""):  # raised in the submission's process
        info["where"] = exc.grader_where
    elif frames:
        f = frames[-1]
        info["where"] = f"{Path(f.filename).name}:{f.lineno}"
    # a stub says "not implemented yet"; PyTorch's own NotImplementedError ("Could not run
    # 'ns::op' with arguments from the 'CPU' backend") is a real failure, not a stub
    info["not_implemented"] = bool(NOT_IMPLEMENTED.search(message)) or (
        isinstance(exc, NotImplementedError) and "Could not run" not in message)
    info["sticky"] = bool(STICKY.search(message))
    return info
