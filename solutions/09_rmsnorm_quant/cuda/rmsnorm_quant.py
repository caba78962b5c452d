"""Exercise 09 — rmsnorm_quant, CUDA C++ track, solved: the Python half of the op.

rmsnorm_quant.cpp defines the schema (TORCH_LIBRARY) and the CPU and CUDA kernels. What the
dispatcher still needs comes from here: a fake ("meta") implementation. torch.compile, opcheck
and torch.export run the op on FakeTensors (shapes, dtypes and devices, no data) to learn what
it returns without running a kernel; a C++ kernel cannot run on them, so we say in Python what
the outputs look like. There is no backward: rounding has a zero gradient almost everywhere, so
no autograd formula is registered.

The grader loads the built library (torch.ops.load_library) before importing this file; on your
own, build it with torch.utils.cpp_extension.load(..., is_python_module=False) first.
"""
import torch

if not hasattr(torch.ops.ex09_cuda, "rmsnorm_quant"):
    raise ImportError("the ex09_cuda ops are not registered: load the built library "
                      "(torch.ops.load_library) before importing rmsnorm_quant.py")


def _check(x: torch.Tensor, w: torch.Tensor) -> None:
    """The C++ checks again, so a bad call fails the same way under torch.compile."""
    if x.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        raise TypeError(f"x must be float32, float16 or bfloat16, got {x.dtype}")
    if x.dim() < 1 or x.shape[-1] == 0:
        raise ValueError(f"x must have a last dimension of at least 1 (the rows), got shape "
                         f"{tuple(x.shape)}")
    if w.dim() != 1 or w.shape[0] != x.shape[-1]:
        raise ValueError(f"w must have shape [{x.shape[-1]}] (x's last dimension), got "
                         f"{tuple(w.shape)}")
    if w.dtype != x.dtype:
        raise TypeError(f"w must have x's dtype {x.dtype}, got {w.dtype}")
    if w.device != x.device:
        raise ValueError(f"w must be on x's device {x.device}, got {w.device}")
    if not x.is_contiguous() and not (x.dim() == 2 and x.stride(1) == 1):
        raise ValueError(f"x must be contiguous, or a 2-D view whose rows are contiguous; got "
                         f"strides {x.stride()}: call x.contiguous() first")


@torch.library.register_fake("ex09_cuda::rmsnorm_quant")
def _rmsnorm_quant_fake(x, w, eps):
    _check(x, w)
    # what the C++ returns: q int8 with x's shape (contiguous), one fp32 scale per row
    q = x.new_empty(x.shape, dtype=torch.int8)
    scale = x.new_empty(x.shape[:-1], dtype=torch.float32)
    return q, scale


def rmsnorm_quant(x: torch.Tensor, w: torch.Tensor,
                  eps: float = 1e-6) -> tuple[torch.Tensor, torch.Tensor]:
    q, scale = torch.ops.ex09_cuda.rmsnorm_quant(x, w, float(eps))
    return q, scale
