"""Exercise 10 — layernorm_dropout, Triton track: LayerNorm and dropout in one pass, the dropout
mask drawn from a counter-based generator and regenerated (never stored) in the backward.

    z  = (x - mean) * rstd * w + b          biased variance, fp32 math (fp64 for fp64)
    y  = z * keep / (1 - p)                 keep = (u >= p), u = tl.rand(seed, counter)
    g  = dy * keep / (1 - p)                the same keep, drawn again from the same counters
    dx = rstd * (w*g - mean(w*g) - xhat * mean(xhat * w*g)),   xhat = (x - mean) * rstd
    dw = sum over rows of g * xhat,   db = sum over rows of g

Read exercises/10_layernorm_dropout/README.md first; grade with `make exercise-10`. Without a
GPU the kernels run on CPU tensors through Triton's interpreter.

Given: the argument checks, the block-size constants and helpers, the kernels' signatures, the
autograd.Function's shape. Yours: the three kernels, the two launchers, and the Function's body.
The checks call layernorm_dropout(x, w, b, p, seed, eps): keep that name and signature.
"""
import struct

import torch
import triton
import triton.language as tl

# A row up to this long is held in registers by one program; longer rows loop over column
# blocks of LOOP_BLOCK (and read x more than once). Rows of 131072 and more must work.
MAX_FWD_BLOCK = 16384
MAX_BWD_BLOCK = 8192
LOOP_BLOCK = 4096
PROGRAMS_PER_SM = 4     # backward programs per SM (persistent: each loops over several rows)
CPU_PROGRAMS = 4        # on the interpreter


@triton.jit
def _keep(seed, row, start, N, p, BLOCK: tl.constexpr):
    """keep (True) or drop for columns start .. start+BLOCK-1 of `row`.

    TODO (1-2 lines): draw u = tl.rand(seed, counter) for each column and return u >= p. The
    counter must depend on (row, column) only, never on the program id or the block size, so
    that the forward and the backward (and any launch) draw the same numbers: row * N + column.
    """
    pass


@triton.jit
def _fwd_kernel(x_ptr, w_ptr, b_ptr, y_ptr,      # x, y: [M, N]; w, b: [N]
                mean_ptr, rstd_ptr,              # [M] in the math dtype, for the backward
                N, eps, p, seed,
                scale_hi, scale_lo,              # 1/(1-p) = hi + lo (see _scale)
                BLOCK: tl.constexpr,             # columns per step (a power of two)
                ONE_BLOCK: tl.constexpr,         # N <= BLOCK: the row stays in registers
                F64: tl.constexpr):              # x is float64
    # the math type: float32 for fp32/fp16/bf16 (convert every load before any arithmetic:
    # 16-bit arithmetic would round every step), float64 for float64 (gradcheck)
    acc_ty = tl.float64 if F64 else tl.float32
    scale = tl.cast(scale_hi, acc_ty) + tl.cast(scale_lo, acc_ty)
    # One program per row. TODO (about 25 lines):
    #   1. row = tl.program_id(0).to(tl.int64): row * N passes 2^31 on big inputs
    #   2. ONE_BLOCK: load the row once; mean, then the variance of (x - mean) (masked columns
    #      must not count); z = (x - mean) * rstd * w + b; y = z * scale where kept, 0 where
    #      dropped (tl.where with _keep(...)); store y cast to y_ptr.dtype.element_ty
    #   3. otherwise: loops over column blocks: the mean, then the variance, then y
    #   4. store mean and rstd for this row (the backward needs them)
    pass


@triton.jit
def _bwd_kernel(dy_ptr, x_ptr, w_ptr, mean_ptr, rstd_ptr,   # dy, x: [M, N]; w: [N]; [M] stats
                dx_ptr, part_ptr,                          # dx: [M, N]; partials [2, P, N]
                M, N, p, seed, scale_hi, scale_lo,
                BLOCK: tl.constexpr, ONE_BLOCK: tl.constexpr, F64: tl.constexpr):
    acc_ty = tl.float64 if F64 else tl.float32
    scale = tl.cast(scale_hi, acc_ty) + tl.cast(scale_lo, acc_ty)
    # Persistent: program p takes rows p, p + P, p + 2P, ... (P = tl.num_programs(0)):
    # `for row in range(pid.to(tl.int64), M, nprog)`. TODO (about 30 lines):
    #   1. per row: xhat; the same keep as the forward (_keep, not a stored mask);
    #      g = dy * scale where kept, else 0; then dx from the formula at the top
    #   2. accumulate g * xhat and g over this program's rows in acc_ty registers; store them
    #      once as row pid of part_ptr[0] (dw) and part_ptr[1] (db)
    #   3. rows longer than a block: two passes per row (the two sums, then dx), with the
    #      partial rows in memory as the accumulators
    pass


