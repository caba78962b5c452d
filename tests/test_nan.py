"""NaN never passes: each output of each solution, in turn, filled with NaN fails the checks.

A NaN compares false with every bound, so a check written `if err > tol: raise` lets it through
(exercise 13's dq check did). grader.judge.check.within is the one helper such bounds go
through (tests/test_nan_source.py holds every check's source to it); here the checks run, end
to end through the grader, against solutions that return NaN:

- each solution is wrapped (a copy of its track, the module file appended to: `WRAPPER`): the
  entry point calls the solution, then fills one output with NaN: a returned tensor (a fresh
  tensor of NaN whose gradient passes through to the solution's output, so the other outputs
  stay right), a gradient (the input passes through an identity whose backward gives NaN), or
  what an in-place form wrote into its argument (02, whose entry point is the registered op
  itself, writes its NaN in C++: `IN_CPP`). Everything else is the solution's own;
- for each output, the one or two checks that reach it (the groups below) run with hypothesis'
  fixed examples; each instance that runs must fail, its message naming the NaN (a failure for
  another reason, say the wrapper's own ATen ops taken for delegation, would show here), and the
  grader's own check (your kernels do the work) must not fail;
- round r poisons the r-th output of every entry point, and grades all those tracks in one grade
  (side by side, their processes forked from two zygotes that imported torch once for all
  rounds, as `make watch-NN` does); only the wrapper's target line changes between rounds, so a
  CUDA track is built once, and the wrapped trees sit in the grader's cache (`TREES`) so that a
  later run builds nothing either.

Outputs that cannot hold NaN are left out: 09's q is int8 (its checks compare it exactly).
Where a check runs: Triton tracks on the CPU (the interpreter) and on a GPU; CUDA tracks' C++ CPU
paths (03, 04, 07, 11: the exercises whose only track is CUDA) on the CPU; the CUDA tracks
without a CPU path (02, 12's CUTLASS) and those whose checks the Triton track of the same
exercise already runs here (06, 09), on a GPU only (`gpu`). On a GPU machine every group runs.
"""
from __future__ import annotations

import ast
import re
import shutil
import tempfile
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from conftest import FIXED, make_variant
from grader.common.discover import discover
from grader.common.machine import driver_loaded
from grader.common.paths import CACHE
from grader.run.grade import Submission, grade
from grader.run.zygotes import zygote_forker

EXERCISES = {ex.id: ex for ex in discover()}
TREES = CACHE / "tests" / "nan"   # the wrapped trees, kept (and their builds) between runs


@dataclass(frozen=True)
class Target:
    """One output of one entry point: `kind` "output" (a returned tensor, by index), "grad" (the
    gradient of a positional argument) or "in place" (what the entry wrote into an argument);
    `checks`: a pytest -k expression of the checks that reach it (in the exercise's test file)."""
    exercise: str
    track: str
    entry: str
    kind: str
    index: int
    name: str
    checks: str

    @property
    def id(self) -> str:
        return f"{self.exercise}[{self.track}] {self.entry}: {self.name}"


def _targets(exercise, track, entry, outputs, checks):
    """Targets of one entry point: `outputs` [(kind, index, name)], each reached by `checks`
    (one expression, or one per output)."""
    checks = checks if isinstance(checks, list) else [checks] * len(outputs)
    return [Target(exercise, track, entry, kind, i, name, c)
            for (kind, i, name), c in zip(outputs, checks)]


OUT, GRAD, IN_PLACE = "output", "grad", "in place"
NORM = [(OUT, 0, "y"), (GRAD, 0, "dx"), (GRAD, 1, "dw")]

# The checks: the property checks that compare each output with float64 (a NaN fails their
# first example, the simplest one hypothesis tries: small and quick), and the hand-written bounds
# that reach the output (grader.judge.check.within: 05's row sums, 09's |q * scale - y|, 10's
# rescaling, 12's normwise error, 13's dq sums on a GPU).
FWD, BWD = "test_forward_matches_reference", "test_backward_matches_reference"

