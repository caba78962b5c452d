"""Grading a class through a real Slurm: a single-node cluster brought up on this machine.

munged (on a socket of its own, with a key of its own), slurmctld and slurmd from the Debian
packages (installed with apt-get when missing), a slurm.conf for this host and ports nobody else
uses, all under the test's temporary folder (benchmarks/slurm_cluster.py): nothing of the
machine's own configuration is read or changed, and tests running beside this one
(pytest-xdist) are not disturbed. The daemons are stopped at the end, also when a test fails.
One cluster has CPU-only nodes; another offers a GPU as gres, as a GPU cluster does.

`python -m grader batch --slurm` grades four submissions of exercise 01 (Triton interpreter, the
checks Settings.select names) in a job array; the test checks summary.csv, --collect while tasks
run, a resubmission (nothing left to grade), and an sbatch refusal shown as sbatch says it; on
the GPU node, that `--gpus-per-task 1` tasks run one at a time, each given the GPU by Slurm.
"""
import csv
import os
import re
import shutil
import stat
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from grader.common.settings import Settings

from conftest import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))
from slurm_cluster import Cluster, missing  # noqa: E402  (benchmarks/ is no package)

EX = "01_vector_add"
SELECT = "matches_reference or length_one"
DELEGATE = ("    add_kernel[grid](x, y, out, n, BLOCK=BLOCK, num_warps=NUM_WARPS)\n    return out",
            "    return torch.add(x, y)  # PyTorch does the work")
def _install() -> str | None:
    """Install the Debian packages where they are missing; None, or why they cannot be."""
    if not missing():
        return None
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        return "slurm-wlm and munge are not installed, and apt-get cannot run here (not root)"
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for cmd in (["apt-get", "update", "-qq"],
                ["apt-get", "install", "-y", "-qq", "slurm-wlm", "munge"]):
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
        if proc.returncode != 0:
            return f"{' '.join(cmd)} failed: {(proc.stderr or proc.stdout)[-500:]}"
    return None if not missing() else "slurm-wlm and munge installed, but not on PATH: " + \
        ", ".join(missing())


