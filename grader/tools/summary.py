"""Summary: a class's results read back from what the graded folder holds now: summary.csv
(one row per submission and track: points, flags, the real reason a track was not graded
whole) and the dashboard (grader.tools.dashboard); and the class's submissions, found and
unpacked. Used by grader.tools.batch and grader.tools.slurm, and by --collect at any time (whole
results.json files only: safe while other processes still grade into the folder).
"""
from __future__ import annotations

import csv
import io
import json
import os
import re
import shutil
import threading
import zipfile
from pathlib import Path

from grader.tools.dashboard import render

FIELDS = ["submission", "exercise", "track", "points", "max_points", "tampering", "delegation",
          "needs_review", "host_bound", "crashed", "failed", "not_run", "gpu_us", "error"]
_EXERCISE_DIR = re.compile(r"^\d\d_\w+$")
MAX_UNZIPPED = 512 << 20   # bytes: a submission is source files, never this large
MAX_MEMBERS = 10000
MANIFEST = "submissions.tsv"  # DIR/.grader/: every submission of the class (name, path)


def find_submissions(folder: Path) -> list[tuple[str, Path]]:
    """(name, folder or zip) for every submission, sorted by name; hidden entries skipped."""
    found: dict[str, Path] = {}
    for entry in sorted(folder.iterdir()):
        if entry.name.startswith((".", "_")):
            continue
        if entry.is_dir():
            name = entry.name
        elif entry.is_file() and entry.suffix.lower() == ".zip":
            name = entry.stem
        else:
            continue
        if name in found:  # alice/ and alice.zip: keep both, apart
            name = entry.name
        found[name] = entry
    return sorted(found.items())


def tree_root(path: Path) -> Path:
    """The folder holding the exercise folders: the submission itself, or the one folder it
    wraps them in (a zip of `alice/`, or of `starter/`)."""
    for _ in range(3):
        children = [c for c in path.iterdir() if not c.name.startswith((".", "__MACOSX"))]
        if any(c.is_dir() and _EXERCISE_DIR.match(c.name) for c in children):
            return path
        dirs = [c for c in children if c.is_dir()]
        if len(dirs) != 1 or len(children) != 1:
            return path
        path = dirs[0]
    return path


def unpack(zpath: Path, dest: Path) -> None:
    """Unpack a learner's zip: regular files only, every path inside `dest`, bounded in size."""
    dest = dest.resolve()
    with zipfile.ZipFile(zpath) as z:
        members = z.infolist()
        if len(members) > MAX_MEMBERS:
            raise ValueError(f"{len(members)} files in the zip (at most {MAX_MEMBERS})")
        if sum(m.file_size for m in members) > MAX_UNZIPPED:
            raise ValueError(f"more than {MAX_UNZIPPED >> 20} MB unzipped")
        for m in members:
            target = (dest / m.filename).resolve()
            if not target.is_relative_to(dest):
                raise ValueError(f"{m.filename}: a path outside the submission")
            if m.is_dir():
                target.mkdir(parents=True, exist_ok=True)
                continue
            if (m.external_attr >> 16) & 0o170000 not in (0, 0o100000):
                continue  # a symlink or a device: not source code
            target.parent.mkdir(parents=True, exist_ok=True)
            with z.open(m) as src, open(target, "wb") as dst:
                shutil.copyfileobj(src, dst)


def track_rows(name: str, results: dict) -> list[dict]:
    """The summary rows of one results.json: its extra_data, or, for a results.json without
    it, the same figures read back from its tests."""
    tracks = (results.get("extra_data") or {}).get("tracks")
    if tracks is None:
        tracks = _tracks_from_tests(results.get("tests", []))
    flag = lambda t, k: int(bool(t.get(k)))  # noqa: E731
    return [{"submission": name, "exercise": t["exercise"], "track": t["track"],
             "points": round(float(t["points"]), 2), "max_points": t["max_points"],
             "tampering": flag(t, "tampering"), "delegation": flag(t, "delegation"),
             "needs_review": flag(t, "needs_review"), "host_bound": flag(t, "host_bound"),
             "crashed": flag(t, "crashed"), "failed": t.get("failed", ""),
             "not_run": t.get("not_run", ""),
             "gpu_us": (t.get("gpu_us") or {}).get("forward", ""),
             "error": t.get("error", t.get("ended", ""))}
            for t in tracks]


