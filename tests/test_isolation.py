"""Known-bad submissions: each is caught, with the right reason, and nothing else goes down.

The bad trees are made from the solutions by small edits (see conftest.variant), so they stay
in step with the solution they break.
"""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from grader.common.discover import discover
from grader.run.grade import grade_track
from grader.common.paths import ROOT

from conftest import HAS_GPU

EX01 = discover(only="01")[0]
ADD = "x.to(tl.float32) + y.to(tl.float32)"


def grade01(tree, **kw):
    return grade_track(tree, EX01, EX01.tracks["triton"], **kw)


def failures(result):
    return {c.name.split("[")[0]: c for c in result.checks if c.outcome == "failed"}


def test_wrong_values(variant):
    r = grade01(variant("01_vector_add", "triton", {"vector_add.py": [(ADD, ADD.replace("+", "-"))]}))
    f = failures(r)
    assert "test_matches_reference" in f and not r.ended
    msg = f["test_matches_reference"].message
    assert "first mismatches (index: got vs expected)" in msg and "seed=" in msg
    c = f["test_matches_reference"]
    # the drawn values and a command, not hypothesis' fixture dump or a decorator to add
    assert "seed=" in c.example and "n=" in c.example and "impl=" not in msg + c.example, c
    assert "reproduce_failure" not in msg and "Failing test case" not in msg, msg
    assert c.repro.startswith("make exercise-01 SUBMISSION=") and "REPRO='test_matches_reference[" in c.repro
    assert c.hint.endswith("(README: Hints)")


def test_repro_runs_that_example_alone(variant, configure):
    """The command a failure prints runs that one check on that one example, and it fails the
    same way."""
    tree = variant("01_vector_add", "triton", {"vector_add.py": [(ADD, ADD.replace("+", "-"))]})
    first = failures(grade01(tree))["test_matches_reference"]
    repro = first.repro.split("REPRO=", 1)[1].strip("'")
    configure(repro=repro)
    r = grade01(tree)
    ran = [c for c in r.checks if c.outcome != "not run" and c.name != "your kernels do the work"]
    assert [c.name for c in ran] == [repro.split("@")[0]], [(c.name, c.outcome) for c in r.checks]
    again = failures(r)["test_matches_reference"].message
    assert again.splitlines()[0] == first.message.splitlines()[0], (again, first.message)
    configure(repro="test_no_such_check@AAAA")
    assert "REPRO: no check named 'test_no_such_check'" in grade01(tree).ended


def test_strided_input_read_as_contiguous_is_named(variant):
    """x[::2] read with stride 1: the likely cause names x as a strided view, not 'a tail'."""
    r = grade01(variant("01_vector_add", "triton", {"vector_add.py": [
        ("        if not t.is_contiguous():", "        if False:")]}))
    msg = failures(r)["test_strided_input_handled_or_refused"].message
    assert re.search(r"likely cause: the output is wrong when `x` is a strided view \(shape "
                     r"\(\d+,\), strides \([23],\)\)",
                     msg), msg
    assert "tail" not in msg


def test_a_crash_is_never_taken_for_a_refusal(variant):
    """A check that accepts a refusal (`except (RuntimeError, ValueError)`) sees the submission's
    process die on a strided input: the check crashed, with the crash's reason."""
    r = grade01(variant("01_vector_add", "triton", {"vector_add.py": [
        ("        if not t.is_contiguous():",
         "        if not t.is_contiguous():\n            import os, signal\n"
         "            os.kill(os.getpid(), signal.SIGSEGV)")]}))
    c = next(c for c in r.checks if c.name.startswith("test_strided_input_handled_or_refused"))
    assert c.outcome == "crashed" and "segmentation fault" in c.message, c
    assert "refused" not in c.message


def test_unwritten_tail(variant):
    r = grade01(variant("01_vector_add", "triton",
                        {"vector_add.py": [("mask = offsets < n", "mask = offsets < n - 1")]}))
    msg = failures(r)["test_matches_reference"].message
    # the evidence: the element still holds the exact NaN fresh outputs are filled with
    assert ("never written" in msg or "no element was written" in msg) and \
        "the NaN fresh outputs start with" in msg, msg


def test_mutated_input(variant):
    r = grade01(variant("01_vector_add", "triton", {"vector_add.py": [
        ("    tl.store(out_ptr + offsets", "    tl.store(x_ptr + offsets, out.to(out_ptr.dtype.element_ty), "
         "mask=mask)\n    tl.store(out_ptr + offsets")]}))
    assert "input `x` was modified" in failures(r)["test_matches_reference"].message


