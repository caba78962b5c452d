"""The commands a learner and an instructor type: the scorecard and Gradescope's results.json."""
import json
import subprocess
import sys

import pytest

import re

from grader.common.paths import ROOT


def grade(*args, tmp_path):
    out = subprocess.run([sys.executable, "-m", "grader", "grade", *args, "--no-bench",
                          "--json", str(tmp_path / "results.json"),
                          "--junit", str(tmp_path / "junit.xml")],
                         cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr
    return out.stdout, json.loads((tmp_path / "results.json").read_text())


def test_one_exercise_scorecard_and_results_json(tmp_path):
    text, results = grade("--exercise", "01", "--impl", "solutions", tmp_path=tmp_path)
    assert "Scorecard for solutions" in text
    assert re.search(r"01\s+vector_add\s+triton\s+imported\s+(\d+)/\1\s", text), text
    assert set(results) >= {"score", "tests", "output", "execution_time"}
    for t in results["tests"]:
        assert set(t) >= {"name", "score", "max_score", "output"}
        # nothing at stake on this machine (needs a GPU; --no-bench): no status, so Gradescope
        # shows it as information, as JUnit skips it (grader.run.gradescope)
        assert t.get("status") in ("passed", "failed") or ("status" not in t and
                                                           t["max_score"] == 0)
    perf = [t for t in results["tests"] if t["name"].endswith("performance")]
    assert perf and perf[0]["score"] == 0  # --no-bench: never a figure that was not measured
    assert results["score"] == pytest.approx(sum(t["score"] for t in results["tests"]), abs=1e-2)


def test_junit_xml_reads_in_a_junit_consumer(tmp_path):
    """The --junit file as a CI system reads it: one testcase per check, and one for the
    performance (skipped without a GPU timing; here --no-bench)."""
    junitparser = pytest.importorskip("junitparser")
    grade("--exercise", "01", "--impl", "solutions", tmp_path=tmp_path)
    xml = junitparser.JUnitXml.fromfile(str(tmp_path / "junit.xml"))
    suites = list(xml)
    assert [s.name for s in suites] == ["01_vector_add.triton"]
    cases = list(suites[0])
    names = [c.name for c in cases]
    assert "your kernels do the work" in names and "performance" in names
    assert all(c.is_passed for c in cases if c.name != "performance")
    assert suites[0].tests == len(cases) and suites[0].failures == 0
    # each check's time, as CI systems show it (the sum is most of the checks' wall time)
    timed = [c.time for c in cases if c.name != "performance"]
    assert all(t >= 0 for t in timed) and sum(timed) > 0
    text, _ = grade("--exercise", "01", tmp_path=tmp_path)  # the starter: failures with messages
    failed = [c for c in list(junitparser.JUnitXml.fromfile(str(tmp_path / "junit.xml")))[0]
              if c.result and isinstance(c.result[0], junitparser.Failure)]
    assert failed and all("not implemented yet" in (c.result[0].text or "") or
                          c.name in ("your kernels do the work",) for c in failed)


def test_starter_scorecard_has_hints_and_no_tracebacks(tmp_path):
    text, results = grade("--exercise", "01", tmp_path=tmp_path)
    assert "not implemented" in text and "Start here: open triton/vector_add.py" in text
    assert "Traceback" not in text
    assert results["score"] == 0


def test_bad_exercise_number_is_one_line():
    out = subprocess.run([sys.executable, "-m", "grader", "grade", "--exercise", "99"],
                         cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 2 and out.stderr.startswith("grader: bad exercise spec: no exercise '99'")


def test_watch_follows_one_exercise():
    out = subprocess.run([sys.executable, "-m", "grader", "watch", "--exercise", "01,02"],
                         cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 1 and "watch follows one exercise" in out.stderr
    helped = subprocess.run(["make", "help"], cwd=ROOT, capture_output=True, text=True).stdout
    assert "make watch-02" in helped
