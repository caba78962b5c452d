"""Points: proportional checks, threshold-to-credit mapping."""
import dataclasses
import pytest

from grader.common.discover import Threshold, discover
from grader.run.results import Check, TrackResult
from grader.run.score import credit, score, threshold_value


@pytest.mark.parametrize("value, expected", [
    (None, 0.0), (float("nan"), 0.0), (0.3, 0.0), (0.6, 0.0), (0.725, 0.5), (0.85, 1.0), (2.0, 1.0),
])
def test_credit_is_linear_between_pass_and_full(value, expected):
    assert credit(value, 0.6, 0.85) == pytest.approx(expected)


def test_threshold_reads_the_right_figure():
    figures = {"forward": {"fraction": 0.9, "speedup": {"eager": 4.0}},
               "forward_backward": {"fraction": 0.5, "speedup": {"eager": 2.0}}}
    assert threshold_value(Threshold("fraction_of_ceiling", None, "forward", 0.5, 0.8), figures) == 0.9
    assert threshold_value(Threshold("speedup", "eager", "forward_backward", 1, 2), figures) == 2.0
    assert threshold_value(Threshold("speedup", "compile", "forward", 1, 2), figures) is None


def test_points_are_proportional_and_gpu_checks_earn_nothing():
    ex = discover(only="01")[0]
    checks = (Check("a", "correctness", "passed"), Check("b", "correctness", "passed"),
              Check("c", "correctness", "failed"), Check("d", "correctness", "needs a GPU"))
    # 01's one threshold: 60% of the copy ceiling earns nothing, 85% all: 72.5% earns half
    r = TrackResult("01_vector_add", "triton", "t", build={"ok": True}, checks=checks,
                    performance={"status": "measured", "figures": {"forward": {"fraction": 0.725}}})
    s = score(ex, r)
    assert s.correctness == pytest.approx(ex.points["correctness"] * 2 / 4)
    assert s.performance == 0  # timed, shown, but no points while a correctness check fails
    r = dataclasses.replace(r, checks=checks[:2] + (dataclasses.replace(checks[2], outcome="passed"),) + checks[3:])
    assert score(ex, r).performance == pytest.approx(ex.points["performance"] * 0.5)
    assert score(ex, dataclasses.replace(r, build={"ok": False})).total == 0


def test_a_figure_past_the_ceiling_is_impossible_and_earns_nothing():
    """A score anomaly (the field's catalogue): a rate above 110% of the ceiling measured on
    this GPU is not physical, whatever made it (a timer that lies, work done elsewhere), and
    earns no performance credit, saying why; 100% earns full credit."""
    from grader.common.ceilings import rate
    from grader.judge.measure import figures_for
    ex = discover(only="01")[0]
    b = ex.benchmark
    model = {"bytes": 3 * 4 * b.case["n"], "flops": b.case["n"]}
    ceilings = {b.ceiling: 4000.0}
    at_ceiling_ms = model["bytes"] / (ceilings[b.ceiling] * 1e9) * 1e3
    assert rate(model, at_ceiling_ms, b.ceiling) == pytest.approx(ceilings[b.ceiling])
    checks = (Check("a", "correctness", "passed"),)
    for ms, impossible in ((at_ceiling_ms, False), (at_ceiling_ms / 1.2, True)):
        f = figures_for(ex, model, {"ms": ms, "wall_ms": ms, "method": "graph"}, ceilings)
        assert f["impossible"] is impossible
        assert any("impossible, so not credited" in w for w in f["warnings"]) is impossible
        r = TrackResult("01_vector_add", "triton", "t", build={"ok": True}, checks=checks,
                        performance={"status": "measured", "figures": {"forward": f}})
        assert score(ex, r).performance == (0 if impossible else ex.points["performance"])
