"""FlashAttention-2 forward in Gluon for Hopper (sm_90a), D 64, causal or not. Triton 3.6.0.

    o, lse2 = forward(q, k, v, causal, scale)   q, k, v, o: [B, H, S, 64] bf16; lse2: [B, H, S] fp32

Written to give the SAME BITS as the repository's Triton forward at its D 64 config
(solutions/13_flash_attention/triton/flash_attention.py: _fwd_impl -> _fwd -> _fwd_kernel with
CONFIGS[64]["fwd"] = Cfg(own=128, step=64, warps=8, stages=3)), only faster. Limits (asserted):
bf16, D 64, S % 128 == 0, B*H*S < 2^31, contiguous q, k, v.

Napkin math (the leaderboard case: B 1, H 16, S 16384, D 64, causal)
--------------------------------------------------------------------
Useful flops 4*B*H*S^2*D/2 = 0.550 TFLOP. Executed: a program of 128 query rows at block qb
visits key blocks of 64 number 0 .. 2qb+1 (the two last ones masked: the diagonal), 16 512
(128 x 64) block pairs per head, 264 192 in all, each 4*128*64*64 = 2.10 MFLOP (Q·Kᵀ and P·V):
0.554 TFLOP. On the H200's ~950 TFLOP/s of dense bf16 (4096 flop/clk/SM, 132 SMs, ~1.755 GHz)
that is 0.58 ms of pure tensor-core time: 512 clk of an SM's tensor cores per block pair.
Exponentials: 128*64 = 8192 exp2 per block pair (+ 512 for alpha: each row's alpha is computed
by the 4 threads of its quad), at 16 MUFU.EX2 per clk per SM = 544 clk per block pair: 0.62 ms
for the whole case. At D 64 the MUFU time EQUALS the tensor time, so the kernel is bound by
both at once: the exponentials of one block must run while the tensor cores do another's
products, or the time is their sum (~1.2 ms: roughly what the Triton kernel, 1.27 ms, and
cuDNN, 1.29 ms, take). The FP32 pipe (FFMA/FMNMX/FADD/F2FP, ~5 per score) is ~60% of an issue
slot per MUFU cycle: it fits beside. L2: every program streams K and V once per 128 rows:
264 192 x 16 KB = 4.3 GB, 4.8 TB/s at 0.9 ms (the Triton kernel reads the same).
Expected: 0.62 ms is the floor; with ~70% overlap ~0.85-1.0 ms (vs 1.27). Unmeasured.

Design (FlashAttention-3's forward, one CTA per 128 query rows)
-----------------------------------------------------------------
gl.warp_specialize: two consumer warpgroups (4 warps each) of 64 query rows, and a producer
warp issuing TMA: Q's two [64, 64] halves once (a barrier each), then K_j and V_j, [64, 64]
tiles, together into a STAGES-deep ring (one `ready` barrier per stage: the producer's
expect-tx arrival + 16 KB; one `empty` barrier per stage: one arrival per consumer warpgroup).
setmaxnreg 240 per consumer thread, 24 for the producer.
Each consumer keeps its Q half in registers (a wgmma A operand, 16 registers), so both
products are RS wgmmas (A from registers): S = Q·K_jᵀ (B = K_j permuted, 4 x m64n64k16) and
O += P·V_j (A = bf16(P) taken straight from the accumulator layout, no shuffles; B = V_j).
An SS m64n64k16 would read 128 B/clk of shared memory, the whole bandwidth; RS reads 64.
AHEAD (default): S_{j+1} is issued BEFORE the softmax of block j, with P_{j-1}·V_{j-1}; the
softmax of j (the MUFU work) runs while both (256 clk of this warpgroup's tensor work) run;
then one wait retires both, the stage of block j-1 is released and O is rescaled. Nothing is
in flight across a loop's back edge (that made ptxas serialise every wgmma in the backward
experiment, .whl/g38b). AHEAD=False: the D 128 solution kernel's order (S_j issued and waited
for at the start of step j with wait_group 1, P_{j-1}·V_{j-1} meant to run under the softmax).
Offline SASS shows why AHEAD: in that order ptxas moves the P·V's wait_group 0 up to right after
the wait_group 1, ABOVE the softmax (0 of 204 MUFU.EX2 issued with a wgmma of the warpgroup in
flight; the solution's D 128 Gluon forward compiles the same way: 0 of 260), so only the other
warpgroup hides the exponentials; with AHEAD's single wait_group 0 per step, 202 of 272 are
issued under the warpgroup's own two wgmmas (offline.txt). The two warpgroups are not
synchronised with each other: one's softmax also runs under the other's products.
Registers per consumer thread (fp32 unless said), AHEAD: Q 16 (bf16 pairs), O 32, S_j/P_j 32,
S_{j+1} 32 (in flight), P_{j-1} 16 (bf16, in flight), P_j 16 (bf16), m, l, alpha 6: ~150 plus
addressing; ptxas: 0 spills, highest register R183 of the 240 (offline.txt). Shared memory:
Q (then O) 2 x 8 KB, the ring STAGES x 16 KB: 112 KB at 6 stages (1 CTA per SM either way: 384
threads at 168 registers each at launch).

Same bits as _fwd_kernel (what makes them the same)
---------------------------------------------------
Per query row, the Triton kernel runs this sequence over key blocks of 64, ascending, starting
from m = -inf, l = 0, acc = 0:
    qk  = Q·K_jᵀ (fp32 wgmma m64n64k16 x 4, the same instruction and shapes: its 8 warps
          form an [8, 1] NVMMA layout with instrShape [16, 64, 16], each warp owning 16 rows
          exactly as a warp of one warpgroup's [4, 1] layout does here)
    masked blocks: qk = where(row >= col, qk, -1.0e30)          (BEFORE the exp2)
    m_new = maxnum(m, max_row(qk) * qk_scale)                     (max first, then the multiply)
    p     = ex2.approx.ftz(qk * qk_scale - m_new)                 (one FFMA after contraction)
    alpha = ex2(m - m_new);  l = l * alpha + sum_row(p)           (FFMA; l over the fp32 p)
    acc   = acc * alpha;     acc = acc + bf16(p)·V_j              (wgmma, acc as the C input)
    end: o = bf16(acc / l) (div.full.f32), lse2 = m + lg2(l)
qk_scale = (0 + hi) + lo in fp32 there, hi + lo here (_split's halves of scale*log2e): equal.
This kernel writes exactly those expressions in the same order and types (the first block
included: it too starts from m = -inf, alpha = ex2(-inf) = 0, acc = 0 * 0), the reductions
over the same per-thread elements in the same layout (so the same tree: sequential in the
thread, then the same shuffles within the quad). The delayed rescale (O *= alpha_j applied
after P_{j-1}V_{j-1} lands, before P_jV_j is issued) is the same acc_j = acc_{j-1}*alpha_j +
P_jV_j. Checked offline (reduction_order.py on both kernels' LLVM IR): the fp32 expression
trees of every row max, row sum and ex2 argument, with the wgmma result registers as leaves,
are the same sets; both PTX use ex2.approx.ftz.f32, FMA contraction, div.full.f32, __nv_log2f.
Causal: the Triton program (128 rows) visits key blocks 0 .. 2qb+1, the last two masked, ALL
128 rows. So its rows start_m .. start_m+63 also visit block 2qb+1, wholly masked for them:
p = ex2(-1e30*qk_scale - m) = 0 exactly, alpha = ex2(m - m) = ex2(0) = 1 exactly (m finite),
l*1 + 0 = l and acc*1 = acc exactly, and the wgmma adds products 0*v = +-0. In IEEE fp32 that
is a no-op (acc is never -0: it starts at +0 and a sum of +0 and -0 is +0), so warpgroup 0 could
skip that block; it does NOT: both warpgroups here visit the same blocks with the same masking
as the Triton program, so the bits are the same by construction, not by an argument about the
tensor core's adder (denormals, signed zeros, NaN/inf inputs). The cost: one block of 2qb+2 for
one warpgroup, 0.4% of the work at the leaderboard case. Block 0 is always masked here when
causal (for qb > 0 every score is kept: where(true, qk, c) = qk, the same values).

Unverified (no GPU here): that it runs, hangs or not, the bits, the speed. See NOTES.md.
"""
import math
import struct

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)