def _tracks_from_tests(tests: list[dict]) -> list[dict]:
    label = re.compile(r"^(\d\d) (\S+) \[([^\]]+)\] (.*)$")
    tracks: dict[tuple, dict] = {}
    for t in tests:
        m = label.match(t.get("name", ""))
        if not m:
            continue
        number, ex, track, what = m.groups()
        row = tracks.setdefault((number, ex, track), {
            "exercise": f"{number}_{ex}", "track": track, "points": 0.0, "max_points": 0.0,
            "tampering": False, "delegation": False, "host_bound": False, "needs_review": False,
            "crashed": False, "failed": 0, "not_run": 0})
        row["points"] += t.get("score", 0)
        row["max_points"] += (t.get("extra_data") or {}).get("points_at_stake",
                                                             t.get("max_score", 0))
        failed = t.get("status") == "failed"
        tags = t.get("tags") or []
        if what not in ("performance", "tampering", "needs review"):
            row["failed"] += "failed" in tags or "crashed" in tags
            row["not_run"] += "not run" in tags
        row["crashed"] |= "crashed" in tags or "not run" in tags
        row["tampering"] |= what == "tampering"
        row["needs_review"] |= what == "needs review"
        row["delegation"] |= (what == "your kernels do the work" and failed
                              and "nothing to judge" not in t.get("output", ""))
        row["host_bound"] |= what == "performance" and "(host-bound)" in t.get("output", "")
    for row in tracks.values():
        row["max_points"] = round(row["max_points"])
    return list(tracks.values())


def write_manifest(out: Path, subs: list[tuple[str, Path]]) -> None:
    """DIR/.grader/submissions.tsv: the class as last submitted, so --collect lists the
    submissions not graded yet too."""
    folder = out / ".grader"
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f"{MANIFEST}.{os.getpid()}"
    tmp.write_text("".join(f"{n}\t{p.resolve()}\n" for n, p in subs))
    os.replace(tmp, folder / MANIFEST)


def read_manifest(out: Path) -> list[tuple[str, Path]]:
    path = out / ".grader" / MANIFEST
    return read_tsv(path) if path.is_file() else []


def read_tsv(path: Path) -> list[tuple[str, Path]]:
    """(name, path) lines, as write_manifest and grader.tools.slurm's shards write them."""
    return [(n, Path(p)) for n, _, p in
            (line.partition("\t") for line in path.read_text().splitlines() if line)]


def collect(out: Path, log=print) -> list[dict]:
    """summary.csv and index.html from what `out` holds now (whole results.json files only:
    safe while other processes still grade into it)."""
    names = {n for n, _ in read_manifest(out)}
    names |= {d.name for d in out.iterdir() if d.is_dir() and not d.name.startswith(".")
              and any((d / f).is_file() for f in ("results.json", "error.txt", "output.txt"))}
    rows, results = [], {}
    for name in sorted(names):
        final = out / name / "results.json"
        if final.is_file():
            try:
                results[name] = json.loads(final.read_text())
                rows += track_rows(name, results[name])
                continue
            except (ValueError, KeyError) as e:
                err = f"unreadable results.json: {e}"
        elif (out / name / "error.txt").is_file():
            first = (out / name / "error.txt").read_text().splitlines()[:1]
            err = first[0] if first else "not graded: see error.txt"
        elif (out / name / "output.txt").is_file():
            err = "not graded yet (grading, or stopped: see output.txt)"
        else:
            err = "not graded yet"
        rows.append({**{k: "" for k in FIELDS}, "submission": name, "points": 0, "error": err})
    _write_atomic(out / "summary.csv", _csv(rows))
    _write_atomic(out / "index.html", render(out, results, rows))
    if log:
        graded = len(results)
        log(f"collected {out}: {graded} of {len(names)} submission(s) graded; "
            f"{out / 'summary.csv'} ({len(rows)} row(s)), {out / 'index.html'}")
    return rows


def _csv(rows: list[dict]) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=FIELDS, lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
    return buf.getvalue()


def _write_atomic(path: Path, text: str) -> None:
    """A reader (or another collect, in a Slurm task beside this one) sees a whole file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}")
    tmp.write_text(text)
    os.replace(tmp, path)
