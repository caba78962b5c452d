"""Exercise 13 — flash_attention: FlashAttention-2 in Triton, forward and backward.

Write `flash_attention(q, k, v, causal, scale) -> o`, o = softmax(scale · q kᵀ + mask) v, over
q, k, v of shape [B, H, S, D] (D 64 or 128, any S, any strides), differentiable, without ever
holding an S x S matrix in memory. Read exercises/13_flash_attention/README.md first (the
equations, the steps); grade with `make exercise-13`. Without a GPU this file runs on CPU
tensors through Triton's interpreter (TRITON_INTERPRET=1): tiny shapes, blocks of 16.

Given: the configs, the scale split (_split/_join), _mma, the argument checks, the launchers,
the triton_op registration and the eager door. Yours: the kernel bodies marked TODO (the
solution has ~150 lines of kernel code), then set IMPLEMENTED = True.
"""
import math
import struct

import torch
import triton
import triton.language as tl
from torch.library import triton_op, wrap_triton

LOG2E = 1.4426950408889634
IMPLEMENTED = False  # set True once the kernels below are written

# Block sizes, warps and pipeline stages per (head dim, causal), for 16-bit inputs on Hopper
# (sm_90). Chosen by a sweep on an H200 (2026-11-26; benchmarks/flash_attention_sweep.py):
# 9-10 configs per kernel at each benchmark case (README: "Measured"); the non-benchmarked
# pairs take their head dim's. BLOCK_M must be a multiple of BLOCK_N in the forward and dQ
# kernels (the causal diagonal is split in BLOCK_N steps), BLOCK_N of BLOCK_M in dK/dV.
#               fwd: (BM, BN, warps, stages)  dkdv: (BN1, BM1, warps, stages)  dq: (BM2, BN2, ...)
CONFIGS = {
    (64, True): dict(fwd=(128, 64, 8, 3), dkdv=(64, 64, 4, 3), dq=(128, 64, 8, 3)),
    (64, False): dict(fwd=(128, 64, 8, 3), dkdv=(64, 64, 4, 3), dq=(128, 64, 8, 3)),
    (128, True): dict(fwd=(128, 128, 8, 3), dkdv=(64, 64, 4, 2), dq=(128, 64, 8, 3)),
    (128, False): dict(fwd=(128, 128, 8, 3), dkdv=(64, 64, 4, 2), dq=(128, 64, 8, 3)),
}
# float32 and float64 (the reference and gradcheck paths): tl.dot in full precision has no
# tensor cores to feed; small tiles keep the registers in bounds.
WIDE = dict(fwd=(32, 32, 4, 1), dkdv=(32, 32, 4, 1), dq=(32, 32, 4, 1))
# Triton's CPU interpreter: blocks of 16, so the checks' short sequences span several blocks
CPU = dict(fwd=(16, 16, 1, 1), dkdv=(16, 16, 1, 1), dq=(16, 16, 1, 1))


@triton.jit
def _join(hi, lo, acc_ty: tl.constexpr):
    """hi + lo (see _split), cast to the math type. The cast matters: a float argument is fp32
    in a plain launch but fp64 under torch.compile (Inductor's launcher types Python floats so),
    and an fp64 scale would promote m, l and acc to fp64 inside the loops. Added to a zero
    rather than cast alone: on Triton's interpreter a float argument may be a Python float."""
    return (tl.zeros([], acc_ty) + hi + lo).to(acc_ty)


@triton.jit
def _mma(a, b, acc, PREC: tl.constexpr):
    """acc + a @ b, accumulated in acc's type (fp32; fp64 for fp64 inputs)."""
    if acc.dtype == tl.float64:
        return acc + tl.dot(a, b, input_precision=PREC)  # Triton 3.6 takes no fp64 acc argument
    else:
        return tl.dot(a, b, acc, input_precision=PREC)  # in place in the tensor-core accumulator


