"""Report: the terminal scorecard and the per-track feedback, and Gradescope's results.json and
JUnit XML (the same figures, for a course's tools)."""
from __future__ import annotations

import io
import json
import textwrap
from pathlib import Path

from grader.discover import Exercise
from grader.paths import ROOT
from grader.results import TrackResult
from grader.score import Score

DASH = "—"


def write_reports(grade, *, full: bool, repro: str | None = None, json_path=None,
                  junit_path=None) -> str:
    """The scorecard and feedback a learner reads (returned), and the files asked for:
    Gradescope's results.json and JUnit XML. `grade`: a grader.grade.Grade."""
    rel = grade.tree.relative_to(ROOT) if grade.tree.is_relative_to(ROOT) else grade.tree
    table = scorecard(grade.rows, title=f"Scorecard for {rel}  ({_machine(grade.gpu)})")
    notes = [n for n in (feedback(ex, r, s, full=full) for ex, r, s in grade.rows) if n]
    out = ["", table] + (["", "\n\n".join(notes)] if notes else [])
    if repro:
        out.append(f"\nREPRO: only {repro.partition('@')[0]} ran, on its failing example; the "
                   f"points above are not a score (run without REPRO for that)")
    if json_path:
        write_json(Path(json_path), gradescope(grade.rows, seconds=grade.seconds, summary=table))
        out.append(f"\nresults.json (Gradescope format): {json_path}")
    if junit_path:
        Path(junit_path).parent.mkdir(parents=True, exist_ok=True)
        Path(junit_path).write_text(junit(grade.rows, seconds=grade.seconds))
        out.append(f"JUnit XML: {junit_path}")
    return "\n".join(out)


def _machine(gpu: str | None) -> str:
    import torch
    try:
        import triton
        tv = triton.__version__
    except ImportError:
        tv = "not installed"
    where = gpu or ("no GPU: Triton tracks run on the interpreter (small shapes); CUDA tracks "
                    "are built, and their GPU checks reported as 'needs a GPU'")
    return f"{where}; torch {torch.__version__}, triton {tv}"


HOST_BOUND_HINT = ("host-bound: enqueuing one call costs more CPU time than the GPU spends on it, "
                   "so in a real step the GPU waits for Python. What costs host time in a custom "
                   "op call: the dispatcher and autograd plumbing of each op (one op instead of "
                   "several), Triton's launcher (fewer launches, constexpr arguments instead of "
                   "per-call Python work), per-call device queries and allocations (hoist them); "
                   "torch.compile or CUDA graphs remove most of it")


def _build_cell(r: TrackResult) -> str:
    b = r.build
    if r.tampering:
        return "TAMPERING"
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


def _perf_cell(r: TrackResult, s: Score) -> str:
    p = r.performance
    if p is None:
        return DASH if not r.build.get("ok") else "not measured"
    if p.get("status") != "measured":
        return p.get("status", "?")
    if p.get("problem"):
        return "rejected"
    fwd = p["figures"].get("forward", {})
    parts = [] if r.all_correct else ["no points until every check passes"]
    if fwd.get("fraction") is not None:
        parts.append(f"{100 * fwd['fraction']:.0f}% of {p['ceiling_name']}")
    eager = (fwd.get("speedup") or {}).get("eager")
    if eager:
        parts.append(f"{eager:.1f}x eager")
    if any(f.get("host_bound") for f in p["figures"].values()):
        parts.append("host-bound")
    return ", ".join(parts) or "measured"


def scorecard(rows: list[tuple[Exercise, TrackResult, Score]], *, title: str) -> str:
    """The table a learner reads first: one row per track, then the total (rich renders it;
    plain text, so the same table goes into results.json and a log)."""
    from rich import box
    from rich.console import Console
    from rich.table import Table
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    for name in ("#", "exercise", "track", "build", "correctness", "gradcheck", "performance",
                 "points"):
        table.add_column(name, overflow="fold")
    total = maximum = 0.0
    for ex, r, s in rows:
        table.add_row(ex.number, ex.name, r.track, _build_cell(r), _checks_cell(r, "correctness"),
                      _checks_cell(r, "gradcheck"), _perf_cell(r, s),
                      f"{s.total:.1f}/{s.max_points}" + (" NEEDS REVIEW" if r.review else ""))
        total += s.total
        maximum += s.max_points
    console = Console(width=200, color_system=None, force_terminal=False, record=True,
                      file=io.StringIO())
    console.print(table)
    text = "\n".join(line.rstrip() for line in console.export_text().splitlines())
    return f"{title}\n\n{text.strip(chr(10))}\n\ntotal: {total:.1f} / {maximum:.0f} points"


