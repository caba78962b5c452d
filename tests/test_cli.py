"""The commands a learner and an instructor type: the scorecard and Gradescope's results.json."""
import json
import subprocess
import sys

import pytest

from grader.discover import ROOT


def grade(*args, tmp_path):
    out = subprocess.run([sys.executable, "-m", "grader", "grade", *args, "--no-bench",
                          "--json", str(tmp_path / "results.json")],
                         cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr
    return out.stdout, json.loads((tmp_path / "results.json").read_text())


def test_one_exercise_scorecard_and_results_json(tmp_path):
    text, results = grade("--exercise", "01", "--impl", "solutions", tmp_path=tmp_path)
    assert "Scorecard for solutions" in text
    assert "01  vector_add  triton  imported" in text and "7/7" in text
    assert set(results) >= {"score", "tests", "output", "execution_time"}
    for t in results["tests"]:
        assert set(t) >= {"name", "score", "max_score", "status", "output"}
        assert t["status"] in ("passed", "failed")
    perf = [t for t in results["tests"] if t["name"].endswith("performance")]
    assert perf and perf[0]["score"] == 0  # --no-bench: never a figure that was not measured
    assert results["score"] == pytest.approx(sum(t["score"] for t in results["tests"]), abs=1e-2)


def test_starter_scorecard_has_hints_and_no_tracebacks(tmp_path):
    text, results = grade("--exercise", "01", tmp_path=tmp_path)
    assert "not implemented" in text and "Start here: open triton/vector_add.py" in text
    assert "Traceback" not in text
    assert results["score"] == 0


def test_bad_exercise_number_is_one_line():
    out = subprocess.run([sys.executable, "-m", "grader", "grade", "--exercise", "99"],
                         cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 2 and out.stderr.startswith("grader: bad exercise spec: no exercise '99'")
