"""Exercise 11 — tiled_matmul, CUDA track, solved: the Python half of the op.

linear_relu.cpp defines the schemas (TORCH_LIBRARY) and the CPU and CUDA implementations;
linear_relu_kernels.cu the kernels. What the dispatcher still needs comes from here:

- fake ("meta") kernels: torch.compile and opcheck run the ops on FakeTensors (shapes, dtypes,
  devices, no data) to learn what they return; a C++ kernel cannot run on those;
- the autograd formula of linear_relu, written with our own ops only:

      Z = A @ B + bias,  Y = relu(Z)
      dZ    = dY * (Y > 0)          (Y > 0 exactly where Z > 0: Y is saved, Z is not)
      dA    = dZ @ Bᵀ               [M, N] @ [N, K]
      dB    = Aᵀ @ dZ               [K, M] @ [M, N]
      dbias = dZ summed over rows   [N]

  dA and dB are the same GEMM kernel as the forward, called on transposed *views* (B.t(),
  A.t() only swap strides; the kernel reads them in place).

The grader loads the built library before importing this file; on your own, build it with
torch.utils.cpp_extension.load(..., is_python_module=False) first.
"""
import torch

if not hasattr(torch.ops.ex11_cuda, "linear_relu"):
    raise ImportError("the ex11_cuda ops are not registered: load the built library "
                      "(linear_relu.cpp + linear_relu_kernels.cu) before importing linear_relu.py")

_ops = torch.ops.ex11_cuda


def _check_gemm(A, B):
    """The C++ checks again, so a bad call fails the same way under torch.compile."""
    if A.dim() != 2:
        raise ValueError(f"A must be a 2-D matrix, got shape {tuple(A.shape)}")
    if A.dtype not in (torch.float32, torch.float64):
        raise TypeError(f"A must be float32 (or float64, for gradcheck), got {A.dtype}")
    if B.dim() != 2 or B.shape[0] != A.shape[1]:
        raise ValueError(f"B must have shape [K, N] with K = A.size(1) = {A.shape[1]}, got B of "
                         f"shape {tuple(B.shape)}")
    if B.dtype != A.dtype or B.device != A.device:
        raise TypeError(f"B must have A's dtype and device ({A.dtype}, {A.device}), got "
                        f"{B.dtype} on {B.device}")


@torch.library.register_fake("ex11_cuda::linear_relu")
def _linear_relu_fake(A, B, bias):
    _check_gemm(A, B)
    if bias.dim() != 1 or bias.shape[0] != B.shape[1]:
        raise ValueError(f"bias must have shape [N] = [{B.shape[1]}], got {tuple(bias.shape)}")
    return A.new_empty((A.shape[0], B.shape[1]))  # a fresh contiguous [M, N], like the C++


@torch.library.register_fake("ex11_cuda::matmul")
def _matmul_fake(A, B):
    _check_gemm(A, B)
    return A.new_empty((A.shape[0], B.shape[1]))


@torch.library.register_fake("ex11_cuda::relu_grad_colsum")
def _relu_grad_colsum_fake(dY, Y):
    return Y.new_empty(Y.shape), Y.new_empty((Y.shape[1],))


def _setup_context(ctx, inputs, output):
    A, B, _bias = inputs
    ctx.save_for_backward(A, B, output)  # Y, not Z: relu's mask is Y > 0


def _backward(ctx, dY):
    A, B, Y = ctx.saved_tensors
    need_a, need_b, _need_bias = ctx.needs_input_grad
    dZ, dbias = _ops.relu_grad_colsum(dY, Y)
    dA = _ops.matmul(dZ, B.t()) if need_a else None  # [M, N] @ [N, K]
    dB = _ops.matmul(A.t(), dZ) if need_b else None  # [K, M] @ [M, N]
    return dA, dB, dbias


torch.library.register_autograd("ex11_cuda::linear_relu", _backward, setup_context=_setup_context)


def linear_relu(A: torch.Tensor, B: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """relu(A @ B + bias) for A [M, K], B [K, N], bias [N]; float32 (float64 for gradcheck)."""
    return _ops.linear_relu(A, B, bias)
