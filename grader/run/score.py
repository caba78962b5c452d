"""Score: turn a TrackResult into points. The one place credit is computed, in the parent.

Correctness and gradcheck points are proportional to the checks passed in each category (a
check that needs a GPU and did not run earns nothing, and says so). Performance credit comes from
the figures the timing judge recorded (grader.judge.measure): 0 below a threshold's `pass`, 1 at or
above its `full`, and linear between them; with several thresholds the track earns their mean. A
problem found while timing, or an impossible figure, earns nothing. Tampering scores 0.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from grader.common.ceilings import CEILINGS
from grader.common.discover import Exercise, Threshold
from grader.run.results import TrackResult


def credit(value: float | None, pass_at: float, full_at: float) -> float:
    """0 below pass_at, 1 from full_at, linear between (a figure at pass_at earns 0)."""
    if value is None or value != value or value < pass_at:
        return 0.0
    if value >= full_at or full_at == pass_at:
        return 1.0
    return (value - pass_at) / (full_at - pass_at)


def performance_credit(exercise: Exercise, figures: dict, problem: str | None):
    """(one row per threshold, the mean credit). A problem (an output after timing that is not
    this call's answer, delegation, ...) or an impossible figure earns nothing."""
    label = CEILINGS[exercise.benchmark.ceiling].label
    rows, credits = [], []
    for th in exercise.benchmark.thresholds:
        f = figures.get(th.mode) or {}
        value = None if problem or f.get("impossible") else threshold_value(th, figures)
        c = credit(value, th.pass_at, th.full_at)
        credits.append(c)
        text = "n/a" if value is None else (f"{100 * value:.1f}% of {label}" if th.metric ==
                                            "fraction_of_ceiling" else f"{value:.2f}x")
        what = f"fraction of {label}" if th.metric == "fraction_of_ceiling" else \
            f"speedup over {th.baseline}"
        rows.append({"label": f"{th.mode} {what}", "value": value, "value_text": text,
                     "pass": th.pass_at, "full": th.full_at, "credit": c})
    return rows, (sum(credits) / len(credits) if credits else None)


def threshold_value(t: Threshold, figures: dict) -> float | None:
    """The figure a threshold reads from a track's measured figures (grader.judge.measure)."""
    mode = figures.get(t.mode) or {}
    if t.metric == "fraction_of_ceiling":
        return mode.get("fraction")
    return (mode.get("speedup") or {}).get(t.baseline)


@dataclass
class Score:
    correctness: float
    gradcheck: float
    performance: float
    max_points: int
    thresholds: list = field(default_factory=list)  # performance_credit's rows, when measured
    credit: float | None = None                     # the performance credit (0..1), when measured

    @property
    def total(self) -> float:
        return self.correctness + self.gradcheck + self.performance


def score(exercise: Exercise, result: TrackResult) -> Score:
    pts = exercise.points
    if result.tampering:  # the submission changed (or tried to change) the grader's files
        return Score(0.0, 0.0, 0.0, sum(pts.values()))
    built = result.build.get("ok", False)

    def share(category):
        total = result.total(category)
        if not built or not total or not pts[category]:
            return 0.0
        return pts[category] * result.count(category, "passed") / total

    p = result.performance or {}
    rows, earned = [], None
    if exercise.benchmark is not None and p.get("status") in ("measured", "rejected"):
        rows, earned = performance_credit(exercise, p.get("figures") or {}, p.get("problem"))
    perf = 0.0
    if built and result.all_correct and earned is not None:
        perf = pts["performance"] * earned
    return Score(share("correctness"), share("gradcheck"), perf, sum(pts.values()), rows, earned)
