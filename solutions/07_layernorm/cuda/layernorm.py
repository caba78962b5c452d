"""Exercise 07 — layernorm, CUDA C++ track, solved: the Python half of the op.

layernorm.cpp defines the schemas (TORCH_LIBRARY) and the CPU and CUDA implementations. What
the dispatcher still needs comes from here:

- a fake ("meta") implementation of each op: torch.compile, opcheck and torch.export run ops on
  FakeTensors (shapes, dtypes and devices, no data) to learn what they return without running a
  kernel; a C++ kernel cannot run on them, so we say in Python what the outputs look like;
- the autograd formula: what the forward saves, and that the backward is our second op, asked
  for only the gradients autograd needs (ctx.needs_input_grad).

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


@torch.library.register_fake("ex07_cuda::layernorm_fwd")
def _layernorm_fwd_fake(x, w, b, eps):
    _check(x, w, b)
    # what the C++ returns: y dense (contiguous) in x's shape, mean and rstd with x's shape
    # without the last dim, in the math dtype
    stats = x.shape[:-1]
    return (x.new_empty(x.shape), x.new_empty(stats, dtype=_math_dtype(x)),
            x.new_empty(stats, dtype=_math_dtype(x)))


@torch.library.register_fake("ex07_cuda::layernorm_bwd")
def _layernorm_bwd_fake(dy, x, w, mean, rstd, output_mask):
    want_dx, want_dw, want_db = output_mask
    return (x.new_empty(x.shape) if want_dx else None,
            w.new_empty(w.shape) if want_dw else None,
            w.new_empty(w.shape) if want_db else None)


def _setup_context(ctx, inputs, output):
    x, w, _b, _eps = inputs
    _y, mean, rstd = output
    ctx.save_for_backward(x, w, mean, rstd)  # 8 bytes per row instead of recomputing them
    # mean and rstd are outputs of the op but not of layernorm(): their gradients arrive as
    # None instead of tensors of zeros, which autograd would otherwise fill (two kernel
    # launches per step) for a backward that never reads them
    ctx.set_materialize_grads(False)


def _backward(ctx, dy, _dmean, _drstd):
    if dy is None:  # only mean or rstd was differentiated: the backward reads y's gradient alone
        return None, None, None, None
    x, w, mean, rstd = ctx.saved_tensors
    # only what autograd asks for: frozen weights (w, b without grad) cost no partials, and an
    # input that needs no gradient (the first layer's x) costs no dx pass
    want = [bool(n) for n in ctx.needs_input_grad[:3]]
    dx, dw, db = torch.ops.ex07_cuda.layernorm_bwd(dy, x, w, mean, rstd, want)
    return dx, dw, db, None  # no gradient for eps


torch.library.register_autograd("ex07_cuda::layernorm_fwd", _backward,
                                setup_context=_setup_context)


def layernorm(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    y, _mean, _rstd = torch.ops.ex07_cuda.layernorm_fwd(x, w, b, float(eps))
    return y
