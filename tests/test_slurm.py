"""Grading a class through a real Slurm: a single-node cluster brought up on this machine.

munged (on a socket of its own, with a key of its own), slurmctld and slurmd from the Debian
packages (installed with apt-get when missing), a slurm.conf for this host with CPU-only nodes
and ports nobody else uses, all under the test's temporary folder: nothing of the machine's own
configuration is read or changed, and tests running beside this one (pytest-xdist) are not
disturbed. The daemons are stopped at the end, also when the test fails.

`python -m grader batch --slurm` grades four submissions of exercise 01 (Triton interpreter, the
checks Settings.select names) in a job array; the test checks summary.csv, --collect while tasks
run, a resubmission (nothing left to grade), and an sbatch refusal shown as sbatch says it.
"""
import csv
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from grader.settings import Settings

from conftest import ROOT

EX = "01_vector_add"
SELECT = "matches_reference or length_one"
DELEGATE = ("    add_kernel[grid](x, y, out, n, BLOCK=BLOCK, num_warps=NUM_WARPS)\n    return out",
            "    return torch.add(x, y)  # PyTorch does the work")
DAEMONS = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scontrol")


def _have() -> bool:
    return all(shutil.which(d) for d in DAEMONS)


def _install() -> str | None:
    """Install the Debian packages where they are missing; None, or why they cannot be."""
    if _have():
        return None
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        return "slurm-wlm and munge are not installed, and apt-get cannot run here (not root)"
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for cmd in (["apt-get", "update", "-qq"],
                ["apt-get", "install", "-y", "-qq", "slurm-wlm", "munge"]):
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
        if proc.returncode != 0:
            return f"{' '.join(cmd)} failed: {(proc.stderr or proc.stdout)[-500:]}"
    return None if _have() else "slurm-wlm and munge installed, but the daemons are not on PATH"


def _free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def _run(cmd, env, timeout=60):
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """{'env': the environment sbatch and squeue need (SLURM_CONF), 'dir': its folder}."""
    why = _install()
    if why:
        pytest.skip(f"no Slurm: {why}")
    if os.geteuid() != 0:
        pytest.skip("no Slurm: a one-node cluster of the test's own runs as root (SlurmUser=root)")
    d = tmp_path_factory.mktemp("slurm")
    (d / "munge").mkdir(mode=0o700)
    key = d / "munge" / "key"
    key.write_bytes(secrets.token_bytes(128))
    key.chmod(0o600)
    sock = d / "munge" / "socket"
    host = socket.gethostname().split(".")[0]
    ctld_port, slurmd_port = _free_ports(2)
    for sub in ("state", "spool"):
        (d / sub).mkdir()
    conf = d / "slurm.conf"
    conf.write_text(f"""ClusterName=gradertest
SlurmctldHost={host}
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={sock}
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool
SlurmctldPidFile={d}/slurmctld.pid
SlurmdPidFile={d}/slurmd.pid
SlurmctldLogFile={d}/slurmctld.log
SlurmdLogFile={d}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
MpiDefault=none
NodeName={host} CPUs={os.cpu_count() or 2} State=UNKNOWN
PartitionName=cpu Nodes={host} Default=YES MaxTime=INFINITE State=UP
""")
    env = {**os.environ, "SLURM_CONF": str(conf)}
    started = []
    try:
        p = _run(["munged", "--force", f"--socket={sock}", f"--key-file={key}",
                  f"--pid-file={d}/munge/pid", f"--log-file={d}/munge/log",
                  f"--seed-file={d}/munge/seed"], env)
        assert p.returncode == 0, f"munged: {p.stderr}{(d / 'munge' / 'log').read_text()}"
        started.append("munged")
        for daemon in (["slurmctld", "-i"], ["slurmd"]):
            p = _run(daemon, env)
            assert p.returncode == 0, f"{daemon[0]}: {p.stderr}"
            started.append(daemon[0])
        deadline = time.time() + 60
        while True:  # the node registers with the controller: idle
            p = _run(["sinfo", "-h", "-o", "%T"], env)
            if p.returncode == 0 and p.stdout.strip() == "idle":
                break
            assert time.time() < deadline, (
                f"the node did not come up: {p.stdout}{p.stderr}\n" +
                "".join(f.read_text()[-2000:] for f in (d / "slurmctld.log", d / "slurmd.log")
                        if f.exists()))
            time.sleep(0.5)
        yield {"env": env, "dir": d}
    finally:
        _stop(d, env, started, sock)