# --- forward -----------------------------------------------------------------------------------

@triton.jit
def _fwd_inner(acc, l_i, m_i, q, k_base, v_base, stride_ks, stride_kd, stride_vs, stride_vd,
               offs_m, offs_d, lo, hi, S, qk_scale,
               BLOCK_N: tl.constexpr, DIAG: tl.constexpr, BOUNDS: tl.constexpr,
               PREC: tl.constexpr):
    """Key blocks lo, lo + BLOCK_N, ... < hi into (acc, l, m). DIAG: mask keys after the query
    (the causal diagonal); BOUNDS: keys may pass S (masked loads and scores)."""
    # TODO (about 22 lines): for each key block start_n in range(lo, hi, BLOCK_N):
    #   - load kᵀ [HEAD_D, BLOCK_N] and v [BLOCK_N, HEAD_D] through their strides (masked to
    #     keys < S, other=0, when BOUNDS);
    #   - qk = tl.dot(q, kT, input_precision=PREC); where DIAG or BOUNDS, replace the scores of
    #     masked keys (key > query when DIAG, key >= S) by a large finite negative number;
    #   - the online softmax in base 2: m_new = max(m_i, rowmax(qk) * qk_scale),
    #     p = exp2(qk * qk_scale - m_new), alpha = exp2(m_i - m_new),
    #     l_i = l_i * alpha + rowsum(p), acc = acc * alpha, then acc = _mma(p as v's dtype, v, acc);
    #   - m_i = m_new.
    return acc, l_i, m_i


@triton.jit
def _fwd_kernel(Q, K, V, O, LSE,                    # q, k, v: [B, H, S, D] any strides; o: the
                stride_qb, stride_qh, stride_qs, stride_qd,   # same, contiguous; lse2: [B*H, S]
                stride_kb, stride_kh, stride_ks, stride_kd,
                stride_vb, stride_vh, stride_vs, stride_vd,
                H, S, scale_hi, scale_lo,           # scale·log2(e) as two fp32 (fp64 exactness)
                HEAD_D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                CAUSAL: tl.constexpr, F64: tl.constexpr, PREC: tl.constexpr):
    acc_ty = tl.float64 if F64 else tl.float32
    # TODO (about 35 lines):
    #   - which (batch, head) and which query block this program owns (program ids 0 and 1;
    #     causal: longest query blocks first); qk_scale = _join(scale_hi, scale_lo, acc_ty);
    #   - load this block of q once (rows < S); m_i = -inf, l_i = 0, acc = 0 [BLOCK_M, HEAD_D];
    #   - causal: _fwd_inner over the key blocks below the diagonal, unmasked, then over the
    #     diagonal block with DIAG and BOUNDS; not causal: the whole blocks, then the tail (BOUNDS);
    #   - store o = acc / l_i into O (contiguous [B, H, S, D]) and lse2 = m_i + log2(l_i) into
    #     LSE ([B*H, S]), rows < S only.
    pass


# --- backward ----------------------------------------------------------------------------------

@triton.jit
def _bwd_delta_kernel(O, DO, DELTA,                 # o: contiguous [B, H, S, D]; delta: [B*H, S]
                      stride_db, stride_dh, stride_ds, stride_dd,
                      H, S, HEAD_D: tl.constexpr, BLOCK_M: tl.constexpr, F64: tl.constexpr):
    acc_ty = tl.float64 if F64 else tl.float32
    # TODO (about 10 lines): delta = rowsum(o * do) in acc_ty for BLOCK_M rows (do through its
    #   strides: it may be an expanded view), stored into DELTA [B*H, S].
    pass


