"""Issue 38 candidates: exercise 13's Triton FlashAttention (solutions/13_flash_attention/triton/
flash_attention.py), its kernels copied and changed by per-kernel switches. The math, the
dtypes of every intermediate and the order of every sum are the solution's (see NOTES.md):

  pipe     forward: the scores of key block j+1 are issued to the tensor cores before the
           softmax of block j runs (FlashAttention-3's intra-warpgroup overlap, written in the
           loop's order so that Triton 3.6 keeps that matmul in flight: see _fwd_inner_pipe).
           dQ and dK/dV: the same for dP (dQ) / dPᵀ (dK/dV) of the next block.
  reg      the loop-invariant A operand of the score matmuls (q in the forward and dQ, k and v
           in dK/dV) held in registers instead of shared memory (wgmma RS instead of SS): half
           the shared-memory reads of those matmuls. Triton does it when an elementwise op sits
           between the load and the dot (its MMAV3HoistLayoutConversion): `x + 0`, exact.
  persist  a persistent grid: PERSIST programs per SM loop over the tiles (head-major when not
           causal; longest rows first, zigzag over the programs, when causal), and with TMA the
           descriptors are built once per program over all heads' rows ("flat") instead of
           once per tile.

Entry points, each with the solution's semantics (variant: a key of VARIANTS or a dict):
  forward(q, k, v, causal, scale, variant)             = solution._fwd_impl(..., _direct)
  backward(do, q, k, v, o, lse, causal, scale, variant) = solution._bwd_impl(..., _direct)
  attention(q, k, v, causal=False, scale=None, variant) = solution.flash_attention (eager door)
"""
import math
import struct
from collections import namedtuple

import torch
import triton
import triton.language as tl

LOG2E = 1.4426950408889634

# The solution's Cfg plus: pipe, reg (see the top), persist (programs per SM; 0: one program per
# tile as in the solution), bmajor (the Hopper path's row tiles and descriptors in the first
# kernels' program order, block-major, longest causal rows of every head first, instead of
# head-major: at the leaderboard case the sweep measured block-major 6% faster in the forward)
Cfg = namedtuple("Cfg", "own step warps stages hopper tma pipe reg persist bmajor",
                 defaults=(False, False, False, False, 0, False))

# The solution's table (CONFIGS at commit time), the baseline every variant starts from
SOL = {64: dict(fwd=Cfg(128, 64, 8, 3), dkdv=Cfg(64, 64, 4, 3), dq=Cfg(128, 64, 8, 3)),
       128: dict(fwd=Cfg(128, 128, 8, 3, hopper=True, tma=True),
                 dkdv=Cfg(64, 64, 4, 2, hopper=True, tma=True),
                 dq=Cfg(128, 64, 8, 3, hopper=True))}


def _v(base, **kw):
    """A copy of a SOL table with some kernels replaced: _v(SOL[64], fwd=Cfg(...))."""
    t = dict(base)
    t.update(kw)
    return t


# The variants timed on the GPU (run.sh): name -> {D: {kernel: Cfg}}. 16-bit inputs on CUDA only;
# fp32/fp64 and the CPU interpreter use small tiles with the variant's switches (_config).
VARIANTS = {
    "base": SOL,   # the solution's kernels as copied here: must time as the solution does
    # forward: S_{j+1} on the tensor cores while the softmax of block j runs
    "pipe": {64: _v(SOL[64], fwd=Cfg(128, 64, 8, 3, pipe=True)),
             128: _v(SOL[128], fwd=Cfg(128, 64, 8, 3, True, True, pipe=True))},
    "pipe_tma": {64: _v(SOL[64], fwd=Cfg(128, 64, 8, 3, True, True, pipe=True, bmajor=True)),
                 128: _v(SOL[128], fwd=Cfg(128, 64, 8, 4, True, True, pipe=True))},
    # one warpgroup per program, 2-3 programs per SM: the programs' softmax and matmuls interleave
    "pipe4w": {64: _v(SOL[64], fwd=Cfg(64, 64, 4, 3, True, True, pipe=True, bmajor=True)),
               128: _v(SOL[128], fwd=Cfg(64, 64, 4, 2, True, True, pipe=True))},
    # persistent grids at D 128 (one program per SM for fwd and dQ, two for dK/dV)
    "persist": {64: SOL[64],
                128: _v(SOL[128], fwd=Cfg(128, 128, 8, 3, True, True, persist=1),
                        dkdv=Cfg(64, 64, 4, 2, True, True, persist=2),
                        dq=Cfg(128, 64, 8, 3, True, persist=1))},
    "pipe_persist": {64: SOL[64],
                     128: _v(SOL[128], fwd=Cfg(128, 64, 8, 3, True, True, pipe=True, persist=1),
                             dkdv=Cfg(64, 64, 4, 2, True, True, persist=2),
                             dq=Cfg(128, 64, 8, 3, True, persist=1))},
    # dK/dV: k and v in registers (every wgmma RS), smaller query steps
    "regkv": {64: _v(SOL[64], dkdv=Cfg(64, 32, 4, 3, True, True, reg=True, bmajor=True)),
              128: _v(SOL[128], dkdv=Cfg(64, 32, 4, 3, True, True, reg=True))},
    "regkv64": {64: _v(SOL[64], dkdv=Cfg(64, 64, 4, 3, True, True, reg=True, bmajor=True)),
                128: SOL[128]},
    # regkv's control: the same query step (the sweep's dK/dV winner alone), k and v in shared memory
    "tma6432": {64: _v(SOL[64], dkdv=Cfg(64, 32, 4, 4, True, True, bmajor=True)),
                128: SOL[128]},
    # dQ: dP of block j+1 on the tensor cores while P and dS of block j are formed
    "dqpipe": {64: _v(SOL[64], dq=Cfg(128, 32, 8, 3, True, True, pipe=True, bmajor=True)),
               128: _v(SOL[128], dq=Cfg(128, 32, 8, 4, True, pipe=True))},
    "bwdpipe": {64: _v(SOL[64], dkdv=Cfg(64, 32, 4, 4, True, True, pipe=True, reg=True, bmajor=True),
                       dq=Cfg(128, 32, 8, 3, True, True, pipe=True, bmajor=True)),
                128: _v(SOL[128], dq=Cfg(128, 32, 8, 4, True, pipe=True))},
}
# fp32/fp64 (no tensor cores to feed) and the CPU interpreter: the solution's small tiles
WIDE = Cfg(32, 32, 4, 1)
CPU = Cfg(16, 16, 1, 1)


@triton.jit
def _join(hi, lo, acc_ty: tl.constexpr):
    return (tl.zeros([], acc_ty) + hi + lo).to(acc_ty)


@triton.jit
def _mma(a, b, acc, PREC: tl.constexpr):
    if acc.dtype == tl.float64:
        return acc + tl.dot(a, b, input_precision=PREC)
    else:
        return tl.dot(a, b, acc, input_precision=PREC)


