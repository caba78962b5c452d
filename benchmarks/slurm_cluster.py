"""A one-node Slurm cluster on this machine, CPU-only or with its GPUs as gres: `python3 benchmarks/slurm_cluster.py FOLDER [--gpus N] [-- COMMAND...]` runs COMMAND against it (SLURM_CONF set), or without one keeps it up until Ctrl-C; tests/test_slurm.py and `benchmarks/class_grading.py --slurm` use `Cluster` directly.

munged (on a socket of its own, with a key of its own), slurmctld and slurmd, with a slurm.conf
for this host and ports nobody else uses, all under FOLDER: nothing of the machine's own
configuration is read or changed, and another cluster beside this one is not disturbed. The
daemons run as root (SlurmUser=root) and are stopped by their pid files, also when the command
fails. With --gpus N the node offers N GPUs as gres (`Gres=gpu:N`, gres.conf naming
/dev/nvidia0..N-1), so `sbatch --gpus-per-task=1` is scheduled as on a GPU cluster: one task
per GPU at a time, each with CUDA_VISIBLE_DEVICES set by Slurm.

The binaries come from Debian's slurm-wlm and munge packages (22.05 here); a GPU machine without
them can carry the files those daemons load (see --bundle) and unpack them with
`tar -xzf BUNDLE -C / --skip-old-files`, which adds files and never replaces one.
"""
from __future__ import annotations

import argparse
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

DAEMONS = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scontrol", "sinfo")


def missing() -> list[str]:
    return [d for d in DAEMONS if not shutil.which(d)]


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


