"""A learner's submission in the style of Liger-Kernel's RMSNorm (written from its documented
algorithm for the review's tests, not copied): one program per row computes rstd in fp32 and
caches it for the backward; the backward runs one program per SM over a block of rows and
writes a partial dw row each, summed afterwards. Only the glue exercise 06 needs is added.

The review must find nothing here: these are the imports and calls honest kernels make.
"""
import functools
import math
import operator

import torch
import triton
import triton.language as tl

try:  # where libdevice lives depends on the Triton version
    from triton.language.extra.libdevice import rsqrt
except ModuleNotFoundError:
    from triton.language.extra.cuda.libdevice import rsqrt

MAX_FUSED_SIZE = 65536
_TRITON_DTYPE = {torch.float32: tl.float32, torch.float16: tl.float16,
                 torch.bfloat16: tl.bfloat16, torch.float64: tl.float64}


def calculate_settings(n):
    block = triton.next_power_of_2(n)
    if block > MAX_FUSED_SIZE:
        raise RuntimeError(f"rows of {n} columns are longer than {MAX_FUSED_SIZE}")
    warps = 32 if block >= 32768 else 16 if block >= 8192 else 8 if block >= 2048 else 4
    return block, warps


def ensure_contiguous(fn):
    @functools.wraps(fn)
    def wrapper(ctx, *args, **kwargs):
        args = [a.contiguous() if isinstance(a, torch.Tensor) else a for a in args]
        return fn(ctx, *args, **kwargs)
    return wrapper


@triton.jit
def _rmsnorm_forward(Y, y_stride, X, x_stride, W, RSTD, n_cols, eps, BLOCK_SIZE: tl.constexpr,
                     LIBDEVICE: tl.constexpr):  # False on the CPU interpreter (no libdevice)
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < n_cols
    x = tl.load(X + row * x_stride + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(W + cols, mask=mask, other=0.0).to(tl.float32)
    ms = tl.sum(x * x, axis=0) / n_cols + eps
    if LIBDEVICE:
        rstd = rsqrt(ms)
    else:
        rstd = 1.0 / tl.sqrt(ms)
    tl.store(RSTD + row, rstd)
    tl.store(Y + row * y_stride + cols, (x * rstd * w).to(Y.dtype.element_ty), mask=mask)


@triton.jit
def _rmsnorm_backward(DY, dy_stride, DX, dx_stride, X, x_stride, W, RSTD, DW, dw_stride,
                      n_rows, n_cols, rows_per_program, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(0)
    start = pid * rows_per_program
    end = min(start + rows_per_program, n_rows)
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < n_cols
    w = tl.load(W + cols, mask=mask, other=0.0).to(tl.float32)
    dw = tl.zeros((BLOCK_SIZE,), dtype=tl.float32)
    for row in range(start, end):
        x = tl.load(X + row * x_stride + cols, mask=mask, other=0.0).to(tl.float32)
        dy = tl.load(DY + row * dy_stride + cols, mask=mask, other=0.0).to(tl.float32)
        rstd = tl.load(RSTD + row)
        xhat = x * rstd
        m = dy * w
        dx = rstd * (m - xhat * (tl.sum(m * xhat, axis=0) / n_cols))
        tl.store(DX + row * dx_stride + cols, dx.to(DX.dtype.element_ty), mask=mask)
        dw += dy * xhat
    tl.store(DW + pid * dw_stride + cols, dw, mask=mask)


def _programs(x):
    if x.is_cuda:
        return torch.cuda.get_device_properties(x.device).multi_processor_count
    return 4


class RMSNormFunction(torch.autograd.Function):
    @staticmethod
    @ensure_contiguous
    def forward(ctx, x, w, eps):
        shape = x.shape
        x2 = x.view(-1, shape[-1])
        n_rows, n_cols = x2.shape
        block, warps = calculate_settings(n_cols)
        y = torch.empty_like(x2)
        math_dtype = torch.float64 if x.dtype == torch.float64 else torch.float32
        rstd = torch.empty(n_rows, dtype=math_dtype, device=x.device)
        if n_rows:
            _rmsnorm_forward[(n_rows,)](y, y.stride(0), x2, x2.stride(0), w, rstd, n_cols, eps,
                                        BLOCK_SIZE=block, LIBDEVICE=x.is_cuda, num_warps=warps)
        ctx.block, ctx.warps = block, warps
        ctx.save_for_backward(x2, w, rstd)
        return y.view(*shape)

    @staticmethod
    @ensure_contiguous
    def backward(ctx, dy):
        x2, w, rstd = ctx.saved_tensors
        shape = dy.shape
        dy2 = dy.view(-1, shape[-1])
        n_rows, n_cols = dy2.shape
        programs = max(1, min(_programs(x2), n_rows))
        rows_per_program = math.ceil(n_rows / programs)
        dx = torch.empty_like(dy2)
        partial = torch.zeros((programs, n_cols), dtype=torch.float32, device=w.device)
        if n_rows:
            _rmsnorm_backward[(programs,)](dy2, dy2.stride(0), dx, dx.stride(0), x2, x2.stride(0),
                                           w, rstd, partial, partial.stride(0), n_rows, n_cols,
                                           rows_per_program, BLOCK_SIZE=ctx.block,
                                           num_warps=ctx.warps)
        dw = partial.sum(dim=0).to(w.dtype)
        return dx.view(*shape), dw, None


def rmsnorm(x: torch.Tensor, w: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    if operator.ne(x.shape[-1], w.shape[0]):
        raise ValueError(f"w must have shape [{x.shape[-1]}], got {tuple(w.shape)}")
    if x.dtype not in _TRITON_DTYPE:
        raise TypeError(f"unsupported dtype {x.dtype}")
    return RMSNormFunction.apply(x, w, float(eps))