@triton.jit
def _head(X, off_hz, H, stride_b, stride_h):
    return X + (off_hz // H).to(tl.int64) * stride_b + (off_hz % H).to(tl.int64) * stride_h


@triton.jit
def _ptrs(base, rows, offs_d, stride_s, stride_d, T: tl.constexpr):
    if T:
        ptrs = base + rows[None, :] * stride_s + offs_d[:, None] * stride_d
    else:
        ptrs = base + rows[:, None] * stride_s + offs_d[None, :] * stride_d
    return ptrs


@triton.jit
def _load(base, rows, offs_d, stride_s, stride_d, S):
    return tl.load(_ptrs(base, rows, offs_d, stride_s, stride_d, False),
                   mask=(rows < S)[:, None], other=0.0)


@triton.jit
def _keep(offs_m, offs_n, S, CAUSAL: tl.constexpr):
    keep = offs_n[None, :] < S
    if CAUSAL:
        keep = keep & (offs_m[:, None] >= offs_n[None, :])
    return keep


@triton.jit
def _key_split(start_m, S, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr):
    if CAUSAL:
        mid, end = start_m * BLOCK_M, (start_m + 1) * BLOCK_M
    else:
        mid, end = (S // BLOCK_N) * BLOCK_N, S
    return mid, end


@triton.jit
def _program(S, BLOCK: tl.constexpr, REVERSE: tl.constexpr):
    n_blocks = tl.cdiv(S, BLOCK)
    pid = tl.program_id(0)
    off_hz, blk = pid // n_blocks, pid % n_blocks
    if REVERSE:
        blk = n_blocks - 1 - blk
    return off_hz, blk


@triton.jit
def _program_bm(BH, S, BLOCK: tl.constexpr, REVERSE: tl.constexpr):
    """(batch*head, block) in the first kernels' order from a 1-D grid: every head's block 0,
    then every head's block 1, ... (REVERSE: the last blocks first)."""
    n_blocks = tl.cdiv(S, BLOCK)
    pid = tl.program_id(0)
    off_hz, blk = pid % BH, pid // BH
    if REVERSE:
        blk = n_blocks - 1 - blk
    return off_hz, blk


@triton.jit
def _src(base, S, stride_s, HEAD_D: tl.constexpr, BLOCK: tl.constexpr, TMA: tl.constexpr):
    if TMA:
        src = tl.make_tensor_descriptor(base, shape=[S, HEAD_D], strides=[stride_s, 1],
                                        block_shape=[BLOCK, HEAD_D])
    else:
        src = base
    return src


@triton.jit
def _flat(X, BH, S, stride_s, HEAD_D: tl.constexpr, BLOCK: tl.constexpr, FLAT: tl.constexpr):
    """FLAT: one descriptor over every head's rows, [B*H*S, HEAD_D] (the host checked that the
    heads lie S rows apart, _flat_ok), built once per persistent program; else X itself."""
    if FLAT:
        src = tl.make_tensor_descriptor(X, shape=[BH * S, HEAD_D], strides=[stride_s, 1],
                                        block_shape=[BLOCK, HEAD_D])
    else:
        src = X
    return src


@triton.jit
def _head_src(X, flat, off_hz, H, S, stride_b, stride_h, stride_s, HEAD_D: tl.constexpr,
              BLOCK: tl.constexpr, TMA: tl.constexpr, FLAT: tl.constexpr):
    """Where one head's rows stream from and the row of its first one there: the flat
    descriptor and off_hz * S, or (as in the solution) the head's base / its own descriptor, 0."""
    if FLAT:
        src = flat
        row0 = off_hz * S
    else:
        src = _src(_head(X, off_hz, H, stride_b, stride_h), S, stride_s, HEAD_D, BLOCK, TMA)
        row0 = off_hz * 0
    return src, row0


@triton.jit
def _rows(src, row0, start, offs_d, stride_s, stride_d, S, BLOCK: tl.constexpr,
          BOUNDS: tl.constexpr, TMA: tl.constexpr):
    """The solution's _rows; with TMA the tile's first row is row0 + start (row0 = 0 for a
    head's own descriptor). A flat descriptor's rows past S are the next head's (or zeros past
    the last head): they meet the same masks as the zeros of a head's own descriptor (scores of
    keys past S masked, lse = inf for queries past S) and, finite, give the same results."""
    if TMA:
        tile = src.load([row0 + start, 0])
    else:
        rows = start + tl.arange(0, BLOCK)
        ptrs = src + rows[:, None] * stride_s + offs_d[None, :] * stride_d
        if BOUNDS:
            tile = tl.load(ptrs, mask=(rows < S)[:, None], other=0.0)
        else:
            tile = tl.load(ptrs)
    return tile


@triton.jit
def _persist_tile(i, pid, G, ZIGZAG: tl.constexpr):
    """The tile of a persistent program's i-th round: round-robin over the G programs, every
    other round reversed (ZIGZAG: the causal tiles come longest first, and a program that got a
    long one in this round gets a short one in the next)."""
    lane = pid
    if ZIGZAG:
        lane = tl.where(i % 2 == 1, G - 1 - pid, pid)
    return i * G + lane


# --- forward -------------------------------------------------------------------------------

@triton.jit
def _kT_tile(k_src, row0, start_n, offs_n, offs_d, stride_ks, stride_kd, S, BLOCK_N: tl.constexpr,
             MASKED: tl.constexpr, HOPPER: tl.constexpr, TMA: tl.constexpr):
    if HOPPER:
        kT = tl.trans(_rows(k_src, row0, start_n, offs_d, stride_ks, stride_kd, S, BLOCK_N,
                            MASKED, TMA))
    else:
        k_ptrs = _ptrs(k_src, offs_n, offs_d, stride_ks, stride_kd, True)
        if MASKED:
            kT = tl.load(k_ptrs, mask=offs_n[None, :] < S, other=0.0)
        else:
            kT = tl.load(k_ptrs)
    return kT


@triton.jit
def _v_tile(v_src, row0, start_n, offs_n, offs_d, stride_vs, stride_vd, S, BLOCK_N: tl.constexpr,
            MASKED: tl.constexpr, HOPPER: tl.constexpr, TMA: tl.constexpr):
    if HOPPER:
        v = _rows(v_src, row0, start_n, offs_d, stride_vs, stride_vd, S, BLOCK_N, MASKED, TMA)
    else:
        v_ptrs = _ptrs(v_src, offs_n, offs_d, stride_vs, stride_vd, False)
        if MASKED:
            v = tl.load(v_ptrs, mask=offs_n[:, None] < S, other=0.0)
        else:
            v = tl.load(v_ptrs)
    return v


@triton.jit
def _fwd_inner(acc, l_i, m_i, q, k_src, v_src, row0, stride_ks, stride_kd, stride_vs, stride_vd,
               offs_m, offs_d, lo, hi, S, qk_scale, BLOCK_N: tl.constexpr,
               CAUSAL: tl.constexpr, MASKED: tl.constexpr, PREC: tl.constexpr,
               HOPPER: tl.constexpr, TMA: tl.constexpr):
    """The solution's loop, unchanged."""
    offs_n0 = tl.arange(0, BLOCK_N)
    for start_n in range(lo, hi, BLOCK_N):
        offs_n = start_n + offs_n0
        kT = _kT_tile(k_src, row0, start_n, offs_n, offs_d, stride_ks, stride_kd, S, BLOCK_N,
                      MASKED, HOPPER, TMA)
        v = _v_tile(v_src, row0, start_n, offs_n, offs_d, stride_vs, stride_vd, S, BLOCK_N,
                    MASKED, HOPPER, TMA)
        qk = tl.dot(q, kT, input_precision=PREC)
        if MASKED:
            qk = tl.where(_keep(offs_m, offs_n, S, CAUSAL), qk, -1.0e30)
        m_ij = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
        p = tl.math.exp2(qk * qk_scale - m_ij[:, None])
        alpha = tl.math.exp2(m_i - m_ij)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None]
        acc = _mma(p.to(v.dtype), v, acc, PREC)
        m_i = m_ij
    return acc, l_i, m_i


@triton.jit
def _softmax_step(acc, l_i, m_i, qk, qk_scale):
    """One block's online-softmax update, the solution's arithmetic in its order (P V added by
    the caller): returns acc rescaled, l, m and P (fp32)."""
    m_ij = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
    p = tl.math.exp2(qk * qk_scale - m_ij[:, None])
    alpha = tl.math.exp2(m_i - m_ij)
    l_i = l_i * alpha + tl.sum(p, 1)
    acc = acc * alpha[:, None]
    return acc, l_i, m_ij, p


@triton.jit
def _fwd_inner_pipe(acc, l_i, m_i, q, k_src, v_src, row0, stride_ks, stride_kd, stride_vs,
                    stride_vd, offs_d, lo, hi, S, qk_scale, BLOCK_N: tl.constexpr,
                    PREC: tl.constexpr, HOPPER: tl.constexpr, TMA: tl.constexpr):
    """The unmasked key blocks lo, ..., hi - BLOCK_N (hi - lo a multiple of BLOCK_N), the same
    arithmetic as _fwd_inner in another order. Iteration j:
        acc += P_{j-1} V_{j-1}      used at once (acc * alpha below): Triton waits for it, and
                                    that wait also completes S_j, issued one iteration earlier
        S_{j+1} = q K_{j+1}ᵀ        only carried to the next iteration, where it is read after
                                    that wait: Triton leaves it in flight ("properly async")
        softmax of S_j              runs on the CUDA cores while S_{j+1} is on the tensor cores
    P is carried in fp32 and rounded just before its matmul (carried as bf16, Triton 3.6 stages it
    through shared memory instead of feeding the wgmma from registers). The last iteration's
    S_{j+1} repeats the last block (clamped): one extra q kᵀ per row block.
    acc += P V is the same matmul on the same values as in _fwd_inner, added in the same order:
    the results are the same bits."""
    if hi > lo:
        offs_n0 = tl.arange(0, BLOCK_N)
        last = hi - BLOCK_N
        kT = _kT_tile(k_src, row0, lo, lo + offs_n0, offs_d, stride_ks, stride_kd, S, BLOCK_N,
                      False, HOPPER, TMA)
        qk = tl.dot(q, kT, input_precision=PREC)
        nxt = tl.minimum(lo + BLOCK_N, last)
        kT = _kT_tile(k_src, row0, nxt, nxt + offs_n0, offs_d, stride_ks, stride_kd, S, BLOCK_N,
                      False, HOPPER, TMA)
        qk_next = tl.dot(q, kT, input_precision=PREC)
        acc, l_i, m_i, p_prev = _softmax_step(acc, l_i, m_i, qk, qk_scale)
        qk = qk_next
        for start_n in range(lo + BLOCK_N, hi, BLOCK_N):
            prev = start_n - BLOCK_N
            v = _v_tile(v_src, row0, prev, prev + offs_n0, offs_d, stride_vs, stride_vd, S,
                        BLOCK_N, False, HOPPER, TMA)
            acc = _mma(p_prev.to(v.dtype), v, acc, PREC)
            nxt = tl.minimum(start_n + BLOCK_N, last)
            kT = _kT_tile(k_src, row0, nxt, nxt + offs_n0, offs_d, stride_ks, stride_kd, S,
                          BLOCK_N, False, HOPPER, TMA)
            qk_next = tl.dot(q, kT, input_precision=PREC)
            acc, l_i, m_i, p_prev = _softmax_step(acc, l_i, m_i, qk, qk_scale)
            qk = qk_next
        v = _v_tile(v_src, row0, last, last + offs_n0, offs_d, stride_vs, stride_vd, S, BLOCK_N,
                    False, HOPPER, TMA)
        acc = _mma(p_prev.to(v.dtype), v, acc, PREC)
    return acc, l_i, m_i


@triton.jit
def _fwd_tile(Q, O, LSE, K, V, k_flat, v_flat, off_hz, start_m,
              stride_qb, stride_qh, stride_qs, stride_qd,
              stride_kb, stride_kh, stride_ks, stride_kd,
              stride_vb, stride_vh, stride_vs, stride_vd,
              H, S, qk_scale, HEAD_D: tl.constexpr, BLOCK_M: tl.constexpr,
              BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr, F64: tl.constexpr, PREC: tl.constexpr,
              HOPPER: tl.constexpr, TMA: tl.constexpr, PIPE: tl.constexpr, REG: tl.constexpr,
              FLAT: tl.constexpr):
    acc_ty = tl.float64 if F64 else tl.float32
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_D)
    q = _load(_head(Q, off_hz, H, stride_qb, stride_qh), offs_m, offs_d, stride_qs, stride_qd, S)
    if REG:
        q = q + tl.zeros_like(q)  # exact; makes Triton keep q in registers as the A operand (see the top)
    k_src, row0 = _head_src(K, k_flat, off_hz, H, S, stride_kb, stride_kh, stride_ks, HEAD_D,
                            BLOCK_N, TMA, FLAT)
    v_src, row0 = _head_src(V, v_flat, off_hz, H, S, stride_vb, stride_vh, stride_vs, HEAD_D,
                            BLOCK_N, TMA, FLAT)
    m_i = tl.full([BLOCK_M], float("-inf"), acc_ty)
    l_i = tl.zeros([BLOCK_M], acc_ty)
    acc = tl.zeros([BLOCK_M, HEAD_D], acc_ty)
    mid, end = _key_split(start_m, S, BLOCK_M, BLOCK_N, CAUSAL)
    if PIPE:
        acc, l_i, m_i = _fwd_inner_pipe(acc, l_i, m_i, q, k_src, v_src, row0, stride_ks,
                                        stride_kd, stride_vs, stride_vd, offs_d, 0, mid, S,
                                        qk_scale, BLOCK_N, PREC, HOPPER, TMA)
    else:
        acc, l_i, m_i = _fwd_inner(acc, l_i, m_i, q, k_src, v_src, row0, stride_ks, stride_kd,
                                   stride_vs, stride_vd, offs_m, offs_d, 0, mid, S, qk_scale,
                                   BLOCK_N, CAUSAL, False, PREC, HOPPER, TMA)
    acc, l_i, m_i = _fwd_inner(acc, l_i, m_i, q, k_src, v_src, row0, stride_ks, stride_kd,
                               stride_vs, stride_vd, offs_m, offs_d, mid, end, S, qk_scale,
                               BLOCK_N, CAUSAL, True, PREC, HOPPER, TMA)
    row_ok = offs_m < S
    o_ptrs = O + off_hz.to(tl.int64) * S * HEAD_D + offs_m[:, None] * HEAD_D + offs_d[None, :]
    tl.store(o_ptrs, (acc / l_i[:, None]).to(O.dtype.element_ty), mask=row_ok[:, None])
    tl.store(LSE + off_hz.to(tl.int64) * S + offs_m, m_i + tl.math.log2(l_i), mask=row_ok)


