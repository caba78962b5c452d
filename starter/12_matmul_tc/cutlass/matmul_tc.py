"""Exercise 12 — matmul_tc, CUTLASS track: the Python half of the op.

matmul_tc.cpp defines the schema (TORCH_LIBRARY(ex12_cutlass)) and the CUDA kernel. Here:

- the fake ("meta") implementation: torch.compile and opcheck run the op on FakeTensors
  (shapes, dtypes, devices, no data) to learn what it returns without running a kernel;
- the entry point `matmul_act`, which calls the registered op.

Forward only: the exercise has no backward (a GEMM's backward is two more GEMMs, exercise 11).
The grader loads the built library (torch.ops.load_library) before importing this file.
"""
import torch

if not hasattr(torch.ops.ex12_cutlass, "matmul_act"):
    raise ImportError("the ex12_cutlass ops are not registered: load the built library "
                      "(torch.ops.load_library) before importing matmul_tc.py")

ACTS = ("none", "relu", "gelu_tanh")


@torch.library.register_fake("ex12_cutlass::matmul_act")
def _matmul_act_fake(A, B, bias, act):
    # TODO (~4 lines): return an empty tensor shaped, typed and placed like the one the C++
    # returns (no data is computed here), after refusing a bad `act` or mismatched shapes.
    raise NotImplementedError("matmul_act's fake kernel: not implemented yet (cutlass/matmul_tc.py)")


def matmul_act(A: torch.Tensor, B: torch.Tensor, bias: torch.Tensor, act: str = "none"):
    """act(A @ B + bias): A [M, K], B [K, N], bias [N], bf16 or fp16; fp32 accumulation."""
    return torch.ops.ex12_cutlass.matmul_act(A, B, bias, act)