class Cluster:
    """`with Cluster(folder, gpus=0) as c:` the daemons are up and the node idle; `c.env` is the
    environment sbatch, squeue and scontrol need (SLURM_CONF); everything is stopped on exit."""

    def __init__(self, folder: Path, *, gpus: int = 0, cpus: int | None = None,
                 partition: str = "cpu", gpu_files: list[str] | None = None):
        self.dir = Path(folder)
        self.gpus, self.cpus = gpus, cpus or os.cpu_count() or 2
        # the GPUs' device files (a test without GPUs names stand-ins: Slurm only stats them)
        self.gpu_files = gpu_files or [f"/dev/nvidia{i}" for i in range(gpus)]
        self.partition = partition
        self.started: list[str] = []
        self._slice: Path | None = None
        # the Unix sockets (munged's, and slurmd's spool: slurmstepd's `<node>_<job>.<step>`)
        # live in a short folder of their own: a socket's path holds 107 bytes, and FOLDER may
        # be a deep temporary one (pytest's under xdist made slurmstepd fail, 109 > 108)
        self.sockets: Path | None = None
        self.env = dict(os.environ, SLURM_CONF=str(self.dir / "slurm.conf"))

    def _write_conf(self) -> None:
        d = self.dir
        self.sockets = Path(tempfile.mkdtemp(prefix="slurm-", dir="/tmp"))
        (d / "munge").mkdir(mode=0o700, parents=True, exist_ok=True)
        key = d / "munge" / "key"
        key.write_bytes(secrets.token_bytes(128))
        key.chmod(0o600)
        (d / "state").mkdir(exist_ok=True)
        (self.sockets / "spool").mkdir(exist_ok=True)
        host = socket.gethostname().split(".")[0]
        ctld_port, slurmd_port = _free_ports(2)
        gres = ""
        if self.gpus:
            # the GPUs by their device files: Slurm sets CUDA_VISIBLE_DEVICES from them
            (d / "gres.conf").write_text(
                "AutoDetect=off\n" + "".join(f"Name=gpu File={f}\n" for f in self.gpu_files))
            gres = f" Gres=gpu:{self.gpus}"
        # slurmd sets up its cgroup plugin even with proctrack/linuxproc and task/none; on a
        # cgroup v2 machine without systemd (a container, a VM's bare init) it makes its scope
        # by hand (22.05 has no CgroupPlugin=disabled)
        (d / "cgroup.conf").write_text("CgroupPlugin=autodetect\nIgnoreSystemd=yes\n"
                                       "CgroupAutomount=yes\n")
        (d / "slurm.conf").write_text(f"""ClusterName=graderone
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={self.sockets}/munge
StateSaveLocation={d}/state
SlurmdSpoolDir={self.sockets}/spool
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
{"GresTypes=gpu" if self.gpus else ""}
NodeName={host} NodeAddr=127.0.0.1 CPUs={self.cpus}{gres} State=UNKNOWN
PartitionName={self.partition} Nodes={host} Default=YES MaxTime=INFINITE State=UP
""")

    def logs(self) -> str:
        return "".join(f"--- {f.name}\n{f.read_text()[-2000:]}" for f in
                       (self.dir / "slurmctld.log", self.dir / "slurmd.log",
                        self.dir / "munge" / "log") if f.exists())

    def __enter__(self) -> "Cluster":
        self._write_conf()
        d, env = self.dir, self.env
        try:
            p = _run(["munged", "--force", f"--socket={self.sockets}/munge",
                      f"--key-file={d}/munge/key", f"--pid-file={d}/munge/pid",
                      f"--log-file={d}/munge/log", f"--seed-file={d}/munge/seed"], env)
            if p.returncode != 0:
                raise RuntimeError(f"munged: {p.stderr}{self.logs()}")
            self.started.append("munged")
            self._slice = _make_system_slice()
            for daemon in (["slurmctld", "-i"], ["slurmd"]):
                p = _run(daemon, env)
                if p.returncode != 0:
                    raise RuntimeError(f"{daemon[0]}: {p.stderr}{self.logs()}")
                self.started.append(daemon[0])
            deadline = time.time() + 60
            while True:  # the node registers with the controller: idle
                p = _run(["sinfo", "-h", "-o", "%T"], env)
                if p.returncode == 0 and p.stdout.strip() == "idle":
                    return self
                if time.time() > deadline:
                    raise RuntimeError(f"the node did not come up: {p.stdout}{p.stderr}\n"
                                       + self.logs())
                time.sleep(0.5)
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self) -> None:
        """Stop what this cluster started, by its pid files: never another cluster's daemons."""
        if "slurmctld" in self.started or "slurmd" in self.started:
            _run(["scontrol", "shutdown"], self.env)
        for name in ("slurmd", "slurmctld"):
            _kill_pidfile(self.dir / f"{name}.pid")
        if "munged" in self.started:
            _run(["munged", "--stop", f"--socket={self.sockets}/munge"], self.env)
            _kill_pidfile(self.dir / "munge" / "pid")
        self.started.clear()
        if self.sockets:
            shutil.rmtree(self.sockets, ignore_errors=True)
            self.sockets = None
        if self._slice:  # the slice made for slurmd, once its scopes are empty (deepest first)
            for sub in sorted(self._slice.rglob("*"), key=lambda p: -len(p.parts)):
                if sub.is_dir():
                    try:
                        sub.rmdir()
                    except OSError:
                        pass
            try:
                self._slice.rmdir()
            except OSError:
                pass
            self._slice = None

    def wait(self, jobid: str, timeout: float) -> bool:
        return wait(self.env, jobid, timeout)


def wait(env: dict, jobid: str, timeout: float | None = None) -> bool:
    """Until the job has left the queue of the cluster `env` names (True), or timeout seconds
    (False; None: no limit)."""
    deadline = None if timeout is None else time.time() + timeout
    while deadline is None or time.time() < deadline:
        p = _run(["squeue", "-h", "-j", jobid, "-o", "%i %T"], env)
        if p.returncode == 0 and not p.stdout.strip():
            return True
        time.sleep(1)
    return False


def _make_system_slice() -> Path | None:
    """slurmd 22.05 with IgnoreSystemd makes its scope in /sys/fs/cgroup/system.slice, which
    only systemd creates: on a cgroup v2 machine without it (a VM's bare init) the slice is made
    here, and removed again by stop(). None where nothing was made."""
    root = Path("/sys/fs/cgroup")
    try:
        v2 = any(line.split()[1:3] == [str(root), "cgroup2"]
                 for line in Path("/proc/mounts").read_text().splitlines())
    except OSError:
        return None
    if not v2 or (root / "system.slice").exists() or os.geteuid() != 0:
        return None
    try:
        (root / "system.slice").mkdir()
    except OSError:
        return None
    return root / "system.slice"


