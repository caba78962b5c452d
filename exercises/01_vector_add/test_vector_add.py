"""Checks for exercise 01 (vector_add). Run through the grader: `make exercise-01`."""
import pytest
import torch
from hypothesis import given, strategies as st

from grader.check import Mismatch, call_checked, expect_refusal, names_argument
from grader.strategies import dtypes, lengths, randn, seeds

DTYPES = ["float32", "float16", "bfloat16"]


@given(data=st.data(), dtype=dtypes(DTYPES), seed=seeds)
def test_matches_reference(impl, device, assert_close, data, dtype, seed):
    n = data.draw(lengths(device), label="n")
    x = randn(n, seed=seed, dtype=dtype, device=device)
    y = randn(n, seed=seed + 1, dtype=dtype, device=device)
    out = call_checked(impl.add, x, y, names=("x", "y"))
    assert_close(out, x.double() + y.double(), dtype=dtype, n=n, seed=seed)


def test_length_one_and_zero(impl, device, assert_close):
    for n in (1, 0):
        x = randn(n, seed=n, dtype=torch.float32, device=device)
        y = randn(n, seed=n + 7, dtype=torch.float32, device=device)
        out = call_checked(impl.add, x, y, names=("x", "y"))
        assert_close(out, x.double() + y.double(), dtype=torch.float32, n=n)


def test_output_on_input_device(impl, device):
    x = randn(1000, seed=3, dtype=torch.float32, device=device)
    out = impl.add(x, x.clone())
    if out.device != x.device:
        raise Mismatch(f"the output is on {out.device}, the inputs on {x.device}: allocate it "
                       f"with torch.empty_like(x)")


def test_refuses_mismatched_lengths(impl, device):
    x = randn(100, seed=1, dtype=torch.float32, device=device)
    y = randn(101, seed=2, dtype=torch.float32, device=device)
    expect_refusal(impl.add, x, y, argument="y")


def test_refuses_mismatched_dtypes(impl, device):
    x = randn(100, seed=1, dtype=torch.float32, device=device)
    y = randn(100, seed=2, dtype=torch.float16, device=device)
    expect_refusal(impl.add, x, y, argument="y")


@pytest.mark.parametrize("step", [2, 3])
def test_strided_input_handled_or_refused(impl, device, assert_close, step):
    """A view like x[::2] must either give the right answer or be refused, naming `x`."""
    x = randn(3000, seed=5, dtype=torch.float32, device=device)[::step]
    y = randn(x.numel(), seed=6, dtype=torch.float32, device=device)
    try:
        out = call_checked(impl.add, x, y, names=("x", "y"))
    except (RuntimeError, ValueError) as e:
        if "not implemented yet" in str(e) or not names_argument(str(e), "x"):
            raise
        return  # refused with a message naming x: fine
    assert_close(out, x.double() + y.double(), dtype=torch.float32, step=step)
