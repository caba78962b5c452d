"""FlashAttention-2 backward in Gluon for Hopper (sm_90a), Triton 3.6.0 exactly.

    dq, dk, dv = backward(do, q, k, v, o, lse, causal, scale)          [B, H, S, D] bf16

Same math and outputs as the repository's solution `_bwd_impl(do, q, k, v, o, lse, causal,
scale, launch)` (solutions/13_flash_attention/triton/flash_attention.py):

    delta_i = rowsum(dO_i * O_i)                      fp32, a small Triton kernel (the solution's)
    P_ij    = exp2(qk_scale * Q_i K_jᵀ - lse2_i)      qk_scale = fp32(scale * log2 e), lse2 base 2
    dV_j    = Σ_i bf16(P_ij)ᵀ dO_i
    dP_ij   = dO_i V_jᵀ
    dS_ij   = P_ij ∘ (dP_ij - delta_i)                (P in fp32 here, as in the solution)
    dK_j    = scale * Σ_i bf16(dS_ij)ᵀ Q_i            (scale applied once, on the fp32 sum)
    dQ_i    = scale * Σ_j bf16(dS_ij) K_j
fp32 accumulators, P and dS rounded to bf16 before their matmuls, causal: the diagonal blocks
masked after the exp2 (P = 0 where key > query), the blocks above never visited. Deterministic:
two kernels, every output tile has one owner, no atomics, a fixed summation order (in fact the
same order as the solution: query blocks ascending for dK/dV, key blocks ascending for dQ).

Limits (asserted): bf16, D 64 (the register plan below is written for D 64), S % 128 == 0,
B*H*S < 2^31. Inputs of any strides are made contiguous first (a copy if they are not).

Napkin math (the leaderboard case: B 1, H 16, S 16384, D 64, causal)
--------------------------------------------------------------------
In 64 x 64 tiles the causal half is 256*257/2 = 32 896 (query, key) tile pairs per head,
526 336 in all. A 64x64x64 matmul is 0.52 MFLOP = 128 clk of one SM's tensor cores
(4096 dense bf16 flop/clk/SM). The dK/dV kernel does 4 per pair (Sᵀ, dPᵀ, dV, dK), the dQ
kernel 3 (S, dP, dQ): 7 x 128 clk x 526 336 / 132 SMs / ~1.75 GHz = 2.04 ms of pure
tensor-core time (1.17 ms dK/dV + 0.87 ms dQ). The exponentials are 2 x 64·64 per pair
(recomputed in both kernels) at 16 MUFU/clk/SM: 2 x 256 clk per pair = 1.17 ms if serial;
they must hide under the matmuls. At ~70-75 % tensor-core utilisation the backward is
~2.7-2.9 ms; the target (<= 3.1 ms) needs >= ~66 %. The solution's Triton backward is ~3.7 ms.

Shared-memory bandwidth: an SS wgmma m64n64k16 reads A (2 KB) + B (2 KB) per 32 clk = 128 B/clk,
exactly the SM's shared-memory bandwidth: N = 64 SS wgmmas can never run at full rate. Every
wgmma here is RS instead (A from registers): the loop-invariant operand (K, V in dK/dV; Q, dO
in dQ) is loaded to registers once, and the other A operands (Pᵀ, dSᵀ, dS) are produced in
registers anyway. Only the streamed B tile is read from shared memory: 64 B/clk.

Design (FlashAttention-3 style, warp specialized, transposed dK/dV)
-------------------------------------------------------------------
Both kernels: one CTA = two consumer warpgroups of 64 "owned" rows each (128 rows per CTA) +
one TMA producer warp; gl.warp_specialize, setmaxnreg 240 (consumers) / 24 (producer); the
streamed side goes through a STAGES-deep ring of 64-row tiles (ready barrier: 1 arrival, the
producer's expect-tx, + TMA bytes; empty barrier: 2 arrivals, one per consumer warpgroup).

dK/dV kernel: a CTA owns 128 keys (WG w: keys start_n + 64w ...). It keeps its K and V
halves in registers as wgmma A operands, and streams (Q_i, dO_i, lse2_i, delta_i) query
blocks of 64 through the ring (lse2/delta: 1-D TMA of 256 B each into the same stage). It
computes everything transposed, keys as the M dimension, so no register transpose is ever
needed:
    Sᵀ  = K Q_iᵀ        RS, B = Q_i tile permuted (K-major, like Kᵀ in the forward)
    dPᵀ = V dO_iᵀ       RS, B = dO_i tile permuted
    Pᵀ  = exp2(qk_scale Sᵀ - lse2[None, :]);  dSᵀ = Pᵀ ∘ (dPᵀ - delta[None, :])
    dV += bf16(Pᵀ) dO_i RS, A = Pᵀ in the accumulator-derived dot-operand layout (no shuffle:
                        its K dimension, the queries, is the accumulator's N), B = dO_i tile
    dK += bf16(dSᵀ) Q_i RS, B = Q_i tile
Pipelining inside a warpgroup: step i issues Sᵀ_i and dPᵀ_i back to back, waits with one group
outstanding (wgmma groups retire in order: Sᵀ_i done, dPᵀ_i may still run), computes Pᵀ while
dPᵀ runs, issues dV_i, waits for dPᵀ (dV_i may run), computes dSᵀ under dV_i, issues dK_i, then
retires dV_i, dK_i and releases stage i. The two warpgroups are not synchronised, so the warp
schedulers overlap one group's exponentials and waits with the other's wgmmas (an implicit
ping-pong, as in the colleague's forward).
Tried and dropped: FA3's deferred retire (dV_i, dK_i left in flight under step i+1's Sᵀ, dPᵀ
issue, their accumulators chained across the loop's back edge as async tokens). It compiled,
but ptxas then serialised every wgmma of the kernel (info C7512 "wgmma.mma_async instructions
are serialized due to insufficient register resources", a wait after each HGMMA in SASS), in
both kernels, even in dQ where the registers are plentiful: a wgmma in flight across a loop
back edge appears to be what ptxas refuses here (a cut-down test: the same dQ kernel with
the wait moved to the end of the step compiles clean). Retired at the end of each step: no C7512.
Registers per consumer thread (fp32 unless said): K, V operands 16+16 (bf16 pairs), dK, dV
32+32, Sᵀ, dPᵀ 32+32, Pᵀ, dSᵀ operands (bf16) 16+16, lse2, delta 16+16 (read from shared
memory just when needed); ptxas uses up to R203 of the 240 setmaxnreg gives (offline.txt).

dQ kernel: a CTA owns 128 queries (WG w: rows start_m + 64w ...), keeps its Q and dO halves in
registers (A operands) and its lse2, delta rows (2 + 2 registers), and streams (K_j, V_j) key
blocks of 64 through the ring:
    S  = Q K_jᵀ         RS, B = K_j permuted
    dP = dO V_jᵀ        RS, B = V_j permuted
    P  = exp2(qk_scale S - lse2[:, None]);  dS = P ∘ (dP - delta[:, None])
    dQ += bf16(dS) K_j  RS, B = K_j tile
with the same pipelining (P_j under dP_j; dQ_j retired at the end of the step). Up to R148
of 240: room for more work per warpgroup (see NOTES.md).

Causal: key/query blocks of 64 and warpgroups of 64 rows make every tile of a warpgroup either
whole (no mask), diagonal (mask c >= r or c <= r), or wholly masked (skipped: the warpgroup
only waits for the stage and releases it, so the 2-arrival ring stays in step). dK/dV streams
query blocks from start_n (the CTA's first key): WG0's first is its diagonal, WG1 skips it and
masks the second. dQ streams key blocks 0 .. start_m/64 + 1: WG0 masks the second-last and
skips the last, WG1 masks the last. Program order: the longest first (dK/dV: key block 0 sees
every query; dQ: the last query block sees every key), heads fastest, as the solution's first
kernels do. Not causal: head-major order (one head's K/V or Q/dO stay in L2 across a wave).
"""
import math

