"""Exercise 09 reference: the op, the benchmark inputs, the baselines and the traffic model."""
import torch

QMAX = 127  # symmetric int8: -127..127 (-128 is never produced, so q and -q are both in range)


def reference(x: torch.Tensor, w: torch.Tensor, eps: float = 1e-6):
    """RMSNorm, then dynamic per-row (per-token) int8 quantization, as a PyTorch user writes it.

    Also the "eager" baseline: about nine kernels, each a pass over memory. Math in at least
    float32; float64 stays float64, so the tests can evaluate it in float64 as the expectation.

        y     = x * rsqrt(mean(x^2, -1) + eps) * w
        scale = max|y| / 127 per row, 1 where that max is 0 (an all-zero row: no 0/0)
        q     = clamp(round(y / scale), -127, 127) as int8

    torch.round rounds half to even (2.5 -> 2, 3.5 -> 4), like CUDA's rintf and a float add of
    1.5 * 2^23: the exercise holds every track to that rule (the tests allow a difference of 1
    only where y / scale is within rounding error of a half-integer).
    """
    acc = torch.promote_types(x.dtype, torch.float32)
    xf = x.to(acc)
    rstd = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    y = xf * rstd * w.to(acc)
    amax = y.abs().amax(-1, keepdim=True)
    scale = torch.where(amax > 0, amax / QMAX, torch.ones_like(amax))
    q = torch.clamp(torch.round(y / scale), -QMAX, QMAX).to(torch.int8)
    return q, scale.squeeze(-1).to(torch.promote_types(acc, torch.float32))


def ratio(x: torch.Tensor, w: torch.Tensor, eps: float = 1e-6):
    """y / scale in float64 (the value that is rounded), and the float64 scale: for the checks."""
    x, w = x.double(), w.double()
    rstd = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    y = x * rstd * w
    amax = y.abs().amax(-1, keepdim=True)
    scale = torch.where(amax > 0, amax / QMAX, torch.ones_like(amax))
    return y / scale, scale.squeeze(-1), y


def bench_inputs(case, dtype, device, generator):
    shape = (case["M"], case["N"])
    x = torch.randn(shape, dtype=dtype, device=device, generator=generator)
    w = 1.0 + 0.1 * torch.randn(case["N"], dtype=dtype, device=device, generator=generator)
    return (x, w, 1e-6)


def traffic(case, dtype, mode):
    """The fewest bytes the op must move.

    read x (M N elements of the input dtype) and w (N); write q (M N bytes) and scale (M fp32):
    for (32768, 4096) bf16: 268 MB + 8 KB read, 134 MB + 128 KB written = 403 MB.
    """
    size = torch.tensor([], dtype=dtype).element_size()
    m, n = case["M"], case["N"]
    return {"bytes": size * (m * n + n) + m * n + 4 * m,
            "flops": 7 * m * n}  # square+add, 2 multiplies, abs-max, 1 multiply, round, clamp


def linear_then_quant(op):
    """A small model around the op, for the torch.compile check: Linear -> rmsnorm_quant, as
    before an int8 GEMM. Every weight is an explicit argument."""
    def model(x, w_in, w, eps):
        h = torch.nn.functional.linear(x, w_in)
        return op(h, w, eps)
    return model
