"""Report: the terminal scorecard and the per-track feedback a learner reads (Gradescope's
results.json and JUnit XML, from the same rows: grader.run.gradescope)."""
from __future__ import annotations

import importlib.metadata
import importlib.util
import io
import re
import sys
import textwrap
from pathlib import Path

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from grader.common.discover import Exercise
from grader.run.results import TrackResult
from grader.run.score import Score

DASH = "—"


def machine(gpu: str | None) -> str:
    """The scorecard's title line: where it was graded."""
    where = gpu or ("no GPU: Triton tracks run on the interpreter (small shapes); CUDA tracks "
                    "are built, and their GPU checks reported as 'needs a GPU'")
    return f"{where}; torch {_version('torch')}, triton {_version('triton')}"


def _version(package: str) -> str:
    """An installed package's version as it says it (torch's with its build: 2.14.1+cu130),
    without importing it where this process has not (the grading process imports torch only
    where there is a GPU driver, grader.run.grade): torch keeps it in torch/version.py."""
    if package in sys.modules:
        return str(getattr(sys.modules[package], "__version__", "?"))
    spec = importlib.util.find_spec(package)
    if spec is None or spec.origin is None:
        return "not installed"
    text = (Path(spec.origin).parent / "version.py")
    m = re.search(r"^__version__\s*=\s*['\"]([^'\"]+)", text.read_text(), re.M) \
        if text.is_file() else None
    return m.group(1) if m else importlib.metadata.version(package)


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
    if b.get("stage") == "starter":  # the starter as shipped (grader.run.grade._unstarted)
        return "not built"
    return f"built {b['seconds']:.0f}s" if b.get("rebuilt") else f"cached {b['seconds']:.0f}s"


def _checks_cell(r: TrackResult, category: str) -> str:
    total = r.total(category)
    if not r.build.get("ok") or total == 0:
        return DASH
    if r.build.get("stage") == "starter":
        return "not started"
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
    skipped = r.count(category, "skipped")
    if skipped:
        cell += f" ({skipped} skipped)"
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


def scorecard(rows: list[tuple[Exercise, TrackResult, Score]], *, title: str,
              points: bool = True) -> str:
    """The table a learner reads first: one row per track, then the total (rich renders it;
    plain text, so the same table goes into results.json and a log). `points`: False for a run
    that is no grade (REPRO: one check on one example), which shows the checks and no points."""
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    for name in ("#", "exercise", "track", "build", "correctness", "gradcheck", "performance",
                 "points")[:None if points else -1]:
        table.add_column(name, overflow="fold")
    total = maximum = 0.0
    for ex, r, s in rows:
        cells = [ex.number, ex.name, r.track, _build_cell(r), _checks_cell(r, "correctness"),
                 _checks_cell(r, "gradcheck"), _perf_cell(r, s)]
        if points:
            cells.append(f"{s.total:.1f}/{s.max_points}" + (" NEEDS REVIEW" if r.review else ""))
        table.add_row(*cells)
        total += s.total
        maximum += s.max_points
    console = Console(width=200, color_system=None, force_terminal=False, record=True,
                      file=io.StringIO())
    console.print(table)
    text = "\n".join(line.rstrip() for line in console.export_text().splitlines())
    foot = f"\n\ntotal: {total:.1f} / {maximum:.0f} points" if points else ""
    return f"{title}\n\n{text.strip(chr(10))}{foot}"