@triton.jit
def _sum_partials_kernel(part_ptr, dw_ptr, db_ptr,   # partials [2, P, N] -> dw, db: [N]
                         P, N, BLOCK: tl.constexpr):
    # TODO (about 10 lines): program (i, which) sums the P partial rows of columns
    # i*BLOCK .. i*BLOCK+BLOCK-1 of part_ptr[which] in order, and stores the sum in w's dtype
    # into dw (which = 0) or db (which = 1)
    pass


# --- launchers -----------------------------------------------------------------------------

def _num_warps(block: int) -> int:
    # ~16 elements per thread: 4096 columns -> 8 warps, 8192 and up -> 16
    return 16 if block >= 8192 else 8 if block >= 2048 else 4


def _block(n: int, max_block: int) -> tuple[int, bool]:
    one_block = n <= max_block
    return (max(16, triton.next_power_of_2(n)) if one_block else LOOP_BLOCK), one_block


def _scale(p: float) -> tuple[float, float]:
    """1/(1-p) as a float32 plus the float32 remainder: a float64 kernel adds them back and
    gets 1/(1-p) to ~1e-15 (Triton passes Python floats to kernels as float32). p = 1 -> 0."""
    s = 0.0 if p >= 1.0 else 1.0 / (1.0 - p)
    hi = struct.unpack("f", struct.pack("f", s))[0]    # s rounded to float32
    return hi, s - hi


def _check(x, w, b, p, seed):
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a tensor, got {type(x).__name__}")
    if x.dtype not in (torch.float32, torch.float16, torch.bfloat16, torch.float64):
        raise TypeError(f"x must be float32, float16, bfloat16 or float64, got {x.dtype}")
    if x.dim() < 1 or x.shape[-1] == 0:
        raise ValueError(f"x must have a last dimension of at least 1 (the rows), got shape "
                         f"{tuple(x.shape)}")
    for name, t in (("w", w), ("b", b)):
        if not isinstance(t, torch.Tensor) or t.dim() != 1 or t.shape[0] != x.shape[-1]:
            got = tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__
            raise ValueError(f"{name} must have shape [{x.shape[-1]}] (x's last dimension), "
                             f"got {got}")
        if t.dtype != x.dtype:
            raise TypeError(f"{name} must have x's dtype {x.dtype}, got {t.dtype}")
        if t.device != x.device:
            raise ValueError(f"{name} must be on x's device {x.device}, got {t.device}")
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 <= p <= 1.0:
        raise ValueError(f"p (the drop probability) must be a number in [0, 1], got {p!r}")
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**63:
        raise ValueError(f"seed must be an int in [0, 2^63), got {seed!r}")


def _math_dtype(x):
    return torch.float64 if x.dtype == torch.float64 else torch.float32


def _forward(x, w, b, p, seed, eps):
    """-> (x made contiguous, y, mean, rstd)."""
    # TODO (about 12 lines): x.contiguous(); y = torch.empty_like(x); mean and rstd [M] in
    # _math_dtype(x); block, one_block = _block(N, MAX_FWD_BLOCK); launch _fwd_kernel on (M,)
    # programs with num_warps=_num_warps(block). M = 0 launches nothing.
    raise NotImplementedError("layernorm_dropout's forward is not implemented yet")


def _backward(dy, x, w, mean, rstd, p, seed):
    """-> (dx, dw, db)."""
    # TODO (about 15 lines): dy.contiguous(); programs = min(M, SMs * PROGRAMS_PER_SM) on a GPU
    # (torch.cuda.get_device_properties(x.device).multi_processor_count), min(M, CPU_PROGRAMS)
    # on the CPU; partials [2, programs, N] in the math dtype; launch _bwd_kernel, then
    # _sum_partials_kernel on (cdiv(N, 256), 2) programs.
    raise NotImplementedError("layernorm_dropout's backward is not implemented yet")


class _LayerNormDropout(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w, b, p, seed, eps):
        # TODO (about 4 lines): run _forward; save what the backward needs (not the mask: the
        # seed and p are plain numbers, keep them on ctx); return y
        raise NotImplementedError("layernorm_dropout is not implemented yet")

    @staticmethod
    def backward(ctx, dy):
        # TODO (about 4 lines): run _backward; return one gradient per forward input (None for
        # p, seed and eps, and where ctx.needs_input_grad says none is wanted)
        raise NotImplementedError("layernorm_dropout's backward is not implemented yet")


def layernorm_dropout(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, p: float, seed: int,
                      eps: float = 1e-5) -> torch.Tensor:
    """dropout(layer_norm(x, w, b, eps), p) with the mask drawn from (seed, element index)."""
    _check(x, w, b, p, seed)
    return _LayerNormDropout.apply(x, w, b, float(p), int(seed), float(eps))
