"""What makes a verdict fast never changes it: a track's checks run in shares give the verdicts of
one judge, a crash in one share is the track's crash, QUICK says what it leaves out, and the
specializations Triton would compile are counted by Triton's own rule."""
import dataclasses
import os
import sys
import time
import types

import torch
from hypothesis import assume, given, strategies as st

from grader.common import events as ev
from conftest import make_variant
from grader.common.discover import discover
from grader.common.events import AWAITS_FORWARD
from grader.common.known_bad import load
from grader.common.paths import ROOT
from grader.common.settings import Settings
from grader.judge import strategies
from grader.judge.strategies import in_this_share, share_of, split_by_declared_class
from grader.run import grade as grade_module, order, zygotes as zygotes_module
from grader.run.grade import Submission, grade
from grader.run.results import Phase, track_result
from grader.submission.compiles import _arg_key

EX05 = discover(only="05")[0]


def verdicts(g):
    return [(r.track, [(c.name, c.outcome) for c in r.checks], round(s.total, 2))
            for _, r, s in g.rows]


def test_shares_of_a_track_give_the_verdicts_of_one_judge(monkeypatch, tmp_path):
    """05's checks in two judges at once (as 13's run in four on a GPU: `shards`), a wrong
    kernel's failures included, against one judge: the same checks, outcomes and points. A
    wrong forward (exp in float16: test_float32_accuracy, a check one share runs) leaves every
    backward check "not checked until the forward passes" in both, though the other share's
    forward passed and it ran its backward checks."""
    shared = dataclasses.replace(EX05, tracks={"triton": dataclasses.replace(
        EX05.tracks["triton"], shards=2)})
    monkeypatch.setattr(grade_module, "driver_loaded", lambda: True)  # shares: GPU machines
    judges = []
    shares = grade_module._shares
    monkeypatch.setattr(grade_module, "_shares", lambda *a: judges.append(shares(*a)) or
                        judges[-1])
    settings = Settings(examples="fixed", select="matches_reference or awkward or view")
    # for the wrong forward: one forward check that fails (a share's), others that pass
    staged = Settings(examples="fixed", select="backward_matches_reference or (awkward and "
                      "float16) or (float32_accuracy and 700)")
    wrong = load(ROOT / "exercises/05_softmax/wrong/exp_in_float16.toml", EX05.tracks)
    bad = make_variant(tmp_path, wrong.exercise, wrong.track, wrong.edits, wrong.files)
    for tree, chosen in ((ROOT / "solutions", settings), (ROOT / "starter", settings),
                         (bad, staged)):
        one = grade(Submission(tree, (EX05,), settings=chosen, bench=False))
        two = grade(Submission(tree, (shared,), settings=chosen, bench=False))
        assert verdicts(two) == verdicts(one)
    assert [s.shard for s in judges[-1]] == [(0, 2), (1, 2)]  # two judges did check it
    checks = two.rows[0][1].checks
    assert any(c.outcome == "failed" for c in checks if "float32_accuracy" in c.name)
    staged = [c for c in checks if "backward" in c.name]
    assert staged and all(c.message == AWAITS_FORWARD for c in staged), staged


def test_a_cpu_grade_of_one_track_uses_the_idle_cores(monkeypatch):
    """Without a GPU, a track that declares `shards` (13) graded alone (`make exercise-13`)
    splits its checks over the cores the grade leaves idle, up to `shards`; a grade of more
    tracks than cores, a track that declares none, the project's own tests (fixed examples or a
    selection), QUICK and REPRO keep one judge per track."""
    monkeypatch.setattr(grade_module, "driver_loaded", lambda: False)
    monkeypatch.setattr(grade_module, "landlock_available", lambda: True)
    monkeypatch.setattr(grade_module.os, "cpu_count", lambda: 2)
    long = dataclasses.replace(EX05.tracks["triton"], shards=4)

    def shares(settings, tracks=1, track=long):
        return [s.shard for s in grade_module._shares(track, settings, tracks)]
    assert shares(Settings()) == [(0, 2), (1, 2)]
    assert shares(Settings(quick=True)) == [None]  # QUICK's few checks: one judge is sooner
    assert shares(Settings(), track=EX05.tracks["triton"]) == [None]  # shards = 1
    assert shares(Settings(), tracks=16) == [None]
    assert shares(Settings(examples="fixed")) == [None]
    assert shares(Settings(select="opcheck")) == [None]
    assert shares(Settings(repro="x")) == [None]
    monkeypatch.setattr(grade_module.os, "cpu_count", lambda: 64)
    assert len(shares(Settings())) == 4  # at most what the exercise declares
    alone = dataclasses.replace(long, shards_alone=12)
    assert len(shares(Settings(), track=alone)) == 12
    assert len(shares(Settings(), tracks=2, track=alone)) == 12  # 64 cores: 32 each, up to 12


