"""Timing arithmetic, the escape guard, the ceiling cache, and the bench report (CPU-only)."""
import json

import pytest

from grader.benchmark import ceiling_cache_path, escaped, rate, stats, summarize
from grader.discover import discover
from grader.report import bench_markdown, bench_plot


def test_rate_counts_bytes_or_flops():
    assert rate({"bytes": 4e9}, 1.0, "bandwidth") == pytest.approx(4000.0)       # GB/s
    assert rate({"flops": 2 * 8192 ** 3}, 1.5, "matmul_bf16") == pytest.approx(733.0, rel=1e-3)


def test_stats_keeps_median_and_spread():
    assert stats([1.0, 2.0, 3.0]) == {"ms": 2.0, "p20": 1.0, "p80": 3.0}


@pytest.mark.parametrize("event_ms, wall_ms, out", [
    (1.0, 1.02, False),   # launch overhead, nothing escaped
    (1.0, 2.0, True),     # half the work ran on a side stream after the end event
    (0.01, 0.05, False),  # tiny kernels are launch-bound: slack, not a verdict
])
def test_escape_guard(event_ms, wall_ms, out):
    assert escaped(event_ms, wall_ms) is out


def test_ceiling_cache_is_per_device_and_torch(tmp_path):
    a = ceiling_cache_path(tmp_path, "NVIDIA H200", "2.11.0+cu130")
    b = ceiling_cache_path(tmp_path, "NVIDIA H100 80GB HBM3", "2.11.0+cu130")
    assert a != b and a.parent == b.parent and " " not in a.name


def _measurement(ms_yours, escaped_=False, check=None):
    row = {"model": {"bytes": 3.22e9, "flops": 2.7e8},
           "impls": {"yours": {"ms": ms_yours, "p20": ms_yours, "p80": ms_yours, "wall_ms": 2 * ms_yours,
                               "rate": 3.22e9 / ms_yours / 1e6, "fraction": 3.22e9 / ms_yours / 1e6 / 4000,
                               "escaped": escaped_}},
           "baselines": {"eager": {"ms": 0.8, "p20": 0.8, "p80": 0.8, "rate": 4025.0},
                         "liger": {"error": "not installed (No module named 'liger_kernel')"}}}
    return {"case": {"n": 1 << 28}, "figures": {"forward": row}, "checks": {"yours": check}}


def test_summarize_gives_credit_and_flags_escapes():
    ex = discover(only="01")[0]
    ceilings = {"bandwidth": 4000.0}
    good = summarize(ex, _measurement(0.8), ceilings)
    assert good["figures"]["forward"]["fraction"] == pytest.approx(1.006, rel=1e-3)
    assert good["credit"] == 1.0 and not good["warnings"]
    assert good["figures"]["forward"]["speedup"] == {"eager": pytest.approx(1.0)}
    slow = summarize(ex, _measurement(0.8, escaped_=True), ceilings)  # wall time is used
    assert slow["credit"] < 1.0 and "escaped" in slow["warnings"][0]
    cheat = summarize(ex, _measurement(0.8, check="output after timing: 5 of 9 differ"), ceilings)
    assert cheat["credit"] == 0.0 and "did not match" in cheat["warnings"][0]


def test_bench_report_and_plot(tmp_path):
    sweep = []
    for n in (1 << 16, 1 << 20, 1 << 24):
        m = _measurement(0.8)
        m["case"] = {"n": n}
        m["figures"]["forward"]["impls"] = {"triton": m["figures"]["forward"]["impls"]["yours"]}
        sweep.append(m)
    data = {"meta": {"tree": "solutions", "device": "GPU", "torch": "t", "triton": "t", "date": "d"},
            "exercises": [{"exercise": "01_vector_add", "ceiling": "bandwidth", "ceiling_value": 4000.0,
                           "dtype": "float32", "graded_case": {"n": 1 << 24}, "sweep": sweep,
                           "graded": [sweep[-1], sweep[-1]], "load_errors": {}},
                          {"exercise": "02_scale", "error": "the benchmark worker exited with 1"}]}
    md = bench_markdown(json.loads(json.dumps(data)))
    assert "| triton | 800.0 |" in md and "| liger | not installed" in md and "02_scale" in md
    assert "sweep over n" in md and "rerun" in md
    pytest.importorskip("matplotlib")
    bench_plot(data, tmp_path / "bench.png")
    assert (tmp_path / "bench.png").stat().st_size > 10_000
