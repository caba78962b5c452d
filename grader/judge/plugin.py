"""The pytest plugin that runs an exercise's checks against one track of one submission tree.

    python -m pytest -p grader.judge.plugin exercises/01_vector_add --tree solutions [--track triton]

It provides the fixtures the exercise tests use (`impl`, `device`, `exercise`, `ref`,
`assert_close`), parametrizes `device` by what the track and this machine can run (a CUDA
parameter on a machine without a GPU is skipped as "needs a GPU", never passed), poisons fresh
allocations with NaN, gives every check a timeout, and, with `--events FILE`, records each
check's start and outcome as a JSON line the moment it happens, so a crash or a hang mid-run
still leaves an account of what ran.
"""
from __future__ import annotations

import os
import re
import traceback
from functools import cache
from pathlib import Path

import pytest
import torch

from grader.judge import check
from grader.judge.cases import dy_for, fresh_seed, make_inputs
from grader.common.discover import load_exercise
from grader.common.paths import ROOT
from grader.judge.proxy import RemoteImpl, Session, SubmissionDied, sanitizer_findings
from grader.judge.reference import load_reference
from grader.run.results import Recorder
from grader.common.seam import transfer_copy, tree_map
from grader.common.settings import current
from grader.common.trust import poison_fresh_memory

HAS_GPU = torch.cuda.is_available()
NEEDS_GPU = "needs a GPU"
# Errors after which the CUDA context is unusable: stop instead of failing every later check.
STICKY = re.compile(r"illegal memory access|device-side assert|unspecified launch failure|"
                    r"misaligned address|illegal instruction|CUDA error: an? (?!out of memory)")
NOT_IMPLEMENTED = re.compile(r"not implemented yet", re.I)
record = None  # the Recorder, set in pytest_configure
SESSION = None  # the submission's process (grader.judge.proxy.Session), started once per judge
PRESTARTED = None  # that process, if the judge started it before importing torch (grader.run.launch)
PASSED = 0  # checks passed so far: a stub before any passed check is a starter
OWN_WORK = "grader::own_work"  # the check that the submission's own kernels did the work
CAPTURABLE = "grader::capturable"  # the check that one step can be captured in a CUDA graph


def pytest_addoption(parser):
    group = parser.getgroup("grader")
    group.addoption("--tree", default=str(ROOT / "starter"),
                    help="submission tree to check (shaped like starter/); default starter")
    group.addoption("--track", default=None, help="which track (default: the exercise's first)")
    group.addoption("--events", default=None, help="append one JSON line per event here")


def pytest_configure(config):
    for line in ("tracks(*names): run this check only for these tracks",
                 "gradcheck: a torch.autograd.gradcheck check (scored apart)"):
        config.addinivalue_line("markers", line)
    global record
    record = Recorder(config.getoption("--events"))
    poison_fresh_memory()  # an unwritten element reads NaN
    from hypothesis import HealthCheck, Phase, settings
    # database=None: no example database. A verdict must not depend on what earlier grades (of
    # other submissions, in the same folder) failed on; a failure is rerun by its REPRO blob.
    common = dict(deadline=None, print_blob=True, database=None,
                  suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                         HealthCheck.differing_executors])
    settings.register_profile("grader-gpu", max_examples=30, **common)
    # On the CPU (Triton's interpreter), shrinking a failure can take minutes: report the
    # failing example as found, with its seed, instead.
    no_shrink = [Phase.explicit, Phase.reuse, Phase.generate]
    settings.register_profile("grader-cpu", max_examples=12, phases=no_shrink, **common)
    # CI: the same examples every run, so a red CI is a real bug and never noise
    settings.register_profile("grader-ci", max_examples=6, derandomize=True,
                              phases=no_shrink, **common)
    # QUICK=1 (make exercise-NN QUICK=1): a few examples per property check, for the edit loop
    settings.register_profile("grader-quick", max_examples=3, phases=no_shrink, **common)
    settings.load_profile("grader-ci" if os.environ.get("CI") else
                          "grader-quick" if current().quick else
                          "grader-gpu" if HAS_GPU else "grader-cpu")