def test_a_gpu_grade_of_one_track_takes_a_judge_per_core(monkeypatch):
    """On a GPU host a track that declares `shards` runs in that many judges in a grade of
    several tracks; graded alone (`make exercise-13`, `make watch-13`, the watch loop's
    failures-first order included), in up to `shards_alone`, one per core; QUICK in at most
    QUICK_SHARDS (its few examples do not pay for more judges' start); REPRO and a sanitizer
    as before."""
    monkeypatch.setattr(grade_module, "driver_loaded", lambda: True)
    monkeypatch.setattr(grade_module, "landlock_available", lambda: True)
    monkeypatch.setattr(grade_module.os, "cpu_count", lambda: 16)
    track = dataclasses.replace(EX05.tracks["triton"], shards=4, shards_alone=12)

    def shares(settings, tracks=1, track=track):
        return [s.shard for s in grade_module._shares(track, settings, tracks)]
    assert shares(Settings()) == [(i, 12) for i in range(12)]
    assert shares(Settings(first=("test_a",))) == [(i, 12) for i in range(12)]
    assert len(shares(Settings(), tracks=16)) == 4
    assert len(shares(Settings(quick=True))) == grade_module.QUICK_SHARDS == 2
    assert len(shares(Settings(quick=True), tracks=16)) == 2
    assert shares(Settings(quick=True), track=dataclasses.replace(track, shards=1)) == [None]
    assert shares(Settings(repro="x")) == [None]
    assert len(shares(Settings(), track=dataclasses.replace(track, shards_alone=None))) == 4
    monkeypatch.setattr(grade_module.os, "cpu_count", lambda: 6)
    assert len(shares(Settings())) == 6  # one per core, at least `shards`


def test_a_crash_in_one_share_is_the_tracks_crash():
    tests = [{"id": "t::a", "name": "a", "category": "correctness"},
             {"id": "t::b", "name": "b", "category": "correctness"}]
    fine = Phase((ev.Build(ok=True), ev.Collected(tests=tests), ev.Start(test="t::a"),
                  ev.Result(test="t::a", outcome="passed"), ev.Done()))
    died = Phase((ev.Build(ok=True), ev.Collected(tests=tests), ev.Start(test="t::a")),
                 returncode=-11)
    r = track_result("05_softmax", "triton", "t", Phase.merged([fine, died]))
    assert r.ended.startswith("crashed") and r.checks[0].outcome == "crashed"
    assert r.checks[1].outcome == "not run"
    r = track_result("05_softmax", "triton", "t", Phase.merged([fine, fine]))
    assert not r.ended and [c.outcome for c in r.checks] == ["passed", "not run"]


def test_quick_says_what_it_leaves_out(monkeypatch):
    """One example per property check, no opcheck nor torch.compile: skipped, said, and never
    counted as passed."""
    ex = discover(only="06")[0]
    g = grade(Submission(ROOT / "solutions", (ex,), ("triton",),
                         Settings(quick=True, select="opcheck or compile"), bench=False))
    r = g.rows[0][1]
    skipped = [c for c in r.checks if c.outcome == "skipped"]
    assert skipped and all("QUICK=1 leaves" in c.message for c in skipped), r.checks
    assert not [c for c in r.checks if c.outcome == "passed" and "opcheck" in c.name]


def test_quick_leaves_the_backwards_explicit_checks_out(monkeypatch):
    """QUICK: the backward's values on one example (its property check) run; gradcheck and the
    backward's other explicit checks are skipped, each saying so; the forward's all run."""
    ex = discover(only="08")[0]
    g = grade(Submission(ROOT / "solutions", (ex,), settings=Settings(
        quick=True, select="gradcheck or dw_over or backward_matches or forward_matches"),
        bench=False))
    outcome = {c.name.split("[")[0]: (c.outcome, c.message) for c in g.rows[0][1].checks}
    assert outcome["test_backward_matches_reference"][0] == "passed"
    assert outcome["test_forward_matches_reference"][0] == "passed"
    for name in ("test_gradcheck", "test_dw_over_many_rows"):
        assert outcome[name][0] == "skipped" and "QUICK=1 leaves the backward" in outcome[name][1]


def test_specializations_follow_tritons_rule():
    """An integer equal to 1 or a multiple of 16 is a specialization of its own, any other one
    shares; a tensor's dtype and its 16-byte alignment count; floats are one kind."""
    assert _arg_key(1) != _arg_key(7) == _arg_key(13) != _arg_key(32) == _arg_key(64)
    x = torch.zeros(64)
    assert _arg_key(x) == _arg_key(torch.ones(64)) != _arg_key(x[1:]) != _arg_key(x.half())
    assert _arg_key(0.5) == _arg_key(1e-6) and _arg_key(None) == "none"


