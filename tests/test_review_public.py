"""grader.judge.review never accuses honest code: every solution and starter track, Liger-Kernel's
RMSNorm and softmax as installed (read from site-packages, graded through glue like
tests/public_kernels/06_rmsnorm's), kernels in the manner of the Triton tutorials (fused softmax,
layer norm, matmul, fused attention: tests/public_kernels/), the public-style fixtures, and a file
of every odd statement Python 3.10-3.12 allows. Review only: static, no grading. The allowlist's
tables of the installed torch and triton are checked against the packages themselves."""
import ast
import importlib
import importlib.util
import shutil
import sys
import types
from pathlib import Path

import pytest

from grader.common.discover import discover
from grader.common.paths import ROOT
from grader.judge import review_allow as allow
from grader.judge.review import review_track
from grader.judge.review_paths import judge_path

TRACKS = [(tree, ex, track) for tree in ("solutions", "starter") for ex in discover()
          for track in ex.tracks.values() if (ROOT / tree / ex.id / track.name).is_dir()]
TESTS = Path(__file__).parent
PUBLIC = sorted([p.relative_to(TESTS) for p in (TESTS / "public_kernels").glob("*/*")]
                + [p.relative_to(TESTS) for p in (TESTS / "review_fixtures" / "public").glob("*/*")])


@pytest.mark.parametrize("tree,ex,track", TRACKS,
                         ids=[f"{t}-{e.id}-{k.name}" for t, e, k in TRACKS])
def test_honest_tracks_are_not_flagged(tree, ex, track):
    assert review_track(ROOT / tree / ex.id / track.name, list(track.files)) == []


def test_every_tree_is_covered():
    assert len(TRACKS) >= 30  # both trees, all thirteen exercises, every track


@pytest.mark.parametrize("folder", PUBLIC, ids=[str(p) for p in PUBLIC])
def test_public_kernels_are_not_flagged(folder):
    found = review_track(TESTS / folder, [])
    assert found == [], [str(f) for f in found]


def test_the_tutorial_kernels_are_all_here():
    names = {p.parts[-2] for p in PUBLIC}
    assert {"05_softmax", "07_layernorm", "12_matmul_tc", "13_flash_attention"} <= names


LIGER = {  # Liger-Kernel's file -> (exercise, the entry point's glue)
    "rms_norm.py": ("06_rmsnorm", "rmsnorm.py",
                    "import torch\nfrom liger_rms_norm import LigerRMSNormFunction\n\n\n"
                    "def rmsnorm(x: torch.Tensor, w: torch.Tensor, eps: float = 1e-6):\n"
                    "    return LigerRMSNormFunction.apply(x, w, eps, 0.0, 'llama', False)\n"),
    "softmax.py": ("05_softmax", "softmax.py",
                   "import torch\nfrom liger_softmax import LigerSoftmaxFunction\n\n\n"
                   "def softmax(x: torch.Tensor) -> torch.Tensor:\n"
                   "    return LigerSoftmaxFunction.apply(x)\n"),
}


@pytest.mark.parametrize("source", sorted(LIGER))
def test_liger_kernels_as_installed_are_not_flagged(tmp_path, source):
    """Liger's own files (liger-kernel, requirements.txt), beside their glue in a track folder:
    the files the denylist crashed on (issue 36: a `with` statement's items)."""
    spec = importlib.util.find_spec("liger_kernel")
    if spec is None:
        pytest.skip("liger-kernel is not installed here (requirements.txt installs it)")
    exercise, glue_name, glue = LIGER[source]
    track = tmp_path / exercise / "triton"
    track.mkdir(parents=True)
    shutil.copy(Path(spec.origin).parent / "ops" / source, track / f"liger_{source}")
    (track / glue_name).write_text(glue)
    found = review_track(track, [glue_name])
    assert found == [], [str(f) for f in found]
    if source == "rms_norm.py":  # its `with device_context(...)`: what crashed the old review
        assert "with device_context" in (track / f"liger_{source}").read_text()


ODD = ["odd_syntax.py"] + (["odd_syntax_312.py"] if sys.version_info >= (3, 12) else [])


@pytest.mark.parametrize("name", ODD)
def test_odd_but_honest_python_is_not_flagged(tmp_path, name):
    shutil.copy(TESTS / "review_fixtures" / "honest" / name, tmp_path / "op.py")
    found = review_track(tmp_path, ["op.py"])
    assert found == [], [str(f) for f in found]


def test_the_odd_files_hold_every_kind_of_statement_expression_and_pattern():
    """So that the test above reads all of this Python's grammar (3.12's type statements and
    parameters where it runs on 3.12)."""
    trees = [ast.parse((TESTS / "review_fixtures" / "honest" / n).read_text()) for n in ODD]
    seen = {type(n) for t in trees for n in ast.walk(t)}
    kinds = {c for base in (ast.stmt, ast.expr, ast.pattern) for c in base.__subclasses__()}
    assert not {c.__name__ for c in kinds - seen}


# --- the allowlist's tables, against the installed packages ------------------------------------

ALLOWED = sorted(m for m in allow.MODULES if m.split(".")[0] in ("torch", "triton"))
PUBLIC_ALLOWED = [m for m in ALLOWED if allow.MODULES[m] is allow.PUBLIC]


@pytest.mark.filterwarnings("ignore::FutureWarning")  # torch.distributed's deprecated names
@pytest.mark.parametrize("name", ALLOWED)
def test_the_allowed_modules_exist_and_their_module_attributes_are_known(name):
    """Every module-valued public attribute of an allowed module is either allowed itself or
    known to the review as a module (so that torch.<module> outside the allowlist is flagged):
    a new torch or triton that adds one fails here, naming it. (torch.ops' namespaces are module
    objects by implementation, and op namespaces by use: torch.ops.<the track's namespace>.)"""
    pytest.importorskip(name.split(".")[0])
    if name == "torch.ops":
        pytest.skip("torch.ops.<namespace> is an op namespace")
    module = importlib.import_module(name)
    unknown = []
    for attr in dir(module):
        if attr.startswith("_") or not isinstance(getattr(module, attr, None), types.ModuleType):
            continue
        problem, is_module = judge_path(f"{name}.{attr}")
        if problem is None and not is_module:
            unknown.append(attr)
    assert not unknown, f"{name}: module attributes the review takes for objects: {unknown}"


@pytest.mark.parametrize("name", PUBLIC_ALLOWED)
def test_public_functions_of_allowed_modules_are_not_taken_for_modules(name):
    pytest.importorskip(name.split(".")[0])
    module = importlib.import_module(name)
    wrong = [a for a in dir(module) if not a.startswith("_")
             and callable(getattr(module, a, None))
             and not isinstance(getattr(module, a, None), types.ModuleType)
             and judge_path(f"{name}.{a}")[0] is not None
             and a not in allow.DENIED.get(name, {})]
    assert not wrong, f"{name}: functions or classes flagged as modules: {wrong}"
