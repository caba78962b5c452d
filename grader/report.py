"""Report: the terminal scorecard, the per-track feedback, and `make bench`'s tables and plot
(Gradescope's results.json and JUnit XML: grader.gradescope)."""
from __future__ import annotations

import json
import textwrap
from pathlib import Path

from grader.discover import Exercise
from grader.results import TrackResult
from grader.score import Score
from grader.timing import CEILINGS

DASH = "—"


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


def _perf_cell(r: TrackResult) -> str:
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
    if r.tampering:
        return (f"{head}: TAMPERING: the submission changed, or tried to write, files of the "
                f"grader or the repository; the track scores 0 (the files were restored):\n" +
                _indent("\n".join(r.tampering[:8])))
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
        text = performance_text(p) if full else performance_line(p)
        out.append(f"{head}: performance\n{_indent(text)}")
        if any(f.get("host_bound") for f in p.get("figures", {}).values()):
            out.append(_indent(HOST_BOUND_HINT))
    elif p and p.get("status", "").startswith("not measured:"):
        out.append(f"{head}: performance {p['status']}")
    return "\n".join(out)


def performance_line(p: dict) -> str:
    """One line per mode: time, fraction of the ceiling, speedup over each baseline."""
    lines = []
    for mode, f in p["figures"].items():
        speed = ", ".join(f"{v:.2f}x {k}" for k, v in f.get("speedup", {}).items())
        frac = f", {100 * f['fraction']:.0f}% of {p['ceiling_name']}" if f.get("fraction") else ""
        host = f", host {f['host_ms'] * 1e3:.0f} us/call" if f.get("host_ms") is not None else ""
        lines.append(f"{mode}: {f['ms'] * 1e3:.1f} us{frac}{host}; {speed}")
    if p.get("credit") is not None:
        lines.append(f"performance credit {100 * p['credit']:.0f}%" +
                     "".join(f"; warning: {w}" for w in p.get("warnings", [])))
    return "\n".join(lines)


def performance_text(p: dict) -> str:
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
    for t in p.get("thresholds", []):
        lines.append(f"threshold {t['label']}: {t['value_text']} (pass {t['pass']}, full "
                     f"{t['full']}) -> {100 * t['credit']:.0f}% credit")
    if p.get("warnings"):
        lines += [f"warning: {w}" for w in p["warnings"]]
    return "\n".join(lines)


def _indent(text: str, n: int = 4) -> str:
    return textwrap.indent(text, " " * n)


# --- make bench: the side-by-side tables and the plot ------------------------------------------

def _sweep_key(cases: list[dict]) -> str:
    """The case field that varies along the sweep (the x axis)."""
    keys = [k for k in cases[0] if len({json.dumps(c[k]) for c in cases}) > 1]
    return keys[0] if keys else next(iter(cases[0]))


def _series(ex: dict, mode: str) -> dict[str, list]:
    """name -> [(x, rate or None)] over the sweep, for each implementation and baseline."""
    cases = [m["case"] for m in ex["sweep"]]
    key = _sweep_key(cases)
    series: dict[str, list] = {}
    for m in ex["sweep"]:
        row = m["figures"].get(mode)
        if row is None:
            continue
        for name, t in list(row["impls"].items()) + list(row["baselines"].items()):
            series.setdefault(name, []).append((m["case"][key], t.get("rate")))
    return series


def _reruns(first: dict, others: list, mode: str, name: str) -> str:
    """The other repeats of one row: their medians and the largest difference from the first."""
    again = [(o["figures"][mode]["impls"].get(name) or o["figures"][mode]["baselines"].get(name)
              or {}) for o in others]
    ms = [a["ms"] for a in again if "ms" in a]
    if not ms or "ms" not in first:
        return ""
    worst = max((m / first["ms"] - 1 for m in ms), key=abs)
    shown = ", ".join(f"{m * 1e3:.1f}" for m in ms)
    return f"{shown} ({100 * worst:+.1f}%)"


def _graded_tables(graded: list, unit: str, ceiling_value: float) -> list[str]:
    """One table per mode: every track and baseline at one case, with the repeats beside."""
    out = []
    first, others = graded[0], graded[1:]
    for mode, row in first["figures"].items():
        out += [f"**{mode}**", "", f"| implementation | median µs | p20-p80 µs | {unit} | "
                f"% of ceiling | vs fastest track | repeats µs (largest Δ) | host µs/call |",
                "|---|---|---|---|---|---|---|---|"]
        names = list(row["impls"]) + list(row["baselines"])
        best = min((t["ms"] for t in row["impls"].values() if "ms" in t), default=None)
        for name in names:
            t = row["impls"].get(name) or row["baselines"].get(name)
            if "ms" not in t:
                out.append(f"| {name} | {t.get('error', 'did not run')} | | | | | | |")
                continue
            frac = f"{100 * t['rate'] / ceiling_value:.1f}%"
            ratio = f"{t['ms'] / best:.2f}x" if best else ""
            host = f"{t['host_ms'] * 1e3:.0f}" if t.get("host_ms") is not None else ""
            if t.get("host_bound"):
                host += " (host-bound)"
            out.append(f"| {name} | {t['ms'] * 1e3:.1f} | {t['p20'] * 1e3:.1f}-"
                       f"{t['p80'] * 1e3:.1f} | {t['rate']:.0f} | {frac} | {ratio} | "
                       f"{_reruns(t, others, mode, name)} | {host} |")
        out.append("")
    for name, why in first.get("checks", {}).items():
        if why:
            out.append(f"- **{name}: output after timing differs from the reference**: "
                       f"{why.splitlines()[0]}")
    return out


