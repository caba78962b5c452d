"""Exercise 13 — flash_attention, Triton track, solved: FlashAttention-2, forward and backward.

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
(16 heads, whose K and V fit the L2) neither helped, and the first kernels stay. On Hopper the
D 128 forward and the backward go further in Gluon, warp-specialized; at D 64 the backward is
one pass of 5 matmuls per block pair whose dQ adds go in a fixed order, so the bits still do
not change from run to run (their own sections: why, and where).

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

try:  # Gluon, for the Hopper kernels (their sections below); without it: Triton kernels only
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia.hopper import (
        fence_async_shared, mbarrier, tma, warpgroup_mma, warpgroup_mma_wait)
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
    from triton.experimental.gluon.language._core import builtin
    from triton._C.libtriton import ir
    # written for Triton 3.6's Gluon (the GPU machines'); 3.8 compiles it too, 3.5 is another API
    GLUON = tuple(int(x) for x in triton.__version__.split(".")[:2]) >= (3, 6)
except ImportError:
    GLUON = False

LOG2E = 1.4426950408889634

# One kernel's launch. Each program owns `own` rows (queries in the forward and dQ: BLOCK_M; keys
# in dK/dV: BLOCK_N) and streams the other side past them `step` rows at a time (`own` a multiple
# of `step`: the causal diagonal is walked in steps); `warps`, and `stages` of software
# pipelining (tiles loaded ahead while one is computed on). hopper: the Hopper path (below:
# head-major program order, row tiles); tma: its tiles through TMA descriptors; gluon (the
# forward's, and dK/dV's for the whole backward): the Gluon kernels where they apply (_gluon_ok),
# this config where they do not.
Cfg = namedtuple("Cfg", "own step warps stages hopper tma gluon", defaults=(False, False, False))

# Per kernel and head dim for 16-bit inputs on Hopper (sm_90), chosen by sweeps on an H200 at the
# head dim's benchmark case (D 64: the leaderboard case, causal; D 128: the wide one, not causal;
# 2026-11-26 and 2026-11-28; benchmarks/flash_attention_sweep.py; docs/performance.md). D 128's
# dQ streams through plain loads: measured 4% faster than through TMA there.
CONFIGS = {64: dict(fwd=Cfg(128, 64, 8, 3), dkdv=Cfg(64, 64, 4, 3, gluon=True),
                   dq=Cfg(128, 64, 8, 3)),
           128: dict(fwd=Cfg(128, 128, 8, 3, hopper=True, tma=True, gluon=True),
                     dkdv=Cfg(64, 64, 4, 2, hopper=True, tma=True, gluon=True),
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

@triton.jit
def _fwd_inner(acc, l_i, m_i, q, k_src, v_src, stride_ks, stride_kd, stride_vs, stride_vd,
               offs_m, offs_d, lo, hi, S, qk_scale, BLOCK_N: tl.constexpr,
               CAUSAL: tl.constexpr, MASKED: tl.constexpr, PREC: tl.constexpr,
               HOPPER: tl.constexpr, TMA: tl.constexpr):
    """Key blocks lo, lo + BLOCK_N, ... < hi into (acc, l, m); MASKED: scores _keep drops.
    k_src, v_src: the head's base pointers (HOPPER: see _src)."""
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
        m_ij = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
        p = tl.math.exp2(qk * qk_scale - m_ij[:, None])
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
                HOPPER: tl.constexpr, TMA: tl.constexpr):
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
                               False, PREC, HOPPER, TMA)
    acc, l_i, m_i = _fwd_inner(acc, l_i, m_i, q, k_src, v_src, stride_ks, stride_kd, stride_vs,
                               stride_vd, offs_m, offs_d, mid, end, S, qk_scale, BLOCK_N, CAUSAL,
                               True, PREC, HOPPER, TMA)
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


# --- the forward in Gluon (Hopper, D 128) ------------------------------------------------------
# Why a second forward. At D 128, not causal, the forward is 4·B·H·S²·D flop of matmuls and
# B·H·S² exponentials. At the wide case (B 4, H 32, S 4096): 1.10e12 flop, 1.4 ms of an H200's
# ~800 TFLOP/s of wgmma, and 2.1e9 exp2, 0.55 ms at 16 per clock per SM (132 SMs, ~1.8 GHz).
# One after the other that is ~2 ms (the Triton kernel above takes 2.11); ~1.4-1.5 ms if the
# exponentials run while the tensor cores work. In Triton a program's warps run one instruction
# stream, each block's Q·Kᵀ, softmax and P·V in turn, and the compiler decides what overlaps
# (its warp specialization of this loop gained nothing: the Hopper path above). Gluon
# (triton.experimental.gluon: Triton's lower level, layouts, shared memory, barriers and warps
# written out) lets the kernel split its warps as FlashAttention-3 does:
# - a producer warp that only issues TMA copies: Q once, then K_j and V_j into a 2-stage ring;
# - two consumer warpgroups of 64 query rows, each issuing Q·K_jᵀ and P_{j-1}·V_{j-1} as async
#   wgmmas and computing the softmax of block j while the P·V of block j-1 runs; the two drift
#   apart, so one's softmax also runs under the other's matmuls;
# - registers where the work is (setmaxnreg): 240 per consumer thread, 24 for the producer.
# Measured on an H200 (docs/performance.md, "flash-attention-gluon"): 1.82 ms against the
# Triton forward's 2.11 and cuDNN's 1.89, with the same bits as _fwd_kernel (the same math in
# the same order: base 2, P rounded to bf16 before P·V, l summed over the fp32 P). It serves only
# what it was written for (_gluon_ok): eager calls on sm_90a, bf16, D 128, not causal, S a
# multiple of 128, contiguous q, k, v.