# Triton tracks: on this machine's interpreter, or the GPU
INTERPRETER = [
    *_targets("01_vector_add", "triton", "add", [(OUT, 0, "x + y")],
              "test_matches_reference or test_length_one_and_zero"),
    *_targets("05_softmax", "triton", "softmax", [(OUT, 0, "y"), (GRAD, 0, "dx")],
              [f"{FWD} or test_rows_sum_to_one", BWD]),
    *_targets("06_rmsnorm", "triton", "rmsnorm", NORM, [FWD, BWD, BWD]),
    # (y, h, dx, dresidual, dw): the forward's check compares y and h, the backward's all five
    # (a target of the backward is graded without the forward's checks: while a forward check
    # fails, the backward's wait for it, grader.common.events.AWAITS_FORWARD)
    *_targets("08_add_rmsnorm", "triton", "add_rmsnorm",
              [(OUT, 0, "y"), (OUT, 1, "h"), (GRAD, 0, "dx"), (GRAD, 1, "dresidual"),
               (GRAD, 2, "dw")], [FWD, FWD, BWD, BWD, BWD]),
    *_targets("08_add_rmsnorm", "triton", "add_rmsnorm_",
              [(OUT, 0, "y"), (IN_PLACE, 1, "residual (h)")], "test_in_place_form"),
    *_targets("09_rmsnorm_quant", "triton", "rmsnorm_quant", [(OUT, 1, "scale")],
              "test_q_matches_reference or test_properties"),
    *_targets("10_layernorm_dropout", "triton", "layernorm_dropout", NORM + [(GRAD, 2, "db")],
              [f"{FWD} or test_kept_values_are_rescaled", BWD, BWD, BWD]),
    *_targets("12_matmul_tc", "triton", "matmul_act", [(OUT, 0, "act(A @ B + bias)")],
              "test_matches_reference or test_partial_sums_beyond_fp16_range"),
    # test_dq_sums_in_float32 (its `err > 6e-3` passed a NaN dq) runs on a GPU only
    *_targets("13_flash_attention", "triton", "flash_attention",
              [(OUT, 0, "o"), (GRAD, 0, "dq"), (GRAD, 1, "dk"), (GRAD, 2, "dv")],
              [FWD] + [f"{BWD} or test_dq_sums_in_float32"] * 3),
]
# CUDA tracks' C++ CPU paths: the exercises whose only track is CUDA
CPU_PATHS = [
    *_targets("03_bias_relu", "cuda", "bias_relu",
              [(OUT, 0, "y"), (GRAD, 0, "grad of x"), (GRAD, 1, "grad of bias")], [FWD, BWD, BWD]),
    *_targets("04_reduce_sum", "cuda", "reduce_sum", [(OUT, 0, "the sum")],
              "test_sum_matches_reference"),
    *_targets("04_reduce_sum", "cuda", "reduce_sum_rows", [(OUT, 0, "the row sums")],
              "test_rows_match_reference"),
    *_targets("07_layernorm", "cuda", "layernorm", NORM + [(GRAD, 2, "db")],
              [FWD, BWD, BWD, BWD]),
    *_targets("11_tiled_matmul", "cuda", "linear_relu",
              [(OUT, 0, "Y"), (GRAD, 0, "dA"), (GRAD, 1, "dB"), (GRAD, 2, "dbias")],
              [FWD, BWD, BWD, BWD]),
]
# a GPU only: no CPU path, or checks the Triton track of the exercise runs here already
GPU_ONLY = [
    *_targets("02_scale", "cuda", "scale", [(OUT, 0, "a * x")], "test_matches_reference"),
    *_targets("06_rmsnorm", "cuda", "rmsnorm", NORM, [FWD, BWD, BWD]),
    *_targets("09_rmsnorm_quant", "cuda", "rmsnorm_quant", [(OUT, 1, "scale")],
              "test_q_matches_reference or test_properties"),
    *_targets("12_matmul_tc", "cutlass", "matmul_act", [(OUT, 0, "act(A @ B + bias)")],
              "test_matches_reference or test_partial_sums_beyond_fp16_range"),
]
GROUPS = {"interpreter": INTERPRETER, "cpu paths": CPU_PATHS, "gpu only": GPU_ONLY}

