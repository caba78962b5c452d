"""The comparison helper and the checked call: they catch what they must, and say why."""
import pytest
import torch

from grader.judge.check import Mismatch, assert_close, call_checked, expect_refusal

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


def cause(got, expected, dtype=None, tol=TOL) -> str:
    """The 'likely cause' line of assert_close's failure ('' when it gives none)."""
    with pytest.raises(Mismatch) as m:
        assert_close(got, expected, tol=tol, dtype=dtype)
    lines = [ln for ln in str(m.value).splitlines() if "likely cause:" in ln]
    return lines[0].split("likely cause: ", 1)[1] if lines else ""


def poisoned(shape, dtype=torch.float32):
    """What a fresh output holds before a kernel writes it (the grader poisons allocations)."""
    with torch.no_grad():
        torch.use_deterministic_algorithms(True, warn_only=True)
        try:
            return torch.empty(shape, dtype=dtype)
        finally:
            torch.use_deterministic_algorithms(False)


E = torch.randn(8, 33, dtype=torch.float64, generator=torch.Generator().manual_seed(1))


def test_nothing_written():
    assert cause(poisoned((8, 33)), E, torch.float32).startswith("no element was written")


def test_some_never_written():
    g = E.float()
    g[:, 5] = poisoned((8,))
    assert cause(g, E, torch.float32).startswith("some elements were never written")
    g = E.float() * 1.5
    g[3, 7] = poisoned(())
    msg = cause(g, E, torch.float32)
    assert msg.startswith("1 elements were never written (first at flat index 106")


def test_all_poisoned_is_the_masks_all():
    """The device-side answer (a gradient that nothing wrote) is the host mask's, per dtype:
    the poison everywhere, one element written, a NaN computed in place of the poison."""
    from grader.judge.check import all_poisoned, poisoned as mask
    for dtype in (torch.float32, torch.float16, torch.bfloat16, torch.float64):
        whole = poisoned((5, 7), dtype)
        one = whole.clone()
        one[2, 3] = 1.0
        computed = whole.clone()
        bits = computed.view({2: torch.int16, 4: torch.int32, 8: torch.int64}[dtype.itemsize])
        bits[0, 0] |= torch.iinfo(bits.dtype).min  # a NaN with the sign bit: a computed one
        for g, want in ((whole, True), (one, False), (computed, False), (whole.t(), True)):
            assert all_poisoned(g) == bool(mask(g).all()) == want, (dtype, want)


def test_nan_from_inf_over_inf_is_not_called_unwritten():
    """The issue's case: a NaN the kernel computed (exp overflow, then inf/inf) is not the
    poison of unwritten memory, whatever its position."""
    g = E.float()
    inf = torch.tensor(float("inf"))
    g[2:] = inf / inf  # every element from a flat index on: it looks like an unwritten tail
    msg = cause(g, E, torch.float32)
    assert "never written" not in msg and "no element" not in msg, msg
    assert msg.startswith("NaN computed where the reference is finite (inf/inf"), msg
    g = E.float()
    g[0, 0] = float("inf")
    assert cause(g, E, torch.float32).startswith("inf where the reference is finite")


def test_patterns_alone_name_no_cause():
    """Where the wrong elements lie, and by how much, fits many causes (a wrong tail, a column,
    whole rows, a common factor per row, errors of 16-bit size): assert_close names none of them.
    A cause is named only where a probe confirmed it on the op (grader.judge.probes)."""
    f = torch.rand(8, 33, dtype=torch.float64, generator=torch.Generator().manual_seed(0)) + 0.5
    noise = torch.randn(8, 33, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    tail, column, row = E.float().reshape(-1), E.float(), E.float()
    tail[200:] += 1
    column[:, 5] += 1.0
    row[3] += 1.0
    factor = (f / torch.linspace(1.01, 1.03, 8, dtype=torch.float64)[:, None]).float()
    for got, want, dtype, tol in [
            (tail, E.reshape(-1), torch.float32, TOL), (column, E, torch.float32, TOL),
            (row, E, torch.float32, TOL), (factor, f, torch.float32, TOL),
            (f.half().float(), f, torch.float32, TOL),                    # exact fp16 values
            ((f * (1 + 1e-3 * noise)).float(), f, torch.float32, TOL),    # 16-bit-sized errors
            (f.float().double(), f, torch.float64, {"atol": 1e-12, "rtol": 1e-12}),
            (E.float() + torch.randn(8, 33, generator=torch.Generator().manual_seed(3)), E,
             torch.float32, TOL)]:
        assert cause(got, want, dtype, tol) == "", cause(got, want, dtype, tol)


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
