"""Exercise 06 — rmsnorm, CUDA C++ track, solved: the Python half of the op.

rmsnorm.cpp defines the schema (TORCH_LIBRARY) and the CPU and CUDA implementations (the CUDA
kernels are in rmsnorm_kernels.cu). What the dispatcher still needs comes from here:

- a fake ("meta") implementation: torch.compile, opcheck and torch.export run the op on
  FakeTensors (shapes, dtypes and devices, no data) to learn what it returns without running a
  kernel; a C++ kernel cannot run on them, so we say in Python what the outputs look like;
- the autograd formula: which inputs to save, and that the backward is another op of ours.

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


@torch.library.register_fake("ex06_cuda::rmsnorm_fwd")
def _rmsnorm_fwd_fake(x, w, eps):
    _check(x, w)
    # what the C++ returns: y contiguous like x, rstd [rows] (x's shape without the last dim)
    y = x.new_empty(x.shape)
    rstd = x.new_empty(x.shape[:-1], dtype=_math_dtype(x))
    return y, rstd


@torch.library.register_fake("ex06_cuda::rmsnorm_bwd")
def _rmsnorm_bwd_fake(dy, x, w, rstd):
    _check(x, w)
    return x.new_empty(x.shape), w.new_empty(w.shape)


def _setup_context(ctx, inputs, output):
    x, w, _eps = inputs
    _y, rstd = output
    ctx.save_for_backward(x, w, rstd)  # 4 bytes per row saved, instead of recomputing rstd
    # rstd is an output of the op but not of rmsnorm(): its gradient arrives as None instead of
    # a tensor of zeros, which autograd would otherwise fill (a kernel launch per step) for a
    # backward that never reads it
    ctx.set_materialize_grads(False)


def _backward(ctx, dy, _drstd):
    if dy is None:  # only rstd was differentiated: the backward reads y's gradient alone
        return None, None, None
    x, w, rstd = ctx.saved_tensors
    dx, dw = torch.ops.ex06_cuda.rmsnorm_bwd(dy, x, w, rstd)
    return dx, dw, None  # no gradient for eps


torch.library.register_autograd("ex06_cuda::rmsnorm_fwd", _backward, setup_context=_setup_context)


def rmsnorm(x: torch.Tensor, w: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    y, _rstd = torch.ops.ex06_cuda.rmsnorm_fwd(x, w, float(eps))
    return y