@triton.jit
def _fwd_kernel(Q, K, V, O, LSE,
                stride_qb, stride_qh, stride_qs, stride_qd,
                stride_kb, stride_kh, stride_ks, stride_kd,
                stride_vb, stride_vh, stride_vs, stride_vd,
                H, S, BH, scale_hi, scale_lo,
                HEAD_D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                CAUSAL: tl.constexpr, F64: tl.constexpr, PREC: tl.constexpr,
                HOPPER: tl.constexpr, TMA: tl.constexpr, PIPE: tl.constexpr, REG: tl.constexpr,
                PERSIST: tl.constexpr, FLAT: tl.constexpr, BMAJOR: tl.constexpr):
    acc_ty = tl.float64 if F64 else tl.float32
    qk_scale = _join(scale_hi, scale_lo, acc_ty)
    k_flat = _flat(K, BH, S, stride_ks, HEAD_D, BLOCK_N, FLAT)
    v_flat = _flat(V, BH, S, stride_vs, HEAD_D, BLOCK_N, FLAT)
    if PERSIST:
        pid = tl.program_id(0)
        G = tl.num_programs(0)
        n_blocks = tl.cdiv(S, BLOCK_M)
        total = BH * n_blocks
        for i in range(0, tl.cdiv(total, G)):
            t = _persist_tile(i, pid, G, CAUSAL)
            if t < total:
                if CAUSAL:   # the longest rows (last query blocks) of every head first
                    off_hz = t % BH
                    start_m = n_blocks - 1 - t // BH
                else:        # head-major: a round's programs share a few heads' K and V in L2
                    off_hz = t // n_blocks
                    start_m = t % n_blocks
                _fwd_tile(Q, O, LSE, K, V, k_flat, v_flat, off_hz, start_m,
                          stride_qb, stride_qh, stride_qs, stride_qd,
                          stride_kb, stride_kh, stride_ks, stride_kd,
                          stride_vb, stride_vh, stride_vs, stride_vd, H, S, qk_scale,
                          HEAD_D, BLOCK_M, BLOCK_N, CAUSAL, F64, PREC, HOPPER, TMA, PIPE, REG,
                          FLAT)
    else:
        if HOPPER and BMAJOR:
            off_hz, start_m = _program_bm(BH, S, BLOCK_M, CAUSAL)
        elif HOPPER:
            off_hz, start_m = _program(S, BLOCK_M, CAUSAL)
        else:
            off_hz = tl.program_id(0)
            start_m = tl.program_id(1)
            if CAUSAL:
                start_m = tl.num_programs(1) - 1 - start_m
        _fwd_tile(Q, O, LSE, K, V, k_flat, v_flat, off_hz, start_m,
                  stride_qb, stride_qh, stride_qs, stride_qd,
                  stride_kb, stride_kh, stride_ks, stride_kd,
                  stride_vb, stride_vh, stride_vs, stride_vd, H, S, qk_scale,
                  HEAD_D, BLOCK_M, BLOCK_N, CAUSAL, F64, PREC, HOPPER, TMA, PIPE, REG, FLAT)


