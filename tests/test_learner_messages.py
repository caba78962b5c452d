"""What a learner reads for the usual mistakes: each message is triggered by a submission (a
solution with a small text edit, conftest.variant) graded through grader.grade.grade_track, and
its text checked. On a CPU the Triton tracks run on the interpreter."""
import pytest

from grader.discover import discover
from grader.grade import grade_track

EX05 = discover(only="05")[0]


@pytest.fixture(autouse=True)
def _fewer_examples(monkeypatch):
    monkeypatch.setenv("CI", "1")  # derandomized hypothesis examples, fewer of them


def failed(result) -> dict:
    """{check name with parameters: message} of the failed checks."""
    return {c.name: c.message for c in result.checks if c.outcome == "failed"}


def passed(result) -> set:
    return {c.name for c in result.checks if c.outcome == "passed"}


# --- gradcheck (grader.testing.gradcheck_checked) ----------------------------------------------

def test_gradcheck_names_a_forward_that_ignores_float64(variant, configure):
    """The forward computes in float32 for float64 inputs: gradcheck's finite differences are then
    noise, and the message says so (not the backward, not a Jacobian)."""
    tree = variant("05_softmax", "triton", {"softmax.py": [
        ("acc_ty = tl.float64 if F64 else tl.float32", "acc_ty = tl.float32")]})
    configure(select="test_gradcheck")
    found = failed(grade_track(tree, EX05, EX05.tracks["triton"]))
    assert found, "a float32 forward passed gradcheck"
    for name, msg in found.items():
        assert msg.startswith("the forward ignores float64: y["), (name, msg)
        assert "computes in float32" in msg and "the float64 reference" in msg, msg
        assert "tensor(" not in msg and "numerical:" not in msg, msg


def test_gradcheck_locates_a_wrong_backward(variant, configure):
    """A wrong backward formula: which input, which output, the largest difference and its
    index, numerical against analytical there, and the formula to check; no Jacobians."""
    tree = variant("05_softmax", "triton", {"softmax.py": [
        ("tl.store(dx_row + cols, (y * (dy - dot))", "tl.store(dx_row + cols, (y * (dy - 0.5 * dot))")]})
    configure(select="test_gradcheck")
    found = failed(grade_track(tree, EX05, EX05.tracks["triton"]))
    assert found, "a wrong backward passed gradcheck"
    for name, msg in found.items():
        assert msg.startswith("gradcheck: dx is wrong (the Jacobian of y with respect to `x`"), \
            (name, msg)
        assert "the largest difference" in msg and "is at x[" in msg, msg
        assert "numerical" in msg and "analytical (your backward)" in msg, msg
        assert "check the backward's formula for dx: dx = y * (dy - sum(dy * y))" in msg, msg
        assert "tensor(" not in msg and len(msg.splitlines()) <= 4, msg


# --- staged exercises: the forward alone passes the forward checks -------------------------------

STAGED = [  # exercise, track, file, the backward's first line (a stub raises right after it)
    ("06_rmsnorm", "triton", "rmsnorm.py",
     "def _bwd_impl(dy, x, w, rstd, launch):\n"),
    ("07_layernorm", "cuda", "layernorm.py",
     "def _backward(ctx, dy, _dmean, _drstd):\n"),
    ("08_add_rmsnorm", "triton", "add_rmsnorm.py",
     "def _bwd_impl(dy, dh, h, w, rstd, launch):\n"),
    ("10_layernorm_dropout", "triton", "layernorm_dropout.py",
     "def _backward(dy, x, w, mean, rstd, p, seed, want_dwb):\n"),
]


@pytest.mark.parametrize("exercise,track,file,line", STAGED, ids=[s[0] for s in STAGED])
def test_forward_only_passes_the_forward_checks(variant, configure, exercise, track, file, line):
    """A learner who has written only the forward: its checks pass; those that need gradients
    fail with "start the backward: ..." (not a forward hint, not a crash)."""
    stub = "    raise NotImplementedError('the backward: not implemented yet')\n"
    head, _, rest = line.partition("\n")
    edit = (line, f"{head}\n{stub}{rest}") if rest else (line, line + stub)
    tree = variant(exercise, track, {file: [edit]})
    configure(select="test_forward_matches_reference or test_backward_matches_reference or "
                     "test_gradcheck")
    ex = discover(only=exercise[:2])[0]
    result = grade_track(tree, ex, ex.tracks[track])
    ok, bad = passed(result), failed(result)
    assert any(n.startswith("test_forward_matches_reference") for n in ok), (ok, bad)
    assert bad and not any(n.startswith("test_forward_matches_reference") for n in bad), bad
    for name, msg in bad.items():
        assert msg.startswith("start the backward: the backward: not implemented yet"), \
            (name, msg)


def test_no_device_check_says_check_the_device_first(variant, configure):
    """02 without its device check: a CPU x reaches the device guard, whose error names no
    argument; the message says to check the device first (from that error's text)."""
    tree = variant("02_scale", "cuda", {"scale.cpp": [('  course::check_device(x, "x");\n', "")]})
    configure(select="test_refuses_cpu_tensor")
    ex = discover(only="02")[0]
    found = failed(grade_track(tree, ex, ex.tracks["cuda"]))
    msg = found.get("test_refuses_cpu_tensor", "")
    assert "check the device first" in msg and 'check_device(x, "x")' in msg, found
