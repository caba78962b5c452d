"""benchmarks/ stays runnable (CPU-only): every script says what it measures and how to run it,
uses only the grader's public commands, and dry-runs here; docs/performance.md is made of
stamped sections that a run rewrites one at a time."""
import importlib.util
import json
import os
import re
import subprocess
import sys

import pytest

from grader.tools.benchdoc import graded_figures, read_sections, render, repeatability_markdown, \
    write_section
from grader.common.paths import ROOT

BENCH = ROOT / "benchmarks"
SCRIPTS = sorted(p for p in BENCH.iterdir() if p.suffix in (".py", ".sh"))
SHELL = [p for p in SCRIPTS if p.suffix == ".sh"]
ENV = dict(os.environ, DRY_RUN="1", PY=sys.executable)


def _header(p):
    """The script's first line of prose: after the shebang, or its docstring's first line."""
    lines = p.read_text().splitlines()
    if p.suffix == ".sh":
        return lines[1].lstrip("# ")
    return lines[0].strip('"')


def test_there_are_benchmarks():
    assert {"run.sh", "repeatability.py", "edit_loop.sh", "grading_time.sh",
            "cpu_loop.sh"} <= {p.name for p in SCRIPTS}


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_each_script_says_what_it_measures_and_how_to_run_it(script):
    head = _header(script)
    assert f"benchmarks/{script.name}" in head and "GPU" in head, head


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_scripts_use_the_public_commands_only(script):
    """No grader private helper and no copy of a kernel: what a benchmark measures is what
    `python -m grader` and `make` do (history keeps the experiments that did otherwise)."""
    text = script.read_text()
    private = re.findall(r"from grader\S* import [^\n]*\b_\w+|grader\.\w+\._\w+", text)
    assert not private, private
    assert "@triton.jit" not in text and "__global__" not in text
    assert "GRADER_" not in text, "settings go through the commands' flags and make variables"


@pytest.mark.parametrize("script", SHELL, ids=lambda p: p.name)
def test_shell_scripts_parse(script):
    subprocess.run(["bash", "-n", str(script)], check=True)


def test_run_dry_runs_every_stage(tmp_path):
    stages = ["env", "grading-time", "loop", "loop:06", "bench", "bench:04,06", "repeat:3",
              "gpu-tests", "cpu-loop:4"]
    out = subprocess.run(["bash", "benchmarks/run.sh", str(tmp_path), *stages], cwd=ROOT, env=ENV,
                         capture_output=True, text=True, check=True).stdout
    assert "make bench REPEATS=5 EXERCISE=04,06" in out
    assert "edit_loop.sh 06 cuda rmsnorm_kernels.cu" in out
    assert "repeatability.py --times 3" in out
    assert "cpu_loop.sh 4" in out
    bad = subprocess.run(["bash", "benchmarks/run.sh", str(tmp_path), "nonsense"], cwd=ROOT,
                         env=ENV, capture_output=True, text=True)
    assert bad.returncode != 0 and "unknown stage nonsense" in bad.stdout


def test_edit_loop_and_grading_time_dry_run():
    loop = subprocess.run(["bash", "benchmarks/edit_loop.sh", "06", "cuda", "rmsnorm_kernels.cu"],
                          cwd=ROOT, env=ENV, capture_output=True, text=True, check=True).stdout
    assert "--exercise 06 --submission" in loop and "--no-bench" in loop and "QUICK=1" in loop
    # the warm loop's rows: make watch-06's command, checks only and with QUICK's timing
    assert "-m grader watch --exercise 06 --submission" in loop and "--quick" in loop
    py = subprocess.run(["bash", "benchmarks/edit_loop.sh", "01", "triton", "vector_add.py"],
                        cwd=ROOT, env=ENV, capture_output=True, text=True, check=True).stdout
    assert "-m grader watch --exercise 01 --submission" in py
    wrong = subprocess.run(["bash", "benchmarks/edit_loop.sh", "06", "cuda", "nope.cu"], cwd=ROOT,
                           env=ENV, capture_output=True, text=True)
    assert wrong.returncode == 2 and "no solutions/06_rmsnorm/cuda/" + "nope.cu" in wrong.stderr
    grading = subprocess.run(["bash", "benchmarks/grading_time.sh"], cwd=ROOT,
                             env={**ENV, "GPU_NAME": "a GPU"}, capture_output=True, text=True,
                             check=True).stdout
    assert "make grade IMPL=solutions" in grading and "rm -rf .cache" in grading
    assert "grader.tools.benchdoc durations" in grading  # the fresh grade orders the next ones
    assert "--exercise 13 --no-bench" in grading and "--exercise 13 --quick" in grading
    assert "make watch-13" in grading and "make watch-02" in grading
    cpu = subprocess.run(["bash", "benchmarks/grading_time.sh"], cwd=ROOT, env=ENV,
                         capture_output=True, text=True, check=True).stdout
    assert "CPU: make exercise-13 IMPL=solutions" in cpu and "--exercise 08 --quick" in cpu


