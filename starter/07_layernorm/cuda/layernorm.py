"""Exercise 07 — layernorm, CUDA C++ track: the Python half of the op.

layernorm.cpp defines the schemas (TORCH_LIBRARY) and the CPU and CUDA implementations. What
the dispatcher still needs comes from here:

- a fake ("meta") implementation of each op: torch.compile, opcheck and torch.export run ops on
  FakeTensors (shapes, dtypes and devices, no data) to learn what they return without running a
  kernel; a C++ kernel cannot run on them, so you say in Python what the outputs look like
  (torch.library.register_fake);
- the autograd formula: what the forward saves, and that the backward is your second op, asked
  for only the gradients autograd needs (ctx.needs_input_grad; torch.library.register_autograd).

The grader loads the built library (torch.ops.load_library) before importing this file; on your
own, build it with torch.utils.cpp_extension.load(..., is_python_module=False) first.
"""
import torch

if not hasattr(torch.ops.ex07_cuda, "layernorm_fwd"):
    raise ImportError("the ex07_cuda ops are not registered: load the built library "
                      "(layernorm.cpp + layernorm_fwd.cu + layernorm_bwd.cu, "
                      "torch.ops.load_library) before importing layernorm.py")


def _check(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> None:
    """The C++ checks of shapes, devices and dtypes again, so that a bad call fails the same
    way under torch.compile (which runs the fake kernels, not the C++)."""
    if x.dim() < 1 or x.shape[-1] == 0:
        raise ValueError(f"x must have a last dimension of at least 1 (the rows), got shape "
                         f"{tuple(x.shape)}")
    for name, p in (("w", w), ("b", b)):
        if p.dim() != 1 or p.shape[0] != x.shape[-1]:
            raise ValueError(f"{name} must have shape [{x.shape[-1]}] (x's last dimension), got "
                             f"{tuple(p.shape)}")
        if p.device != x.device:
            raise ValueError(f"{name} must be on x's device {x.device}, got {p.device}")
        if p.dtype != x.dtype:
            raise TypeError(f"{name} must have x's dtype {x.dtype}, got {p.dtype}")


def _math_dtype(x: torch.Tensor) -> torch.dtype:
    return torch.float64 if x.dtype == torch.float64 else torch.float32


# TODO 7 (about 15 lines): the fake kernels, one per op.
#   "ex07_cuda::layernorm_fwd"(x, w, b, eps): check, then return (y, mean, rstd) as the C++ makes
#       them: empty tensors of the same shapes, dtypes, devices and strides (x.new_empty(...))
#   "ex07_cuda::layernorm_bwd"(dy, x, w, mean, rstd, output_mask): (dx, dw, db), None where the
#       mask says that gradient is not wanted

# TODO 8 (about 15 lines): the autograd formula.
#   _setup_context(ctx, inputs, output): save what the backward op needs
#   _backward(ctx, dy, _dmean, _drstd): call "ex07_cuda::layernorm_bwd" for the gradients
#       ctx.needs_input_grad asks for; return one gradient per input of layernorm_fwd (None for
#       eps)
#   torch.library.register_autograd("ex07_cuda::layernorm_fwd", ...)


def layernorm(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    # TODO 9 (2 lines): call the forward op through torch.ops.ex07_cuda and return y
    raise NotImplementedError("layernorm: not implemented yet (see cuda/layernorm.cpp, "
                              "cuda/layernorm.py and cuda/layernorm_fwd.cu)")
