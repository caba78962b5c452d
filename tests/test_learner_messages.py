"""What a learner reads for the usual mistakes: each message is triggered by a submission (a
solution with a small text edit, conftest.variant) graded through grader.run.grade.grade_track, and
its text checked. On a CPU the Triton tracks run on the interpreter."""
import os
import subprocess
import sys
import tomllib

import pytest
import torch

from conftest import ROOT
from grader.cli import main
from grader.common.discover import discover
from grader.common.events import AWAITS_FORWARD
from grader.judge.check import Mismatch
from grader.judge.testing import AWAITS_BACKWARD, WRITES_NOTHING, value_and_grads
from grader.run.grade import grade_track
from grader.run.report import feedback, scorecard
from grader.run.results import Check, TrackResult
from grader.run.score import score

EX01 = discover(only="01")[0]
EX05 = discover(only="05")[0]


def failed(result) -> dict:
    """{check name with parameters: message} of the failed checks."""
    return {c.name: c.message for c in result.checks if c.outcome == "failed"}


def passed(result) -> set:
    return {c.name for c in result.checks if c.outcome == "passed"}


# --- gradcheck (grader.judge.gradcheck.gradcheck_checked) ----------------------------------------------

def test_gradcheck_names_a_forward_that_ignores_float64(variant, configure, forker):
    """The forward computes in float32 for float64 inputs: gradcheck's finite differences are then
    noise, and the message says so (not the backward, not a Jacobian)."""
    tree = variant("05_softmax", "triton", {"softmax.py": [
        ("acc_ty = tl.float64 if F64 else tl.float32", "acc_ty = tl.float32")]})
    configure(select="test_gradcheck")
    found = failed(grade_track(tree, EX05, EX05.tracks["triton"], forker=forker))
    assert found, "a float32 forward passed gradcheck"
    for name, msg in found.items():
        assert msg.startswith("the forward ignores float64: y["), (name, msg)
        assert "computes in float32" in msg and "the float64 reference" in msg, msg
        assert "tensor(" not in msg and "numerical:" not in msg, msg


def test_gradcheck_locates_a_wrong_backward(variant, configure, forker):
    """A wrong backward formula: which input, which output, the largest difference and its
    index, numerical against analytical there, and the formula to check; no Jacobians."""
    tree = variant("05_softmax", "triton", {"softmax.py": [
        ("tl.store(dx_row + cols, (y * (dy - dot))", "tl.store(dx_row + cols, (y * (dy - 0.5 * dot))")]})
    configure(select="test_gradcheck")
    found = failed(grade_track(tree, EX05, EX05.tracks["triton"], forker=forker))
    assert found, "a wrong backward passed gradcheck"
    for name, msg in found.items():
        assert msg.startswith("gradcheck: dx is wrong (the Jacobian of y with respect to `x`"), \
            (name, msg)
        assert "the largest difference" in msg and "is at x[" in msg, msg
        assert "numerical" in msg and "analytical (your backward)" in msg, msg
        assert "check the backward's formula for dx: dx = y * (dy - sum(dy * y))" in msg, msg
        assert "tensor(" not in msg and len(msg.splitlines()) <= 4, msg


