"""Exercise 09 — rmsnorm_quant, Triton track. Your file: fill in the TODOs.

    y     = x * rsqrt(mean(x^2, -1) + eps) * w             fp32 math
    scale = max|y| / 127 per row (1 if that max is 0)       fp32, one per row
    q     = clamp(round_half_even(y / scale), -127, 127)    int8

Read the exercise README first (the bytes, the ideal time, the rounding rule). Run the checks
with `make exercise-09` or `python -m grader grade --exercise 09`.

On this machine kernels run on Triton's CPU interpreter. Convert every load to tl.float32
before any arithmetic (fp32 math, as the README's hints say), and note that
triton.language.extra.libdevice is not available there (the README's hints say how to round).
"""
import torch
import triton
import triton.language as tl
from torch.library import triton_op, wrap_triton

MAX_BLOCK = 16384   # rows up to this long: one program holds the row in registers
LOOP_BLOCK = 4096   # longer rows: loop over blocks of this many columns


@triton.jit
def _rmsnorm_quant_kernel(x_ptr, w_ptr, q_ptr, scale_ptr,  # x: [M, N] any strides; w: [N];
                          stride_m, stride_n,              # q: [M, N] contiguous; scale: [M]
                          N, eps,
                          BLOCK_N: tl.constexpr,           # columns per step (a power of two)
                          ONE_BLOCK: tl.constexpr):        # N <= BLOCK_N: the row stays in registers
    # TODO 1 (~20 lines): one program per row. If ONE_BLOCK: load the row once (as float32),
    #   sum of squares -> rstd, y = x * w * rstd, amax = max|y|; then scale and q, and store both.
    #   An all-zero row must get scale 1 and q = 0 (no 0 / 0). Round half to even, clamp to
    #   [-127, 127] in float, and only then convert to int8.
    # TODO 2 (~20 lines): else, a loop over column blocks: pass 1 gathers what the max and the
    #   sum of squares need, pass 2 reads the row again and writes q.
    pass


def _check(x: torch.Tensor, w: torch.Tensor) -> None:
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


@triton_op("ex09_triton::rmsnorm_quant", mutates_args=())
def rmsnorm_quant_op(x: torch.Tensor, w: torch.Tensor,
                     eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    _check(x, w)
    # TODO 3 (~12 lines): allocate q (int8, x's shape) and scale (float32, x's shape without the
    #   last dim), view x as [M, N] (or pass its strides), and launch one program per row with
    #   wrap_triton(_rmsnorm_quant_kernel)[(M,)](...). Then delete the line below.
    raise NotImplementedError("rmsnorm_quant (triton) is not implemented yet: see the TODOs in "
                              "triton/rmsnorm_quant.py")


def rmsnorm_quant(x: torch.Tensor, w: torch.Tensor,
                  eps: float = 1e-6) -> tuple[torch.Tensor, torch.Tensor]:
    q, scale = rmsnorm_quant_op(x, w, float(eps))
    return q, scale
