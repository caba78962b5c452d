"""Exercise 02 reference: the op, the benchmark inputs and the traffic model."""
import torch


def reference(x: torch.Tensor, a: float) -> torch.Tensor:
    """a * x, as a user would write it (also the eager baseline).

    PyTorch multiplies 16-bit tensors in float32 and rounds once; float64 stays float64, so the
    tests get their float64 expectation from reference(x.double(), a).
    """
    return a * x


def bench_inputs(case, dtype, device, generator):
    x = torch.randn(case["n"], dtype=dtype, device=device, generator=generator)
    return (x, 1.7)


def traffic(case, dtype, mode):
    """Read x once, write out once; one multiply per element."""
    size = torch.tensor([], dtype=dtype).element_size()
    return {"bytes": 2 * case["n"] * size, "flops": case["n"]}
