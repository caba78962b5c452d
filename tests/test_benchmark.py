"""Timing arithmetic, the judge's guards on a timing, credit, and the bench report (CPU-only)."""
import json

import pytest

from grader.common.discover import discover
from grader.judge.measure import escaped, figures_for
from grader.tools.benchdoc import bench_markdown, bench_plot
from grader.run.score import performance_credit
from grader.common.ceilings import CEILINGS, rate
from grader.common.timing import stats
from grader.judge.ceilings import MEASURE, ceiling_cache_path


def test_rate_counts_bytes_or_flops():
    assert rate({"bytes": 4e9}, 1.0, "bandwidth") == pytest.approx(4000.0)       # GB/s
    assert rate({"flops": 2 * 8192 ** 3}, 1.5, "matmul_bf16") == pytest.approx(733.0, rel=1e-3)


def test_every_ceiling_is_declared_once():
    for name, c in CEILINGS.items():
        assert c.unit in ("GB/s", "TFLOP/s") and c.counts in ("bytes", "flops") and c.how
    for ex in discover():
        if ex.benchmark:
            assert ex.benchmark.ceiling in CEILINGS
    assert set(MEASURE) == set(CEILINGS)  # and each is measured by the judge


def test_stats_keeps_median_and_spread():
    assert stats([1.0, 2.0, 3.0]) == {"ms": 2.0, "p20": 1.0, "p80": 3.0}


@pytest.mark.parametrize("event_ms, wall_ms, out", [
    (1.0, 1.02, False),   # launch overhead, nothing escaped
    (1.0, 2.0, True),     # half the work ran on a side stream after the end event
    (0.01, 0.05, False),  # tiny kernels are launch-bound: slack, not a verdict
])
def test_escape_guard(event_ms, wall_ms, out):
    assert escaped(event_ms, wall_ms) is out


def test_replays_are_held_closer_than_eager_calls():
    # a replayed graph's back-to-back wall clock is its GPU time: 25% over is not believed;
    # eager calls (not capturable) carry their launch and host time, so they get more room
    assert escaped(1.0, 1.25, "graph") and not escaped(1.0, 1.25, "events")


class _FakeCuda:
    """torch.cuda as host_ms sees it: the sleeps asked for, and an event that says the GPU
    woke before the calls were enqueued `woke` times, then that it slept through them."""

    def __init__(self, woke: int):
        self.sleeps, self.woke = [], woke
        fake = self

        class Event:
            def record(self):
                pass

            def query(self):
                fake.woke -= 1
                return fake.woke >= 0
        self.Event = Event

    def _sleep(self, cycles):
        self.sleeps.append(cycles)

    def synchronize(self):
        pass


@pytest.mark.parametrize("woke", [0, 1, 3])
def test_host_time_sleeps_only_as_long_as_its_enqueues_and_again_if_the_gpu_woke(monkeypatch,
                                                                                woke):
    from grader.common import timing
    fake = _FakeCuda(woke)
    monkeypatch.setattr(timing.torch, "cuda", fake)
    calls = []
    ms = timing.host_ms(lambda: calls.append(1))
    assert ms >= 0
    seconds = [c / timing.SLEEP_CLOCK_HZ for c in fake.sleeps]
    # a call of microseconds: 20 of them behind ~5 ms of sleep, not a fixed 0.1 s
    assert seconds[0] < 0.01
    # the GPU woke before the last enqueue: taken again behind 4x the sleep, 3 tries at most
    assert len(seconds) == min(woke, 2) + 1
    assert all(b == pytest.approx(4 * a) for a, b in zip(seconds, seconds[1:]))
    assert len(calls) == 1 + 20 * len(seconds)


def test_ceiling_cache_is_per_device_and_torch(tmp_path):
    a = ceiling_cache_path(tmp_path, "NVIDIA H200", "2.11.0+cu130")
    b = ceiling_cache_path(tmp_path, "NVIDIA H100 80GB HBM3", "2.11.0+cu130")
    assert a != b and a.parent == b.parent and " " not in a.name


EX01 = discover(only="01")[0]
MODEL = {"bytes": 3.22e9, "flops": 2.7e8}


def _figures(ms, wall_ms=None, host_ms=None, method="graph", capture_error=None):
    t = {"ms": ms, "p20": ms, "p80": ms, "wall_ms": wall_ms or ms, "host_ms": host_ms,
         "method": method}
    if capture_error:
        t["capture_error"] = capture_error
    f = figures_for(EX01, MODEL, t, {"bandwidth": 4000.0})
    f["speedup"] = {"eager": 0.8 / f["ms"]}
    return {"forward": f}