def test_segfault_is_a_crash_of_one_check(variant):
    r = grade01(variant("01_vector_add", "triton", {"vector_add.py": [
        ("    out = torch.empty_like(x)\n", "    import os, signal\n    if x.numel() == 1000:\n"
         "        os.kill(os.getpid(), signal.SIGSEGV)\n    out = torch.empty_like(x)\n")]}))
    assert r.ended == "crashed: a segmentation fault (SIGSEGV)"
    # one check crashed: the first to pass 1000 elements (test_output_on_input_device does;
    # hypothesis may draw 1000 in test_matches_reference first: it reads constants from the
    # source it runs), and only that one
    crashed = [c for c in r.checks if c.outcome == "crashed"]
    assert len(crashed) == 1, [c.name for c in crashed]
    assert crashed[0].name.split("[")[0] in ("test_output_on_input_device",
                                             "test_matches_reference")
    assert any(c.outcome == "passed" for c in r.checks)  # what ran before is kept
    assert any(c.outcome == "not run" for c in r.checks)


def test_os_exit(variant):
    r = grade01(variant("01_vector_add", "triton", {"vector_add.py": [
        ("    out = torch.empty_like(x)\n", "    import os\n    os._exit(3)\n")]}))
    assert r.ended == "the process exited early with code 3"


def test_infinite_loop_hits_the_check_timeout(variant, configure):
    configure(check_timeout=5)
    r = grade01(variant("01_vector_add", "triton", {"vector_add.py": [
        ("    out = torch.empty_like(x)\n", "    while x.numel() == 1000:\n        pass\n"
         "    out = torch.empty_like(x)\n")]}))
    assert r.ended.startswith("timed out: a check ran past its time limit")
    assert any(c.outcome == "crashed" for c in r.checks)


def test_track_time_limit_kills_the_judge(variant, configure):
    configure(track_timeout=20)
    r = grade01(variant("01_vector_add", "triton", {"vector_add.py": [
        ("import torch\n", "import time\ntime.sleep(600)\nimport torch\n")]}))
    assert r.ended == "timed out: the track did not finish within its 20 s limit"


def test_import_error_and_missing_entry_point(variant):
    r = grade01(variant("01_vector_add", "triton", {"vector_add.py": [("def add(", "def add(:")]}))
    assert r.build["ok"] is False and r.build["stage"] == "import"
    assert "vector_add.py:" in r.build["message"] and "SyntaxError" in r.build["message"]
    r = grade01(variant("01_vector_add", "triton", {"vector_add.py": [("def add(", "def plus(")]}))
    assert "does not define `add`" in r.build["message"]