def bench_markdown(data: dict) -> str:
    meta = data["meta"]
    out = [f"# Benchmark: {meta['tree']}",
           "Median of `triton.testing.do_bench` (L2 flushed between runs); rates count the "
           "fewest bytes (or flops) the op must move; % is of the ceiling measured in the same "
           "run; host µs/call is the CPU time to enqueue one call (or one forward+backward "
           "step) with the GPU kept busy, so the host never waits; host-bound when it exceeds "
           "the GPU time. Each exercise says where and when it was measured (`make bench "
           "EXERCISE=NN` re-measures one and keeps the others).", ""]
    for ex in data["exercises"]:
        m = ex.get("measured") or meta
        where = (f"{m['device']}, torch {m['torch']}, triton {m['triton']}, {m['date']}"
                 + (f", {ex['seconds']:.0f} s" if ex.get("seconds") else ""))
        if "error" in ex:
            out += [f"## {ex['exercise']}", f"({where})", "", f"error: {ex['error']}", ""]
            continue
        unit = CEILINGS[ex["ceiling"]].unit
        out += [f"## {ex['exercise']} ({ex['dtype']}, case {ex['graded_case']})",
                f"({where}) ceiling: {ex['ceiling']} = {ex['ceiling_value']:.4g} {unit}", ""]
        out += _graded_tables(ex["graded"], unit, ex["ceiling_value"])
        for name, why in ex.get("load_errors", {}).items():
            out.append(f"- {name}: could not load: {why}")
        for mode in ex["graded"][0]["figures"] if ex["sweep"] else ():
            series = _series(ex, mode)
            if not series:
                continue
            key = _sweep_key([m["case"] for m in ex["sweep"]])
            xs = [x for x, _ in next(iter(series.values()))]
            out += [f"sweep over {key} ({mode}, {unit}):", "",
                    "| " + key + " | " + " | ".join(series) + " |",
                    "|---" * (len(series) + 1) + "|"]
            for i, x in enumerate(xs):
                cells = [f"{s[i][1]:.0f}" if i < len(s) and s[i][1] else "—" for s in series.values()]
                out.append(f"| {x} | " + " | ".join(cells) + " |")
            out.append("")
        for extra in ex.get("extras", []):
            eunit = CEILINGS[extra["ceiling"]].unit
            how = (f"the track's `{extra['call']}` inside reference.{extra['wrap']}, the whole "
                   f"model under torch.compile; each baseline inside the same model"
                   if extra.get("wrap") else f"entry point `{extra['call']}`")
            out += [f"### {ex['exercise']}: {extra['name']} ({extra['dtype']}, case "
                    f"{extra['case']})", f"{how}; ceiling: {extra['ceiling']} = "
                    f"{extra['ceiling_value']:.4g} {eunit}", ""]
            out += _graded_tables(extra["graded"], eunit, extra["ceiling_value"])
    return "\n".join(out) + "\n"


def bench_plot(data: dict, path: Path) -> None:
    """One panel per exercise and mode: rate vs size, a line per implementation."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    exs = [e for e in data["exercises"] if "error" not in e and e["sweep"]]
    if not exs:
        return
    modes = max(len(e["sweep"][0]["figures"]) for e in exs)
    fig, axes = plt.subplots(len(exs), modes, figsize=(6 * modes, 3.6 * len(exs)), squeeze=False)
    for r, ex in enumerate(exs):
        unit = CEILINGS[ex["ceiling"]].unit
        key = _sweep_key([m["case"] for m in ex["sweep"]])
        for c, mode in enumerate(ex["sweep"][0]["figures"]):
            ax = axes[r][c]
            for name, pts in _series(ex, mode).items():
                pts = [(x, y) for x, y in pts if y]
                if pts:
                    ax.plot(*zip(*pts), marker="o", label=name,
                            linewidth=2.5 if name in ex["sweep"][0]["figures"][mode]["impls"] else 1.2)
            ax.axhline(ex["ceiling_value"], color="gray", linestyle="--", label="ceiling")
            ax.set_xscale("log", base=2)
            ax.set_xlabel(key)
            ax.set_ylabel(unit)
            ax.set_title(f"{ex['exercise']} {mode} ({ex['dtype']})")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7)
        for c in range(len(ex["sweep"][0]["figures"]), modes):
            axes[r][c].axis("off")
    meta = data["meta"]
    devices = sorted({(e.get("measured") or meta)["device"] for e in exs})
    dates = sorted({(e.get("measured") or meta)["date"][:10] for e in exs})
    fig.suptitle(f"{meta['tree']} on {', '.join(devices)} (torch {meta['torch']}, "
                 f"{' to '.join([dates[0], dates[-1]] if len(dates) > 1 else dates)})")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
