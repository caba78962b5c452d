"""Exercise 01 reference: the op, the benchmark inputs and the traffic model."""
import torch


def reference(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return x + y


def bench_inputs(case, dtype, device, generator):
    n = case["n"]
    x = torch.randn(n, dtype=dtype, device=device, generator=generator)
    y = torch.randn(n, dtype=dtype, device=device, generator=generator)
    return (x, y)


def traffic(case, dtype, mode):
    """Read x and y once, write out once; one add per element."""
    size = torch.tensor([], dtype=dtype).element_size()
    return {"bytes": 3 * case["n"] * size, "flops": case["n"]}