def feedback(ex: Exercise, r: TrackResult, s: Score, *, full: bool = False) -> str:
    """What a learner reads under the table: where to start, what failed, and why."""
    head = f"{ex.number} {ex.name} [{r.track}]"
    track = ex.tracks[r.track]
    if r.tampering:
        return (f"{head}: TAMPERING: the submission changed, or tried to write, files of the "
                f"grader or the repository; the track scores 0 (the files were restored):\n" +
                _indent("\n".join(r.tampering[:8])))
    review = (f"{head}: NEEDS REVIEW: the judge read this track's sources and found what a "
              f"kernel never needs; the points stand until an instructor looks:\n" +
              _indent("\n".join(r.review[:8]))) if r.review else ""
    if r.build and not r.build.get("ok"):
        return "\n".join(x for x in (review, f"{head}: {r.build.get('stage')} failed\n"
                                      f"{_indent(r.build.get('message', ''))}") if x)
    if r.not_implemented:
        return f"{head}: not implemented yet. Start here: {track.start}"
    out = [review] if review else []
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
        msg = "\n".join([msg] + c.details())
        out.append(f"  FAIL {c.name}{where}\n{_indent(msg, 6)}")
    if len(failed) > len(shown):
        out.append("  also failed: " + ", ".join(c.name for c in failed[len(shown):]))
    if r.sanitizer:
        z = r.sanitizer
        if z.get("unavailable"):
            out.append(f"{head}: SANITIZE={z.get('tool')}: {z['unavailable']}")
        elif z.get("findings"):
            out.append(f"{head}: compute-sanitizer {z.get('tool')} found:\n" +
                       _indent("\n".join(z["findings"])))
        else:
            out.append(f"{head}: compute-sanitizer {z.get('tool')}: no errors in the checks that ran")
        if not z.get("unavailable"):
            out.append("    (under compute-sanitizer the profiler sees no GPU kernels: the rule "
                       "\"your kernels do the work\" was checked for PyTorch ops only)")
    p = r.performance
    if p and p.get("status") in ("measured", "rejected"):
        text = performance_text(p, s) if full else performance_line(p, s)
        out.append(f"{head}: performance\n{_indent(text)}")
        if any(f.get("host_bound") for f in p.get("figures", {}).values()):
            out.append(_indent(HOST_BOUND_HINT))
    elif p and p.get("status", "").startswith("not measured:"):
        out.append(f"{head}: performance {p['status']}")
    return "\n".join(out)


def performance_line(p: dict, s: Score) -> str:
    """One line per mode: time, fraction of the ceiling, speedup over each baseline."""
    lines = []
    for mode, f in p["figures"].items():
        speed = ", ".join(f"{v:.2f}x {k}" for k, v in f.get("speedup", {}).items())
        frac = f", {100 * f['fraction']:.0f}% of {p['ceiling_name']}" if f.get("fraction") else ""
        host = f", host {f['host_ms'] * 1e3:.0f} us/call" if f.get("host_ms") is not None else ""
        lines.append(f"{mode}: {f['ms'] * 1e3:.1f} us{frac}{host}; {speed}")
    if s.credit is not None:
        lines.append(f"performance credit {100 * s.credit:.0f}%" +
                     "".join(f"; warning: {w}" for w in p.get("warnings", [])))
    return "\n".join(lines)