def test_credit_from_a_vouched_figure():
    figs = _figures(0.8)
    assert figs["forward"]["fraction"] == pytest.approx(1.006, rel=1e-3)
    rows, credit = performance_credit(EX01, figs, None)
    assert credit == 1.0 and rows[0]["value"] == pytest.approx(1.006, rel=1e-3)


def test_a_reported_time_the_wall_clock_contradicts_is_replaced():
    figs = _figures(0.1, wall_ms=0.8)   # events claim 100 us, the judge saw 800 us per call
    f = figs["forward"]
    assert f["ms"] == 0.8 and "wall-clock time is used" in f["warnings"][0]


def test_a_host_bound_op_timed_eagerly_is_not_accused_when_the_wall_clock_disagrees():
    # not capturable, so timed by events: 100 us of GPU per call, the host needs 300 us to
    # enqueue one, 8 back-to-back calls took 400 us each: the host's pace, said as such; the
    # judge's figure still counts
    f = _figures(0.1, wall_ms=0.4, host_ms=0.3, method="events",
                 capture_error="softmax.py:12: RuntimeError: operation not permitted")["forward"]
    assert "not capturable in a CUDA graph (softmax.py:12" in f["warnings"][0]
    assert f["ms"] == 0.4 and "host, not the GPU" in f["warnings"][1] and f["host_bound"]
    assert "does not hold all the work" not in f["warnings"][1]


def test_replays_do_not_wait_for_the_host():
    # a captured step replays at the GPU's pace whatever the host costs: a replayed batch whose
    # wall clock is 4x the reported time is work the figure does not hold, host-bound or not
    f = _figures(0.1, wall_ms=0.4, host_ms=0.3)["forward"]
    assert f["ms"] == 0.4 and "does not hold all the work" in f["warnings"][0]
    assert f["host_bound"]  # still reported, never scored


def test_an_impossible_rate_earns_nothing_and_names_the_ceiling():
    figs = _figures(0.3)                # 10.7 TB/s on a 4 TB/s GPU
    f = figs["forward"]
    assert f["impossible"] and "impossible" in f["warnings"][0] and "copy bandwidth" in f["warnings"][0]
    assert performance_credit(EX01, figs, None)[1] == 0.0


def test_a_failed_validation_earns_nothing():
    rows, credit = performance_credit(EX01, _figures(0.8), "call 2 of 8: timed output 0 is not this call's answer")
    assert credit == 0.0 and rows[0]["value"] is None


def test_host_bound_is_flagged():
    assert _figures(0.1, host_ms=0.3)["forward"]["host_bound"]
    assert not _figures(0.8, host_ms=0.02)["forward"].get("host_bound")


def _measurement(ms):
    row = {"model": MODEL,
           "impls": {"triton": {"ms": ms, "p20": ms, "p80": ms, "rate": 3.22e9 / ms / 1e6,
                                "host_ms": 0.01}},
           "baselines": {"eager": {"ms": 0.8, "p20": 0.8, "p80": 0.8, "rate": 4025.0},
                         "liger": {"error": "not installed (No module named 'liger_kernel')"}}}
    return {"case": {"n": 1 << 28}, "figures": {"forward": row}, "checks": {"triton": None}}


def test_bench_report_and_plot(tmp_path):
    sweep = []
    for n in (1 << 16, 1 << 20, 1 << 24):
        m = _measurement(0.8)
        m["case"] = {"n": n}
        sweep.append(m)
    data = {"meta": {"tree": "solutions", "device": "GPU", "torch": "t", "triton": "t", "date": "d"},
            "exercises": [{"exercise": "01_vector_add", "ceiling": "bandwidth", "ceiling_value": 4000.0,
                           "dtype": "float32", "graded_case": {"n": 1 << 24}, "sweep": sweep,
                           "graded": [sweep[-1], sweep[-1]], "load_errors": {}},
                          {"exercise": "02_scale", "error": "the benchmark worker failed: timed out"}]}
    md = bench_markdown(json.loads(json.dumps(data)))
    assert "| triton | 800.0 |" in md and "| liger | not installed" in md and "02_scale" in md
    assert "sweep over n" in md and "repeats µs" in md and "host µs/call" in md
    pytest.importorskip("matplotlib")
    bench_plot(data, tmp_path / "bench.png")
    assert (tmp_path / "bench.png").stat().st_size > 10_000