# --- backward --------------------------------------------------------------------------------

@triton.jit
def _bwd_delta_kernel(O, DO, DELTA, stride_db, stride_dh, stride_ds, stride_dd,
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
def _qdo_tiles(q_src, do_src, row0, start_m, offs_m, offs_d, stride_qs, stride_qd, stride_ds,
               stride_dd, S, BLOCK_M: tl.constexpr, BOUNDS: tl.constexpr,
               HOPPER: tl.constexpr, TMA: tl.constexpr):
    """A query block's q and dO as the solution's dK/dV loop reads them: (q or None, qT, dO)."""
    if HOPPER:
        q = _rows(q_src, row0, start_m, offs_d, stride_qs, stride_qd, S, BLOCK_M, BOUNDS, TMA)
        do = _rows(do_src, row0, start_m, offs_d, stride_ds, stride_dd, S, BLOCK_M, BOUNDS, TMA)
        qT = tl.trans(q)
    else:
        q_ptrs = _ptrs(q_src, offs_m, offs_d, stride_qs, stride_qd, True)
        do_ptrs = _ptrs(do_src, offs_m, offs_d, stride_ds, stride_dd, False)
        if BOUNDS:
            qT = tl.load(q_ptrs, mask=(offs_m < S)[None, :], other=0.0)
            do = tl.load(do_ptrs, mask=(offs_m < S)[:, None], other=0.0)
        else:
            qT = tl.load(q_ptrs)
            do = tl.load(do_ptrs)
        q = tl.trans(qT)
    return q, qT, do


@triton.jit
def _lse_delta(lse_base, delta_base, offs_m, S, BOUNDS: tl.constexpr):
    if BOUNDS:
        ok = offs_m < S
        lse = tl.load(lse_base + offs_m, mask=ok, other=float("inf"))
        delta = tl.load(delta_base + offs_m, mask=ok, other=0.0)
    else:
        lse = tl.load(lse_base + offs_m)
        delta = tl.load(delta_base + offs_m)
    return lse, delta


@triton.jit
def _dkdv_inner(dk, dv, k, v, q_src, do_src, row0, lse_base, delta_base,
                stride_qs, stride_qd, stride_ds, stride_dd, offs_n, offs_d, lo, hi, S, qk_scale,
                BLOCK_M: tl.constexpr, DIAG: tl.constexpr, BOUNDS: tl.constexpr,
                PREC: tl.constexpr, HOPPER: tl.constexpr, TMA: tl.constexpr):
    """The solution's dK/dV loop, unchanged."""
    offs_m0 = tl.arange(0, BLOCK_M)
    for start_m in range(lo, hi, BLOCK_M):
        offs_m = start_m + offs_m0
        q, qT, do = _qdo_tiles(q_src, do_src, row0, start_m, offs_m, offs_d, stride_qs,
                               stride_qd, stride_ds, stride_dd, S, BLOCK_M, BOUNDS, HOPPER, TMA)
        lse, delta = _lse_delta(lse_base, delta_base, offs_m, S, BOUNDS)
        qkT = tl.dot(k, qT, input_precision=PREC)
        pT = tl.math.exp2(qkT * qk_scale - lse[None, :])
        if DIAG:
            pT = tl.where(offs_m[None, :] >= offs_n[:, None], pT, 0.0)
        dv = _mma(pT.to(do.dtype), do, dv, PREC)
        dpT = tl.dot(v, tl.trans(do), input_precision=PREC)
        dsT = pT * (dpT - delta[None, :])
        dk = _mma(dsT.to(q.dtype), q, dk, PREC)
    return dk, dv


@triton.jit
def _dkdv_inner_pipe(dk, dv, k, v, q_src, do_src, row0, lse_base, delta_base,
                     stride_qs, stride_qd, stride_ds, stride_dd, offs_d, lo, hi, S, qk_scale,
                     BLOCK_M: tl.constexpr, PREC: tl.constexpr, HOPPER: tl.constexpr,
                     TMA: tl.constexpr):
    """Unmasked query blocks lo ... hi - BLOCK_M (whole, before S): _dkdv_inner's arithmetic,
    with dPᵀ of block i+1 issued before block i's P and dS are formed (its wait is the one after
    q kᵀ of block i+1, at the next iteration's top). dK and dV get the same matmuls in the same
    order: the same bits. The last iteration's dPᵀ repeats the last block (clamped)."""
    if hi > lo:
        offs_m0 = tl.arange(0, BLOCK_M)
        last = hi - BLOCK_M
        q, qT, do = _qdo_tiles(q_src, do_src, row0, lo, lo + offs_m0, offs_d, stride_qs,
                               stride_qd, stride_ds, stride_dd, S, BLOCK_M, False, HOPPER, TMA)
        dpT = tl.dot(v, tl.trans(do), input_precision=PREC)
        for start_m in range(lo, hi, BLOCK_M):
            offs_m = start_m + offs_m0
            q, qT, do = _qdo_tiles(q_src, do_src, row0, start_m, offs_m, offs_d, stride_qs,
                                   stride_qd, stride_ds, stride_dd, S, BLOCK_M, False, HOPPER,
                                   TMA)
            lse, delta = _lse_delta(lse_base, delta_base, offs_m, S, False)
            qkT = tl.dot(k, qT, input_precision=PREC)          # waited on: completes dpT too
            nxt = tl.minimum(start_m + BLOCK_M, last)
            q2, qT2, do2 = _qdo_tiles(q_src, do_src, row0, nxt, nxt + offs_m0, offs_d, stride_qs,
                                      stride_qd, stride_ds, stride_dd, S, BLOCK_M, False, HOPPER,
                                      TMA)
            dpT_next = tl.dot(v, tl.trans(do2), input_precision=PREC)   # left in flight
            pT = tl.math.exp2(qkT * qk_scale - lse[None, :])
            dv = _mma(pT.to(do.dtype), do, dv, PREC)
            dsT = pT * (dpT - delta[None, :])
            dk = _mma(dsT.to(q.dtype), q, dk, PREC)
            dpT = dpT_next
    return dk, dv


@triton.jit
def _dkdv_tile(Q, K, V, DO, LSE, DELTA, DK, DV, q_flat, do_flat, off_hz, start_n,
               stride_qb, stride_qh, stride_qs, stride_qd,
               stride_kb, stride_kh, stride_ks, stride_kd,
               stride_vb, stride_vh, stride_vs, stride_vd,
               stride_db, stride_dh, stride_ds, stride_dd,
               H, S, scale, qk_scale, HEAD_D: tl.constexpr, BLOCK_N: tl.constexpr,
               BLOCK_M: tl.constexpr, CAUSAL: tl.constexpr, F64: tl.constexpr,
               PREC: tl.constexpr, HOPPER: tl.constexpr, TMA: tl.constexpr, PIPE: tl.constexpr,
               REG: tl.constexpr, FLAT: tl.constexpr):
    acc_ty = tl.float64 if F64 else tl.float32
    offs_n = start_n + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_D)
    k = _load(_head(K, off_hz, H, stride_kb, stride_kh), offs_n, offs_d, stride_ks, stride_kd, S)
    v = _load(_head(V, off_hz, H, stride_vb, stride_vh), offs_n, offs_d, stride_vs, stride_vd, S)
    if REG:  # exact; k and v then stay in registers as the A operands of k qᵀ and v dOᵀ
        k = k + tl.zeros_like(k)
        v = v + tl.zeros_like(v)
    q_src, row0 = _head_src(Q, q_flat, off_hz, H, S, stride_qb, stride_qh, stride_qs, HEAD_D,
                            BLOCK_M, TMA, FLAT)
    do_src, row0 = _head_src(DO, do_flat, off_hz, H, S, stride_db, stride_dh, stride_ds, HEAD_D,
                             BLOCK_M, TMA, FLAT)
    lse_base = LSE + off_hz.to(tl.int64) * S
    delta_base = DELTA + off_hz.to(tl.int64) * S
    dk = tl.zeros([BLOCK_N, HEAD_D], acc_ty)
    dv = tl.zeros([BLOCK_N, HEAD_D], acc_ty)
    full = (S // BLOCK_M) * BLOCK_M
    if CAUSAL:
        lo = start_n + BLOCK_N
        dk, dv = _dkdv_inner(dk, dv, k, v, q_src, do_src, row0, lse_base, delta_base, stride_qs,
                             stride_qd, stride_ds, stride_dd, offs_n, offs_d, start_n, lo, S,
                             qk_scale, BLOCK_M, True, True, PREC, HOPPER, TMA)
    else:
        lo = start_n * 0
    if PIPE:
        dk, dv = _dkdv_inner_pipe(dk, dv, k, v, q_src, do_src, row0, lse_base, delta_base,
                                  stride_qs, stride_qd, stride_ds, stride_dd, offs_d, lo, full,
                                  S, qk_scale, BLOCK_M, PREC, HOPPER, TMA)
    else:
        dk, dv = _dkdv_inner(dk, dv, k, v, q_src, do_src, row0, lse_base, delta_base, stride_qs,
                             stride_qd, stride_ds, stride_dd, offs_n, offs_d, lo, full, S,
                             qk_scale, BLOCK_M, False, False, PREC, HOPPER, TMA)
    dk, dv = _dkdv_inner(dk, dv, k, v, q_src, do_src, row0, lse_base, delta_base, stride_qs,
                         stride_qd, stride_ds, stride_dd, offs_n, offs_d, tl.maximum(lo, full),
                         S, S, qk_scale, BLOCK_M, False, True, PREC, HOPPER, TMA)
    out = off_hz.to(tl.int64) * S * HEAD_D + offs_n[:, None] * HEAD_D + offs_d[None, :]
    tl.store(DK + out, (dk * scale).to(DK.dtype.element_ty), mask=(offs_n < S)[:, None])
    tl.store(DV + out, dv.to(DV.dtype.element_ty), mask=(offs_n < S)[:, None])


@triton.jit
def _bwd_dkdv_kernel(Q, K, V, DO, LSE, DELTA, DK, DV,
                     stride_qb, stride_qh, stride_qs, stride_qd,
                     stride_kb, stride_kh, stride_ks, stride_kd,
                     stride_vb, stride_vh, stride_vs, stride_vd,
                     stride_db, stride_dh, stride_ds, stride_dd,
                     H, S, BH, scale_hi, scale_lo, qk_scale_hi, qk_scale_lo,
                     HEAD_D: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_M: tl.constexpr,
                     CAUSAL: tl.constexpr, F64: tl.constexpr, PREC: tl.constexpr,
                     HOPPER: tl.constexpr, TMA: tl.constexpr, PIPE: tl.constexpr,
                     REG: tl.constexpr, PERSIST: tl.constexpr, FLAT: tl.constexpr,
                     BMAJOR: tl.constexpr):
    acc_ty = tl.float64 if F64 else tl.float32
    scale = _join(scale_hi, scale_lo, acc_ty)
    qk_scale = _join(qk_scale_hi, qk_scale_lo, acc_ty)
    q_flat = _flat(Q, BH, S, stride_qs, HEAD_D, BLOCK_M, FLAT)
    do_flat = _flat(DO, BH, S, stride_ds, HEAD_D, BLOCK_M, FLAT)
    if PERSIST:
        pid = tl.program_id(0)
        G = tl.num_programs(0)
        n_blocks = tl.cdiv(S, BLOCK_N)
        total = BH * n_blocks
        for i in range(0, tl.cdiv(total, G)):
            t = _persist_tile(i, pid, G, CAUSAL)
            if t < total:
                if CAUSAL:   # key block 0 sees every query: heaviest first
                    off_hz = t % BH
                    blk = t // BH
                else:
                    off_hz = t // n_blocks
                    blk = t % n_blocks
                _dkdv_tile(Q, K, V, DO, LSE, DELTA, DK, DV, q_flat, do_flat, off_hz,
                           blk * BLOCK_N, stride_qb, stride_qh, stride_qs, stride_qd,
                           stride_kb, stride_kh, stride_ks, stride_kd,
                           stride_vb, stride_vh, stride_vs, stride_vd,
                           stride_db, stride_dh, stride_ds, stride_dd, H, S, scale, qk_scale,
                           HEAD_D, BLOCK_N, BLOCK_M, CAUSAL, F64, PREC, HOPPER, TMA, PIPE, REG,
                           FLAT)
    else:
        if HOPPER and BMAJOR:
            off_hz, blk = _program_bm(BH, S, BLOCK_N, False)
            start_n = blk * BLOCK_N
        elif HOPPER:
            off_hz, blk = _program(S, BLOCK_N, False)
            start_n = blk * BLOCK_N
        else:
            off_hz = tl.program_id(0)
            start_n = tl.program_id(1) * BLOCK_N
        _dkdv_tile(Q, K, V, DO, LSE, DELTA, DK, DV, q_flat, do_flat, off_hz, start_n,
                   stride_qb, stride_qh, stride_qs, stride_qd,
                   stride_kb, stride_kh, stride_ks, stride_kd,
                   stride_vb, stride_vh, stride_vs, stride_vd,
                   stride_db, stride_dh, stride_ds, stride_dd, H, S, scale, qk_scale,
                   HEAD_D, BLOCK_N, BLOCK_M, CAUSAL, F64, PREC, HOPPER, TMA, PIPE, REG, FLAT)


@triton.jit
def _kv_tiles(k_src, v_src, row0, start_n, offs_n, offs_d, stride_ks, stride_kd, stride_vs,
              stride_vd, S, BLOCK_N: tl.constexpr, MASKED: tl.constexpr, HOPPER: tl.constexpr,
              TMA: tl.constexpr):
    """A key block's (k or None, kT, vT) as the solution's dQ loop reads them."""
    if HOPPER:
        k = _rows(k_src, row0, start_n, offs_d, stride_ks, stride_kd, S, BLOCK_N, MASKED, TMA)
        v = _rows(v_src, row0, start_n, offs_d, stride_vs, stride_vd, S, BLOCK_N, MASKED, TMA)
        kT = tl.trans(k)
        vT = tl.trans(v)
    else:
        k_ptrs = _ptrs(k_src, offs_n, offs_d, stride_ks, stride_kd, True)
        v_ptrs = _ptrs(v_src, offs_n, offs_d, stride_vs, stride_vd, True)
        if MASKED:
            kT = tl.load(k_ptrs, mask=offs_n[None, :] < S, other=0.0)
            vT = tl.load(v_ptrs, mask=offs_n[None, :] < S, other=0.0)
        else:
            kT = tl.load(k_ptrs)
            vT = tl.load(v_ptrs)
        k = tl.trans(kT)
    return k, kT, vT


@triton.jit
def _dq_inner(dq, q, do, lse, delta, k_src, v_src, row0, stride_ks, stride_kd, stride_vs,
              stride_vd, offs_m, offs_d, lo, hi, S, qk_scale, BLOCK_N: tl.constexpr,
              CAUSAL: tl.constexpr, MASKED: tl.constexpr, PREC: tl.constexpr,
              HOPPER: tl.constexpr, TMA: tl.constexpr):
    """The solution's dQ loop, unchanged."""
    offs_n0 = tl.arange(0, BLOCK_N)
    for start_n in range(lo, hi, BLOCK_N):
        offs_n = start_n + offs_n0
        k, kT, vT = _kv_tiles(k_src, v_src, row0, start_n, offs_n, offs_d, stride_ks, stride_kd,
                              stride_vs, stride_vd, S, BLOCK_N, MASKED, HOPPER, TMA)
        qk = tl.dot(q, kT, input_precision=PREC)
        p = tl.math.exp2(qk * qk_scale - lse[:, None])
        if MASKED:
            p = tl.where(_keep(offs_m, offs_n, S, CAUSAL), p, 0.0)
        dp = tl.dot(do, vT, input_precision=PREC)
        ds = p * (dp - delta[:, None])
        dq = _mma(ds.to(k.dtype), k, dq, PREC)
    return dq


@triton.jit
def _dq_inner_pipe(dq, q, do, lse, delta, k_src, v_src, row0, stride_ks, stride_kd, stride_vs,
                   stride_vd, offs_d, lo, hi, S, qk_scale, BLOCK_N: tl.constexpr,
                   PREC: tl.constexpr, HOPPER: tl.constexpr, TMA: tl.constexpr):
    """Unmasked key blocks lo ... hi - BLOCK_N: _dq_inner's arithmetic, dP of block j+1 issued
    before block j's P and dS are formed (left in flight: its result is read next iteration,
    after the wait that q kᵀ brings). dQ gets the same matmuls in the same order: same bits."""
    if hi > lo:
        offs_n0 = tl.arange(0, BLOCK_N)
        last = hi - BLOCK_N
        k, kT, vT = _kv_tiles(k_src, v_src, row0, lo, lo + offs_n0, offs_d, stride_ks,
                              stride_kd, stride_vs, stride_vd, S, BLOCK_N, False, HOPPER, TMA)
        dp = tl.dot(do, vT, input_precision=PREC)
        for start_n in range(lo, hi, BLOCK_N):
            k, kT, vT = _kv_tiles(k_src, v_src, row0, start_n, start_n + offs_n0, offs_d,
                                  stride_ks, stride_kd, stride_vs, stride_vd, S, BLOCK_N, False,
                                  HOPPER, TMA)
            qk = tl.dot(q, kT, input_precision=PREC)            # waited on: completes dp too
            nxt = tl.minimum(start_n + BLOCK_N, last)
            k2, kT2, vT2 = _kv_tiles(k_src, v_src, row0, nxt, nxt + offs_n0, offs_d, stride_ks,
                                     stride_kd, stride_vs, stride_vd, S, BLOCK_N, False, HOPPER,
                                     TMA)
            dp_next = tl.dot(do, vT2, input_precision=PREC)    # left in flight
            p = tl.math.exp2(qk * qk_scale - lse[:, None])
            ds = p * (dp - delta[:, None])
            dq = _mma(ds.to(k.dtype), k, dq, PREC)
            dp = dp_next
    return dq


@triton.jit
def _dq_tile(Q, K, V, DO, LSE, DELTA, DQ, k_flat, v_flat, off_hz, start_m,
             stride_qb, stride_qh, stride_qs, stride_qd,
             stride_kb, stride_kh, stride_ks, stride_kd,
             stride_vb, stride_vh, stride_vs, stride_vd,
             stride_db, stride_dh, stride_ds, stride_dd,
             H, S, scale, qk_scale, HEAD_D: tl.constexpr, BLOCK_M: tl.constexpr,
             BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr, F64: tl.constexpr, PREC: tl.constexpr,
             HOPPER: tl.constexpr, TMA: tl.constexpr, PIPE: tl.constexpr, REG: tl.constexpr,
             FLAT: tl.constexpr):
    acc_ty = tl.float64 if F64 else tl.float32
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_D)
    row_ok = offs_m < S
    q = _load(_head(Q, off_hz, H, stride_qb, stride_qh), offs_m, offs_d, stride_qs, stride_qd, S)
    do = _load(_head(DO, off_hz, H, stride_db, stride_dh), offs_m, offs_d, stride_ds, stride_dd,
               S)
    if REG:  # exact; q and dO then stay in registers as the A operands of q kᵀ and dO vᵀ
        q = q + tl.zeros_like(q)
        do = do + tl.zeros_like(do)
    lse = tl.load(LSE + off_hz.to(tl.int64) * S + offs_m, mask=row_ok, other=float("inf"))
    delta = tl.load(DELTA + off_hz.to(tl.int64) * S + offs_m, mask=row_ok, other=0.0)
    k_src, row0 = _head_src(K, k_flat, off_hz, H, S, stride_kb, stride_kh, stride_ks, HEAD_D,
                            BLOCK_N, TMA, FLAT)
    v_src, row0 = _head_src(V, v_flat, off_hz, H, S, stride_vb, stride_vh, stride_vs, HEAD_D,
                            BLOCK_N, TMA, FLAT)
    dq = tl.zeros([BLOCK_M, HEAD_D], acc_ty)
    mid, end = _key_split(start_m, S, BLOCK_M, BLOCK_N, CAUSAL)
    if PIPE:
        dq = _dq_inner_pipe(dq, q, do, lse, delta, k_src, v_src, row0, stride_ks, stride_kd,
                            stride_vs, stride_vd, offs_d, 0, mid, S, qk_scale, BLOCK_N, PREC,
                            HOPPER, TMA)
    else:
        dq = _dq_inner(dq, q, do, lse, delta, k_src, v_src, row0, stride_ks, stride_kd,
                       stride_vs, stride_vd, offs_m, offs_d, 0, mid, S, qk_scale, BLOCK_N,
                       CAUSAL, False, PREC, HOPPER, TMA)
    dq = _dq_inner(dq, q, do, lse, delta, k_src, v_src, row0, stride_ks, stride_kd, stride_vs,
                   stride_vd, offs_m, offs_d, mid, end, S, qk_scale, BLOCK_N, CAUSAL, True, PREC,
                   HOPPER, TMA)
    tl.store(DQ + off_hz.to(tl.int64) * S * HEAD_D + offs_m[:, None] * HEAD_D + offs_d[None, :],
             (dq * scale).to(DQ.dtype.element_ty), mask=row_ok[:, None])


