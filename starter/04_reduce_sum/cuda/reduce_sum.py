"""Exercise 04 — reduce_sum, CUDA C++ track: the Python half of the ops (given: nothing to do here).

reduce_sum.cpp defines the schemas (TORCH_LIBRARY) and the CPU and CUDA implementations. What the
dispatcher still needs comes from here: a fake ("meta") implementation of each op. torch.compile,
opcheck and torch.export run ops on FakeTensors (shapes, dtypes and devices, no data) to learn
what they return without running a kernel; a C++ kernel cannot run on them, so we say in Python
what the output looks like. No autograd formula: these ops have no backward.

The grader loads the built library (torch.ops.load_library) before importing this file; on your
own, build it with torch.utils.cpp_extension.load(..., is_python_module=False) first.
"""
import torch

if not hasattr(torch.ops.ex04_cuda, "reduce_sum"):
    raise ImportError("the ex04_cuda ops are not registered: load the built reduce_sum library "
                      "(torch.ops.load_library) before importing reduce_sum.py")

FLOATS = (torch.float32, torch.float16, torch.bfloat16, torch.float64)


def _check(x: torch.Tensor, op: str) -> None:
    """The C++ checks again, so a bad call fails the same way under torch.compile."""
    if x.dtype not in FLOATS:
        raise TypeError(f"{op}: x must be float32, float16, bfloat16 or float64, got {x.dtype}")
    if not x.is_contiguous():
        raise ValueError(f"{op}: x must be contiguous, got strides {x.stride()} "
                         f"(pass x.contiguous())")


def _result_dtype(x: torch.Tensor) -> torch.dtype:
    return torch.float64 if x.dtype == torch.float64 else torch.float32


@torch.library.register_fake("ex04_cuda::reduce_sum")
def _reduce_sum_fake(x):
    _check(x, "reduce_sum")
    return x.new_empty((), dtype=_result_dtype(x))


@torch.library.register_fake("ex04_cuda::reduce_sum_rows")
def _reduce_sum_rows_fake(x):
    if x.dim() != 2:
        raise ValueError(f"reduce_sum_rows: x must be 2-D [M, N], got shape {tuple(x.shape)}")
    _check(x, "reduce_sum_rows")
    return x.new_empty((x.shape[0],), dtype=_result_dtype(x))


def reduce_sum(x: torch.Tensor) -> torch.Tensor:
    """The sum of every element of x, as a 0-d tensor (float32; float64 for float64 x)."""
    return torch.ops.ex04_cuda.reduce_sum(x)


def reduce_sum_rows(x: torch.Tensor) -> torch.Tensor:
    """The sum of each row of x [M, N], as [M] (float32; float64 for float64 x)."""
    return torch.ops.ex04_cuda.reduce_sum_rows(x)