@cache
def _exercise(folder: str):
    return load_exercise(Path(folder))


def _track(config, exercise):
    name = config.getoption("--track") or next(iter(exercise.tracks))
    if name not in exercise.tracks:
        raise pytest.UsageError(f"{exercise.id} has no track {name!r} "
                                f"(tracks: {', '.join(exercise.tracks)})")
    return exercise.tracks[name]


def _devices(track):
    if not track.sources:  # a Python (Triton) track: on the interpreter when there is no GPU
        return ["cuda" if HAS_GPU else "cpu"]
    devices = [pytest.param("cuda", marks=() if HAS_GPU else pytest.mark.skip(reason=NEEDS_GPU))]
    return devices + (["cpu"] if track.cpu else [])


def pytest_generate_tests(metafunc):
    if "device" in metafunc.fixturenames:
        exercise = _exercise(str(metafunc.definition.path.parent))
        metafunc.parametrize("device", _devices(_track(metafunc.config, exercise)))


def pytest_collection_modifyitems(config, items):
    keep, drop = [], []
    for item in items:
        exercise = _exercise(str(item.path.parent))
        track = _track(config, exercise)
        only = item.get_closest_marker("tracks")
        (drop if only and track.name not in only.args else keep).append(item)
        if item.get_closest_marker("timeout") is None:
            # a backstop: the proxy stops waiting for the submission at the check's limit first
            item.add_marker(pytest.mark.timeout(check_limit(exercise) + 60, method="thread"))
    if current().first:  # the watch loop: what failed last time first, then the rest, in order
        first = set(current().first)
        for k, item in enumerate(keep):
            item.grader_order = k  # the scorecard keeps the exercise's order (collection_finish)
        keep.sort(key=lambda i: _short(i.nodeid) not in first)
    if current().repro:
        chosen = _repro(keep)
        drop += [i for i in keep if i not in chosen]
        keep = chosen
    if drop:
        config.hook.pytest_deselected(items=drop)
    items[:] = keep


def check_limit(exercise) -> int:
    return int(current().check_timeout or exercise.test_timeout_s)


def _category(item) -> str:
    return "gradcheck" if item.get_closest_marker("gradcheck") else "correctness"


def pytest_collection_finish(session):
    tests = [{"id": i.nodeid, "name": _short(i.nodeid), "category": _category(i)}
             for i in sorted(session.items, key=lambda i: getattr(i, "grader_order", 0))]
    if tests:
        tests.append({"id": OWN_WORK, "name": "your kernels do the work", "category": "correctness"})
        if _capture_probe_applies(session.config, session.items):
            tests.append({"id": CAPTURABLE, "name": "capturable in a CUDA graph",
                          "category": "correctness"})
    record(event="collected", tests=tests)


def _capture_probe_applies(config, items) -> bool:
    """On a GPU, for an exercise with a benchmark, in a full grade (not REPRO, not a selection of
    the project's own tests)."""
    if not HAS_GPU or current().repro or current().select or not items:
        return False
    return _exercise(str(items[0].path.parent)).benchmark is not None


def _short(nodeid: str) -> str:
    return nodeid.split("::", 1)[-1]


def pytest_runtest_logstart(nodeid, location):
    check.note_call(())  # a strided input of the previous check explains nothing here
    record(event="start", test=nodeid)


# --- hypothesis' report, for a learner who does not own the tests -----------------------------

_BLOB = re.compile(r"@reproduce_failure\('([^']+)', b'([^']+)'\)")
_DRAW = re.compile(r"^Draw \d+(?: \((.*?)\))?: (.*)$")
_ARG = re.compile(r"^    (\w+)=(.*?),?$")  # a top-level argument; nested values are indented more


def _hypothesis(notes: list[str], item) -> tuple[str, str, list[str]]:
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
    number = _exercise(str(item.path.parent)).number
    return f"make exercise-{number} {which}REPRO='{_short(item.nodeid)}@{blob}'"


