"""Exercise 10's checks read the dropout mask off the output (a dropped element is exactly 0):
a kept value that rounds to 0 must not read as a drop."""
import pytest
import torch

from conftest import ROOT
from grader.common.discover import load_exercise
from grader.common.pyfile import import_file
from grader.common.reference import load_reference
from grader.judge.check import Mismatch

EXERCISE = ROOT / "exercises" / "10_layernorm_dropout"


def test_a_kept_value_that_rounds_to_zero_is_not_a_drop(monkeypatch):
    """An H200 grade (2026-11-29) failed the solution at p = 0 ("p = 0 must drop nothing, but 1
    of 681034 outputs are exactly 0"): fp16, rows 86 x 7919, seed 1486710, where one kept value
    is 6.6e-8, which fp16 holds as 0 or as its smallest step. Here an op that is the reference
    in float32, with that element 0 (as the H200's kernel gave it), passes; without the second
    call that tells such a zero from a drop (UNSURE = 0), the check accuses it as before."""
    checks = import_file(EXERCISE / "test_layernorm_dropout.py", "ex10_checks")
    exercise = load_exercise(EXERCISE)
    ref = load_reference(exercise)
    x, w, b, _ = checks._inputs((86, 7919), 1486710, torch.float16, "cpu")
    kept = ref.layernorm(x.double(), w.double(), b.double(), checks.EPS)
    at = divmod(int(kept.abs().argmin()), x.shape[-1])
    assert abs(float(kept[at])) < 1e-7

    class Op:  # the reference's values, rounded once; dropped where u < p, by its own seed
        @staticmethod
        def layernorm_dropout(x_, w_, b_, p, seed, eps):
            y = ref.layernorm(x_.float(), w_.float(), b_.float(), eps)
            u = torch.rand(y.shape, generator=torch.Generator().manual_seed(seed))
            y = (y * (u >= p) / (1 - p)).to(x_.dtype)
            if torch.equal(b_, b):
                y[at] = 0.0  # the H200 kernel's rounding of this kept value
            return y

    for p in (0.0, 0.25):
        _, keep = checks._forward_checked(Op, ref, exercise, x, w, b, p, 7)
        assert bool(keep[at])
        checks._check_mask_fraction(keep, p)
    monkeypatch.setattr(checks, "UNSURE", 0.0)
    with pytest.raises(Mismatch, match="p = 0 must drop nothing"):
        _, keep = checks._forward_checked(Op, ref, exercise, x, w, b, 0.0, 7)
        checks._check_mask_fraction(keep, 0.0)