@triton.jit
def _bwd_dq_kernel(Q, K, V, DO, LSE, DELTA, DQ,
                   stride_qb, stride_qh, stride_qs, stride_qd,
                   stride_kb, stride_kh, stride_ks, stride_kd,
                   stride_vb, stride_vh, stride_vs, stride_vd,
                   stride_db, stride_dh, stride_ds, stride_dd,
                   H, S, BH, scale_hi, scale_lo, qk_scale_hi, qk_scale_lo,
                   HEAD_D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                   CAUSAL: tl.constexpr, F64: tl.constexpr, PREC: tl.constexpr,
                   HOPPER: tl.constexpr, TMA: tl.constexpr, PIPE: tl.constexpr,
                   REG: tl.constexpr, PERSIST: tl.constexpr, FLAT: tl.constexpr,
                   BMAJOR: tl.constexpr):
    acc_ty = tl.float64 if F64 else tl.float32
    scale = _join(scale_hi, scale_lo, acc_ty)
    qk_scale = _join(qk_scale_hi, qk_scale_lo, acc_ty)
    k_flat = _flat(K, BH, S, stride_ks, HEAD_D, BLOCK_N, FLAT)
    v_flat = _flat(V, BH, S, stride_vs, HEAD_D, BLOCK_N, FLAT)
    if PERSIST:
        pid = tl.program_id(0)
        G = tl.num_programs(0)
        n_blocks = tl.cdiv(S, BLOCK_M)
        total = BH * n_blocks
        for i in range(0, tl.cdiv(total, G)):
            t = _persist_tile(i, pid, G, CAUSAL)
            if t < total:
                if CAUSAL:
                    off_hz = t % BH
                    start_m = n_blocks - 1 - t // BH
                else:
                    off_hz = t // n_blocks
                    start_m = t % n_blocks
                _dq_tile(Q, K, V, DO, LSE, DELTA, DQ, k_flat, v_flat, off_hz, start_m,
                         stride_qb, stride_qh, stride_qs, stride_qd,
                         stride_kb, stride_kh, stride_ks, stride_kd,
                         stride_vb, stride_vh, stride_vs, stride_vd,
                         stride_db, stride_dh, stride_ds, stride_dd, H, S, scale, qk_scale,
                         HEAD_D, BLOCK_M, BLOCK_N, CAUSAL, F64, PREC, HOPPER, TMA, PIPE, REG,
                         FLAT)
    else:
        if HOPPER and BMAJOR:
            off_hz, start_m = _program_bm(BH, S, BLOCK_M, CAUSAL)
        elif HOPPER:
            off_hz, start_m = _program(S, BLOCK_M, CAUSAL)
        else:
            off_hz = tl.program_id(0)
            start_m = tl.program_id(1)
            if CAUSAL:
                start_m = tl.num_programs(1) - 1 - start_m
        _dq_tile(Q, K, V, DO, LSE, DELTA, DQ, k_flat, v_flat, off_hz, start_m,
                 stride_qb, stride_qh, stride_qs, stride_qd,
                 stride_kb, stride_kh, stride_ks, stride_kd,
                 stride_vb, stride_vh, stride_vs, stride_vd,
                 stride_db, stride_dh, stride_ds, stride_dd, H, S, scale, qk_scale,
                 HEAD_D, BLOCK_M, BLOCK_N, CAUSAL, F64, PREC, HOPPER, TMA, PIPE, REG, FLAT)


