"""Exercise 06 — rmsnorm, Triton track: a fused forward and backward, registered as triton_ops.

    y  = x * rstd * w,  rstd = 1 / sqrt(mean(x^2 over the row) + eps)      fp32 math
    dx = rstd * (w*dy - xhat * mean(xhat * w * dy)),   xhat = x * rstd
    dw = sum over rows of dy * xhat

Read exercises/06_rmsnorm/README.md first; grade with `make exercise-06`. Without a GPU the
kernels run on CPU tensors through Triton's interpreter; the opcheck and torch.compile checks
then report "needs a GPU".

Given: the argument checks, the block-size constants, the kernels' signatures. Yours: the two
kernels, the two launchers registered as ops with torch.library.triton_op, and the autograd
formula (register_autograd). The checks call rmsnorm(x, w, eps) and the ops
torch.ops.ex06_triton.rmsnorm_fwd / rmsnorm_bwd: keep those names.
"""
import torch
import triton
import triton.language as tl
from torch.library import triton_op, wrap_triton  # noqa: F401  (you will use both)

# A row up to this long is held in registers by one program; longer rows loop over column
# blocks of LOOP_BLOCK (and read x twice). Rows of 65536 and more must work.
MAX_FWD_BLOCK = 16384
MAX_BWD_BLOCK = 8192
LOOP_BLOCK = 4096
PROGRAMS_PER_SM = 4    # backward programs per SM (persistent: each loops over several rows)
CPU_PROGRAMS = 4       # on the interpreter


@triton.jit
def _rmsnorm_fwd_kernel(x_ptr, w_ptr, y_ptr, rstd_ptr,   # x, y: [M, N]; w: [N]; rstd: [M]
                        N, eps,
                        BLOCK_N: tl.constexpr,           # columns per step (a power of two)
                        ONE_BLOCK: tl.constexpr,         # N <= BLOCK_N: the row stays in registers
                        F64: tl.constexpr):              # x is float64
    # the math type: float32 for fp32/fp16/bf16 (convert every load before any arithmetic:
    # Triton's CPU interpreter gets bf16 arithmetic wrong), float64 for float64 (gradcheck)
    acc_ty = tl.float64 if F64 else tl.float32
    # One program per row. TODO (about 20 lines):
    #   1. row = tl.program_id(0).to(tl.int64): row * N passes 2^31 on big inputs
    #   2. ONE_BLOCK: load the row once (mask cols < N, other=0.0) and .to(acc_ty);
    #      rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / N + eps); load w; store x * rstd * w
    #      cast to y_ptr.dtype.element_ty
    #   3. otherwise: a loop over column blocks summing x * x into a [BLOCK_N] accumulator
    #      (tl.zeros([BLOCK_N], dtype=acc_ty)), then a second loop
    #      that normalizes and stores
    #   4. store rstd for this row (the backward needs it)
    pass


@triton.jit
def _rmsnorm_bwd_kernel(dy_ptr, x_ptr, w_ptr, rstd_ptr,  # dy, x: [M, N]; w: [N]; rstd: [M]
                        dx_ptr, dw_part_ptr,             # dx: [M, N]; dw partials: [programs, N]
                        M, N,
                        BLOCK_N: tl.constexpr, ONE_BLOCK: tl.constexpr, F64: tl.constexpr):
    acc_ty = tl.float64 if F64 else tl.float32
    # Persistent: program p takes rows p, p + P, p + 2P, ... (P = tl.num_programs(0)):
    # `for row in range(pid.to(tl.int64), M, nprog)`. TODO (about 30 lines):
    #   1. ONE_BLOCK: load w once; keep a dw accumulator [BLOCK_N] in acc_ty; per row load x, dy,
    #      rstd; c = mean(xhat * w * dy) (a tl.sum over the row / N); store
    #      dx = (w*dy - xhat*c) * rstd; dw += dy * xhat. At the end store dw into this program's
    #      row of dw_part_ptr: only this program writes it (no atomics, same result every run).
    #   2. otherwise: zero this program's partial row first; per row, a first loop over column
    #      blocks for the sum, a second that stores dx and adds dy * xhat into the partial row
    #      (load, add, store: the same program, the same columns, so no race)
    pass


def _num_warps(block: int) -> int:
    # ~16 elements per thread: 4096 columns -> 8 warps, 8192 and up -> 16
    return 16 if block >= 8192 else 8 if block >= 2048 else 4


def _math_dtype(x: torch.Tensor) -> torch.dtype:
    return torch.float64 if x.dtype == torch.float64 else torch.float32


def _check(x: torch.Tensor, w: torch.Tensor) -> None:
    if x.dtype not in (torch.float32, torch.float16, torch.bfloat16, torch.float64):
        raise TypeError(f"x must be float32, float16, bfloat16 or float64, got {x.dtype}")
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


# TODO: make this an op: @triton_op("ex06_triton::rmsnorm_fwd", mutates_args=()). The type
# hints below become its schema; launch the kernel through wrap_triton(kernel)[grid](...) so
# torch.compile sees the kernel (a bare kernel[grid](...) inside an op is opaque to it).
def rmsnorm_fwd(x: torch.Tensor, w: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    # TODO (about 12 lines): _check(x, w); x = x.contiguous(); N = x.shape[-1], M = rows;
    # y = torch.empty_like(x); rstd = torch.empty(x.shape[:-1], dtype=_math_dtype(x), ...);
    # return early when M == 0; pick BLOCK_N (triton.next_power_of_2(N) up to MAX_FWD_BLOCK,
    # else LOOP_BLOCK) and launch one program per row with num_warps=_num_warps(BLOCK_N)
    raise NotImplementedError("rmsnorm_fwd: not implemented yet (see triton/rmsnorm.py)")


# TODO: @triton_op("ex06_triton::rmsnorm_bwd", mutates_args=())
def rmsnorm_bwd(dy: torch.Tensor, x: torch.Tensor, w: torch.Tensor,
                rstd: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    # TODO (about 15 lines): make dy, x, w contiguous (dy often is not); dx = empty_like(x);
    # programs = min(M, SMs * PROGRAMS_PER_SM) on a GPU
    # (torch.cuda.get_device_properties(x.device).multi_processor_count), CPU_PROGRAMS on the
    # interpreter; partials = torch.empty((programs, N), dtype=_math_dtype(x), ...); launch;
    # dw = partials.sum(dim=0).to(w.dtype): the second, small stage of the reduction
    raise NotImplementedError("rmsnorm_bwd: not implemented yet (see triton/rmsnorm.py)")


# TODO (about 10 lines): the autograd formula.
#   def _setup_context(ctx, inputs, output): save x, w and rstd (output[1]) for the backward
#   def _backward(ctx, dy, _drstd): dx, dw from rmsnorm_bwd; return dx, dw, None (eps)
#   rmsnorm_fwd.register_autograd(_backward, setup_context=_setup_context)


def rmsnorm(x: torch.Tensor, w: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    # TODO: y, _rstd = rmsnorm_fwd(x, w, float(eps)); return y
    raise NotImplementedError("rmsnorm: not implemented yet (see the TODOs in triton/rmsnorm.py)")