def test_an_exercises_baselines_are_timed_by_its_warming_judge_before_its_tracks(monkeypatch):
    """A cold grade on a GPU: each exercise's warming judge (its compiled baselines compiled
    during the checks) is let through its gate once, right before the exercise's first timing,
    and times the baselines into the run's cache for every track of the exercise; an exercise
    without one (compiled on an earlier grade) is timed as before."""
    ex01, ex06 = discover(only="01")[0], discover(only="06")[0]
    pairs = [(ex01, ex01.tracks["triton"])] + [(ex06, t) for t in ex06.tracks.values()]
    log = []

    class FakeJudges:
        def release(self, ex, prepared):
            log.append(("baselines", ex.id, prepared))
            return Phase((ev.Warmed(seconds=7.0, timed=True, t=100.0), ev.Done()), 0, None, "")

        def time(self, ex, t, prepared=None):
            log.append(("time", ex.id, t.name))
            return Phase((ev.JudgeStarted(began=100.0, t=101.0), ev.Gate(t=110.0),
                          ev.Performance(seconds={"baselines": 0.5, "submission": 3.0},
                                         t=114.0), ev.Done(t=114.0)), 0, None, "")

    monkeypatch.setattr(grade_module, "timeable", lambda ex, phase: True)
    warmed = {"06_rmsnorm": "06's warming judge"}
    checked = {(ex.id, t.name): None for ex, t in pairs}
    timed = grade_module._time_all(FakeJudges(), pairs, checked, True, grade_module.Ahead(),
                                   lambda text: None, 0.0, warmed)
    assert log == [("time", "01_vector_add", "triton"),
                   ("baselines", "06_rmsnorm", "06's warming judge"),
                   ("time", "06_rmsnorm", "triton"), ("time", "06_rmsnorm", "cuda")]
    assert not warmed and len(timed) == 3
    # the time report: each timing from its gate (4 s, not its 14 s since the judge started);
    # the warming judge's 7 s counted with the track they were timed for (06's first), only
    times = {k: track_result(k[0], k[1], "tree", Phase(()), p).times for k, p in timed.items()}
    assert {k: t["timing"] for k, t in times.items()} == {k: 4.0 for k in timed}
    assert times[("06_rmsnorm", "triton")]["timing_parts"]["baselines"] == 7.5
    assert times[("06_rmsnorm", "cuda")]["timing_parts"]["baselines"] == 0.5


def test_a_released_judge_is_not_signalled_again(monkeypatch, tmp_path):
    """The grade cancels every warming judge at its end, those it released and waited for too:
    an ended judge's process group (its number free for another's by then) is not killed."""
    import tempfile
    import types

    from grader.run import tracks
    killed = []
    monkeypatch.setattr(tracks, "kill_judge", lambda j: killed.append(j) or
                        setattr(j.proc, "returncode", -9))  # as kill_judge's wait() leaves it
    for returncode in (0, None):
        p = object.__new__(tracks.Prepared)
        p.tmp = tempfile.TemporaryDirectory(dir=tmp_path)
        p.judge = types.SimpleNamespace(proc=types.SimpleNamespace(returncode=returncode))
        p.cancel()
        p.cancel()  # twice: harmless
    assert len(killed) == 1  # the running one, once


def test_a_warming_judge_re_times_kept_figures_in_a_grade(monkeypatch, tmp_path):
    """An exercise whose baselines compile, or which has peers (Liger's first call: 7-9 s), gets
    a warming judge in a grade with a run cache, also where an earlier grade compiled them (the
    warm marker): it re-times the kept figures at its gate, instead of each exercise's first
    timing doing it at its turn. Without a run cache it only compiles, and only once; QUICK and
    an exercise with neither get none."""
    started, ran = [], []

    class FakePrepared:
        def __init__(self, judges, ex, track, phase):
            started.append((ex.id, phase))

        def ready(self):
            return True

    class FakeJudges:
        def __init__(self, **settings):
            self.settings = Settings(**settings)

        def run(self, ex, track, phase, limit):
            ran.append((ex.id, phase))

    monkeypatch.setattr(grade_module, "Prepared", FakePrepared)
    monkeypatch.setattr(grade_module, "warm_marker", lambda ex, gpu: tmp_path)  # it exists
    ex05, ex01 = EX05, discover(only="01")[0]
    assert ex05.benchmark.peers or any(ex05.benchmark.compiles(n)
                                       for n in ex05.benchmark.baselines)
    assert grade_module._warm(FakeJudges(run_cache=str(tmp_path)), ex05, "gpu") is not None
    assert started == [("05_softmax", "warm")]
    assert grade_module._warm(FakeJudges(), ex05, "gpu") is None and not ran  # compiled before
    assert grade_module._warm(FakeJudges(run_cache=str(tmp_path), quick=True), ex05, "gpu") \
        is None
    plain = dataclasses.replace(ex01, benchmark=dataclasses.replace(
        ex01.benchmark, baselines=("eager",), peers=(), compiled=()))  # nothing to warm
    assert grade_module._warm(FakeJudges(run_cache=str(tmp_path)), plain, "gpu") is None
    assert len(started) == 1 and not ran


def test_a_timing_judge_prepares_a_first_backwards_imports():
    """What a waiting timing judge asks of the submission's process (grader.judge.phases):
    torch's module that autograd.grad's first call imports is there to import in this torch."""
    from grader.judge.proxy import Session
    ex = discover(only="01")[0]
    s = Session(ROOT / "solutions", ex, ex.tracks["triton"])
    try:
        s.loaded = s.request("load", timeout_s=300)
        assert s.loaded.get("built"), s.loaded
        assert s.request("prepare").get("ok"), "the submission's process could not import it"
    finally:
        s.close()