def test_a_fast_mode_gradcheck_failure_does_not_recompute_the_jacobians():
    """gradcheck's fast mode recomputed both full Jacobians to word a failure (2 forwards per
    input element: 60 s of 05's (2, 600) case on the interpreter). The verdict stays
    gradcheck's; the message is the located one, made from ~2 * 64 forwards."""
    from grader.judge.check import Mismatch
    from grader.judge.gradcheck import gradcheck_checked
    calls = []

    class Twice(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            calls.append(1)
            return x * 2

        @staticmethod
        def backward(ctx, dy):
            return dy * 3  # wrong: d(2x)/dx is 2

    x = torch.randn(2, 600, dtype=torch.float64, requires_grad=True)
    with pytest.raises(Mismatch) as e:
        gradcheck_checked(Twice.apply, (x,), names=("x",), fast_mode=True)
    msg = str(e.value)
    assert msg.startswith("gradcheck: dx is wrong") and "is at x[" in msg, msg
    assert "Numerical:" not in msg and "tensor(" not in msg, msg
    assert len(calls) < 400, f"{len(calls)} forward calls for 1200 elements"


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
def test_forward_only_passes_the_forward_checks(variant, configure, forker, exercise, track, file,
                                                line):
    """A learner who has written only the forward: its checks pass; those that need gradients
    fail with "start the backward: ..." (not a forward hint, not a crash)."""
    stub = "    raise NotImplementedError('the backward: not implemented yet')\n"
    head, _, rest = line.partition("\n")
    edit = (line, f"{head}\n{stub}{rest}") if rest else (line, line + stub)
    tree = variant(exercise, track, {file: [edit]})
    configure(select="test_forward_matches_reference or test_backward_matches_reference or "
                     "test_gradcheck")
    ex = discover(only=exercise[:2])[0]
    result = grade_track(tree, ex, ex.tracks[track], forker=forker)
    ok, bad = passed(result), failed(result)
    assert any(n.startswith("test_forward_matches_reference") for n in ok), (ok, bad)
    assert bad and not any(n.startswith("test_forward_matches_reference") for n in bad), bad
    for name, msg in bad.items():
        assert msg.startswith("start the backward: the backward: not implemented yet"), \
            (name, msg)


def test_no_device_check_says_check_the_device_first(variant, configure, forker):
    """02 without its device check: a CPU x reaches the device guard, whose error names no
    argument; the message says to check the device first (from that error's text)."""
    tree = variant("02_scale", "cuda", {"scale.cpp": [('  course::check_device(x, "x");\n', "")]})
    configure(select="test_refuses_cpu_tensor")
    ex = discover(only="02")[0]
    found = failed(grade_track(tree, ex, ex.tracks["cuda"], forker=forker))
    msg = found.get("test_refuses_cpu_tensor", "")
    assert "check the device first" in msg and 'check_device(x, "x")' in msg, found


# --- a newcomer's usual mistakes in 01 and 05 ----------------------------------------------------

def checks(result, prefix: str) -> list:
    """The failed checks whose name starts with `prefix`."""
    return [c for c in result.checks if c.outcome == "failed" and c.name.startswith(prefix)]


def grade_checks(configure, tree, ex, *names: str, track: str = "triton", forker=None):
    """Grade only the checks `names` of one track: (the result, the failed checks of each);
    `forker`: conftest's, the session's zygotes."""
    configure(select=" or ".join(names))
    result = grade_track(tree, ex, ex.tracks[track], forker=forker)
    return result, [checks(result, name) for name in names]


def line_of(tree, exercise: str, track: str, file: str, text: str) -> int:
    lines = (tree / exercise / track / file).read_text().splitlines()
    return next(i + 1 for i, line in enumerate(lines) if text in line)


interpreter_only = pytest.mark.skipif(
    torch.cuda.is_available(), reason="a GPU is here: the grader runs Triton compiled, not on "
                                      "the interpreter (whose messages these are)")


@interpreter_only
def test_unmasked_load_points_at_its_line_once(variant, configure, forker):
    """The classic: a tl.load without a mask. The failure is located at that line of the kernel
    (not the launch), says "mask it" once (the interpreter's wrapped copies of the same error are
    not repeated), and shows no check hint about another subject ("keep nothing between
    calls")."""
    load = "x = tl.load(x_ptr + offsets)"
    tree = variant("01_vector_add", "triton", {"vector_add.py": [
        ("x = tl.load(x_ptr + offsets, mask=mask)", load)]})
    result, _ = grade_checks(configure, tree, EX01, "test_matches_reference",
                             "test_new_contents_same_shapes", forker=forker)
    line = line_of(tree, "01_vector_add", "triton", "vector_add.py", load)
    bad = checks(result, "test_")
    assert {c.name.partition("[")[0] for c in bad} == {"test_matches_reference",
                                                       "test_new_contents_same_shapes"}, bad
    for c in bad:
        assert c.where == f"vector_add.py:{line}", (c.name, c.where)
        assert c.message.count("out-of-bounds tl.load") == 1, c.message
        assert "pointer argument `x_ptr`" in c.message and "mask it (tl.load(" in c.message, \
            c.message
        assert "caused by" not in c.message and c.hint == "", (c.message, c.hint)


@interpreter_only
def test_out_of_bounds_under_a_mask_blames_the_offsets(variant, configure, forker):
    """x's stride used for y too: y's loads run past its end although they are masked. The
    message says the mask is there (not "mask it"), points at the offsets, names the view."""
    load_y = "y = tl.load(y_ptr + offsets * sx, mask=mask)"
    tree = variant("01_vector_add", "triton", {"vector_add.py": [
        ("def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):",
         "def add_kernel(x_ptr, y_ptr, out_ptr, n, sx, BLOCK: tl.constexpr):"),
        ("x = tl.load(x_ptr + offsets, mask=mask)", "x = tl.load(x_ptr + offsets * sx, mask=mask)"),
        ("y = tl.load(y_ptr + offsets, mask=mask)", load_y),
        ('for name, t in (("x", x), ("y", y)):', 'for name, t in (("y", y),):'),
        ("add_kernel[grid](x, y, out, n, BLOCK=BLOCK,",
         "add_kernel[grid](x, y, out, n, x.stride(0), BLOCK=BLOCK,")]})
    _, (bad,) = grade_checks(configure, tree, EX01, "test_strided_input_handled_or_refused",
                             forker=forker)
    assert bad, "reading y with x's stride passed"
    line = line_of(tree, "01_vector_add", "triton", "vector_add.py", load_y)
    for c in bad:
        assert c.message.startswith("out-of-bounds tl.load") and "`y_ptr`" in c.message, c.message
        assert "on under its mask" in c.message and "mask it (" not in c.message, c.message
        assert "(with `x` given as a strided view, every other input dense)" in c.message, \
            c.message
        assert c.where == f"vector_add.py:{line}", c.where


def test_grid_rounded_down_is_not_blamed_on_a_view_or_a_cache(variant, configure, forker):
    """n // BLOCK programs: the tail (here all of it: n < BLOCK) is never written. The view check
    and the repeated-call check say it is wrong on plain inputs too (not the view, not a kept
    result), with the grid's fix, and without their own hints."""
    tree = variant("01_vector_add", "triton", {"vector_add.py": [
        ("grid = (triton.cdiv(n, BLOCK),)", "grid = (n // BLOCK,)")]})
    result, (views, twice) = grade_checks(configure, tree, EX01,
                                          "test_strided_input_handled_or_refused",
                                          "test_new_contents_same_shapes", forker=forker)
    assert views and twice, result.checks
    for c in views:
        assert c.message.startswith("wrong with every input dense too, so not because of "), \
            c.message
        assert "into its memory" not in c.message and "its own strides" not in c.message, \
            c.message
    for c in twice:
        assert c.message.startswith("the first call is wrong already"), c.message
    for c in views + twice:
        assert "n // BLOCK" in c.message and "round it up" in c.message, c.message
        assert c.hint == "", c.hint


def test_backward_from_x_gets_no_forward_advice(variant, configure, forker):
    """The backward reads x where it needs y: y is right, dx is not. The checks about the max
    (large magnitudes) and about views say so, without their forward hints, the max-subtraction
    advice, or blaming the view (a dense x is wrong too)."""
    tree = variant("05_softmax", "triton", {"softmax.py": [
        ("ctx.save_for_backward(y)", "ctx.save_for_backward(x)")]})
    result, (large, views) = grade_checks(configure, tree, EX05, "test_large_magnitudes",
                                          "test_strided_x_handled_or_refused", forker=forker)
    assert large and views, result.checks
    for c in large + views:
        assert "y is right but dx is not" in c.message, c.message
        assert "subtracting the max" not in c.message and c.hint == "", (c.message, c.hint)
    for c in views:
        assert c.message.startswith("wrong with a dense x too, so not because of the view"), \
            c.message
        assert "its own strides" not in c.message, c.message


def test_masked_lanes_read_as_zero_are_not_blamed_on_the_shift(variant, configure, forker):
    """Masked lanes loaded as 0 (not -inf): softmax(x) itself is wrong. The shift-invariance
    check says that, not "subtract the max", and the probe of the max's neutral value names the
    cause (grader.judge.probes.max_neutral: right on rows far above 0, wrong far below)."""
    tree = variant("05_softmax", "triton", {"softmax.py": [
        ('x = tl.load(x_row + cols, mask=mask, other=float("-inf")).to(acc_ty)',
         "x = tl.load(x_row + cols, mask=mask, other=0.0).to(acc_ty)")]})
    _, (bad,) = grade_checks(configure, tree, EX05, "test_shift_invariance", forker=forker)
    assert bad, "masked lanes read as 0 passed"
    for c in bad:
        assert c.message.startswith("softmax(x) is wrong already, before any shift"), c.message
        assert "subtracting the max" not in c.message, c.message
        assert "likely cause: masked lanes take part as 0" in c.message, c.message


def test_autograd_function_without_backward_says_start_the_backward(variant, configure, forker):
    """A forward-only autograd.Function (no backward method at all): PyTorch's own error is the
    backward stage not started, not a failure of the forward the check also tests."""
    tree = variant("05_softmax", "triton", {"softmax.py": [(
        """    @staticmethod
    def backward(ctx, dy):
        (y,) = ctx.saved_tensors
        if not ctx.needs_input_grad[0]:
            return None
        return softmax_bwd(y, dy)
""", "")]})
    result, _ = grade_checks(configure, tree, EX05, "test_forward_matches_reference",
                             "test_large_magnitudes", forker=forker)
    assert any(n.startswith("test_forward_matches_reference") for n in passed(result)), \
        result.checks
    bad = checks(result, "test_")
    assert bad and all(c.name.startswith("test_large_magnitudes") for c in bad), bad
    for c in bad:
        assert c.message.startswith("start the backward: You must implement either the "
                                    "backward"), c.message
        assert c.hint == "", c.hint


@interpreter_only
def test_math_on_float16_names_the_kernel_line_and_the_cast(variant, configure, forker):
    """tl.exp of a float16 value (Triton's math takes float32/float64): the kernel's line, not
    the launch; the error once; the cast that fixes it."""
    bad_line = "scale = tl.where(seen, tl.exp((m_j - m_new).to(tl.float16)), 0.0)"
    tree = variant("05_softmax", "triton", {"softmax.py": [
        ("scale = tl.where(seen, tl.exp(m_j - m_new), 0.0)", bad_line)]})
    _, (bad,) = grade_checks(configure, tree, EX05, "test_rows_longer_than_a_block",
                             forker=forker)
    assert bad, "tl.exp of float16 passed"
    line = line_of(tree, "05_softmax", "triton", "softmax.py", bad_line)
    for c in bad:
        assert c.where == f"softmax.py:{line}", (c.where, c.message)
        assert c.message.count("Expected dtype ['fp32', 'fp64'] but got fp16") == 1, c.message
        assert "convert their argument with .to(tl.float32)" in c.message, c.message


# --- staged verdicts: the backward's checks wait for the forward ---------------------------------

def known_bad(variant, mistake: str):
    """The tree of a known-bad (exercises/NN_name/wrong/<name>.toml), its exercise and spec."""
    exercise, name = mistake.split("/")
    spec = tomllib.loads((ROOT / "exercises" / exercise / "wrong" / f"{name}.toml").read_text())
    tree = variant(exercise, spec["track"], {f: [tuple(p) for p in pairs]
                                             for f, pairs in spec["edits"].items()})
    return tree, discover(only=exercise[:2])[0], spec


def test_a_wrong_forward_leaves_the_backward_unchecked_said_once(variant, configure, forker):
    """08 returning y alone: the forward's check says so; the checks of the backward (a
    gradcheck among them) are not run, and the feedback says why once, with no cause of theirs
    (the h-only check said "the backward must return a gradient")."""
    tree, ex, spec = known_bad(variant, "08_add_rmsnorm/returns_only_y")
    result, (forward, *backward) = grade_checks(
        configure, tree, ex, "test_forward_matches_reference", "test_gradient_of_one_output",
        "test_gradcheck", forker=forker)
    assert forward and not any(backward), result.checks
    staged = [c for c in result.checks if c.outcome == "skipped"]
    assert {c.name.partition("[")[0] for c in staged} == {"test_gradient_of_one_output",
                                                         "test_gradcheck"}, result.checks
    assert all(c.message == AWAITS_FORWARD for c in staged)
    text = feedback(ex, result, score(ex, result), full=True)
    assert text.count(AWAITS_FORWARD) == 1 and "must return a gradient" not in text, text
    assert text.index("FAIL test_forward_matches_reference") < text.index(AWAITS_FORWARD), text


class _Unwritten(torch.autograd.Function):
    """A forward that works and a backward that returns gradients it never wrote."""

    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, dy):
        torch.use_deterministic_algorithms(True, warn_only=True)  # empty_like poisons (NaN)
        try:
            return torch.empty_like(dy)
        finally:
            torch.use_deterministic_algorithms(False)