import torch
import triton
import triton.language as tl
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
from triton.experimental.gluon.language.nvidia.hopper import (
    tma,
    mbarrier,
    fence_async_shared,
    warpgroup_mma,
    warpgroup_mma_wait,
)

LOG2E = 1.4426950408889634

BLK = 64            # rows per warpgroup and per streamed tile (queries or keys)
STAGES = 4          # ring depth (dK/dV: 16.5 KB a stage; dQ: 16 KB)
CONSUMER_REGS = 240
PRODUCER_REGS = 24


# --- delta = rowsum(dO * O): the solution's small kernel, same tile and warps -------------------

@triton.jit
def _delta_kernel(O, DO, DELTA, HEAD_D: tl.constexpr, BLOCK_M: tl.constexpr):
    # o, do contiguous [B*H*S, D]; delta [B*H*S] fp32 (B*H*S a multiple of BLOCK_M)
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_D)
    ptrs = offs_m[:, None].to(tl.int64) * HEAD_D + offs_d[None, :]
    o = tl.load(O + ptrs)
    do = tl.load(DO + ptrs)
    tl.store(DELTA + offs_m, tl.sum(o.to(tl.float32) * do.to(tl.float32), 1))


# --- layouts (one consumer warpgroup: 4 warps stacked along M, 16 rows each) ---------------------