@triton.jit
def _dkdv_inner(dk, dv, k, v, q_base, do_base, lse_base, delta_base,
                stride_qs, stride_qd, stride_ds, stride_dd,
                offs_n, offs_d, lo, hi, S, qk_scale,
                BLOCK_M: tl.constexpr, DIAG: tl.constexpr, BOUNDS: tl.constexpr,
                PREC: tl.constexpr):
    """Query blocks lo, lo + BLOCK_M, ... < hi into this key block's (dk, dv), transposed
    (key rows first): Pᵀ = exp2(qk_scale · k qᵀ - lse2)."""
    # TODO (about 25 lines): for each query block: load qᵀ [HEAD_D, BLOCK_M], do [BLOCK_M, HEAD_D],
    #   lse2 and delta (when BOUNDS: masked to rows < S; which lse2 makes P = 0 there?);
    #   pT = exp2(qk_scale * k qᵀ - lse2) (zero where the query is before the key, when DIAG);
    #   dv += pT @ do; dpT = v doᵀ; dsT = pT * (dpT - delta); dk += dsT @ q (with _mma).
    return dk, dv


@triton.jit
def _bwd_dkdv_kernel(Q, K, V, DO, LSE, DELTA, DK, DV,
                     stride_qb, stride_qh, stride_qs, stride_qd,
                     stride_kb, stride_kh, stride_ks, stride_kd,
                     stride_vb, stride_vh, stride_vs, stride_vd,
                     stride_db, stride_dh, stride_ds, stride_dd,
                     H, S, scale_hi, scale_lo, qk_scale_hi, qk_scale_lo,
                     HEAD_D: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_M: tl.constexpr,
                     CAUSAL: tl.constexpr, F64: tl.constexpr, PREC: tl.constexpr):
    acc_ty = tl.float64 if F64 else tl.float32
    # TODO (about 35 lines): this program owns key block start_n of one (batch, head): load k
    #   and v once, zero dk and dv [BLOCK_N, HEAD_D] in acc_ty, run _dkdv_inner over the query
    #   blocks that see these keys (causal: from the diagonal on, the diagonal masked), whole
    #   blocks unmasked, the tail with BOUNDS; store dk * scale and dv (contiguous, keys < S).
    pass


@triton.jit
def _dq_inner(dq, q, do, lse, delta, k_base, v_base, stride_ks, stride_kd, stride_vs, stride_vd,
              offs_m, offs_d, lo, hi, S, qk_scale,
              BLOCK_N: tl.constexpr, DIAG: tl.constexpr, BOUNDS: tl.constexpr,
              PREC: tl.constexpr):
    """Key blocks lo, lo + BLOCK_N, ... < hi into this query block's dq (unscaled)."""
    # TODO (about 20 lines): for each key block: load kᵀ and vᵀ [HEAD_D, BLOCK_N];
    #   p = exp2(qk_scale * q kᵀ - lse2[:, None]) (zero where masked, when DIAG or BOUNDS);
    #   dp = do vᵀ; ds = p * (dp - delta[:, None]); dq += ds @ k (with _mma).
    return dq


@triton.jit
def _bwd_dq_kernel(Q, K, V, DO, LSE, DELTA, DQ,
                   stride_qb, stride_qh, stride_qs, stride_qd,
                   stride_kb, stride_kh, stride_ks, stride_kd,
                   stride_vb, stride_vh, stride_vs, stride_vd,
                   stride_db, stride_dh, stride_ds, stride_dd,
                   H, S, scale_hi, scale_lo, qk_scale_hi, qk_scale_lo,
                   HEAD_D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                   CAUSAL: tl.constexpr, F64: tl.constexpr, PREC: tl.constexpr):
    acc_ty = tl.float64 if F64 else tl.float32
    # TODO (about 35 lines): this program owns query block start_m: load q, do, lse2, delta once,
    #   zero dq, run _dq_inner over the key blocks these queries see (as the forward does),
    #   store dq * scale (contiguous, rows < S).
    pass


# --- the launchers -------------------------------------------------------------------------------

DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def _check(q, k, v) -> None:
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a tensor, got {type(t).__name__}")
        if t.dim() != 4:
            raise ValueError(f"{name} must be 4-D [B, H, S, D], got shape {tuple(t.shape)}")
        if t.dtype not in DTYPES:
            raise TypeError(f"{name} must be float16, bfloat16, float32 or float64, got {t.dtype}")
    if q.shape[-1] not in (64, 128):
        raise ValueError(f"q's head dim D (its last dimension) must be 64 or 128, got "
                         f"{q.shape[-1]} (shape {tuple(q.shape)})")
    for name, t in (("k", k), ("v", v)):
        if t.shape != q.shape:
            raise ValueError(f"{name} must have q's shape {tuple(q.shape)} [B, H, S, D], got "
                             f"{tuple(t.shape)}")
        if t.dtype != q.dtype:
            raise TypeError(f"{name} must have q's dtype {q.dtype}, got {t.dtype}")
        if t.device != q.device:
            raise ValueError(f"{name} must be on q's device {q.device}, got {t.device}")


def _split(x: float) -> tuple[float, float]:
    """x as hi + lo, two float32 values: Triton passes a float argument as fp32, and the
    float64 path needs the scale to ~48 bits (gradcheck)."""
    f32 = lambda y: struct.unpack("f", struct.pack("f", y))[0]  # no tensor: no ATen op
    hi = f32(x)
    return hi, f32(x - hi)


def _config(q, causal: bool) -> dict:
    if not q.is_cuda:
        return CPU
    if q.dtype in (torch.float32, torch.float64):
        return WIDE
    return CONFIGS[(q.shape[-1], bool(causal))]


def _kind(q) -> dict:
    f64 = q.dtype == torch.float64
    # fp32 must stay fp32: tl.dot's default rounds fp32 operands to tf32 (10 bits)
    prec = "ieee" if q.dtype in (torch.float32, torch.float64) else "tf32"
    return dict(F64=f64, PREC=prec)


def _direct(kernel):
    return kernel  # the eager door: launch the JIT function itself


def _fwd_impl(q, k, v, causal, scale, launch):
    _check(q, k, v)
    B, H, S, D = q.shape
    o = torch.empty((B, H, S, D), dtype=q.dtype, device=q.device)
    lse = torch.empty((B, H, S), dtype=torch.float64 if q.dtype == torch.float64 else
                      torch.float32, device=q.device)
    if o.numel() == 0:
        return o, lse
    BM, BN, warps, stages = _config(q, causal)["fwd"]
    hi, lo = _split(scale * LOG2E)
    launch(_fwd_kernel)[(B * H, triton.cdiv(S, BM))](
        q, k, v, o, lse, *q.stride(), *k.stride(), *v.stride(), H, S, hi, lo,
        HEAD_D=D, BLOCK_M=BM, BLOCK_N=BN, CAUSAL=bool(causal), **_kind(q),
        num_warps=warps, num_stages=stages)
    return o, lse