LOG2E = 1.4426950408889634
BLOCK_M = 128          # query rows per CTA: two consumer warpgroups of 64 (the Triton BLOCK_M)
WG_M = 64              # rows per consumer warpgroup
BLOCK_N = 64           # keys per step (the Triton BLOCK_N: the online softmax's granularity)
STAGES = 6             # K/V ring depth (16 KB a stage)
AHEAD = True           # issue S_{j+1} before the softmax of block j (see the docstring)
CONSUMER_REGS = 240
PRODUCER_REGS = 24


# --- layouts (one consumer warpgroup: 4 warps stacked along M, 16 rows each) -------------------

@gluon.constexpr_function
def _acc_layout(n):
    """wgmma accumulator layout of a [64, n] fp32 tile of one warpgroup."""
    return gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                     instr_shape=[16, n, 16])


@gluon.constexpr_function
def _op_layout(n):
    """Register A operand (bf16 pairs, k_width 2) of a wgmma whose accumulator is [64, n]."""
    return gl.DotOperandLayout(operand_index=0, parent=_acc_layout(n), k_width=2)


# --- the producer warp --------------------------------------------------------------------------

@gluon.jit
def _producer(q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, q_bar, ready, empty,
              q_row, kv_row, n_kv, WG_M: gl.constexpr, BLOCK_N: gl.constexpr,
              STAGES: gl.constexpr):
    """Q's halves once (q_bar[w]: one phase, completed by the expect + 8 KB), then the key
    blocks 0 .. n_kv-1, K_j and V_j into stage j % STAGES.
    Phases. Fill n = j // STAGES of stage s = j % STAGES completes phase n of ready[s]. Before
    fill n >= 1 the stage's previous occupant (fill n-1) must be released by both consumers:
    phase n-1 of empty[s], parity (n-1) & 1 = (n & 1) ^ 1. For n = 0 that parity is 1 on a
    fresh barrier (phase 0 in progress), which mbarrier's try_wait.parity counts as the phase
    before phase 0, completed: it returns at once. empty[s] can neither be behind (phase n-2 was
    waited for before fill n-1) nor ahead (phase n needs fill n released, not yet loaded)."""
    for w in gl.static_range(2):
        mbarrier.expect(q_bar.index(w), q_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(q_desc, [q_row + w * WG_M, 0], q_bar.index(w),
                                        q_smem.index(w))
    nbytes: gl.constexpr = k_desc.block_type.nbytes + v_desc.block_type.nbytes
    for j in range(n_kv):
        s = j % STAGES
        mbarrier.wait(empty.index(s), ((j // STAGES) & 1) ^ 1)
        mbarrier.expect(ready.index(s), nbytes)
        tma.async_copy_global_to_shared(k_desc, [kv_row + j * BLOCK_N, 0], ready.index(s),
                                        k_smem.index(s))
        tma.async_copy_global_to_shared(v_desc, [kv_row + j * BLOCK_N, 0], ready.index(s),
                                        v_smem.index(s))


# --- the consumers' pieces ----------------------------------------------------------------------

@gluon.jit
def _issue_s(j, q_op, k_smem, ready, BLOCK_N: gl.constexpr, STAGES: gl.constexpr):
    """Wait for key block j, issue S_j = Q·K_jᵀ (RS: Q in registers), async.
    Phase: block j is fill j // STAGES of its stage. This warpgroup waits for it only after it
    waited for block j - STAGES (program order), so phase n-1 is complete; and phase n+1 cannot
    be complete (fill n+1 needs block j released by this warpgroup, which has not read it)."""
    s = j % STAGES
    mbarrier.wait(ready.index(s), (j // STAGES) & 1)
    kj = k_smem.index(s)
    zero = gl.zeros([64, BLOCK_N], gl.float32, layout=_acc_layout(BLOCK_N))
    s_tok = warpgroup_mma(q_op, kj.permute((1, 0)), zero, use_acc=False, is_async=True)
    return s_tok, kj


@gluon.jit
def _softmax(s, m_i, l_i, qk_scale, row0, col0, MASK: gl.constexpr, BLOCK_N: gl.constexpr,
             HEAD_D: gl.constexpr):
    """_fwd_inner's softmax of one key block, the same expressions in the same order.
    row0, col0: the absolute (within the head) index of this tile's first query row and key."""
    layout: gl.constexpr = _acc_layout(BLOCK_N)
    if MASK:  # _keep: keys not after the query (keys < S always: S % 128 == 0), BEFORE the exp2
        rows = row0 + gl.arange(0, 64, layout=gl.SliceLayout(1, layout))
        cols = col0 + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, layout))
        s = gl.where(rows[:, None] >= cols[None, :], s, -1.0e30)
    m_new = gl.maximum(m_i, gl.max(s, axis=1) * qk_scale)
    p = gl.exp2(s * qk_scale - m_new[:, None])
    alpha = gl.exp2(m_i - m_new)
    l_i = l_i * alpha + gl.sum(p, axis=1)
    p_op = gl.convert_layout(p.to(gl.bfloat16), _op_layout(HEAD_D))
    return p_op, m_new, l_i, alpha


@gluon.jit
def _rescale(o, alpha, HEAD_D: gl.constexpr):
    """acc * alpha[:, None] (a no-op convert at D 64: the row layouts are the same)."""
    return o * gl.convert_layout(alpha, gl.SliceLayout(1, _acc_layout(HEAD_D)))[:, None]


@gluon.jit
def _trip_ahead(j, s_cur, o, p_op, m_i, l_i, q_op, k_smem, v_smem, ready, empty, qk_scale, row0,
                MASK: gl.constexpr, LAST: gl.constexpr, BLOCK_N: gl.constexpr,
                HEAD_D: gl.constexpr, STAGES: gl.constexpr):
    """Key block j (AHEAD; j >= 1): S_j is in s_cur already. Issue S_{j+1} (unless LAST) and
    P_{j-1}·V_{j-1}, do block j's softmax under them, retire both (nothing stays in flight past
    the return), release block j-1's stage (its K read by S_{j-1}, retired a trip ago; its V by
    the P·V just retired), rescale O to block j's max."""
    if not LAST:
        s_tok, kn = _issue_s(j + 1, q_op, k_smem, ready, BLOCK_N, STAGES)
    sp = (j - 1) % STAGES
    vp = v_smem.index(sp)        # V_{j-1}: its ready phase was waited for when S_{j-1} was issued
    o_tok = warpgroup_mma(p_op, vp, o, is_async=True)
    p_next, m_i, l_i, alpha = _softmax(s_cur, m_i, l_i, qk_scale, row0, j * BLOCK_N, MASK,
                                       BLOCK_N, HEAD_D)
    if LAST:
        o, _, _ = warpgroup_mma_wait(num_outstanding=0, deps=(o_tok, p_op, vp))
        s_next = s_cur
    else:
        s_next, _, o, _, _ = warpgroup_mma_wait(num_outstanding=0,
                                                deps=(s_tok, kn, o_tok, p_op, vp))
    mbarrier.arrive(empty.index(sp), count=1)
    o = _rescale(o, alpha, HEAD_D)
    return s_next, o, p_next, m_i, l_i


@gluon.jit
def _step_plain(j, o, p_op, m_i, l_i, q_op, k_smem, v_smem, ready, empty, qk_scale, row0,
                MASK: gl.constexpr, BLOCK_N: gl.constexpr, HEAD_D: gl.constexpr,
                STAGES: gl.constexpr):
    """Key block j (AHEAD=False; j >= 1), the D 128 solution kernel's order: issue S_j and
    P_{j-1}·V_{j-1}; wgmma groups retire in order, so wait(1) retires S_j; the softmax of j under
    P_{j-1}·V_{j-1}; wait(0); release block j-1's stage; rescale."""
    s_tok, kj = _issue_s(j, q_op, k_smem, ready, BLOCK_N, STAGES)
    sp = (j - 1) % STAGES
    vp = v_smem.index(sp)
    o_tok = warpgroup_mma(p_op, vp, o, is_async=True)
    s, _ = warpgroup_mma_wait(num_outstanding=1, deps=(s_tok, kj))
    p_next, m_i, l_i, alpha = _softmax(s, m_i, l_i, qk_scale, row0, j * BLOCK_N, MASK, BLOCK_N,
                                       HEAD_D)
    o, _, _ = warpgroup_mma_wait(num_outstanding=0, deps=(o_tok, p_op, vp))
    mbarrier.arrive(empty.index(sp), count=1)
    o = _rescale(o, alpha, HEAD_D)
    return o, p_next, m_i, l_i


@gluon.jit
def _consumer(o_desc, LSE, q_smem, k_smem, v_smem, q_bar, ready, empty, q_row, start_m,
              n_kv, n_full, qk_scale, WG: gl.constexpr, BLOCK_N: gl.constexpr,
              HEAD_D: gl.constexpr, STAGES: gl.constexpr, CAUSAL: gl.constexpr,
              AHEAD: gl.constexpr):
    """A consumer warpgroup: query rows start_m + 64·WG ... + 63 of the head, key blocks
    0 .. n_kv-1, the ones from n_full on masked (causal: n_full = 2qb, n_kv = 2qb + 2; not
    causal: n_full = n_kv = S/64). Every block of the ring is released by this warpgroup exactly
    once, after its last read (K_j by S_j, V_j by P_j·V_j), in ascending order: block j-1 at the
    end of step j, the last block after the final P·V. n_kv >= 2 always (S >= 128)."""
    s_layout: gl.constexpr = _acc_layout(BLOCK_N)
    o_layout: gl.constexpr = _acc_layout(HEAD_D)
    row_layout: gl.constexpr = gl.SliceLayout(1, s_layout)
    row0 = start_m + WG * 64

    mbarrier.wait(q_bar.index(WG), 0)
    q_buf = q_smem.index(WG)
    q_op = q_buf.load(_op_layout(BLOCK_N))       # loop-invariant A operand of S = Q·Kᵀ

    # _fwd_kernel's initial state; block 0 goes through the same arithmetic from it
    m_i = gl.full([64], float("-inf"), gl.float32, layout=row_layout)
    l_i = gl.zeros([64], gl.float32, layout=row_layout)
    o = gl.zeros([64, HEAD_D], gl.float32, layout=o_layout)

    # block 0: no P·V before it. Causal: masked (the diagonal when qb = 0; a no-op otherwise)
    s_tok, k0 = _issue_s(0, q_op, k_smem, ready, BLOCK_N, STAGES)
    if AHEAD:
        s_cur, _ = warpgroup_mma_wait(num_outstanding=0, deps=(s_tok, k0))
        s_tok, k1 = _issue_s(1, q_op, k_smem, ready, BLOCK_N, STAGES)     # S_1 under softmax_0
        p_op, m_i, l_i, alpha = _softmax(s_cur, m_i, l_i, qk_scale, row0, 0, CAUSAL, BLOCK_N,
                                         HEAD_D)
        s_cur, _ = warpgroup_mma_wait(num_outstanding=0, deps=(s_tok, k1))
        o = _rescale(o, alpha, HEAD_D)            # 0 * 0, as _fwd_kernel's first acc * alpha
        if CAUSAL:
            n_plain = n_full                      # blocks 1 .. 2qb-1 unmasked
        else:
            n_plain = n_kv - 1                    # all but the last (issued no S ahead)
        for j in range(1, n_plain):
            s_cur, o, p_op, m_i, l_i = _trip_ahead(
                j, s_cur, o, p_op, m_i, l_i, q_op, k_smem, v_smem, ready, empty, qk_scale,
                row0, False, False, BLOCK_N, HEAD_D, STAGES)
        if CAUSAL:
            # block 2qb (qb >= 1; for qb = 0 it is block 0, done above): masked, not the last
            for j in range(gl.maximum(n_full, 1), n_kv - 1):
                s_cur, o, p_op, m_i, l_i = _trip_ahead(
                    j, s_cur, o, p_op, m_i, l_i, q_op, k_smem, v_smem, ready, empty, qk_scale,
                    row0, True, False, BLOCK_N, HEAD_D, STAGES)
        s_cur, o, p_op, m_i, l_i = _trip_ahead(
            n_kv - 1, s_cur, o, p_op, m_i, l_i, q_op, k_smem, v_smem, ready, empty, qk_scale,
            row0, CAUSAL, True, BLOCK_N, HEAD_D, STAGES)
    else:
        s, _ = warpgroup_mma_wait(num_outstanding=0, deps=(s_tok, k0))
        p_op, m_i, l_i, alpha = _softmax(s, m_i, l_i, qk_scale, row0, 0, CAUSAL, BLOCK_N,
                                         HEAD_D)
        o = _rescale(o, alpha, HEAD_D)
        for j in range(1, n_full):
            o, p_op, m_i, l_i = _step_plain(j, o, p_op, m_i, l_i, q_op, k_smem, v_smem, ready,
                                            empty, qk_scale, row0, False, BLOCK_N, HEAD_D,
                                            STAGES)
        if CAUSAL:
            for j in range(gl.maximum(n_full, 1), n_kv):
                o, p_op, m_i, l_i = _step_plain(j, o, p_op, m_i, l_i, q_op, k_smem, v_smem,
                                                ready, empty, qk_scale, row0, True, BLOCK_N,
                                                HEAD_D, STAGES)

    # the last block's P·V, then its stage released
    sl = (n_kv - 1) % STAGES
    vl = v_smem.index(sl)
    o_tok = warpgroup_mma(p_op, vl, o, is_async=True)
    o, _, _ = warpgroup_mma_wait(num_outstanding=0, deps=(o_tok, p_op, vl))
    mbarrier.arrive(empty.index(sl), count=1)

    # _fwd_kernel's epilogue: o = acc / l (div.full.f32), lse2 = m + log2(l). O goes out through
    # this warpgroup's Q buffer (Q is in registers since the start), then one TMA store
    o = o / gl.convert_layout(l_i, gl.SliceLayout(1, o_layout))[:, None]
    q_buf.store(o.to(o_desc.dtype))
    fence_async_shared()          # the generic-proxy writes before the copy engine reads them
    tma.async_copy_shared_to_global(o_desc, [q_row + WG * 64, 0], q_buf)
    rows = q_row + WG * 64 + gl.arange(0, 64, layout=row_layout)
    gl.store(LSE + rows, m_i + gl.log2(l_i))
    tma.store_wait(pendings=0)


@gluon.jit
def _fwd64_kernel(q_desc, k_desc, v_desc, o_desc, LSE, S, BH, scale_hi, scale_lo,
                  HEAD_D: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr,
                  CAUSAL: gl.constexpr, AHEAD: gl.constexpr, CONSUMER_REGS: gl.constexpr,
                  PRODUCER_REGS: gl.constexpr):
    """One program per (batch*head, block of 128 query rows) over the [B*H*S, D] rows of q, k,
    v, o; lse2 [B*H*S]. Causal: the longest rows first, heads fastest (the Triton kernel's launch
    order: grid (B*H, blocks), program_id(1) reversed); not causal: head-major."""
    BLOCK_M: gl.constexpr = 128
    # AHEAD holds 3 blocks' stages at once (K_{j+1}, V_j, V_{j-1}): fewer stages deadlock
    gl.static_assert(STAGES >= 2 + AHEAD, "too few stages for this order")
    n_qb = S // BLOCK_M
    pid = gl.program_id(0)
    if CAUSAL:
        hz = pid % BH
        qb = n_qb - 1 - pid // BH
    else:
        hz = pid // n_qb
        qb = pid % n_qb
    start_m = qb * BLOCK_M
    q_row = hz * S + start_m               # rows of the [B*H*S, D] views (< 2^31: asserted)
    kv_row = hz * S
    if CAUSAL:
        n_full = start_m // BLOCK_N        # _key_split's mid = start_m: unmasked below
        n_kv = (start_m + BLOCK_M) // BLOCK_N
    else:
        n_full = S // BLOCK_N
        n_kv = S // BLOCK_N
    qk_scale = scale_hi + scale_lo         # _join's (0 + hi) + lo: the same fp32

    q_smem = gl.allocate_shared_memory(q_desc.dtype, [2, 64, HEAD_D], q_desc.layout)
    k_smem = gl.allocate_shared_memory(k_desc.dtype, [STAGES, BLOCK_N, HEAD_D], k_desc.layout)
    v_smem = gl.allocate_shared_memory(v_desc.dtype, [STAGES, BLOCK_N, HEAD_D], v_desc.layout)
    q_bar = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for w in gl.static_range(2):
        mbarrier.init(q_bar.index(w), count=1)
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)   # the producer's expect arrival, + 16 KB of tx
        mbarrier.init(empty.index(i), count=2)   # one arrival per consumer warpgroup
    fence_async_shared()                         # barrier inits visible to the copy engine

    gl.warp_specialize([
        (_consumer, (o_desc, LSE, q_smem, k_smem, v_smem, q_bar, ready, empty, q_row, start_m,
                     n_kv, n_full, qk_scale, 0, BLOCK_N, HEAD_D, STAGES, CAUSAL, AHEAD)),
        (_consumer, (o_desc, LSE, q_smem, k_smem, v_smem, q_bar, ready, empty, q_row, start_m,
                     n_kv, n_full, qk_scale, 1, BLOCK_N, HEAD_D, STAGES, CAUSAL, AHEAD)),
        (_producer, (q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, q_bar, ready, empty,
                     q_row, kv_row, n_kv, 64, BLOCK_N, STAGES)),
    ], [4, 1], [CONSUMER_REGS, PRODUCER_REGS])


# --- host -----------------------------------------------------------------------------------

def _split(x: float) -> tuple[float, float]:
    """The solution's _split: x as hi + lo, two float32 values."""
    f32 = lambda y: struct.unpack("f", struct.pack("f", y))[0]  # noqa: E731
    hi = f32(x)
    return hi, f32(x - hi)


def tile_layout(D=64):
    """NVMMA shared layout (128-byte swizzle) of a [64, D] bf16 tile: TMA and wgmma read it."""
    return gl.NVMMASharedLayout.get_default_for([64, D], gl.bfloat16)


def make_descs(q, k, v, o):
    """TMA descriptors of [64, D] tiles over the [B*H*S, D] views of contiguous tensors."""
    B, H, S, D = q.shape
    lay = tile_layout(D)
    return [TensorDescriptor.from_tensor(t.view(B * H * S, D), [64, D], lay)
            for t in (q, k, v, o)]


def constexprs(causal, stages=STAGES, ahead=AHEAD):
    return dict(HEAD_D=64, BLOCK_N=BLOCK_N, STAGES=stages, CAUSAL=bool(causal),
                AHEAD=bool(ahead), CONSUMER_REGS=CONSUMER_REGS, PRODUCER_REGS=PRODUCER_REGS)


def forward(q, k, v, causal, scale=None, stages=STAGES, ahead=AHEAD):
    """o, lse2 of softmax(scale q kᵀ (+ causal mask)) v: the solution's
    _fwd_impl(q, k, v, causal, scale, launch) for bf16, D 64, S % 128 == 0 (o like q, lse2
    [B, H, S] float32, base 2)."""
    assert all(isinstance(t, torch.Tensor) and t.dtype == torch.bfloat16 for t in (q, k, v))
    assert q.dim() == 4 and k.shape == q.shape and v.shape == q.shape
    B, H, S, D = q.shape
    assert D == 64, "written for D 64"
    assert S % BLOCK_M == 0 and S > 0, "S must be a multiple of 128"
    assert B * H * S < 2 ** 31, "row indices are int32"
    assert all(t.is_contiguous() and t.data_ptr() % 16 == 0 for t in (q, k, v))
    assert q.is_cuda and k.device == q.device and v.device == q.device
    assert stages >= (3 if ahead else 2), "AHEAD needs 3 stages, the plain order 2"
    if scale is None:
        scale = 1.0 / math.sqrt(D)
    o = torch.empty_like(q)
    lse = torch.empty((B, H, S), dtype=torch.float32, device=q.device)
    qd, kd, vd, od = make_descs(q, k, v, o)
    grid = (B * H * (S // BLOCK_M),)
    _fwd64_kernel[grid](qd, kd, vd, od, lse, S, B * H, *_split(scale * LOG2E),
                        **constexprs(causal, stages, ahead), num_warps=4)
    return o, lse
