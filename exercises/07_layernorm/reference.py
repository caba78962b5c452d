"""Exercise 07 reference: the op, the benchmark inputs, the baselines and the traffic model."""
import torch
import torch.nn.functional as F


def reference(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    """LayerNorm as a PyTorch user writes it (biased variance): about twelve kernels, each a
    full pass over memory. Also the "eager" baseline.

    Math in at least float32, and float64 stays float64 so the tests can differentiate it in
    float64 as the expectation.
    """
    xf = x.to(torch.promote_types(x.dtype, torch.float32))
    mean = xf.mean(-1, keepdim=True)
    d = xf - mean
    var = d.pow(2).mean(-1, keepdim=True)          # biased: divide by N, as nn.LayerNorm does
    return (d * torch.rsqrt(var + eps) * w + b).to(x.dtype)


def native(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    """PyTorch's own fused LayerNorm (one kernel forward, two backward)."""
    return F.layer_norm(x, (x.shape[-1],), w, b, eps)


def liger(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    """Liger-Kernel's Triton LayerNorm (a peer; ImportError when liger_kernel is not installed)."""
    from liger_kernel.ops.layer_norm import LigerLayerNormFunction
    return LigerLayerNormFunction.apply(x, w, b, eps)


def block(norm):
    """Linear -> norm -> Linear, as in a transformer block, with every weight an explicit
    argument (the torch.compile check compiles this around the submission's op)."""
    def run(x, w_in, w_ln, b_ln, w_out):
        return F.linear(norm(F.linear(x, w_in), w_ln, b_ln, 1e-5), w_out)
    return run


def bench_inputs(case, dtype, device, generator):
    m, n = case["M"], case["N"]
    x = torch.randn((m, n), dtype=dtype, device=device, generator=generator)
    w = 1.0 + 0.1 * torch.randn(n, dtype=dtype, device=device, generator=generator)
    b = 0.1 * torch.randn(n, dtype=dtype, device=device, generator=generator)
    return (x, w, b, 1e-5)


def traffic(case, dtype, mode):
    """The fewest bytes the op must move; the small per-row mean and rstd (fp32) and w, b, dw, db
    are counted too.

    forward:          read x, w, b; write y, mean, rstd                ~ 2 M N elements
    forward_backward: the forward, then read x, dy, w, mean, rstd;
                      write dx, dw, db                                  ~ 5 M N elements
    """
    size = torch.tensor([], dtype=dtype).element_size()
    m, n = case["M"], case["N"]
    mn = m * n
    fwd_bytes = (2 * mn + 2 * n) * size + 8 * m
    fwd_flops = 7 * mn          # sum, deviation, square-add, then subtract, two multiplies, add
    if mode == "forward":
        return {"bytes": fwd_bytes, "flops": fwd_flops}
    bwd_bytes = (3 * mn + 3 * n) * size + 8 * m
    bwd_flops = 14 * mn
    return {"bytes": fwd_bytes + bwd_bytes, "flops": fwd_flops + bwd_flops}
