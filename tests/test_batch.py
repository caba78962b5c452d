"""Grading a class: `python -m grader batch` over a folder of submissions (trees and a zip),
per-submission results.json and JUnit, the class summary CSV with its flags, and resume.

Exercise 01 only, and only the checks named by Settings.select (a pytest -k expression the judge
honours), so the whole class is graded in a minute or two on the CPU interpreter.
"""
import csv
import json
import os
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from conftest import ROOT
from grader.tools.summary import track_rows
from grader.common.settings import Settings

EX = "01_vector_add"
SELECT = "matches_reference or length_one"
DELEGATE = ("    add_kernel[grid](x, y, out, n, BLOCK=BLOCK, num_warps=NUM_WARPS)\n    return out",
            "    return torch.add(x, y)  # PyTorch does the work")


def batch(submissions, out, *extra):
    env = {**os.environ, **Settings(select=SELECT, examples="fixed").env(), "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-m", "grader", "batch", str(submissions), "--out",
                           str(out), "--exercise", "01", "--no-bench", *extra],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=1500)
    return proc.returncode, proc.stdout + proc.stderr


def test_batch_grades_a_class_and_resumes(tmp_path, variant):
    subs = tmp_path / "class"
    subs.mkdir()
    shutil.copytree(ROOT / "solutions" / EX, subs / "alice" / EX)   # a finished one
    shutil.copytree(ROOT / "starter" / EX, subs / "bob" / EX)       # nothing written yet
    bad = variant(EX, "triton", {"vector_add.py": [DELEGATE]})       # hands the add to PyTorch
    shutil.copytree(bad, subs / "carol")
    with zipfile.ZipFile(subs / "dave.zip", "w") as z:               # a zip, in a folder of its own
        for f in (ROOT / "solutions" / EX).rglob("*"):
            if f.is_file() and "__pycache__" not in f.parts:
                z.write(f, f"dave/{EX}/{f.relative_to(ROOT / 'solutions' / EX)}")
    out = tmp_path / "out"

    code, text = batch(subs, out)
    assert code == 0, text[-4000:]
    assert "4 submission(s)" in text and "4 to grade" in text, text[-4000:]
    with open(out / "summary.csv") as f:
        rows = {r["submission"]: r for r in csv.DictReader(f)}
    assert set(rows) == {"alice", "bob", "carol", "dave"}, rows
    assert all(r["exercise"] == EX and r["track"] == "triton" for r in rows.values()), rows
    alice, bob, carol, dave = (rows[n] for n in ("alice", "bob", "carol", "dave"))
    assert float(alice["points"]) > 0 and alice["points"] == dave["points"], rows
    assert float(bob["points"]) == 0, rows
    assert 0 <= float(carol["points"]) < float(alice["points"]), rows
    assert carol["delegation"] == "1", rows
    assert all(r[k] == "0" for r in (alice, bob, dave) for k in ("delegation", "tampering")), rows
    assert all(r["host_bound"] == "0" and r["max_points"] == "10" for r in rows.values()), rows
    for name in rows:  # the per-submission files, each whole
        results = json.loads((out / name / "results.json").read_text())
        assert results["score"] == float(rows[name]["points"]), (name, results["score"])
        assert "<testsuite" in (out / name / "junit.xml").read_text()
        assert "Scorecard for" in (out / name / "output.txt").read_text()
        plain = {k: v for k, v in results.items() if k != "extra_data"}  # read from its tests
        assert track_rows(name, plain) == track_rows(name, results)
    carol_tests = json.loads((out / "carol" / "results.json").read_text())["tests"]
    assert any(t["name"].endswith("your kernels do the work") and t["status"] == "failed"
               for t in carol_tests)

    # resume: everything already graded is skipped, and the summary is written again as it was
    stamp = (out / "alice" / "results.json").stat().st_mtime_ns
    code, text = batch(subs, out)
    assert code == 0 and "0 to grade, 4 already graded" in text, text[-3000:]
    assert (out / "alice" / "results.json").stat().st_mtime_ns == stamp
    with open(out / "summary.csv") as f:
        assert {r["submission"]: r for r in csv.DictReader(f)} == rows


