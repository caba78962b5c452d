"""FlashAttention-2 backward in Gluon for Hopper (sm_90a), Triton 3.6.0 exactly: D 128.

    dq, dk, dv = backward(do, q, k, v, o, lse, causal, scale)          [B, H, S, 128] bf16

Same math, outputs and summation order as the repository's solution `_bwd_impl(do, q, k, v, o,
lse, causal, scale, launch)` (solutions/13_flash_attention/triton/flash_attention.py):

    delta_i = rowsum(dO_i * O_i)                      fp32, a small Triton kernel (the solution's)
    P_ij    = exp2(qk_scale * Q_i K_jᵀ - lse2_i)      qk_scale = fp32(scale * log2 e), lse2 base 2
    dV_j    = Σ_i bf16(P_ij)ᵀ dO_i
    dP_ij   = dO_i V_jᵀ
    dS_ij   = P_ij ∘ (dP_ij - delta_i)                (the fp32 P, as in the solution)
    dK_j    = scale * Σ_i bf16(dS_ij)ᵀ Q_i            (scale once, on the fp32 sum)
    dQ_i    = scale * Σ_j bf16(dS_ij) K_j
Deterministic: two kernels (dK/dV: one CTA owns 128 keys; dQ: one CTA owns 128 queries), every
output tile has exactly one owner, no atomics, and the solution's order of summation (query
blocks of 64 ascending into dK/dV, key blocks of 64 ascending into dQ; the tile products are
the solution's own wgmma shapes: m64n64k16 x 8 for S, m64n128k16 x 4 for the D-wide products).
Causal is supported too (the diagonal masked after the exp2, blocks above it never visited),
ported from the D 64 kernels of .whl/g38b; the benchmark case is not causal.

Limits (asserted): bf16, D 128, S % 128 == 0, B*H*S < 2^31. Inputs are made contiguous.

Napkin math (the D 128 benchmark case: B 4, H 32, S 4096, D 128, not causal)
----------------------------------------------------------------------------
7 products per (query, key) pair, each 2·S²·D per head: 7 x 2 x 4096² x 128 x 128 heads
= 3.85 TFLOP. One SM's tensor cores do 4096 dense bf16 flop/clk; 132 SMs at ~1.75 GHz:
~946 TFLOP/s, so 4.07 ms at 100 % (dK/dV 4/7: 2.33 ms, dQ 3/7: 1.75 ms). The solution's
backward (~6.6 ms) runs at ~62 %; the target (<= 6.1 ms incl. ~0.08 ms of delta) needs
>= ~68 %. Per warpgroup and 64 x 64 tile: a 64x64x128 product is 256 clk of the SM's tensor
cores; dK/dV does 4 (1024 clk) and dQ 3 (768 clk) around 4096 exp2 = 256 clk of MUFU
(16/clk/SM) plus ~3 FP32 ops per score: the exponentials are 1/4 (1/3) of the MMA time, a
lower ratio than the forward's 1/2 (whose Gluon kernel reached ~64 %), so the two-warpgroup
overlap has more slack than there. Grid: 4096 CTAs of 128 rows per kernel = 31.03 waves of
132, i.e. 32 (a last wave of 4 CTAs: ~3 %): dK/dV 64 steps x 2048 clk = 131 k clk a CTA,
x 32 = 2.39 ms at 100 %; dQ 98 k clk, 1.79 ms. Expected: 75-85 % -> dK/dV 2.8-3.2 ms, dQ
2.1-2.4 ms, backward 5.0-5.7 ms; at the forward's ~64 %: 6.6 ms (no gain). A guess.

Shared-memory bandwidth (128 B/clk/SM). An SS wgmma m64nNk16 reads A (2 KB) and B (32·N B) in
N/2 clk: 4096/N + 64 B/clk, i.e. 128 B/clk at N = 64 (all of it), 96 at N = 128; an RS one only
B: 64 B/clk. TMA writes of the streamed tiles add 16 B/clk (32 KB per 2048 clk of a CTA's MMA).
L2 -> SM: 32 KB per CTA step, ~12 B/clk/SM at 80 %, ~2.8 TB/s over 132 SMs (the forward of
.whl/g38 streams at the same rate per flop and ran at 1.817 ms); head-major order keeps the
streamed head (2 MB of Q, dO or K, V) in L2 for its 32 CTAs.

Registers (per consumer thread, 128 threads per warpgroup; setmaxnreg: 240 consumers, 24
producer: 2·128·240 + 128·24 <= 64 K). An fp32 [64, n] accumulator is n/2 registers, a bf16
[64, k] A operand k/4.

dK/dV kernel: each consumer warpgroup owns 64 keys; query blocks of 64 stream through the ring.
    dK, dV accumulators [64, 128] fp32       64 + 64
    Sᵀ -> Pᵀ, dPᵀ -> dSᵀ  [64, 64] fp32       32 + 32
    Pᵀ, dSᵀ as bf16 A operands               16 + 16
    lse2, delta in the column slice layout   16 + 16 (read from shared memory at use)
That is 224 + transients before any operand (ptxas: up to R228 of 240, offline.txt). K and V
(64 x 128 bf16: 32 registers each) cannot stay in registers as in the D 64 kernel (288 > 240),
so Sᵀ = K Qᵀ and dPᵀ = V dOᵀ are SS m64n64k16 (128 B/clk while they run) and dV += Pᵀ dO,
dK += dSᵀ Q are RS m64n128k16 (64 B/clk): on average (2·128 + 2·64)/4 = 96 B/clk + TMA 16 =
112 B/clk at 100 % tensor use: under the limit, but the SS phases are at it. This is
FlashAttention-3's hdim-128 plan (its SdP_swapAB: keys as M, 64 keys per warpgroup, 2
warpgroups, Pᵀ/dSᵀ RS into dV/dK), minus its dQ (FA3 adds a dQ product from shared memory and
atomics; here dQ is the second kernel, deterministic). Query blocks of 128 (SS at 96 B/clk)
would need Sᵀ, dPᵀ at 64 + 64 registers: 256 with dK, dV alone: no.
Switch KREG: K alone in registers (Sᵀ RS, 80 + 16 B/clk) for 32 more registers: it does NOT
fit (ptxas: spills and C7512, offline.txt), kept only to show it.
Order inside a step (OVERLAP True, the D 64 kernel's): issue Sᵀ, dPᵀ; wait Sᵀ; Pᵀ = exp2(..)
under dPᵀ; issue dV; wait dPᵀ; dSᵀ under dV; issue dK; wait all; release the stage (SASS: all
32 MUFU.EX2 of Pᵀ sit between the two waits, i.e. under dPᵀ). OVERLAP False (FA3's order):
dSᵀ computed before dV, dK are issued back to back (R237).

dQ kernel: each consumer warpgroup owns 64 queries; key blocks of 64 stream through the ring.
    Q, dO as bf16 A operands [64, 128]       32 + 32 (loaded once: every product is RS)
    dQ accumulator [64, 128] fp32            64
    S -> P, dP -> dS [64, 64] fp32           32 + 32, dS bf16 16, lse2/delta 2 + 2
~210 + transients (ptxas: R216). All three products RS at 64 B/clk (+16 TMA). Switch DOREG
False: dO from shared memory (dP SS, R184). In SASS ptxas moves 26 of the 32 MUFU.EX2 of P
after the wait for dP (nothing consumes P before dS needs dP; as in the D 64 kernel), so within
one warpgroup the exponentials do not run under dP; the other warpgroup covers them.

Shared memory: dK/dV: K, V halves 2 x 2 x 16 KB + STAGES x (Q 16 KB + dO 16 KB + 2 x 256 B)
= 194.3 KB at 4 stages; dQ: Q, dO 2 x 2 x 16 KB + STAGES x 32 KB = 192.3 KB at 4 stages. One
CTA per SM. The epilogues store dK, dV (dQ) through the warpgroup's own K, V (Q) buffer, free
by then. (A [64, 128] bf16 tile is two 128-byte-swizzled [64, 64] TMA boxes; Triton splits.)

Pipelining: by default every wgmma of a step is retired inside the step (a wgmma in flight
across the loop's back edge made ptxas serialise every wgmma: .whl/g38b/NOTES.md); the two
consumer warpgroups are not synchronised, so each one's exponentials and waits run under the
other's wgmmas (an implicit ping-pong, as in the forward of .whl/g38 that ran at 1.817 ms).
Switch DEFER (per kernel): the loop body is two steps, and step i's last products (dV_i, dK_i;
dQ_i) stay in flight while step i + 1's first products are issued, so one warpgroup's tensor
queue does not drain between steps; nothing is in flight across the back edge. dQ: S_{i+1},
dP_{i+1} are issued before dQ_i is retired (wait_group 2; R232). dK/dV: only Sᵀ_{i+1}
(wait_group 1; R235): with dPᵀ_{i+1} too, 64 + 64 + 32 + 32 + 32 registers belong to wgmmas in
flight and ptxas serialises every wgmma (C7512). An odd step count (causal) ends with a single
step. Switch CONCURRENT: dQ on a side stream alongside dK/dV (tail fill).
gpu.py checks and times every switch; CONFIG holds the plain defaults until it has run.

Program order: not causal: head-major (a wave of ~132 CTAs spans ~4 heads whose streamed
tensors stay in L2). Causal: the longest first, heads fastest (as in the D 64 kernels).
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

BLK = 64            # rows per consumer warpgroup and per streamed tile (queries or keys)
HEAD_D = 128
CONSUMER_REGS = 240
PRODUCER_REGS = 24

# The switches (constexprs of the kernels). The defaults are the plan above; gpu.py times the
# alternatives that compile cleanly (offline.txt).
CONFIG = dict(
    DKDV_STAGES=4,      # ring depth of (Q, dO, lse2, delta) query blocks: 32.5 KB a stage
    DKDV_KREG=False,    # K in registers (Sᵀ RS) instead of shared memory (SS)
    DKDV_OVERLAP=True,  # dSᵀ computed under the dV wgmma (else FA3's order)
    DKDV_DEFER=False,   # steps in pairs, dV_i/dK_i retired after Sᵀ_{i+1} is issued
    DQ_STAGES=4,        # ring depth of (K, V) key blocks: 32 KB a stage
    DQ_DOREG=True,      # dO in registers (dP RS) instead of shared memory (SS)
    DQ_DEFER=False,     # steps in pairs, dQ_j retired after S_{j+1}/dP_{j+1} are issued
    CONCURRENT=False,   # dQ on a side stream alongside dK/dV: one kernel's last, almost empty
                        # wave (4096 CTAs = 31.03 waves of 132) filled by the other's CTAs
)
_SIDE = {}


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
    """wgmma accumulator layout of a [64, n] tile of one warpgroup (instruction m64nNk16)."""
    return gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, n, 16])


@gluon.constexpr_function
def _op_layout(n):
    """Register A operand of a wgmma whose accumulator is [64, n] (k_width 2: bf16 pairs). Its
    thread->element map does not depend on n, and for a [64, 64] A it is the [64, 64]
    accumulator's own map: Pᵀ, dSᵀ, dS convert to it without shuffles."""
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
def _dkdv_issue_s(i, ka, q_smem, ready, BLK: gl.constexpr, STAGES: gl.constexpr):
    """Wait for query block i of the ring; issue Sᵀ = K Q_iᵀ (async). ka: K as the A operand
    (registers or this warpgroup's shared-memory half)."""
    s_layout: gl.constexpr = _acc_layout(BLK)           # Sᵀ, dPᵀ: [64 keys, 64 queries]
    s = i % STAGES
    mbarrier.wait(ready.index(s), (i // STAGES) & 1)
    zero = gl.zeros([BLK, BLK], gl.float32, layout=s_layout)
    return warpgroup_mma(ka, q_smem.index(s).permute((1, 0)), zero, use_acc=False, is_async=True)


@gluon.jit
def _dkdv_issue_dp(i, vb, do_smem, BLK: gl.constexpr, STAGES: gl.constexpr):
    """Issue dPᵀ = V dO_iᵀ (async; query block i has landed). vb: this warpgroup's V half."""
    s_layout: gl.constexpr = _acc_layout(BLK)
    zero = gl.zeros([BLK, BLK], gl.float32, layout=s_layout)
    return warpgroup_mma(vb, do_smem.index(i % STAGES).permute((1, 0)), zero, use_acc=False,
                         is_async=True)


@gluon.jit
def _dkdv_rest(i, st_tok, dpt_tok, dk, dv, q_smem, do_smem, lse_smem, dl_smem, qk_scale,
               MASK: gl.constexpr, OVERLAP: gl.constexpr, BLK: gl.constexpr,
               HEAD_D: gl.constexpr, STAGES: gl.constexpr):
    """The rest of query block i once Sᵀ_i, dPᵀ_i are issued (the only groups in flight): Pᵀ,
    dSᵀ, and issue dV += Pᵀ dO_i, dK += dSᵀ Q_i (async; the caller retires them). MASK: the
    diagonal tile (keys and queries start at the same row): keep query c >= key r."""
    s_layout: gl.constexpr = _acc_layout(BLK)
    a_layout: gl.constexpr = _op_layout(HEAD_D)         # Pᵀ, dSᵀ: A of the m64n128 products
    col_layout: gl.constexpr = gl.SliceLayout(0, s_layout)
    s = i % STAGES
    q = q_smem.index(s)
    do = do_smem.index(s)
    st = warpgroup_mma_wait(num_outstanding=1, deps=(st_tok,))   # Sᵀ_i done, dPᵀ_i may run
    lse = lse_smem.index(s).load(col_layout)
    pt = gl.exp2(st * qk_scale - lse[None, :])      # one FFMA + MUFU.EX2 per score, under dPᵀ
    if MASK:
        r = gl.arange(0, BLK, layout=gl.SliceLayout(1, s_layout))
        c = gl.arange(0, BLK, layout=col_layout)
        pt = gl.where(c[None, :] >= r[:, None], pt, 0.0)   # after exp2: an inf there is dropped
    pt_op = gl.convert_layout(pt.to(gl.bfloat16), a_layout)
    if OVERLAP:
        dv_tok = warpgroup_mma(pt_op, do, dv, is_async=True)
        dpt = warpgroup_mma_wait(num_outstanding=1, deps=(dpt_tok,))  # dPᵀ_i done, dV_i may run
        delta = dl_smem.index(s).load(col_layout)
        dst = pt * (dpt - delta[None, :])               # under the dV wgmma
        ds_op = gl.convert_layout(dst.to(gl.bfloat16), a_layout)
        dk_tok = warpgroup_mma(ds_op, q, dk, is_async=True)
    else:
        dpt = warpgroup_mma_wait(num_outstanding=0, deps=(dpt_tok,))
        delta = dl_smem.index(s).load(col_layout)
        dst = pt * (dpt - delta[None, :])
        ds_op = gl.convert_layout(dst.to(gl.bfloat16), a_layout)
        dv_tok = warpgroup_mma(pt_op, do, dv, is_async=True)
        dk_tok = warpgroup_mma(ds_op, q, dk, is_async=True)
    return dv_tok, dk_tok, pt_op, ds_op


@gluon.jit
def _dkdv_step(i, ka, vb, dk, dv, q_smem, do_smem, lse_smem, dl_smem, ready, empty, qk_scale,
               MASK: gl.constexpr, OVERLAP: gl.constexpr, BLK: gl.constexpr,
               HEAD_D: gl.constexpr, STAGES: gl.constexpr):
    """Query block i of the ring into (dk, dv), every wgmma retired inside; releases its stage."""
    st_tok = _dkdv_issue_s(i, ka, q_smem, ready, BLK, STAGES)
    dpt_tok = _dkdv_issue_dp(i, vb, do_smem, BLK, STAGES)
    dv_tok, dk_tok, pt_op, ds_op = _dkdv_rest(i, st_tok, dpt_tok, dk, dv, q_smem, do_smem,
                                              lse_smem, dl_smem, qk_scale, MASK, OVERLAP, BLK,
                                              HEAD_D, STAGES)
    dv, dk, pt_op, ds_op = warpgroup_mma_wait(num_outstanding=0, deps=(dv_tok, dk_tok, pt_op, ds_op))
    mbarrier.arrive(empty.index(i % STAGES), count=1)
    return dk, dv


@gluon.jit
def _dkdv_pair(i, ka, vb, dk, dv, q_smem, do_smem, lse_smem, dl_smem, ready, empty, qk_scale,
               OVERLAP: gl.constexpr, BLK: gl.constexpr, HEAD_D: gl.constexpr,
               STAGES: gl.constexpr):
    """Query blocks i and i + 1 (DEFER): dV_i, dK_i stay in flight while Sᵀ_{i+1} is issued
    and are retired (wait_group 1: groups retire in order) before dPᵀ_{i+1} is issued. Only
    Sᵀ_{i+1}: with dPᵀ_{i+1} as well, 64 + 64 + 32 + 32 + 32 registers are held by in-flight
    wgmmas and ptxas serialises them (C7512, offline.txt). Nothing is in flight across the
    loop's back edge (that made ptxas serialise wgmmas in the D 64 kernels)."""
    st_tok = _dkdv_issue_s(i, ka, q_smem, ready, BLK, STAGES)
    dpt_tok = _dkdv_issue_dp(i, vb, do_smem, BLK, STAGES)
    dv_tok, dk_tok, pt_op, ds_op = _dkdv_rest(i, st_tok, dpt_tok, dk, dv, q_smem, do_smem,
                                              lse_smem, dl_smem, qk_scale, False, OVERLAP, BLK,
                                              HEAD_D, STAGES)
    st_tok = _dkdv_issue_s(i + 1, ka, q_smem, ready, BLK, STAGES)
    dv, dk, pt_op, ds_op = warpgroup_mma_wait(num_outstanding=1, deps=(dv_tok, dk_tok, pt_op, ds_op))
    mbarrier.arrive(empty.index(i % STAGES), count=1)
    dpt_tok = _dkdv_issue_dp(i + 1, vb, do_smem, BLK, STAGES)
    dv_tok, dk_tok, pt_op, ds_op = _dkdv_rest(i + 1, st_tok, dpt_tok, dk, dv, q_smem, do_smem,
                                              lse_smem, dl_smem, qk_scale, False, OVERLAP, BLK,
                                              HEAD_D, STAGES)
    dv, dk, pt_op, ds_op = warpgroup_mma_wait(num_outstanding=0, deps=(dv_tok, dk_tok, pt_op, ds_op))
    mbarrier.arrive(empty.index((i + 1) % STAGES), count=1)
    return dk, dv


@gluon.jit
def _dkdv_consumer(dk_desc, dv_desc, q_smem, do_smem, k_smem, v_smem, lse_smem, dl_smem,
                   kv_bar, ready, empty, kv_row, n_it, qk_scale, scale,
                   WG: gl.constexpr, BLK: gl.constexpr, HEAD_D: gl.constexpr,
                   STAGES: gl.constexpr, CAUSAL: gl.constexpr, KREG: gl.constexpr,
                   OVERLAP: gl.constexpr, DEFER: gl.constexpr):
    o_layout: gl.constexpr = _acc_layout(HEAD_D)

    k_buf = k_smem.index(WG)
    v_buf = v_smem.index(WG)
    mbarrier.wait(kv_bar, 0)
    if KREG:
        ka = k_buf.load(_op_layout(BLK))              # K: A of Sᵀ ([64, 64] accumulator)
    else:
        ka = k_buf
    dk = gl.zeros([BLK, HEAD_D], gl.float32, layout=o_layout)
    dv = gl.zeros([BLK, HEAD_D], gl.float32, layout=o_layout)

    if CAUSAL:
        # the ring starts at query block start_n / 64: WG0's diagonal; for WG1 (keys
        # start_n + 64 ...) every query of it is before every key: skip, but take part in
        # the stage's release (after it is loaded, so the arrival counts for this occupant)
        if WG == 1:
            mbarrier.wait(ready.index(0), 0)
            mbarrier.arrive(empty.index(0), count=1)
        dk, dv = _dkdv_step(WG, ka, v_buf, dk, dv, q_smem, do_smem, lse_smem, dl_smem, ready,
                            empty, qk_scale, True, OVERLAP, BLK, HEAD_D, STAGES)
        i0 = WG + 1
    else:
        i0 = 0
    if DEFER:
        # pairs of steps; an odd count (causal WG0) ends with a single step
        for i in range(i0, n_it - 1, 2):
            dk, dv = _dkdv_pair(i, ka, v_buf, dk, dv, q_smem, do_smem, lse_smem, dl_smem, ready,
                                empty, qk_scale, OVERLAP, BLK, HEAD_D, STAGES)
        if (n_it - i0) % 2 == 1:
            dk, dv = _dkdv_step(n_it - 1, ka, v_buf, dk, dv, q_smem, do_smem, lse_smem, dl_smem,
                                ready, empty, qk_scale, False, OVERLAP, BLK, HEAD_D, STAGES)
    else:
        for i in range(i0, n_it):
            dk, dv = _dkdv_step(i, ka, v_buf, dk, dv, q_smem, do_smem, lse_smem, dl_smem, ready,
                                empty, qk_scale, False, OVERLAP, BLK, HEAD_D, STAGES)

    # epilogue: through this warpgroup's own K / V halves (every wgmma reading them retired)
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
                 CAUSAL: gl.constexpr, KREG: gl.constexpr, OVERLAP: gl.constexpr,
                 DEFER: gl.constexpr, CONSUMER_REGS: gl.constexpr, PRODUCER_REGS: gl.constexpr):
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
                          0, BLK, HEAD_D, STAGES, CAUSAL, KREG, OVERLAP, DEFER)),
        (_dkdv_consumer, (dk_desc, dv_desc, q_smem, do_smem, k_smem, v_smem, lse_smem, dl_smem,
                          kv_bar, ready, empty, kv_row, n_it, qk_scale, scale,
                          1, BLK, HEAD_D, STAGES, CAUSAL, KREG, OVERLAP, DEFER)),
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
def _dq_issue(j, qop, doa, k_smem, v_smem, ready, BLK: gl.constexpr, STAGES: gl.constexpr):
    """Wait for key block j of the ring; issue S = Q K_jᵀ and dP = dO V_jᵀ (async). qop: Q
    (registers), doa: dO (registers or this warpgroup's shared-memory half)."""
    s_layout: gl.constexpr = _acc_layout(BLK)           # S, dP: [64 queries, 64 keys]
    s = j % STAGES
    mbarrier.wait(ready.index(s), (j // STAGES) & 1)
    zero = gl.zeros([BLK, BLK], gl.float32, layout=s_layout)
    s_tok = warpgroup_mma(qop, k_smem.index(s).permute((1, 0)), zero, use_acc=False, is_async=True)
    dp_tok = warpgroup_mma(doa, v_smem.index(s).permute((1, 0)), zero, use_acc=False,
                           is_async=True)
    return s_tok, dp_tok


@gluon.jit
def _dq_rest(j, s_tok, dp_tok, lse, delta, dq, k_smem, qk_scale,
             MASK: gl.constexpr, BLK: gl.constexpr, HEAD_D: gl.constexpr,
             STAGES: gl.constexpr):
    """The rest of key block j once S_j, dP_j are issued (the only groups in flight): P, dS,
    and issue dQ += dS K_j (async; the caller retires it). MASK: the diagonal tile (queries
    and keys start at the same row): keep key c <= query r."""
    s_layout: gl.constexpr = _acc_layout(BLK)
    a_layout: gl.constexpr = _op_layout(HEAD_D)         # dS: A of the m64n128 product
    sc = warpgroup_mma_wait(num_outstanding=1, deps=(s_tok,))   # S_j done, dP_j may run
    p = gl.exp2(sc * qk_scale - lse[:, None])        # under the dP wgmma
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
def _dq_step(j, qop, doa, lse, delta, dq, k_smem, v_smem, ready, empty, qk_scale,
             MASK: gl.constexpr, BLK: gl.constexpr, HEAD_D: gl.constexpr,
             STAGES: gl.constexpr):
    """Key block j of the ring into dq, every wgmma retired inside; releases its stage."""
    s_tok, dp_tok = _dq_issue(j, qop, doa, k_smem, v_smem, ready, BLK, STAGES)
    dq_tok, ds_op = _dq_rest(j, s_tok, dp_tok, lse, delta, dq, k_smem, qk_scale, MASK, BLK,
                             HEAD_D, STAGES)
    dq, ds_op = warpgroup_mma_wait(num_outstanding=0, deps=(dq_tok, ds_op))
    mbarrier.arrive(empty.index(j % STAGES), count=1)
    return dq


@gluon.jit
def _dq_pair(j, qop, doa, lse, delta, dq, k_smem, v_smem, ready, empty, qk_scale,
             BLK: gl.constexpr, HEAD_D: gl.constexpr, STAGES: gl.constexpr):
    """Key blocks j and j + 1 (DEFER): dQ_j stays in flight while S_{j+1}, dP_{j+1} are issued,
    and is retired (wait_group 2) before the rest of j + 1."""
    s_tok, dp_tok = _dq_issue(j, qop, doa, k_smem, v_smem, ready, BLK, STAGES)
    dq_tok, ds_op = _dq_rest(j, s_tok, dp_tok, lse, delta, dq, k_smem, qk_scale, False, BLK,
                             HEAD_D, STAGES)
    s_tok, dp_tok = _dq_issue(j + 1, qop, doa, k_smem, v_smem, ready, BLK, STAGES)
    dq, ds_op = warpgroup_mma_wait(num_outstanding=2, deps=(dq_tok, ds_op))
    mbarrier.arrive(empty.index(j % STAGES), count=1)
    dq_tok, ds_op = _dq_rest(j + 1, s_tok, dp_tok, lse, delta, dq, k_smem, qk_scale, False, BLK,
                             HEAD_D, STAGES)
    dq, ds_op = warpgroup_mma_wait(num_outstanding=0, deps=(dq_tok, ds_op))
    mbarrier.arrive(empty.index((j + 1) % STAGES), count=1)
    return dq


@gluon.jit
def _dq_consumer(dq_desc, lse_ptr, dl_ptr, q_smem, do_smem, k_smem, v_smem,
                 qdo_bar, ready, empty, q_row, start_m, n_kv, qk_scale, scale,
                 WG: gl.constexpr, BLK: gl.constexpr, HEAD_D: gl.constexpr,
                 STAGES: gl.constexpr, CAUSAL: gl.constexpr, DOREG: gl.constexpr,
                 DEFER: gl.constexpr):
    s_layout: gl.constexpr = _acc_layout(BLK)
    o_layout: gl.constexpr = _acc_layout(HEAD_D)
    qop_layout: gl.constexpr = _op_layout(BLK)        # Q, dO: A of S, dP ([64, 64] accs)
    row_layout: gl.constexpr = gl.SliceLayout(1, s_layout)

    rows = q_row + WG * BLK + gl.arange(0, BLK, layout=row_layout)
    lse = gl.load(lse_ptr + rows)                     # 2 rows per thread: registers
    delta = gl.load(dl_ptr + rows)
    q_buf = q_smem.index(WG)
    mbarrier.wait(qdo_bar, 0)
    qop = q_buf.load(qop_layout)
    if DOREG:
        doa = do_smem.index(WG).load(qop_layout)
    else:
        doa = do_smem.index(WG)
    dq = gl.zeros([BLK, HEAD_D], gl.float32, layout=o_layout)

    if CAUSAL:
        n_full = start_m // BLK + WG                  # key blocks wholly before these queries
    else:
        n_full = n_kv
    if DEFER:
        for j in range(0, n_full - 1, 2):
            dq = _dq_pair(j, qop, doa, lse, delta, dq, k_smem, v_smem, ready, empty, qk_scale,
                          BLK, HEAD_D, STAGES)
        if n_full % 2 == 1:
            dq = _dq_step(n_full - 1, qop, doa, lse, delta, dq, k_smem, v_smem, ready, empty,
                          qk_scale, False, BLK, HEAD_D, STAGES)
    else:
        for j in range(n_full):
            dq = _dq_step(j, qop, doa, lse, delta, dq, k_smem, v_smem, ready, empty, qk_scale,
                          False, BLK, HEAD_D, STAGES)
    if CAUSAL:
        dq = _dq_step(n_full, qop, doa, lse, delta, dq, k_smem, v_smem, ready, empty, qk_scale,
                      True, BLK, HEAD_D, STAGES)
        if WG == 0:
            # the ring's last key block (start_m + 64 ...) is after all of WG0's queries: skip
            # it, but release it once loaded (an arrival before the load would count for the
            # stage's previous occupant, which WG1 may still be reading)
            sk = (n_full + 1) % STAGES
            mbarrier.wait(ready.index(sk), ((n_full + 1) // STAGES) & 1)
            mbarrier.arrive(empty.index(sk), count=1)

    # epilogue: through this warpgroup's own Q buffer (its contents are in registers)
    q_buf.store((dq * scale).to(dq_desc.dtype))
    fence_async_shared()
    tma.async_copy_shared_to_global(dq_desc, [q_row + WG * BLK, 0], q_buf)
    tma.store_wait(pendings=0)


@gluon.jit
def _dq_kernel(q_desc, do_desc, k_desc, v_desc, dq_desc, lse_ptr, dl_ptr,
               qk_scale, scale, S, BH,
               HEAD_D: gl.constexpr, BLK: gl.constexpr, STAGES: gl.constexpr,
               CAUSAL: gl.constexpr, DOREG: gl.constexpr, DEFER: gl.constexpr,
               CONSUMER_REGS: gl.constexpr, PRODUCER_REGS: gl.constexpr):
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
                        0, BLK, HEAD_D, STAGES, CAUSAL, DOREG, DEFER)),
        (_dq_consumer, (dq_desc, lse_ptr, dl_ptr, q_smem, do_smem, k_smem, v_smem,
                        qdo_bar, ready, empty, q_row, start_m, n_kv, qk_scale, scale,
                        1, BLK, HEAD_D, STAGES, CAUSAL, DOREG, DEFER)),
        (_dq_producer, (q_desc, do_desc, k_desc, v_desc, q_smem, do_smem, k_smem, v_smem,
                        qdo_bar, ready, empty, q_row, kv_row0, n_kv, BLK, STAGES)),
    ], [4, 1], [CONSUMER_REGS, PRODUCER_REGS])


