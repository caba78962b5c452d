"""Exercise 05 reference: the op, the benchmark inputs, the baselines and the traffic model."""
import torch


def reference(x: torch.Tensor) -> torch.Tensor:
    """Softmax over the last dimension as a PyTorch user writes it: `torch.softmax(x, -1)`.

    Also the "eager" baseline (one fused PyTorch kernel forward, one backward). PyTorch computes
    16-bit inputs in float32 internally and keeps float64 as float64, so the tests can call this
    on `.double()` inputs for the expectation.
    """
    return torch.softmax(x, dim=-1)


def composite(x: torch.Tensor) -> torch.Tensor:
    """The same op spelled out, five tensor ops: what torch.compile fuses (see `compiled`)."""
    xf = x.to(torch.promote_types(x.dtype, torch.float32))
    e = torch.exp(xf - xf.amax(dim=-1, keepdim=True))
    return (e / e.sum(dim=-1, keepdim=True)).to(x.dtype)


_compiled = {}


def compiled_composite(x: torch.Tensor) -> torch.Tensor:
    """torch.compile of `composite` (Inductor fuses it into its own reduction kernels).

    The "compile" baseline compiles `reference`, which Inductor decomposes into the same five
    ops; this one starts from the spelled-out composite, as a user without torch.softmax would.
    """
    if "fn" not in _compiled:
        _compiled["fn"] = torch.compile(composite, dynamic=False)
    return _compiled["fn"](x)


def liger(x: torch.Tensor) -> torch.Tensor:
    """Liger-Kernel's Triton softmax (a peer; ImportError when liger_kernel is not installed)."""
    from liger_kernel.ops.softmax import LigerSoftmaxFunction
    return LigerSoftmaxFunction.apply(x)


def bench_inputs(case, dtype, device, generator):
    # attention-logit-like rows: standard normal times 2 (softmax of randn alone is very flat)
    x = 2.0 * torch.randn((case["M"], case["N"]), dtype=torch.float32, device=device,
                          generator=generator)
    return (x.to(dtype),)


def traffic(case, dtype, mode):
    """The fewest bytes the op must move.

    forward:          read x, write y                               2 M N elements
    forward_backward: the forward, then read y and dy, write dx    5 M N elements
    """
    size = torch.tensor([], dtype=dtype).element_size()
    mn = case["M"] * case["N"]
    fwd_bytes = 2 * mn * size
    fwd_flops = 5 * mn                       # max, subtract, exp, add, multiply
    if mode == "forward":
        return {"bytes": fwd_bytes, "flops": fwd_flops}
    bwd_bytes = 3 * mn * size
    bwd_flops = 4 * mn                       # multiply, add (the dot), subtract, multiply
    return {"bytes": fwd_bytes + bwd_bytes, "flops": fwd_flops + bwd_flops}