def test_flash_attention_sweep_dry_run_prints_its_plan():
    """The sweep says what it would time without a GPU: both cases, every kernel, and only
    candidates the kernels accept (the outer block a multiple of the inner one)."""
    out = subprocess.run([sys.executable, "benchmarks/flash_attention_sweep.py", "--dry-run"],
                         cwd=ROOT, env=ENV, capture_output=True, text=True, check=True).stdout
    assert "case leaderboard (B=1, H=16, S=16384, D=64, causal=True)" in out
    assert "case wide (B=4, H=32, S=4096, D=128, causal=False)" in out
    plans = re.findall(r"^  (fwd|dkdv|dq): (\d+) candidates: (.+)$", out, re.M)
    assert len(plans) == 6
    for _kernel, n, listed in plans:
        configs = [tuple(map(int, c.split(", "))) for c in re.findall(r"\(([\d, ]+)\)", listed)]
        assert len(configs) == int(n) and all(c[0] % c[1] == 0 for c in configs)


def test_norm_sweep_dry_run_checks_every_candidate_on_the_cpu():
    """Without a GPU (DRY_RUN=1) the sweep prints its plan and the GPU command, and runs each
    selected candidate configuration of the 06, 08 and 10 Triton solutions on the interpreter,
    held to what the committed configuration computes: a broken candidate is found before GPU
    time is spent on it (a prefetch reading the wrong row was caught this way)."""
    r = subprocess.run([sys.executable, "benchmarks/norm_sweep.py",
                        "--only", "ev,red-512x8w8"], cwd=ROOT, env=ENV,
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    out = r.stdout
    assert "+ python3 benchmarks/norm_sweep.py --exercise 06,08,10 --only ev,red-512x8w8" in out
    for number in ("06", "08", "10"):
        assert f"plan {number} ev" in out and f"plan {number} solution" in out
    # 3 exercises x 2 shapes x 2 candidates, each against the solution
    assert out.count("matches the solution") == 12, out
    assert "every candidate computes what the solution does" in out
    unknown = subprocess.run([sys.executable, "benchmarks/norm_sweep.py", "--set", "nonsense=1",
                              "--only", "custom", "--exercise", "06"], cwd=ROOT, env=ENV,
                             capture_output=True, text=True, timeout=300)
    assert unknown.returncode != 0 and "does not have them" in unknown.stderr


def test_cpu_loop_dry_run():
    """The learner's one-shot commands on a machine without a GPU: a fresh clone's make grade,
    then make exercise-05 and exercise-01 on the solutions, each the number of runs asked."""
    out = subprocess.run(["bash", "benchmarks/cpu_loop.sh", "5"], cwd=ROOT, env=ENV,
                         capture_output=True, text=True, check=True).stdout
    assert "git clone" in out and "make grade" in out
    assert "make exercise-05 IMPL=solutions" in out and "make exercise-01 IMPL=solutions" in out
    assert "each 5 times" in out


def _repeatability():
    spec = importlib.util.spec_from_file_location("repeatability", BENCH / "repeatability.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_repeatability_dry_run_prints_the_grades(capsys):
    assert _repeatability().main(["--times", "3", "--exercise", "06", "--dry-run"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 3
    assert all("-m grader grade --impl solutions --json" in line and "--exercise 06" in line
               for line in lines)


def test_repeatability_needs_a_gpu(tmp_path):
    """On a machine without a GPU it says so and fails, and writes nothing."""
    pytest.importorskip("torch")
    import torch
    if torch.cuda.is_available():
        pytest.skip("a GPU is here: the real run is a benchmark, not a test")
    doc = tmp_path / "performance.md"
    r = subprocess.run([sys.executable, "benchmarks/repeatability.py", "--doc", str(doc)],
                       cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 1 and "needs a GPU" in r.stderr and not doc.exists()


def _grade(points, ms, compile_us=500.0):
    """A results.json as `python -m grader grade --json` writes it, one timed track of 06 (its
    extra_data: grader.run.report.track_summary)."""
    figures = {mode: {"us": v, "method": "graph", "host_us": 50.0,
                      "baselines_us": {"compile": compile_us}} for mode, v in ms.items()}
    return {"tests": [{"name": "06 rmsnorm [triton] output matches", "output": ""}],
            "extra_data": {"tracks": [
                {"exercise": "06_rmsnorm", "track": "triton", "points": points, "max_points": 14,
                 "figures": figures},
                {"exercise": "06_rmsnorm", "track": "cuda", "points": 0.0, "max_points": 14}]}}


def test_repeatability_table_gives_median_and_spread():
    runs = [_grade(14.0, {"forward": 100.0, "forward_backward": 400.0}),
            _grade(13.0, {"forward": 102.0, "forward_backward": 410.0}, compile_us=510.0),
            _grade(14.0, {"forward": 101.0})]  # the third grade's fwd+bwd timing did not run
    assert graded_figures(runs[0])[("06_rmsnorm", "triton")]["modes"] == {
        "forward": 100.0, "forward_backward": 400.0}
    md = repeatability_markdown(runs)
    assert "| 06_rmsnorm | triton | forward | 101.0 | 2.0% | 3/3 | 14.00 / 14 | 7.1% |" in md
    assert "| 06_rmsnorm | triton | forward_backward | 405.0 | 2.5% | 2/3 |" in md
    assert "| 06_rmsnorm | cuda | (not timed) | — | — | 0/3 | 0.00 / 14 | — |" in md
    assert "| 06_rmsnorm | compile | forward | 500.0 | 2.0% | 3/3 |" in md  # baselines too


def test_a_section_is_rewritten_and_the_others_kept(tmp_path):
    doc = tmp_path / "performance.md"
    write_section("repeatability", "| a |\n", device="GPU A", command="cmd 1",
                  date="2030-01-01 00:00 UTC", commit_id="abc1234", doc=doc)
    write_section("edit-loop", "loop table\n", device="GPU B", command="cmd 2", doc=doc)
    write_section("repeatability", "| b |\n", device="GPU C", command="cmd 3",
                  commit_id="def5678", doc=doc)
    text = doc.read_text()
    sections = read_sections(doc)
    assert set(sections) == {"repeatability", "edit-loop"}
    assert sections["repeatability"][1] == "| b |" and "| a |" not in text
    assert sections["repeatability"][0]["device"] == "GPU C"
    assert "loop table" in text and "GPU B" in text
    assert "| GPU C |" in text and "| def5678 |" in text and "`cmd 3`" in text  # the header
    assert "not measured yet" in text  # bench and grading time: the header says how to
    assert render(read_sections(doc)) == text  # reading and writing are one format


def test_performance_doc_is_generated_from_bench_json(tmp_path):
    """docs/performance.md's bench section is what the generator writes from docs/bench.json:
    nobody edited it by hand (regenerated into a copy, compared)."""
    doc = ROOT / "docs" / "performance.md"
    copy = tmp_path / "performance.md"
    copy.write_text(doc.read_text())
    from grader.tools.benchdoc import write_bench_section
    data = json.loads((ROOT / "docs" / "bench.json").read_text())
    write_bench_section(copy, data, plot="bench.png")
    assert copy.read_text() == doc.read_text(), \
        "docs/performance.md differs from what its generator writes: run make bench (or " \
        "python -m grader.tools.benchdoc bench docs/bench.json) instead of editing it"


def test_bench_rows_without_a_commit_are_flagged_as_the_old_method(tmp_path):
    """make bench EXERCISE=04 keeps the other rows: a row from before the commit was recorded
    stays flagged until it is measured again."""
    from grader.tools.benchdoc import write_bench_section
    new = {"device": "GPU", "torch": "t", "triton": "t", "date": "2030-01-02 00:00 UTC",
           "commit": "abc1234", "command": "python -m grader bench --exercise 04"}
    old = {"device": "GPU", "torch": "t", "triton": "t", "date": "2030-01-01 00:00 UTC"}
    data = {"meta": dict(new, tree="solutions"), "exercises": [
        {"exercise": "02_scale", "error": "x", "measured": old},
        {"exercise": "04_reduce_sum", "error": "y", "measured": new}]}
    write_bench_section(tmp_path / "p.md", data)
    stamp = read_sections(tmp_path / "p.md")["bench"][0]
    assert stamp["commit"] == "abc1234, not recorded (the old method)"
    assert stamp["note"].startswith("the rows of 02_scale were measured before")
    assert stamp["date"] == "2030-01-01 to 2030-01-02"
    assert stamp["command"] == "python -m grader bench --exercise 04"
    data["exercises"][0]["measured"] = new
    write_bench_section(tmp_path / "p.md", data)
    assert "note" not in read_sections(tmp_path / "p.md")["bench"][0]


def test_class_grading_dry_run_prints_one_batch_per_shard_and_exercise():
    out = subprocess.run([sys.executable, "benchmarks/class_grading.py", "--exercise", "01,05",
                          "--shards", "2", "--dry-run"], cwd=ROOT, capture_output=True,
                         text=True, check=True).stdout.splitlines()
    assert len(out) == 4
    assert all("-m grader batch CLASS/shard-" in line for line in out)
    assert sum("--exercise 05" in line for line in out) == 2


def test_class_grading_dry_run_through_slurm_prints_one_array_per_exercise():
    out = subprocess.run([sys.executable, "benchmarks/class_grading.py", "--exercise", "01,05",
                          "--shards", "4", "--slurm", "--dry-run"], cwd=ROOT, capture_output=True,
                         text=True, check=True).stdout.splitlines()
    assert len(out) == 2 and all("-m grader batch CLASS --out OUT/0" in line and
                                 "--slurm --tasks 4 --gpus-per-task 1" in line for line in out)