if GLUON:
    @gluon.jit
    def _fwd_gluon_load(q_desc, k_desc, v_desc, q_smem, k_smem, v_smem,
                        q_bar, k_ready, k_empty, v_ready, v_empty, q_row, kv_row, n_kv,
                        WG_M: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr):
        """The producer warp. Q's halves on barriers of their own: each consumer starts as soon
        as its rows are in. K and V on separate barriers: Q·K_jᵀ need not wait for V_j."""
        for w in gl.static_range(2):
            mbarrier.expect(q_bar.index(w), q_desc.block_type.nbytes)
            tma.async_copy_global_to_shared(q_desc, [q_row + w * WG_M, 0], q_bar.index(w),
                                            q_smem.index(w))
        for j in range(n_kv):
            s = j % STAGES
            # a stage is free once both consumers released it; on the first pass the barrier is
            # fresh and waiting for the phase before its first returns at once
            free = ((j // STAGES) & 1) ^ 1
            mbarrier.wait(k_empty.index(s), free)
            mbarrier.expect(k_ready.index(s), k_desc.block_type.nbytes)
            tma.async_copy_global_to_shared(k_desc, [kv_row + j * BLOCK_N, 0], k_ready.index(s),
                                            k_smem.index(s))
            mbarrier.wait(v_empty.index(s), free)
            mbarrier.expect(v_ready.index(s), v_desc.block_type.nbytes)
            tma.async_copy_global_to_shared(v_desc, [kv_row + j * BLOCK_N, 0], v_ready.index(s),
                                            v_smem.index(s))

    @gluon.jit
    def _fwd_gluon_softmax(o_desc, LSE, q_smem, k_smem, v_smem,
                           q_bar, k_ready, k_empty, v_ready, v_empty, q_row, n_kv, qk_scale,
                           WG: gl.constexpr, WG_M: gl.constexpr, BLOCK_N: gl.constexpr,
                           HEAD_D: gl.constexpr, STAGES: gl.constexpr):
        """A consumer warpgroup: query rows WG·64 ... WG·64 + 63 of the block, _fwd_inner's math
        with the P·V of one key block under the softmax of the next."""
        # wgmma's accumulator layout (4 warps along M); P re-read as the A operand of P·V in
        # registers: the same thread-to-element map, no shuffles
        s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                           instr_shape=[16, BLOCK_N, 16])
        o_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                           instr_shape=[16, HEAD_D, 16])
        p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
        row_layout: gl.constexpr = gl.SliceLayout(1, s_layout)
        orow_layout: gl.constexpr = gl.SliceLayout(1, o_layout)
        q = q_smem.index(WG)
        zero_s = gl.zeros([WG_M, BLOCK_N], gl.float32, layout=s_layout)
        o = gl.zeros([WG_M, HEAD_D], gl.float32, layout=o_layout)
        mbarrier.wait(q_bar.index(WG), 0)

        # key block 0: no P·V before it to overlap, m set directly (no -inf, nothing to rescale)
        mbarrier.wait(k_ready.index(0), 0)
        k0 = k_smem.index(0)
        s_tok = warpgroup_mma(q, k0.permute((1, 0)), zero_s, use_acc=False, is_async=True)
        s, _, _ = warpgroup_mma_wait(num_outstanding=0, deps=(s_tok, q, k0))
        mbarrier.arrive(k_empty.index(0), count=1)
        m_i = gl.max(s, axis=1) * qk_scale
        p = gl.exp2(s * qk_scale - m_i[:, None])
        l_i = gl.sum(p, axis=1)
        p_op = gl.convert_layout(p.to(gl.bfloat16), p_layout)

        for j in range(1, n_kv):
            s_idx = j % STAGES
            p_idx = (j - 1) % STAGES
            mbarrier.wait(k_ready.index(s_idx), (j // STAGES) & 1)
            kj = k_smem.index(s_idx)
            s_tok = warpgroup_mma(q, kj.permute((1, 0)), zero_s, use_acc=False, is_async=True)
            mbarrier.wait(v_ready.index(p_idx), ((j - 1) // STAGES) & 1)
            vp = v_smem.index(p_idx)
            o_tok = warpgroup_mma(p_op, vp, o, is_async=True)
            # wgmmas retire in order: with one left outstanding, S_j (issued first) is done
            s, _ = warpgroup_mma_wait(num_outstanding=1, deps=(s_tok, kj))
            mbarrier.arrive(k_empty.index(s_idx), count=1)
            # the softmax of block j, while P_{j-1}·V_{j-1} runs on the tensor cores
            m_new = gl.maximum(m_i, gl.max(s, axis=1) * qk_scale)
            alpha = gl.exp2(m_i - m_new)
            p = gl.exp2(s * qk_scale - m_new[:, None])
            l_i = l_i * alpha + gl.sum(p, axis=1)
            p_next = gl.convert_layout(p.to(gl.bfloat16), p_layout)
            m_i = m_new
            o, _, _ = warpgroup_mma_wait(num_outstanding=0, deps=(o_tok, p_op, vp))
            mbarrier.arrive(v_empty.index(p_idx), count=1)
            o = o * gl.convert_layout(alpha, orow_layout)[:, None]  # to block j's max
            p_op = p_next

        last = n_kv - 1
        mbarrier.wait(v_ready.index(last % STAGES), (last // STAGES) & 1)
        vl = v_smem.index(last % STAGES)
        o_tok = warpgroup_mma(p_op, vl, o, is_async=True)
        o, _, _ = warpgroup_mma_wait(num_outstanding=0, deps=(o_tok, p_op, vl))
        mbarrier.arrive(v_empty.index(last % STAGES), count=1)

        # o / l as _fwd_kernel divides (the same bits), out through this warpgroup's Q buffer
        # (free after its last Q·Kᵀ) and a TMA store; lse2 = m + log2(l) as _fwd_kernel keeps it
        o = o / gl.convert_layout(l_i, orow_layout)[:, None]
        q.store(o.to(o_desc.dtype))
        fence_async_shared()
        tma.async_copy_shared_to_global(o_desc, [q_row + WG * WG_M, 0], q)
        rows = q_row + WG * WG_M + gl.arange(0, WG_M, layout=row_layout)
        gl.store(LSE + rows, m_i + gl.log2(l_i))
        tma.store_wait(pendings=0)

    @gluon.jit
    def _fwd_gluon_kernel(q_desc, k_desc, v_desc, o_desc, LSE, S, scale_hi, scale_lo,
                          HEAD_D: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
                          STAGES: gl.constexpr):
        """One program per (batch*head, block of BLOCK_M queries), over the [B*H*S, D] rows of
        q, k, v, o; lse2: [B*H, S]."""
        WG_M: gl.constexpr = BLOCK_M // 2
        off_hz = gl.program_id(0) // (S // BLOCK_M)   # head-major order, as the Hopper path's
        q_row = off_hz * S + gl.program_id(0) % (S // BLOCK_M) * BLOCK_M
        kv_row = off_hz * S
        n_kv = S // BLOCK_N
        qk_scale = scale_hi + scale_lo                 # _join's value: the same scale, bit for bit

        # 32 KB of Q, 2 stages x 32 KB of K and of V: 160 KB (3 stages: 224 KB, at sm_90's
        # 227 KB limit; not tried)
        q_smem = gl.allocate_shared_memory(q_desc.dtype, [2, WG_M, HEAD_D], q_desc.layout)
        k_smem = gl.allocate_shared_memory(k_desc.dtype, [STAGES, BLOCK_N, HEAD_D], k_desc.layout)
        v_smem = gl.allocate_shared_memory(v_desc.dtype, [STAGES, BLOCK_N, HEAD_D], v_desc.layout)
        q_bar = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
        k_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        v_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        k_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        v_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        for w in gl.static_range(2):
            mbarrier.init(q_bar.index(w), count=1)
        for i in gl.static_range(STAGES):
            mbarrier.init(k_ready.index(i), count=1)    # the producer's expect, then the bytes
            mbarrier.init(v_ready.index(i), count=1)
            mbarrier.init(k_empty.index(i), count=2)    # both consumers read every stage
            mbarrier.init(v_empty.index(i), count=2)
        fence_async_shared()  # the barriers initialized before the copy engine sees them

        gl.warp_specialize([
            (_fwd_gluon_softmax, (o_desc, LSE, q_smem, k_smem, v_smem, q_bar, k_ready, k_empty,
                                  v_ready, v_empty, q_row, n_kv, qk_scale, 0, WG_M, BLOCK_N,
                                  HEAD_D, STAGES)),
            (_fwd_gluon_softmax, (o_desc, LSE, q_smem, k_smem, v_smem, q_bar, k_ready, k_empty,
                                  v_ready, v_empty, q_row, n_kv, qk_scale, 1, WG_M, BLOCK_N,
                                  HEAD_D, STAGES)),
            (_fwd_gluon_load, (q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, q_bar, k_ready,
                               k_empty, v_ready, v_empty, q_row, kv_row, n_kv, WG_M, BLOCK_N,
                               STAGES)),
        ], [4, 1], [240, 24])  # 4 warps + 1; registers per thread (2·128·240 + 128·24 <= 64 K)


GLUON_BLOCK = 128   # query rows per program (two warpgroups of 64), keys per K/V tile


def _sm90a(t) -> bool:
    """Hopper exactly: wgmma and setmaxnreg are sm_90a's; a later GPU runs the Triton kernels."""
    return t.is_cuda and torch.cuda.get_device_capability(t.device) == (9, 0)


def _gluon_ok(q, k, v, launch, *more) -> bool:
    """The Gluon kernels only where they are exactly right: in the eager door (under
    torch.compile and on fake tensors the Triton kernels, which Inductor sees), on sm_90a, in
    bf16 at D 64 or 128, S a multiple of 128 (whole blocks only: they mask no tail), and where
    their descriptors read q, k, v (and the backward's dO and lse2: more) as the [B*H*S, D]
    rows they assume (contiguous, 16-byte aligned; row indices in int32). The forward also
    needs D 128 and not causal: its caller asks."""
    if not (GLUON and launch is _direct):
        return False
    B, H, S, D = q.shape
    return (q.dtype == torch.bfloat16 and D in GLUON_BWD and S % GLUON_BLOCK == 0
            and B * H * S < 2 ** 31 and _sm90a(q)
            and all(t.is_contiguous() and t.data_ptr() % 16 == 0 for t in (q, k, v, *more)))


def _fwd_gluon(q, k, v, o, lse, scale):
    B, H, S, D = q.shape
    # NVMMA shared layouts (128-byte swizzle) that both TMA and wgmma read: [64, D] Q and O
    # tiles (one warpgroup's rows), [128, D] K and V tiles
    half = gl.NVMMASharedLayout.get_default_for([GLUON_BLOCK // 2, D], gl.bfloat16)
    tile = gl.NVMMASharedLayout.get_default_for([GLUON_BLOCK, D], gl.bfloat16)
    q2, k2, v2, o2 = (t.view(B * H * S, D) for t in (q, k, v, o))
    _fwd_gluon_kernel[(B * H * (S // GLUON_BLOCK),)](
        TensorDescriptor.from_tensor(q2, [GLUON_BLOCK // 2, D], half),
        TensorDescriptor.from_tensor(k2, [GLUON_BLOCK, D], tile),
        TensorDescriptor.from_tensor(v2, [GLUON_BLOCK, D], tile),
        TensorDescriptor.from_tensor(o2, [GLUON_BLOCK // 2, D], half),
        lse, S, *_split(scale * LOG2E), HEAD_D=D, BLOCK_M=GLUON_BLOCK, BLOCK_N=GLUON_BLOCK,
        STAGES=2, num_warps=4)


# --- the Hopper backward in Gluon (D 64 and 128) -------------------------------------------------
# Why: the backward executes 7 products of 2·S²·D per head (causal: about half): at the D 128
# case 3.85 TFLOP, 4.1 ms at the H200's ~950 TFLOP/s of dense bf16, and the Triton kernels above
# take 6.7 ms (~61%): each program's warps run one block's products and exponentials in turn. As
# in the forward, a producer warp streams tiles through TMA and two consumer warpgroups of 64 rows
# each drift apart, so one's exponentials run under the other's wgmmas (FlashAttention-3's plan,
# without its atomics: the same two kernels, each output tile with one owner, the same order of
# summation as _bwd_dkdv_kernel and _bwd_dq_kernel, so the same bits).
# - dK/dV: a program owns 128 keys (64 per consumer); query blocks of 64 (Q, dO, lse2, delta)
#   stream through a ring. Per block: Sᵀ = K Qᵀ and dPᵀ = V dOᵀ issued together, Pᵀ = exp2(..)
#   computed while dPᵀ runs, dV += Pᵀ dO issued, dSᵀ computed while it runs, dK += dSᵀ Q (Pᵀ and
#   dSᵀ as register operands). Keys as the rows: no transpose anywhere.
# - dQ: a program owns 128 queries, Q in registers; key blocks (K, V) stream through a ring.
# - Causal: blocks of 64 make each warpgroup's tile whole, diagonal (masked after the exp2, as
#   the Triton kernels do) or wholly masked (skipped, its stage still released); the longest
#   programs first.
# The register plan differs with D (GLUON_BWD): at D 64 the loop-invariant operands (K and V;
# Q and dO) stay in registers and every product reads only its streamed tile from shared memory;
# at D 128, dK, dV (64 + 64 registers) and Sᵀ, dPᵀ (32 + 32) leave room for neither K nor V
# (ptxas spills), so they are read from shared memory, and dQ takes its key blocks in pairs,
# dQ_j in flight while S_{j+1} and dP_{j+1} are issued, so a warpgroup's tensor queue never
# drains. Every wgmma is retired before the loop's back edge: one in flight across it made ptxas
# serialise them all (its C7512).
# Measured on an H200 (docs/performance.md, "flash-attention-gluon-solution"), the backward
# alone: at D 128, 6.05 ms against the Triton kernels' 6.74; at the leaderboard case (D 64,
# causal), 3.50 ms against 3.82; the same bits. It serves what _gluon_ok allows, dO and lse2 too.
# Against cuDNN's five products: kernel by kernel the leaderboard step is within 1% of it, but
# back to back both run at the H200's 700 W cap, where these seven run at the lower clock
# (1.77-1.80 against 1.85-1.88 GHz, the same section): what is left there is work, not
# scheduling. D 64 now does five (the one-pass, below); at D 128 the clocks are level and these
# kernels need more cycles.

# per head dim: the ring depths, whether K, V (dK/dV) and dO (dQ) are register operands,
# whether dQ takes key blocks in pairs (the D 128 plan's switches were timed: 4d26c45), and
# ONE_PASS: dQ from the dK/dV kernel (below; D 64 only: at D 128 its registers are not there).
# D 64's two-kernel plan stays as the switch's other side (3.50 ms above; the one-pass: below)
GLUON_BWD = {64: dict(DKDV_STAGES=4, KREG=True, DQ_STAGES=4, DOREG=True, PAIRS=False,
                      ONE_PASS=True),
             128: dict(DKDV_STAGES=3, KREG=False, DQ_STAGES=4, DOREG=False, PAIRS=True,
                       ONE_PASS=False)}
DQ_SLOTS = 4   # the one-pass's fp32 dQ partials in flight to the writer warp (16 KB each)

# --- D 64: the backward in one pass, deterministic ----------------------------------------------
# Why: the two kernels above compute P and dP twice, seven products per block pair; cuDNN does
# five (its dQ by atomics, not deterministic: "flash-attention-gluon-solution"). Here the dK/dV
# program also forms dQ_i's partial for its 128 keys, dS_i K (FlashAttention-3's plan): five
# products, 2/7 less tensor work. Per query block the two warpgroups' dSᵀ tiles meet in shared
# memory and one of them (alternating) sums both halves in two chained wgmmas into one fp32
# [64, 64] tile: one 16 KB tile per (query block, program) goes to L2, 4.3 GB at the
# leaderboard case (~1 ms of the L2's bandwidth, spread under 3 ms of tensor work). A writer warp
# adds it into an fp32 dq buffer with TMA's reduce-add, and a small kernel scales and casts it.
# Determinism: float adds in arrival order would change dq's last bits each run. So the adds go
# in key-block order, every run: the writer of key block kb waits (a semaphore per query block)
# until the kb blocks before it have added theirs. The programs start longest first (kb 0 of
# every head, then kb 1, ...), so a program only waits on programs already running: no deadlock.
# The writer waits for one reduce to complete only after issuing the next, so one reduce's trip
# to L2 overlaps the next one's wait: waiting for each in turn was slower than a block's compute
# (~1.5 us) and cost 11% of the backward. Measured (docs/performance.md, "flash-attention-gluon-
# one-pass"): the leaderboard step 4.49 ms against 4.79 for the two kernels, and cuDNN's 4.57.

if GLUON:
    @gluon.jit
    def _gluon_load_once(a_desc, b_desc, row, bar, a_smem, b_smem, BLK: gl.constexpr):
        """A producer's first copies: its program's two loop-invariant tensors (K and V for
        dK/dV, Q and dO for dQ), a BLK-row half of each per consumer warpgroup, on one barrier."""
        mbarrier.expect(bar, 4 * a_desc.block_type.nbytes)
        for w in gl.static_range(2):
            tma.async_copy_global_to_shared(a_desc, [row + w * BLK, 0], bar, a_smem.index(w))
            tma.async_copy_global_to_shared(b_desc, [row + w * BLK, 0], bar, b_smem.index(w))

    @gluon.jit
    def _dkdv_gluon_load(q_desc, do_desc, k_desc, v_desc, lse_desc, dl_desc,
                         q_smem, do_smem, k_smem, v_smem, lse_smem, dl_smem,
                         kv_bar, ready, empty, kv_row, q_row0, n_it,
                         BLK: gl.constexpr, STAGES: gl.constexpr):
        """The producer warp: this program's K and V once (a 64-row half per consumer), then
        query blocks into the ring, each stage refilled once both consumers released it."""
        _gluon_load_once(k_desc, v_desc, kv_row, kv_bar, k_smem, v_smem, BLK)
        nbytes: gl.constexpr = 2 * q_desc.block_type.nbytes + 2 * lse_desc.block_type.nbytes
        for i in range(n_it):
            s = i % STAGES
            # a fresh barrier's wait for the phase before its first returns at once
            mbarrier.wait(empty.index(s), ((i // STAGES) & 1) ^ 1)
            mbarrier.expect(ready.index(s), nbytes)
            row = q_row0 + i * BLK
            tma.async_copy_global_to_shared(q_desc, [row, 0], ready.index(s), q_smem.index(s))
            tma.async_copy_global_to_shared(do_desc, [row, 0], ready.index(s), do_smem.index(s))
            tma.async_copy_global_to_shared(lse_desc, [row], ready.index(s), lse_smem.index(s))
            tma.async_copy_global_to_shared(dl_desc, [row], ready.index(s), dl_smem.index(s))

    @builtin
    def _tma_reduce_add(tensor_desc, coord, src, _semantic=None):
        """tma.async_copy_shared_to_global, adding into global memory instead of writing (PTX
        cp.reduce.async.bulk.tensor .add): the builder has it, Gluon 3.6 exports no wrapper."""
        coord = _semantic._convert_to_ir_values(coord, require_i64=False)
        _semantic.builder.create_async_tma_reduce(ir.DESCRIPTOR_REDUCE_KIND.ADD,
                                                  tensor_desc.handle, coord, src.handle)

    @gluon.jit
    def _dq_acquire(ptr, target):
        """Spin until *ptr >= target (every lane of the writer warp on the one word), then order
        the next TMA reduce (the async proxy) after the acquire."""
        lay: gl.constexpr = gl.BlockedLayout([1], [32], [1], [0])
        return gl.inline_asm_elementwise(
            """{
            .reg .pred p;
            SPIN:
            ld.acquire.gpu.global.u32 $0, [$1];
            setp.lt.s32 p, $0, $2;
            @p bra SPIN;
            fence.proxy.async.global;
            }""", "=r,l,r", [ptr + gl.zeros([32], gl.int32, layout=lay),
                             target + gl.zeros([32], gl.int32, layout=lay)],
            dtype=gl.int32, is_pure=False, pack=1)

    def _release_asm(pending: int) -> str:
        """*ptr += 1 once at most `pending` of the warp's reduces are still in flight (the
        older ones completed: their adds done in L2, not only their shared memory read),
        ordered after them (the async proxy's writes, then a release). One lane adds, after the
        warp's barrier: elect.sync's lane issued the copies."""
        return f"""{{
            .reg .pred p;
            .reg .u32 lane;
            cp.async.bulk.wait_group {pending};
            fence.proxy.async.global;
            bar.warp.sync -1;
            mov.u32 lane, %laneid;
            setp.eq.u32 p, lane, 0;
            @p red.release.gpu.global.add.s32 [$1], 1;
            mov.u32 $0, 0;
            }}"""

    AFTER_NEXT = gl.constexpr(_release_asm(1))   # the one before the latest reduce
    AFTER_LAST = gl.constexpr(_release_asm(0))   # the latest

    @gluon.jit
    def _dq_release(ptr, ASM: gl.constexpr):
        lay: gl.constexpr = gl.BlockedLayout([1], [32], [1], [0])
        return gl.inline_asm_elementwise(ASM, "=r,l", [ptr + gl.zeros([32], gl.int32, layout=lay)],
                                         dtype=gl.int32, is_pure=False, pack=1)

    @gluon.jit
    def _dq_gluon_writer(dqa_desc, dq_smem, dq_full, dq_empty, SEM, sem_row, dq_row0, n_it,
                         kb, BLK: gl.constexpr, SLOTS: gl.constexpr):
        """The one-pass's writer warp: query block t's dQ partial (slot t % SLOTS) added into
        the fp32 dq rows once key blocks 0 .. kb-1 have added theirs; block t-1's completion
        awaited (its semaphore released, its slot freed) after block t's reduce is issued."""
        for t in range(n_it):
            w = t % SLOTS
            mbarrier.wait(dq_full.index(w), (t // SLOTS) & 1)
            _dq_acquire(SEM + sem_row + t, kb)
            _tma_reduce_add(dqa_desc, [dq_row0 + t * BLK, 0], dq_smem.index(w))
            if t > 0:
                _dq_release(SEM + sem_row + t - 1, AFTER_NEXT)
                mbarrier.arrive(dq_empty.index((t - 1) % SLOTS), count=1)
        _dq_release(SEM + sem_row + n_it - 1, AFTER_LAST)

    @gluon.jit
    def _dkdv_gluon_step(i, ka, va, dk, dv, q_smem, do_smem, k_smem, lse_smem, dl_smem, ready,
                         empty, ds_smem, dq_smem, ds_ready, ds_free, dq_full, dq_empty, qk_scale,
                         MASK: gl.constexpr, BLK: gl.constexpr, HEAD_D: gl.constexpr,
                         STAGES: gl.constexpr, WG: gl.constexpr, DQ: gl.constexpr,
                         OWNER: gl.constexpr, ALONE: gl.constexpr, SLOTS: gl.constexpr):
        """Query block i of the ring into this warpgroup's dK, dV; every wgmma retired inside.
        ka, va: K and V, registers or shared memory. MASK: the diagonal tile (keys and queries
        start at the same row): keep query c >= key r. DQ (the one-pass): dSᵀ also into
        ds_smem; OWNER (i % 2 == WG) then forms block i's dQ partial over both warpgroups' keys
        (ALONE: the causal first block, which WG 1's keys do not see: WG 0's half only) and
        hands it to the writer warp in dq_smem[i % SLOTS]."""
        # wgmma's accumulator layout for [64, 64] (Sᵀ, dPᵀ: keys x queries); Pᵀ, dSᵀ re-read as
        # the register A operand of the [64, D] products: the same thread-to-element map
        s_layout: gl.constexpr = gl.NVMMADistributedLayout(
            version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BLK, 16])
        o_layout: gl.constexpr = gl.NVMMADistributedLayout(
            version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, HEAD_D, 16])
        a_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
        col_layout: gl.constexpr = gl.SliceLayout(0, s_layout)
        s = i % STAGES
        q = q_smem.index(s)
        do = do_smem.index(s)
        mbarrier.wait(ready.index(s), (i // STAGES) & 1)
        zero = gl.zeros([BLK, BLK], gl.float32, layout=s_layout)
        st_tok = warpgroup_mma(ka, q.permute((1, 0)), zero, use_acc=False, is_async=True)
        zero = gl.zeros([BLK, BLK], gl.float32, layout=s_layout)
        dpt_tok = warpgroup_mma(va, do.permute((1, 0)), zero, use_acc=False, is_async=True)
        st = warpgroup_mma_wait(num_outstanding=1, deps=(st_tok,))   # Sᵀ done; dPᵀ may run
        lse = lse_smem.index(s).load(col_layout)
        pt = gl.exp2(st * qk_scale - lse[None, :])                  # under dPᵀ
        if MASK:   # after the exp2, as the Triton kernels mask: an inf there is dropped
            r = gl.arange(0, BLK, layout=gl.SliceLayout(1, s_layout))
            c = gl.arange(0, BLK, layout=col_layout)
            pt = gl.where(c[None, :] >= r[:, None], pt, 0.0)
        pt_op = gl.convert_layout(pt.to(gl.bfloat16), a_layout)
        dv_tok = warpgroup_mma(pt_op, do, dv, is_async=True)
        dpt = warpgroup_mma_wait(num_outstanding=1, deps=(dpt_tok,))  # dPᵀ done; dV may run
        delta = dl_smem.index(s).load(col_layout)
        dst = pt * (dpt - delta[None, :])                           # under dV (the fp32 P)
        ds16 = dst.to(gl.bfloat16)
        ds_op = gl.convert_layout(ds16, a_layout)
        dk_tok = warpgroup_mma(ds_op, q, dk, is_async=True)
        if DQ:
            # dSᵀ (keys x queries) into buffer i % 2, under dV and dK: free once the owner's dQ
            # of two blocks ago retired (a fresh barrier passes the first wait)
            b = i % 2
            mbarrier.wait(ds_free.index(b), ((i // 2) & 1) ^ 1)
            mine = ds_smem.index(2 * b + WG)
            mine.store(ds16)
            fence_async_shared()
            if OWNER:
                # dQ_i [64 queries, D] = dS [queries, WG 0's keys] K_0 + dS [.., WG 1's] K_1:
                # the dSᵀ tiles read transposed, K's halves from shared memory
                zero = gl.zeros([BLK, HEAD_D], gl.float32, layout=o_layout)
                if ALONE:
                    dq_tok = warpgroup_mma(mine.permute((1, 0)), k_smem.index(WG), zero,
                                           use_acc=False, is_async=True)
                else:
                    mbarrier.wait(ds_ready.index(b), (i // 2) & 1)   # the other half is in
                    dq_tok = warpgroup_mma(ds_smem.index(2 * b).permute((1, 0)),
                                           k_smem.index(0), zero, use_acc=False, is_async=True)
                    dq_tok = warpgroup_mma(ds_smem.index(2 * b + 1).permute((1, 0)),
                                           k_smem.index(1), dq_tok, is_async=True)
                # wgmma groups retire in order: dV, dK first (the stage is free), then dQ
                dv, dk, pt_op, ds_op = warpgroup_mma_wait(
                    num_outstanding=1 if ALONE else 2, deps=(dv_tok, dk_tok, pt_op, ds_op))
                mbarrier.arrive(empty.index(s), count=1)
                dq = warpgroup_mma_wait(num_outstanding=0, deps=(dq_tok,))
                mbarrier.arrive(ds_free.index(b), count=1)
                w = i % SLOTS   # free once the writer's reduce of SLOTS blocks ago completed
                mbarrier.wait(dq_empty.index(w), ((i // SLOTS) & 1) ^ 1)
                dq_smem.index(w).store(dq)
                fence_async_shared()
                mbarrier.arrive(dq_full.index(w), count=1)
            else:
                mbarrier.arrive(ds_ready.index(b), count=1)
                dv, dk, pt_op, ds_op = warpgroup_mma_wait(num_outstanding=0,
                                                          deps=(dv_tok, dk_tok, pt_op, ds_op))
                mbarrier.arrive(empty.index(s), count=1)
        else:
            dv, dk, pt_op, ds_op = warpgroup_mma_wait(num_outstanding=0,
                                                      deps=(dv_tok, dk_tok, pt_op, ds_op))
            mbarrier.arrive(empty.index(s), count=1)
        return dk, dv

    @gluon.jit
    def _dkdv_gluon_keys(dk_desc, dv_desc, q_smem, do_smem, k_smem, v_smem, lse_smem, dl_smem,
                         kv_bar, ready, empty, ds_smem, dq_smem, ds_ready, ds_free, dq_full,
                         dq_empty, kv_row, n_it, qk_scale, scale,
                         WG: gl.constexpr, BLK: gl.constexpr, HEAD_D: gl.constexpr,
                         STAGES: gl.constexpr, CAUSAL: gl.constexpr, KREG: gl.constexpr,
                         DQ: gl.constexpr, SLOTS: gl.constexpr):
        """A consumer warpgroup: keys WG·64 ... WG·64 + 63 of the program's 128. DQ: the ring
        walked in pairs, block 2p's dQ owned by WG 0, 2p + 1's by WG 1 (n_it is even: S and
        the first query are multiples of 128)."""
        o_layout: gl.constexpr = gl.NVMMADistributedLayout(
            version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, HEAD_D, 16])
        k_buf = k_smem.index(WG)
        v_buf = v_smem.index(WG)
        mbarrier.wait(kv_bar, 0)
        if KREG:   # the A operand of the [64, 64] products Sᵀ, dPᵀ, loaded once
            kv_layout: gl.constexpr = gl.DotOperandLayout(
                operand_index=0, parent=gl.NVMMADistributedLayout(
                    version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BLK, 16]), k_width=2)
            ka = k_buf.load(kv_layout)
            va = v_buf.load(kv_layout)
        else:
            ka = k_buf
            va = v_buf
        dk = gl.zeros([BLK, HEAD_D], gl.float32, layout=o_layout)
        dv = gl.zeros([BLK, HEAD_D], gl.float32, layout=o_layout)
        i0 = 0
        if CAUSAL:
            # the ring starts at the program's first key's query block: WG0's diagonal; WG1's
            # keys come after all of its queries: skipped, but its stage released (once loaded,
            # so the arrival counts for this occupant), and (DQ) its dS half marked in, with
            # nothing in it (the owner's block 0 is ALONE), to keep that barrier's phases
            if WG == 1:
                mbarrier.wait(ready.index(0), 0)
                mbarrier.arrive(empty.index(0), count=1)
                if DQ:
                    mbarrier.arrive(ds_ready.index(0), count=1)
            dk, dv = _dkdv_gluon_step(WG, ka, va, dk, dv, q_smem, do_smem, k_smem, lse_smem,
                                      dl_smem, ready, empty, ds_smem, dq_smem, ds_ready, ds_free,
                                      dq_full, dq_empty, qk_scale, True, BLK, HEAD_D, STAGES,
                                      WG, DQ, True, WG == 0, SLOTS)
            i0 = WG + 1
            if DQ and WG == 0:
                dk, dv = _dkdv_gluon_step(1, ka, va, dk, dv, q_smem, do_smem, k_smem, lse_smem,
                                          dl_smem, ready, empty, ds_smem, dq_smem, ds_ready,
                                          ds_free, dq_full, dq_empty, qk_scale, False, BLK,
                                          HEAD_D, STAGES, WG, DQ, False, False, SLOTS)
                i0 = 2
        if DQ:
            for p in range(i0 // 2, n_it // 2):
                for j in gl.static_range(2):
                    dk, dv = _dkdv_gluon_step(2 * p + j, ka, va, dk, dv, q_smem, do_smem, k_smem,
                                              lse_smem, dl_smem, ready, empty, ds_smem, dq_smem,
                                              ds_ready, ds_free, dq_full, dq_empty, qk_scale,
                                              False, BLK, HEAD_D, STAGES, WG, DQ, j == WG, False,
                                              SLOTS)
            # the owners' dQ wgmmas read K's halves until both buffers' last use retired
            mbarrier.wait(ds_free.index(0), (n_it // 2 - 1) & 1)
            mbarrier.wait(ds_free.index(1), (n_it // 2 - 1) & 1)
        else:
            for i in range(i0, n_it):
                dk, dv = _dkdv_gluon_step(i, ka, va, dk, dv, q_smem, do_smem, k_smem, lse_smem,
                                          dl_smem, ready, empty, ds_smem, dq_smem, ds_ready,
                                          ds_free, dq_full, dq_empty, qk_scale, False, BLK,
                                          HEAD_D, STAGES, WG, DQ, False, False, SLOTS)
        # the epilogue through this warpgroup's own K, V halves: every wgmma reading them retired
        k_buf.store((dk * scale).to(dk_desc.dtype))
        v_buf.store(dv.to(dv_desc.dtype))
        fence_async_shared()
        tma.async_copy_shared_to_global(dk_desc, [kv_row + WG * BLK, 0], k_buf)
        tma.async_copy_shared_to_global(dv_desc, [kv_row + WG * BLK, 0], v_buf)
        tma.store_wait(pendings=0)

    @gluon.jit
    def _dkdv_gluon_kernel(q_desc, do_desc, k_desc, v_desc, dk_desc, dv_desc, lse_desc, dl_desc,
                           dqa_desc, SEM, S, BH, scale_hi, scale_lo, qk_scale_hi, qk_scale_lo,
                           HEAD_D: gl.constexpr, BLK: gl.constexpr, STAGES: gl.constexpr,
                           CAUSAL: gl.constexpr, KREG: gl.constexpr, DQ: gl.constexpr,
                           DS_LAYOUT: gl.constexpr, SLOTS: gl.constexpr):
        """One program per (batch*head, block of 2·BLK keys) over the [B*H*S, D] rows of q, k,
        v, do, dk, dv and the [B*H*S] rows of lse2 and delta. Shared memory: K, V 4 tiles, and a
        stage (Q, dO, lse2, delta) 2 tiles + 512 B: at D 128 and 3 stages 162 KB. DQ (the
        one-pass, D 64): dQ partials added into dqa_desc's fp32 [B*H*S, D] rows in key-block
        order (SEM: a counter per query block), + 2 x 2 dSᵀ tiles and SLOTS fp32 tiles: 199 KB."""
        n_kb = S // (2 * BLK)
        if CAUSAL:   # key block 0 sees every query: the longest first, heads fastest
            hz = gl.program_id(0) % BH
            kb = gl.program_id(0) // BH
            q_lo = kb * (2 * BLK)          # queries before the program's first key: never
        else:        # head-major: a wave's programs share their head's Q, dO in L2
            hz = gl.program_id(0) // n_kb
            kb = gl.program_id(0) % n_kb
            q_lo = kb * 0
        start_n = kb * (2 * BLK)
        kv_row = hz * S + start_n
        n_it = (S - q_lo) // BLK
        q_row0 = hz * S + q_lo
        scale = scale_hi + scale_lo        # _join's values: the same scales, bit for bit
        qk_scale = qk_scale_hi + qk_scale_lo

        q_smem = gl.allocate_shared_memory(q_desc.dtype, [STAGES, BLK, HEAD_D], q_desc.layout)
        do_smem = gl.allocate_shared_memory(do_desc.dtype, [STAGES, BLK, HEAD_D], do_desc.layout)
        k_smem = gl.allocate_shared_memory(k_desc.dtype, [2, BLK, HEAD_D], k_desc.layout)
        v_smem = gl.allocate_shared_memory(v_desc.dtype, [2, BLK, HEAD_D], v_desc.layout)
        lse_smem = gl.allocate_shared_memory(gl.float32, [STAGES, BLK], lse_desc.layout)
        dl_smem = gl.allocate_shared_memory(gl.float32, [STAGES, BLK], dl_desc.layout)
        kv_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
        ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        mbarrier.init(kv_bar, count=1)
        for i in gl.static_range(STAGES):
            mbarrier.init(ready.index(i), count=1)    # the producer's expect, then the bytes
            mbarrier.init(empty.index(i), count=2)    # both consumers read every stage
        if DQ:
            ds_smem = gl.allocate_shared_memory(gl.bfloat16, [4, BLK, BLK], DS_LAYOUT)
            dq_smem = gl.allocate_shared_memory(gl.float32, [SLOTS, BLK, HEAD_D],
                                                dqa_desc.layout)
            ds_ready = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
            ds_free = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
            dq_full = gl.allocate_shared_memory(gl.int64, [SLOTS, 1], mbarrier.MBarrierLayout())
            dq_empty = gl.allocate_shared_memory(gl.int64, [SLOTS, 1], mbarrier.MBarrierLayout())
            for i in gl.static_range(2):
                mbarrier.init(ds_ready.index(i), count=1)   # the non-owner's half is in
                mbarrier.init(ds_free.index(i), count=1)    # the owner's dQ wgmmas retired
            for i in gl.static_range(SLOTS):
                mbarrier.init(dq_full.index(i), count=1)    # the owner's partial is in
                mbarrier.init(dq_empty.index(i), count=1)   # the writer's reduce completed
        else:   # stand-ins for the arguments DQ's code alone reads: never touched
            ds_smem, dq_smem = k_smem, k_smem
            ds_ready, ds_free, dq_full, dq_empty = ready, ready, ready, ready
        fence_async_shared()  # the barriers initialized before the copy engine sees them

        if DQ:
            gl.warp_specialize([
                (_dkdv_gluon_keys, (dk_desc, dv_desc, q_smem, do_smem, k_smem, v_smem, lse_smem,
                                    dl_smem, kv_bar, ready, empty, ds_smem, dq_smem, ds_ready,
                                    ds_free, dq_full, dq_empty, kv_row, n_it, qk_scale, scale, 0,
                                    BLK, HEAD_D, STAGES, CAUSAL, KREG, DQ, SLOTS)),
                (_dkdv_gluon_keys, (dk_desc, dv_desc, q_smem, do_smem, k_smem, v_smem, lse_smem,
                                    dl_smem, kv_bar, ready, empty, ds_smem, dq_smem, ds_ready,
                                    ds_free, dq_full, dq_empty, kv_row, n_it, qk_scale, scale, 1,
                                    BLK, HEAD_D, STAGES, CAUSAL, KREG, DQ, SLOTS)),
                (_dkdv_gluon_load, (q_desc, do_desc, k_desc, v_desc, lse_desc, dl_desc,
                                    q_smem, do_smem, k_smem, v_smem, lse_smem, dl_smem,
                                    kv_bar, ready, empty, kv_row, q_row0, n_it, BLK, STAGES)),
                (_dq_gluon_writer, (dqa_desc, dq_smem, dq_full, dq_empty, SEM,
                                    hz * (S // BLK) + q_lo // BLK, q_row0, n_it, kb, BLK,
                                    SLOTS)),
            ], [4, 1, 1], [240, 24, 24])
        else:
            gl.warp_specialize([
                (_dkdv_gluon_keys, (dk_desc, dv_desc, q_smem, do_smem, k_smem, v_smem, lse_smem,
                                    dl_smem, kv_bar, ready, empty, ds_smem, dq_smem, ds_ready,
                                    ds_free, dq_full, dq_empty, kv_row, n_it, qk_scale, scale, 0,
                                    BLK, HEAD_D, STAGES, CAUSAL, KREG, DQ, SLOTS)),
                (_dkdv_gluon_keys, (dk_desc, dv_desc, q_smem, do_smem, k_smem, v_smem, lse_smem,
                                    dl_smem, kv_bar, ready, empty, ds_smem, dq_smem, ds_ready,
                                    ds_free, dq_full, dq_empty, kv_row, n_it, qk_scale, scale, 1,
                                    BLK, HEAD_D, STAGES, CAUSAL, KREG, DQ, SLOTS)),
                (_dkdv_gluon_load, (q_desc, do_desc, k_desc, v_desc, lse_desc, dl_desc,
                                    q_smem, do_smem, k_smem, v_smem, lse_smem, dl_smem,
                                    kv_bar, ready, empty, kv_row, q_row0, n_it, BLK, STAGES)),
            ], [4, 1], [240, 24])

    @gluon.jit
    def _dq_gluon_load(q_desc, do_desc, k_desc, v_desc, q_smem, do_smem, k_smem, v_smem,
                       qdo_bar, ready, empty, q_row, kv_row0, n_kv,
                       BLK: gl.constexpr, STAGES: gl.constexpr):
        """The producer warp: this program's Q and dO once, then key blocks (K, V) into the
        ring."""
        _gluon_load_once(q_desc, do_desc, q_row, qdo_bar, q_smem, do_smem, BLK)
        nbytes: gl.constexpr = 2 * k_desc.block_type.nbytes
        for j in range(n_kv):
            s = j % STAGES
            mbarrier.wait(empty.index(s), ((j // STAGES) & 1) ^ 1)
            mbarrier.expect(ready.index(s), nbytes)
            row = kv_row0 + j * BLK
            tma.async_copy_global_to_shared(k_desc, [row, 0], ready.index(s), k_smem.index(s))
            tma.async_copy_global_to_shared(v_desc, [row, 0], ready.index(s), v_smem.index(s))

    @gluon.jit
    def _dq_gluon_issue(j, qa, doa, k_smem, v_smem, ready, BLK: gl.constexpr,
                        STAGES: gl.constexpr):
        """Wait for key block j; issue S = Q K_jᵀ and dP = dO V_jᵀ (Q in registers, dO in
        registers or shared memory)."""
        s_layout: gl.constexpr = gl.NVMMADistributedLayout(
            version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BLK, 16])
        s = j % STAGES
        mbarrier.wait(ready.index(s), (j // STAGES) & 1)
        zero = gl.zeros([BLK, BLK], gl.float32, layout=s_layout)
        s_tok = warpgroup_mma(qa, k_smem.index(s).permute((1, 0)), zero, use_acc=False,
                              is_async=True)
        dp_tok = warpgroup_mma(doa, v_smem.index(s).permute((1, 0)), zero, use_acc=False,
                               is_async=True)
        return s_tok, dp_tok

    @gluon.jit
    def _dq_gluon_rest(j, s_tok, dp_tok, lse, delta, dq, k_smem, qk_scale, MASK: gl.constexpr,
                       BLK: gl.constexpr, HEAD_D: gl.constexpr, STAGES: gl.constexpr):
        """Key block j once S_j and dP_j are issued: P, dS, and issue dQ += dS K_j (the caller
        retires it). MASK: the diagonal tile: keep key c <= query r."""
        s_layout: gl.constexpr = gl.NVMMADistributedLayout(
            version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BLK, 16])
        a_layout: gl.constexpr = gl.DotOperandLayout(
            operand_index=0, parent=gl.NVMMADistributedLayout(
                version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, HEAD_D, 16]), k_width=2)
        sc = warpgroup_mma_wait(num_outstanding=1, deps=(s_tok,))   # S done; dP may run
        p = gl.exp2(sc * qk_scale - lse[:, None])                   # under dP
        if MASK:
            r = gl.arange(0, BLK, layout=gl.SliceLayout(1, s_layout))
            c = gl.arange(0, BLK, layout=gl.SliceLayout(0, s_layout))
            p = gl.where(c[None, :] <= r[:, None], p, 0.0)
        dp = warpgroup_mma_wait(num_outstanding=0, deps=(dp_tok,))
        ds = p * (dp - delta[:, None])
        ds_op = gl.convert_layout(ds.to(gl.bfloat16), a_layout)
        dq_tok = warpgroup_mma(ds_op, k_smem.index(j % STAGES), dq, is_async=True)
        return dq_tok, ds_op

    @gluon.jit
    def _dq_gluon_step(j, qa, doa, lse, delta, dq, k_smem, v_smem, ready, empty, qk_scale,
                       MASK: gl.constexpr, BLK: gl.constexpr, HEAD_D: gl.constexpr,
                       STAGES: gl.constexpr):
        """Key block j into dq, every wgmma retired inside; releases its stage."""
        s_tok, dp_tok = _dq_gluon_issue(j, qa, doa, k_smem, v_smem, ready, BLK, STAGES)
        dq_tok, ds_op = _dq_gluon_rest(j, s_tok, dp_tok, lse, delta, dq, k_smem, qk_scale, MASK,
                                       BLK, HEAD_D, STAGES)
        dq, ds_op = warpgroup_mma_wait(num_outstanding=0, deps=(dq_tok, ds_op))
        mbarrier.arrive(empty.index(j % STAGES), count=1)
        return dq

    @gluon.jit
    def _dq_gluon_pair(j, qa, doa, lse, delta, dq, k_smem, v_smem, ready, empty, qk_scale,
                       BLK: gl.constexpr, HEAD_D: gl.constexpr, STAGES: gl.constexpr):
        """Key blocks j and j + 1: dQ_j stays in flight while S_{j+1}, dP_{j+1} are issued, and
        is retired (wait_group 2: groups retire in order) before the rest of j + 1."""
        s_tok, dp_tok = _dq_gluon_issue(j, qa, doa, k_smem, v_smem, ready, BLK, STAGES)
        dq_tok, ds_op = _dq_gluon_rest(j, s_tok, dp_tok, lse, delta, dq, k_smem, qk_scale, False,
                                       BLK, HEAD_D, STAGES)
        s_tok, dp_tok = _dq_gluon_issue(j + 1, qa, doa, k_smem, v_smem, ready, BLK, STAGES)
        dq, ds_op = warpgroup_mma_wait(num_outstanding=2, deps=(dq_tok, ds_op))
        mbarrier.arrive(empty.index(j % STAGES), count=1)
        dq_tok, ds_op = _dq_gluon_rest(j + 1, s_tok, dp_tok, lse, delta, dq, k_smem, qk_scale,
                                       False, BLK, HEAD_D, STAGES)
        dq, ds_op = warpgroup_mma_wait(num_outstanding=0, deps=(dq_tok, ds_op))
        mbarrier.arrive(empty.index((j + 1) % STAGES), count=1)
        return dq

    @gluon.jit
    def _dq_gluon_queries(dq_desc, lse_ptr, dl_ptr, q_smem, do_smem, k_smem, v_smem,
                          qdo_bar, ready, empty, q_row, start_m, n_kv, qk_scale, scale,
                          WG: gl.constexpr, BLK: gl.constexpr, HEAD_D: gl.constexpr,
                          STAGES: gl.constexpr, CAUSAL: gl.constexpr, DOREG: gl.constexpr,
                          PAIRS: gl.constexpr):
        """A consumer warpgroup: queries WG·64 ... WG·64 + 63 of the program's 128."""
        s_layout: gl.constexpr = gl.NVMMADistributedLayout(
            version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BLK, 16])
        o_layout: gl.constexpr = gl.NVMMADistributedLayout(
            version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, HEAD_D, 16])
        qa_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=s_layout,
                                                      k_width=2)
        rows = q_row + WG * BLK + gl.arange(0, BLK, layout=gl.SliceLayout(1, s_layout))
        lse = gl.load(lse_ptr + rows)                 # 2 rows per thread: kept in registers
        delta = gl.load(dl_ptr + rows)
        q_buf = q_smem.index(WG)
        mbarrier.wait(qdo_bar, 0)
        qa = q_buf.load(qa_layout)
        if DOREG:
            doa = do_smem.index(WG).load(qa_layout)
        else:
            doa = do_smem.index(WG)
        dq = gl.zeros([BLK, HEAD_D], gl.float32, layout=o_layout)
        if CAUSAL:
            n_full = start_m // BLK + WG              # key blocks wholly before these queries
        else:
            n_full = n_kv
        if PAIRS:
            for j in range(0, n_full - 1, 2):
                dq = _dq_gluon_pair(j, qa, doa, lse, delta, dq, k_smem, v_smem, ready, empty,
                                    qk_scale, BLK, HEAD_D, STAGES)
            if n_full % 2 == 1:
                dq = _dq_gluon_step(n_full - 1, qa, doa, lse, delta, dq, k_smem, v_smem, ready,
                                    empty, qk_scale, False, BLK, HEAD_D, STAGES)
        else:
            for j in range(n_full):
                dq = _dq_gluon_step(j, qa, doa, lse, delta, dq, k_smem, v_smem, ready, empty,
                                    qk_scale, False, BLK, HEAD_D, STAGES)
        if CAUSAL:
            dq = _dq_gluon_step(n_full, qa, doa, lse, delta, dq, k_smem, v_smem, ready, empty,
                                qk_scale, True, BLK, HEAD_D, STAGES)
            if WG == 0:
                # the ring's last key block is after all of WG0's queries: skipped, but released
                # once loaded (an arrival before the load would count for the stage's previous
                # occupant, which WG1 may still be reading)
                sk = (n_full + 1) % STAGES
                mbarrier.wait(ready.index(sk), ((n_full + 1) // STAGES) & 1)
                mbarrier.arrive(empty.index(sk), count=1)
        # the epilogue through this warpgroup's own Q buffer (Q is in registers)
        q_buf.store((dq * scale).to(dq_desc.dtype))
        fence_async_shared()
        tma.async_copy_shared_to_global(dq_desc, [q_row + WG * BLK, 0], q_buf)
        tma.store_wait(pendings=0)

    @gluon.jit
    def _dq_gluon_kernel(q_desc, do_desc, k_desc, v_desc, dq_desc, LSE, DELTA,
                         S, BH, scale_hi, scale_lo, qk_scale_hi, qk_scale_lo,
                         HEAD_D: gl.constexpr, BLK: gl.constexpr, STAGES: gl.constexpr,
                         CAUSAL: gl.constexpr, DOREG: gl.constexpr, PAIRS: gl.constexpr):
        """One program per (batch*head, block of 2·BLK queries). Shared memory: Q, dO 4 tiles,
        and a stage (K, V) 2 tiles: at D 128 and 4 stages 192 KB."""
        n_qb = S // (2 * BLK)
        if CAUSAL:   # the last query block sees every key: the longest first, heads fastest
            hz = gl.program_id(0) % BH
            start_m = (n_qb - 1 - gl.program_id(0) // BH) * (2 * BLK)
            n_kv = start_m // BLK + 2              # up to the diagonal of WG1's rows
        else:
            hz = gl.program_id(0) // n_qb
            start_m = gl.program_id(0) % n_qb * (2 * BLK)
            n_kv = S // BLK
        q_row = hz * S + start_m
        kv_row0 = hz * S
        scale = scale_hi + scale_lo
        qk_scale = qk_scale_hi + qk_scale_lo

        q_smem = gl.allocate_shared_memory(q_desc.dtype, [2, BLK, HEAD_D], q_desc.layout)
        do_smem = gl.allocate_shared_memory(do_desc.dtype, [2, BLK, HEAD_D], do_desc.layout)
        k_smem = gl.allocate_shared_memory(k_desc.dtype, [STAGES, BLK, HEAD_D], k_desc.layout)
        v_smem = gl.allocate_shared_memory(v_desc.dtype, [STAGES, BLK, HEAD_D], v_desc.layout)
        qdo_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
        ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        mbarrier.init(qdo_bar, count=1)
        for i in gl.static_range(STAGES):
            mbarrier.init(ready.index(i), count=1)
            mbarrier.init(empty.index(i), count=2)
        fence_async_shared()

        gl.warp_specialize([
            (_dq_gluon_queries, (dq_desc, LSE, DELTA, q_smem, do_smem, k_smem, v_smem,
                                 qdo_bar, ready, empty, q_row, start_m, n_kv, qk_scale, scale,
                                 0, BLK, HEAD_D, STAGES, CAUSAL, DOREG, PAIRS)),
            (_dq_gluon_queries, (dq_desc, LSE, DELTA, q_smem, do_smem, k_smem, v_smem,
                                 qdo_bar, ready, empty, q_row, start_m, n_kv, qk_scale, scale,
                                 1, BLK, HEAD_D, STAGES, CAUSAL, DOREG, PAIRS)),
            (_dq_gluon_load, (q_desc, do_desc, k_desc, v_desc, q_smem, do_smem, k_smem, v_smem,
                              qdo_bar, ready, empty, q_row, kv_row0, n_kv, BLK, STAGES)),
        ], [4, 1], [240, 24])


@triton.jit
def _dq_finish_kernel(DQ32, DQ, n, scale_hi, scale_lo, BLOCK: tl.constexpr):
    """The one-pass's dq: its fp32 sum times scale, cast (as _dq_gluon_kernel ends)."""
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(DQ32 + offs, mask=offs < n)
    tl.store(DQ + offs, (x * (scale_hi + scale_lo)).to(DQ.dtype.element_ty), mask=offs < n)


def _bwd_gluon(q, k, v, do, lse, delta, dq, dk, dv, causal, scale):
    B, H, S, D = q.shape
    plan = GLUON_BWD[D]
    blk = GLUON_BLOCK // 2   # rows of a consumer warpgroup, and of a streamed tile
    # [64, D] bf16 tiles in the 128-byte swizzle TMA and wgmma share; lse2 and delta as rows of
    # 64 fp32 (no swizzle)
    tile = gl.NVMMASharedLayout.get_default_for([blk, D], gl.bfloat16)
    row = gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=32, rank=1)
    d = {name: TensorDescriptor.from_tensor(t.view(B * H * S, D), [blk, D], tile)
         for name, t in dict(q=q, k=k, v=v, do=do, dq=dq, dk=dk, dv=dv).items()}
    grid = (B * H * (S // GLUON_BLOCK),)
    scales = (*_split(scale), *_split(scale * LOG2E))
    one_pass = plan["ONE_PASS"]
    if one_pass:   # dQ summed in fp32 (zeroed), a counter per query block of 64 (zeroed)
        dq32 = torch.zeros(B * H * S, D, dtype=torch.float32, device=q.device)
        f32_tile = gl.NVMMASharedLayout.get_default_for([blk, D], gl.float32)
        dq_out = (TensorDescriptor.from_tensor(dq32, [blk, D], f32_tile),
                  torch.zeros(B * H * (S // blk), dtype=torch.int32, device=q.device))
    _dkdv_gluon_kernel[grid](
        d["q"], d["do"], d["k"], d["v"], d["dk"], d["dv"],
        TensorDescriptor.from_tensor(lse.view(B * H * S), [blk], row),
        TensorDescriptor.from_tensor(delta.view(B * H * S), [blk], row),
        *(dq_out if one_pass else (None, None)),
        S, B * H, *scales, HEAD_D=D, BLK=blk, STAGES=plan["DKDV_STAGES"], CAUSAL=bool(causal),
        KREG=plan["KREG"], DQ=one_pass, SLOTS=DQ_SLOTS, num_warps=4,
        DS_LAYOUT=gl.NVMMASharedLayout.get_default_for([blk, blk], gl.bfloat16) if one_pass
        else None)
    if one_pass:
        _dq_finish_kernel[(triton.cdiv(dq.numel(), 4096),)](dq32, dq, dq.numel(), *_split(scale),
                                                           BLOCK=4096, num_warps=4)
        return
    _dq_gluon_kernel[grid](d["q"], d["do"], d["k"], d["v"], d["dq"], lse, delta, S, B * H,
                           *scales, HEAD_D=D, BLK=blk, STAGES=plan["DQ_STAGES"],
                           CAUSAL=bool(causal), DOREG=plan["DOREG"], PAIRS=plan["PAIRS"],
                           num_warps=4)


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


def _config(q) -> dict:
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


def _fwd(q, k, v, o, lse, causal, scale, launch, cfg):
    B, H, S, D = q.shape
    launch(_fwd_kernel)[_grid(B, H, S, cfg)](
        q, k, v, o, lse, *q.stride(), *k.stride(), *v.stride(), H, S, *_split(scale * LOG2E),
        HEAD_D=D, BLOCK_M=cfg.own, BLOCK_N=cfg.step, CAUSAL=bool(causal), **_kind(q),
        HOPPER=cfg.hopper, TMA=cfg.hopper and _tma(cfg, launch, k, v), num_warps=cfg.warps,
        num_stages=cfg.stages)


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


def _fwd_impl(q, k, v, causal, scale, launch):
    _check(q, k, v)
    o = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    lse = torch.empty(q.shape[:3], dtype=torch.float64 if q.dtype == torch.float64 else
                      torch.float32, device=q.device)
    if o.numel():
        cfg = _config(q)["fwd"]
        # the Gluon forward: D 128 (its register plan), not causal (it masks nothing)
        if cfg.gluon and q.shape[3] == 128 and not causal and _gluon_ok(q, k, v, launch):
            _fwd_gluon(q, k, v, o, lse, scale)
        else:
            _fwd(q, k, v, o, lse, causal, scale, launch, cfg)
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
    if cfg["dkdv"].gluon and lse.dtype == torch.float32 and _gluon_ok(q, k, v, launch, do, lse):
        _bwd_gluon(q, k, v, do, lse, delta, dq, dk, dv, causal, scale)
    else:
        _dkdv(q, k, v, do, lse, delta, dk, dv, causal, scale, launch, cfg["dkdv"])
        _dq(q, k, v, do, lse, delta, dq, causal, scale, launch, cfg["dq"])
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
    scale = _scale(q, scale)
    if torch.compiler.is_compiling():
        o, _lse = flash_attention_fwd(q, k, v, bool(causal), scale)  # no graph break
        return o
    return _FlashAttentionEager.apply(q, k, v, bool(causal), scale)