def _kill_pidfile(path: Path) -> None:
    try:
        pid = int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for i in range(50):
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return
            if i == 0:
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    return
            time.sleep(0.1)


# What the daemons and a job's step load with the slurm.conf above (read from /proc/PID/maps of
# a running cluster and job here), the GPU gres plugins, and every "none" plugin: a bundle for
# a machine without the packages holds these only (all 356 plugins link 80 MB of libraries).
PLUGINS = ("accounting_storage_none", "acct_gather_*_none", "auth_munge", "cgroup_v*",
           "core_spec_none", "cred_munge", "ext_sensors_none", "hash_k12", "job_container_none",
           "jobacct_gather_none", "jobcomp_none", "mcs_none", "mpi_*", "preempt_none",
           "prep_script", "priority_basic", "proctrack_linuxproc", "route_default",
           "sched_backfill", "select_*", "serializer_*", "switch_*", "task_none",
           "topology_none", "gres_gpu", "gpu_generic", "*_none")
PROGRAMS = ("/usr/sbin/munged", "/usr/sbin/slurmctld", "/usr/sbin/slurmd",
            "/usr/sbin/slurmstepd", "/usr/bin/sbatch", "/usr/bin/squeue", "/usr/bin/scontrol",
            "/usr/bin/sinfo", "/usr/bin/scancel", "/usr/bin/srun", "/usr/bin/sacct")
GLIBC = ("libc.so", "libm.so", "libresolv.so", "libpthread.so", "libdl.so", "librt.so",
         "ld-linux")


def bundle(into: Path) -> None:
    """A tar.gz of the programs, the plugins above, libslurmfull and the shared libraries they
    link (glibc left out: the target's own is used), at their paths, links resolved."""
    import tarfile
    plugdir = Path("/usr/lib/x86_64-linux-gnu/slurm-wlm")
    files = {Path(p) for p in PROGRAMS} | {plugdir / "libslurmfull.so"}
    files |= {f for pattern in PLUGINS for f in plugdir.glob(f"{pattern}.so")}
    libs = set()
    for f in files:
        out = subprocess.run(["ldd", str(f.resolve())], capture_output=True, text=True).stdout
        for line in out.splitlines():
            parts = line.split()
            if "=>" in parts and len(parts) > 2 and parts[2].startswith("/") and \
                    not any(g in parts[2] for g in GLIBC):
                libs.add(Path(parts[2]))
    with tarfile.open(into, "w:gz") as tar:
        for f in sorted(files | libs):
            # the link's path, its content; /lib as /usr/lib (merged /usr: a tar member under
            # the /lib link would be written through it anyway)
            name = str(f).lstrip("/")
            tar.add(f.resolve(), arcname="usr/" + name if name.startswith("lib/") else name)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("folder", type=Path)
    p.add_argument("--gpus", type=int, default=0)
    p.add_argument("--bundle", action="store_true",
                   help="write FOLDER/slurm-bundle.tgz (the daemons' files) and start nothing")
    p.add_argument("command", nargs="*")
    a = p.parse_args(argv)
    a.folder.mkdir(parents=True, exist_ok=True)
    if a.bundle:
        bundle(a.folder / "slurm-bundle.tgz")
        print(a.folder / "slurm-bundle.tgz")
        return 0
    if missing():
        print(f"slurm_cluster.py: not installed: {', '.join(missing())}", file=sys.stderr)
        return 2
    with Cluster(a.folder, gpus=a.gpus) as c:
        print(f"one-node cluster up: SLURM_CONF={c.env['SLURM_CONF']}", flush=True)
        if a.command:
            return subprocess.run(a.command, env=c.env).returncode
        # no command: up until Ctrl-C (or SIGTERM), for commands from another shell
        print(f"in another shell: export SLURM_CONF={c.env['SLURM_CONF']}; Ctrl-C stops it",
              flush=True)
        def leave(*_):  # once: a second signal must not cut the daemons' stopping short
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            sys.exit(0)
        signal.signal(signal.SIGTERM, leave)
        signal.signal(signal.SIGINT, leave)
        signal.pause()
        return 0


if __name__ == "__main__":
    sys.exit(main())
