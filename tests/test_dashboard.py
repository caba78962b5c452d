"""The class dashboard (OUT/index.html) as a browser shows it: a class of 20 made of results.json
files written by the grader's own code (grader.run.gradescope over TrackResults), collected by
`python -m grader batch --collect`, rendered in headless Chromium (installed with apt-get when
missing), its table read back from the DOM, and a screenshot taken.

KEEP_DASHBOARD_PNG=docs/dashboard.png keeps the screenshot (the one in the docs is made so).
"""
import csv
import os
import random
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

from conftest import ROOT
from grader.common.discover import discover
from grader.run.gradescope import gradescope, write_json
from grader.run.results import Check, TrackResult
from grader.run.score import score

NAMES = ["ada", "bao", "chen", "dara", "eli", "fatima", "goran", "hana", "ivan", "jun", "kofi",
         "lena", "mateo", "nia", "omar", "priya", "quinn", "rosa", "sami", "tomas"]
# who gets which flag (the rest: a spread of correct, partly correct and unstarted work)
FLAGGED = {"eli": "tampering", "hana": "delegation", "kofi": "needs_review",
           "nia": "host_bound", "omar": "crashed"}
UNREADABLE = "quinn"   # a zip that could not be read: no results.json, an error.txt


def _track(ex, track, rng, flag=None):
    r = {}  # the TrackResult's fields, made once below
    names = ["test_matches_reference", "test_length_one_and_zero", "test_refuses_bad_input",
             "your kernels do the work"]
    quality = rng.choice([1.0, 1.0, 1.0, 0.75, 0.5, 0.0])
    outcomes = ["passed" if i < round(quality * len(names)) else "failed"
                for i in range(len(names))]
    if flag in ("host_bound", "needs_review", "tampering"):  # flagged on a working kernel
        outcomes = ["passed"] * len(names)
    if flag == "delegation":
        outcomes = ["passed"] * 3 + ["failed"]
    if flag == "crashed":
        outcomes = ["passed", "crashed", "not run", "not run"]
        r["ended"] = "crashed: a segmentation fault (SIGSEGV)"
    own_work = ("PyTorch ran aten::add: the op's work" if flag == "delegation" else
                "nothing to judge: every call raised")  # an unfinished kernel: no delegation
    r["checks"] = tuple(Check(n, "correctness", o, message="" if o == "passed" else
                              own_work if n.startswith("your") else "max abs error 0.5 at [3]")
                        for n, o in zip(names, outcomes))
    if flag == "tampering":
        r["tampering"] = ("grader/judge/check.py (changed)",)
    if flag == "needs_review":
        r["review"] = (f"{track}/kernel.py:12: sets an attribute of torch.library",)
    all_correct = all(c.outcome == "passed" for c in r["checks"])
    if all_correct and ex.benchmark is not None:
        fraction = rng.uniform(0.45, 0.97)
        # synthetic: the graded case's bytes at that fraction of a 4.4 TB/s copy ceiling
        ms = {"01": 3 * 2 ** 30, "06": 3 * 268e6}[ex.number] / (4.4e12 * fraction) * 1e3
        fig = {"ms": ms, "p20": ms, "p80": ms * 1.01, "rate": 4400 * fraction,
               "fraction": fraction, "speedup": {"eager": 1.0 + fraction},
               "host_bound": flag == "host_bound"}
        credit = min(1.0, max(0.0, (fraction - 0.6) / 0.25))
        r["performance"] = {"status": "measured", "case": ex.benchmark.case,
                         "dtype": ex.benchmark.dtype, "ceiling_name": "copy bandwidth",
                         "ceiling_value": 4400.0, "ceiling_unit": "GB/s", "credit": credit,
                         "thresholds": [], "figures": {"forward": fig}}
    return TrackResult(exercise=ex.id, track=track, tree="synthetic",
                       build={"ok": True, "stage": "import"}, **r)


def make_class(out: Path) -> None:
    """20 graded submissions of exercises 01 and 06 (grader.run.gradescope's results.json)."""
    rng = random.Random(20261126)
    exs = [discover(only="01")[0], discover(only="06")[0]]
    for name in NAMES:
        (out / name).mkdir(parents=True)
        if name == UNREADABLE:
            (out / name / "error.txt").write_text(
                "could not read quinn.zip: File is not a zip file\n")
            continue
        rows = []
        for ex in exs:
            for track in ex.tracks:
                flag = FLAGGED.get(name) if (ex.number, track) == ("06", "triton") else None
                r = _track(ex, track, rng, flag)
                rows.append((ex, r, score(ex, r)))
        write_json(out / name / "results.json", gradescope(rows, seconds=300, summary="..."))
        (out / name / "output.txt").write_text(f"Scorecard for {name}\n")


