"""Exercise 10 reference: the op, the expectation given a mask, the inputs, the traffic model.

Dropout is random, so no reference can predict *which* elements a submission drops: that is a
function of the submission's own counter-based generator. The checks therefore read the mask
off the output (a dropped element is exactly 0; a kept one is layernorm(x) / (1 - p), never 0
for the inputs the checks use) and hold the values and gradients to `with_mask` below, in
float64, for that mask; the statistics checks hold the mask itself to being random.
"""
import torch
import torch.nn.functional as F


def layernorm(x, w, b, eps=1e-5):
    """LayerNorm over the last dimension, biased variance; math in at least float32, and float64
    stays float64 (the tests' expectation)."""
    xf = x.to(torch.promote_types(x.dtype, torch.float32))
    mean = xf.mean(-1, keepdim=True)
    var = (xf - mean).pow(2).mean(-1, keepdim=True)
    return (xf - mean) * torch.rsqrt(var + eps) * w + b


def with_mask(x, w, b, keep, p, eps=1e-5):
    """The op for a given keep mask (bool, x's shape): layernorm(x) * keep / (1 - p).

    Differentiable in x, w and b: the expected gradients for the mask a submission drew.
    """
    scale = 0.0 if p >= 1.0 else 1.0 / (1.0 - p)
    return layernorm(x, w, b, eps) * keep.to(torch.promote_types(x.dtype, torch.float32)) * scale


def reference(x, w, b, p, seed, eps=1e-5):
    """The op as a PyTorch user writes it (the "eager" baseline): F.layer_norm, then F.dropout.

    F.dropout draws its mask from PyTorch's own generator and ignores `seed`, and stores it (as a
    bool tensor, for its backward): the same op, not the same mask as any submission.
    """
    y = F.layer_norm(x, (x.shape[-1],), w, b, eps)
    return F.dropout(y, p, training=True)


def bench_inputs(case, dtype, device, generator):
    m, n = case["M"], case["N"]
    x = torch.randn((m, n), dtype=dtype, device=device, generator=generator)
    w = 1.0 + 0.1 * torch.randn(n, dtype=dtype, device=device, generator=generator)
    b = 0.1 * torch.randn(n, dtype=dtype, device=device, generator=generator)
    return (x, w, b, case.get("p", 0.1), 1234, 1e-5)


def traffic(case, dtype, mode):
    """The fewest bytes the op must move. No mask bytes: the mask is regenerated, never stored.

    forward:          read x, w, b; write y, mean and rstd (fp32 per row)      ~ 2 M N elements
    forward_backward: the forward, then read x, dy, w, mean, rstd; write dx, dw, db  ~ 5 M N
    """
    size = torch.tensor([], dtype=dtype).element_size()
    m, n = case["M"], case["N"]
    mn = m * n
    fwd_bytes = (2 * mn + 2 * n) * size + 8 * m
    # mean, centre, square, sum, scale, w, b, compare, select, rescale: ~10 flops per element,
    # plus the random numbers (integer work, not counted here: see the README)
    fwd_flops = 10 * mn
    if mode == "forward":
        return {"bytes": fwd_bytes, "flops": fwd_flops}
    bwd_bytes = (3 * mn + 3 * n) * size + 8 * m
    bwd_flops = 14 * mn
    return {"bytes": fwd_bytes + bwd_bytes, "flops": fwd_flops + bwd_flops}


def matching(args, y):
    """The reference for one call whose output is `y`: the op with the mask `y` shows (a dropped
    element is exactly 0), as a function of the same arguments as `reference`.

    For the grader's validation of timed outputs (grader/judge/measure.py `validate`), which otherwise
    compares with `reference`, whose F.dropout draws a mask of its own: a hook the grader has to
    call (`ref.matching(args, outputs[0])` in place of `ref.reference` when defined).
    """
    keep = y.detach() != 0

    def fn(x, w, b, p, seed, eps=1e-5):
        return with_mask(x, w, b, keep.to(x.device), p, eps)
    return fn
