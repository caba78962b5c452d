"""Exercise 06 — rmsnorm, CUDA C++ track: the Python half of the op.

rmsnorm.cpp defines the schema (TORCH_LIBRARY) and the CPU and CUDA implementations (the CUDA
kernels are in rmsnorm_kernels.cu). What the dispatcher still needs comes from here:

- a fake ("meta") implementation for each op: torch.compile, opcheck and torch.export run ops
  on FakeTensors (shapes, dtypes and devices, no data) to learn what they return without
  running a kernel; a C++ kernel cannot run on them, so you say in Python what the outputs
  look like (torch.library.register_fake);
- the autograd formula: what to save in the forward, and that the backward is your second op
  (torch.library.register_autograd).

The grader loads the built library (torch.ops.load_library) before importing this file; on your
own, build it with torch.utils.cpp_extension.load(..., is_python_module=False) first.
"""
import torch

if not hasattr(torch.ops.ex06_cuda, "rmsnorm_fwd"):
    raise ImportError("the ex06_cuda ops are not registered: load the built rmsnorm_ext library "
                      "(torch.ops.load_library) before importing rmsnorm.py")


def _check(x: torch.Tensor, w: torch.Tensor) -> None:
    """The C++ checks again, so a bad call fails the same way under torch.compile."""
    if x.dim() < 1 or x.shape[-1] == 0:
        raise ValueError(f"x must have a last dimension of at least 1 (the rows), got shape "
                         f"{tuple(x.shape)}")
    if w.dim() != 1 or w.shape[0] != x.shape[-1]:
        raise ValueError(f"w must have shape [{x.shape[-1]}] (x's last dimension), got "
                         f"{tuple(w.shape)}")
    if w.device != x.device:
        raise ValueError(f"w must be on x's device {x.device}, got {w.device}")
    if w.dtype != x.dtype:
        raise TypeError(f"w must have x's dtype {x.dtype}, got {w.dtype}")


def _math_dtype(x: torch.Tensor) -> torch.dtype:
    return torch.float64 if x.dtype == torch.float64 else torch.float32


# TODO (about 12 lines): the fake kernels.
#   @torch.library.register_fake("ex06_cuda::rmsnorm_fwd")
#   def _(x, w, eps): _check(x, w); return y and rstd as the C++ makes them: empty tensors of
#       the right shape, dtype and device (x.new_empty(...)); rstd is x's shape without the
#       last dimension, in _math_dtype(x)
#   @torch.library.register_fake("ex06_cuda::rmsnorm_bwd")
#   def _(dy, x, w, rstd): return dx (like x) and dw (like w)

# TODO (about 10 lines): the autograd formula.
#   def _setup_context(ctx, inputs, output): save x, w and rstd (output[1])
#   def _backward(ctx, dy, _drstd): dx, dw = torch.ops.ex06_cuda.rmsnorm_bwd(...);
#       return dx, dw, None (no gradient for eps)
#   torch.library.register_autograd("ex06_cuda::rmsnorm_fwd", _backward,
#                                   setup_context=_setup_context)


def rmsnorm(x: torch.Tensor, w: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    # TODO: y, _rstd = torch.ops.ex06_cuda.rmsnorm_fwd(x, w, float(eps)); return y
    raise NotImplementedError("rmsnorm: not implemented yet (see cuda/rmsnorm.py, and "
                              "cuda/rmsnorm.cpp and cuda/rmsnorm_kernels.cu)")
