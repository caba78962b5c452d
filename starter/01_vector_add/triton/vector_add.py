"""Exercise 01 — vector_add: your first Triton kernel.

Write `add(x, y) -> x + y` for 1-D tensors of any length. Read exercises/01_vector_add/README.md
first; grade with `make exercise-01`. On a machine without a GPU this file runs on CPU tensors
through Triton's interpreter (TRITON_INTERPRET=1), so you can learn without a GPU.
"""
import torch
import triton
import triton.language as tl


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    # Each program (one instance of this kernel) handles BLOCK consecutive elements.
    # TODO (about 6 lines):
    #   1. which program am I?            pid = tl.program_id(axis=0)
    #   2. my element offsets:            pid * BLOCK + tl.arange(0, BLOCK)
    #   3. which of them exist:           a mask, offsets < n  (the last block runs past n)
    #   4. load x and y with that mask, add, and store to out_ptr with the same mask.
    pass


def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    # TODO (about 5 lines):
    #   1. refuse bad input with a message naming the argument: y must have x's shape, dtype
    #      and device (raise ValueError(f"y: ...")); a non-contiguous x or y may be refused too
    #   2. out = torch.empty_like(x); return it at once if x is empty
    #   3. grid = (triton.cdiv(n, BLOCK),) programs; launch add_kernel[grid](..., BLOCK=1024)
    raise NotImplementedError("add: not implemented yet (see the TODOs in triton/vector_add.py)")
