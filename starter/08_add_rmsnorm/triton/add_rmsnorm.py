"""Exercise 08 — add_rmsnorm, Triton track: the residual add fused into RMSNorm.

    h  = x + residual                                   rounded to x's dtype (returned)
    y  = h * rstd * w,  rstd = 1/sqrt(mean(h^2) + eps)  fp32 math on that rounded h
    dh = rstd * (w*dy - hhat * mean(hhat*w*dy)) + dh_out    hhat = h * rstd
    dx = dresidual = dh;   dw = sum over rows of dy * hhat

Read exercises/08_add_rmsnorm/README.md first; grade with `make exercise-08`. Without a GPU the
kernels run on CPU tensors through Triton's interpreter; the opcheck and torch.compile checks
then report "needs a GPU".

Given: the argument checks, the block-size constants, the kernels' signatures. Yours: the three
kernels, the three launchers registered as ops with torch.library.triton_op (one of them
declares that it mutates `residual`), and the autograd formula. The checks call
add_rmsnorm(x, residual, w, eps) -> (y, h) and add_rmsnorm_(x, residual, w, eps) -> y, and the
ops ex08_triton::add_rmsnorm_fwd / add_rmsnorm_inplace / add_rmsnorm_bwd: keep those names and
signatures.
"""
from typing import Optional

import torch
import triton
import triton.language as tl
from torch.library import triton_op, wrap_triton  # noqa: F401  (you will use both)

# A row up to this long is held in registers by one program; longer rows loop over column
# blocks of LOOP_BLOCK. Rows of 65536 and more must work.
MAX_FWD_BLOCK = 16384
MAX_BWD_BLOCK = 8192
LOOP_BLOCK = 4096
PROGRAMS_PER_SM = 4     # backward programs per SM (persistent: each loops over several rows)
CPU_PROGRAMS = 4        # on the interpreter
REDUCE_BLOCK = 32       # columns per program of the dw reduction
REDUCE_ROWS = 64        # partial rows it adds per step (a [REDUCE_ROWS, REDUCE_BLOCK] tile)


@triton.jit
def _add_rmsnorm_fwd_kernel(x_ptr, r_ptr, w_ptr,       # x, residual: [M, N]; w: [N]
                            y_ptr, h_ptr, rstd_ptr,    # y, h: [M, N] (h may be residual); rstd: [M]
                            N, eps,
                            BLOCK_N: tl.constexpr,     # columns per step (a power of two)
                            ONE_BLOCK: tl.constexpr,   # N <= BLOCK_N: the row stays in registers
                            F64: tl.constexpr):        # float64 math (gradcheck)
    # the math type: convert every load before any arithmetic (a sum of squares in 16 bits
    # loses digits, and overflows float16 past |h| ~ 256); float64 for float64 inputs
    acc_ty = tl.float64 if F64 else tl.float32
    # One program per row. TODO (about 25 lines):
    #   1. ONE_BLOCK: load the row of x and of residual, add, round h to the storage dtype
    #      (.to(h_ptr.dtype.element_ty)) and store it; normalize that same rounded h (back in
    #      acc_ty) with w; store y; a row is read once and h never goes back to memory twice
    #   2. otherwise: a loop over column blocks that adds, stores h and sums squares; then a
    #      second loop that reloads h (this program just wrote it) and stores y
    #   3. store rstd for this row (the backward needs it)
    pass


@triton.jit
def _add_rmsnorm_bwd_kernel(dy_ptr, dho_ptr, h_ptr, w_ptr, rstd_ptr,  # dy, dh_out, h: [M, N]
                            dx_ptr, dw_part_ptr,       # dx: [M, N]; dw partials: [programs, N]
                            M, N,
                            HAS_DH: tl.constexpr,      # h's own output got a gradient
                            BLOCK_N: tl.constexpr, ONE_BLOCK: tl.constexpr, F64: tl.constexpr):
    acc_ty = tl.float64 if F64 else tl.float32
    # Persistent: program p takes rows p, p + P, ... and keeps its share of dw in acc_ty,
    # written once as row p of the partials. TODO (about 35 lines): exercise 06's backward with
    # h in place of x, plus, when HAS_DH, the gradient arriving at the h output added to dx.
    pass


@triton.jit
def _dw_reduce_kernel(part_ptr, dw_ptr,               # partials: [P, N] (fp32/fp64); dw: [N]
                      P, N,
                      BLOCK_P: tl.constexpr,          # partial rows per step
                      BLOCK_N: tl.constexpr):         # columns per program
    # TODO (about 10 lines): each program sums BLOCK_N columns over the P partial rows in the
    # partials' precision, and stores them rounded to dw's dtype. Load a [BLOCK_P, BLOCK_N]
    # tile per step (one partial row per step leaves each load waiting for the previous one),
    # accumulate the tile, and tl.sum it over axis 0 at the end
    pass


