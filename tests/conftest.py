import ctypes
import dataclasses
import fcntl
import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest
import torch

from grader.common.machine import landlock_abi
from grader.common.settings import VARIABLE, Settings

ROOT = Path(__file__).resolve().parent.parent
HAS_GPU = torch.cuda.is_available()
# The project's own tests grade with hypothesis' fixed examples (6, the same every run: a red
# test is a change, never noise), chosen here and passed on as a grade's settings; a learner's
# grade never reads the environment for that (not even CI=true, which GitHub Classroom sets).
FIXED = Settings(examples="fixed")
os.environ.setdefault(VARIABLE, FIXED.env()[VARIABLE])


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs a CUDA GPU (skipped with a reason without one)")
    config.addinivalue_line("markers", "timed: times on the GPU: has it to itself (_gpu_turns)")
    # the exercises' own marks, met where a test loads an exercise's checks to use its helpers
    config.addinivalue_line("markers", "backward: (an exercise's check) of the backward stage")
    config.addinivalue_line("markers", "gradcheck: (an exercise's check) torch.autograd.gradcheck")
    from grader.common.machine import landlock_available
    if getattr(config.option, "numprocesses", None) and not landlock_available():
        # without Landlock every grade snapshots the repository and restores it afterwards: the
        # gallery's tampering entries really write into it, and a grade in another worker would
        # read (and restore, and be blamed for) those writes
        raise pytest.UsageError("tests in parallel (-n) need Landlock (pip install -r "
                                "requirements.txt: the landlock package, and a Linux kernel "
                                "with Landlock); without it, run them in one process")


def pytest_collection_modifyitems(config, items):
    skip = pytest.mark.skip(reason="needs a GPU: runs on the GPU machine (make test there)")
    for item in items:
        if "gpu" in item.keywords and not HAS_GPU:
            item.add_marker(skip)


# On a GPU host the tests' workers (pytest-xdist) share one GPU. A timed test must have it to
# itself: the grade's timed-alone check (grader.judge.alone) would otherwise find another
# worker's kernels in each of its stretches, time again, and at last rightly give no credit. So
# every test holds this lock while it runs, shared, and a timed one exclusive.
GPU_LOCK = Path(tempfile.gettempdir()) / (
    "grader-tests-gpu-" + hashlib.sha1(str(ROOT).encode()).hexdigest()[:12] + ".lock")


@pytest.fixture(autouse=True)
def _gpu_turns(request):
    if not HAS_GPU:
        yield
        return
    with open(GPU_LOCK, "a") as lock:
        timed = request.node.get_closest_marker("timed") is not None
        fcntl.flock(lock, fcntl.LOCK_EX if timed else fcntl.LOCK_SH)
        yield


def make_variant(tree: Path, exercise: str, track: str, edits: dict,
                 files: dict | None = None) -> Path:
    """Copy solutions/<exercise>/<track> into `tree`, apply `edits` ({file: [(old, new)]}, each
    `old` replaced once) and write `files` ({file: whole content}): a known-bad submission. Each
    `old` must occur in the solution, so a changed solution fails loudly here, naming what is
    missing."""
    src = ROOT / "solutions" / exercise / track
    dst = tree / exercise / track
    shutil.copytree(src, dst)
    for name, pairs in edits.items():
        text = (dst / name).read_text()
        for old, new in pairs:
            assert old in text, f"{old!r} not in solutions/{exercise}/{track}/{name}"
            text = text.replace(old, new, 1)
        (dst / name).write_text(text)
    for name, text in (files or {}).items():
        (dst / name).parent.mkdir(parents=True, exist_ok=True)
        (dst / name).write_text(text)
    return tree


def signal_fence(mode: str) -> str:
    """The state line the sandbox reports with the signal fence `mode` up (auto: Landlock's
    scope, ABI 6+; seccomp: the fallback filter, libseccomp); skip where this machine cannot
    put it up (a submission that signals out would then reach the grader's processes)."""
    if mode == "auto" and landlock_abi() < 6:
        pytest.skip(f"Landlock ABI {landlock_abi()} has no signal scope (Linux 6.12+)")
    if mode == "seccomp":
        try:
            ctypes.CDLL("libseccomp.so.2")
        except OSError:
            pytest.skip("no libseccomp.so.2 here: the seccomp fallback cannot be put up")
    return "signals: Landlock scope" if mode == "auto" else "signals: seccomp filter"


@pytest.fixture
def variant(tmp_path):
    """A copy of one solution track with text substitutions: a known-bad submission.

    variant("01_vector_add", "triton", {"vector_add.py": [(old, new), ...]}) -> tree path.
    """
    made = []

    def make(exercise: str, track: str, edits: dict) -> Path:
        made.append(exercise)
        return make_variant(tmp_path / f"tree{len(made)}", exercise, track, edits)
    return make


@pytest.fixture(scope="session")
def forker(tmp_path_factory):
    """Where there is no GPU: a judge zygote and a submission zygote that have imported torch,
    triton and pytest once for this test process (grader.run.zygotes), for the grades of many
    small submissions (the known-bads, the learners' mistakes) to fork from, as `make grade` and
    `make exercise-NN` fork from the zygotes they keep (grader.run.keeper): a grade of one
    track then costs ~2-3 s of wall time on the 2-core CI machine instead of ~5-6, most of them
    two processes importing torch. tests/test_exercises.py and tests/test_isolation.py still
    start every process afresh (the path of a grade without zygotes). On a GPU machine, and
    where a zygote refuses to serve: None (each grade starts its processes afresh)."""
    from grader.common.machine import driver_loaded
    from grader.run.zygotes import zygote_forker
    if driver_loaded():
        yield None
        return
    with zygote_forker(FIXED, False, tmp_path_factory.mktemp("zygotes")) as made:
        yield made


@pytest.fixture
def configure(monkeypatch):
    """configure(select=..., repro=..., check_timeout=...): the grader.common.settings.Settings the
    next grade_track of this test runs with (hypothesis' fixed examples unless said otherwise),
    passed as the CLI passes them to every process."""
    def set_(**fields):
        fields.setdefault("examples", FIXED.examples)
        monkeypatch.setenv(VARIABLE, json.dumps(dataclasses.asdict(Settings(**fields))))
    return set_