class _Table(HTMLParser):
    """The rows of table#class as cell texts."""

    def __init__(self):
        super().__init__()
        self.rows, self.inside, self.cell = [], False, None

    def handle_starttag(self, tag, attrs):
        if tag == "table" and ("id", "class") in attrs:
            self.inside = True
        elif self.inside and tag == "tr":
            self.rows.append([])
        elif self.inside and tag in ("td", "th"):
            self.cell = []

    def handle_endtag(self, tag):
        if tag == "table":
            self.inside = False
        elif self.inside and tag in ("td", "th") and self.cell is not None:
            self.rows[-1].append(" ".join("".join(self.cell).split()))
            self.cell = None

    def handle_data(self, data):
        if self.cell is not None:
            self.cell.append(data + " ")


def _chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if shutil.which(name):
            return shutil.which(name)
    if os.geteuid() == 0 and shutil.which("apt-get"):
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        for cmd in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", "chromium"]):
            if subprocess.run(cmd, env=env, capture_output=True, timeout=900).returncode != 0:
                pytest.skip(f"no Chromium: {' '.join(cmd)} failed")
        if shutil.which("chromium"):
            return shutil.which("chromium")
    pytest.skip("no Chromium, and apt-get cannot install it here (not root)")


def _browser(tmp_path, *args):
    cmd = [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
           f"--user-data-dir={tmp_path / 'chromium-profile'}", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=180)


def test_the_dashboard_renders_and_shows_the_flags(tmp_path):
    out = tmp_path / "graded"
    make_class(out)
    p = subprocess.run([sys.executable, "-m", "grader", "batch", "--collect", str(out)],
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0 and "19 of 20 submission(s) graded" in p.stdout, p.stdout + p.stderr
    with open(out / "summary.csv") as f:
        summary = list(csv.DictReader(f))
    flagged = {r["submission"]: r for r in summary if r["track"] == "triton"
               and r["exercise"] == "06_rmsnorm"}
    for name, flag in FLAGGED.items():
        assert flagged[name][flag] == "1", (name, flag, flagged[name])
    assert flagged["omar"]["not_run"] == "2" and "SIGSEGV" in flagged["omar"]["error"]

    page = (out / "index.html").as_uri()
    dom = _browser(tmp_path, "--dump-dom", page)
    assert dom.returncode == 0, dom.stderr[-2000:]
    table = _Table()
    table.feed(dom.stdout)
    head, *rows = table.rows
    assert head == ["student", "total", "01_vector_add", "06_rmsnorm", "error"], head
    by = {r[0]: r for r in rows}
    assert sorted(by) == sorted(NAMES), sorted(by)
    for name, flag in FLAGGED.items():  # the flag sits in that student's 06 cell
        word = {"needs_review": "needs review", "host_bound": "host-bound"}.get(flag, flag)
        assert word in by[name][3], (name, by[name])
        assert all(word not in by[n][3] for n in by if FLAGGED.get(n) != flag and
                   not (flag == "crashed" and n == UNREADABLE)), word
    assert by["eli"][1].startswith("0.0/") or "tampering" in by["eli"][4]
    assert "could not read quinn.zip" in by[UNREADABLE][4] and by[UNREADABLE][1] == "—"
    assert "µs" in by["ada"][2] or "µs" in by["ada"][3] or by["ada"][2].startswith("triton")
    assert dom.stdout.count("<svg") == 2  # a histogram per exercise
    assert 'href="ada/output.txt"' in dom.stdout

    png = tmp_path / "dashboard.png"
    shot = _browser(tmp_path, f"--screenshot={png}", "--window-size=1500,1420", page)
    assert png.is_file() and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", shot.stderr[-2000:]
    assert png.stat().st_size > 20_000  # a rendered page, not a blank one
    keep = os.environ.get("KEEP_DASHBOARD_PNG")
    if keep:
        shutil.copy(png, ROOT / keep)