def _num_warps(block: int) -> int:
    # ~16 elements per thread: 4096 columns -> 8 warps, 8192 and up -> 16
    return 16 if block >= 8192 else 8 if block >= 2048 else 4


def _math_dtype(x: torch.Tensor) -> torch.dtype:
    return torch.float64 if x.dtype == torch.float64 else torch.float32


def _check(x: torch.Tensor, residual: torch.Tensor, w: torch.Tensor) -> None:
    if x.dtype not in (torch.float32, torch.float16, torch.bfloat16, torch.float64):
        raise TypeError(f"x must be float32, float16, bfloat16 or float64, got {x.dtype}")
    if x.dim() < 1 or x.shape[-1] == 0:
        raise ValueError(f"x must have a last dimension of at least 1 (the rows), got shape "
                         f"{tuple(x.shape)}")
    if residual.shape != x.shape:
        raise ValueError(f"residual must have x's shape {tuple(x.shape)}, got "
                         f"{tuple(residual.shape)}")
    if residual.dtype != x.dtype:
        raise TypeError(f"residual must have x's dtype {x.dtype}, got {residual.dtype}")
    if residual.device != x.device:
        raise ValueError(f"residual must be on x's device {x.device}, got {residual.device}")
    if w.dim() != 1 or w.shape[0] != x.shape[-1]:
        raise ValueError(f"w must have shape [{x.shape[-1]}] (x's last dimension), got "
                         f"{tuple(w.shape)}")
    if w.dtype != x.dtype:
        raise TypeError(f"w must have x's dtype {x.dtype}, got {w.dtype}")
    if w.device != x.device:
        raise ValueError(f"w must be on x's device {x.device}, got {w.device}")


# TODO: @triton_op("ex08_triton::add_rmsnorm_fwd", mutates_args=())
def add_rmsnorm_fwd(x: torch.Tensor, residual: torch.Tensor, w: torch.Tensor,
                    eps: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    # TODO (about 12 lines): check, make the inputs contiguous, allocate y, h and rstd (in
    # _math_dtype), launch one program per row through wrap_triton; return (y, h, rstd)
    raise NotImplementedError("add_rmsnorm_fwd: not implemented yet (see triton/add_rmsnorm.py)")


# TODO: @triton_op("ex08_triton::add_rmsnorm_inplace", mutates_args=...): say which argument
# this op writes. The dispatcher, torch.compile's functionalization and opcheck believe you.
def add_rmsnorm_inplace(x: torch.Tensor, residual: torch.Tensor, w: torch.Tensor,
                        eps: float) -> torch.Tensor:
    # TODO (about 8 lines): the same kernel, with residual as its h output; return y. Careful:
    # h must land in residual itself, never in a copy of it
    raise NotImplementedError("add_rmsnorm_inplace: not implemented yet "
                              "(see triton/add_rmsnorm.py)")


# TODO: @triton_op("ex08_triton::add_rmsnorm_bwd", mutates_args=())
def add_rmsnorm_bwd(dy: torch.Tensor, dh: Optional[torch.Tensor], h: torch.Tensor,
                    w: torch.Tensor, rstd: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    # TODO (about 18 lines): contiguous gradients; dx; the persistent launch with fp32 dw
    # partials (CPU_PROGRAMS on the interpreter); the dw reduction kernel; return (dx, dw)
    raise NotImplementedError("add_rmsnorm_bwd: not implemented yet (see triton/add_rmsnorm.py)")


# TODO (about 15 lines): the autograd formula of add_rmsnorm_fwd.
#   setup_context: save what the backward reads (h, not x and residual); see the README on
#     ctx.set_materialize_grads(False)
#   backward(ctx, dy, dh, drstd): one gradient for each of x, residual, w, eps
#   add_rmsnorm_fwd.register_autograd(backward, setup_context=setup_context)


def add_rmsnorm(x: torch.Tensor, residual: torch.Tensor, w: torch.Tensor,
                eps: float = 1e-6) -> tuple[torch.Tensor, torch.Tensor]:
    # TODO: call add_rmsnorm_fwd(x, residual, w, float(eps)); return (y, h)
    raise NotImplementedError("add_rmsnorm: not implemented yet (see triton/add_rmsnorm.py)")


def add_rmsnorm_(x: torch.Tensor, residual: torch.Tensor, w: torch.Tensor,
                 eps: float = 1e-6) -> torch.Tensor:
    # TODO: call add_rmsnorm_inplace(x, residual, w, float(eps)); return y
    raise NotImplementedError("add_rmsnorm_: not implemented yet (see triton/add_rmsnorm.py)")
