"""Known-bad submissions: what each `exercises/NN_name/wrong/<name>.toml` declares.

A known-bad is a submission the grader must reject, and how: a wrong answer (a missing mask, a
sum in bf16) or a cheat (delegation to PyTorch, a patched checker, a write into the repository,
a signal out of the sandbox). It is one track of today's solution with a few changes, so it
stays in step with the solution; the project's own tests grade every one through the grader's
one path and compare the result with `expect` (tests/test_wrong.py). This module reads and
validates the files; a bad field raises KnownBadError naming the file and the field, e.g.
    exercises/03_bias_relu/wrong/cpu_math_in_the_input_dtype.toml: select: expected str, got 3

    why = "the C++ CPU backward forgets the mask (z > 0)"  # required: what it does wrong
    track = "cuda"                       # required: a track of the exercise
    select = "backward_matches_reference"  # a pytest -k expression: the checks that catch it
    [edits]                              # file of the track -> [[old, new], ...]: each old occurs
    "bias_relu.cpp" = [["a", "b"]]       #   in the solution's file and is replaced once
    [files]                              # file of the track -> its whole content: added, or in
    "extra.py" = "..."                   #   place of the solution's (edits and/or files)
    [expect]                             # required: what must happen (at least one entry)
    failed = { "test_backward_matches_reference[cpu]" = ["grad of x"] }

The settings its grade needs, beside `select`:
    check_timeout = 30      one check's time limit in seconds (a hang caught sooner)
    signals = "seccomp"     the submission's signal fence (grader.common.settings): "auto" is
                            Landlock's signal scope, "seccomp" the fallback filter, put up even
                            where the scope exists. A known-bad that names one signals out of
                            its sandbox: it is graded only where that fence stands (skipped,
                            saying why, elsewhere).
    gpu = true              it is caught only on a GPU (skipped, saying so, elsewhere)
    bench = true            the timing runs: for what is caught while timing (needs gpu)
"{root}" in an edit's new text or in a file's content is the repository's absolute path, for
cheats that reach into it.

`expect`:
    failed = {check = spec}        the check failed; each failed instance's message meets spec
    crashed = {check = spec}       the check crashed (the submission's process died in it), in
                                   every instance that ran
    if_failed = {check = spec}     where the check failed, its messages meet spec (it need not)
    caught = {checks = [...], messages = [needle, ...]}
                                   at least one of these checks failed; their messages,
                                   together, hold every needle
    not_failed = [check, ...]      none of its instances failed or crashed
    passed = [check, ...]          it ran, and every instance of it passed
    reported = [check, ...]        the grade reports these checks and no other (each reported
                                   check is named here, each named one was reported): a forged
                                   result line would add one
    build_failed = [needle, ...]   the build (or the loading of the submission) failed, saying so
    ended = [needle, ...]          the track stopped before its checks were done: the build or
                                   the loading failed, or the judge ended early; [] for any reason
    tampering = [needle, ...]      the grader saw the submission change, or try to change, these
    needs_review = [needle, ...]   the review (grader.judge.review) flagged the track; its
                                   findings, together, hold every needle
    sandbox = [needle, ...]        the sandbox's state line ("signals: seccomp filter") says so
    performance_problem = [needle, ...]   the timing found a problem (bench = true), and the
                                   track earns no performance credit
    score_zero = true              the track scores 0 points
    repository_unchanged = true    every file of the repository is as it was before the grade
A needle list holds when the thing happened and its message holds every needle. A needle is a
substring; "^text": the message starts with text; a list of needles: any one of them.
Unless build_failed or ended is expected, the build must succeed.

A check is named as the grade reports it: "test_x" is every instance of test_x,
"test_x[cpu-torch.float32]" one instance, "test_x[cuda" the instances whose id starts so;
"{device}" is the device a Triton track's checks run on ("cuda" on a GPU, else "cpu"). A spec is
a list of needles every failed instance's message holds, or a table {each = [...], any = [...],
lacks = [...]}: `each` as the list, `any`: some failed instance holds all of these, `lacks`: no
failed instance's message holds any of these.
"""
from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from grader.common.paths import ROOT

SIGNALS = ("auto", "seccomp")
FIELDS = {"why": str, "track": str, "edits": dict, "files": dict, "expect": dict, "select": str,
          "check_timeout": int, "signals": str, "gpu": bool, "bench": bool}
REQUIRED = ("why", "track", "expect")
# expect's fields, by the shape of their value
CHECK_SPECS = ("failed", "crashed", "if_failed")         # {check = spec}
CHECK_LISTS = ("not_failed", "passed", "reported")       # [check, ...]
NEEDLES = ("build_failed", "ended", "tampering", "needs_review", "sandbox",
           "performance_problem")                        # [needle, ...]
FLAGS = ("score_zero", "repository_unchanged")           # true
EXPECT = (*CHECK_SPECS, "caught", *CHECK_LISTS, *NEEDLES, *FLAGS)
SPEC_KEYS = ("each", "any", "lacks")


class KnownBadError(ValueError):
    """A declaration that cannot be graded: the message names the file and the field."""


@dataclass(frozen=True)
class KnownBad:
    path: Path
    exercise: str             # "03_bias_relu": the exercise folder it lies in
    name: str                 # the file's stem
    why: str                  # what the submission does wrong
    track: str
    expect: dict              # what must happen (the module's docstring)
    edits: dict = field(default_factory=dict)   # file -> ((old, new), ...)
    files: dict = field(default_factory=dict)   # file -> whole content
    select: str | None = None         # a pytest -k expression of the checks to run
    check_timeout: int | None = None  # one check's limit in seconds
    signals: str | None = None        # the fence it needs: "auto" or "seccomp"
    gpu: bool = False                 # caught only on a GPU
    bench: bool = False               # caught while timing

    def checks(self) -> list[str]:
        """Every check its expectation names."""
        e = self.expect
        return [*(k for key in CHECK_SPECS for k in e.get(key, {})),
                *(k for key in CHECK_LISTS for k in e.get(key, [])),
                *e.get("caught", {}).get("checks", [])]