def test_bench_report_shows_every_repeat_and_the_extra_cases():
    """make bench REPEATS=5: the four other medians and the largest difference from the first;
    an extra case ([[benchmark.extra]]) gets a table of its own under its exercise."""
    reps = [_measurement(ms) for ms in (0.8, 0.81, 0.79, 0.8, 0.84)]
    data = {"meta": {"tree": "solutions", "device": "GPU", "torch": "t", "triton": "t", "date": "d"},
            "exercises": [{"exercise": "06_rmsnorm", "ceiling": "bandwidth", "ceiling_value": 4000.0,
                           "dtype": "bfloat16", "graded_case": {"n": 1}, "sweep": [],
                           "graded": reps, "load_errors": {},
                           "extras": [{"name": "in a compiled block", "call": "rmsnorm",
                                       "wrap": "block", "ceiling": "matmul_bf16",
                                       "ceiling_value": 700.0, "dtype": "bfloat16",
                                       "case": {"n": 1}, "graded": reps[:2]}]}]}
    md = bench_markdown(json.loads(json.dumps(data)))
    assert "810.0, 790.0, 800.0, 840.0 (+5.0%)" in md
    assert "### 06_rmsnorm: in a compiled block" in md and "inside reference.block" in md


def test_bench_keeps_the_exercises_it_did_not_measure():
    """make bench EXERCISE=04 replaces 04's rows and keeps the others, each with its own
    device and date (rows from files written before that field take the file's)."""
    from grader.tools.bench import merged
    old = {"meta": {"device": "H200", "date": "2026-11-21"},
           "exercises": [{"exercise": "01_vector_add"}, {"exercise": "04_reduce_sum", "old": 1}]}
    new = [{"exercise": "04_reduce_sum", "measured": {"device": "H200", "date": "2026-11-24"}},
           {"exercise": "02_scale", "measured": {"device": "H200", "date": "2026-11-24"}}]
    got = merged(old, new)
    assert [r["exercise"] for r in got] == ["01_vector_add", "02_scale", "04_reduce_sum"]
    assert got[0]["measured"]["date"] == "2026-11-21" and "old" not in got[2]


def test_validation_of_a_timed_linear_relu_allows_the_kink_only():
    """11's timed forward+backward: a right fp32 answer may put an element whose Z is within
    rounding of 0 on either side of the ReLU's mask, and that one element carries a whole dY
    entry into dA and dB (normwise ~1e-2 here, 1e-3 at 4096^3 with two such elements, where the
    H200 run was rejected). reference.matching takes the submission's side inside that band
    only: a flip anywhere else, or zeros, is still rejected."""
    import torch
    from grader.judge.answers import validate
    from grader.common.reference import load_reference
    ex = discover(only="11")[0]
    ref = load_reference(ex)
    g = torch.Generator().manual_seed(0)
    A, B, bias = ref.bench_inputs({"M": 48, "N": 40, "K": 256}, torch.float32, "cpu", g)
    z64 = torch.addmm(bias.double(), A.double(), B.double())
    bias[0] -= z64[0, 0].float() - 1e-6  # Z[0, 0] ~ 1e-6: within rounding of the kink
    z64 = torch.addmm(bias.double(), A.double(), B.double())
    dy = torch.randn(48, 40, generator=g)

    def answer(flip):
        keep = z64 > 0
        keep[flip] = ~keep[flip]
        dz = dy * keep
        return ((z64 * keep).float(), dz @ B.t(), A.t() @ dz, dz.sum(0))
    at_kink, far = (0, 0), tuple((z64.abs() > 0.3).nonzero()[0].tolist())
    assert validate(ex, ref, (A, B, bias), "forward_backward", answer(at_kink), dy) is None
    matching = ref.matching
    try:  # what the plain reference says of the same right answer
        del ref.matching
        assert "not this call's answer" in validate(ex, ref, (A, B, bias), "forward_backward",
                                                    answer(at_kink), dy)
    finally:
        ref.matching = matching
    assert "not this call's answer" in validate(ex, ref, (A, B, bias), "forward_backward",
                                                answer(far), dy)
    zeros = tuple(t * 0 for t in answer(at_kink))
    assert "not this call's answer" in validate(ex, ref, (A, B, bias), "forward", zeros[:1])