def test_shares_draw_disjoint_classes_that_cover_the_track(monkeypatch):
    """13's backward examples, split by class among judges (here four): each class (dtype, D,
    causal) in exactly one share, three each; one judge draws them all. A @given check under a
    share's settings draws only its own classes."""
    classes = [(d, D, c) for d in ("f32", "f16", "bf16") for D in (64, 128) for c in (0, 1)]

    def share(i, n):
        monkeypatch.setattr(strategies, "current", lambda: Settings(shard=(i, n)))
        return {k for k in classes if in_this_share(k, classes)}
    shares = [share(i, 4) for i in range(4)]
    assert [len(s) for s in shares] == [3, 3, 3, 3]
    assert set().union(*shares) == set(classes) and sum(map(len, shares)) == len(classes)
    assert share(0, 1) == set(classes)
    mine, drawn = share(2, 4), set()

    @given(key=st.sampled_from(classes))
    def draw(key):
        assume(in_this_share(key, classes))
        drawn.add(key)
    draw()
    assert drawn == mine


def test_a_declared_class_split_keeps_its_shares_classes_and_the_checks_source(monkeypatch):
    """SHARE_BY in a checks module (13's forward, by dtype and causal): in share i of n the
    check's body sees only its share's classes, with no line added to the check, so the digest
    that draws the project's fixed examples is the same; a second call wraps nothing more."""
    from hypothesis import HealthCheck, settings as hsettings
    from hypothesis.internal.reflection import function_digest
    classes = [(d, c) for d in (1, 2, 3) for c in (False, True)]
    seen = []

    @hsettings(max_examples=12, database=None, suppress_health_check=[HealthCheck.filter_too_much])
    @given(dtype=st.sampled_from([1, 2, 3]), causal=st.booleans(), seed=st.integers(0, 10**9))
    def check(dtype, causal, seed):
        seen.append((dtype, causal))
    module = types.SimpleNamespace(SHARE_BY={"check": (lambda dtype, causal, **_: (dtype, causal),
                                                       classes)})
    item = types.SimpleNamespace(obj=check, module=module)
    digest = function_digest(check.hypothesis.inner_test)
    monkeypatch.setattr(strategies, "current", lambda: Settings(shard=(1, 4)))
    assert split_by_declared_class([item], 12) == []
    assert split_by_declared_class([item], 12) == []
    assert function_digest(check.hypothesis.inner_test) == digest
    assert not hasattr(check.hypothesis.inner_test.__wrapped__, "__wrapped__")  # wrapped once
    check()
    assert seen and {classes.index(k) % 4 for k in seen} == {1}, seen
    # its part of the whole track's 12 examples: 2 of the 6 classes (1 and 5), so 4
    assert len(seen) == 4 and check._hypothesis_internal_use_settings.max_examples == 4


def test_a_judge_with_no_class_of_a_split_check_leaves_it_to_the_others(monkeypatch):
    """More judges than a check's declared classes (13's forward: 6 classes, alone in 12
    judges): the judges with none of its classes do not run it (all of its draws would be
    rejected: hypothesis would call that unsatisfiable); each of the others draws its class's
    part of the whole track's examples, so the track draws as many as in one judge."""
    from hypothesis import HealthCheck, settings as hsettings
    classes = [(d, c) for d in (1, 2, 3) for c in (False, True)]
    drawn = {}

    def make():
        @hsettings(max_examples=30, database=None,
                   suppress_health_check=[HealthCheck.filter_too_much])
        @given(dtype=st.sampled_from([1, 2, 3]), causal=st.booleans(), seed=st.integers(0, 10**9))
        def check(dtype, causal, seed):
            drawn.setdefault(i, []).append((dtype, causal))
        module = types.SimpleNamespace(
            SHARE_BY={"check": (lambda dtype, causal, **_: (dtype, causal), classes)})
        return types.SimpleNamespace(obj=check, module=module)
    for i in range(12):
        monkeypatch.setattr(strategies, "current", lambda: Settings(shard=(i, 12)))
        item = make()
        elsewhere = split_by_declared_class([item], 30)
        assert elsewhere == ([item] if i >= 6 else []), i
        if not elsewhere:
            item.obj()
    assert sorted(drawn) == list(range(6))
    assert all(len(v) == 5 and set(v) == {classes[i]} for i, v in drawn.items()), drawn


def test_a_tracks_duration_is_its_judges_own_seconds():
    """The checks start longest first, by each track's seconds last time: its judges' own, from
    the first one's start to the last event, not from the run's start (a track that waited for
    a slot would be put first next time, and the one that ran at once last)."""
    a = Phase((ev.JudgeStarted(began=100.0, t=101.0), ev.Collected(t=105.0),
               ev.Finished(t=129.0), ev.Done(t=130.0)))
    b = Phase((ev.JudgeStarted(began=102.0, t=103.0), ev.Finished(t=140.0), ev.Done(t=140.5)))
    assert a.seconds == 30.0
    assert Phase.merged([a, b]).seconds == 40.0  # shares: the first start to the last end
    assert Phase((ev.Done(t=5.0),)).seconds is None  # no judge started: the run's clock instead