def _bwd_impl(do, q, k, v, o, lse, causal, scale, launch):
    _check(q, k, v)
    if do.shape != q.shape:
        raise ValueError(f"grad of o must have o's shape {tuple(q.shape)}, got {tuple(do.shape)}")
    B, H, S, D = q.shape
    dq = torch.empty((B, H, S, D), dtype=q.dtype, device=q.device)
    dk = torch.empty_like(dq)
    dv = torch.empty_like(dq)
    if dq.numel() == 0:
        return dq, dk, dv
    if do.dtype != q.dtype:
        raise TypeError(f"grad of o must have q's dtype {q.dtype}, got {do.dtype}")
    cfg = _config(q, causal)
    kind = _kind(q)
    delta = torch.empty_like(lse)
    launch(_bwd_delta_kernel)[(B * H, triton.cdiv(S, 64))](
        o, do, delta, *do.stride(), H, S, HEAD_D=D, BLOCK_M=64, F64=kind["F64"], num_warps=4)
    s_hi, s_lo = _split(scale)
    qs_hi, qs_lo = _split(scale * LOG2E)
    strides = (*q.stride(), *k.stride(), *v.stride(), *do.stride())
    BN1, BM1, warps, stages = cfg["dkdv"]
    launch(_bwd_dkdv_kernel)[(B * H, triton.cdiv(S, BN1))](
        q, k, v, do, lse, delta, dk, dv, *strides, H, S, s_hi, s_lo, qs_hi, qs_lo,
        HEAD_D=D, BLOCK_N=BN1, BLOCK_M=BM1, CAUSAL=bool(causal), **kind,
        num_warps=warps, num_stages=stages)
    BM2, BN2, warps, stages = cfg["dq"]
    launch(_bwd_dq_kernel)[(B * H, triton.cdiv(S, BM2))](
        q, k, v, do, lse, delta, dq, *strides, H, S, s_hi, s_lo, qs_hi, qs_lo,
        HEAD_D=D, BLOCK_M=BM2, BLOCK_N=BN2, CAUSAL=bool(causal), **kind,
        num_warps=warps, num_stages=stages)
    return dq, dk, dv


# The registered ops (torch.compile's door; opcheck tests them).
@triton_op("ex13_triton::flash_attention_fwd", mutates_args=())
def flash_attention_fwd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool,
                        scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    return _fwd_impl(q, k, v, causal, scale, wrap_triton)


@triton_op("ex13_triton::flash_attention_bwd", mutates_args=())
def flash_attention_bwd(do: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                        o: torch.Tensor, lse: torch.Tensor, causal: bool,
                        scale: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return _bwd_impl(do, q, k, v, o, lse, causal, scale, wrap_triton)


def _setup_context(ctx, inputs, output):
    q, k, v, causal, scale = inputs
    o, lse = output
    ctx.save_for_backward(q, k, v, o, lse)  # o and 4 bytes per row: no S x S
    ctx.causal, ctx.scale = causal, scale


def _backward(ctx, do, _dlse):
    q, k, v, o, lse = ctx.saved_tensors
    dq, dk, dv = flash_attention_bwd(do, q, k, v, o, lse, ctx.causal, ctx.scale)
    return dq, dk, dv, None, None


flash_attention_fwd.register_autograd(_backward, setup_context=_setup_context)


class _FlashAttentionEager(torch.autograd.Function):
    """Eager mode's door: the same kernels without the custom-op dispatch (exercise 06)."""

    @staticmethod
    def forward(ctx, q, k, v, causal, scale):
        o, lse = _fwd_impl(q, k, v, causal, scale, _direct)
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.causal, ctx.scale = causal, scale
        return o

    @staticmethod
    def backward(ctx, do):
        q, k, v, o, lse = ctx.saved_tensors
        dq, dk, dv = _bwd_impl(do, q, k, v, o, lse, ctx.causal, ctx.scale, _direct)
        return dq, dk, dv, None, None


def _scale(q, scale) -> float:
    if scale is None:
        return 1.0 / math.sqrt(q.shape[-1]) if isinstance(q, torch.Tensor) and q.dim() else 1.0
    scale = float(scale)
    if not (math.isfinite(scale) and scale > 0):
        raise ValueError(f"scale must be a finite number > 0, got {scale}")
    return scale


def flash_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                    scale: float | None = None) -> torch.Tensor:
    """softmax(scale · q kᵀ (+ causal mask)) v over q, k, v of shape [B, H, S, D]."""
    _check(q, k, v)
    if not IMPLEMENTED:
        raise NotImplementedError("flash_attention: not implemented yet (write the kernels, then "
                                  "set IMPLEMENTED = True)")
    scale = _scale(q, scale)
    if torch.compiler.is_compiling():
        o, _lse = flash_attention_fwd(q, k, v, bool(causal), scale)  # no graph break
        return o
    return _FlashAttentionEager.apply(q, k, v, bool(causal), scale)
