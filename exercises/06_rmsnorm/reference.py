"""Exercise 06 reference: the op, the benchmark inputs, the baselines and the traffic model."""
import torch


def reference(x: torch.Tensor, w: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """RMSNorm as a PyTorch user writes it: five kernels, each a full pass over memory.

    Also the "eager" baseline. Math in at least float32, and float64 stays float64 so the tests
    can differentiate it in float64 as the expectation.
    """
    xf = x.to(torch.promote_types(x.dtype, torch.float32))
    rstd = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return (xf * rstd * w).to(x.dtype)


def native(x: torch.Tensor, w: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """PyTorch's own fused RMSNorm (one kernel forward, fused backward)."""
    return torch.nn.functional.rms_norm(x, (x.shape[-1],), w, eps)


def liger(x: torch.Tensor, w: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """Liger-Kernel's Triton RMSNorm (a peer; ImportError when liger_kernel is not installed).

    casting_mode "gemma" keeps all of its math in float32, as ours does; in_place=False so its
    backward does not overwrite dy.
    """
    from liger_kernel.ops.rms_norm import LigerRMSNormFunction
    return LigerRMSNormFunction.apply(x, w, eps, 0.0, "gemma", False)


def block(op):
    """Linear -> op -> Linear, as in a transformer block, every weight an argument (what the
    torch.compile check compiles around a track's rmsnorm)."""
    def f(x, w, w_in, w_out):
        h = torch.nn.functional.linear(x, w_in)
        return torch.nn.functional.linear(op(h, w, 1e-6), w_out)
    return f


def block_inputs(case, dtype, device, generator):
    """block()'s inputs for `make bench` (the op where users run it): x, w and two square
    Linear weights scaled by 1/sqrt(N), so activations stay near 1 through the block."""
    n = case["N"]
    x, w, _ = bench_inputs(case, dtype, device, generator)
    scale = n ** -0.5
    w_in = (torch.randn(n, n, dtype=torch.float32, device=device, generator=generator) * scale).to(dtype)
    w_out = (torch.randn(n, n, dtype=torch.float32, device=device, generator=generator) * scale).to(dtype)
    return (x, w, w_in, w_out)


def block_traffic(case, dtype, mode):
    """block()'s work, counted as its two Linears' flops (2 M N N each; the backward twice the
    forward): the rate shown is the block's against the bf16 matmul ceiling, so what the norm
    costs around the GEMMs shows as the distance from it."""
    m, n = case["B"] * case["S"], case["N"]
    gemm = 2 * (2 * m * n * n)
    size = torch.tensor([], dtype=dtype).element_size()
    return {"bytes": 4 * m * n * size, "flops": gemm if mode == "forward" else 3 * gemm}


def bench_inputs(case, dtype, device, generator):
    shape = (case["B"], case["S"], case["N"])
    x = torch.randn(shape, dtype=dtype, device=device, generator=generator)
    w = 1.0 + 0.1 * torch.randn(case["N"], dtype=dtype, device=device, generator=generator)
    return (x, w, 1e-6)


def traffic(case, dtype, mode):
    """The fewest bytes the op must move; the tiny per-row rstd (fp32) and dw are counted too.

    forward:          read x, w; write y and rstd                      ~ 2 M N elements
    forward_backward: the forward, then read x, dy, w, rstd; write dx, dw  ~ 5 M N elements
    """
    size = torch.tensor([], dtype=dtype).element_size()
    n = case["N"]
    m = case["B"] * case["S"]
    mn = m * n
    fwd_bytes = (2 * mn + n) * size + 4 * m
    fwd_flops = 4 * mn                        # square, add, then two multiplies
    if mode == "forward":
        return {"bytes": fwd_bytes, "flops": fwd_flops}
    bwd_bytes = (3 * mn + 2 * n) * size + 4 * m
    bwd_flops = 9 * mn
    return {"bytes": fwd_bytes + bwd_bytes, "flops": fwd_flops + bwd_flops}