# Appended to the solution's module: the entry points rebound to a wrapper that fills the
# target with NaN (sign bit set, as inf - inf gives on a CPU: not the bits fresh outputs are
# poisoned with, so the checks' comparisons, not the unwritten-element evidence, catch it; bf16
# has one NaN only). Its ATen ops (empty_like, fill_, view_as) are ones any solution may call.
WRAPPER = '''

# --- tests/test_nan.py: one output of the solution above filled with NaN -------------------------
import functools as _nan_functools

_NAN_TARGETS = {}  # entry point -> (kind, index): rewritten for each round


class _NaNOutput(torch.autograd.Function):
    """An output replaced by NaN; its gradient reaches the solution's output unchanged."""

    @staticmethod
    def forward(ctx, t):
        return torch.empty_like(t).fill_(-float("nan"))

    @staticmethod
    def backward(ctx, g):
        return g


class _NaNGradient(torch.autograd.Function):
    """An input passed through unchanged; its gradient replaced by NaN."""

    @staticmethod
    def forward(ctx, t):
        return t.view_as(t)

    @staticmethod
    def backward(ctx, g):
        return torch.empty_like(g).fill_(-float("nan"))


@torch.no_grad()  # a decorator, not a `with`: grader/judge/review.py stops on a `with` today
def _nan_fill(t):
    t.fill_(-float("nan"))


def _nan_entry(name, fn):
    @_nan_functools.wraps(fn)
    def entry(*args, **kwargs):
        if name not in _NAN_TARGETS:
            return fn(*args, **kwargs)
        kind, i = _NAN_TARGETS[name]
        if kind == "grad":
            args = list(args)
            if isinstance(args[i], torch.Tensor) and args[i].requires_grad:
                args[i] = _NaNGradient.apply(args[i])
            return fn(*args, **kwargs)
        out = fn(*args, **kwargs)
        if kind == "in place":
            _nan_fill(args[i])
            return out
        if isinstance(out, (tuple, list)):
            return type(out)(_NaNOutput.apply(o) if k == i else o for k, o in enumerate(out))
        return _NaNOutput.apply(out)
    return entry
'''
TARGET_LINE = re.compile(r"^_NAN_TARGETS = .*$", re.M)


# A track without a Python module (02: the registered op is the entry point) gets its NaN in
# C++, written into the output before it is returned: its one output, in every round.
IN_CPP = {("02_scale", "cuda"): {"scale.cpp": [(
    "  });\n  return out;\n}\n\n}  // namespace",
    "  });\n  out.fill_(-std::numeric_limits<double>::quiet_NaN());  // tests/test_nan.py\n"
    "  return out;\n}\n\n}  // namespace")]}}


def _wrap(tree: Path, targets: list[Target]) -> None:
    """tree/<exercise>/<track>: a copy of each solution track (files' times kept: an unchanged
    source is not rebuilt), its module ending in WRAPPER and the target entry points rebound."""
    for ex_id, track in sorted({(t.exercise, t.track) for t in targets}):
        folder = tree / ex_id / track
        if folder.exists():
            shutil.rmtree(folder)
        make_variant(tree, ex_id, track, IN_CPP.get((ex_id, track), {}))
        if (ex_id, track) in IN_CPP:
            continue
        module = folder / EXERCISES[ex_id].tracks[track].module
        entries = sorted({t.entry for t in targets if (t.exercise, t.track) == (ex_id, track)})
        module.write_text(module.read_text() + WRAPPER + "".join(
            f"\n{e} = _nan_entry({e!r}, {e})" for e in entries) + "\n")


def _aim(tree: Path, targets: list[Target], exercise: str, track: str) -> None:
    """Point the track's wrapper at these targets (one per entry point; none: the solution)."""
    if (exercise, track) in IN_CPP:
        assert [(t.kind, t.index) for t in targets] in ([], [(OUT, 0)]), targets
        return  # its NaN is in the C++ (IN_CPP), its one target's, from the start
    module = tree / exercise / track / EXERCISES[exercise].tracks[track].module
    value = {t.entry: (t.kind, t.index) for t in targets}
    module.write_text(TARGET_LINE.sub(f"_NAN_TARGETS = {value!r}", module.read_text(), count=1))


