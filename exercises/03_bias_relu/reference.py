"""Exercise 03 reference: the op, the benchmark inputs and the traffic model."""
import torch


def reference(x: torch.Tensor, bias: torch.Tensor, scale: float) -> torch.Tensor:
    """relu(x * scale + bias), written as a user would.

    In eager mode this is three kernels (mul, add, relu), each reading and writing a full
    [M, N] tensor: the "eager" baseline. fp16/bf16 compute in float32 and round once (as the
    kernels must); float32 and float64 stay as they are (`.to` is then a no-op), so the tests
    get a float64 expectation, and float64 gradients through autograd, by calling it on
    `.double()` inputs.
    """
    compute = torch.promote_types(x.dtype, torch.float32)
    return torch.relu(x.to(compute) * scale + bias.to(compute)).to(x.dtype)


def bench_inputs(case, dtype, device, generator):
    m, n = case["M"], case["N"]
    x = torch.randn(m, n, dtype=dtype, device=device, generator=generator)
    bias = torch.randn(n, dtype=dtype, device=device, generator=generator)
    return (x, bias, 2.0)


def traffic(case, dtype, mode):
    """The fewest bytes the op must move, and its flops.

    forward: read x [M, N] and bias [N], write y [M, N]; per element a mul, an add, a max.
    forward_backward adds the backward: read grad_y and y, write grad_x (all [M, N]), write
    grad_bias [N]; per element a compare/select, a mul by scale, an add into the column sum.
    """
    m, n = case["M"], case["N"]
    size = torch.tensor([], dtype=dtype).element_size()
    forward = {"bytes": (2 * m * n + n) * size, "flops": 3 * m * n}
    if mode == "forward":
        return forward
    return {"bytes": forward["bytes"] + (3 * m * n + n) * size, "flops": forward["flops"] + 3 * m * n}