def test_zips_unpack_inside_their_folder_only(tmp_path):
    """A learner's zip is source files: a member outside the folder (../, an absolute path) is
    refused; a tree wrapped in one top folder is found inside it."""
    from grader.tools.summary import tree_root, unpack
    for bad in ("../escaped.py", "/tmp/absolute.py"):
        z = tmp_path / "bad.zip"
        with zipfile.ZipFile(z, "w") as f:
            f.writestr(bad, "print('hi')")
        dest = tmp_path / "dest"
        dest.mkdir(exist_ok=True)
        try:
            unpack(z, dest)
        except ValueError as e:
            assert "outside the submission" in str(e)
        else:
            assert not (tmp_path / "escaped.py").exists() and (dest / bad.lstrip("/")).is_file()
    good = tmp_path / "good.zip"
    with zipfile.ZipFile(good, "w") as f:
        f.writestr(f"starter/{EX}/triton/vector_add.py", "x = 1\n")
        f.writestr("__MACOSX/._starter", "")
    dest = tmp_path / "good"
    dest.mkdir()
    unpack(good, dest)
    assert tree_root(dest) == dest / "starter"


# --- the GPU machine: a class of 23 ---------------------------------------------------------------

KERNEL = "triton/vector_add.py"
BAD = {  # name -> the edit that makes it bad, and how many such submissions
    "deleg": (DELEGATE, 3),
    "wrong": (("out = x.to(tl.float32) + y.to(tl.float32)",
               "out = x.to(tl.float32) - y.to(tl.float32)"), 2),
    "tail": (("    mask = offsets < n  # the last program runs past n",
              "    mask = offsets < (n // 2) * 2  # forgets an odd tail"), 2),
}


@pytest.mark.gpu
def test_batch_grades_a_class_of_23_on_the_gpu(tmp_path):
    """8 solutions, 6 starters, 7 known-bad variants and 2 zips, every check of exercise 01 (no
    timing): one worker per GPU (at least 4, sharing one GPU where there is one). Set
    KEEP_BATCH_OUT to keep the per-submission files and summary.csv."""
    import torch
    subs = tmp_path / "class"
    for i in range(8):
        shutil.copytree(ROOT / "solutions" / EX, subs / f"sol{i + 1:02d}" / EX)
    for i in range(6):
        shutil.copytree(ROOT / "starter" / EX, subs / f"start{i + 1:02d}" / EX)
    for name, ((old, new), n) in BAD.items():
        for i in range(n):
            dst = subs / f"{name}{i + 1}" / EX
            shutil.copytree(ROOT / "solutions" / EX, dst)
            text = (dst / KERNEL).read_text()
            assert old in text, old
            (dst / KERNEL).write_text(text.replace(old, new, 1))
    for i in range(2):
        with zipfile.ZipFile(subs / f"zipped{i + 1}.zip", "w") as z:
            for f in (ROOT / "solutions" / EX).rglob("*"):
                if f.is_file() and "__pycache__" not in f.parts:
                    z.write(f, f"{EX}/{f.relative_to(ROOT / 'solutions' / EX)}")
    out = Path(os.environ.get("KEEP_BATCH_OUT") or tmp_path / "out").resolve()
    workers = max(4, torch.cuda.device_count())
    env = {k: v for k, v in os.environ.items() if k != "GRADER_SETTINGS"}
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "grader", "batch", str(subs), "--out", str(out),
                           "--exercise", "01", "--no-bench", "--force", "--workers", str(workers)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=1500)
    wall = time.perf_counter() - start
    print(proc.stdout[-6000:])
    print(f"23 submissions, {workers} workers on {torch.cuda.device_count()} GPU(s) "
          f"({torch.cuda.get_device_name()}): wall time {wall:.0f} s")
    print((out / "summary.csv").read_text())
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    with open(out / "summary.csv") as f:
        rows = {r["submission"]: r for r in csv.DictReader(f)}
    assert len(rows) == 23, rows
    full = [n for n in rows if n.startswith(("sol", "zipped"))]
    assert all(float(rows[n]["points"]) == 6 for n in full), [rows[n] for n in full]
    assert all(float(rows[n]["points"]) == 0 for n in rows if n.startswith("start"))
    assert all(rows[n]["delegation"] == "1" for n in rows if n.startswith("deleg"))
    assert all(float(rows[n]["points"]) < 6 for n in rows if n.startswith(("wrong", "tail")))
    assert not any(r["tampering"] == "1" or r["error"] for r in rows.values()), rows


def test_more_workers_than_gpus_only_without_the_timing(tmp_path, monkeypatch):
    """Two submissions timed at once on one GPU would each be refused by the timed-alone check:
    the batch says so before it starts; without the timing, workers may share a GPU."""
    from grader.tools import batch as b
    monkeypatch.setattr(b, "gpu_slots", lambda workers: ["0"] * workers)
    with pytest.raises(SystemExit, match="at most one worker per GPU, or --no-bench"):
        b.Batch(tmp_path, tmp_path / "out", workers=2)
    assert b.Batch(tmp_path, tmp_path / "out", workers=2, bench=False).slots == ["0", "0"]
    assert b.Batch(tmp_path, tmp_path / "out", workers=1).slots == ["0"]
