"""The comparison helper and the checked call: they catch what they must, and say why."""
import pytest
import torch

from grader.judge import check
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


def cause(got, expected, dtype=None, tol=TOL, call=None) -> str:
    """The 'likely cause' line of assert_close's failure ('' when it gives none)."""
    check.note_call(*(call or ((),)))
    try:
        with pytest.raises(Mismatch) as m:
            assert_close(got, expected, tol=tol, dtype=dtype)
    finally:
        check.note_call(())
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


def test_tail_of_values_wrong():
    g = E.float().reshape(-1)
    g[200:] += 1
    msg = cause(g, E.reshape(-1), torch.float32)
    assert msg.startswith("everything from flat index 200 on is wrong"), msg


def test_column_patterns_name_only_the_inputs_the_op_has():
    g = E.float()
    g[:, 5] += 1.0
    # softmax: one input x, no per-column input: never "bias, weight"
    msg = cause(g, E, torch.float32, call=([E.float()], ["x"]))
    assert msg == "every row is wrong in the same 1 of 33 columns (first 5): check the column " \
                  "index arithmetic", msg
    # an op with a per-column weight: named
    msg = cause(g, E, torch.float32, call=([E.float(), torch.ones(33)], ["x", "weight"]))
    assert "the per-column input `weight`" in msg, msg
    g = E.float()
    g[::2, 5] += 1.0  # half the rows wrong in one column (a ReLU hides the others)
    assert cause(g, E, torch.float32).startswith("the wrong elements, in 4 rows, all lie in 1 "
                                                 "of 33 columns")
    g = E.float()
    g[:, 32:] += 1.0
    msg = cause(g, E, torch.float32)
    assert "the last ones (from column 32 on)" in msg and "mask it by the row length" in msg, msg


def test_whole_rows_and_row_factors():
    g = E.float()
    g[3] += 1.0
    assert cause(g, E, torch.float32).startswith("1 whole rows are wrong (first 3)")
    f = torch.rand(8, 33, dtype=torch.float64, generator=torch.Generator().manual_seed(0)) + 0.5
    scaled = (f / torch.linspace(1.01, 1.03, 8, dtype=torch.float64)[:, None]).float()
    msg = cause(scaled, f, torch.float32)  # each row divided by a wrong sum
    assert msg.startswith("each wrong row is off by one common factor"), msg


def test_precision_causes_need_the_evidence():
    f = torch.rand(8, 33, dtype=torch.float64, generator=torch.Generator().manual_seed(0)) + 0.5
    # float32 output whose values are fp16 numbers: the math went through fp16
    assert cause(f.half().float(), f, torch.float32).startswith(
        "the wrong values are all exact float16 numbers")
    # float32 output, errors of 16-bit size but not 16-bit numbers (a 16-bit accumulator)
    noise = torch.randn(8, 33, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    msg = cause((f * (1 + 1e-3 * noise)).float(), f, torch.float32)
    assert msg.startswith("errors of the size of 16-bit rounding"), msg
    # a 27% error in float32 is no rounding error: nothing about 16-bit arithmetic
    msg = cause((f * (1 + 0.27 * noise.sign())).float(), f, torch.float32)
    assert "16-bit" not in msg and "fp16" not in msg, msg
    # float64 computed in float32
    f64 = {"atol": 1e-12, "rtol": 1e-12}
    assert cause(f.float().double(), f, torch.float64, tol=f64).startswith(
        "the wrong values are all exact float32 numbers")
    msg = cause(f * (1 + 1e-7 * noise), f, torch.float64, tol=f64)
    assert msg.startswith("errors of the size of float32 rounding, in float64"), msg
    # a bf16 output a few units of bf16 rounding off: rounded in between
    b = f.bfloat16()
    worse = (b.double() * (1 + 2 ** -7 * noise.sign())).bfloat16()
    msg = cause(worse, f, torch.bfloat16, tol={"atol": 1e-5, "rtol": 1e-5})
    assert msg.startswith("errors of a few units of bfloat16's rounding"), msg


def test_views_name_the_argument_that_was_a_view():
    """y strided, x contiguous: the message is about y (the issue's add read x with y's stride
    and was told about x)."""
    x, ybase = torch.randn(50), torch.randn(100)
    y = ybase[::2]
    e = (x.double() + y.double())
    wrong = (x + ybase[:50]).float()  # y read as if contiguous
    msg = cause(wrong, e, torch.float32, call=([x, y], ["x", "y"]))
    assert msg.startswith("the output is wrong when `y` is a strided view (shape (50,), strides "
                          "(2,)), every other input (`x`) contiguous"), msg
    assert "`x`'s" not in msg
    off = ybase[3:53]
    msg = cause(wrong, x.double() + off.double(), torch.float32, call=([x, off], ["x", "y"]))
    assert msg.startswith("`y` was a dense view starting 3 elements (12 bytes)"), msg


def test_no_cause_without_evidence():
    g = E.float()
    noise = torch.randn(8, 33, generator=torch.Generator().manual_seed(3))
    assert cause(g + noise, E, torch.float32) == ""


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
