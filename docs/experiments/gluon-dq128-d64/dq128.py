"""Experiment: exercise 13's Gluon dQ kernel (Hopper, sm_90a) with key blocks of 128 rows per step.

The solution's D 64 dQ kernel (_dq_gluon_kernel) streams key blocks of 64 rows: per step and
consumer warpgroup (64 queries) S = Q K_jᵀ and dP = dO V_jᵀ are m64n64k64, dQ += dS K_j is
m64n64k64, every wgmma retired inside the step. Here a step takes 128 keys: S, dP m64n128k64,
dQ += dS K_j m64n64k128, so half the steps, half the wgmma waits and ring barriers per flop.
Everything else as the solution's: two consumer warpgroups of 64 queries (128 per program), one
TMA producer warp, K and V tiles (now [128, D]) through a ring, Q (and dO: DOREG) as register A
operands, lse2 and delta in registers, the causal order (longest programs first, heads
fastest), the mask after the exp2, the fp32 P in dS, the split scales, the epilogue.

Causal: programs own 128 queries at multiples of 128 and key blocks are 128 rows at multiples of
128, so a program's diagonal block is its own 128 keys, the last of its n_kv = start_m/128 + 1
blocks; both warpgroups consume every block (no skipped stage), WG w keeps key c <= query
w·64 + r there (WG0's keys 64..127 are all masked: computed and dropped, an extra half block
per program). dQ sums its keys in the same order as the solution's kernel (8 k16 wgmmas per
block where it had 4 per half), so its bits should match.

    bwd(q, k, v, do, lse, delta, dq, dk, dv, causal, scale)   the solution's dK/dV, this dQ
    dq_new(...), dq_old(...)                                  the dQ kernels alone
"""
import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
SOLUTION = ROOT / "solutions" / "13_flash_attention" / "triton" / "flash_attention.py"


def _load_solution():
    name = "ex13_solution"   # one copy per process: importing it registers ex13_triton::* ops
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, SOLUTION)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
    return sys.modules[name]


fa = _load_solution()
assert fa.GLUON, "needs Triton 3.6's Gluon"

from triton.experimental import gluon  # noqa: E402
from triton.experimental.gluon import language as gl  # noqa: E402
from triton.experimental.gluon.language.nvidia.hopper import (  # noqa: E402
    fence_async_shared, mbarrier, tma, warpgroup_mma, warpgroup_mma_wait)
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor  # noqa: E402

_split, LOG2E, GLUON_BWD, GLUON_BLOCK = fa._split, fa.LOG2E, fa.GLUON_BWD, fa.GLUON_BLOCK
_gluon_load_once = fa._gluon_load_once   # a module global, so the Gluon functions below see it

# this experiment's plan at D 64: ring depth (a stage is K + V, 2 x [128, 64] bf16 = 32 KB),
# dO as a register operand, key blocks in pairs
PLAN = dict(STAGES=4, DOREG=True, PAIRS=False)
# the variants gpu.py checks and times (offline.txt: none spills or serialises its wgmmas; "S4
# DOREG PAIRS", left out, does: ptxas C7512)
VARIANTS = {"S4": PLAN,
            "S3": dict(STAGES=3, DOREG=True, PAIRS=False),
            "S6": dict(STAGES=6, DOREG=True, PAIRS=False),
            "S4-dOsmem": dict(STAGES=4, DOREG=False, PAIRS=False),
            "S4-dOsmem-PAIRS": dict(STAGES=4, DOREG=False, PAIRS=True)}


