"""Report: the terminal scorecard, the per-track feedback, and Gradescope's results.json."""
from __future__ import annotations

import json
import textwrap
from pathlib import Path

from grader.discover import Exercise
from grader.results import TrackResult
from grader.score import Score

DASH = "—"


def _build_cell(r: TrackResult) -> str:
    b = r.build
    if not b:
        return "not run"
    if not b.get("ok"):
        return "IMPORT FAILED" if b.get("stage") == "import" else "BUILD FAILED"
    if b.get("stage") == "import":
        return "imported"
    return f"built {b['seconds']:.0f}s" if b.get("rebuilt") else f"cached {b['seconds']:.0f}s"


def _checks_cell(r: TrackResult, category: str) -> str:
    total = r.total(category)
    if not r.build.get("ok") or total == 0:
        return DASH
    passed = r.count(category, "passed")
    cell = f"{passed}/{total}"
    gpu = r.count(category, "needs a GPU")
    if r.not_implemented:
        return f"{cell} not implemented"
    if gpu:
        cell += f" ({gpu} need a GPU)"
    broke = r.count(category, "crashed") + r.count(category, "not run")
    if broke:
        cell += f" ({broke} not run)"
    return cell


def _perf_cell(r: TrackResult) -> str:
    p = r.performance
    if p is None:
        return DASH if not r.build.get("ok") else "not measured"
    if p.get("status") != "measured":
        return p.get("status", "?")
    fwd = p["figures"].get("forward", {})
    parts = []
    if fwd.get("fraction") is not None:
        parts.append(f"{100 * fwd['fraction']:.0f}% of {p['ceiling_name']}")
    eager = (fwd.get("speedup") or {}).get("eager")
    if eager:
        parts.append(f"{eager:.1f}x eager")
    return ", ".join(parts) or "measured"


def scorecard(rows: list[tuple[Exercise, TrackResult, Score]], *, title: str) -> str:
    header = ("#", "exercise", "track", "build", "correctness", "gradcheck", "performance", "points")
    table = [header]
    total = maximum = 0.0
    for ex, r, s in rows:
        table.append((ex.number, ex.name, r.track, _build_cell(r), _checks_cell(r, "correctness"),
                      _checks_cell(r, "gradcheck"), _perf_cell(r),
                      f"{s.total:.1f}/{s.max_points}"))
        total += s.total
        maximum += s.max_points
    widths = [max(len(str(row[i])) for row in table) for i in range(len(header))]
    lines = [title, ""]
    for i, row in enumerate(table):
        lines.append("  ".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip())
        if i == 0:
            lines.append("  ".join("-" * w for w in widths))
    lines.append(f"\ntotal: {total:.1f} / {maximum:.0f} points")
    return "\n".join(lines)


def feedback(ex: Exercise, r: TrackResult, *, full: bool = False) -> str:
    """What a learner reads under the table: where to start, what failed, and why."""
    head = f"{ex.number} {ex.name} [{r.track}]"
    track = ex.tracks[r.track]
    if r.build and not r.build.get("ok"):
        return f"{head}: {r.build.get('stage')} failed\n{_indent(r.build.get('message', ''))}"
    if r.not_implemented:
        return f"{head}: not implemented yet. Start here: {track.start}"
    out = []
    if r.ended:
        crashed = next((c.name for c in r.checks if c.outcome == "crashed"), None)
        out.append(f"{head}: {r.ended}" + (f" during {crashed}" if crashed else ""))
        if full and r.log_tail:
            out.append(_indent("last output:\n" + r.log_tail))
    if r.stopped:
        out.append(f"{head}: checks stopped early: {r.stopped}")
    failed = [c for c in r.checks if c.outcome == "failed"]
    shown = failed if full else failed[:3]
    if failed:
        out.append(f"{head}: {len(failed)} check(s) failed")
    for c in shown:
        where = f"  ({c.where})" if c.where else ""
        msg = c.message if full else "\n".join(c.message.splitlines()[:12])
        out.append(f"  FAIL {c.name}{where}\n{_indent(msg, 6)}")
    if len(failed) > len(shown):
        out.append("  also failed: " + ", ".join(c.name for c in failed[len(shown):]))
    p = r.performance
    if full and p and p.get("status") == "measured":
        out.append(f"{head}: performance\n{_indent(performance_text(p))}")
    elif p and p.get("status") not in (None, "measured") and full:
        out.append(f"{head}: performance: {p['status']}")
    return "\n".join(out)


def performance_text(p: dict) -> str:
    lines = [f"case {p['case']} {p['dtype']}; ceiling: {p['ceiling_name']} "
             f"{p['ceiling_value']:.4g} {p['ceiling_unit']} (measured on this GPU)"]
    for mode, f in p["figures"].items():
        rate = f"{f['rate']:.4g} {p['ceiling_unit']}" if f.get("rate") else ""
        frac = f" = {100 * f['fraction']:.1f}% of the ceiling" if f.get("fraction") else ""
        lines.append(f"{mode}: median {f['ms'] * 1e3:.1f} us (p20-p80 {f['p20'] * 1e3:.1f}-"
                     f"{f['p80'] * 1e3:.1f}), {rate}{frac}")
        for name, b in (f.get("baselines") or {}).items():
            if "ms" in b:
                lines.append(f"    vs {name}: {b['ms'] * 1e3:.1f} us -> {f['speedup'][name]:.2f}x")
            else:
                lines.append(f"    vs {name}: {b.get('error', 'did not run')}")
    for t in p.get("thresholds", []):
        lines.append(f"threshold {t['label']}: {t['value_text']} (pass {t['pass']}, full "
                     f"{t['full']}) -> {100 * t['credit']:.0f}% credit")
    if p.get("warnings"):
        lines += [f"warning: {w}" for w in p["warnings"]]
    return "\n".join(lines)


def _indent(text: str, n: int = 4) -> str:
    return textwrap.indent(text, " " * n)


def gradescope(rows: list[tuple[Exercise, TrackResult, Score]], *, seconds: float,
               summary: str) -> dict:
    """Gradescope's results.json: a test per check and per performance row, with points."""
    tests = []
    for ex, r, s in rows:
        label = f"{ex.number} {ex.name} [{r.track}]"
        built = r.build.get("ok", False)
        for category in ("correctness", "gradcheck"):
            total, points = r.total(category), ex.points[category]
            if not points:
                continue
            if not built or total == 0:
                tests.append({"name": f"{label} {category}", "score": 0, "max_score": points,
                              "status": "failed",
                              "output": r.build.get("message") or r.ended or "no checks ran"})
                continue
            each = points / total
            for c in (c for c in r.checks if c.category == category):
                ok = c.outcome == "passed"
                tests.append({"name": f"{label} {c.name}", "score": round(each if ok else 0, 4),
                              "max_score": round(each, 4), "status": "passed" if ok else "failed",
                              "output": c.message if not ok else ""})
        if ex.points["performance"]:
            p = r.performance or {}
            tests.append({"name": f"{label} performance", "score": round(s.performance, 4),
                          "max_score": ex.points["performance"],
                          "status": "passed" if s.performance > 0 else "failed",
                          "output": performance_text(p) if p.get("status") == "measured"
                          else p.get("status", "not measured")})
    return {"score": round(sum(s.total for _, _, s in rows), 4),
            "execution_time": round(seconds, 1), "output": summary, "tests": tests}


def write_json(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n")
