"""Gradescope and JUnit: one graded run written as Gradescope's results.json and as JUnit XML.

results.json follows Gradescope's autograder spec
(https://gradescope-autograders.readthedocs.io/en/latest/specs/): a test per check and one per
track's performance, each with its points, `status`, `visibility` and `tags`; the scorecard as
the submission's `output` (Markdown); a `leaderboard` of GPU time and fraction of the ceiling;
and `extra_data.tracks`, one line per track with the flags a class summary reads.

The two files agree on what happened to each check:
- passed / failed (or crashed): points or none, in both;
- not run (the track's process died before it): its points are lost, the output says why, and
  JUnit marks it skipped ("not run"), never a failure of its own;
- needs a GPU (a CPU image; or timing left out with --no-bench): no points at stake here
  (max_score 0, no status: Gradescope shows it as information, not a failure), JUnit skipped;
- TAMPERING: every test of the track scores 0 and says why, in both;
- needs review (TrackResult.review): no points taken, a flag and its findings in both.
"""
from __future__ import annotations

import argparse
import ast
import json
import os
from pathlib import Path
from xml.etree import ElementTree as ET

from grader.common.discover import Exercise
from grader.run.report import performance_text
from grader.run.results import TrackResult
from grader.run.score import Score

SPEC = "https://gradescope-autograders.readthedocs.io/en/latest/specs/"
VISIBILITIES = ("visible", "hidden", "after_due_date", "after_published")
# what --visibility KIND=WHEN sets: the whole result, the property checks (hypothesis), every
# correctness check, the gradcheck checks, the performance tests, run_autograder's stdout
KINDS = ("all", "property", "checks", "gradcheck", "performance", "stdout")
NO_GPU = ("needs a GPU", "not measured")   # performance statuses with nothing at stake here
MODE_LABEL = {"forward": "GPU us", "forward_backward": "fwd+bwd GPU us"}


def visibility_arg(text: str) -> str:
    """argparse's check of one --visibility KIND=WHEN (a typo stops the run before grading)."""
    kind, _, when = text.partition("=")
    if kind not in KINDS or when not in VISIBILITIES:
        raise ValueError(f"--visibility {text}: expected KIND=WHEN with KIND one of "
                         f"{', '.join(KINDS)} and WHEN one of {', '.join(VISIBILITIES)} "
                         f"(e.g. property=after_due_date)")
    return text


def _visibility_type(text: str) -> str:
    try:
        return visibility_arg(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e))


# the --visibility option of `grade` and `batch` (argparse keywords)
VISIBILITY = dict(action="append", type=_visibility_type, default=[], metavar="KIND=WHEN",
                  help="Gradescope visibility, e.g. property=after_due_date (KIND: all, "
                       "property, checks, gradcheck, performance, stdout; WHEN: visible, hidden, "
                       "after_due_date, after_published); repeatable")


def visibility_map(items) -> dict[str, str]:
    return dict(visibility_arg(i).split("=", 1) for i in items or ())