def test_a_track_in_shares_reports_the_build_its_shares_waited_for():
    """Each share's process loads the track; one compiles it and the others find it built (the
    build folder's lock). The track's build is the one that compiled, whichever share reported
    last (the scorecard said "cached 0s" of 03's 21 s build on the 2-core machine); a failure
    is reported before any success."""
    def share(began, built_at, seconds, rebuilt, ok=True):
        return Phase((ev.JudgeStarted(began=began, t=began + 0.1),
                      ev.Build(ok=ok, stage="build", seconds=seconds, rebuilt=rebuilt,
                               t=built_at), ev.Done(t=built_at + 1)))
    built, waited = share(100.0, 121.0, 20.5, True), share(100.0, 121.2, 0.02, False)
    for shares in ([built, waited], [waited, built]):
        r = track_result("03_bias_relu", "cuda", "t", Phase.merged(shares))
        assert r.build["rebuilt"] is True and r.build["seconds"] == 20.5
        assert r.times["build"] == 20.5
    failed = share(100.0, 110.0, 9.0, True, ok=False)
    r = track_result("03_bias_relu", "cuda", "t", Phase.merged([built, failed]))
    assert r.build["ok"] is False


def test_the_gpu_is_named_by_the_driver_without_torch(monkeypatch):
    """The grade's process names its GPU by asking the driver's library (cuDeviceGetName), not
    torch: importing torch there for it started the warming and timing judges ~4 s late on the
    GPU hosts. Without a driver, or where it refuses, there is none."""
    from grader.common import machine

    class Driver:  # libcuda's entry points, as ctypes calls them
        def __init__(self, init=0, count=1):
            self.init, self.count = init, count

        def cuInit(self, flags):
            return self.init

        def cuDeviceGetCount(self, count):
            count._obj.value = self.count
            return 0

        def cuDeviceGet(self, device, ordinal):
            device._obj.value = ordinal
            return 0 if ordinal < self.count else 101  # CUDA_ERROR_INVALID_DEVICE

        def cuDeviceGetName(self, name, size, device):
            name.value = b"NVIDIA H200"[:size - 1]
            return 0
    monkeypatch.setattr(machine, "driver_loaded", lambda: True)
    monkeypatch.setattr(machine.ctypes, "CDLL", lambda path: Driver())
    assert machine.cuda_devices() == 1 and machine.cuda_device_name() == "NVIDIA H200"
    monkeypatch.setattr(machine.ctypes, "CDLL", lambda path: Driver(count=0))
    assert machine.cuda_device_name() is None
    monkeypatch.setattr(machine.ctypes, "CDLL", lambda path: Driver(init=100))  # no device
    assert machine.cuda_devices() == 0 and machine.cuda_device_name() is None
    monkeypatch.setattr(machine, "driver_loaded", lambda: False)
    assert machine.cuda_device_name() is None


def test_a_fresh_gpu_host_orders_the_checks_by_the_shipped_figures(monkeypatch, tmp_path):
    """Without the cache's figures, a GPU host starts the tracks by the shipped ones (a whole
    grade's, measured with `.cache` removed): the Triton tracks that compile for a minute no
    longer wait behind the quick CUDA builds. The CPU keeps the declared order; the cache's own
    figures win over the shipped ones; and the shipped file holds every track."""
    ex = {e.id: e for e in discover()}
    pairs = [(e, t) for e in ex.values() for t in e.tracks.values()]
    monkeypatch.setattr(order, "DURATIONS", tmp_path / "durations.json")  # none measured here
    key = lambda p: f"{p[0].id}/{p[1].name}"
    shipped = order.shipped()
    assert sorted(shipped) == sorted(map(key, pairs))
    on_gpu = [key(p) for p in order.longest_first(pairs, gpu=True)]
    assert on_gpu == sorted(shipped, key=lambda k: -shipped[k])
    declared = [key(p) for p in order.longest_first(pairs, gpu=False)]
    in_shares = [key(p) for p in pairs if p[1].shards > 1]
    assert declared[0] == "13_flash_attention/triton"  # in the most shares
    assert sorted(declared[:len(in_shares)]) == sorted(in_shares)
    assert declared.index("09_rmsnorm_quant/triton") > declared.index("02_scale/cuda")  # builds
    order.durations({"01_vector_add/triton": (1000.0, 1000.0)})  # measured here: first,
    assert [key(p) for p in order.longest_first(pairs, gpu=True)][0] == "01_vector_add/triton"