def time_report(rows, seconds: float) -> str:
    """Where the grade's seconds went, per track (`--time-report`): the judge ready (process,
    imports, build), the build alone, the checks (and the slowest), the float64 references, the
    Triton specializations compiled and their seconds, the timing (baselines, the submission)."""
    def cell(d: dict, key: str) -> str:
        return f"{d[key]:.1f}" if key in d else DASH

    def compiles(c: dict | None) -> str:
        if not c or not c.get("specializations"):
            return DASH
        made = "would compile" if c.get("emulated") else f"{c['seconds']:.1f} s"
        return f"{c['specializations']} ({made})"
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    for name in ("track", "ready s", "build s", "checks s", "slowest check", "refs s",
                 "specializations", "timing s", "baselines s"):
        table.add_column(name, overflow="fold")
    for ex, r, _ in rows:
        t = r.times
        slowest = f"{t['slowest'][0][:40]} {t['slowest'][1]:.1f}" if "slowest" in t else DASH
        parts = t.get("timing_parts") or {}
        table.add_row(escape(f"{ex.number} [{r.track}]"), cell(t, "ready"), cell(t, "build"),
                      cell(t, "checks"), slowest, cell(t, "references"),
                      compiles(t.get("compiles")), cell(t, "timing"),
                      f"{parts['baselines']:.1f}" if "baselines" in parts else DASH)
    console = Console(width=200, color_system=None, force_terminal=False, record=True,
                      file=io.StringIO())
    console.print(table)
    text = "\n".join(line.rstrip() for line in console.export_text().splitlines())
    return f"Where the {seconds:.0f} s went (per track; checks run side by side, timings one " \
           f"at a time)\n\n{text.strip(chr(10))}"


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
        unchanged = " (the starter as shipped: not built or run)" \
            if r.build.get("stage") == "starter" else ""
        return f"{head}: not implemented yet{unchanged}. Start here: {track.start}"
    out = [review] if review else []
    if r.ended:
        crashed = next((c.name for c in r.checks if c.outcome == "crashed"), None)
        out.append(f"{head}: {r.ended}" + (f" during {crashed}" if crashed else ""))
        if full and r.log_tail:
            out.append(_indent("last output:\n" + r.log_tail))
    if r.stopped:
        out.append(f"{head}: checks stopped early: {r.stopped}")
    failed = [c for c in r.checks if c.outcome == "failed"]
    # checks that failed with the same words are said once (a forward-only 05: 22 checks, each
    # "start the backward: ..."), the others named under it
    groups: dict[str, list] = {}
    for c in failed:
        groups.setdefault(c.message, []).append(c)
    shown = list(groups.values()) if full else list(groups.values())[:3]
    if failed:
        out.append(f"{head}: {len(failed)} check(s) failed")
    for same in shown:
        c = same[0]
        where = f"  ({c.where})" if c.where else ""
        msg = c.message if full else "\n".join(c.message.splitlines()[:12])
        msg = "\n".join([msg] + c.details())
        out.append(f"  FAIL {c.name}{where}\n{_indent(msg, 6)}")
        if len(same) > 1:
            out.append(f"  FAIL the same way: {_names(same[1:])}")
    rest = [c for same in list(groups.values())[len(shown):] for c in same]
    if rest:
        out.append("  also failed: " + _names(rest))
    skips: dict[str, list] = {}  # left out on purpose (QUICK's), said once per reason
    for c in r.checks:
        if c.outcome == "skipped":
            skips.setdefault(c.message, []).append(c)
    for why, same in skips.items():
        out.append(f"{head}: skipped {_names(same)}: {why}")
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


def _names(checks) -> str:
    """Check names, a parametrized check's cases counted: 'test_a (3 cases), test_b[cpu]'."""
    by: dict[str, list[str]] = {}
    for c in checks:
        by.setdefault(c.name.split("[")[0], []).append(c.name)
    return ", ".join(names[0] if len(names) == 1 else f"{base} ({len(names)} cases)"
                     for base, names in by.items())


def performance_line(p: dict, s: Score) -> str:
    """One line per mode: time, fraction of the ceiling, speedup over each baseline (and a line
    when the baselines' figures were kept from an earlier grade on this GPU)."""
    lines = []
    kept = [b for f in p["figures"].values() for b in (f.get("baselines") or {}).values()
            if b.get("kept")]
    if kept:
        how = (f"each re-timed on fresh inputs within {100 * kept[0]['within']:.0f}%"
               if kept[0].get("within") else "QUICK: not re-timed")
        lines.append(f"baselines: figures kept from {min(b['kept'] for b in kept)} on this "
                     f"GPU, {how}")
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
                cached = ""
                if b.get("kept"):  # measured by an earlier grade on this GPU (and re-timed)
                    cached = f" (kept from {b['kept']}" + (
                        f", re-timed {b['relooked_ms'] * 1e3:.1f} us)" if b.get("relooked_ms")
                        else f", stands with {', '.join(b['with'])})" if b.get("with")
                        else ", QUICK: not re-timed)")
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