def _names(checks: str) -> set[str]:
    return set(re.findall(r"test_\w+", checks))


def _rounds(targets: list[Target]) -> list[list[Target]]:
    """Round r: the r-th target of each entry point of each track. Entry points of one track
    share a round only where their checks differ (each check calls its own entry point: 04's
    sum and row sums, 08's functional and in-place forms), so a failure is its target's."""
    per_entry: dict[tuple, list[Target]] = {}
    for t in targets:
        per_entry.setdefault((t.exercise, t.track, t.entry), []).append(t)
    n = max(len(v) for v in per_entry.values())
    rounds = [[v[r] for v in per_entry.values() if r < len(v)] for r in range(n)]
    for batch in rounds:
        for a in batch:
            for b in batch:
                if a is not b and (a.exercise, a.track) == (b.exercise, b.track):
                    assert not _names(a.checks) & _names(b.checks), (a, b)
    return rounds


def _verdict(target: Target, result) -> list[str]:
    """What is wrong with how the target's checks took its NaN (empty: each failed on it)."""
    if not result.build.get("ok"):
        return [f"{target.id}: the build failed: {result.build.get('message', '')[-800:]}"]
    # the grader's own checks (your kernels do the work) must not fail: the wrapper's ATen ops
    # are allowed ones, so a failure there is the wrapper's, not the NaN's
    out = [f"{target.id}: the grader's check '{c.name}' {c.outcome}: {c.message[:600]}"
           for c in result.checks if not c.name.startswith("test_")
           and c.outcome in ("failed", "crashed")]
    ran = [c for c in result.checks if c.name.split("[")[0] in _names(target.checks)
           and c.outcome not in ("skipped", "needs a GPU")]
    if not ran:
        return out + [f"{target.id}: none of `{target.checks}` ran "
                      f"({[(c.name, c.outcome) for c in result.checks] or result.ended})"]
    for c in ran:
        if c.outcome != "failed":
            out.append(f"{target.id}: {c.name} {c.outcome} with NaN in {target.name}: "
                       f"{c.message[:600]}")
        elif "nan" not in c.message.lower():
            out.append(f"{target.id}: {c.name} failed, but not on the NaN: {c.message[:600]}")
    return out


def _forker(folder: Path):
    """Zygotes for every round's grade to fork from, where grade() itself would fork from them
    (no GPU); None (each grade starts its processes afresh: slower, the same verdicts) there."""
    return nullcontext(None) if driver_loaded() else zygote_forker(FIXED, False, folder)


@pytest.mark.parametrize("group", [
    "interpreter", "cpu paths", pytest.param("gpu only", marks=pytest.mark.gpu)])
@pytest.mark.timeout(3600)
def test_nan_in_each_output_fails_the_checks(group):
    targets = GROUPS[group]
    tree = TREES / group.replace(" ", "-")
    _wrap(tree, targets)
    problems, covered = [], []
    with tempfile.TemporaryDirectory(prefix="nan-zygotes-") as folder, \
            _forker(Path(folder)) as forker:
        for batch in _rounds(targets):
            for ex_id, track in {(t.exercise, t.track) for t in batch}:
                _aim(tree, [t for t in batch if (t.exercise, t.track) == (ex_id, track)],
                     ex_id, track)
            select = " or ".join(f"({t.exercise} and ({t.checks}))" for t in batch)
            sub = Submission(tree, tuple(EXERCISES[e] for e in
                                         dict.fromkeys(t.exercise for t in batch)),
                             tuple(sorted({t.track for t in batch})),
                             FIXED.replace(select=select), bench=False, forker=forker)
            rows = {(ex.id, r.track): r for ex, r, _ in grade(sub).rows}
            for t in batch:
                problems += _verdict(t, rows[(t.exercise, t.track)])
                covered.append(t.id)
    assert not problems, "\n".join(problems)
    assert len(covered) == len(targets)


# --- the pieces, without grading ----------------------------------------------------------------