def test_the_next_grade_is_ordered_by_what_repeats(monkeypatch, tmp_path):
    """A fresh grade's checks took their builds and Triton compiles, which the next grade finds
    cached: the cache orders the next grade by the seconds without them (the slowest share's),
    and still ships the seconds as they were (the shipped figures order a fresh machine)."""
    def share(began, end, build=None, compiles=None):
        events = [ev.JudgeStarted(began=began, t=began)]
        if build is not None:
            events.append(ev.Build(ok=True, seconds=build[0], rebuilt=build[1], t=began + 1))
        if compiles is not None:
            events.append(ev.Compiles(specializations=9, compiled=9, seconds=compiles,
                                      t=began + 2))
        return Phase(tuple(events + [ev.Done(t=end)]))
    assert share(100, 190, compiles=60).repeat_seconds == 30
    assert share(100, 150, build=(20, True), compiles=5).repeat_seconds == 25
    assert share(100, 150, build=(20, False)).repeat_seconds == 50  # loaded: it repeats
    assert share(100, 150).repeat_seconds == 50
    monkeypatch.setattr(order, "DURATIONS", tmp_path / "durations.json")
    ex = {e.id: e for e in discover()}
    pairs = [(ex["13_flash_attention"], ex["13_flash_attention"].tracks["triton"]),
             (ex["04_reduce_sum"], ex["04_reduce_sum"].tracks["cuda"])]
    order.durations({"13_flash_attention/triton": (92.6, 24.3),
                     "04_reduce_sum/cuda": (35.0, 27.0)})
    assert [p[0].id for p in order.longest_first(pairs, gpu=True)] == \
        ["04_reduce_sum", "13_flash_attention"]
    (tmp_path / "durations.json").write_text('{"04_reduce_sum/cuda": 1.0}')  # an older cache
    assert order.durations() == {"seconds": {}, "repeat": {}}
    shipped = tmp_path / "shipped.json"
    monkeypatch.setattr(order, "SHIPPED", shipped)
    order.durations({"13_flash_attention/triton": (92.6, 24.3)})
    order.ship("a GPU", "today", "abc", "a command")
    assert order.shipped() == {"13_flash_attention/triton": 92.6}


def test_the_shares_of_one_track_fork_from_zygotes(monkeypatch):
    """A grade of two judges or more (tracks, or one track's shares: `make exercise-08`'s two)
    forks its processes from zygotes that imported torch once, instead of each importing it;
    one judge starts afresh. On a GPU host too, with zygotes that leave Triton compiling; where
    a driver is loaded but CUDA has no device, with Triton's interpreter."""
    started = []

    class Zygote:
        def forker(self):
            return "forker"

        def stop(self):
            pass
    monkeypatch.setattr(zygotes_module, "start_zygotes",  # what grade's zygote_forker starts
                        lambda *a: started.append(a) or [Zygote(), Zygote()])
    monkeypatch.setattr(grade_module, "driver_loaded", lambda: False)

    def forker(judges):
        with grade_module._forking(None, judges, Settings(), print) as f:
            return f
    assert forker(1) is None and not started
    assert forker(2) == "forker" and len(started) == 1 and started[0][1] is False
    monkeypatch.setattr(grade_module, "driver_loaded", lambda: True)
    monkeypatch.setattr(grade_module, "cuda_devices", lambda: 1)
    assert forker(4) == "forker" and len(started) == 2 and started[1][1] is True
    monkeypatch.setattr(grade_module, "cuda_devices", lambda: 0)
    assert forker(4) == "forker" and len(started) == 3 and started[2][1] is False


def test_the_heavy_checks_go_to_different_judges_each_beside_the_fewest_examples():
    """The checks that are not property checks are dealt out among a track's judges, each to
    exactly one: opcheck and the torch.compile check (13's longest, 16-28 s on an H200) first,
    to the last judges, which hold no class of a check split by fewer classes than judges, and
    the others where there is the least work so far."""
    names = ["test_forward_matches_reference", "test_awkward[S=1]", "test_gradcheck[a]",
             "test_opcheck[cuda]", "test_awkward[S=17]", "test_torch_compile_x[cuda]",
             "test_large_logits[f16]"]
    items = [types.SimpleNamespace(name=n, obj=types.SimpleNamespace(
        **({"hypothesis": 1} if n.startswith("test_forward") else {}))) for n in names]
    for n in (2, 4, 12):
        shares = [[i.name for i in share_of(items, k, n)] for k in range(n)]
        assert all(names[0] in s for s in shares)  # the property check: in every judge
        rest = sorted(x for s in shares for x in s if x != names[0])
        assert rest == sorted(names[1:])  # each other check in exactly one judge
        assert "test_opcheck[cuda]" in shares[n - 1]
        assert "test_torch_compile_x[cuda]" in shares[n - 2]
        # with 2 judges the heavy ones are each their judge's most work: the 4 others split 2, 2
        assert [x for x in shares[n - 1] if x != names[0]] == {
            2: ["test_awkward[S=1]", "test_opcheck[cuda]", "test_awkward[S=17]"],
            4: ["test_opcheck[cuda]"], 12: ["test_opcheck[cuda]"]}[n]


