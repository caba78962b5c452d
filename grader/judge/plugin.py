"""The pytest plugin that runs an exercise's checks against one track of one submission tree.

    python -m pytest -p grader.judge.plugin exercises/01_vector_add --tree solutions [--track triton]

It provides the fixtures the exercise tests use (`impl`, `device`, `exercise`, `ref`,
`assert_close`), parametrizes `device` by what the track and this machine can run (a CUDA
parameter on a machine without a GPU is skipped as "needs a GPU", never passed), poisons fresh
allocations with NaN, gives every check a timeout, and records each check's start and outcome as
an event (grader.common.events) the moment it happens, so a crash or a hang mid-run still leaves
an account of what ran.

What one run of the checks knows (its event log, the submission's process, the checks passed so
far) lives in one `Grader` object registered with pytest: the judge makes it and passes it to
`pytest.main(..., plugins=[grader])`; run by hand, this module's `pytest_configure` makes one.
"""
from __future__ import annotations

import functools
import time
import types
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, Phase
from hypothesis import settings as hypothesis_settings

from grader.common import events as ev
from grader.common.paths import ROOT
from grader.common.poison import poison_fresh_memory
from grader.common.reference import load_reference
from grader.common.seam import transfer_copy, tree_map
from grader.common.settings import current
from grader.judge import check
from grader.judge.cases import dy_for, fresh_seed, make_inputs
from grader.judge.explain import exercise_of, explain, repro_items, short
from grader.judge.oom import retried_when_out_of_memory
from grader.judge.proxy import (RemoteImpl, Session, SubmissionDied, record_compiles,
                                sanitizer_findings)
from grader.judge.spawn import Spawner
from grader.judge.strategies import is_property, share_of, split_by_declared_class

HAS_GPU = torch.cuda.is_available()
NEEDS_GPU = "needs a GPU"
OWN_WORK = "grader::own_work"  # the check that the submission's own kernels did the work
CAPTURABLE = "grader::capturable"  # the check that one step can be captured in a CUDA graph
WHOLE = 30  # each property check's examples in one judge (set by _load_profile, before a share's
#             cut): a check whose examples are split by class gives each class its part of them
# QUICK=1, the edit loop: the forward's checks, every property check at one example (the
# backward's values included), and none of the backward's other checks (gradcheck, the long
# sums, the memory kept): most of a CPU grade's seconds, left to the full grade, and said
QUICK_LEAVES = ("QUICK=1 leaves the backward's explicit checks out (its values are checked on "
                "one example by the property checks): run without QUICK for them")


# --- what does not depend on one run's state: options, profiles, parameters, fixtures ----------

def pytest_addoption(parser):
    group = parser.getgroup("grader")
    group.addoption("--tree", default=str(ROOT / "starter"),
                    help="submission tree to check (shaped like starter/); default starter")
    group.addoption("--track", default=None, help="which track (default: the exercise's first)")
    group.addoption("--events", default=None, help="append one JSON line per event here")


def pytest_configure(config):
    for line in ("tracks(*names): run this check only for these tracks",
                 "gradcheck: a torch.autograd.gradcheck check (scored apart; needs the backward)",
                 "backward: the check needs the backward: it runs after the forward checks, "
                 "and only while they pass"):
        config.addinivalue_line("markers", line)
    poison_fresh_memory()  # an unwritten element reads NaN
    _load_profile()
    if not any(isinstance(p, Grader) for p in config.pluginmanager.get_plugins()):
        config.pluginmanager.register(Grader(config.getoption("--events")), "grader")


