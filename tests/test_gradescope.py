"""Gradescope's results.json and JUnit from one graded run: every field against Gradescope's
documented spec, the statuses both files agree on (needs a GPU, not run after a crash,
tampering, needs review), visibility, the leaderboard; and the autograder recipe
(gradescope/run_autograder) run on a fake /autograder layout.

The spec (https://gradescope-autograders.readthedocs.io/en/latest/specs/, "Output format"):
top level `score`, `execution_time`, `output`, `output_format`, `test_output_format`,
`test_name_format`, `visibility`, `stdout_visibility`, `extra_data`, `tests`, `leaderboard`; a
test's `score`, `max_score`, `status` ("passed" or "failed"), `name`, `name_format`, `number`,
`output`, `output_format`, `tags`, `visibility`, `extra_data`; formats text, html,
simple_format, md, ansi; visibility hidden, after_due_date, after_published, visible; a
leaderboard entry's `name`, `value` and `order` ("asc" or "desc").
"""
import json
import os
import shutil
import subprocess
import sys
from xml.etree import ElementTree as ET

import pytest

from grader.common.settings import Settings

from conftest import HAS_GPU, ROOT
from grader.common.discover import discover
from grader.run.gradescope import gradescope, junit, property_checks, visibility_arg
from grader.run.results import Check, TrackResult
from grader.run.score import score

TOP = {"score": (int, float), "execution_time": (int, float), "output": str,
       "output_format": str, "test_output_format": str, "test_name_format": str,
       "visibility": str, "stdout_visibility": str, "extra_data": dict, "tests": list,
       "leaderboard": list}
TEST = {"score": (int, float), "max_score": (int, float), "status": str, "name": str,
        "name_format": str, "number": str, "output": str, "output_format": str, "tags": list,
        "visibility": str, "extra_data": dict}
FORMATS = {"text", "html", "simple_format", "md", "ansi"}
VISIBILITY = {"hidden", "after_due_date", "after_published", "visible"}


def check_spec(results: dict) -> None:
    """Every field of a results.json is one Gradescope documents, with a documented value."""
    assert set(results) <= set(TOP), set(results) - set(TOP)
    for k, v in results.items():
        assert isinstance(v, TOP[k]), (k, v)
    assert "score" in results or all("score" in t for t in results["tests"])
    for k in ("output_format", "test_output_format", "test_name_format"):
        assert results.get(k, "text") in FORMATS, (k, results[k])
    for k in ("visibility", "stdout_visibility"):
        assert results.get(k, "visible") in VISIBILITY, (k, results[k])
    for t in results["tests"]:
        assert set(t) <= set(TEST), set(t) - set(TEST)
        for k, v in t.items():
            assert isinstance(v, TEST[k]), (t["name"], k, v)
        assert t.get("status", "passed") in ("passed", "failed"), t
        assert t.get("visibility", "visible") in VISIBILITY, t
        assert all(isinstance(x, str) for x in t.get("tags", [])), t
        assert 0 <= t["score"] <= t["max_score"] + 1e-9, t
        if t["score"] < t["max_score"]:  # a test that lost points never says passed
            assert t["status"] == "failed", t
    for entry in results["leaderboard"]:
        assert set(entry) <= {"name", "value", "order"} and {"name", "value"} <= set(entry)
        assert isinstance(entry["value"], (int, float, str)) and \
            entry.get("order", "desc") in ("asc", "desc"), entry
    assert results["score"] == pytest.approx(sum(t["score"] for t in results["tests"]), abs=1e-3)


@pytest.fixture(scope="module")
def ex01():
    return discover(only="01")[0]


def _result(ex, outcomes: dict, **kw) -> TrackResult:
    checks = tuple(Check(name, "correctness", outcome, message=f"{name}: {outcome}")
                   for name, outcome in outcomes.items())
    return TrackResult(exercise=ex.id, track="triton", tree="t",
                       build={"ok": True, "stage": "import"}, checks=checks, **kw)


CHECKS = ["test_matches_reference", "test_length_one_and_zero", "test_output_on_input_device",
          "your kernels do the work"]


def _measured(fraction=0.9, ms=2.5e-3):
    return {"status": "measured", "case": {"n": 1 << 28}, "dtype": "float32",
            "ceiling_name": "copy bandwidth", "ceiling_value": 4.4e3, "ceiling_unit": "GB/s",
            "credit": 1.0, "thresholds": [],
            "figures": {"forward": {"ms": ms, "p20": ms, "p80": ms, "rate": 3960.0,
                                    "fraction": fraction, "speedup": {"eager": 1.1}}}}