# ================================================================================================
# host
# ================================================================================================

def tile_layout(D):
    """NVMMA shared layout (128-byte swizzle) of a [64, D] bf16 tile."""
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


def dkdv_constexprs(causal, cfg=None):
    c = dict(CONFIG, **(cfg or {}))
    return dict(HEAD_D=HEAD_D, BLK=BLK, STAGES=c["DKDV_STAGES"], CAUSAL=bool(causal),
                KREG=c["DKDV_KREG"], OVERLAP=c["DKDV_OVERLAP"], DEFER=c["DKDV_DEFER"],
                CONSUMER_REGS=CONSUMER_REGS, PRODUCER_REGS=PRODUCER_REGS)


def dq_constexprs(causal, cfg=None):
    c = dict(CONFIG, **(cfg or {}))
    return dict(HEAD_D=HEAD_D, BLK=BLK, STAGES=c["DQ_STAGES"], CAUSAL=bool(causal),
                DOREG=c["DQ_DOREG"], DEFER=c["DQ_DEFER"], CONSUMER_REGS=CONSUMER_REGS, PRODUCER_REGS=PRODUCER_REGS)


def launch_delta(o, do, delta):
    B, H, S, D = o.shape
    _delta_kernel[(B * H * S // 64,)](o, do, delta, HEAD_D=D, BLOCK_M=64, num_warps=4)


def launch_dkdv(d, S, BH, causal, scale, cfg=None):
    grid = (BH * (S // (2 * BLK)),)
    _dkdv_kernel[grid](d["q"], d["do"], d["k"], d["v"], d["dk"], d["dv"], d["lse"], d["delta"],
                       scale * LOG2E, scale, S, BH, **dkdv_constexprs(causal, cfg), num_warps=4)


def launch_dq(d, lse, delta, S, BH, causal, scale, cfg=None):
    grid = (BH * (S // (2 * BLK)),)
    _dq_kernel[grid](d["q"], d["do"], d["k"], d["v"], d["dq"], lse, delta,
                     scale * LOG2E, scale, S, BH, **dq_constexprs(causal, cfg), num_warps=4)


def backward(do, q, k, v, o, lse, causal, scale, cfg=None):
    """dq, dk, dv of o = softmax(scale q kᵀ (+ causal mask)) v, given o and lse2 [B, H, S] fp32
    (base 2) from the forward: the solution's `_bwd_impl(do, q, k, v, o, lse, causal, scale,
    launch)` semantics for bf16, D 128, S % 128 == 0. cfg: overrides of CONFIG."""
    assert q.dtype == torch.bfloat16 and all(t.dtype == q.dtype for t in (k, v, o, do))
    assert q.dim() == 4 and all(t.shape == q.shape for t in (k, v, o, do))
    B, H, S, D = q.shape
    assert D == HEAD_D, "the register plan of these kernels is written for D 128"
    assert S % (2 * BLK) == 0, "S must be a multiple of 128"
    assert B * H * S < 2 ** 31
    assert lse.dtype == torch.float32 and lse.numel() == B * H * S   # [B, H, S] or [B*H, S]
    q, k, v, o, do = (t.contiguous() for t in (q, k, v, o, do))
    lse = lse.reshape(B, H, S).contiguous()
    if scale is None:
        scale = 1.0 / math.sqrt(D)
    dq, dk, dv = (torch.empty_like(q) for _ in range(3))
    delta = torch.empty(B * H * S, dtype=torch.float32, device=q.device)
    launch_delta(o, do, delta)
    d = make_descs(q, k, v, do, dq, dk, dv, lse, delta)
    if dict(CONFIG, **(cfg or {}))["CONCURRENT"]:
        # both kernels only read q, k, v, do, lse, delta and write disjoint outputs; the side
        # stream starts after delta and the caller's stream waits for it before returning (so
        # the caching allocator cannot hand delta's memory to later work too early)
        main = torch.cuda.current_stream(q.device)
        if q.device not in _SIDE:
            _SIDE[q.device] = torch.cuda.Stream(q.device)
        side = _SIDE[q.device]
        side.wait_stream(main)
        launch_dkdv(d, S, B * H, causal, scale, cfg)
        with torch.cuda.stream(side):
            launch_dq(d, lse, delta, S, B * H, causal, scale, cfg)
        main.wait_stream(side)
    else:
        launch_dkdv(d, S, B * H, causal, scale, cfg)
        launch_dq(d, lse, delta, S, B * H, causal, scale, cfg)
    return dq, dk, dv
