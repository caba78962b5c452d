"""Exercise 04 reference: the ops, the benchmark inputs and the traffic model."""
import torch


def _result_dtype(x: torch.Tensor) -> torch.dtype:
    return torch.float64 if x.dtype == torch.float64 else torch.float32


def reference(x: torch.Tensor) -> torch.Tensor:
    """The sum of every element, as a PyTorch user writes it (also the "eager" baseline).

    dtype= makes torch.sum accumulate in float32 (float64 for float64 input) and return that:
    the tests get their float64 expectation from reference(x.double()).
    """
    return x.sum(dtype=_result_dtype(x))


def reference_rows(x: torch.Tensor) -> torch.Tensor:
    """The sum of each row of x [M, N] (the eager baseline of reduce_sum_rows)."""
    return x.sum(dim=-1, dtype=_result_dtype(x))


def bench_inputs(case, dtype, device, generator):
    """reduce_sum's input: n values uniform in [0, 1) (positive: the sum is far from 0, so the
    check after timing is a tight relative one)."""
    return (torch.rand(case["n"], dtype=dtype, device=device, generator=generator),)


def bench_inputs_rows(case, dtype, device, generator):
    """reduce_sum_rows' input [M, N] (the second benchmark: see the README)."""
    return (torch.rand((case["M"], case["N"]), dtype=dtype, device=device, generator=generator),)


def _size(dtype) -> int:
    return torch.tensor([], dtype=dtype).element_size()


def traffic(case, dtype, mode):
    """Read x once, write one 4-byte result; one add per element."""
    return {"bytes": case["n"] * _size(dtype) + 4, "flops": case["n"]}


def traffic_rows(case, dtype, mode):
    """Read x [M, N] once, write M 4-byte sums; one add per element."""
    m, n = case["M"], case["N"]
    return {"bytes": m * n * _size(dtype) + 4 * m, "flops": m * n}
