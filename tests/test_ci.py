"""CI=true never weakens a grade: GitHub Classroom, most CI systems and a course's own runner set
it, and a grade there is the grade anywhere else (README: "The variables the grader reads").

What CI once changed was hypothesis' examples (a fixed, smaller set). So:
- the profile grader.judge.plugin loads is read in a process of its own, with CI=true and
  without: the same, the machine's own (`grader-cpu` or `grader-gpu`);
- the examples a grade ran are read back from what its judge recorded: the calls of the
  exercise's reference it counted (grader.common.events.References; 05's
  test_forward_matches_reference calls it once per example). A plain `python -m grader grade`
  without CI and Gradescope's `run_autograder` with CI=true (on a fake /autograder, as
  tests/test_gradescope.py runs it) must both run the profile's max_examples, and agree on every
  check's outcome and points in results.json.
"""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import HAS_GPU, ROOT
from grader.common import events as ev
from grader.common.settings import Settings

# one property check that calls the reference once per example (a few seconds on the CPU)
SELECT = "test_forward_matches_reference"
EXERCISE = "05"


def _env(settings: Settings, ci: str | None) -> dict:
    """This process's environment with the grade's settings (the machine's own examples: no
    `examples` given) and CI set or removed."""
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env.update(settings.env())
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + [p for p in env.get("PYTHONPATH", "")
                                                        .split(os.pathsep) if p])
    if ci is not None:
        env["CI"] = ci
    return env


def _profile(ci: str | None) -> tuple[str, int]:
    """(the hypothesis profile, its max_examples) grader.judge.plugin loads for a grade with the
    machine's own examples, in a process of its own as a judge makes the choice."""
    code = ("from hypothesis import settings\n"
            "from grader.judge import plugin\n"
            "plugin._load_profile()\n"
            "print(settings._current_profile, settings().max_examples)\n")
    p = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                       timeout=300, env=_env(Settings(), ci=ci))
    assert p.returncode == 0, p.stderr[-3000:]
    name, n = p.stdout.split()
    return name, int(n)


def _examples_run(logs: Path) -> int:
    """The reference calls the judge counted, from the events a grade kept (Settings.keep_logs)."""
    files = sorted(logs.glob("*-checks.jsonl"))
    assert files, list(logs.iterdir()) if logs.exists() else f"no {logs}"
    return sum(e.calls for p in files for e in ev.read(p) if isinstance(e, ev.References))


def _checks(results: dict) -> list:
    """Every check's test entry (performance aside: its time is measured anew each grade)."""
    return sorted((t["name"], t.get("status"), t["score"], t["max_score"])
                  for t in results["tests"] if not t["name"].endswith("performance"))


@pytest.mark.timed  # on a GPU host: both grades time, as run_autograder does there
def test_ci_true_changes_nothing_gradescope_and_a_plain_grade_agree(tmp_path):
    tree = tmp_path / "tree"
    shutil.copytree(ROOT / "solutions" / "05_softmax", tree / "05_softmax")
    bench = [] if HAS_GPU else ["--no-bench"]  # as run_autograder grades on each machine

    plain_logs, plain_json = tmp_path / "plain-logs", tmp_path / "plain.json"
    p = subprocess.run([sys.executable, "-m", "grader", "grade", "--submission", str(tree),
                        "--exercise", EXERCISE, "--json", str(plain_json), *bench],
                       cwd=ROOT, env=_env(Settings(select=SELECT, keep_logs=str(plain_logs)),
                                          ci=None),
                       capture_output=True, text=True, timeout=900)
    assert plain_json.exists(), p.stdout[-3000:] + p.stderr[-3000:]

    root = tmp_path / "autograder"
    (root / "submission").mkdir(parents=True)
    shutil.copytree(tree / "05_softmax", root / "submission" / "05_softmax")
    (root / "source").symlink_to(ROOT)  # the autograder zip's contents: this repository
    gs_logs = tmp_path / "gradescope-logs"
    env = _env(Settings(select=SELECT, keep_logs=str(gs_logs)), ci="true")
    env.update(AUTOGRADER_ROOT=str(root), COURSE_PYTHON=sys.executable, COURSE_EXERCISE=EXERCISE)
    env.pop("COURSE_GPU_RUNNER", None)
    g = subprocess.run(["bash", str(ROOT / "gradescope" / "run_autograder")], cwd=root, env=env,
                       capture_output=True, text=True, timeout=900)
    assert g.returncode == 0, g.stdout[-3000:] + g.stderr[-3000:]
    gs_json = json.loads((root / "results" / "results.json").read_text())

    plain, gradescope = _examples_run(plain_logs), _examples_run(gs_logs)
    profile = _profile(None)
    assert plain == gradescope == profile[1], (
        f"examples run: {plain} by a plain grade without CI, {gradescope} by Gradescope's "
        f"run_autograder with CI=true; the machine's profile {profile[0]} has {profile[1]}")
    assert _checks(json.loads(plain_json.read_text())) == _checks(gs_json)
    assert any(SELECT in name for name, *_ in _checks(gs_json)), _checks(gs_json)


def test_the_judge_chooses_its_examples_without_ci():
    """The profile grader.judge.plugin loads with CI=true is the one it loads without, the
    machine's own (the grade above shows the examples it runs, end to end)."""
    without = _profile(None)
    assert _profile("true") == without
    assert without[0] == ("grader-gpu" if HAS_GPU else "grader-cpu"), without
