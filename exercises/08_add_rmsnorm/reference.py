"""Exercise 08 reference: the op, the benchmark inputs, the baselines, the traffic model, and
the two-layer residual block the torch.compile check builds around the op."""
import torch
import torch.nn.functional as F

EPS = 1e-6


def reference(x: torch.Tensor, residual: torch.Tensor, w: torch.Tensor,
              eps: float = EPS) -> tuple[torch.Tensor, torch.Tensor]:
    """(y, h) as a PyTorch user writes it: the add, then RMSNorm of its result.

    h is rounded to x's dtype (it is what the next layer adds to); the norm is computed in at
    least float32 from that h, and float64 stays float64 so the tests can differentiate it in
    float64 as the expectation. Also the "eager" baseline.
    """
    h = x + residual
    hf = h.to(torch.promote_types(h.dtype, torch.float32))
    rstd = torch.rsqrt(hf.pow(2).mean(-1, keepdim=True) + eps)
    return (hf * rstd * w).to(x.dtype), h


def reference_(x: torch.Tensor, residual: torch.Tensor, w: torch.Tensor,
               eps: float = EPS) -> torch.Tensor:
    """The in-place form: y, with h written into residual."""
    y, h = reference(x, residual, w, eps)
    residual.copy_(h)
    return y


def liger(x: torch.Tensor, residual: torch.Tensor, w: torch.Tensor, eps: float = EPS):
    """Liger-Kernel's fused add + RMSNorm (a peer; ImportError when liger_kernel is missing).

    casting_mode "gemma" keeps all of its math in float32, as ours does; in_place=False so its
    backward does not overwrite dy.
    """
    from liger_kernel.ops.fused_add_rms_norm import LigerFusedAddRMSNormFunction
    return LigerFusedAddRMSNormFunction.apply(x, residual, w, eps, 0.0, "gemma", False)


def block(add_rmsnorm):
    """Two pre-norm residual layers, as in a transformer, with every weight an argument:

        y1, h1 = add_rmsnorm(x @ a1.T, residual, g1)     the first sublayer's output joins
        y2, h2 = add_rmsnorm(y1 @ a2.T, h1, g2)          the stream, the second reads y1
    returns (y2, h2). Used by the torch.compile check, with the submission's add_rmsnorm.
    """
    def run(x, residual, a1, g1, a2, g2):
        y1, h1 = add_rmsnorm(F.linear(x, a1), residual, g1, EPS)
        return add_rmsnorm(F.linear(y1, a2), h1, g2, EPS)
    return run


def block_(add_rmsnorm_):
    """The same two layers with the in-place form (inference): the residual stream is updated
    in place (the second layer adds to the first one's h); returns y2 only. The caller's
    `residual` holds the stream after both layers: the check reads it there. (Returning
    `residual` itself would hand back an input: the caller already has it, and a tensor that
    arrived from the checks' process cannot be sent back to it.)"""
    def run(x, residual, a1, g1, a2, g2):
        y1 = add_rmsnorm_(F.linear(x, a1), residual, g1, EPS)
        return add_rmsnorm_(F.linear(y1, a2), residual, g2, EPS)
    return run


def bench_inputs(case, dtype, device, generator):
    shape = (case["M"], case["N"])
    x = torch.randn(shape, dtype=dtype, device=device, generator=generator)
    residual = torch.randn(shape, dtype=dtype, device=device, generator=generator)
    w = 1.0 + 0.1 * torch.randn(case["N"], dtype=dtype, device=device, generator=generator)
    return (x, residual, w, EPS)


def traffic(case, dtype, mode):
    """The fewest bytes the op must move (the tiny per-row rstd, w and dw counted too).

    forward:          read x, residual, w; write y, h, rstd                ~ 4 M N elements
    forward_backward: the forward, then read dy, h, w, rstd; write one dh (it is dx and
                      dresidual) and dw                                   ~ 3 M N elements more
    The benchmark differentiates y only (h's gradient is None, so nothing to read for it).
    """
    size = torch.tensor([], dtype=dtype).element_size()
    n, m = case["N"], case["M"]
    mn = m * n
    fwd_bytes = (4 * mn + n) * size + 4 * m
    fwd_flops = 5 * mn                         # add, square, sum, two multiplies
    if mode == "forward":
        return {"bytes": fwd_bytes, "flops": fwd_flops}
    bwd_bytes = (3 * mn + 2 * n) * size + 4 * m
    bwd_flops = 9 * mn
    return {"bytes": fwd_bytes + bwd_bytes, "flops": fwd_flops + bwd_flops}