@gluon.jit
def _dq128_load(q_desc, do_desc, k_desc, v_desc, q_smem, do_smem, k_smem, v_smem,
                qdo_bar, ready, empty, q_row, kv_row0, n_kv,
                BLK: gl.constexpr, BN: gl.constexpr, STAGES: gl.constexpr):
    """The producer warp: Q and dO once (a BLK-row half per consumer), then key blocks of BN
    rows (K, V) into the ring, each stage refilled once both consumers released it."""
    _gluon_load_once(q_desc, do_desc, q_row, qdo_bar, q_smem, do_smem, BLK)
    nbytes: gl.constexpr = 2 * k_desc.block_type.nbytes
    for j in range(n_kv):
        s = j % STAGES
        mbarrier.wait(empty.index(s), ((j // STAGES) & 1) ^ 1)
        mbarrier.expect(ready.index(s), nbytes)
        row = kv_row0 + j * BN
        tma.async_copy_global_to_shared(k_desc, [row, 0], ready.index(s), k_smem.index(s))
        tma.async_copy_global_to_shared(v_desc, [row, 0], ready.index(s), v_smem.index(s))


@gluon.jit
def _dq128_issue(j, qa, doa, k_smem, v_smem, ready, BLK: gl.constexpr, BN: gl.constexpr,
                 STAGES: gl.constexpr):
    """Wait for key block j; issue S = Q K_jᵀ and dP = dO V_jᵀ, [BLK, BN] each."""
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BN, 16])
    s = j % STAGES
    mbarrier.wait(ready.index(s), (j // STAGES) & 1)
    zero = gl.zeros([BLK, BN], gl.float32, layout=s_layout)
    s_tok = warpgroup_mma(qa, k_smem.index(s).permute((1, 0)), zero, use_acc=False,
                          is_async=True)
    dp_tok = warpgroup_mma(doa, v_smem.index(s).permute((1, 0)), zero, use_acc=False,
                           is_async=True)
    return s_tok, dp_tok


@gluon.jit
def _dq128_rest(j, s_tok, dp_tok, lse, delta, dq, k_smem, qk_scale, MASK: gl.constexpr,
                ROW0: gl.constexpr, BLK: gl.constexpr, BN: gl.constexpr, HEAD_D: gl.constexpr,
                STAGES: gl.constexpr):
    """Key block j once S_j and dP_j are issued: P, dS, and issue dQ += dS K_j (the caller
    retires it). MASK: the diagonal block, whose key 0 is query -ROW0 of this warpgroup's:
    keep key c <= ROW0 + query r."""
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BN, 16])
    a_layout: gl.constexpr = gl.DotOperandLayout(
        operand_index=0, parent=gl.NVMMADistributedLayout(
            version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, HEAD_D, 16]), k_width=2)
    sc = warpgroup_mma_wait(num_outstanding=1, deps=(s_tok,))   # S done; dP may run
    p = gl.exp2(sc * qk_scale - lse[:, None])                   # under dP
    if MASK:   # after the exp2, as the solution masks: an inf there is dropped
        r = gl.arange(0, BLK, layout=gl.SliceLayout(1, s_layout))
        c = gl.arange(0, BN, layout=gl.SliceLayout(0, s_layout))
        p = gl.where(c[None, :] <= r[:, None] + ROW0, p, 0.0)
    dp = warpgroup_mma_wait(num_outstanding=0, deps=(dp_tok,))
    ds = p * (dp - delta[:, None])                              # the fp32 P
    ds_op = gl.convert_layout(ds.to(gl.bfloat16), a_layout)
    dq_tok = warpgroup_mma(ds_op, k_smem.index(j % STAGES), dq, is_async=True)
    return dq_tok, ds_op


@gluon.jit
def _dq128_step(j, qa, doa, lse, delta, dq, k_smem, v_smem, ready, empty, qk_scale,
                MASK: gl.constexpr, ROW0: gl.constexpr, BLK: gl.constexpr, BN: gl.constexpr,
                HEAD_D: gl.constexpr, STAGES: gl.constexpr):
    """Key block j into dq, every wgmma retired inside; releases its stage."""
    s_tok, dp_tok = _dq128_issue(j, qa, doa, k_smem, v_smem, ready, BLK, BN, STAGES)
    dq_tok, ds_op = _dq128_rest(j, s_tok, dp_tok, lse, delta, dq, k_smem, qk_scale, MASK, ROW0,
                                BLK, BN, HEAD_D, STAGES)
    dq, ds_op = warpgroup_mma_wait(num_outstanding=0, deps=(dq_tok, ds_op))
    mbarrier.arrive(empty.index(j % STAGES), count=1)
    return dq


@gluon.jit
def _dq128_pair(j, qa, doa, lse, delta, dq, k_smem, v_smem, ready, empty, qk_scale,
                BLK: gl.constexpr, BN: gl.constexpr, HEAD_D: gl.constexpr,
                STAGES: gl.constexpr):
    """Key blocks j and j + 1 (unmasked): dQ_j in flight while S_{j+1}, dP_{j+1} are issued,
    retired (groups retire in order) before the rest of j + 1."""
    s_tok, dp_tok = _dq128_issue(j, qa, doa, k_smem, v_smem, ready, BLK, BN, STAGES)
    dq_tok, ds_op = _dq128_rest(j, s_tok, dp_tok, lse, delta, dq, k_smem, qk_scale, False, 0,
                                BLK, BN, HEAD_D, STAGES)
    s_tok, dp_tok = _dq128_issue(j + 1, qa, doa, k_smem, v_smem, ready, BLK, BN, STAGES)
    dq, ds_op = warpgroup_mma_wait(num_outstanding=2, deps=(dq_tok, ds_op))
    mbarrier.arrive(empty.index(j % STAGES), count=1)
    dq_tok, ds_op = _dq128_rest(j + 1, s_tok, dp_tok, lse, delta, dq, k_smem, qk_scale, False,
                                0, BLK, BN, HEAD_D, STAGES)
    dq, ds_op = warpgroup_mma_wait(num_outstanding=0, deps=(dq_tok, ds_op))
    mbarrier.arrive(empty.index((j + 1) % STAGES), count=1)
    return dq