def test_scorecard_completes_after_a_crash(variant, tmp_path):
    tree = variant("01_vector_add", "triton", {"vector_add.py": [
        ("    out = torch.empty_like(x)\n", "    import os, signal\n    os.kill(os.getpid(), signal.SIGSEGV)\n")]})
    out = subprocess.run([sys.executable, "-m", "grader", "grade", "--submission", str(tree),
                          "--no-bench", "--json", str(tmp_path / "r.json")], cwd=ROOT,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    assert "crashed: a segmentation fault" in out.stdout
    for ex in discover():  # every exercise still has its row
        assert re.search(rf"{ex.number}\s+{ex.name}\s", out.stdout), ex.id
    assert "Traceback" not in out.stdout + out.stderr


def test_a_grade_leaves_no_temporary_folder_behind(variant, tmp_path):
    """Each submission's process writes only its scratch folder (and its TMPDIR is that folder):
    it lives inside its judge's temporary folder, which the grade removes however the judge
    ended (here a crash), not one folder per process left in /tmp for good."""
    tree = variant("01_vector_add", "triton", {"vector_add.py": [
        ("    out = torch.empty_like(x)\n", "    import os, signal\n    if x.numel() == 1000:\n"
         "        os.kill(os.getpid(), signal.SIGSEGV)\n    out = torch.empty_like(x)\n")]})
    import shutil
    import tempfile
    tmp = Path(tempfile.mkdtemp(prefix="g", dir="/tmp"))  # short: see the test below
    try:
        out = subprocess.run([sys.executable, "-m", "grader", "grade", "--submission",
                              str(tree), "--exercise", "01", "--no-bench"], cwd=ROOT,
                             capture_output=True, text=True, timeout=600,
                             env={**os.environ, "TMPDIR": str(tmp)})
        assert out.returncode == 0 and "crashed: a segmentation fault" in out.stdout, out.stdout
        left = sorted(p.name for p in tmp.iterdir() if p.name.startswith("grader"))
        assert not left, left
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def test_a_long_tmpdir_does_not_fail_the_checks(tmp_path):
    """torch_shm_manager's socket lives under TMPDIR, and a socket's path has 107 bytes at most:
    with a long TMPDIR (pytest's own under xdist is 75 bytes) every check failed with
    "torch_shm_manager ...: Invalid argument". The grade works in /tmp then."""
    long = tmp_path / ("t" * max(1, 90 - len(str(tmp_path))))
    long.mkdir()
    assert len(str(long)) >= 80
    out = subprocess.run([sys.executable, "-m", "grader", "grade", "--impl", "solutions",
                          "--exercise", "01", "--no-bench"], cwd=ROOT, capture_output=True,
                         text=True, timeout=600, env={**os.environ, "TMPDIR": str(long)})
    assert out.returncode == 0 and "torch_shm_manager" not in out.stdout, out.stdout[-3000:]
    assert re.search(r"01\s+vector_add\s+triton\s+imported\s+9/9", out.stdout), out.stdout


# --- CUDA: compile errors everywhere, broken kernels on the GPU --------------------------------

EX02 = discover(only="02")[0]
VEC_START = "  const int64_t n_vec = n / kSize;  // whole vectors\n"


def grade02(tree, **kw):
    return grade_track(tree, EX02, EX02.tracks["cuda"], **kw)


def test_compile_error_shows_file_line_and_source(variant):
    r = grade02(variant("02_scale", "cuda", {"scale_kernels.cu": [(VEC_START, VEC_START + "  int oops = ;\n")]}))
    assert r.build["ok"] is False and r.build["stage"] == "build"
    msg = r.build["message"]
    line = VEC_START.strip()
    src = (ROOT / "solutions/02_scale/cuda/scale_kernels.cu").read_text().splitlines()
    lineno = next(i for i, l in enumerate(src, 1) if l.strip() == line) + 1
    assert f"02_scale/cuda/scale_kernels.cu:{lineno}: error: expected an expression" in msg, msg
    assert f"{lineno} | int oops = ;" in msg
    assert len(msg.splitlines()) < 15  # the first errors, not the template backtrace


@pytest.mark.gpu
def test_illegal_memory_access_stops_the_track_cleanly(variant):
    r = grade02(variant("02_scale", "cuda", {"scale_kernels.cu": [
        (VEC_START, VEC_START + "  if (n > 0) out[int64_t(1) << 40] = x[0];  // far out of bounds\n")]}))
    # the error reaches the check that made the call, or ends the submission's process (the
    # context is broken); either way the learner reads "illegal memory access" and the rest stops
    assert r.build["ok"], r.build
    assert "illegal memory access" in r.stopped + r.ended, (r.stopped, r.ended)
    assert any(c.outcome in ("failed", "crashed") and "illegal memory access" in c.message
               for c in r.checks)
    assert any(c.outcome == "not run" for c in r.checks)


@pytest.mark.gpu
def test_hung_kernel_times_out(variant, configure):
    configure(check_timeout=20, track_timeout=300)
    r = grade02(variant("02_scale", "cuda", {"scale_kernels.cu": [
        (VEC_START, VEC_START + "  if (n > 0) { for (;;) __nanosleep(1000); }  // hangs (a sleep: not optimized away)\n")]}))
    assert r.ended.startswith("timed out"), r.ended
    assert any(c.outcome == "crashed" for c in r.checks)


@pytest.mark.gpu
def test_bench_kills_a_hung_judge(variant, tmp_path):
    """make bench: an exercise whose judge hangs is stopped at its limit, reported, and the
    report is still written."""
    import json
    import time
    from grader.tools.bench import bench_command
    tree = variant("01_vector_add", "triton", {"vector_add.py": [
        ("import torch\n", "import time\ntime.sleep(600)\nimport torch\n")]})
    start = time.monotonic()
    assert bench_command([EX01], tree, tmp_path, timeout_s=40) == 0
    assert time.monotonic() - start < 150
    data = json.loads((tmp_path / "bench.json").read_text())
    assert "timed out" in data["exercises"][0]["error"], data["exercises"][0]


@pytest.mark.timed
def test_timing_phase_runs_in_its_own_judge():
    r = grade01(ROOT / "solutions", bench=True)
    assert not r.ended and r.count("correctness", "passed") == r.total("correctness")
    if HAS_GPU:
        assert r.performance["status"] == "measured", r.performance
        assert r.performance["figures"]["forward"]["ms"] > 0
    else:
        assert r.performance == {"status": "needs a GPU"}, r.performance


def test_a_submission_process_started_before_torch_is_adopted_only_for_its_own_track():
    """The judge starts the submission's process before importing torch (grader.judge.spawn): the
    session adopts it when it was started for the same tree, exercise and track, and otherwise
    ends it and starts the right one (a process for another track must never serve checks)."""
    from grader.judge.proxy import Session
    from grader.judge.spawn import Spawner
    start_submission = Spawner().start
    track = EX01.tracks["triton"]
    tree = ROOT / "solutions"
    early = start_submission(tree, EX01.id, track.name)
    s = Session(tree, EX01, track, started=early)
    try:
        assert s.proc is early.proc
        assert s.request("noop").get("ok")
    finally:
        s.close()
    wrong = start_submission(ROOT / "starter", EX01.id, track.name)
    s = Session(tree, EX01, track, started=wrong)
    try:
        assert s.proc is not wrong.proc
        assert wrong.proc.wait(timeout=30) is not None  # ended, not left running
        assert s.request("noop").get("ok")
    finally:
        s.close()