def test_sets_drawn_ahead_hold_a_timed_batch_to_the_same_answers(monkeypatch):
    """A warming judge draws its timing's input sets and their float64 answers ahead
    (answers.Drawn); at its turn the batch writes those values and only compares. An honest op
    passes with them; an op that keeps its first result is caught with them as without them,
    in both modes; and the answers drawn ahead are the ones used (no float64 reference runs at
    the turn). On the CPU, the op called eagerly, as for an op that cannot be captured."""
    import dataclasses
    import math

    import torch
    from grader.common.reference import load_reference
    from grader.judge import answers, measure
    from grader.judge.testing import value_and_grads
    ex = discover(only="06")[0]
    ex = dataclasses.replace(ex, benchmark=dataclasses.replace(
        ex.benchmark, case={"B": 2, "S": 8, "N": 64}))
    ref = load_reference(ex)
    b = ex.benchmark
    dtype = getattr(torch, b.dtype)
    cpu_inputs = lambda exercise, ref, case, seed: tuple(
        ref.bench_inputs(case, dtype, "cpu", torch.Generator().manual_seed(seed)))
    monkeypatch.setattr(measure, "make_inputs", cpu_inputs)
    monkeypatch.setattr(answers, "make_inputs", cpu_inputs)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)

    class Session:
        """The submission's process, in the judge's: the reference in the input dtype; with
        `keep`, every call after the first hands back the first call's outputs."""
        timeout_s = 60

        def __init__(self, keep=False):
            self.keep, self.first = keep, None

        def run(self, args, dy):
            if self.keep and self.first is not None:
                return self.first
            if self.mode == "forward":
                with torch.no_grad():
                    out = [ref.reference(*args)]
            else:
                outs, grads = value_and_grads(ref.reference, *args, wrt=b.grad_args, dy=dy)
                out = [outs[0]] + list(grads)
            self.first = self.first or [o.detach().clone() for o in out]
            return out

        def request(self, what, **kw):
            if what == "stage":
                self.mode, self.sets, self.dys = kw["mode"], kw["sets"], kw["dys"]
            elif what == "go":
                self.outs = [self.run(s, self.dys[i] if self.dys else None)
                             for i, s in enumerate(self.sets)]
            elif what == "collect":
                return {"ok": True, "outs": self.outs}
            elif what == "prove":
                i = kw["index"]
                for dst, src in zip([t for t in self.sets[i] if isinstance(t, torch.Tensor)],
                                    [t for t in kw["args"] if isinstance(t, torch.Tensor)]):
                    dst.copy_(src)
                if kw["dy"] is not None:
                    self.dys[i].copy_(kw["dy"])
                return {"ok": True, "outs": self.run(self.sets[i], self.dys and self.dys[i])}
            return {"ok": True}

    answered = []
    expect = answers.expect
    monkeypatch.setattr(answers, "expect", lambda *a, **k: answered.append(1) or expect(*a, **k))
    k = 3
    for mode in b.modes:
        for drawn in (True, False):
            for keep in (False, True):
                ahead = answers.draw(ex, ref, mode, k, math.inf, lambda: False)[0] \
                    if drawn else []
                assert len(ahead) == (k if drawn else 0)
                answered.clear()
                warmup = cpu_inputs(ex, ref, b.case, 0)
                warm_dy = torch.randn_like(warmup[0]) if mode == "forward_backward" else None
                _, problem = measure._validated_batch(
                    Session(keep), ex, ref, b.case, mode, k, (warmup, warm_dy), graphs=False,
                    ahead=ahead)
                if keep:
                    assert problem and "not this call's answer" in problem, (mode, drawn)
                else:
                    assert problem is None, (mode, drawn, problem)
                    # every call's answer (k in the batch, k run alone) drawn ahead, or not
                    assert len(answered) == (0 if drawn else 2 * k), (mode, drawn)
    # the grade's stop (before its first timing) ends the drawing at the next set
    assert answers.draw(ex, ref, "forward", k, math.inf, lambda: True)[0] == []
    one = answers.draw(ex, ref, "forward", k, math.inf, lambda: False)
    assert answers.draw(ex, ref, "forward", k, one[1] * 2 // k, lambda: False)[0] != []
    assert len(answers.draw(ex, ref, "forward", k, one[1] // k - 1, lambda: False)[0]) == 0