def load(path: Path, tracks) -> KnownBad:
    """One declaration, every field checked; `tracks`: the names of its exercise's tracks."""
    where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path

    def bad(key: str, problem: str) -> KnownBadError:
        return KnownBadError(f"{where}: {key}: {problem}")
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as e:
        raise KnownBadError(f"{where}: not valid TOML: {e}") from None
    unknown = sorted(set(data) - set(FIELDS))
    if unknown:
        raise bad(unknown[0], f"unknown field (known: {', '.join(FIELDS)})")
    for key in REQUIRED:
        if key not in data:
            raise bad(key, "missing (required)")
    for key, value in data.items():
        kind = FIELDS[key]
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise bad(key, f"expected {kind.__name__}, got {value!r}")
    if data["track"] not in tracks:
        raise bad("track", f"{data['track']!r} is not a track of {path.parent.parent.name} "
                           f"({', '.join(tracks)})")
    if not data.get("edits") and not data.get("files"):
        raise bad("edits", "say what differs from the solution: edits, files, or both")
    if data.get("check_timeout", 1) <= 0:
        raise bad("check_timeout", "seconds, > 0")
    if data.get("signals", "auto") not in SIGNALS:
        raise bad("signals", f"one of {', '.join(SIGNALS)}")
    if data.get("bench") and not data.get("gpu"):
        raise bad("bench", "the timing runs only on a GPU: add gpu = true")
    expect = _expect(data["expect"], bad)
    if "performance_problem" in expect and not data.get("bench"):
        raise bad("expect.performance_problem", "the timing finds it: needs bench = true")
    return KnownBad(
        path=path, exercise=path.parent.parent.name, name=path.stem, why=data["why"],
        track=data["track"], expect=expect,
        edits={f: tuple((old, _rooted(new)) for old, new in _edits(f, pairs, bad))
               for f, pairs in data.get("edits", {}).items()},
        files={_file_name(f, f"files.{f}", bad): _rooted(_string(text, f"files.{f}", bad))
               for f, text in data.get("files", {}).items()},
        select=data.get("select"), check_timeout=data.get("check_timeout"),
        signals=data.get("signals"), gpu=data.get("gpu", False), bench=data.get("bench", False))


def _rooted(text: str) -> str:
    return text.replace("{root}", str(ROOT))


def _edits(name: str, pairs, bad) -> list:
    _file_name(name, f"edits.{name}", bad)
    if not (isinstance(pairs, list) and pairs and all(
            isinstance(p, list) and len(p) == 2 and all(isinstance(s, str) for s in p)
            for p in pairs)):
        raise bad(f"edits.{name}", "a list of [old, new] string pairs")
    return pairs


def _file_name(name: str, key: str, bad) -> str:
    """A file of the track's folder: relative, and inside it."""
    p = PurePosixPath(name)
    if p.is_absolute() or ".." in p.parts or not p.parts:
        raise bad(key, "a path inside the track's folder (relative, without '..')")
    return name


def _string(value, key: str, bad) -> str:
    if not isinstance(value, str):
        raise bad(key, f"expected str, got {value!r}")
    return value


def _expect(expect: dict, bad) -> dict:
    if not expect:
        raise bad("expect", "empty: say what must happen")
    unknown = sorted(set(expect) - set(EXPECT))
    if unknown:
        raise bad(f"expect.{unknown[0]}", f"unknown expectation (known: {', '.join(EXPECT)})")
    for key in (k for k in CHECK_SPECS if k in expect):
        checks = expect[key]
        if not isinstance(checks, dict) or not checks:
            raise bad(f"expect.{key}", "a table {check = spec}, not empty")
        for check, spec in checks.items():
            _spec(spec, f"expect.{key}.{check}", bad)
    if "caught" in expect:
        c = expect["caught"]
        if not isinstance(c, dict) or set(c) != {"checks", "messages"} or not c["checks"] \
                or not all(isinstance(s, str) for s in c["checks"]):
            raise bad("expect.caught", "{checks = [check, ...], messages = [needle, ...]}")
        _needles(c["messages"], "expect.caught.messages", bad)
    for key in CHECK_LISTS:
        checks = expect.get(key, [])
        if not isinstance(checks, list) or not all(isinstance(s, str) for s in checks):
            raise bad(f"expect.{key}", "a list of check names")
    for key in NEEDLES:
        if key in expect:
            _needles(expect[key], f"expect.{key}", bad)
    for key in FLAGS:
        if expect.get(key, True) is not True:
            raise bad(f"expect.{key}", "write it as `true`, or leave it out")
    return expect


def _needles(needles, key: str, bad) -> None:
    if not isinstance(needles, list) or not all(
            isinstance(n, str) or (isinstance(n, list) and n and all(isinstance(s, str) for s in n))
            for n in needles):
        raise bad(key, "a list of needles (a string, or a list of strings: any one of them)")


def _spec(spec, key: str, bad) -> None:
    if isinstance(spec, dict):
        unknown = sorted(set(spec) - set(SPEC_KEYS))
        if unknown:
            raise bad(key, f"unknown spec field {unknown[0]!r} (known: {', '.join(SPEC_KEYS)})")
        for needles in spec.values():
            _needles(needles, key, bad)
    else:
        _needles(spec, key, bad)