def test_a_backward_that_writes_nothing_is_said_as_such():
    """Every gradient still holds the poison of a fresh allocation: one message, no cause
    guessed, and the backward's other checks wait (grader.judge.plugin: a GPU's known-bad,
    13_flash_attention/backward_writes_nothing, shows them not run)."""
    x = torch.randn(4, 3)
    with pytest.raises(Mismatch) as e:
        value_and_grads(_Unwritten.apply, x, wrt=(0,), dy=torch.ones(4, 3))
    assert str(e.value) == WRITES_NOTHING
    assert e.value.grader_off_topic and e.value.grader_blocks_backward == AWAITS_BACKWARD
    outs, (dx,) = value_and_grads(lambda t: t * 2, x, wrt=(0,), dy=torch.ones(4, 3))
    assert torch.equal(dx, torch.full((4, 3), 2.0))


def test_an_op_that_returns_too_few_outputs_is_told_so():
    with pytest.raises(Mismatch, match=r"returned 1 output\(s\) where 2 are expected"):
        value_and_grads(lambda t: t * 2, torch.randn(3), wrt=(0,), dy=(None, torch.ones(3)))


# --- REPRO: one check, no points, and refusals that say what is wrong ------------------------------

def test_repro_shows_no_points():
    ex = discover(only="01")[0]
    r = TrackResult(ex.id, "triton", "t", build={"ok": True, "stage": "import", "seconds": 1.0},
                    checks=(Check("test_matches_reference[cpu]", "correctness", "failed", "y"),))
    graded = scorecard([(ex, r, score(ex, r))], title="t")
    assert "points" in graded and "total:" in graded
    one = scorecard([(ex, r, score(ex, r))], title="t", points=False)
    assert "points" not in one and "total" not in one and "0/1" in one, one


