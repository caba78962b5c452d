"""Dashboard: a class's results as one HTML page (OUT/index.html), plain HTML and inline SVG.

One row per student: the total, and per exercise the points, the GPU time of the graded case and
the flags (tampering, delegation, needs review, host-bound, crashed), the student's name linking
to the feedback they read (OUT/<name>/output.txt); above the table, a histogram of points per
exercise. No server and no script: the file opens from the shared filesystem as it is, and is
written again by every `batch` and `batch --collect`.
"""
from __future__ import annotations

import html
import time
from pathlib import Path

FLAGS = ("tampering", "delegation", "needs_review", "host_bound", "crashed")
LABEL = {"needs_review": "needs review", "host_bound": "host-bound"}
BINS = 10

STYLE = """
body { font: 14px system-ui, sans-serif; margin: 24px; color: #222; }
h1 { font-size: 20px; margin: 0 0 4px; }
.note { color: #666; margin: 0 0 16px; }
.hists { display: flex; flex-wrap: wrap; gap: 16px; margin-bottom: 20px; }
figure { margin: 0; }
figcaption { font-size: 12px; color: #444; }
table { border-collapse: collapse; }
th, td { border: 1px solid #ddd; padding: 4px 8px; vertical-align: top; text-align: left; }
th { background: #f4f4f4; position: sticky; top: 0; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
.track { white-space: nowrap; }
.gpu { color: #555; font-size: 12px; }
.flag { display: inline-block; border-radius: 3px; padding: 0 4px; margin: 1px; font-size: 11px;
        color: #fff; }
.tampering { background: #b00020; } .delegation { background: #d35400; }
.needs_review { background: #7b1fa2; } .host_bound { background: #1565c0; }
.crashed { background: #444; }
.error { color: #b00020; font-size: 12px; max-width: 28em; }
"""


def render(out: Path, results: dict[str, dict], rows: list[dict]) -> str:
    """The page for `results` (name -> results.json) and `rows` (summary.csv's rows: the
    submissions without a results.json, with their error)."""
    tracks = {name: (r.get("extra_data") or {}).get("tracks") or [] for name, r in results.items()}
    exercises = sorted({t["exercise"] for ts in tracks.values() for t in ts})
    errors = {}
    for row in rows:
        if row.get("error"):
            errors.setdefault(row["submission"], []).append(
                (f"{row['exercise']} [{row['track']}]: " if row.get("track") else "") + row["error"])
    names = sorted({r["submission"] for r in rows} | set(results))
    hists = "".join(_histogram(ex, [_points(tracks.get(n, []), ex) for n in names
                                    if n in results]) for ex in exercises)
    head = "".join(f"<th>{html.escape(ex)}</th>" for ex in exercises)
    body = []
    for name in names:
        ts = tracks.get(name, [])
        link = f'<a href="{html.escape(name)}/output.txt">{html.escape(name)}</a>'
        total = f"{sum(t['points'] for t in ts):.1f}/{sum(t['max_points'] for t in ts):g}" \
            if name in results else "—"
        cells = "".join(f"<td>{_cell([t for t in ts if t['exercise'] == ex])}</td>"
                        for ex in exercises)
        err = "<br>".join(html.escape(e) for e in errors.get(name, []))
        body.append(f'<tr><td>{link}</td><td class="num">{total}</td>{cells}'
                    f'<td class="error">{err}</td></tr>')
    graded = len(results)
    legend = " ".join(f'<span class="flag {f}">{LABEL.get(f, f)}</span>' for f in FLAGS)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>Class dashboard: {html.escape(out.name)}</title>
<style>{STYLE}</style></head>
<body>
<h1>Class dashboard: {html.escape(out.name)}</h1>
<p class="note">{graded} of {len(names)} submission(s) graded; written {time.strftime('%Y-%m-%d %H:%M:%S')}
 (python -m grader batch --collect refreshes it). GPU time: the graded case's median, forward
 (and forward+backward where timed). Flags: {legend}</p>
<div class="hists">{hists}</div>
<table id="class">
<thead><tr><th>student</th><th>total</th>{head}<th>error</th></tr></thead>
<tbody>
{chr(10).join(body)}
</tbody></table>
</body></html>
"""


def _points(ts: list[dict], ex: str) -> tuple[float, float]:
    mine = [t for t in ts if t["exercise"] == ex]
    return sum(t["points"] for t in mine), sum(t["max_points"] for t in mine)


def _cell(ts: list[dict]) -> str:
    lines = []
    for t in ts:
        gpu = t.get("gpu_us") or {}
        times = ", ".join(f"{'fwd+bwd ' if m == 'forward_backward' else ''}{v:.1f} µs"
                          for m, v in gpu.items())
        frac = (t.get("fraction") or {}).get("forward")
        if frac is not None:
            times += f" ({100 * frac:.0f}% of ceiling)"
        flags = "".join(f'<span class="flag {f}" title="{html.escape(_why(t, f))}">'
                        f"{LABEL.get(f, f)}</span>" for f in FLAGS if t.get(f))
        lines.append(f'<div class="track">{html.escape(t["track"])} {t["points"]:.1f}/'
                     f'{t["max_points"]:g}{flags}</div>'
                     + (f'<div class="gpu">{times}</div>' if times else ""))
    return "".join(lines) or "—"


def _why(t: dict, flag: str) -> str:
    if flag == "needs_review":
        return "\n".join(t.get("review") or [])
    if flag == "crashed":
        return t.get("ended", "")
    return t.get("error", "") if flag == "tampering" else ""


def _histogram(ex: str, points: list[tuple[float, float]]) -> str:
    """An SVG bar chart: how many students scored in each tenth of the exercise's points."""
    top = max((m for _, m in points), default=0) or 1
    counts = [0] * BINS
    for p, _ in points:
        counts[min(BINS - 1, int(BINS * p / top))] += 1
    w, h, pad = 24, 90, 18
    most = max(counts) or 1
    bars = []
    for i, c in enumerate(counts):
        bh = h * c / most
        x = pad + i * w
        bars.append(f'<rect x="{x + 2}" y="{pad + h - bh:.1f}" width="{w - 4}" height="{bh:.1f}" '
                    f'fill="#4a7bd0"><title>{c} student(s) with {top * i / BINS:g}-'
                    f'{top * (i + 1) / BINS:g} points</title></rect>')
        if c:
            bars.append(f'<text x="{x + w / 2}" y="{pad + h - bh - 3:.1f}" font-size="10" '
                        f'text-anchor="middle">{c}</text>')
    width = 2 * pad + BINS * w
    axis = (f'<line x1="{pad}" y1="{pad + h}" x2="{pad + BINS * w}" y2="{pad + h}" '
            f'stroke="#888"/><text x="{pad}" y="{pad + h + 14}" font-size="10">0</text>'
            f'<text x="{pad + BINS * w}" y="{pad + h + 14}" font-size="10" '
            f'text-anchor="end">{top:g}</text>')
    return (f'<figure><svg xmlns="http://www.w3.org/2000/svg" width="{width}" '
            f'height="{h + 2 * pad + 4}" role="img" aria-label="points in {html.escape(ex)}">'
            f'{"".join(bars)}{axis}</svg><figcaption>{html.escape(ex)}: points of '
            f'{len(points)} student(s)</figcaption></figure>')