def _repro(items) -> list:
    """REPRO=check@blob (make exercise-NN REPRO=...): only that check, on that one example."""
    name, _, blob = current().repro.partition("@")
    chosen = [i for i in items if _short(i.nodeid) == name]
    if not chosen:
        reason = (f"REPRO: no check named {name!r} here; the checks are: "
                  f"{', '.join(_short(i.nodeid) for i in items)}")
        record(event="ended", reason=reason)
        raise pytest.UsageError(reason)
    import hypothesis
    for item in chosen:
        if hasattr(item.obj, "hypothesis"):  # a property check: that example, not new ones
            item.obj = hypothesis.reproduce_failure(hypothesis.__version__, blob)(item.obj)
    return chosen


def _explain(exc: BaseException, item) -> dict:
    tree = Path(item.config.getoption("--tree")).resolve()
    frames = [f for f in traceback.extract_tb(exc.__traceback__)
              if Path(f.filename).resolve().is_relative_to(tree)]
    if isinstance(exc, SubmissionDied):
        return {"type": "crashed", "message": exc.reason, "notes": [], "crashed": True,
                "not_implemented": False, "sticky": False}
    message = str(exc) if not isinstance(exc, AssertionError) or str(exc) else "assertion failed"
    example, blob, notes = _hypothesis([n for n in getattr(exc, "__notes__", []) if n.strip()],
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
    hint = _exercise(str(item.path.parent)).hints.get(item.originalname)
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


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if call.excinfo is not None and report.failed:
        report.grader = _explain(call.excinfo.value, item)
        if report.grader.get("not_implemented") and SESSION is not None:
            SESSION.stub_seen = True
        if report.grader.get("not_implemented") and not PASSED and not current().select \
                and not current().repro:
            # a starter: nothing is written yet, so every other check would say the same
            item.session.shouldstop = "not implemented yet (the other checks were not run)"
        elif report.grader.get("crashed"):
            item.session.shouldstop = report.grader["message"]
        elif report.grader["sticky"]:
            item.session.shouldstop = ("the CUDA context broke (" +
                                       report.grader["message"].splitlines()[0] +
                                       "); later checks would all fail, so none were run")


def pytest_runtest_logreport(report):
    global PASSED
    if not (report.when == "call" or report.failed or (report.skipped and report.when == "setup")):
        return
    PASSED += report.when == "call" and report.passed
    event = {"event": "result", "test": report.nodeid, "outcome": report.outcome,
             "seconds": round(report.duration, 3)}
    if report.skipped:
        event["reason"] = report.longrepr[2] if isinstance(report.longrepr, tuple) else ""
        event["reason"] = event["reason"].removeprefix("Skipped: ")
    if report.failed:
        event.update(getattr(report, "grader", {"type": "error", "message": str(report.longrepr)[-2000:]}))
        event["phase"] = report.when
    record(**event)


def pytest_sessionfinish(session, exitstatus):
    stop = session.shouldstop
    if SESSION is not None:
        if _capture_probe_applies(session.config, session.items):
            _record_capturable(SESSION)
        _record_trust(SESSION)
    record(event="finished", stopped=stop if isinstance(stop, str) else None)


def _record_capturable(s) -> None:
    """Training and serving stacks capture their steps in CUDA graphs (vLLM, torch.compile's
    reduce-overhead), so a custom op must be capturable: one step at the benchmark case (forward
    and backward where the exercise has both) is captured and replayed in the submission's
    process. A host synchronization, .item(), a copy to the CPU, an allocation outside PyTorch's
    allocator or work on another stream fails it, with the reason and the line."""
    import torch
    b = s.exercise.benchmark
    if s.dead is not None or not s.ok_calls:
        record(event="result", test=CAPTURABLE, outcome="failed", type="NotRun",
               message="no call of the op completed: nothing to capture",
               not_implemented=s.stub_seen)
        return
    mode = "forward_backward" if "forward_backward" in b.modes else "forward"
    ref = load_reference(s.exercise)
    args = make_inputs(s.exercise, ref, b.case, fresh_seed())
    dy = dy_for(ref, args, s.exercise) if mode == "forward_backward" else None
    share = lambda v: tree_map(lambda t: transfer_copy(t) if isinstance(t, torch.Tensor) else t, v)
    try:
        reply = s.request("capture", entry=b.call, args=share(args), mode=mode,
                          grad_args=list(b.grad_args), dy=share(dy) if dy is not None else None)
    except SubmissionDied as e:
        record(event="result", test=CAPTURABLE, outcome="failed", crashed=True, message=e.reason)
        return
    if not reply.get("ok") or not reply.get("capturable"):
        err = reply.get("error") or {}
        where = err.get("where", "")
        record(event="result", test=CAPTURABLE, outcome="failed", type="NotCapturable",
               where=where, message=(
                   f"one {mode.replace('_', '+')} step at the benchmark case could not be "
                   f"captured in a CUDA graph: {err.get('type')}: "
                   f"{str(err.get('message', '')).splitlines()[0][:400] if err.get('message') else ''}"
                   f"\nWhat breaks a capture: a host synchronization (torch.cuda.synchronize, "
                   f".item(), .cpu(), printing a tensor), an allocation outside PyTorch's "
                   f"allocator (cudaMalloc), work launched on another stream than the current "
                   f"one. The op is timed by events instead (its figure says so)."))
        return
    record(event="result", test=CAPTURABLE, outcome="passed")


def _record_trust(s) -> None:
    """The check that the submission's own kernels did the work, and what it tried to write."""
    if s.dead is not None:
        record(event="ended", reason=s.dead.reason, log=s.dead.log[-20000:])
    if s.violations:
        record(event="result", test=OWN_WORK, outcome="failed", type="Delegation",
               message="\n".join(s.violations), notes=[])
    elif s.ok_calls:
        record(event="result", test=OWN_WORK, outcome="passed")
    elif not HAS_GPU and not s.stub_seen:
        record(event="result", test=OWN_WORK, outcome="skipped",
               reason="needs a GPU: no call of the op ran here, so there is nothing to judge")
    else:
        record(event="result", test=OWN_WORK, outcome="failed", type="NotRun",
               message="no call of the op completed: nothing to judge",
               not_implemented=s.stub_seen)
    if s.attempts:
        record(event="tampering", paths=s.attempts)
    if s.sanitizer is not None:
        s.close()
        log = s.log_path.read_text(errors="replace") if s.log_path.exists() else ""
        record(event="sanitizer", tool=current().sanitize,
               unavailable=s.sanitizer if isinstance(s.sanitizer, str) else None,
               findings=sanitizer_findings(log))


# --- fixtures ----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def exercise(request):
    return _exercise(str(request.path.parent))


@pytest.fixture(scope="module")
def track(request, exercise):
    return _track(request.config, exercise)


def open_session(tree: Path, exercise, track):
    """Start the submission's process and build/import the track there (once per judge)."""
    global SESSION
    if SESSION is None:
        SESSION = Session(tree, exercise, track, timeout_s=check_limit(exercise),
                          started=PRESTARTED)
        SESSION.loaded = SESSION.request("load", timeout_s=exercise.timeout_s)
    return SESSION


@pytest.fixture(scope="module")
def impl(request, exercise, track):
    """The submission's entry points: a proxy whose calls run in the submission's process."""
    try:
        s = open_session(Path(request.config.getoption("--tree")), exercise, track)
    except SubmissionDied as e:
        pytest.fail(e.reason, pytrace=False)
    if not s.loaded.get("built"):
        err = s.loaded.get("error") or {}
        pytest.fail(s.loaded.get("message") or f"loading the track failed: {err.get('type')}: "
                    f"{err.get('message')}", pytrace=False)
    return RemoteImpl(s)


@pytest.fixture(scope="module")
def ref(exercise):
    """The exercise's reference.py, imported."""
    return load_reference(exercise)


@pytest.fixture(scope="module")
def assert_close(exercise):
    """check.assert_close with this exercise's tolerance for the output dtype."""
    def close(got, expected, *, dtype, **ctx):
        name = str(dtype).removeprefix("torch.")
        return check.assert_close(got, expected, tol=exercise.tolerance[name], dtype=dtype, **ctx)
    return close