@gluon.jit
def _dq128_queries(dq_desc, lse_ptr, dl_ptr, q_smem, do_smem, k_smem, v_smem,
                   qdo_bar, ready, empty, q_row, n_kv, qk_scale, scale,
                   WG: gl.constexpr, BLK: gl.constexpr, BN: gl.constexpr, HEAD_D: gl.constexpr,
                   STAGES: gl.constexpr, CAUSAL: gl.constexpr, DOREG: gl.constexpr,
                   PAIRS: gl.constexpr):
    """A consumer warpgroup: queries WG·BLK ... WG·BLK + BLK - 1 of the program's 2·BLK, over
    all n_kv key blocks (causal: the last one, the program's own keys, masked)."""
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BN, 16])
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, HEAD_D, 16])
    qa_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=s_layout, k_width=2)
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
        n_full = n_kv - 1                         # key blocks wholly before these queries
    else:
        n_full = n_kv
    if PAIRS:
        for j in range(0, n_full - 1, 2):
            dq = _dq128_pair(j, qa, doa, lse, delta, dq, k_smem, v_smem, ready, empty,
                             qk_scale, BLK, BN, HEAD_D, STAGES)
        if n_full % 2 == 1:
            dq = _dq128_step(n_full - 1, qa, doa, lse, delta, dq, k_smem, v_smem, ready, empty,
                             qk_scale, False, 0, BLK, BN, HEAD_D, STAGES)
    else:
        for j in range(n_full):
            dq = _dq128_step(j, qa, doa, lse, delta, dq, k_smem, v_smem, ready, empty,
                             qk_scale, False, 0, BLK, BN, HEAD_D, STAGES)
    if CAUSAL:
        dq = _dq128_step(n_full, qa, doa, lse, delta, dq, k_smem, v_smem, ready, empty,
                         qk_scale, True, WG * BLK, BLK, BN, HEAD_D, STAGES)
    # the epilogue through this warpgroup's own Q buffer (Q is in registers)
    q_buf.store((dq * scale).to(dq_desc.dtype))
    fence_async_shared()
    tma.async_copy_shared_to_global(dq_desc, [q_row + WG * BLK, 0], q_buf)
    tma.store_wait(pendings=0)


@gluon.jit
def _dq128_kernel(q_desc, do_desc, k_desc, v_desc, dq_desc, LSE, DELTA,
                  S, BH, scale_hi, scale_lo, qk_scale_hi, qk_scale_lo,
                  HEAD_D: gl.constexpr, BLK: gl.constexpr, BN: gl.constexpr,
                  STAGES: gl.constexpr, CAUSAL: gl.constexpr, DOREG: gl.constexpr,
                  PAIRS: gl.constexpr):
    """One program per (batch*head, block of 2·BLK queries), key blocks of BN = 2·BLK rows.
    q, do, dq descriptors: [BLK, D] tiles; k, v: [BN, D]. Shared memory: Q, dO 4 x [BLK, D],
    a stage (K, V) 2 x [BN, D]: at D 64 and 4 stages 160 KB."""
    gl.static_assert(BN == 2 * BLK, "the causal diagonal is the program's own key block")
    n_qb = S // (2 * BLK)
    if CAUSAL:   # the last query block sees every key: the longest first, heads fastest
        hz = gl.program_id(0) % BH
        start_m = (n_qb - 1 - gl.program_id(0) // BH) * (2 * BLK)
        n_kv = start_m // BN + 1                   # up to and with the diagonal block
    else:        # head-major
        hz = gl.program_id(0) // n_qb
        start_m = gl.program_id(0) % n_qb * (2 * BLK)
        n_kv = S // BN
    q_row = hz * S + start_m
    kv_row0 = hz * S
    scale = scale_hi + scale_lo                    # _join's values: the same scales, bit for bit
    qk_scale = qk_scale_hi + qk_scale_lo

    q_smem = gl.allocate_shared_memory(q_desc.dtype, [2, BLK, HEAD_D], q_desc.layout)
    do_smem = gl.allocate_shared_memory(do_desc.dtype, [2, BLK, HEAD_D], do_desc.layout)
    k_smem = gl.allocate_shared_memory(k_desc.dtype, [STAGES, BN, HEAD_D], k_desc.layout)
    v_smem = gl.allocate_shared_memory(v_desc.dtype, [STAGES, BN, HEAD_D], v_desc.layout)
    qdo_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    mbarrier.init(qdo_bar, count=1)
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)     # the producer's expect, then the bytes
        mbarrier.init(empty.index(i), count=2)     # both consumers read every stage
    fence_async_shared()

    gl.warp_specialize([
        (_dq128_queries, (dq_desc, LSE, DELTA, q_smem, do_smem, k_smem, v_smem, qdo_bar, ready,
                          empty, q_row, n_kv, qk_scale, scale, 0, BLK, BN, HEAD_D, STAGES,
                          CAUSAL, DOREG, PAIRS)),
        (_dq128_queries, (dq_desc, LSE, DELTA, q_smem, do_smem, k_smem, v_smem, qdo_bar, ready,
                          empty, q_row, n_kv, qk_scale, scale, 1, BLK, BN, HEAD_D, STAGES,
                          CAUSAL, DOREG, PAIRS)),
        (_dq128_load, (q_desc, do_desc, k_desc, v_desc, q_smem, do_smem, k_smem, v_smem,
                       qdo_bar, ready, empty, q_row, kv_row0, n_kv, BLK, BN, STAGES)),
    ], [4, 1], [240, 24])