def _both(ex, r, **kw):
    rows = [(ex, r, score(ex, r))]
    res = gradescope(rows, seconds=1.0, summary="table", **kw)
    check_spec(res)
    return res, ET.fromstring(junit(rows, seconds=1.0))


def _cases(xml):
    return {c.get("name"): c for c in xml.iter("testcase")}


def test_a_measured_track_every_field_and_the_leaderboard(ex01):
    r = _result(ex01, dict.fromkeys(CHECKS, "passed"), performance=_measured())
    res, xml = _both(ex01, r)
    assert res["output_format"] == "md" and res["stdout_visibility"] == "hidden"
    assert res["score"] == 10
    board = {e["name"]: e for e in res["leaderboard"]}
    assert board["01 vector_add [triton] GPU us"] == {"name": "01 vector_add [triton] GPU us",
                                                      "value": 2.5, "order": "asc"}
    frac = board["01 vector_add [triton] forward % of copy bandwidth"]
    assert frac["value"] == 90.0 and frac["order"] == "desc"
    track = res["extra_data"]["tracks"][0]
    assert track["gpu_us"] == {"forward": 2.5} and track["fraction"] == {"forward": 0.9}
    assert not any(c.find("failure") is not None for c in xml.iter("testcase"))


def test_needs_a_gpu_is_no_failure_in_either_file(ex01):
    outcomes = dict.fromkeys(CHECKS, "passed")
    outcomes["test_output_on_input_device"] = "needs a GPU"
    r = _result(ex01, outcomes, performance={"status": "needs a GPU"})
    res, xml = _both(ex01, r)
    tests = {t["name"].split("] ")[1]: t for t in res["tests"]}
    for name in ("test_output_on_input_device", "performance"):
        assert "status" not in tests[name] and tests[name]["max_score"] == 0, tests[name]
        assert "needs a GPU" in tests[name]["tags"]
        assert _cases(xml)[name].find("skipped") is not None
        assert _cases(xml)[name].find("failure") is None
    assert tests["performance"]["extra_data"] == {"points_at_stake": 4}
    assert res["leaderboard"] == []  # nothing measured: no entry
    suite = next(xml.iter("testsuite"))
    assert suite.get("failures") == "0" and suite.get("skipped") == "2"


def test_checks_not_run_after_a_crash_say_so(ex01):
    r = _result(ex01, {"test_matches_reference": "passed", "test_length_one_and_zero": "crashed",
                       "test_output_on_input_device": "not run",
                       "your kernels do the work": "not run"},
                ended="crashed: a segmentation fault (SIGSEGV)")
    res, xml = _both(ex01, r)
    tests = {t["name"].split("] ")[1]: t for t in res["tests"]}
    skipped = tests["test_output_on_input_device"]
    assert skipped["output"].startswith("not run: crashed: a segmentation fault") and \
        "during test_length_one_and_zero" in skipped["output"] and "not run" in skipped["tags"]
    case = _cases(xml)["test_output_on_input_device"]
    assert case.find("failure") is None and "not run" in case.find("skipped").get("message")
    assert _cases(xml)["test_length_one_and_zero"].find("failure").get("type") == "crashed"
    track = res["extra_data"]["tracks"][0]
    assert track["crashed"] and track["failed"] == 1 and track["not_run"] == 2
    assert track["error"] == ("crashed: a segmentation fault (SIGSEGV) during "
                              "test_length_one_and_zero")


def test_tampering_zeroes_every_test_of_the_track(ex01):
    r = _result(ex01, dict.fromkeys(CHECKS, "passed"), performance=_measured(),
                tampering=["grader/judge/check.py (changed)"])
    res, xml = _both(ex01, r)
    assert res["score"] == 0 and res["leaderboard"] == []
    assert all(t["score"] == 0 and t["status"] == "failed" for t in res["tests"]), res["tests"]
    assert all("TAMPERING" in t["output"] or t["name"].endswith("tampering")
               for t in res["tests"])
    assert all(c.find("failure") is not None for c in xml.iter("testcase"))
    assert {c.find("failure").get("type") for c in xml.iter("testcase")} == {"tampering"}
    assert res["extra_data"]["tracks"][0]["error"].startswith("tampering: grader/judge/check.py")


def test_needs_review_is_a_flag_in_both_files(ex01):
    finding = "vector_add.py:12: sets an attribute of torch.library"
    r = _result(ex01, dict.fromkeys(CHECKS, "passed"), review=[finding])
    res, xml = _both(ex01, r)
    review = [t for t in res["tests"] if t["name"].endswith("needs review")]
    assert len(review) == 1 and finding in review[0]["output"] and review[0]["max_score"] == 0
    assert res["score"] == 6  # no points taken (no GPU timing here: the 6 of the checks)
    assert res["extra_data"]["tracks"][0]["needs_review"] is True
    props = {p.get("name"): p.get("value") for p in xml.iter("property")}
    assert props == {"needs_review": finding}
    assert finding in _cases(xml)["needs review"].find("system-out").text


