"""Exercise 11 reference: the op, the benchmark inputs, the traffic model and a model for compile."""
import contextlib

import torch


@contextlib.contextmanager
def ieee_fp32():
    """Plain fp32 matmuls (TF32 off) inside, whatever the caller had set.

    With TF32 on, cuBLAS rounds the inputs of an fp32 matmul to 10 mantissa bits and runs it on
    tensor cores: ~8x faster on an H200 and ~1000x less accurate. The exercise is the fp32
    GEMM on CUDA cores, so the baseline must be too.
    """
    old = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = old


def _linear_relu(A, B, bias):
    return torch.relu(torch.addmm(bias, A, B))


def reference(A: torch.Tensor, B: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """relu(A @ B + bias), written as a user would: torch.addmm (one cuBLAS GEMM, the bias added
    by cuBLAS's epilogue) and a separate relu kernel that reads and writes Y once more.

    Also the "eager" baseline (TF32 off) and, through torch.compile, the "compile" one: the
    GEMM then stays a cuBLAS call and Inductor fuses what it can around it. float64 stays
    float64, so the checks get their expectation (and float64 gradients) by calling this on
    `.double()` inputs.
    """
    compute = torch.promote_types(A.dtype, torch.float32)
    with ieee_fp32():
        return _linear_relu(A.to(compute), B.to(compute), bias.to(compute)).to(A.dtype)


def matching(args, y):
    """The reference for one timed call whose output is `y`, for the grader's validation of
    timed outputs (grader/judge/measure.py `validate`, which compares gradients normwise).

    At the ReLU's kink the mask is a coin toss: where |Z| = |A @ B + bias| is within the float32
    rounding bound of 0 (32 sqrt(K+1) u sum_k |A_ik B_kj|, u = 2^-24: 8 times the checks' bound,
    see grader.judge.testing.sum_bound), a right fp32 Z may land on either side, and dY passes or not
    depending on it. At 4096^3 a few dozen such elements flip; each carries a whole dY entry into
    a row of dA and a column of dB: ~1e-3 normwise, ten times the fp32 bound. So: Z's own sign
    everywhere, and the side `y` shows only inside that band (a tiny fraction of the elements).
    """
    import math
    A64, B64, b64 = (t.detach().double() for t in args)
    with torch.no_grad():
        Z = torch.addmm(b64, A64, B64)
        band = 32 * math.sqrt(A64.shape[1] + 1) * 2.0 ** -24 * (A64.abs() @ B64.abs() + b64.abs())
        keep = torch.where(Z.abs() <= band, y.detach().to(Z.device) > 0, Z > 0)

    def fn(A, B, bias):
        z = torch.addmm(bias, A, B)
        return z * keep.to(z.dtype)
    return fn


def two_layers(op):
    """A small model around the op for the torch.compile check: two linear_relu layers, every
    weight an explicit argument (and nothing but the op inside, so no other matmul)."""
    def model(x, B1, b1, B2, b2):
        return op(op(x, B1, b1), B2, b2)
    return model


def bench_inputs(case, dtype, device, generator):
    """A [M, K] ~ N(0, 1), B [K, N] ~ N(0, 1/K), bias [N] ~ N(0, 1/4): |A @ B| ~ 1 whatever K,
    so about half the outputs are positive and the ReLU's mask is not trivial."""
    m, n, k = case["M"], case["N"], case["K"]
    A = torch.randn(m, k, dtype=dtype, device=device, generator=generator)
    B = torch.randn(k, n, dtype=dtype, device=device, generator=generator) * k ** -0.5
    bias = 0.5 * torch.randn(n, dtype=dtype, device=device, generator=generator)
    return (A, B, bias)


def traffic(case, dtype, mode):
    """Flops (what the matmul ceiling judges) and the fewest bytes.

    forward: 2 M N K flops (a multiply and an add per product) + 2 M N for the epilogue;
             read A [M, K], B [K, N], bias [N], write Y [M, N].
    forward_backward adds dA = dZ Bᵀ and dB = Aᵀ dZ (2 M N K each) and dZ = dY * (Y > 0),
             dbias = colsum(dZ) (2 M N): read dY, Y, A, B (again), write dA, dB, dbias.
    """
    m, n, k = case["M"], case["N"], case["K"]
    size = torch.tensor([], dtype=dtype).element_size()
    forward = {"bytes": (m * k + k * n + n + m * n) * size, "flops": 2 * m * n * k + 2 * m * n}
    if mode == "forward":
        return forward
    backward = {"bytes": (2 * m * n + m * k + k * n + m * k + k * n + n) * size,
                "flops": 4 * m * n * k + 2 * m * n}
    return {key: forward[key] + backward[key] for key in forward}