def test_every_float_output_of_every_exercise_has_a_target():
    """Each exercise's entry points are covered (on this machine or on a GPU); the only output
    left out is 09's q, int8, which cannot hold NaN."""
    covered = {(t.exercise, t.track, t.entry) for ts in GROUPS.values() for t in ts}
    missing = [(ex.id, name, e) for ex in EXERCISES.values() for name, track in ex.tracks.items()
               for e in track.entry_points if e[0].islower() and (ex.id, name, e) not in covered]
    # 03's BiasReLU (an nn.Module) returns what bias_relu returns: its checks train and compare
    # a module, and bias_relu's targets cover the op they call
    assert not missing, missing
    tracks = {(t.exercise, t.track) for ts in GROUPS.values() for t in ts}
    assert tracks == {(ex.id, name) for ex in EXERCISES.values() for name in ex.tracks}


def test_every_wrapped_track_is_well_formed(tmp_path):
    """Without building or running anything (the `gpu` group's tracks too): each wrapped module
    parses, rebinds entry points its solution defines, and aims at each round's targets; a track
    without a module has its C++ edit."""
    for group, targets in GROUPS.items():
        tree = tmp_path / group.replace(" ", "-")
        _wrap(tree, targets)
        for batch in _rounds(targets):
            for t in batch:
                track = EXERCISES[t.exercise].tracks[t.track]
                if (t.exercise, t.track) in IN_CPP:
                    cpp = tree / t.exercise / t.track / next(iter(IN_CPP[(t.exercise, t.track)]))
                    assert "quiet_NaN" in cpp.read_text(), cpp
                    continue
                _aim(tree, [t], t.exercise, t.track)
                module = tree / t.exercise / t.track / track.module
                source = module.read_text()
                defined = {n.name for n in ast.parse(source).body if isinstance(n, ast.FunctionDef)}
                assert t.entry in defined and t.entry in track.entry_points, (t, defined)
                assert f"_NAN_TARGETS = {{{t.entry!r}: ({t.kind!r}, {t.index})}}" in source


def test_the_wrapper_fills_exactly_its_target(tmp_path):
    """WRAPPER around a small op of two outputs, in this process: aimed at nothing it is the op;
    aimed at an output, that output alone is NaN and every gradient is the op's; aimed at a
    gradient, that gradient alone is NaN; aimed at an argument written in place, that one."""
    path = tmp_path / "op.py"
    path.write_text("import torch\n\n\ndef op(x, w):\n    return x * w, x + w\n\n\n"
                    "def op_(x, r):\n    r.add_(x)\n    return x * 2\n" + WRAPPER +
                    "\nop = _nan_entry('op', op)\nop_ = _nan_entry('op_', op_)\n")
    x, w = torch.randn(5, dtype=torch.float64), torch.randn(5, dtype=torch.float64)

    def run(target):
        aimed = {} if target is None else {target[0]: target[1:]}
        text = TARGET_LINE.sub(f"_NAN_TARGETS = {aimed!r}", path.read_text(), count=1)
        space: dict = {}
        exec(compile(text, str(path), "exec"), space)  # the wrapped module, aimed at target
        xl, wl = x.clone().requires_grad_(), w.clone().requires_grad_()
        a, b = space["op"](xl, wl)
        torch.autograd.backward([a, b], [torch.ones(5, dtype=torch.float64)] * 2)
        r = torch.zeros(5, dtype=torch.float64)
        space["op_"](x, r)
        return a.detach(), b.detach(), xl.grad, wl.grad, r

    clean = run(None)
    assert all(bool(torch.isfinite(t).all()) for t in clean)
    cases = {("op", OUT, 0): 0, ("op", OUT, 1): 1, ("op", GRAD, 0): 2, ("op", GRAD, 1): 3,
             ("op_", IN_PLACE, 1): 4}
    for target, nan_at in cases.items():
        got = run(target)
        for k, (g, c) in enumerate(zip(got, clean)):
            if k == nan_at:
                assert bool(torch.isnan(g).all()), (target, k, g)
            else:
                assert torch.equal(g, c), (target, k, g, c)