def test_visibility_hides_the_property_checks_until_the_due_date(ex01):
    assert property_checks(ex01) == {"test_matches_reference"}
    r = _result(ex01, dict.fromkeys(CHECKS, "failed"), performance=_measured())
    res, _ = _both(ex01, r, visibility=["property=after_due_date", "stdout=visible"])
    vis = {t["name"].split("] ")[1]: t["visibility"] for t in res["tests"]}
    assert vis["test_matches_reference"] == "after_due_date"
    assert {v for k, v in vis.items() if k != "test_matches_reference"} == {"visible"}
    assert res["stdout_visibility"] == "visible" and res["visibility"] == "visible"
    res, _ = _both(ex01, r, visibility=["all=hidden", "performance=visible"])
    vis = {t["name"].split("] ")[1]: t["visibility"] for t in res["tests"]}
    assert vis.pop("performance") == "visible" and set(vis.values()) == {"hidden"}
    assert res["visibility"] == "hidden"
    for bad in ("property=later", "props=hidden", "hidden"):
        with pytest.raises(ValueError, match="KIND=WHEN"):
            visibility_arg(bad)
    p = subprocess.run([sys.executable, "-m", "grader", "grade", "--visibility", "property=soon"],
                       cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and "expected KIND=WHEN" in p.stderr, p.stderr


# --- the recipe: run_autograder on a fake /autograder ---------------------------------------

def _autograder(tmp_path, submission_from, env_extra=None):
    root = tmp_path / "autograder"
    (root / "submission").mkdir(parents=True)
    shutil.copytree(submission_from, root / "submission" / "01_vector_add")
    (root / "source").symlink_to(ROOT)   # the autograder zip's contents: this repository
    env = {**os.environ, "AUTOGRADER_ROOT": str(root), "COURSE_PYTHON": sys.executable,
           "COURSE_EXERCISE": "01",
           **Settings(select="matches_reference or length_one", examples="fixed").env()}
    env.pop("COURSE_GPU_RUNNER", None)
    env.update(env_extra or {})
    p = subprocess.run(["bash", str(ROOT / "gradescope" / "run_autograder")], cwd=root, env=env,
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    return json.loads((root / "results" / "results.json").read_text()), p.stdout


@pytest.mark.skipif(HAS_GPU, reason="a machine with a GPU grades it all (the recipe's GPU path)")
def test_run_autograder_without_a_gpu_records_the_cpu_checks(tmp_path):
    res, _ = _autograder(tmp_path, ROOT / "solutions" / "01_vector_add")
    check_spec(res)
    assert res["output"].startswith("**No GPU here: the CPU checks were graded")
    assert res["score"] == 6, res["score"]  # the checks' 6; the 4 of performance need a GPU
    perf = next(t for t in res["tests"] if t["name"].endswith("performance"))
    assert "status" not in perf and "needs a GPU" in perf["tags"]


def test_run_autograder_calls_the_courses_gpu_runner(tmp_path):
    """The runner gets the submission tree and the results path; here it grades on this
    machine (as the course's GPU host would, with its GPU), and one that fails falls back to
    the CPU checks, saying so."""
    runner = tmp_path / "runner.sh"
    runner.write_text(f"#!/bin/bash\necho \"$1\" > {tmp_path}/runner-args\n"
                      f"exec {sys.executable} -m grader grade --exercise 01 --no-bench "
                      f"--submission \"$1\" --json \"$2\"\n")
    runner.chmod(0o755)
    res, out = _autograder(tmp_path / "a", ROOT / "solutions" / "01_vector_add",
                           {"COURSE_GPU_RUNNER": str(runner)})
    check_spec(res)
    assert "course's GPU runner" in out and res["output"].startswith("**Graded on a GPU")
    assert (tmp_path / "runner-args").read_text().strip() == str(tmp_path / "a" / "autograder"
                                                                 / "submission")
    broken = tmp_path / "broken.sh"
    broken.write_text("#!/bin/bash\necho 'no route to the GPU host' >&2\nexit 3\n")
    broken.chmod(0o755)
    res, out = _autograder(tmp_path / "b", ROOT / "solutions" / "01_vector_add",
                           {"COURSE_GPU_RUNNER": str(broken)})
    check_spec(res)
    assert "exit code 3" in out and res["output"].startswith("**The course's GPU runner failed")
    assert res["score"] == 6