def _stop(d: Path, env, started, sock) -> None:
    """Stop what this fixture started, by its pid files: never another cluster's daemons."""
    if "slurmctld" in started or "slurmd" in started:
        _run(["scontrol", "shutdown"], env)
    for name in ("slurmd", "slurmctld"):
        pid = d / f"{name}.pid"
        _kill_pidfile(pid)
    if "munged" in started:
        _run(["munged", "--stop", f"--socket={sock}"], env)
        _kill_pidfile(d / "munge" / "pid")


def _kill_pidfile(path: Path) -> None:
    import signal
    try:
        pid = int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for _ in range(50):
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return
            if _ == 0:
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    return
            time.sleep(0.1)


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
    env = {**cluster["env"], **Settings(select=SELECT).env(), "CI": "1", "PYTHONPATH": str(ROOT)}
    p = subprocess.run([sys.executable, "-m", "grader", "batch", *args], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=timeout)
    return p.returncode, p.stdout + p.stderr


def _wait(cluster, jobid: str, timeout: float) -> None:
    deadline = time.time() + timeout
    while True:
        p = _run(["squeue", "-h", "-j", jobid, "-o", "%i %T"], cluster["env"])
        if p.returncode == 0 and not p.stdout.strip():
            return
        if time.time() > deadline:
            pytest.fail(f"job {jobid} still queued or running after {timeout:.0f} s:\n{p.stdout}"
                        + _run(["scontrol", "show", "job", jobid], cluster["env"]).stdout)
        time.sleep(1)


def test_a_class_graded_through_sbatch(tmp_path, variant, cluster):
    subs = _class(tmp_path, variant)
    out = tmp_path / "out"
    code, text = _grader(cluster, str(subs), "--out", str(out), "--exercise", "01",
                         "--no-bench", "--slurm", "--gpus-per-task", "0", "--max-parallel", "2")
    assert code == 0, text
    assert "4 to grade" in text and "sbatch --parsable" in text and "--array=0-3%2" in text, text
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
                         "--no-bench", "--slurm", "--gpus-per-task", "0")
    assert code == 0 and "0 to grade, 4 already graded" in text, text
    (out / "bob" / "results.json").unlink()
    code, text = _grader(cluster, str(subs), "--out", str(out), "--exercise", "01",
                         "--no-bench", "--slurm", "--gpus-per-task", "0")
    assert code == 0 and "1 to grade, 3 already graded" in text and "--array=0-0" in text, text
    _wait(cluster, text.split("submitted job array ")[1].split(":")[0], timeout=300)
    assert (out / "bob" / "results.json").is_file()


def test_scheduler_errors_are_shown_as_they_are(tmp_path, cluster):
    subs = tmp_path / "class"
    shutil.copytree(ROOT / "starter" / EX, subs / "erin" / EX)
    out = tmp_path / "out"
    code, text = _grader(cluster, str(subs), "--out", str(out), "--exercise", "01", "--slurm",
                         "--partition", "no-such-partition", "--gpus-per-task", "0")
    assert code != 0 and "sbatch: error:" in text and "partition" in text.lower(), text
    assert "nothing was submitted" in text, text
    code, text = _grader(cluster, str(subs), "--out", str(out), "--exercise", "01", "--slurm",
                         "--gpus-per-task", "1")   # this cluster has no GPUs (no gres)
    assert code != 0 and "sbatch: error:" in text and "gres" in text.lower(), text