@pytest.mark.parametrize("args, said", [
    (["--repro", "test_x"], "has no '@EXAMPLE'"),
    (["--repro", "test_x@", "--exercise", "01"], "has no example"),
    (["--repro", "@AAAA", "--exercise", "01"], "has no check name"),
    (["--repro", "test_x@A!B", "--exercise", "01"], "is not one a failure printed"),
    (["--repro", "test_x@AAAA"], "give it (--exercise NN)"),
    (["--repro", "test_x@AAAA", "--exercise", "01,02"], "names several (01,02)"),
])
def test_repro_refusals_say_what_is_wrong(args, said):
    with pytest.raises(SystemExit) as e:
        main(["grade", *args])
    assert said in str(e.value), e.value


def test_the_walk_makes_every_tree():
    """benchmarks/learner_walk.sh, dry: each mistake of the newcomer's walk is a known-bad whose
    edits apply to today's solution, and the grade it runs is `python -m grader grade`."""
    out = subprocess.run(["bash", "benchmarks/learner_walk.sh"], cwd=ROOT, capture_output=True,
                         text=True, timeout=600,
                         env=dict(os.environ, DRY_RUN="1", PY=sys.executable))
    assert out.returncode == 0, out.stderr
    walked = [line for line in out.stdout.splitlines() if line.startswith("== ")]
    graded = [line for line in out.stdout.splitlines() if line.startswith("+ ")]
    assert len(walked) == len(graded) == 8, out.stdout
    assert all(" -m grader grade --exercise " in line for line in graded), graded