def _load_profile() -> None:
    """Hypothesis' examples for this grade, chosen by the grade's settings alone (never by the
    environment a grade happens to run in: GitHub Classroom and most CI systems set CI=true)."""
    # database=None: no example database. A verdict must not depend on what earlier grades (of
    # other submissions, in the same folder) failed on; a failure is rerun by its REPRO blob.
    # filter_too_much: in a share of a track's checks (strategies.in_this_share) most drawn
    # classes belong to the other shares, by design
    common = dict(deadline=None, print_blob=True, database=None,
                  suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                         HealthCheck.differing_executors,
                                         HealthCheck.filter_too_much])
    # On the CPU (Triton's interpreter), shrinking a failure can take minutes: report the
    # failing example as found, with its seed, instead.
    no_shrink = [Phase.explicit, Phase.reuse, Phase.generate]
    profiles = {
        "gpu": dict(max_examples=30),
        "cpu": dict(max_examples=12, phases=no_shrink),
        # QUICK=1 (make exercise-NN QUICK=1), the edit loop: one example per property check,
        # the explicit ones (@example: the tails, masks and sizes) as ever
        "quick": dict(max_examples=1, phases=no_shrink),
        # the project's own tests (Settings.examples = "fixed"): the same examples every run, so
        # a red test is a real change and never noise
        "fixed": dict(max_examples=6, derandomize=True, phases=no_shrink),
    }
    chosen = (current().examples or ("quick" if current().quick else
                                     "gpu" if HAS_GPU else "cpu"))
    global WHOLE
    WHOLE = profiles[chosen]["max_examples"]
    if current().shard:  # a share of the track's checks: its share of the examples
        kw = profiles[chosen]
        kw["max_examples"] = -(-kw["max_examples"] // current().shard[1])
    for name, kw in profiles.items():
        hypothesis_settings.register_profile(f"grader-{name}", **kw, **common)
    hypothesis_settings.load_profile(f"grader-{chosen}")


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
        exercise = exercise_of(str(metafunc.definition.path.parent))
        metafunc.parametrize("device", _devices(_track(metafunc.config, exercise)))


def _category(item) -> str:
    return "gradcheck" if item.get_closest_marker("gradcheck") else "correctness"


def _backward(item) -> bool:
    """A check of the backward stage (see events.AWAITS_FORWARD)."""
    return bool(item.get_closest_marker("backward") or item.get_closest_marker("gradcheck"))


def _capture_probe_applies(items) -> bool:
    """On a GPU, for an exercise with a benchmark, in a full grade (not REPRO, not a selection of
    the project's own tests), in the first share of a track's checks."""
    if not HAS_GPU or current().repro or current().select or not items:
        return False
    if current().shard and current().shard[0] != 0:
        return False
    return exercise_of(str(items[0].path.parent)).benchmark is not None


@pytest.fixture(scope="module")
def exercise(request):
    return exercise_of(str(request.path.parent))


@pytest.fixture(scope="module")
def track(request, exercise):
    return _track(request.config, exercise)


@pytest.fixture(scope="module")
def assert_close(exercise):
    """check.assert_close with this exercise's tolerance for the output dtype."""
    def close(got, expected, *, dtype, **ctx):
        name = str(dtype).removeprefix("torch.")
        return check.assert_close(got, expected, tol=exercise.tolerance[name], dtype=dtype, **ctx)
    return close


class _Timed:
    """A module whose functions count their calls and seconds into `into` ([calls, seconds]);
    everything else is the module's own."""

    def __init__(self, module, into: list):
        self._module, self._into = module, into

    def __getattr__(self, name):
        value = getattr(self._module, name)
        if not isinstance(value, types.FunctionType):
            return value
        into = self._into

        @functools.wraps(value)
        def timed(*args, **kwargs):
            began = time.perf_counter()
            try:
                return value(*args, **kwargs)
            finally:
                into[0] += 1
                into[1] += time.perf_counter() - began
        return timed


# --- one run of the checks ---------------------------------------------------------------------

class Grader:
    """One run of an exercise's checks: its event log, the submission's process (started once,
    or adopted from the judge, which starts it before importing torch), the checks passed so
    far (a stub before any passed check is a starter)."""

    def __init__(self, events=None, spawner: Spawner = Spawner(), prestarted=None):
        self.record = ev.Recorder(events)
        self.spawner = spawner
        self.prestarted = prestarted
        self.session: Session | None = None
        self.passed = 0
        self.awaits: str | None = None  # why the backward stage's checks are not run, once known
        self.references = [0, 0.0]  # calls of the exercise's reference, and their seconds

    @pytest.fixture(scope="module")
    def ref(self, exercise):
        """The exercise's reference.py, its functions timed (where a grade's seconds go)."""
        return _Timed(load_reference(exercise), self.references)

    def open_session(self, tree: Path, exercise, track) -> Session:
        """Start the submission's process and build/import the track there (once)."""
        if self.session is None:
            self.session = Session(tree, exercise, track,
                                   timeout_s=current().check_limit(exercise),
                                   started=self.prestarted, spawner=self.spawner)
            self.session.loaded = self.session.request("load", timeout_s=exercise.timeout_s)
        return self.session

    @pytest.fixture(scope="module")
    def impl(self, request, exercise, track):
        """The submission's entry points: a proxy whose calls run in the submission's process."""
        try:
            s = self.open_session(Path(request.config.getoption("--tree")), exercise, track)
        except SubmissionDied as e:
            pytest.fail(e.reason, pytrace=False)
        if not s.loaded.get("built"):
            err = s.loaded.get("error") or {}
            pytest.fail(s.loaded.get("message") or f"loading the track failed: "
                        f"{err.get('type')}: {err.get('message')}", pytrace=False)
        return RemoteImpl(s)

    def pytest_collection_modifyitems(self, config, items):
        keep, drop = [], []
        for item in items:
            exercise = exercise_of(str(item.path.parent))
            only = item.get_closest_marker("tracks")
            (drop if only and _track(config, exercise).name not in only.args else keep).append(item)
            retried_when_out_of_memory(item, HAS_GPU)  # the GPU is shared with other tracks
            if item.get_closest_marker("timeout") is None:
                # a backstop: the proxy stops waiting for the submission at the check's limit
                item.add_marker(pytest.mark.timeout(current().check_limit(exercise) + 60,
                                                    method="thread"))
        keep.sort(key=_backward)  # the forward stage first (stable: the exercise's order in each)
        for k, item in enumerate(keep):
            item.grader_order = k  # the scorecard keeps that order (shares too)
        if current().first:  # the watch loop: what failed last time first, then the rest
            first = set(current().first)
            keep.sort(key=lambda i: (_backward(i), short(i.nodeid) not in first))
        if current().quick and not current().repro:
            for item in keep:
                if _backward(item) and not is_property(item):
                    item.add_marker(pytest.mark.skip(reason=QUICK_LEAVES))
        if current().repro:
            chosen = repro_items(keep, self.record)
            drop += [i for i in keep if i not in chosen]
            keep = chosen
        if current().shard:
            elsewhere = split_by_declared_class(keep, WHOLE)
            mine = [i for i in share_of(keep, *current().shard) if i not in elsewhere]
            drop += [i for i in keep if i not in mine]
            keep = mine
        if drop:
            config.hook.pytest_deselected(items=drop)
        items[:] = keep

    def pytest_collection_finish(self, session):
        tests = [{"id": i.nodeid, "name": short(i.nodeid), "category": _category(i),
                  "order": i.grader_order, "backward": _backward(i)}
                 for i in sorted(session.items, key=lambda i: i.grader_order)]
        if tests and not current().repro:  # REPRO runs one check: it reports that one only
            tests.append({"id": OWN_WORK, "name": "your kernels do the work",
                          "category": "correctness", "order": 1 << 20})
            if _capture_probe_applies(session.items):
                tests.append({"id": CAPTURABLE, "name": "capturable in a CUDA graph",
                              "category": "correctness", "order": 1 << 21})
        self.record(ev.Collected(tests=tests, share=list(current().shard or ()) or None))

    def pytest_runtest_logstart(self, nodeid, location):
        self.record(ev.Start(test=nodeid))

    def pytest_runtest_setup(self, item):
        if self.awaits and _backward(item):
            pytest.skip(self.awaits)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item, call):
        outcome = yield
        report = outcome.get_result()
        if call.excinfo is None or not report.failed:
            return
        report.grader = info = explain(call.excinfo.value, item)
        # the backward stage waits: for the forward, or (grader.judge.testing.value_and_grads)
        # for a backward that writes nothing
        self.awaits = self.awaits or getattr(call.excinfo.value, "grader_blocks_backward", None) \
            or (ev.AWAITS_FORWARD if not _backward(item) else None)
        if info.get("not_implemented") and self.session is not None:
            self.session.stub_seen = True
        if info.get("not_implemented") and not self.passed and not current().select \
                and not current().repro:
            # a starter: nothing is written yet, so every other check would say the same
            item.session.shouldstop = "not implemented yet (the other checks were not run)"
        elif info.get("crashed"):
            item.session.shouldstop = info["message"]
        elif info["sticky"]:
            item.session.shouldstop = ("the CUDA context broke (" +
                                       info["message"].splitlines()[0] +
                                       "); later checks would all fail, so none were run")

    def pytest_runtest_logreport(self, report):
        if not (report.when == "call" or report.failed
                or (report.skipped and report.when == "setup")):
            return
        self.passed += report.when == "call" and report.passed
        event = ev.Result(test=report.nodeid, outcome=report.outcome,
                          seconds=round(report.duration, 3))
        if report.skipped:
            reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else ""
            event.reason = reason.removeprefix("Skipped: ")
        if report.failed:
            info = getattr(report, "grader", None) or {
                "type": "error", "message": str(report.longrepr)[-2000:]}
            for k, v in info.items():
                setattr(event, k, v)
            event.phase = report.when
        self.record(event)

    def pytest_sessionfinish(self, session, exitstatus):
        stop = session.shouldstop
        if self.session is not None and not current().repro:
            if _capture_probe_applies(session.items):
                self._record_capturable(self.session)
            self._record_trust(self.session)
        elif self.session is not None:  # REPRO: the one check, and what the process did
            self._record_process(self.session)
        if self.references[0]:
            self.record(ev.References(calls=self.references[0],
                                      seconds=round(self.references[1], 2)))
        self.record(ev.Finished(stopped=stop if isinstance(stop, str) else None))

    def _fail(self, test: str, **kw) -> None:
        self.record(ev.Result(test=test, outcome="failed", **kw))

    def _record_capturable(self, s) -> None:
        """Training and serving stacks capture their steps in CUDA graphs (vLLM,
        torch.compile's reduce-overhead), so a custom op must be capturable: one step at the
        benchmark case (forward and backward where the exercise has both) is captured and
        replayed in the submission's process. A host synchronization, .item(), a copy to the
        CPU, an allocation outside PyTorch's allocator or work on another stream fails it, with
        the reason and the line."""
        b = s.exercise.benchmark
        if s.dead is not None or not s.ok_calls:
            self._fail(CAPTURABLE, type="NotRun", not_implemented=s.stub_seen,
                       message="no call of the op completed: nothing to capture")
            return
        mode = "forward_backward" if "forward_backward" in b.modes else "forward"
        ref = load_reference(s.exercise)
        args = make_inputs(s.exercise, ref, b.case, fresh_seed())
        dy = dy_for(ref, args, s.exercise) if mode == "forward_backward" else None
        share = lambda v: tree_map(lambda t: transfer_copy(t) if isinstance(t, torch.Tensor)
                                   else t, v)
        try:
            reply = s.request("capture", entry=b.call, args=share(args), mode=mode,
                              grad_args=list(b.grad_args),
                              dy=share(dy) if dy is not None else None)
        except SubmissionDied as e:
            self._fail(CAPTURABLE, crashed=True, message=e.reason)
            return
        if not reply.get("ok") or not reply.get("capturable"):
            err = reply.get("error") or {}
            first = str(err.get("message", "")).splitlines()[0][:400] if err.get("message") \
                else ""
            self._fail(CAPTURABLE, type="NotCapturable", where=err.get("where", ""), message=(
                f"one {mode.replace('_', '+')} step at the benchmark case could not be "
                f"captured in a CUDA graph: {err.get('type')}: {first}"
                f"\nWhat breaks a capture: a host synchronization (torch.cuda.synchronize, "
                f".item(), .cpu(), printing a tensor), an allocation outside PyTorch's "
                f"allocator (cudaMalloc), work launched on another stream than the current "
                f"one. The op is timed by events instead (its figure says so)."))
            return
        self.record(ev.Result(test=CAPTURABLE, outcome="passed"))

    def _record_trust(self, s) -> None:
        """The check that the submission's own kernels did the work, then what the process
        did."""
        if s.violations:
            self._fail(OWN_WORK, type="Delegation", message="\n".join(s.violations))
        elif s.ok_calls:
            self.record(ev.Result(test=OWN_WORK, outcome="passed"))
        elif not HAS_GPU and not s.stub_seen:
            self.record(ev.Result(test=OWN_WORK, outcome="skipped", reason="needs a GPU: no "
                                  "call of the op ran here, so there is nothing to judge"))
        else:
            self._fail(OWN_WORK, type="NotRun", not_implemented=s.stub_seen,
                       message="no call of the op completed: nothing to judge")
        self._record_process(s)

    def _record_process(self, s) -> None:
        """How the submission's process ended, what it tried to write, its sanitizer report,
        the Triton specializations it compiled."""
        if s.dead is not None:
            self.record(ev.Ended(reason=s.dead.reason, log=s.dead.log[-20000:]))
        else:
            record_compiles(s, self.record)
        if s.attempts:
            self.record(ev.Tampering(paths=list(s.attempts)))
        if s.sanitizer is not None:
            s.close()
            log = s.log_path.read_text(errors="replace") if s.log_path.exists() else ""
            self.record(ev.Sanitizer(
                tool=current().sanitize, findings=sanitizer_findings(log),
                unavailable=s.sanitizer if isinstance(s.sanitizer, str) else None))