@gluon.constexpr_function
def _acc_layout(n):
    """wgmma accumulator layout of a [64, n] tile of one warpgroup."""
    return gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, n, 16])


@gluon.constexpr_function
def _op_layout(n):
    """Register A operand of a wgmma whose accumulator is [64, n]: the accumulator layout read
    as bf16 pairs (k_width 2). An fp32 accumulator of a [64, K] product converts to it without
    shuffles when K == the accumulator's n (Pᵀ, dSᵀ, dS here: 64 == 64)."""
    return gl.DotOperandLayout(operand_index=0, parent=_acc_layout(n), k_width=2)


# ================================================================================================
# dK/dV kernel
# ================================================================================================

@gluon.jit
def _dkdv_producer(q_desc, do_desc, k_desc, v_desc, lse_desc, dl_desc,
                   q_smem, do_smem, k_smem, v_smem, lse_smem, dl_smem,
                   kv_bar, ready, empty, kv_row, q_row0, n_it,
                   BLK: gl.constexpr, STAGES: gl.constexpr):
    # this CTA's K and V, once: two 64-row halves each, one per consumer warpgroup
    mbarrier.expect(kv_bar, 4 * k_desc.block_type.nbytes)
    for w in gl.static_range(2):
        tma.async_copy_global_to_shared(k_desc, [kv_row + w * BLK, 0], kv_bar, k_smem.index(w))
        tma.async_copy_global_to_shared(v_desc, [kv_row + w * BLK, 0], kv_bar, v_smem.index(w))
    nbytes: gl.constexpr = 2 * q_desc.block_type.nbytes + 2 * lse_desc.block_type.nbytes
    for i in range(n_it):
        s = i % STAGES
        # both consumers released the stage's previous occupant; the first pass waits for
        # parity 1 on fresh barriers, which returns at once
        mbarrier.wait(empty.index(s), ((i // STAGES) & 1) ^ 1)
        mbarrier.expect(ready.index(s), nbytes)
        row = q_row0 + i * BLK
        tma.async_copy_global_to_shared(q_desc, [row, 0], ready.index(s), q_smem.index(s))
        tma.async_copy_global_to_shared(do_desc, [row, 0], ready.index(s), do_smem.index(s))
        tma.async_copy_global_to_shared(lse_desc, [row], ready.index(s), lse_smem.index(s))
        tma.async_copy_global_to_shared(dl_desc, [row], ready.index(s), dl_smem.index(s))


@gluon.jit
def _dkdv_step(i, kop, vop, dk, dv, q_smem, do_smem, lse_smem, dl_smem, ready, empty, qk_scale,
               MASK: gl.constexpr, BLK: gl.constexpr, STAGES: gl.constexpr):
    """Query block i of the ring into (dk, dv); releases its stage at the end.
    MASK: the diagonal tile, keys and queries start at the same row: keep query c >= key r."""
    s_layout: gl.constexpr = _acc_layout(BLK)
    a_layout: gl.constexpr = _op_layout(BLK)          # Pᵀ / dSᵀ: K dim = queries = 64
    col_layout: gl.constexpr = gl.SliceLayout(0, s_layout)

    s = i % STAGES
    mbarrier.wait(ready.index(s), (i // STAGES) & 1)
    q = q_smem.index(s)
    do = do_smem.index(s)
    zero = gl.zeros([BLK, BLK], gl.float32, layout=s_layout)
    st_tok = warpgroup_mma(kop, q.permute((1, 0)), zero, use_acc=False, is_async=True)
    dpt_tok = warpgroup_mma(vop, do.permute((1, 0)), zero, use_acc=False, is_async=True)
    st = warpgroup_mma_wait(num_outstanding=1, deps=(st_tok,))   # Sᵀ_i done, dPᵀ_i may run

    lse = lse_smem.index(s).load(col_layout)
    pt = gl.exp2(st * qk_scale - lse[None, :])      # one FFMA + MUFU.EX2 per score, under dPᵀ
    if MASK:
        r = gl.arange(0, BLK, layout=gl.SliceLayout(1, s_layout))
        c = gl.arange(0, BLK, layout=col_layout)
        pt = gl.where(c[None, :] >= r[:, None], pt, 0.0)   # after exp2: an inf there is dropped
    pt_op = gl.convert_layout(pt.to(gl.bfloat16), a_layout)
    dv_tok = warpgroup_mma(pt_op, do, dv, is_async=True)

    dpt = warpgroup_mma_wait(num_outstanding=1, deps=(dpt_tok,))  # dPᵀ_i done, dV_i may run
    delta = dl_smem.index(s).load(col_layout)
    dst = pt * (dpt - delta[None, :])               # under the dV wgmma
    ds_op = gl.convert_layout(dst.to(gl.bfloat16), a_layout)
    dk_tok = warpgroup_mma(ds_op, q, dk, is_async=True)
    # retire dV_i, dK_i here: a wgmma left in flight across the loop's back edge (the deferred
    # retire of FA3) made ptxas serialise every wgmma of the kernel (C7512, "insufficient
    # register resources") in this Triton; the other warpgroup fills the tensor cores meanwhile
    dv, dk, pt_op, ds_op = warpgroup_mma_wait(num_outstanding=0, deps=(dv_tok, dk_tok, pt_op, ds_op))
    mbarrier.arrive(empty.index(s), count=1)
    return dk, dv


@gluon.jit
def _dkdv_consumer(dk_desc, dv_desc, q_smem, do_smem, k_smem, v_smem, lse_smem, dl_smem,
                   kv_bar, ready, empty, kv_row, n_it, qk_scale, scale,
                   WG: gl.constexpr, BLK: gl.constexpr, HEAD_D: gl.constexpr,
                   STAGES: gl.constexpr, CAUSAL: gl.constexpr):
    o_layout: gl.constexpr = _acc_layout(HEAD_D)
    kop_layout: gl.constexpr = _op_layout(BLK)        # K, V: A of Sᵀ, dPᵀ ([64, BLK] accs)

    mbarrier.wait(kv_bar, 0)
    kop = k_smem.index(WG).load(kop_layout)           # loop-invariant: registers, not smem
    vop = v_smem.index(WG).load(kop_layout)
    dk = gl.zeros([BLK, HEAD_D], gl.float32, layout=o_layout)
    dv = gl.zeros([BLK, HEAD_D], gl.float32, layout=o_layout)

    if CAUSAL:
        # the ring starts at query block start_n / 64: WG0's diagonal; for WG1 (keys
        # start_n + 64 ...) every query of it is before every key: skip, but take part in
        # the stage's release (after it is loaded, so the arrival counts for this occupant)
        if WG == 1:
            mbarrier.wait(ready.index(0), 0)
            mbarrier.arrive(empty.index(0), count=1)
        dk, dv = _dkdv_step(WG, kop, vop, dk, dv, q_smem, do_smem, lse_smem, dl_smem, ready,
                            empty, qk_scale, True, BLK, STAGES)
        i0 = WG + 1
    else:
        i0 = 0
    for i in range(i0, n_it):
        dk, dv = _dkdv_step(i, kop, vop, dk, dv, q_smem, do_smem, lse_smem, dl_smem, ready,
                            empty, qk_scale, False, BLK, STAGES)

    # epilogue: through this warpgroup's own K / V buffers (their contents are in registers)
    k_buf = k_smem.index(WG)
    v_buf = v_smem.index(WG)
    k_buf.store((dk * scale).to(dk_desc.dtype))
    v_buf.store(dv.to(dv_desc.dtype))
    fence_async_shared()
    tma.async_copy_shared_to_global(dk_desc, [kv_row + WG * BLK, 0], k_buf)
    tma.async_copy_shared_to_global(dv_desc, [kv_row + WG * BLK, 0], v_buf)
    tma.store_wait(pendings=0)


@gluon.jit
def _dkdv_kernel(q_desc, do_desc, k_desc, v_desc, dk_desc, dv_desc, lse_desc, dl_desc,
                 qk_scale, scale, S, BH,
                 HEAD_D: gl.constexpr, BLK: gl.constexpr, STAGES: gl.constexpr,
                 CAUSAL: gl.constexpr, CONSUMER_REGS: gl.constexpr, PRODUCER_REGS: gl.constexpr):
    n_kb = S // (2 * BLK)
    pid = gl.program_id(0)
    if CAUSAL:   # key block 0 sees every query: the longest first, heads fastest
        hz = pid % BH
        blk = pid // BH
    else:        # head-major: a wave's CTAs share their head's Q, dO in L2
        hz = pid // n_kb
        blk = pid % n_kb
    start_n = blk * (2 * BLK)
    kv_row = hz * S + start_n                 # rows of the [B·H·S, D] views (< 2^31)
    if CAUSAL:
        q_lo = start_n                        # queries before the CTA's first key: never
    else:
        q_lo = start_n * 0
    n_it = (S - q_lo) // BLK
    q_row0 = hz * S + q_lo

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
        mbarrier.init(ready.index(i), count=1)    # the producer's expect + TMA bytes
        mbarrier.init(empty.index(i), count=2)    # one arrival per consumer warpgroup
    fence_async_shared()                          # barrier init visible to TMA before use

    gl.warp_specialize([
        (_dkdv_consumer, (dk_desc, dv_desc, q_smem, do_smem, k_smem, v_smem, lse_smem, dl_smem,
                          kv_bar, ready, empty, kv_row, n_it, qk_scale, scale,
                          0, BLK, HEAD_D, STAGES, CAUSAL)),
        (_dkdv_consumer, (dk_desc, dv_desc, q_smem, do_smem, k_smem, v_smem, lse_smem, dl_smem,
                          kv_bar, ready, empty, kv_row, n_it, qk_scale, scale,
                          1, BLK, HEAD_D, STAGES, CAUSAL)),
        (_dkdv_producer, (q_desc, do_desc, k_desc, v_desc, lse_desc, dl_desc,
                          q_smem, do_smem, k_smem, v_smem, lse_smem, dl_smem,
                          kv_bar, ready, empty, kv_row, q_row0, n_it, BLK, STAGES)),
    ], [4, 1], [CONSUMER_REGS, PRODUCER_REGS])


# ================================================================================================
# dQ kernel
# ================================================================================================

@gluon.jit
def _dq_producer(q_desc, do_desc, k_desc, v_desc, q_smem, do_smem, k_smem, v_smem,
                 qdo_bar, ready, empty, q_row, kv_row0, n_kv,
                 BLK: gl.constexpr, STAGES: gl.constexpr):
    mbarrier.expect(qdo_bar, 4 * q_desc.block_type.nbytes)
    for w in gl.static_range(2):
        tma.async_copy_global_to_shared(q_desc, [q_row + w * BLK, 0], qdo_bar, q_smem.index(w))
        tma.async_copy_global_to_shared(do_desc, [q_row + w * BLK, 0], qdo_bar, do_smem.index(w))
    nbytes: gl.constexpr = 2 * k_desc.block_type.nbytes
    for j in range(n_kv):
        s = j % STAGES
        mbarrier.wait(empty.index(s), ((j // STAGES) & 1) ^ 1)
        mbarrier.expect(ready.index(s), nbytes)
        row = kv_row0 + j * BLK
        tma.async_copy_global_to_shared(k_desc, [row, 0], ready.index(s), k_smem.index(s))
        tma.async_copy_global_to_shared(v_desc, [row, 0], ready.index(s), v_smem.index(s))


@gluon.jit
def _dq_step(j, qop, doop, lse, delta, dq, k_smem, v_smem, ready, empty, qk_scale,
             MASK: gl.constexpr, BLK: gl.constexpr, STAGES: gl.constexpr):
    """Key block j of the ring into dq; releases its stage at the end. MASK: the diagonal tile
    (queries and keys start at the same row): keep key c <= query r."""
    s_layout: gl.constexpr = _acc_layout(BLK)
    a_layout: gl.constexpr = _op_layout(BLK)          # dS: K dim = keys = 64

    s = j % STAGES
    mbarrier.wait(ready.index(s), (j // STAGES) & 1)
    k = k_smem.index(s)
    v = v_smem.index(s)
    zero = gl.zeros([BLK, BLK], gl.float32, layout=s_layout)
    s_tok = warpgroup_mma(qop, k.permute((1, 0)), zero, use_acc=False, is_async=True)
    dp_tok = warpgroup_mma(doop, v.permute((1, 0)), zero, use_acc=False, is_async=True)
    sc = warpgroup_mma_wait(num_outstanding=1, deps=(s_tok,))   # S_j done, dP_j may run

    p = gl.exp2(sc * qk_scale - lse[:, None])        # under the dP wgmma
    if MASK:
        r = gl.arange(0, BLK, layout=gl.SliceLayout(1, s_layout))
        c = gl.arange(0, BLK, layout=gl.SliceLayout(0, s_layout))
        p = gl.where(c[None, :] <= r[:, None], p, 0.0)
    dp = warpgroup_mma_wait(num_outstanding=0, deps=(dp_tok,))
    ds = p * (dp - delta[:, None])
    ds_op = gl.convert_layout(ds.to(gl.bfloat16), a_layout)
    dq_tok = warpgroup_mma(ds_op, k, dq, is_async=True)
    # retired here, not under the next step's S, dP: see _dkdv_step (ptxas C7512)
    dq, ds_op = warpgroup_mma_wait(num_outstanding=0, deps=(dq_tok, ds_op))
    mbarrier.arrive(empty.index(s), count=1)
    return dq


@gluon.jit
def _dq_consumer(dq_desc, lse_ptr, dl_ptr, q_smem, do_smem, k_smem, v_smem,
                 qdo_bar, ready, empty, q_row, start_m, n_kv, qk_scale, scale,
                 WG: gl.constexpr, BLK: gl.constexpr, HEAD_D: gl.constexpr,
                 STAGES: gl.constexpr, CAUSAL: gl.constexpr):
    s_layout: gl.constexpr = _acc_layout(BLK)
    o_layout: gl.constexpr = _acc_layout(HEAD_D)
    qop_layout: gl.constexpr = _op_layout(BLK)        # Q, dO: A of S, dP ([64, BLK] accs)
    row_layout: gl.constexpr = gl.SliceLayout(1, s_layout)

    rows = q_row + WG * BLK + gl.arange(0, BLK, layout=row_layout)
    lse = gl.load(lse_ptr + rows)                     # 2 rows per thread: registers
    delta = gl.load(dl_ptr + rows)
    mbarrier.wait(qdo_bar, 0)
    qop = q_smem.index(WG).load(qop_layout)
    doop = do_smem.index(WG).load(qop_layout)
    dq = gl.zeros([BLK, HEAD_D], gl.float32, layout=o_layout)

    if CAUSAL:
        n_full = start_m // BLK + WG                  # key blocks wholly before these queries
    else:
        n_full = n_kv
    for j in range(n_full):
        dq = _dq_step(j, qop, doop, lse, delta, dq, k_smem, v_smem, ready, empty, qk_scale,
                      False, BLK, STAGES)
    if CAUSAL:
        dq = _dq_step(n_full, qop, doop, lse, delta, dq, k_smem, v_smem, ready, empty, qk_scale,
                      True, BLK, STAGES)
        if WG == 0:
            # the ring's last key block (start_m + 64 ...) is after all of WG0's queries: skip
            # it, but release it once loaded (an arrival before the load would count for the
            # stage's previous occupant, which WG1 may still be reading)
            sk = (n_full + 1) % STAGES
            mbarrier.wait(ready.index(sk), ((n_full + 1) // STAGES) & 1)
            mbarrier.arrive(empty.index(sk), count=1)

    # epilogue: through this warpgroup's own Q buffer (its contents are in registers)
    q_buf = q_smem.index(WG)
    q_buf.store((dq * scale).to(dq_desc.dtype))
    fence_async_shared()
    tma.async_copy_shared_to_global(dq_desc, [q_row + WG * BLK, 0], q_buf)
    tma.store_wait(pendings=0)


@gluon.jit
def _dq_kernel(q_desc, do_desc, k_desc, v_desc, dq_desc, lse_ptr, dl_ptr,
               qk_scale, scale, S, BH,
               HEAD_D: gl.constexpr, BLK: gl.constexpr, STAGES: gl.constexpr,
               CAUSAL: gl.constexpr, CONSUMER_REGS: gl.constexpr, PRODUCER_REGS: gl.constexpr):
    n_qb = S // (2 * BLK)
    pid = gl.program_id(0)
    if CAUSAL:   # the last query block sees every key: the longest first, heads fastest
        hz = pid % BH
        blk = n_qb - 1 - pid // BH
    else:
        hz = pid // n_qb
        blk = pid % n_qb
    start_m = blk * (2 * BLK)
    q_row = hz * S + start_m
    kv_row0 = hz * S
    if CAUSAL:
        n_kv = start_m // BLK + 2                 # up to the diagonal of WG1's rows
    else:
        n_kv = S // BLK

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
        (_dq_consumer, (dq_desc, lse_ptr, dl_ptr, q_smem, do_smem, k_smem, v_smem,
                        qdo_bar, ready, empty, q_row, start_m, n_kv, qk_scale, scale,
                        0, BLK, HEAD_D, STAGES, CAUSAL)),
        (_dq_consumer, (dq_desc, lse_ptr, dl_ptr, q_smem, do_smem, k_smem, v_smem,
                        qdo_bar, ready, empty, q_row, start_m, n_kv, qk_scale, scale,
                        1, BLK, HEAD_D, STAGES, CAUSAL)),
        (_dq_producer, (q_desc, do_desc, k_desc, v_desc, q_smem, do_smem, k_smem, v_smem,
                        qdo_bar, ready, empty, q_row, kv_row0, n_kv, BLK, STAGES)),
    ], [4, 1], [CONSUMER_REGS, PRODUCER_REGS])


# ================================================================================================
# host
# ================================================================================================

def tile_layout(D):
    """NVMMA shared layout (128-byte swizzle at D 64) of a [64, D] bf16 tile."""
    return gl.NVMMASharedLayout.get_default_for([BLK, D], gl.bfloat16)


def row_layout():
    """Shared layout of a 1-D [64] fp32 chunk of lse2 / delta (TMA, no swizzle)."""
    return gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=32, rank=1)


def make_descs(q, k, v, do, dq, dk, dv, lse, delta):
    """TMA descriptors over the [B·H·S, D] views of contiguous tensors, and over the flat lse2
    and delta ([B·H·S] fp32)."""
    B, H, S, D = q.shape
    tl_ = tile_layout(D)
    rl = row_layout()
    d2 = {name: TensorDescriptor.from_tensor(t.view(B * H * S, D), [BLK, D], tl_)
          for name, t in dict(q=q, k=k, v=v, do=do, dq=dq, dk=dk, dv=dv).items()}
    d2["lse"] = TensorDescriptor.from_tensor(lse.view(B * H * S), [BLK], rl)
    d2["delta"] = TensorDescriptor.from_tensor(delta.view(B * H * S), [BLK], rl)
    return d2


def _constexprs(D, causal):
    return dict(HEAD_D=D, BLK=BLK, STAGES=STAGES, CAUSAL=bool(causal),
                CONSUMER_REGS=CONSUMER_REGS, PRODUCER_REGS=PRODUCER_REGS)


def backward(do, q, k, v, o, lse, causal, scale):
    """dq, dk, dv of o = softmax(scale q kᵀ (+ causal mask)) v, given o and lse2 [B, H, S] fp32
    (base 2) from the forward: the solution's `_bwd_impl(do, q, k, v, o, lse, causal, scale,
    launch)` semantics for bf16, D 64, S % 128 == 0."""
    assert q.dtype == torch.bfloat16 and all(t.dtype == q.dtype for t in (k, v, o, do))
    assert q.dim() == 4 and all(t.shape == q.shape for t in (k, v, o, do))
    B, H, S, D = q.shape
    assert D == 64, "the register plan of these kernels is written for D 64"
    assert S % (2 * BLK) == 0, "S must be a multiple of 128"
    assert B * H * S < 2 ** 31
    assert lse.dtype == torch.float32 and tuple(lse.shape) == (B, H, S)
    q, k, v, o, do, lse = (t.contiguous() for t in (q, k, v, o, do, lse))
    if scale is None:
        scale = 1.0 / math.sqrt(D)
    dq, dk, dv = (torch.empty_like(q) for _ in range(3))
    delta = torch.empty(B * H * S, dtype=torch.float32, device=q.device)
    _delta_kernel[(B * H * S // 64,)](o, do, delta, HEAD_D=D, BLOCK_M=64, num_warps=4)
    d = make_descs(q, k, v, do, dq, dk, dv, lse, delta)
    grid = (B * H * (S // (2 * BLK)),)
    ce = _constexprs(D, causal)
    _dkdv_kernel[grid](d["q"], d["do"], d["k"], d["v"], d["dk"], d["dv"], d["lse"], d["delta"],
                       scale * LOG2E, scale, S, B * H, **ce, num_warps=4)
    _dq_kernel[grid](d["q"], d["do"], d["k"], d["v"], d["dq"], lse, delta,
                     scale * LOG2E, scale, S, B * H, **ce, num_warps=4)
    return dq, dk, dv
