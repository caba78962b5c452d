"""Exercise 09 — rmsnorm_quant, CUDA C++ track: the Python half of the op. Fill in the TODOs.

rmsnorm_quant.cpp defines the schema (TORCH_LIBRARY) and the CPU and CUDA implementations. What
the dispatcher still needs comes from here: a fake ("meta") implementation, which torch.compile
and opcheck run on FakeTensors (shapes, dtypes, devices, no data) to learn what the op returns.
There is no backward (rounding has a zero gradient almost everywhere).

The grader loads the built library (torch.ops.load_library) before importing this file.
"""
import torch

if not hasattr(torch.ops.ex09_cuda, "rmsnorm_quant"):
    raise ImportError("the ex09_cuda ops are not registered: load the built library "
                      "(torch.ops.load_library) before importing rmsnorm_quant.py")


# TODO 1 (~6 lines): @torch.library.register_fake("ex09_cuda::rmsnorm_quant") on a function of
#   (x, w, eps) that returns two new empty tensors shaped and typed like the C++ outputs (and
#   raises, like the C++ checks, on inputs the C++ refuses).


def rmsnorm_quant(x: torch.Tensor, w: torch.Tensor,
                  eps: float = 1e-6) -> tuple[torch.Tensor, torch.Tensor]:
    # TODO 2 (1 line): call torch.ops.ex09_cuda.rmsnorm_quant; then delete the line below.
    raise NotImplementedError("rmsnorm_quant (cuda) is not implemented yet: start with the CPU "
                              "loops in cuda/rmsnorm_quant.cpp")
