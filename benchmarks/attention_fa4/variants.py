"""exp38: variants of exercise 13's solution forward (FlashAttention-4's two softmax tricks).

Copied from solutions/13_flash_attention/triton/flash_attention.py; only the forward's inner loop
differs, by two constexpr switches (both off: the solution's kernel, the same code):
  POLY (0, 2, 4): 1/POLY of each score tile's exp2 computed by a degree-3 polynomial on the FMA
     pipe instead of MUFU (2^x = 2^round(x) * p(x - round(x)), the integer put into the exponent
     bits by a shift and an integer add); the tile split by columns with tl.reshape / tl.split.
     Only for 16-bit inputs (P is rounded to bf16/fp16 before the PV matmul); fp32/fp64 inputs
     keep the exact exp2.
  LAZY: FlashAttention-4's conditional rescaling: the running max m_i kept unless some row's
     block max exceeds it by more than TAU = 8 (log2 units; p <= 2^8), then acc and l rescaled
     (a block-uniform branch). The final o = acc / l and lse2 = m + log2(l) stay exact.
Pick per call: flash_attention(q, k, v, causal, scale, poly=..., lazy=...) or attention(..., name)
with a VARIANTS key. The original docstring follows.

Exercise 13 — flash_attention, Triton track, solved: FlashAttention-2, forward and backward.

    o = softmax(scale * q kᵀ + mask) v        q, k, v, o: [B, H, S, D], D in {64, 128}

Forward: one program per (query block, batch*head) keeps its query rows in registers and streams
key/value blocks past them with the online softmax of exercise 05 (a running max m, sum l and
output acc per row, rescaled by exp(m_old - m_new) when the max grows), in base 2 with
scale·log2(e) folded into one multiply-add. Causal: the blocks above the diagonal are never
visited, only the diagonal ones masked. Kept for the backward: o and lse2 = m + log2(l).

Backward, P = exp2(scale·log2e · q kᵀ - lse2) recomputed, dS = P * (dO Vᵀ - delta):
  delta = rowsum(dO * O)                                a small kernel
  dV_j = Σ_i P_ijᵀ dO_i, dK_j = scale Σ_i dS_ijᵀ Q_i    one program per key block j
  dQ_i = scale Σ_j dS_ij K_j                            a second kernel, per query block i
Each output block has one owner: no atomics, the same gradients bit for bit on every run, for
P and dP computed twice, 7 matmuls per block pair instead of 5 (README: "The backward, and
determinism: two kernels or atomics"). The leaderboard case (B 1, H 16, S 16384, D 64, causal)
is 0.55 TFLOP forward, 2.5x that backward, and 8 x 33.5 MB of tensors: matmuls and
exponentials, not bytes (README: "The work: flops and bytes", "Where the time goes").

At scale on Hopper (the "Hopper path" section, switched on per kernel by CONFIGS), the same
kernels run in another program order and stream their tiles through TMA descriptors: at B·H =
128 heads the first order re-reads K and V from memory for every program (the forward's DRAM
throughput 78% of peak under ncu), the second reads them about once (6%). At the leaderboard case
(16 heads, whose K and V fit the L2) neither helped, and the first kernels stay.

Two doors to the same kernels, as in exercise 06: under torch.compile the registered triton_ops
(no graph break: Inductor sees the launches through wrap_triton); in eager mode a plain
autograd.Function, without the custom-op dispatch's host cost.
"""
import math
import struct
from collections import namedtuple

import torch
import triton
import triton.language as tl
from torch.library import triton_op, wrap_triton

LOG2E = 1.4426950408889634

# One kernel's launch. Each program owns `own` rows (queries in the forward and dQ: BLOCK_M; keys
# in dK/dV: BLOCK_N) and streams the other side past them `step` rows at a time (`own` a multiple
# of `step`: the causal diagonal is walked in steps); `warps`, and `stages` of software
# pipelining (tiles loaded ahead while one is computed on). hopper: the Hopper path (below:
# head-major program order, row tiles); tma: its tiles through TMA descriptors.
Cfg = namedtuple("Cfg", "own step warps stages hopper tma", defaults=(False, False))

# Per kernel and head dim for 16-bit inputs on Hopper (sm_90), chosen by sweeps on an H200 at the
# head dim's benchmark case (D 64: the leaderboard case, causal; D 128: the wide one, not causal;
# 2026-11-26 and 2026-11-28; benchmarks/flash_attention_sweep.py; docs/performance.md). D 128's
# dQ streams through plain loads: measured 4% faster than through TMA there.
CONFIGS = {64: dict(fwd=Cfg(128, 64, 8, 3), dkdv=Cfg(64, 64, 4, 3), dq=Cfg(128, 64, 8, 3)),
           128: dict(fwd=Cfg(128, 128, 8, 3, hopper=True, tma=True),
                     dkdv=Cfg(64, 64, 4, 2, hopper=True, tma=True),
                     dq=Cfg(128, 64, 8, 3, hopper=True))}
# fp32/fp64 (the reference and gradcheck paths): no tensor cores to feed, small tiles
WIDE = dict(fwd=Cfg(32, 32, 4, 1), dkdv=Cfg(32, 32, 4, 1), dq=Cfg(32, 32, 4, 1))
# Triton's CPU interpreter: blocks of 16, so the checks' short sequences span several blocks
CPU = dict(fwd=Cfg(16, 16, 1, 1), dkdv=Cfg(16, 16, 1, 1), dq=Cfg(16, 16, 1, 1))


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