# --- the launchers -------------------------------------------------------------------------------

DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def _check(q, k, v) -> None:
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor) or t.dim() != 4 or t.dtype not in DTYPES:
            raise ValueError(f"{name}: a 4-D fp16/bf16/fp32/fp64 tensor wanted")
    if q.shape[-1] not in (64, 128):
        raise ValueError(f"head dim must be 64 or 128, got {q.shape[-1]}")
    for t in (k, v):
        if t.shape != q.shape or t.dtype != q.dtype or t.device != q.device:
            raise ValueError("k and v must match q's shape, dtype and device")


def _split(x: float) -> tuple[float, float]:
    f32 = lambda y: struct.unpack("f", struct.pack("f", y))[0]  # noqa: E731
    hi = f32(x)
    return hi, f32(x - hi)


def _kind(q) -> dict:
    prec = "ieee" if q.dtype in (torch.float32, torch.float64) else "tf32"
    return dict(F64=q.dtype == torch.float64, PREC=prec)


def _config(q, variant) -> dict:
    """The variant's table for 16-bit CUDA inputs; elsewhere the solution's small tiles with the
    variant's switches (pipe, reg, persist, and hopper/tma where they are on), so that the CPU
    interpreter runs the variant's code paths."""
    if not isinstance(variant, str):  # an explicit table {D: {kernel: Cfg}}: used as it is
        return variant[int(q.shape[-1])]
    table = VARIANTS[variant][int(q.shape[-1])]
    if q.is_cuda and q.dtype in (torch.float16, torch.bfloat16):
        return table
    small = CPU if not q.is_cuda else WIDE
    out = {}
    for kname, c in table.items():
        reg = c.reg and q.dtype in (torch.float16, torch.bfloat16)
        # the interpreter has no shared memory to speak of: keep the switches, small tiles
        out[kname] = small._replace(hopper=c.hopper, tma=c.tma, pipe=c.pipe, reg=reg,
                                    persist=c.persist, bmajor=c.bmajor)
    return out


