"""Ahead-of-time builds (`grade --build aot`, Settings.build): a setup.py-style build with
CUDAExtension/BuildExtension into .cache/aot/, loaded as a shipped binary (torch.ops.load_library
for a TORCH_LIBRARY track), checked like a JIT build; and the refusal of a library built for
another torch.

One real build (06's CUDA track, a TORCH_LIBRARY library with a C++ CPU path: ~1-3 min on 2
cores, cached in .cache/aot/ after that); the refusal reuses its library.
"""
import io
import json
import os
import re
import shutil
import time

import pytest
import torch

from conftest import HAS_GPU, ROOT
from grader.submission.aot import (AOT_MANIFEST, aot_dir, build_aot, read_aot_manifest)
from grader.submission.build_errors import BuildError
from grader.common.paths import CACHE, tree_tag
from grader.common.discover import discover
from grader.run.grade import grade_track

EX06 = discover(only="06")[0]
CUDA = EX06.tracks["cuda"]


@pytest.fixture
def keep_env():
    """build_aot points this process at the toolchain (CUDA_HOME, PATH, ...): undo it."""
    saved = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(saved)


@pytest.fixture(scope="module")
def built():
    """The solution's library, built ahead of time (what `grade --build aot` does first)."""
    saved = dict(os.environ)
    start = time.perf_counter()
    try:
        manifest = build_aot(ROOT / "solutions", EX06, CUDA)
    finally:
        os.environ.clear()
        os.environ.update(saved)
    print(f"AOT build of 06 [cuda]: {time.perf_counter() - start:.0f} s "
          f"({'built' if manifest.get('fresh') else 'cached'})")
    return manifest


def test_aot_library_is_built_outside_the_tree_and_passes_the_cpu_checks(built, configure):
    folder = aot_dir(ROOT / "solutions", EX06, CUDA)
    assert folder == CACHE / "aot" / "solutions" / "06_rmsnorm-cuda"
    lib = folder / built["library"]
    assert built["ok"] and lib.is_file() and lib.name == "rmsnorm_ext.so", built
    assert built["torch"] == torch.__version__ and built["arch_list"]
    track_dir = ROOT / "solutions" / EX06.id / "cuda"
    assert not [p for p in track_dir.rglob("*") if p.suffix in (".so", ".o", ".ninja")]

    configure(build="aot")   # the submission's process loads the binary, no compiler run
    r = grade_track(ROOT / "solutions", EX06, CUDA)
    assert r.build.get("ok"), r.build.get("message")
    assert r.build.get("rebuilt") is False, r.build   # loaded as built ahead of time
    assert not r.ended, f"{r.ended}\n{r.log_tail}"
    bad = [f"{c.name}: {c.outcome}: {c.message[:1500]}" for c in r.checks
           if c.outcome not in ("passed", "needs a GPU")]
    assert not bad, "\n\n".join(bad)
    assert r.count("correctness", "passed") > 0 and r.count("gradcheck", "passed") > 0
    if not HAS_GPU:
        assert r.count("correctness", "needs a GPU") > 0   # the CUDA kernels did not run here
    else:
        assert not [c.name for c in r.checks if c.outcome == "needs a GPU"]


def test_a_library_built_for_another_torch_is_refused(built, tmp_path, keep_env):
    """The solution's library and manifest, copied for a copy of the tree, with the recorded
    torch edited: loading it (what the submission's process does: grader.submission.aot.load_aot) is
    refused, naming both versions and the command that rebuilds it, and it is not rebuilt
    behind the learner's back. (`grade --build aot` itself rebuilds such a library first.)"""
    from grader.submission.aot import load_aot
    tree = tmp_path / "shipped"
    shutil.copytree(ROOT / "solutions" / EX06.id / "cuda", tree / EX06.id / "cuda")
    src, dst = aot_dir(ROOT / "solutions", EX06, CUDA), aot_dir(tree, EX06, CUDA)
    assert tree_tag(tree) in str(dst)
    dst.mkdir(parents=True)
    try:
        shutil.copy(src / built["library"], dst / built["library"])
        manifest = {k: v for k, v in built.items() if k != "fresh"}
        manifest["torch"] = "2.3.0+cu121"
        (dst / AOT_MANIFEST).write_text(json.dumps(manifest))
        with pytest.raises(BuildError) as e:
            load_aot(tree, EX06, CUDA)
        msg = str(e.value)
        assert "refusing to load" in msg and "torch 2.3.0+cu121" in msg, msg
        assert f"torch {torch.__version__}" in msg, msg
        assert "make exercise-06 BUILD=aot" in msg and "--build aot" in msg, msg
        assert read_aot_manifest(tree, EX06, CUDA)["torch"] == "2.3.0+cu121"  # not rebuilt
    finally:
        shutil.rmtree(dst.parent, ignore_errors=True)


def test_a_failed_build_is_summarized_and_recorded(variant, keep_env):
    """Compiler errors come back as the first errors with file and line, as for a JIT build;
    the failure is recorded beside the library, so the same sources are not compiled again."""
    tree = variant(EX06.id, "cuda", {"rmsnorm_kernels.cu": [("#include", "#error broken on purpose\n#include")]})
    try:
        with pytest.raises(BuildError) as e:
            build_aot(tree, EX06, CUDA)
        assert re.search(r"rmsnorm_kernels\.cu:\d+: error: .*broken on purpose", str(e.value)), str(e.value)
        start = time.perf_counter()
        with pytest.raises(BuildError) as again:
            build_aot(tree, EX06, CUDA)
        assert str(again.value) == str(e.value) and time.perf_counter() - start < 5
        assert read_aot_manifest(tree, EX06, CUDA)["ok"] is False
    finally:
        shutil.rmtree(aot_dir(tree, EX06, CUDA).parent, ignore_errors=True)


def test_grade_builds_ahead_before_the_checks(built, keep_env):
    """`grade --build aot` builds (or finds up to date) each CUDA track's library in the grader,
    before the sandboxed submission process that only loads it."""
    from grader.common.settings import Settings
    from grader.run.grade import _build_ahead
    from grader.run.progress import Progress
    from grader.run.tracks import Judges
    out = io.StringIO()
    _build_ahead(Judges(ROOT / "solutions", Settings(build="aot")), EX06, CUDA,
                 Progress(out).print)
    out = out.getvalue().strip().splitlines()
    assert len(out) == 1 and out[0].startswith("built ahead of time 06_rmsnorm [cuda]: "), out
    assert "rmsnorm_ext.so (up to date, torch " in out[0], out


def test_unknown_build_mode_is_one_line(configure):
    from grader.submission.loader import _build
    from grader.common.settings import current
    configure(build="wheel")
    current.cache_clear()
    with pytest.raises(BuildError, match="build mode 'wheel': use jit or aot"):
        _build(ROOT / "solutions", EX06, CUDA, None)