def property_checks(ex: Exercise) -> set[str]:
    """The exercise's property checks: test functions decorated with hypothesis' @given, read
    from the source (nothing imported)."""
    names = set()
    for path in sorted(ex.dir.glob("test_*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.FunctionDef) and any(_is_given(d) for d in node.decorator_list):
                names.add(node.name)
    return names


def _is_given(decorator) -> bool:
    d = decorator.func if isinstance(decorator, ast.Call) else decorator
    return (isinstance(d, ast.Name) and d.id == "given") or \
        (isinstance(d, ast.Attribute) and d.attr == "given")


def _when(vis: dict, kinds: list[str]) -> str:
    """The first of `kinds` the course set (most specific first), else 'all', else visible."""
    return next((vis[k] for k in kinds + ["all"] if k in vis), "visible")


def _test(name, score, max_score, status, output, visibility, tags, stake=None) -> dict:
    """One test; `stake`: the points a test shown as information (max_score 0) is worth where
    it can run (kept in its extra_data, so a class summary reads the track's maximum back)."""
    t = {"name": name, "score": round(score, 4), "max_score": round(max_score, 4)}
    if status:
        t["status"] = status
    t.update(output=output, visibility=visibility, tags=tags)
    if stake is not None:
        t["extra_data"] = {"points_at_stake": round(stake, 4)}
    return t


def _not_run_reason(r: TrackResult) -> str:
    crashed = next((c.name for c in r.checks if c.outcome == "crashed"), None)
    why = r.stopped or r.ended or "the checks stopped early"
    return f"not run: {why}" + (f" (during {crashed})" if crashed else "") + \
        "; this check never started, so it did not fail: its points are lost with the crash"


def gradescope(rows: list[tuple[Exercise, TrackResult, Score]], *, seconds: float,
               summary: str, visibility=()) -> dict:
    """Gradescope's results.json: a test per check and per track's performance, with points."""
    vis = visibility_map(visibility)
    tests = []
    for ex, r, s in rows:
        label = f"{ex.number} {ex.name} [{r.track}]"
        built = r.build.get("ok", False)
        tampered = ("TAMPERING: the submission changed, or tried to write, files of the grader "
                    "or the repository; every test of this track scores 0:\n" +
                    "\n".join(r.tampering)) if r.tampering else ""
        props = property_checks(ex)
        for category in ("correctness", "gradcheck"):
            total, points = r.total(category), ex.points[category]
            if not points:
                continue
            when = _when(vis, [category if category == "gradcheck" else "checks"])
            if not built or total == 0:
                tests.append(_test(f"{label} {category}", 0, points, "failed",
                                   tampered or r.build.get("message") or r.ended or
                                   "no checks ran", when, [category, "build"]))
                continue
            each = points / total
            for c in (c for c in r.checks if c.category == category):
                kinds = (["property"] if c.name.split("[")[0] in props else []) + \
                    [category if category == "gradcheck" else "checks"]
                tags = [category] + (["property"] if "property" in kinds else [])
                if tampered:
                    tests.append(_test(f"{label} {c.name}", 0, each, "failed", tampered,
                                       _when(vis, kinds), tags + ["tampering"]))
                elif c.outcome in ("needs a GPU", "skipped"):
                    # not a failure: nothing at stake on this image (the share is graded where
                    # there is a GPU, and the scorecard says so)
                    tests.append(_test(f"{label} {c.name}", 0, 0, None,
                                       f"{c.outcome}: {c.message}".rstrip(": "),
                                       _when(vis, kinds), tags + [c.outcome], stake=each))
                elif c.outcome == "not run":
                    tests.append(_test(f"{label} {c.name}", 0, each, "failed", _not_run_reason(r),
                                       _when(vis, kinds), tags + ["not run"]))
                else:
                    ok = c.outcome == "passed"
                    tests.append(_test(f"{label} {c.name}", each if ok else 0, each,
                                       "passed" if ok else "failed",
                                       "" if ok else "\n".join([c.message or c.outcome] +
                                                               c.details()),
                                       _when(vis, kinds), tags + ([] if ok else [c.outcome])))
        if ex.points["performance"]:
            p = r.performance or {}
            status = p.get("status", "not measured")
            when = _when(vis, ["performance"])
            if tampered:
                tests.append(_test(f"{label} performance", 0, ex.points["performance"], "failed",
                                   tampered, when, ["performance", "tampering"]))
            elif status in ("measured", "rejected"):
                tests.append(_test(f"{label} performance", s.performance, ex.points["performance"],
                                   "passed" if s.performance > 0 else "failed",
                                   performance_text(p, s), when, ["performance"]))
            elif status in NO_GPU:
                tests.append(_test(f"{label} performance", 0, 0, None,
                                   f"{status}: the {ex.points['performance']} performance points "
                                   f"are graded on a GPU", when, ["performance", status],
                                   stake=ex.points["performance"]))
            else:  # "not measured: <why>": the checks failed, so no timing earns points
                tests.append(_test(f"{label} performance", 0, ex.points["performance"], "failed",
                                   status, when, ["performance"]))
        if r.tampering:
            tests.append(_test(f"{label} tampering", 0, 0, "failed", "\n".join(r.tampering),
                               _when(vis, []), ["tampering"]))
        if r.review:
            tests.append(_test(f"{label} needs review", 0, 0, None,
                               "a person should look at this (no points taken):\n" +
                               "\n".join(r.review), _when(vis, []), ["needs review"]))
    return {"score": round(sum(s.total for _, _, s in rows), 4),
            "execution_time": round(seconds, 1),
            "output": "```\n" + summary + "\n```", "output_format": "md",
            "test_output_format": "text", "test_name_format": "text",
            "visibility": vis.get("all", "visible"),
            "stdout_visibility": vis.get("stdout", "hidden"),
            "tests": tests, "leaderboard": leaderboard(rows),
            "extra_data": {"tracks": [track_summary(ex, r, s) for ex, r, s in rows]}}


def leaderboard(rows) -> list[dict]:
    """GPU time (lower first) and fraction of the ceiling (higher first) per track and mode,
    for correct tracks whose timing was accepted: a wrong kernel's speed is no entry."""
    board = []
    for ex, r, s in rows:
        p = r.performance or {}
        if p.get("status") != "measured" or p.get("problem") or not r.all_correct or r.tampering:
            continue
        for mode, f in p.get("figures", {}).items():
            head = f"{ex.number} {ex.name} [{r.track}]"
            if f.get("ms") is not None:
                board.append({"name": f"{head} {MODE_LABEL.get(mode, mode + ' GPU us')}",
                              "value": round(f["ms"] * 1e3, 2), "order": "asc"})
            if f.get("fraction") is not None:
                board.append({"name": f"{head} {mode} % of {p.get('ceiling_name', 'ceiling')}",
                              "value": round(100 * f["fraction"], 1), "order": "desc"})
    return board


def error_reason(r: TrackResult) -> str:
    """The real reason a track was not graded whole, in one line (summary.csv's error)."""
    if r.tampering:
        return f"tampering: {r.tampering[0]}" + (f" (+{len(r.tampering) - 1})"
                                                 if len(r.tampering) > 1 else "")
    if r.build and not r.build.get("ok"):
        msg = next((l.strip() for l in (r.build.get("message") or "").splitlines()
                    if l.strip()), "")
        return f"{r.build.get('stage', 'build')} failed" + (f": {msg}" if msg else "")
    if r.ended:
        crashed = next((c.name for c in r.checks if c.outcome == "crashed"), None)
        return r.ended + (f" during {crashed}" if crashed else "")
    return ""


def track_summary(ex: Exercise, r: TrackResult, s: Score) -> dict:
    """One track in a line (results.json's extra_data, which Gradescope keeps and does not
    show): points and the flags `grader batch` puts in a class summary and its dashboard."""
    figures = (r.performance or {}).get("figures") or {}
    # a tampered track's figures are not the learner's to keep
    measured = (r.performance or {}).get("status") == "measured" and not r.tampering
    return {"exercise": ex.id, "track": r.track, "points": round(s.total, 4),
            "max_points": s.max_points, "built": bool(r.build.get("ok")),
            "tampering": bool(r.tampering),
            # the op ran and PyTorch (or a library) did its work; a stub whose every call
            # raised fails that check too, with nothing to judge: not delegation
            "delegation": any(c.name == "your kernels do the work" and c.outcome == "failed"
                              and "nothing to judge" not in c.message for c in r.checks),
            "host_bound": any(f.get("host_bound") for f in figures.values()),
            "needs_review": bool(r.review), "review": list(r.review),
            # a process that died while checking; a failed build or import also ends the
            # worker early, and is its own reason (error), not a crash
            "crashed": bool(r.ended) and bool(r.build.get("ok")),
            "failed": sum(c.outcome in ("failed", "crashed") for c in r.checks),
            "not_run": sum(c.outcome == "not run" for c in r.checks),
            "gpu_us": {m: round(f["ms"] * 1e3, 2) for m, f in figures.items()
                       if measured and f.get("ms") is not None},
            "fraction": {m: round(f["fraction"], 4) for m, f in figures.items()
                         if measured and f.get("fraction") is not None},
            "ended": r.ended or "", "error": error_reason(r),
            # per mode: the graded GPU time (us), how it was timed, the host time, and each
            # baseline's GPU time: what the repeatability table reads (grader.tools.benchdoc)
            "figures": {mode: {"us": round(f["ms"] * 1e3, 2), "method": f.get("method"),
                               "host_us": round(f["host_ms"] * 1e3, 2)
                               if f.get("host_ms") is not None else None,
                               "baselines_us": {n: round(b["ms"] * 1e3, 2)
                                                for n, b in (f.get("baselines") or {}).items()
                                                if "ms" in b}}
                        for mode, f in figures.items() if f.get("ms") is not None}}


def junit(rows: list[tuple[Exercise, TrackResult, Score]], *, seconds: float) -> str:
    """JUnit XML (what CI systems read): a testsuite per track, a testcase per check and one for
    the track's performance; a failure carries the same message the scorecard shows; a check
    that needs a GPU, or never ran after a crash, is a skipped testcase with that reason."""
    root = ET.Element("testsuites", name="grader", time=f"{seconds:.1f}")
    for ex, r, s in rows:
        suite = ET.SubElement(root, "testsuite", name=f"{ex.id}.{r.track}")
        tampered = "TAMPERING:\n" + "\n".join(r.tampering) if r.tampering else ""
        if r.review:
            props = ET.SubElement(suite, "properties")
            ET.SubElement(props, "property", name="needs_review", value="\n".join(r.review))
        cases = []

        def case(name, time=None):
            c = ET.SubElement(suite, "testcase", classname=f"{ex.id}.{r.track}", name=name)
            if time is not None:
                c.set("time", f"{time:.3f}")
            cases.append(c)
            return c
        for c in r.checks:
            tc = case(c.name, c.seconds)
            if tampered:
                ET.SubElement(tc, "failure", message=r.tampering[0][:300],
                              type="tampering").text = tampered
            elif c.outcome in ("failed", "crashed"):
                f = ET.SubElement(tc, "failure", message=(c.message.splitlines() or [c.outcome])[0][:300],
                                  type=c.outcome)
                f.text = "\n".join([c.message or c.outcome] + c.details())
            elif c.outcome == "not run":
                ET.SubElement(tc, "skipped", message=_not_run_reason(r)[:300])
            elif c.outcome != "passed":
                ET.SubElement(tc, "skipped", message=c.message or c.outcome)
        if not r.build.get("ok") or r.tampering:
            tc = case("build")
            msg = tampered or r.build.get("message") or r.ended or "not built"
            ET.SubElement(tc, "failure", message=msg.splitlines()[0][:300],
                          type="tampering" if r.tampering else "build").text = msg
        if ex.points["performance"]:
            tc = case("performance")
            p = r.performance or {}
            if tampered:
                ET.SubElement(tc, "failure", message="tampering", type="tampering").text = tampered
            elif p.get("status") in ("measured", "rejected"):
                text = performance_text(p, s)
                if s.performance <= 0:
                    ET.SubElement(tc, "failure", message="no performance credit",
                                  type="performance").text = text
                else:
                    ET.SubElement(tc, "system-out").text = text
            elif p.get("status", "not measured") in NO_GPU:
                ET.SubElement(tc, "skipped", message=p.get("status", "not measured"))
            else:  # not timed because the checks failed: its points are lost
                ET.SubElement(tc, "failure", message=p["status"][:300],
                              type="performance").text = p["status"]
        if r.review:
            tc = case("needs review")
            ET.SubElement(tc, "skipped", message="needs review (no points taken)")
            ET.SubElement(tc, "system-out").text = "\n".join(r.review)
        suite.set("tests", str(len(cases)))
        suite.set("failures", str(sum(c.find("failure") is not None for c in cases)))
        suite.set("skipped", str(sum(c.find("skipped") is not None for c in cases)))
        suite.set("errors", "0")
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"


def write_json(path: Path, data: dict) -> None:
    """Whole or not at all: written beside, then renamed (a reader, or a batch resuming after a
    stop, never sees half a results.json)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    os.replace(tmp, path)
