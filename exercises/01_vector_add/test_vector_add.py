"""Checks for exercise 01 (vector_add). Run through the grader: `make exercise-01`."""
import pytest
import torch
from hypothesis import given, strategies as st

from grader.judge import probes
from grader.judge.check import Mismatch, call_checked, expect_refusal
from grader.judge.strategies import dtypes, extremes, lengths, randn, seeds
from grader.judge.testing import new_contents_same_shapes, views_handled_or_refused

DTYPES = ["float32", "float16", "bfloat16"]


@given(data=st.data(), dtype=dtypes(DTYPES), seed=seeds)
def test_matches_reference(impl, device, assert_close, data, dtype, seed):
    n = data.draw(lengths(device), label="n")
    x = extremes(randn(n, seed=seed, dtype=dtype, device=device), seed=seed)
    y = extremes(randn(n, seed=seed + 1, dtype=dtype, device=device), seed=seed + 1)

    def verify(a, b):
        out = call_checked(impl.add, a, b, names=("x", "y"))
        assert_close(out, a.double() + b.double(), dtype=a.dtype, n=n, seed=seed)
    # an add follows a common scale of its inputs: the range probe fits it
    run, reference = impl.add, lambda a, b: a.double() + b.double()
    with probes.explained(probes.fp16_range(run, verify, (x, y)),
                          probes.sixteen_bit(run, reference, verify, (x, y))):
        verify(x, y)


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


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_strided_input_handled_or_refused(impl, device, assert_close, dtype):
    """x, then y, as a strided view (x[::2]) and as a view one element into its memory (x[1:]):
    the right answer, or (for a strided view) a refusal naming that argument."""
    x = randn(1031, seed=5, dtype=dtype, device=device)
    y = randn(1031, seed=6, dtype=dtype, device=device)
    want = x.double() + y.double()
    views_handled_or_refused(impl.add, (x, y), ("x", "y"),
                             lambda outs: assert_close(outs[0], want, dtype=dtype), seed=5)


def test_new_contents_same_shapes(impl, device, assert_close):
    """Called twice on inputs of the same shapes, new values the second time: both right."""
    x = randn(1031, seed=8, dtype=torch.float32, device=device)
    y = randn(1031, seed=9, dtype=torch.float32, device=device)
    new_contents_same_shapes(
        impl.add, (x, y), ("x", "y"), lambda a: (a[0].double() + a[1].double(),),
        lambda outs, want: assert_close(outs[0], want[0], dtype=torch.float32), seed=10)
