"""The comparison helper and the checked call: they catch what they must, and say why."""
import pytest
import torch

from grader.check import Mismatch, assert_close, call_checked, expect_refusal

TOL = {"atol": 1e-5, "rtol": 1e-5}


def test_equal_passes():
    x = torch.randn(100, dtype=torch.float64)
    assert_close(x.float(), x, tol=TOL, dtype=torch.float32)


def test_unwritten_tail_is_named():
    e = torch.randn(1000, dtype=torch.float64)
    g = e.float().clone()
    g[900:] = float("nan")  # what an unwritten, NaN-poisoned tail looks like
    with pytest.raises(Mismatch) as m:
        assert_close(g, e, tol=TOL, dtype=torch.float32, seed=7)
    msg = str(m.value)
    assert "100 of 1000 elements differ" in msg and "seed=7" in msg
    assert "[900]: nan" in msg and "from flat index 900 on were never written" in msg


def test_nan_never_passes_and_wrong_dtype_is_named():
    e = torch.ones(4, dtype=torch.float64)
    with pytest.raises(Mismatch, match="NaN"):
        assert_close(torch.tensor([1.0, float("nan"), 1.0, 1.0]), e, tol={"atol": 1e9, "rtol": 1e9})
    with pytest.raises(Mismatch, match="dtype torch.float64, expected torch.float32"):
        assert_close(e, e, tol=TOL, dtype=torch.float32)
    with pytest.raises(Mismatch, match="shape"):
        assert_close(e[:3], e, tol=TOL)


def test_column_pattern_and_precision_hints():
    e = torch.randn(8, 33, dtype=torch.float64)
    g = e.clone()
    g[:, 32] += 1.0
    with pytest.raises(Mismatch, match="every row is wrong in the same 1 of 33 columns"):
        assert_close(g, e, tol=TOL)
    g = e * (1 + 1e-3)
    with pytest.raises(Mismatch, match="small errors everywhere"):
        assert_close(g, e, tol=TOL)
    f = torch.rand(8, 33, dtype=torch.float64, generator=torch.Generator().manual_seed(0)) + 0.5
    with pytest.raises(Mismatch, match="small errors everywhere: accumulating or computing in a "
                                       "16-bit type"):  # float32 output, fp16 math
        assert_close(f.half().float(), f, tol=TOL, dtype=torch.float32)
    with pytest.raises(Mismatch, match="a shared term"):  # each row divided by a wrong sum
        assert_close((f / torch.linspace(1.01, 1.03, 8, dtype=torch.float64)[:, None]).float(),
                     f, tol=TOL, dtype=torch.float32)
    g = e.clone()
    g[::2, 5] += 1.0  # half the rows wrong in one column (a ReLU hides the others)
    with pytest.raises(Mismatch, match="in 4 rows, all lie in 1 of 33 columns"):
        assert_close(g, e, tol=TOL)


def test_call_checked_catches_mutation_and_aliasing():
    x = torch.randn(10)

    def mutates(t):
        t[3] = 0.0
        return t.clone()
    with pytest.raises(Mismatch, match="input `x` was modified"):
        call_checked(mutates, x.clone(), names=("x",))
    with pytest.raises(Mismatch, match="shares memory with input `x`"):
        call_checked(lambda t: t[2:], x, names=("x",))
    out = call_checked(lambda t: t * 2, x, names=("x",))
    assert torch.equal(out, x * 2)


def test_expect_refusal():
    def refuses(x):
        raise ValueError(f"x must be a CUDA tensor, got {x.device}")
    assert "x must" in expect_refusal(refuses, torch.ones(1), argument="x")
    with pytest.raises(Mismatch, match="does not name the argument `x`"):
        expect_refusal(lambda x: (_ for _ in ()).throw(ValueError("bad input")), 1, argument="x")
    with pytest.raises(Mismatch, match="was accepted"):
        expect_refusal(lambda x: x, 1, argument="x")
    with pytest.raises(NotImplementedError):
        expect_refusal(lambda x: (_ for _ in ()).throw(NotImplementedError("not implemented yet")),
                       1, argument="x")