def _scratch(size: int, alignment: int, stream):
    return torch.empty(size, dtype=torch.int8, device="cuda" if torch.cuda.is_available() else "cpu")


def _tma_ok(cfg, *ts) -> bool:
    """The solution's _tma (eager door): descriptors where the config asks and every tensor can be
    read by the copy engine; on the CPU interpreter too (it emulates descriptors)."""
    if not cfg.tma:
        return False
    if ts[0].is_cuda and torch.cuda.get_device_capability(ts[0].device)[0] < 9:
        return False
    size = ts[0].element_size()
    if not all(t.stride(-1) == 1 and t.stride(-2) > 0 and t.data_ptr() % 16 == 0
               and all(s * size % 16 == 0 for s in t.stride()[:-1]) for t in ts):
        return False
    triton.set_allocator(_scratch)
    return True


def _flat_ok(*ts) -> bool:
    """Every head's rows S apart in one strided run (a [B, H, S, D] tensor with the last dim
    contiguous, heads and batches not interleaved): one descriptor can cover all of them."""
    for t in ts:
        B, H, S, D = t.shape
        sb, sh, ss, sd = t.stride()
        if not (sd == 1 and (H == 1 or sh == S * ss) and (B == 1 or sb == H * S * ss)):
            return False
    return True


_NUM_SMS = {}