def performance_text(p: dict, s: Score) -> str:
    lines = [f"case {p['case']} {p['dtype']}; ceiling: {p['ceiling_name']} "
             f"{p['ceiling_value']:.4g} {p['ceiling_unit']} (measured on this GPU)"]
    for mode, f in p["figures"].items():
        rate = f"{f['rate']:.4g} {p['ceiling_unit']}" if f.get("rate") else ""
        frac = f" = {100 * f['fraction']:.1f}% of the ceiling" if f.get("fraction") else ""
        lines.append(f"{mode}: median {f['ms'] * 1e3:.1f} us (p20-p80 {f['p20'] * 1e3:.1f}-"
                     f"{f['p80'] * 1e3:.1f}), {rate}{frac}")
        if f.get("wall_ms") is not None:
            lines.append(f"    judge's wall clock over {f.get('batch', '?')} validated calls: "
                         f"{f['wall_ms'] * 1e3:.1f} us per call")
        if f.get("host_ms") is not None:
            lines.append(f"    host time to enqueue one call: {f['host_ms'] * 1e3:.1f} us"
                         + (" (host-bound)" if f.get("host_bound") else ""))
        for name, b in (f.get("baselines") or {}).items():
            if "ms" in b:
                host = f", host {b['host_ms'] * 1e3:.0f} us" if b.get("host_ms") else ""
                cached = " (QUICK: cached)" if b.get("cached") else ""
                lines.append(f"    vs {name}: {b['ms'] * 1e3:.1f} us{host}{cached} -> "
                             f"{f['speedup'][name]:.2f}x")
            else:
                lines.append(f"    vs {name}: {b.get('error', 'did not run')}")
    for t in s.thresholds:
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
                              "output": "\n".join([c.message] + c.details()) if not ok else ""})
        if ex.points["performance"]:
            p = r.performance or {}
            tests.append({"name": f"{label} performance", "score": round(s.performance, 4),
                          "max_score": ex.points["performance"],
                          "status": "passed" if s.performance > 0 else "failed",
                          "output": performance_text(p, s) if p.get("status") in
                          ("measured", "rejected") else p.get("status", "not measured")})
        if r.tampering:
            tests.append({"name": f"{label} tampering", "score": 0, "max_score": 0,
                          "status": "failed", "output": "\n".join(r.tampering)})
    return {"score": round(sum(s.total for _, _, s in rows), 4),
            "execution_time": round(seconds, 1), "output": summary, "tests": tests,
            "extra_data": {"tracks": [track_summary(ex, r, s) for ex, r, s in rows]}}


def track_summary(ex: Exercise, r: TrackResult, s: Score) -> dict:
    """One track in a line (results.json's extra_data, which Gradescope keeps and does not
    show): points and the flags `grader batch` puts in a class summary."""
    figures = (r.performance or {}).get("figures") or {}
    return {"exercise": ex.id, "track": r.track, "points": round(s.total, 4),
            "max_points": s.max_points, "built": bool(r.build.get("ok")),
            "tampering": bool(r.tampering), "needs_review": r.review[:20],
            # the op ran and PyTorch (or a library) did its work; a stub whose every call
            # raised fails that check too, with nothing to judge: not delegation
            "delegation": any(c.name == "your kernels do the work" and c.outcome == "failed"
                              and "nothing to judge" not in c.message for c in r.checks),
            "host_bound": any(f.get("host_bound") for f in figures.values()),
            "ended": r.ended or "",
            # per mode: the graded GPU time (us), how it was timed, the host time, and each
            # baseline's GPU time: what a class summary and the repeatability table read
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
    that needs a GPU is a skipped testcase with that reason."""
    from xml.etree import ElementTree as ET
    root = ET.Element("testsuites", name="grader", time=f"{seconds:.1f}")
    for ex, r, s in rows:
        suite = ET.SubElement(root, "testsuite", name=f"{ex.id}.{r.track}")
        cases = []
        for c in r.checks:
            case = ET.SubElement(suite, "testcase", classname=f"{ex.id}.{r.track}", name=c.name,
                                 time=f"{c.seconds:.3f}")
            if c.outcome in ("failed", "crashed", "not run"):
                f = ET.SubElement(case, "failure", message=(c.message.splitlines() or [c.outcome])[0][:300],
                                  type=c.outcome)
                f.text = "\n".join([c.message or c.outcome] + c.details())
            elif c.outcome != "passed":
                ET.SubElement(case, "skipped", message=c.message or c.outcome)
            cases.append(case)
        if not r.build.get("ok") or r.tampering:
            case = ET.SubElement(suite, "testcase", classname=f"{ex.id}.{r.track}", name="build")
            msg = "\n".join(r.tampering) or r.build.get("message") or r.ended or "not built"
            ET.SubElement(case, "failure", message=msg.splitlines()[0][:300],
                          type="tampering" if r.tampering else "build").text = msg
            cases.append(case)
        if ex.points["performance"]:
            case = ET.SubElement(suite, "testcase", classname=f"{ex.id}.{r.track}",
                                 name="performance")
            p = r.performance or {}
            if p.get("status") in ("measured", "rejected"):
                text = performance_text(p, s)
                if s.performance <= 0:
                    ET.SubElement(case, "failure", message="no performance credit",
                                  type="performance").text = text
                else:
                    ET.SubElement(case, "system-out").text = text
            else:
                ET.SubElement(case, "skipped", message=p.get("status", "not measured"))
            cases.append(case)
        suite.set("tests", str(len(cases)))
        suite.set("failures", str(sum(c.find("failure") is not None for c in cases)))
        suite.set("skipped", str(sum(c.find("skipped") is not None for c in cases)))
        suite.set("errors", "0")
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"


def write_json(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n")

