"""Exercise 12 reference: the op, the benchmark inputs, the baselines and the flop/traffic model."""
import torch
import torch.nn.functional as F

ACTS = ("none", "relu", "gelu_tanh")


def _act(z: torch.Tensor, act: str) -> torch.Tensor:
    if act == "none":
        return z
    if act == "relu":
        return torch.relu(z)
    if act == "gelu_tanh":
        return F.gelu(z, approximate="tanh")
    raise ValueError(f"act must be one of {ACTS}, got {act!r}")


def reference(A: torch.Tensor, B: torch.Tensor, bias: torch.Tensor, act: str = "none"):
    """act(A @ B + bias) as a PyTorch user writes it (the "eager" baseline: matmul, add, act).

    16-bit inputs: the matmul accumulates in fp32 (cuBLAS), the bias add and the activation are
    separate kernels on the 16-bit result. float64 inputs stay float64: the checks call this on
    .double() copies as the expectation.
    """
    return _act(A @ B + bias, act)


def linear_act(A, B, bias, act="none"):
    """F.linear + the activation: cuBLAS with the bias fused (cublasLt epilogue), then a
    separate activation kernel that reads and rewrites D. What most model code runs."""
    return _act(F.linear(A, B.t(), bias), act)


def addmm(A, B, bias, act="none"):
    """torch.addmm alone: cuBLAS's GEMM with the bias, no activation. The bar for the GEMM
    itself: a fused kernel at its speed has made the activation free."""
    return torch.addmm(bias, A, B)


def bench_inputs(case, dtype, device, generator):
    M, N, K = case["M"], case["N"], case["K"]
    A = torch.randn((M, K), dtype=dtype, device=device, generator=generator)
    # B scaled by K^-1/2 so that A @ B is O(1) whatever K (as a Linear layer's init does)
    B = (torch.randn((K, N), dtype=torch.float32, device=device, generator=generator)
         * K ** -0.5).to(dtype)
    bias = torch.randn((N,), dtype=dtype, device=device, generator=generator)
    return (A, B, bias, case.get("act", "relu"))


def traffic(case, dtype, mode):
    """2 M N K flops; the fewest bytes: read A, B and bias once, write D once."""
    M, N, K = case["M"], case["N"], case["K"]
    size = torch.tensor([], dtype=dtype).element_size()
    return {"flops": 2 * M * N * K, "bytes": size * (M * K + K * N + N + M * N)}


def small_model(fn):
    """A model around the op for the torch.compile check: Linear -> matmul_act -> Linear, every
    weight an explicit argument, written with F.linear so Inductor compiles the rest."""
    def model(x, w1, B, bias, w2):
        h = F.linear(x, w1)
        h = fn(h, B, bias, "gelu_tanh")
        return F.linear(h, w2)
    return model