def _grid(B, H, S, cfg, device):
    blocks = triton.cdiv(S, cfg.own)
    if cfg.persist:
        if device.type == "cuda":
            idx = device.index if device.index is not None else torch.cuda.current_device()
            if idx not in _NUM_SMS:
                _NUM_SMS[idx] = torch.cuda.get_device_properties(idx).multi_processor_count
            progs = _NUM_SMS[idx] * cfg.persist
        else:
            progs = 3   # the interpreter: a few programs, so that each loops over several tiles
        return (max(1, min(B * H * blocks, progs)),)
    return (B * H * blocks,) if cfg.hopper else (B * H, blocks)


def _switches(cfg, tma, flat):
    return dict(HOPPER=cfg.hopper, TMA=tma, PIPE=cfg.pipe, REG=cfg.reg,
                PERSIST=bool(cfg.persist), FLAT=flat, BMAJOR=cfg.bmajor)


def _fwd(q, k, v, o, lse, causal, scale, cfg):
    B, H, S, D = q.shape
    tma = cfg.hopper and _tma_ok(cfg, k, v)
    flat = tma and bool(cfg.persist) and _flat_ok(k, v)
    _fwd_kernel[_grid(B, H, S, cfg, q.device)](
        q, k, v, o, lse, *q.stride(), *k.stride(), *v.stride(), H, S, B * H,
        *_split(scale * LOG2E), HEAD_D=D, BLOCK_M=cfg.own, BLOCK_N=cfg.step,
        CAUSAL=bool(causal), **_kind(q), **_switches(cfg, tma, flat), num_warps=cfg.warps,
        num_stages=cfg.stages)


def _dkdv(q, k, v, do, lse, delta, dk, dv, causal, scale, cfg):
    B, H, S, D = q.shape
    tma = cfg.hopper and _tma_ok(cfg, q, do)
    flat = tma and bool(cfg.persist) and _flat_ok(q, do)
    _bwd_dkdv_kernel[_grid(B, H, S, cfg, q.device)](
        q, k, v, do, lse, delta, dk, dv, *q.stride(), *k.stride(), *v.stride(), *do.stride(), H,
        S, B * H, *_split(scale), *_split(scale * LOG2E), HEAD_D=D, BLOCK_N=cfg.own,
        BLOCK_M=cfg.step, CAUSAL=bool(causal), **_kind(q), **_switches(cfg, tma, flat),
        num_warps=cfg.warps, num_stages=cfg.stages)


def _dq(q, k, v, do, lse, delta, dq, causal, scale, cfg):
    B, H, S, D = q.shape
    tma = cfg.hopper and _tma_ok(cfg, k, v)
    flat = tma and bool(cfg.persist) and _flat_ok(k, v)
    _bwd_dq_kernel[_grid(B, H, S, cfg, q.device)](
        q, k, v, do, lse, delta, dq, *q.stride(), *k.stride(), *v.stride(), *do.stride(), H, S,
        B * H, *_split(scale), *_split(scale * LOG2E), HEAD_D=D, BLOCK_M=cfg.own,
        BLOCK_N=cfg.step, CAUSAL=bool(causal), **_kind(q), **_switches(cfg, tma, flat),
        num_warps=cfg.warps, num_stages=cfg.stages)


def forward(q, k, v, causal, scale, variant="base"):
    """(o, lse2) as the solution's _fwd_impl / flash_attention_fwd op."""
    _check(q, k, v)
    o = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    lse = torch.empty(q.shape[:3], dtype=torch.float64 if q.dtype == torch.float64 else
                      torch.float32, device=q.device)
    if o.numel():
        _fwd(q, k, v, o, lse, causal, scale, _config(q, variant)["fwd"])
    return o, lse


def backward(do, q, k, v, o, lse, causal, scale, variant="base"):
    """(dq, dk, dv) as the solution's _bwd_impl / flash_attention_bwd op."""
    _check(q, k, v)
    if do.shape != q.shape or do.dtype != q.dtype:
        raise ValueError("grad of o must have q's shape and dtype")
    dq, dk, dv = (torch.empty(q.shape, dtype=q.dtype, device=q.device) for _ in range(3))
    if dq.numel() == 0:
        return dq, dk, dv
    B, H, S, D = q.shape
    cfg = _config(q, variant)
    delta = torch.empty_like(lse)
    _bwd_delta_kernel[(B * H, triton.cdiv(S, 64))](
        o, do, delta, *do.stride(), H, S, HEAD_D=D, BLOCK_M=64, F64=_kind(q)["F64"], num_warps=4)
    _dkdv(q, k, v, do, lse, delta, dk, dv, causal, scale, cfg["dkdv"])
    _dq(q, k, v, do, lse, delta, dq, causal, scale, cfg["dq"])
    return dq, dk, dv


class _Attention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, causal, scale, variant):
        o, lse = forward(q, k, v, causal, scale, variant)
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.causal, ctx.scale, ctx.variant = causal, scale, variant
        return o

    @staticmethod
    def backward(ctx, do):
        q, k, v, o, lse = ctx.saved_tensors
        dq, dk, dv = backward(do, q, k, v, o, lse, ctx.causal, ctx.scale, ctx.variant)
        return dq, dk, dv, None, None, None


def attention(q, k, v, causal=False, scale=None, variant="base"):
    """softmax(scale · q kᵀ (+ causal mask)) v, as the solution's flash_attention (eager door)."""
    _check(q, k, v)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    return _Attention.apply(q, k, v, bool(causal), scale, variant)