# --- host side -----------------------------------------------------------------------------------

def _descs(B, H, S, D, rows, **ts):
    """[rows, D] bf16 tile descriptors over the [B*H*S, D] rows of each tensor."""
    layout = gl.NVMMASharedLayout.get_default_for([rows, D], gl.bfloat16)
    return {name: TensorDescriptor.from_tensor(t.view(B * H * S, D), [rows, D], layout)
            for name, t in ts.items()}


def dkdv(q, k, v, do, lse, delta, dk, dv, causal, scale):
    """The solution's _dkdv_gluon_kernel, launched as _bwd_gluon launches it."""
    B, H, S, D = q.shape
    plan = GLUON_BWD[D]
    blk = GLUON_BLOCK // 2
    row = gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=32, rank=1)
    d = _descs(B, H, S, D, blk, q=q, k=k, v=v, do=do, dk=dk, dv=dv)
    fa._dkdv_gluon_kernel[(B * H * (S // GLUON_BLOCK),)](
        d["q"], d["do"], d["k"], d["v"], d["dk"], d["dv"],
        TensorDescriptor.from_tensor(lse.view(B * H * S), [blk], row),
        TensorDescriptor.from_tensor(delta.view(B * H * S), [blk], row),
        S, B * H, *_split(scale), *_split(scale * LOG2E), HEAD_D=D, BLK=blk,
        STAGES=plan["DKDV_STAGES"], CAUSAL=bool(causal), KREG=plan["KREG"], num_warps=4)


def dq_old(q, k, v, do, lse, delta, dq, causal, scale):
    """The solution's _dq_gluon_kernel alone, launched as _bwd_gluon launches it."""
    B, H, S, D = q.shape
    plan = GLUON_BWD[D]
    blk = GLUON_BLOCK // 2
    d = _descs(B, H, S, D, blk, q=q, k=k, v=v, do=do, dq=dq)
    fa._dq_gluon_kernel[(B * H * (S // GLUON_BLOCK),)](
        d["q"], d["do"], d["k"], d["v"], d["dq"], lse, delta, S, B * H,
        *_split(scale), *_split(scale * LOG2E), HEAD_D=D, BLK=blk, STAGES=plan["DQ_STAGES"],
        CAUSAL=bool(causal), DOREG=plan["DOREG"], PAIRS=plan["PAIRS"], num_warps=4)


def dq_new(q, k, v, do, lse, delta, dq, causal, scale, plan=None):
    """This experiment's dQ kernel: key blocks of 128 (lse = lse2 [B, H, S] fp32, delta)."""
    plan = PLAN if plan is None else plan
    B, H, S, D = q.shape
    assert D == 64 and S % GLUON_BLOCK == 0 and q.dtype == k.dtype == v.dtype == do.dtype
    blk = GLUON_BLOCK // 2
    d = _descs(B, H, S, D, blk, q=q, do=do, dq=dq)
    d.update(_descs(B, H, S, D, 2 * blk, k=k, v=v))
    _dq128_kernel[(B * H * (S // GLUON_BLOCK),)](
        d["q"], d["do"], d["k"], d["v"], d["dq"], lse, delta, S, B * H,
        *_split(scale), *_split(scale * LOG2E), HEAD_D=D, BLK=blk, BN=2 * blk,
        STAGES=plan["STAGES"], CAUSAL=bool(causal), DOREG=plan["DOREG"], PAIRS=plan["PAIRS"],
        num_warps=4)


def bwd(q, k, v, do, lse, delta, dq, dk, dv, causal, scale, plan=None):
    """_bwd_gluon's contract (lse = lse2, delta from _bwd_delta_kernel): the solution's dK/dV
    kernel unchanged, then this dQ kernel."""
    dkdv(q, k, v, do, lse, delta, dk, dv, causal, scale)
    dq_new(q, k, v, do, lse, delta, dq, causal, scale, plan)