def _up(tmp_path_factory, **kw):
    why = _install()
    if why:
        pytest.skip(f"no Slurm: {why}")
    if os.geteuid() != 0:
        pytest.skip("no Slurm: a one-node cluster of the test's own runs as root (SlurmUser=root)")
    return Cluster(tmp_path_factory.mktemp("slurm"), **kw)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A CPU-only node: {'env': the environment sbatch and squeue need (SLURM_CONF)}."""
    with _up(tmp_path_factory) as c:
        yield {"env": c.env, "dir": c.dir, "cluster": c}


@pytest.fixture(scope="module")
def gpu_cluster(tmp_path_factory):
    """A node offering one GPU as gres, as a GPU cluster's nodes do. This machine has none: the
    gres names a stand-in device file (Slurm only stats it; the character device of /dev/null),
    so Slurm schedules --gpus-per-task and sets CUDA_VISIBLE_DEVICES as it would."""
    d = tmp_path_factory.mktemp("gpu")
    os.mknod(d / "nvidia0", 0o600 | stat.S_IFCHR, os.makedev(1, 3))
    with _up(tmp_path_factory, gpus=1, gpu_files=[str(d / "nvidia0")]) as c:
        yield {"env": c.env, "dir": c.dir, "cluster": c}


def _class(tmp_path, variant) -> Path:
    subs = tmp_path / "class"
    subs.mkdir()
    shutil.copytree(ROOT / "solutions" / EX, subs / "alice" / EX)
    shutil.copytree(ROOT / "starter" / EX, subs / "bob" / EX)
    shutil.copytree(variant(EX, "triton", {"vector_add.py": [DELEGATE]}), subs / "carol")
    with zipfile.ZipFile(subs / "dave.zip", "w") as z:
        for f in (ROOT / "solutions" / EX).rglob("*"):
            if f.is_file() and "__pycache__" not in f.parts:
                z.write(f, f"dave/{EX}/{f.relative_to(ROOT / 'solutions' / EX)}")
    return subs


def _grader(cluster, *args, timeout=300):
    env = {**cluster["env"], **Settings(select=SELECT, examples="fixed").env(), "PYTHONPATH": str(ROOT)}
    p = subprocess.run([sys.executable, "-m", "grader", "batch", *args], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=timeout)
    return p.returncode, p.stdout + p.stderr


def _wait(cluster, jobid: str, timeout: float) -> None:
    if not cluster["cluster"].wait(jobid, timeout):
        shown = subprocess.run(["scontrol", "show", "job", jobid], env=cluster["env"],
                               capture_output=True, text=True).stdout
        pytest.fail(f"job {jobid} still queued or running after {timeout:.0f} s:\n{shown}")


def test_a_class_graded_through_sbatch(tmp_path, variant, cluster):
    subs = _class(tmp_path, variant)
    out = tmp_path / "out"
    code, text = _grader(cluster, str(subs), "--out", str(out), "--exercise", "01",
                         "--no-bench", "--slurm", "--gpus-per-task", "0", "--max-parallel", "2",
                         "--cpus-per-task", "1")
    assert code == 0, text
    assert "4 to grade" in text and "sbatch --parsable" in text and "--array=0-3%2" in text and \
        "--cpus-per-task=1" in text, text
    jobid = text.split("submitted job array ")[1].split(":")[0]

    # while the tasks run: the summary lists every submission, graded or not yet
    code, text = _grader(cluster, "--collect", str(out))
    assert code == 0 and "of 4 submission(s) graded" in text, text
    with open(out / "summary.csv") as f:
        assert {r["submission"] for r in csv.DictReader(f)} == {"alice", "bob", "carol", "dave"}

    _wait(cluster, jobid, timeout=600)
    logs = "".join(p.read_text() for p in sorted(out.glob(".grader/slurm/*/task-*.out")))
    assert logs.count("graded in") == 4, logs
    code, text = _grader(cluster, "--collect", str(out))
    assert code == 0 and "4 of 4 submission(s) graded" in text, text
    with open(out / "summary.csv") as f:
        rows = {r["submission"]: r for r in csv.DictReader(f)}
    assert set(rows) == {"alice", "bob", "carol", "dave"}, rows
    alice, bob, carol, dave = (rows[n] for n in ("alice", "bob", "carol", "dave"))
    assert float(alice["points"]) > 0 and alice["points"] == dave["points"], rows
    assert float(bob["points"]) == 0 and bob["error"] == "", rows
    assert carol["delegation"] == "1" and float(carol["points"]) < float(alice["points"]), rows
    assert all(r["tampering"] == "0" and r["crashed"] == "0" for r in rows.values()), rows
    assert "alice/output.txt" in (out / "index.html").read_text()

    # a resubmission grades only what is missing: nothing; one results.json removed: that one
    code, text = _grader(cluster, str(subs), "--out", str(out), "--exercise", "01",
                         "--no-bench", "--slurm", "--gpus-per-task", "0", "--cpus-per-task", "1")
    assert code == 0 and "0 to grade, 4 already graded" in text, text
    (out / "bob" / "results.json").unlink()
    code, text = _grader(cluster, str(subs), "--out", str(out), "--exercise", "01",
                         "--no-bench", "--slurm", "--gpus-per-task", "0", "--cpus-per-task", "1")
    assert code == 0 and "1 to grade, 3 already graded" in text and "--array=0-0" in text, text
    _wait(cluster, text.split("submitted job array ")[1].split(":")[0], timeout=300)
    assert (out / "bob" / "results.json").is_file()


def test_scheduler_errors_are_shown_as_they_are(tmp_path, cluster):
    subs = tmp_path / "class"
    shutil.copytree(ROOT / "starter" / EX, subs / "erin" / EX)
    out = tmp_path / "out"
    code, text = _grader(cluster, str(subs), "--out", str(out), "--exercise", "01", "--slurm",
                         "--partition", "no-such-partition", "--gpus-per-task", "0",
                         "--cpus-per-task", "1")
    assert code != 0 and "sbatch: error:" in text and "partition" in text.lower(), text
    assert "nothing was submitted" in text, text
    code, text = _grader(cluster, str(subs), "--out", str(out), "--exercise", "01", "--slurm",
                         "--gpus-per-task", "1", "--cpus-per-task", "1")  # no GPUs (no gres)
    assert code != 0 and "sbatch: error:" in text and "gres" in text.lower(), text


def test_gpu_tasks_get_the_gpu_one_at_a_time(tmp_path, gpu_cluster):
    """The command a GPU cluster gets (--gpus-per-task 1, the default): sbatch accepts it, the
    node's one GPU goes to one task at a time, and each task grades with CUDA_VISIBLE_DEVICES
    set by Slurm (on this machine the checks still run on the CPU: there is no real GPU)."""
    subs = tmp_path / "class"
    for who in ("frank", "grace"):
        shutil.copytree(ROOT / "solutions" / EX, subs / who / EX)
    out = tmp_path / "out"
    code, text = _grader(gpu_cluster, str(subs), "--out", str(out), "--exercise", "01",
                         "--no-bench", "--slurm", "--cpus-per-task", "1")
    assert code == 0 and "--gpus-per-task=1" in text and "--array=0-1" in text, text
    jobid = text.split("submitted job array ")[1].split(":")[0]
    _wait(gpu_cluster, jobid, timeout=600)
    logs = [p.read_text() for p in sorted(out.glob(".grader/slurm/*/task-*.out"))]
    assert len(logs) == 2 and all("(CUDA_VISIBLE_DEVICES=0)" in t and "graded in" in t
                                  for t in logs), logs
    # one GPU, two tasks: Slurm ran them one after the other (the controller keeps finished
    # jobs' records for MinJobAge, 300 s: their start and end times)
    shown = subprocess.run(["scontrol", "show", "job", "-o", jobid], env=gpu_cluster["env"],
                           capture_output=True, text=True).stdout.splitlines()
    spans = sorted((re.search(r"StartTime=(\S+)", line)[1], re.search(r"EndTime=(\S+)", line)[1])
                   for line in shown if "ArrayTaskId=" in line)
    assert len(spans) == 2 and spans[0][1] <= spans[1][0], shown
    with open(out / "summary.csv") as f:
        rows = {r["submission"]: r for r in csv.DictReader(f)}
    assert set(rows) == {"frank", "grace"} and rows["frank"]["points"] == rows["grace"]["points"]


def test_the_class_benchmark_brings_up_its_own_cluster(tmp_path, cluster):
    """benchmarks/class_grading.py --slurm without SLURM_CONF: a one-node cluster of its own
    (here CPU-only: tasks ask for no GPU), the class graded through sbatch, and its table."""
    env = {k: v for k, v in os.environ.items() if k != "SLURM_CONF"}
    p = subprocess.Popen([sys.executable, "benchmarks/class_grading.py", "--students", "4",
                          "--exercise", "01", "--shards", "2", "--slurm", "--keep",
                          str(tmp_path / "class")], cwd=ROOT, env=env, text=True,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        out, _ = p.communicate(timeout=420)
    except subprocess.TimeoutExpired:  # SIGTERM: the benchmark stops its cluster's daemons
        p.terminate()
        out, _ = p.communicate(timeout=60)
        logs = "".join(f"--- {f.name}\n{f.read_text()[-1500:]}" for f in
                       sorted((tmp_path / "class" / "cluster").glob("*.log")))
        pytest.fail(f"class_grading.py --slurm still running after 420 s:\n{out}\n{logs}")
    assert p.returncode == 0, out
    assert "a one-node cluster: 0 GPU(s) as gres" in out, out
    assert "| 01_vector_add | 4 | 2 | 4 |" in out and out.rstrip().endswith("| ok |"), out
    log = (tmp_path / "class" / "slurm-01.log").read_text()
    assert "--gpus-per-task 0" not in log and "--gpus-per-task=" not in log, log
    assert log.count("graded in") == 4, log