@triton.jit
def _head(X, off_hz, H, stride_b, stride_h):
    """X's slice for (batch, head) = divmod(off_hz, H), in int64 (B H S D may pass 2^31)."""
    return X + (off_hz // H).to(tl.int64) * stride_b + (off_hz % H).to(tl.int64) * stride_h


@triton.jit
def _ptrs(base, rows, offs_d, stride_s, stride_d, T: tl.constexpr):
    """Pointers to rows `rows` of one head: a [rows, D] tile, or its transpose [D, rows] (T)."""
    if T:
        ptrs = base + rows[None, :] * stride_s + offs_d[:, None] * stride_d
    else:
        ptrs = base + rows[:, None] * stride_s + offs_d[None, :] * stride_d
    return ptrs


@triton.jit
def _load(base, rows, offs_d, stride_s, stride_d, S):
    """A [rows, D] tile of one head, rows at or past S read as 0."""
    return tl.load(_ptrs(base, rows, offs_d, stride_s, stride_d, False),
                   mask=(rows < S)[:, None], other=0.0)


@triton.jit
def _keep(offs_m, offs_n, S, CAUSAL: tl.constexpr):
    """The scores of a [query, key] block that count: keys before S, causal: not after the query."""
    keep = offs_n[None, :] < S
    if CAUSAL:
        keep = keep & (offs_m[:, None] >= offs_n[None, :])
    return keep


@triton.jit
def _key_split(start_m, S, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr):
    """A query block's keys: unmasked up to `mid`, masked from `mid` to `end` (causal: the diagonal
    block, the blocks above it never visited; not causal: the partial last block)."""
    if CAUSAL:
        mid, end = start_m * BLOCK_M, (start_m + 1) * BLOCK_M
    else:
        mid, end = (S // BLOCK_N) * BLOCK_N, S
    return mid, end


# --- the Hopper path ---------------------------------------------------------------------------
# The kernels below take it where CONFIGS says `hopper` (HOPPER: the same math, two changes):
#
# 1. Program order. Programs start in the order of their id. The first kernels' grid, (B·H,
#    blocks), starts every head's block 0, then every head's block 1, ...: the programs running
#    at once (132 SMs x 1-2) belong to up to B·H different heads, and each streams its head's
#    whole K and V. At the wide case (B 4, H 32, S 4096, D 128) that is 128 heads x 2 MB of K, V:
#    256 MB, over the 60 MB L2, so nearly every tile comes from memory again: 4096 forward
#    programs x 2 MB = 8 GB, ~2 ms at 4.3 TB/s, the size of the kernel. Head-major order (a 1-D
#    grid, _program) runs one head's blocks one after another: a wave holds one to four heads,
#    their tiles stay in L2. Measured there (ncu): the forward's DRAM throughput 78% -> 6% of
#    peak, dK/dV 49% -> 5%, dQ 69% -> 6%. At the leaderboard case (16 heads: 64 MB, a head's
#    programs in step) the first order already reads little (6%), and it runs the longest
#    causal rows of all heads first; the Hopper path's best kernels there were 3% slower inside
#    a step, so the leaderboard keeps the first kernels.
# 2. TMA descriptors (_src, _rows). Hopper's copy engine fetches a whole [rows, D] tile into
#    shared memory from one descriptor (shape, strides, the tile's size): no per-element address
#    in registers, rows past S zero-filled. Built in the kernel (tl.make_tensor_descriptor), it
#    needs 128 bytes of global scratch per descriptor (triton.set_allocator, _tma) and 16-byte
#    aligned rows, so the eager door takes it for aligned inputs and everything else reads the
#    same row tiles through pointers. The tiles are read as rows and transposed in shared memory
#    (tl.trans) where a matmul wants kᵀ or qᵀ.
# Measured (docs/performance.md, "flash-attention"): at D 128 a quarter off the forward and a
# fifth off forward+backward. Also tried there and left out: Triton's warp specialization of the
# forward loop (compiled on sm_90 with Triton 3.6, no measurable gain), deeper pipelines, other
# tiles.

@triton.jit
def _program(S, BLOCK: tl.constexpr, REVERSE: tl.constexpr):
    """(batch*head, block) of this program in head-major order, from a 1-D grid of
    B*H*cdiv(S, BLOCK) programs; REVERSE (causal): a head's longest rows, its last blocks, first."""
    n_blocks = tl.cdiv(S, BLOCK)
    pid = tl.program_id(0)
    off_hz, blk = pid // n_blocks, pid % n_blocks
    if REVERSE:
        blk = n_blocks - 1 - blk
    return off_hz, blk


@triton.jit
def _src(base, S, stride_s, HEAD_D: tl.constexpr, BLOCK: tl.constexpr, TMA: tl.constexpr):
    """Where a loop streams one head's rows from: its base pointer, or (TMA) a descriptor of
    its [S, HEAD_D] rows read BLOCK at a time."""
    if TMA:
        src = tl.make_tensor_descriptor(base, shape=[S, HEAD_D], strides=[stride_s, 1],
                                        block_shape=[BLOCK, HEAD_D])
    else:
        src = base
    return src


@triton.jit
def _rows(src, start, offs_d, stride_s, stride_d, S, BLOCK: tl.constexpr,
          BOUNDS: tl.constexpr, TMA: tl.constexpr):
    """Rows start ... start + BLOCK of one head, a [BLOCK, D] tile (see _src); BOUNDS: rows at or
    past S read as 0 (a descriptor zero-fills them itself)."""
    if TMA:
        tile = src.load([start, 0])
    else:
        rows = start + tl.arange(0, BLOCK)
        ptrs = src + rows[:, None] * stride_s + offs_d[None, :] * stride_d
        if BOUNDS:
            tile = tl.load(ptrs, mask=(rows < S)[:, None], other=0.0)
        else:
            tile = tl.load(ptrs)
    return tile


# --- forward -----------------------------------------------------------------------------------

# 2^f on [-0.5, 0.5], c0 = 1 exactly (so x <= -127 gives 0.0 exactly), minimax relative error
# 1.0e-4 (exp38/fit.py, an LP fit): under bf16's half ulp (2^-9) and fp16's (2^-11)
EXP2_C1 = tl.constexpr(0.6932829022407532)
EXP2_C2 = tl.constexpr(0.2422109693288803)
EXP2_C3 = tl.constexpr(0.055009059607982635)
ROUND_MAGIC = tl.constexpr(12582912.0)  # 1.5 * 2^23: x + it rounds x to an integer (nearest)
LAZY_TAU = tl.constexpr(8.0)


@triton.jit
def _exp2_poly(x):
    """2^x in fp32 on the FMA and integer pipes, no MUFU: j = round(x) by the magic-number add
    (j sits in the low mantissa bits of r), f = x - j in [-0.5, 0.5], 2^f by a degree-3
    polynomial, 2^j added into the exponent bits (r's bits shifted left by 23: the integer's
    low 9 bits into the exponent field, the magic's bits shifted out). x clamped at -127:
    -inf and anything below -127 give exactly 0 (p(0) = 1.0: bits 0x3F800000 - 127 << 23)."""
    x = tl.maximum(x, -127.0)
    r = x + ROUND_MAGIC
    f = x - (r - ROUND_MAGIC)
    p = ((EXP2_C3 * f + EXP2_C2) * f + EXP2_C1) * f + 1.0
    bits = p.to(tl.int32, bitcast=True) + (r.to(tl.int32, bitcast=True) << 23)
    return bits.to(tl.float32, bitcast=True)


@triton.jit
def _exp2(x, POLY: tl.constexpr):
    """exp2 of a [M, N] fp32 tile; POLY 2 (4): the odd columns (half of them: the odd columns
    of the right half, a quarter of the tile) through _exp2_poly, the rest on MUFU. The splits
    keep each part in the thread that holds it in the MMA accumulator layout (adjacent column
    pairs, then columns N/2 apart), so no data should move between threads."""
    if POLY == 0:
        y = tl.math.exp2(x)
    else:
        M: tl.constexpr = x.shape[0]
        N: tl.constexpr = x.shape[1]
        a, b = tl.split(tl.reshape(x, [M, N // 2, 2]))    # even, odd columns
        if POLY == 2:
            b = _exp2_poly(b)
        else:
            b0, b1 = tl.split(tl.permute(tl.reshape(b, [M, 2, N // 4]), (0, 2, 1)))
            b = tl.reshape(tl.permute(tl.join(tl.math.exp2(b0), _exp2_poly(b1)), (0, 2, 1)),
                           [M, N // 2])
        y = tl.reshape(tl.join(tl.math.exp2(a), b), [M, N])
    return y


@triton.jit
def _fwd_inner(acc, l_i, m_i, q, k_src, v_src, stride_ks, stride_kd, stride_vs, stride_vd,
               offs_m, offs_d, lo, hi, S, qk_scale, BLOCK_N: tl.constexpr,
               CAUSAL: tl.constexpr, MASKED: tl.constexpr, PREC: tl.constexpr,
               HOPPER: tl.constexpr, TMA: tl.constexpr, POLY: tl.constexpr = 0,
               LAZY: tl.constexpr = False):
    """Key blocks lo, lo + BLOCK_N, ... < hi into (acc, l, m); MASKED: scores _keep drops.
    k_src, v_src: the head's base pointers (HOPPER: see _src). POLY, LAZY: see the top."""
    offs_n0 = tl.arange(0, BLOCK_N)
    for start_n in range(lo, hi, BLOCK_N):
        offs_n = start_n + offs_n0
        if HOPPER:  # row tiles, k transposed in shared memory
            kT = tl.trans(_rows(k_src, start_n, offs_d, stride_ks, stride_kd, S, BLOCK_N,
                                MASKED, TMA))
            v = _rows(v_src, start_n, offs_d, stride_vs, stride_vd, S, BLOCK_N, MASKED, TMA)
        else:
            k_ptrs = _ptrs(k_src, offs_n, offs_d, stride_ks, stride_kd, True)    # kᵀ [D, BN]
            v_ptrs = _ptrs(v_src, offs_n, offs_d, stride_vs, stride_vd, False)   # v [BN, D]
            if MASKED:
                kT = tl.load(k_ptrs, mask=offs_n[None, :] < S, other=0.0)
                v = tl.load(v_ptrs, mask=offs_n[:, None] < S, other=0.0)
            else:
                kT = tl.load(k_ptrs)
                v = tl.load(v_ptrs)
        qk = tl.dot(q, kT, input_precision=PREC)             # fp32 (fp64 for fp64 inputs)
        if MASKED:  # finite: a row of only masked keys gives no NaN
            qk = tl.where(_keep(offs_m, offs_n, S, CAUSAL), qk, -1.0e30)
        # base 2, the scale folded into one multiply-add per score
        if LAZY:  # rescale only when some row's max grew by more than LAZY_TAU (block-uniform)
            m_blk = tl.max(qk, 1) * qk_scale
            if tl.max(m_blk - m_i, 0) > LAZY_TAU:   # the first block: m_i = -inf, always
                m_ij = tl.maximum(m_i, m_blk)
                alpha = tl.math.exp2(m_i - m_ij)
                l_i = l_i * alpha
                acc = acc * alpha[:, None]
                m_i = m_ij
            p = _exp2(qk * qk_scale - m_i[:, None], POLY)   # <= 2^LAZY_TAU
            l_i = l_i + tl.sum(p, 1)
            acc = _mma(p.to(v.dtype), v, acc, PREC)
        else:
            m_ij = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
            p = _exp2(qk * qk_scale - m_ij[:, None], POLY)
            alpha = tl.math.exp2(m_i - m_ij)                      # rescales what came before
            l_i = l_i * alpha + tl.sum(p, 1)
            acc = acc * alpha[:, None]
            acc = _mma(p.to(v.dtype), v, acc, PREC)
            m_i = m_ij
    return acc, l_i, m_i


@triton.jit
def _fwd_kernel(Q, K, V, O, LSE,                    # q, k, v: [B, H, S, D] any strides; o: the
                stride_qb, stride_qh, stride_qs, stride_qd,   # same, contiguous; lse2: [B*H, S]
                stride_kb, stride_kh, stride_ks, stride_kd,
                stride_vb, stride_vh, stride_vs, stride_vd,
                H, S, scale_hi, scale_lo,           # scale·log2(e) as two fp32 (fp64 exactness)
                HEAD_D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                CAUSAL: tl.constexpr, F64: tl.constexpr, PREC: tl.constexpr,
                HOPPER: tl.constexpr, TMA: tl.constexpr, POLY: tl.constexpr = 0,
                LAZY: tl.constexpr = False):
    acc_ty = tl.float64 if F64 else tl.float32
    if HOPPER:
        off_hz, start_m = _program(S, BLOCK_M, CAUSAL)
    else:
        off_hz = tl.program_id(0)
        start_m = tl.program_id(1)
        if CAUSAL:  # the longest rows (the last query blocks) first: they run while short ones
            start_m = tl.num_programs(1) - 1 - start_m   # fill in
    qk_scale = _join(scale_hi, scale_lo, acc_ty)
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_D)
    q = _load(_head(Q, off_hz, H, stride_qb, stride_qh), offs_m, offs_d, stride_qs, stride_qd, S)
    k_src = _src(_head(K, off_hz, H, stride_kb, stride_kh), S, stride_ks, HEAD_D, BLOCK_N, TMA)
    v_src = _src(_head(V, off_hz, H, stride_vb, stride_vh), S, stride_vs, HEAD_D, BLOCK_N, TMA)
    m_i = tl.full([BLOCK_M], float("-inf"), acc_ty)
    l_i = tl.zeros([BLOCK_M], acc_ty)
    acc = tl.zeros([BLOCK_M, HEAD_D], acc_ty)
    mid, end = _key_split(start_m, S, BLOCK_M, BLOCK_N, CAUSAL)
    acc, l_i, m_i = _fwd_inner(acc, l_i, m_i, q, k_src, v_src, stride_ks, stride_kd, stride_vs,
                               stride_vd, offs_m, offs_d, 0, mid, S, qk_scale, BLOCK_N, CAUSAL,
                               False, PREC, HOPPER, TMA, POLY, LAZY)
    acc, l_i, m_i = _fwd_inner(acc, l_i, m_i, q, k_src, v_src, stride_ks, stride_kd, stride_vs,
                               stride_vd, offs_m, offs_d, mid, end, S, qk_scale, BLOCK_N, CAUSAL,
                               True, PREC, HOPPER, TMA, POLY, LAZY)
    row_ok = offs_m < S
    o_ptrs = O + off_hz.to(tl.int64) * S * HEAD_D + offs_m[:, None] * HEAD_D + offs_d[None, :]
    tl.store(o_ptrs, (acc / l_i[:, None]).to(O.dtype.element_ty), mask=row_ok[:, None])
    tl.store(LSE + off_hz.to(tl.int64) * S + offs_m, m_i + tl.math.log2(l_i), mask=row_ok)


# --- backward ----------------------------------------------------------------------------------

@triton.jit
def _bwd_delta_kernel(O, DO, DELTA,                 # o: contiguous [B, H, S, D]; delta: [B*H, S]
                      stride_db, stride_dh, stride_ds, stride_dd,
                      H, S, HEAD_D: tl.constexpr, BLOCK_M: tl.constexpr, F64: tl.constexpr):
    acc_ty = tl.float64 if F64 else tl.float32
    off_hz = tl.program_id(0)
    offs_m = tl.program_id(1) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_D)
    o = _load(O + off_hz.to(tl.int64) * S * HEAD_D, offs_m, offs_d, HEAD_D, 1, S)
    do = _load(_head(DO, off_hz, H, stride_db, stride_dh), offs_m, offs_d, stride_ds, stride_dd,
               S)
    delta = tl.sum(o.to(acc_ty) * do.to(acc_ty), 1)
    tl.store(DELTA + off_hz.to(tl.int64) * S + offs_m, delta, mask=offs_m < S)


@triton.jit
def _dkdv_inner(dk, dv, k, v, q_src, do_src, lse_base, delta_base,
                stride_qs, stride_qd, stride_ds, stride_dd, offs_n, offs_d, lo, hi, S, qk_scale,
                BLOCK_M: tl.constexpr, DIAG: tl.constexpr, BOUNDS: tl.constexpr,
                PREC: tl.constexpr, HOPPER: tl.constexpr, TMA: tl.constexpr):
    """Query blocks lo, lo + BLOCK_M, ... < hi into this key block's (dk, dv), transposed
    (key rows first): Pᵀ = exp2(qk_scale · k qᵀ - lse2). DIAG: mask queries before the keys;
    BOUNDS: queries may pass S (lse = inf there: P = 0). q_src, do_src: the head's base
    pointers (HOPPER: see _src)."""
    offs_m0 = tl.arange(0, BLOCK_M)
    for start_m in range(lo, hi, BLOCK_M):
        offs_m = start_m + offs_m0
        if HOPPER:  # row tiles, q transposed in shared memory
            q = _rows(q_src, start_m, offs_d, stride_qs, stride_qd, S, BLOCK_M, BOUNDS, TMA)
            do = _rows(do_src, start_m, offs_d, stride_ds, stride_dd, S, BLOCK_M, BOUNDS, TMA)
            qT = tl.trans(q)
        else:
            q_ptrs = _ptrs(q_src, offs_m, offs_d, stride_qs, stride_qd, True)      # qᵀ [D, BM]
            do_ptrs = _ptrs(do_src, offs_m, offs_d, stride_ds, stride_dd, False)   # dO [BM, D]
            if BOUNDS:
                qT = tl.load(q_ptrs, mask=(offs_m < S)[None, :], other=0.0)
                do = tl.load(do_ptrs, mask=(offs_m < S)[:, None], other=0.0)
            else:
                qT = tl.load(q_ptrs)
                do = tl.load(do_ptrs)
        if BOUNDS:
            ok = offs_m < S
            lse = tl.load(lse_base + offs_m, mask=ok, other=float("inf"))  # -> P = 0 there
            delta = tl.load(delta_base + offs_m, mask=ok, other=0.0)
        else:
            lse = tl.load(lse_base + offs_m)
            delta = tl.load(delta_base + offs_m)
        qkT = tl.dot(k, qT, input_precision=PREC)
        pT = tl.math.exp2(qkT * qk_scale - lse[None, :])
        if DIAG:
            pT = tl.where(offs_m[None, :] >= offs_n[:, None], pT, 0.0)
        dv = _mma(pT.to(do.dtype), do, dv, PREC)
        dpT = tl.dot(v, tl.trans(do), input_precision=PREC)
        dsT = pT * (dpT - delta[None, :])
        if HOPPER:
            dk = _mma(dsT.to(q.dtype), q, dk, PREC)
        else:
            dk = _mma(dsT.to(qT.dtype), tl.trans(qT), dk, PREC)
    return dk, dv


@triton.jit
def _bwd_dkdv_kernel(Q, K, V, DO, LSE, DELTA, DK, DV,
                     stride_qb, stride_qh, stride_qs, stride_qd,
                     stride_kb, stride_kh, stride_ks, stride_kd,
                     stride_vb, stride_vh, stride_vs, stride_vd,
                     stride_db, stride_dh, stride_ds, stride_dd,
                     H, S, scale_hi, scale_lo, qk_scale_hi, qk_scale_lo,
                     HEAD_D: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_M: tl.constexpr,
                     CAUSAL: tl.constexpr, F64: tl.constexpr, PREC: tl.constexpr,
                     HOPPER: tl.constexpr, TMA: tl.constexpr):
    acc_ty = tl.float64 if F64 else tl.float32
    # key block 0 sees every query: heaviest first
    if HOPPER:
        off_hz, blk = _program(S, BLOCK_N, False)
        start_n = blk * BLOCK_N
    else:
        off_hz = tl.program_id(0)
        start_n = tl.program_id(1) * BLOCK_N
    scale = _join(scale_hi, scale_lo, acc_ty)
    qk_scale = _join(qk_scale_hi, qk_scale_lo, acc_ty)
    offs_n = start_n + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_D)
    k = _load(_head(K, off_hz, H, stride_kb, stride_kh), offs_n, offs_d, stride_ks, stride_kd, S)
    v = _load(_head(V, off_hz, H, stride_vb, stride_vh), offs_n, offs_d, stride_vs, stride_vd, S)
    q_src = _src(_head(Q, off_hz, H, stride_qb, stride_qh), S, stride_qs, HEAD_D, BLOCK_M, TMA)
    do_src = _src(_head(DO, off_hz, H, stride_db, stride_dh), S, stride_ds, HEAD_D, BLOCK_M, TMA)
    lse_base = LSE + off_hz.to(tl.int64) * S
    delta_base = DELTA + off_hz.to(tl.int64) * S
    dk = tl.zeros([BLOCK_N, HEAD_D], acc_ty)
    dv = tl.zeros([BLOCK_N, HEAD_D], acc_ty)
    full = (S // BLOCK_M) * BLOCK_M
    if CAUSAL:
        # queries before start_n never see these keys: start at the diagonal, masked
        lo = start_n + BLOCK_N
        dk, dv = _dkdv_inner(dk, dv, k, v, q_src, do_src, lse_base, delta_base, stride_qs,
                             stride_qd, stride_ds, stride_dd, offs_n, offs_d, start_n, lo, S,
                             qk_scale, BLOCK_M, True, True, PREC, HOPPER, TMA)
    else:
        lo = start_n * 0   # a tensor in both branches: tl.maximum below
    dk, dv = _dkdv_inner(dk, dv, k, v, q_src, do_src, lse_base, delta_base, stride_qs,
                         stride_qd, stride_ds, stride_dd, offs_n, offs_d, lo, full, S, qk_scale,
                         BLOCK_M, False, False, PREC, HOPPER, TMA)
    dk, dv = _dkdv_inner(dk, dv, k, v, q_src, do_src, lse_base, delta_base, stride_qs,
                         stride_qd, stride_ds, stride_dd, offs_n, offs_d, tl.maximum(lo, full), S,
                         S, qk_scale, BLOCK_M, False, True, PREC, HOPPER, TMA)
    out = off_hz.to(tl.int64) * S * HEAD_D + offs_n[:, None] * HEAD_D + offs_d[None, :]
    tl.store(DK + out, (dk * scale).to(DK.dtype.element_ty), mask=(offs_n < S)[:, None])
    tl.store(DV + out, dv.to(DV.dtype.element_ty), mask=(offs_n < S)[:, None])


@triton.jit
def _dq_inner(dq, q, do, lse, delta, k_src, v_src, stride_ks, stride_kd, stride_vs, stride_vd,
              offs_m, offs_d, lo, hi, S, qk_scale, BLOCK_N: tl.constexpr,
              CAUSAL: tl.constexpr, MASKED: tl.constexpr, PREC: tl.constexpr,
              HOPPER: tl.constexpr, TMA: tl.constexpr):
    """Key blocks lo, lo + BLOCK_N, ... < hi into this query block's dq (unscaled). k_src,
    v_src: the head's base pointers (HOPPER: see _src)."""
    offs_n0 = tl.arange(0, BLOCK_N)
    for start_n in range(lo, hi, BLOCK_N):
        offs_n = start_n + offs_n0
        if HOPPER:  # row tiles, transposed in shared memory
            k = _rows(k_src, start_n, offs_d, stride_ks, stride_kd, S, BLOCK_N, MASKED, TMA)
            v = _rows(v_src, start_n, offs_d, stride_vs, stride_vd, S, BLOCK_N, MASKED, TMA)
            kT = tl.trans(k)
            vT = tl.trans(v)
        else:
            k_ptrs = _ptrs(k_src, offs_n, offs_d, stride_ks, stride_kd, True)    # kᵀ [D, BN]
            v_ptrs = _ptrs(v_src, offs_n, offs_d, stride_vs, stride_vd, True)    # vᵀ [D, BN]
            if MASKED:
                kT = tl.load(k_ptrs, mask=offs_n[None, :] < S, other=0.0)
                vT = tl.load(v_ptrs, mask=offs_n[None, :] < S, other=0.0)
            else:
                kT = tl.load(k_ptrs)
                vT = tl.load(v_ptrs)
        qk = tl.dot(q, kT, input_precision=PREC)
        p = tl.math.exp2(qk * qk_scale - lse[:, None])
        if MASKED:
            p = tl.where(_keep(offs_m, offs_n, S, CAUSAL), p, 0.0)
        dp = tl.dot(do, vT, input_precision=PREC)
        ds = p * (dp - delta[:, None])
        if HOPPER:
            dq = _mma(ds.to(k.dtype), k, dq, PREC)
        else:
            dq = _mma(ds.to(kT.dtype), tl.trans(kT), dq, PREC)
    return dq


@triton.jit
def _bwd_dq_kernel(Q, K, V, DO, LSE, DELTA, DQ,
                   stride_qb, stride_qh, stride_qs, stride_qd,
                   stride_kb, stride_kh, stride_ks, stride_kd,
                   stride_vb, stride_vh, stride_vs, stride_vd,
                   stride_db, stride_dh, stride_ds, stride_dd,
                   H, S, scale_hi, scale_lo, qk_scale_hi, qk_scale_lo,
                   HEAD_D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                   CAUSAL: tl.constexpr, F64: tl.constexpr, PREC: tl.constexpr,
                   HOPPER: tl.constexpr, TMA: tl.constexpr):
    acc_ty = tl.float64 if F64 else tl.float32
    if HOPPER:
        off_hz, start_m = _program(S, BLOCK_M, CAUSAL)
    else:
        off_hz = tl.program_id(0)
        start_m = tl.program_id(1)
        if CAUSAL:
            start_m = tl.num_programs(1) - 1 - start_m   # the longest rows first
    scale = _join(scale_hi, scale_lo, acc_ty)
    qk_scale = _join(qk_scale_hi, qk_scale_lo, acc_ty)
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_D)
    row_ok = offs_m < S
    q = _load(_head(Q, off_hz, H, stride_qb, stride_qh), offs_m, offs_d, stride_qs, stride_qd, S)
    do = _load(_head(DO, off_hz, H, stride_db, stride_dh), offs_m, offs_d, stride_ds, stride_dd,
               S)
    lse = tl.load(LSE + off_hz.to(tl.int64) * S + offs_m, mask=row_ok, other=float("inf"))
    delta = tl.load(DELTA + off_hz.to(tl.int64) * S + offs_m, mask=row_ok, other=0.0)
    k_src = _src(_head(K, off_hz, H, stride_kb, stride_kh), S, stride_ks, HEAD_D, BLOCK_N, TMA)
    v_src = _src(_head(V, off_hz, H, stride_vb, stride_vh), S, stride_vs, HEAD_D, BLOCK_N, TMA)
    dq = tl.zeros([BLOCK_M, HEAD_D], acc_ty)
    mid, end = _key_split(start_m, S, BLOCK_M, BLOCK_N, CAUSAL)
    dq = _dq_inner(dq, q, do, lse, delta, k_src, v_src, stride_ks, stride_kd, stride_vs,
                   stride_vd, offs_m, offs_d, 0, mid, S, qk_scale, BLOCK_N, CAUSAL, False, PREC,
                   HOPPER, TMA)
    dq = _dq_inner(dq, q, do, lse, delta, k_src, v_src, stride_ks, stride_kd, stride_vs,
                   stride_vd, offs_m, offs_d, mid, end, S, qk_scale, BLOCK_N, CAUSAL, True, PREC,
                   HOPPER, TMA)
    tl.store(DQ + off_hz.to(tl.int64) * S * HEAD_D + offs_m[:, None] * HEAD_D + offs_d[None, :],
             (dq * scale).to(DQ.dtype.element_ty), mask=row_ok[:, None])


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
    """x as hi + lo, two float32 values: a plain launch passes a float argument as fp32, and
    the float64 path needs the scale to ~48 bits (gradcheck)."""
    f32 = lambda y: struct.unpack("f", struct.pack("f", y))[0]  # no tensor: no ATen op
    hi = f32(x)
    return hi, f32(x - hi)


CONFIG_OVERRIDE = None  # the checks: a config dict to use instead (the Hopper path on the interpreter)


def _config(q) -> dict:
    if CONFIG_OVERRIDE is not None:
        return CONFIG_OVERRIDE
    if not q.is_cuda:
        return CPU
    if q.dtype in (torch.float32, torch.float64):
        return WIDE
    # int(): under torch.compile's dynamic shapes D is a SymInt, which a dict cannot hash; D is
    # 64 or 128, so specializing on it costs nothing
    return CONFIGS[int(q.shape[-1])]


def _kind(q) -> dict:
    # fp32 must stay fp32: tl.dot's default rounds fp32 operands to tf32 (10 bits)
    prec = "ieee" if q.dtype in (torch.float32, torch.float64) else "tf32"
    return dict(F64=q.dtype == torch.float64, PREC=prec)


def _direct(kernel):
    return kernel  # the eager door: launch the JIT function itself


def _scratch(size: int, alignment: int, stream):
    """Global memory for the TMA descriptors a kernel builds (128 bytes each)."""
    return torch.empty(size, dtype=torch.int8, device="cuda")


def _tma(cfg, launch, *ts) -> bool:
    """Stream `ts` through TMA descriptors? Where the config asks for it, on Hopper or later, in
    the eager door (descriptors built in a kernel need the scratch allocator above, which a
    launch under torch.compile does not get), and where the copy engine can read every tensor:
    the last dim contiguous, rows and base 16-byte aligned (a view one element in, every other
    element of D, or an expanded gradient reads through pointers instead)."""
    if not (cfg.tma and launch is _direct and ts[0].is_cuda
            and torch.cuda.get_device_capability(ts[0].device)[0] >= 9):
        return False
    size = ts[0].element_size()
    if not all(t.stride(-1) == 1 and t.stride(-2) > 0 and t.data_ptr() % 16 == 0
               and all(s * size % 16 == 0 for s in t.stride()[:-1]) for t in ts):
        return False
    triton.set_allocator(_scratch)
    return True


def _grid(B, H, S, cfg):
    """(batch*head, block) programs: 2-D in the first kernels' order, 1-D in the Hopper path's
    (head-major, _program)."""
    blocks = triton.cdiv(S, cfg.own)
    return (B * H * blocks,) if cfg.hopper else (B * H, blocks)


def _fwd(q, k, v, o, lse, causal, scale, launch, cfg, poly=0, lazy=False):
    B, H, S, D = q.shape
    if q.dtype not in (torch.float16, torch.bfloat16):
        poly = 0   # fp32/fp64: the polynomial's 1e-4 is over their tolerance
    launch(_fwd_kernel)[_grid(B, H, S, cfg)](
        q, k, v, o, lse, *q.stride(), *k.stride(), *v.stride(), H, S, *_split(scale * LOG2E),
        HEAD_D=D, BLOCK_M=cfg.own, BLOCK_N=cfg.step, CAUSAL=bool(causal), **_kind(q),
        HOPPER=cfg.hopper, TMA=cfg.hopper and _tma(cfg, launch, k, v), num_warps=cfg.warps,
        num_stages=cfg.stages, POLY=int(poly), LAZY=bool(lazy))


def _dkdv(q, k, v, do, lse, delta, dk, dv, causal, scale, launch, cfg):
    B, H, S, D = q.shape
    launch(_bwd_dkdv_kernel)[_grid(B, H, S, cfg)](
        q, k, v, do, lse, delta, dk, dv, *q.stride(), *k.stride(), *v.stride(), *do.stride(), H,
        S, *_split(scale), *_split(scale * LOG2E), HEAD_D=D, BLOCK_N=cfg.own, BLOCK_M=cfg.step,
        CAUSAL=bool(causal), **_kind(q), HOPPER=cfg.hopper,
        TMA=cfg.hopper and _tma(cfg, launch, q, do), num_warps=cfg.warps, num_stages=cfg.stages)


def _dq(q, k, v, do, lse, delta, dq, causal, scale, launch, cfg):
    B, H, S, D = q.shape
    launch(_bwd_dq_kernel)[_grid(B, H, S, cfg)](
        q, k, v, do, lse, delta, dq, *q.stride(), *k.stride(), *v.stride(), *do.stride(), H, S,
        *_split(scale), *_split(scale * LOG2E), HEAD_D=D, BLOCK_M=cfg.own, BLOCK_N=cfg.step,
        CAUSAL=bool(causal), **_kind(q), HOPPER=cfg.hopper,
        TMA=cfg.hopper and _tma(cfg, launch, k, v), num_warps=cfg.warps, num_stages=cfg.stages)


def _fwd_impl(q, k, v, causal, scale, launch, poly=0, lazy=False):
    _check(q, k, v)
    o = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    lse = torch.empty(q.shape[:3], dtype=torch.float64 if q.dtype == torch.float64 else
                      torch.float32, device=q.device)
    if o.numel():
        _fwd(q, k, v, o, lse, causal, scale, launch, _config(q)["fwd"], poly, lazy)
    return o, lse


def _bwd_impl(do, q, k, v, o, lse, causal, scale, launch):
    _check(q, k, v)
    if do.shape != q.shape:
        raise ValueError(f"grad of o must have o's shape {tuple(q.shape)}, got {tuple(do.shape)}")
    dq, dk, dv = (torch.empty(q.shape, dtype=q.dtype, device=q.device) for _ in range(3))
    if dq.numel() == 0:
        return dq, dk, dv
    if do.dtype != q.dtype:
        raise TypeError(f"grad of o must have q's dtype {q.dtype}, got {do.dtype}")
    B, H, S, D = q.shape
    cfg = _config(q)
    delta = torch.empty_like(lse)
    launch(_bwd_delta_kernel)[(B * H, triton.cdiv(S, 64))](
        o, do, delta, *do.stride(), H, S, HEAD_D=D, BLOCK_M=64, F64=_kind(q)["F64"], num_warps=4)
    _dkdv(q, k, v, do, lse, delta, dk, dv, causal, scale, launch, cfg["dkdv"])
    _dq(q, k, v, do, lse, delta, dq, causal, scale, launch, cfg["dq"])
    return dq, dk, dv


# The registered ops (torch.compile's door; opcheck tests them).
@triton_op("exp38_triton::flash_attention_fwd", mutates_args=())
def flash_attention_fwd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool,
                        scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    return _fwd_impl(q, k, v, causal, scale, wrap_triton)


@triton_op("exp38_triton::flash_attention_bwd", mutates_args=())
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
    def forward(ctx, q, k, v, causal, scale, poly=0, lazy=False):
        o, lse = _fwd_impl(q, k, v, causal, scale, _direct, poly, lazy)
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.causal, ctx.scale = causal, scale
        return o

    @staticmethod
    def backward(ctx, do):
        q, k, v, o, lse = ctx.saved_tensors
        dq, dk, dv = _bwd_impl(do, q, k, v, o, lse, ctx.causal, ctx.scale, _direct)
        return dq, dk, dv, None, None, None, None


def _scale(q, scale) -> float:
    if scale is None:
        return 1.0 / math.sqrt(q.shape[-1]) if isinstance(q, torch.Tensor) and q.dim() else 1.0
    scale = float(scale)
    if not (math.isfinite(scale) and scale > 0):
        raise ValueError(f"scale must be a finite number > 0, got {scale}")
    return scale


def flash_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                    scale: float | None = None, poly: int = 0, lazy: bool = False) -> torch.Tensor:
    """softmax(scale · q kᵀ (+ causal mask)) v over q, k, v of shape [B, H, S, D]."""
    _check(q, k, v)
    scale = _scale(q, scale)
    if torch.compiler.is_compiling():
        o, _lse = flash_attention_fwd(q, k, v, bool(causal), scale)  # no graph break
        return o
    return _FlashAttentionEager.apply(q, k, v, bool(causal), scale, int(poly), bool(lazy))


# exp38's variants: name -> (poly, lazy)
VARIANTS = {"base": (0, False), "poly4": (4, False), "poly2": (2, False), "lazy": (0, True),
            "lazy_poly4": (4, True), "lazy_poly2": (2, True)}


def attention(q, k, v, causal=False, scale=None, name="base"):
    poly, lazy = VARIANTS[name]
    return flash_attention(q, k, v, causal, scale, poly=poly, lazy=lazy)


def forward_lse(q, k, v, causal=False, scale=None, name="base"):
    """(o, lse2) of a variant's forward, no autograd."""
    poly, lazy = VARIANTS[name]
    return _fwd_impl(q, k, v, bool(causal), _scale(q, scale), _direct, poly, lazy)