def test_a_kernels_key_does_not_move_with_the_lines_above_it(monkeypatch, tmp_path):
    """In the submission's process on a GPU (grader.submission.compiles): a line added above a
    Triton kernel, or above a function it calls, leaves its key as it was, so that kernel is
    not compiled again; a change of its source or of a callee's changes the key, as ever.
    Triton's own key moves with the line."""
    import importlib.util
    from triton.runtime.jit import JITFunction
    from grader.submission.compiles import keys_without_line_numbers
    owner = next(c for c in JITFunction.__mro__ if "cache_key" in vars(c))
    monkeypatch.setattr(owner, "cache_key", vars(owner)["cache_key"])  # put back afterwards
    source = ("import triton\nimport triton.language as tl\n{pad}\n@triton.jit\n"
              "def helper(x):\n    return x {op} 1\n\n\n@triton.jit\n"
              "def kernel(p):\n    tl.store(p, helper(tl.load(p)))\n")

    def key(n, pad="", op="+"):
        path = tmp_path / f"k{n}.py"
        path.write_text(source.format(pad=pad, op=op))
        spec = importlib.util.spec_from_file_location(f"k{n}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module.kernel.cache_key
    assert key(0) != key(1, pad="# a line\n")  # Triton's own rule: the line counts
    assert keys_without_line_numbers(JITFunction)
    assert key(2) == key(3, pad="# a line\n# another\n")
    assert key(4) != key(5, op="-")  # the callee's source changed
    assert keys_without_line_numbers(JITFunction)  # a second time: wrapped once
    assert not hasattr(vars(owner)["cache_key"].fget.__closure__[0].cell_contents, "without_lines")


def test_dy_for_traces_the_reference_once_per_shapes():
    """A timing asks for an incoming gradient ~26 times at one case: the reference's output
    shape is traced on fake tensors once per shapes of the arguments; each gradient is new."""
    from grader.judge.cases import dy_for
    calls = []

    class Ref:
        @staticmethod
        def reference(x, w, eps):
            calls.append(x.shape)
            return x[..., :3] * w[:3] + eps

    x, w = torch.randn(4, 5), torch.randn(5)
    first, second = dy_for(Ref, (x, w, 1e-6), None), dy_for(Ref, (x, w, 1e-6), None)
    assert first.shape == second.shape == (4, 3) and not torch.equal(first, second)
    assert len(calls) == 1
    assert dy_for(Ref, (torch.randn(2, 7), w, 1e-6), None).shape == (2, 3) and len(calls) == 2


def _fake_package(tmp_path, name, compiled):
    src = tmp_path / name / "__init__.py"
    src.parent.mkdir(parents=True)
    src.write_text("")
    if compiled:
        (src.parent / "__pycache__").mkdir()
        pyc = src.parent / "__pycache__" / f"__init__.{sys.implementation.cache_tag}.pyc"
        pyc.write_bytes(b"")
    return types.SimpleNamespace(origin=str(src))


def test_packages_without_bytecode_get_the_graders_bytecode_cache(monkeypatch, tmp_path):
    """Where torch or sympy was installed without its bytecode (uv's default), the judges and
    zygotes keep the bytecode of what they import in the grader's cache: the submission cannot
    write there under Landlock, and nothing lands in a tree. Where the packages have theirs, or
    there is no sandbox, or the user chose a prefix, no bytecode is written at all, as before."""
    from grader.common import processes
    from grader.common.paths import PYCACHE
    from grader.submission.__main__ import _writable_roots
    specs = {"torch": _fake_package(tmp_path, "torch", compiled=True),
             "sympy": _fake_package(tmp_path, "sympy", compiled=False)}
    monkeypatch.setattr(processes.importlib.util, "find_spec", specs.get)
    processes.packages_without_bytecode.cache_clear()
    try:
        assert processes.packages_without_bytecode()
        env = processes.no_bytecode_in_trees({"PYTHONDONTWRITEBYTECODE": "1"}, sandboxed=True)
        assert env == {"PYTHONPYCACHEPREFIX": str(PYCACHE)}
        assert processes.no_bytecode_in_trees({}, sandboxed=False) == \
            {"PYTHONDONTWRITEBYTECODE": "1"}
        assert processes.no_bytecode_in_trees({"PYTHONPYCACHEPREFIX": "/mine"}, True) == \
            {"PYTHONPYCACHEPREFIX": "/mine", "PYTHONDONTWRITEBYTECODE": "1"}
        specs["sympy"] = _fake_package(tmp_path / "b", "sympy", compiled=True)
        processes.packages_without_bytecode.cache_clear()
        assert not processes.packages_without_bytecode()
        assert processes.no_bytecode_in_trees({}, sandboxed=True) == \
            {"PYTHONDONTWRITEBYTECODE": "1"}
    finally:
        processes.packages_without_bytecode.cache_clear()
    args = types.SimpleNamespace(tree=str(ROOT / "solutions"), exercise="05_softmax",
                                 track="triton", scratch=str(tmp_path / "scratch"))
    assert not any(PYCACHE.resolve().is_relative_to(r.resolve()) for r in _writable_roots(args))


def test_checks_step_aside_for_the_builds_beside_them(monkeypatch, tmp_path):
    """A grade of several judges where a track builds, on a GPU host of many cores, runs its
    checking judges at a lower priority (Settings.niced), once per process however often
    asked; the timing and warming judges, which measure, keep theirs, and so does a grade with
    nothing to build, or on a machine of few cores or without a GPU (a check there could wait
    out its time limit behind the builds)."""
    import subprocess
    from grader.common.processes import NICE, child_env
    from grader.run.grade import STEP_ASIDE_CORES, _checking
    ex = {e.id: e for e in discover()}
    cuda = [(ex["02_scale"], ex["02_scale"].tracks["cuda"])]
    triton = [(ex["05_softmax"], ex["05_softmax"].tracks["triton"])]
    monkeypatch.setattr(grade_module, "driver_loaded", lambda: True)
    monkeypatch.setattr(grade_module.os, "cpu_count", lambda: 16)
    assert _checking(Settings(), cuda + triton, judges=2).niced
    assert not _checking(Settings(), triton * 2, judges=2).niced
    assert not _checking(Settings(), cuda, judges=1).niced
    assert not _checking(Settings(build="aot"), cuda + triton, judges=2).niced
    monkeypatch.setattr(grade_module.os, "cpu_count", lambda: STEP_ASIDE_CORES - 1)
    assert not _checking(Settings(), cuda + triton, judges=2).niced
    monkeypatch.setattr(grade_module.os, "cpu_count", lambda: 16)
    monkeypatch.setattr(grade_module, "driver_loaded", lambda: False)
    assert not _checking(Settings(), cuda + triton, judges=2).niced
    monkeypatch.undo()
    probe = ("import os; from grader.common.processes import step_aside; before = os.nice(0); "
             "step_aside(); step_aside(); print(os.nice(0) - before)")
    for niced, expect in ((True, NICE), (False, 0)):
        out = subprocess.run([sys.executable, "-c", probe], env=child_env(Settings(niced=niced)),
                             cwd=ROOT, capture_output=True, text=True, check=True).stdout
        assert int(out) == min(expect, 19 - os.nice(0)), out


def test_timing_judges_warm_up_only_while_no_track_is_timing(monkeypatch, tmp_path):
    """Timing judges started ahead while the checks run (a track with nothing to build at once,
    another once its checks have loaded the build) may warm up on the GPU before their gate
    (each is given a file that says so, which it takes as it begins); before the first timing
    the grade removes the files and waits for every judge that took its file until it is done
    warming (at its gate); one still warming after the wait is cancelled (its track is then
    timed by a judge started at its turn); one that had not begun (still importing) is not
    waited for and never warms; a judge started from then on, while a track times, never
    warms up."""
    import subprocess

    from grader.judge.phases import _claim
    from grader.run import tracks
    killed, started = [], {}

    class FakeJudges:
        def start(self, ex, t, phase, folder, gate=None, warm=None):
            events = folder / f"{phase}.jsonl"
            proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
            started[ex.id] = (warm, events)
            return types.SimpleNamespace(proc=proc, events=events)

    def kill(j):
        killed.append(j)
        j.proc.kill()
        j.proc.wait()
    monkeypatch.setattr(tracks, "kill_judge", kill)
    exs = [discover(only=n)[0] for n in ("01", "04", "05", "06")]
    track = lambda ex: next(iter(ex.tracks.values()))
    ahead = tracks.Ahead()
    ahead.start(FakeJudges(), [(ex, track(ex)) for ex in exs[:3]])
    # 01's Triton track has nothing to build: its judge starts with the checks; 04's CUDA track
    # once its checks have built and loaded it
    assert exs[0].id in started and exs[1].id not in started
    for ex in exs[:3]:  # their checks loaded the build: started, each allowed to warm up
        ahead.on_event(f"{ex.id} [{next(iter(ex.tracks))}]", "checks", ev.Build(ok=True))
    warms = {ex.id: started[ex.id][0] for ex in exs[:3]}
    assert all(w is not None and w.exists() for w in warms.values())
    # 01's and 04's judges begin to warm up; 01's is done (at its gate), 04's never gets there;
    # 05's is still importing
    assert _claim(warms[exs[0].id]) and _claim(warms[exs[1].id])
    ev.Recorder(started[exs[0].id][1])(ev.Ready())
    began = time.monotonic()
    ahead.quiet(timeout_s=0.5)
    assert time.monotonic() - began < 5
    assert not any(w.exists() for w in warms.values())  # taken back from 05's
    # one that took its file is asked to end its warm-up (answers.Drawn: no more input sets
    # drawn ahead); 05's never began; 04's, cancelled below, has its folder removed
    from grader.common.paths import warm_stop
    stops = {i: warm_stop(w).exists() for i, w in warms.items()}
    assert stops == {exs[0].id: True, exs[1].id: False, exs[2].id: False}
    assert not _claim(warms[exs[2].id])  # 05's judge, its imports done: no warm-up now
    assert [j.events for j in killed] == [started[exs[1].id][1]]  # the one still warming
    assert ahead.take(exs[1], track(exs[1])) is None
    kept = ahead.take(exs[2], track(exs[2]))  # not waited for, not cancelled
    assert kept is not None and kept.judge.proc.poll() is None
    kept.cancel()
    ahead.ensure([(exs[3], track(exs[3]))])  # while a track times
    assert started[exs[3].id][0] is None
    ahead.cancel()
    assert len(killed) == 4


def test_the_submission_zygote_computes_tritons_key_for_its_forks(monkeypatch):
    """Triton hashes its own sources and compiler library at a process's first compile (0.4 s on
    the GPU host): the submission's zygote does it once, where Triton compiles, so that every
    process forked from it starts with it; where Triton interprets, nothing is computed."""
    from triton.runtime.cache import triton_key

    from grader.run.preload import triton_key_once
    triton_key.cache_clear()
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    triton_key_once()
    assert triton_key.cache_info().currsize == 0
    monkeypatch.delenv("TRITON_INTERPRET")
    triton_key_once()
    assert triton_key.cache_info().currsize == 1
