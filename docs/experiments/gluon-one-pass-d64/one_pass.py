"""Issue 38, experiment c: a five-matmul Gluon backward for D 64 on Hopper (FlashAttention-3's
plan, simplified), next to exercise 13's two-kernel (seven-matmul, deterministic) backward.

One kernel, one program per (batch*head, block of 128 keys), built from a copy of the
solution's dK/dV kernel (GLUON_BWD[64]: 4 stages, K and V as register operands):
  - a producer warp streams query blocks of 64 (Q, dO, lse2, delta) through a 4-stage ring
    (the solution's own _dkdv_gluon_load, reused as is);
  - two consumer warpgroups of 64 keys each compute, per query block i, Sᵀ, dPᵀ, dV += Pᵀ dO,
    dSᵀ, dK += dSᵀ Q exactly as the solution does (so dK and dV are the solution's bits), and
    store dSᵀ (16-bit) into shared memory;
  - the block's dQ partial, dQ_i += dS_i K (all 128 keys), is ONE chained pair of wgmmas
    [64 q x 64 k] @ [64 k x D] + [64 q x 64 k] @ [64 k x D] issued by one warpgroup, the "owner"
    (warpgroup 0 for even blocks of the program's ring, warpgroup 1 for odd ones: the work
    alternates), reading both warpgroups' dSᵀ tiles (transposed views) and both K halves from
    shared memory. The two halves are summed in the tensor cores' fp32 accumulator, so only
    one [64, D] fp32 tile per (query block, key block) goes to L2 (4.3 GB at the leaderboard
    case, not 8.6), with no extra shared-memory round trip to add them;
  - the owner writes the fp32 partial into a shared-memory slot (one per owner) and a separate
    1-warp "writer" partition adds it to the global fp32 buffer dq_accum [B*H*S, D] with the
    TMA reduce-add (cp.reduce.async.bulk.tensor.2d ... .add.f32), through the builder's
    create_async_tma_reduce (Gluon 3.6 does not wrap it; see async_reduce_add). The writer
    keeps the consumers free of bulk-group waits and, ORDERED, of the semaphore spin.
Per block pair (64 keys x 64 queries) a warpgroup issues S, dP, dV, dK and on average half of
the two dQ wgmmas: 5 matmuls, against the solution's 7 (its dQ kernel recomputes S and dP).
After the kernel, a small Triton kernel writes dq = dq_accum * scale in q's dtype (the solution
applies scale to dq the same way: the fp32 sum of dS K times scale_hi + scale_lo, then cast).

ORDERED (constexpr): FlashAttention-3's deterministic order. sem[bh, i] (int32, zeroed per call)
counts the key blocks whose partial for query block i is already added. Key block kb's writer
waits (ld.acquire.gpu spin) until sem[bh, i] == kb before its reduce-add for i, waits for the
bulk op to COMPLETE (cp.async.bulk.wait_group 0, not .read), fences (fence.proxy.async.global:
the async proxy's writes before the generic release) and increments (red.release.gpu). So
every dq_accum row is summed over key blocks in ascending order, every run.
Deadlock argument: the key blocks touching query block i are kb = 0 .. (causal: i // 2; else:
all), so "kb blocks before mine touch i" = kb, and a program waits only on programs of the same
head with a smaller kb. Both launch orders of the solution put a smaller kb at a smaller program
id (causal: pid = kb * BH + bh, the longest first, heads fastest; not causal: head-major,
pid = bh * n_kb + kb), and CTAs are dispatched in increasing id (the assumption FA3 makes too):
every program waited on was resident before the waiter, or has finished. A waited-on program
itself waits only on still smaller ids, so the smallest unfinished program waits on nothing and
progresses (induction); no program waits on one that is not yet launched. Inside a program the
spin blocks only the writer warp: the consumers keep computing until both dq slots are full,
and nothing another program needs waits on this program. (Not on a GPU yet: see README.)
"""
import importlib.util
import os
import sys

import torch
import triton
import triton.language as tl
from triton._C.libtriton import ir
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language._core import builtin
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared, mbarrier, tma, warpgroup_mma, warpgroup_mma_wait)
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

_REL = os.path.join("solutions", "13_flash_attention", "triton", "flash_attention.py")
_HERE = os.path.dirname(os.path.abspath(__file__))
# the solution file: $EX13_SOLUTION, else the repository root we run from (gpu.py's way), else
# a checkout beside this folder or above it
SOLUTION = next(p for p in [os.environ.get("EX13_SOLUTION"), _REL,
                            os.path.join(_HERE, "..", "main", _REL),
                            os.path.join(_HERE, "..", _REL), os.path.join(_HERE, "..", "..", _REL),
                            "/work/main/" + _REL] if p and os.path.exists(p))


def _load_solution():
    name = "ex13_solution_for_exp38c"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, SOLUTION)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


fa = _load_solution()
assert fa.GLUON, "needs Triton 3.6's Gluon"
_dkdv_gluon_load = fa._dkdv_gluon_load   # the solution's producer warp, as is
LOG2E = fa.LOG2E
BLK = 64           # rows of a consumer warpgroup (keys) and of a streamed query block
PROG = 128         # keys per program


@builtin
def async_reduce_add(tensor_desc, coord, src, _semantic=None):
    """TMA reduce-add of a shared-memory tile into global memory: hopper.tma's
    async_copy_shared_to_global, adding instead of writing (the builder's
    create_async_tma_reduce, which Gluon 3.6 does not export; issue 38's probe, d975301)."""
    coord = _semantic._convert_to_ir_values(coord, require_i64=False)
    _semantic.builder.create_async_tma_reduce(ir.DESCRIPTOR_REDUCE_KIND.ADD, tensor_desc.handle,
                                              coord, src.handle)


# --- ORDERED's semaphore, in the 1-warp writer partition (inline PTX, every lane the same) ---

@gluon.jit
def _spin_until(ptr, target):
    """Wait until *ptr >= target (ld.acquire.gpu), then order the async proxy (the TMA
    reduce-add this warp issues next) after the acquire. Every lane spins on the same word."""
    lay: gl.constexpr = gl.BlockedLayout([1], [32], [1], [0])
    ptrs = ptr + gl.zeros([32], gl.int32, layout=lay)
    tgt = target + gl.zeros([32], gl.int32, layout=lay)
    v = gl.inline_asm_elementwise(
        """{
        .reg .pred p;
        SPIN_WAIT:
        ld.acquire.gpu.global.u32 $0, [$1];
        setp.lt.s32 p, $0, $2;
        @p bra SPIN_WAIT;
        fence.proxy.async.global;
        }""",
        "=r,l,r", [ptrs, tgt], dtype=gl.int32, is_pure=False, pack=1)
    return v


@gluon.jit
def _complete_and_release(ptr):
    """After this warp's reduce-add: wait for the bulk op to complete (its writes done, not only
    its shared-memory reads), order the async proxy's writes before the generic release, and
    increment *ptr once (lane 0, after bar.warp.sync: whichever lane elect.sync picked to issue
    the copy has passed its wait)."""
    lay: gl.constexpr = gl.BlockedLayout([1], [32], [1], [0])
    ptrs = ptr + gl.zeros([32], gl.int32, layout=lay)
    v = gl.inline_asm_elementwise(
        """{
        .reg .pred p;
        .reg .u32 lane;
        cp.async.bulk.wait_group 0;
        fence.proxy.async.global;
        bar.warp.sync -1;
        mov.u32 lane, %laneid;
        setp.eq.u32 p, lane, 0;
        @p red.release.gpu.global.add.s32 [$1], 1;
        mov.u32 $0, 0;
        }""",
        "=r,l", [ptrs], dtype=gl.int32, is_pure=False, pack=1)
    return v


@gluon.jit
def _complete1_and_release(ptr):
    """_complete_and_release for the bulk group before the latest (PIPE: the reduce issued one
    turn ago): at most one group still pending, so that one has completed."""
    lay: gl.constexpr = gl.BlockedLayout([1], [32], [1], [0])
    ptrs = ptr + gl.zeros([32], gl.int32, layout=lay)
    v = gl.inline_asm_elementwise(
        """{
        .reg .pred p;
        .reg .u32 lane;
        cp.async.bulk.wait_group 1;
        fence.proxy.async.global;
        bar.warp.sync -1;
        mov.u32 lane, %laneid;
        setp.eq.u32 p, lane, 0;
        @p red.release.gpu.global.add.s32 [$1], 1;
        mov.u32 $0, 0;
        }""",
        "=r,l", [ptrs], dtype=gl.int32, is_pure=False, pack=1)
    return v


@gluon.jit
def _op_writer(dqa_desc, dq_smem, dq_full, dq_empty, SEM, sem_row, dq_row0, n_it, kb, n_kb,
               BLK: gl.constexpr, ORDERED: gl.constexpr, SLOTS: gl.constexpr,
               CAUSAL: gl.constexpr, DESC: gl.constexpr, PAR: gl.constexpr,
               NW: gl.constexpr, PIPE: gl.constexpr):
    """A writer warp (PAR of NW: blocks t = PAR, PAR + NW, ...): each query block's dQ partial
    (slot t % SLOTS, filled by that block's owner) added into dq_accum in ring order; ORDERED:
    behind the semaphore (module doc). PIPE: a block's completion is waited for (and its
    semaphore released, its slot freed) after the next block's reduce is issued, so one
    reduce's trip to L2 overlaps the next one's acquire."""
    for t in range(PAR, n_it, NW):
        w = t % SLOTS
        mbarrier.wait(dq_full.index(w), (t // SLOTS) & 1)
        if ORDERED:
            # DESC: the key blocks after mine add first (the order in which they arrive: a
            # program of a larger kb starts nearer the diagonal); causal, the blocks after kb
            # touching query block 2kb + t are kb+1 .. (2kb + t) // 2: t // 2 of them
            if DESC:
                if CAUSAL:
                    _spin_until(SEM + sem_row + t, t // 2)
                else:
                    _spin_until(SEM + sem_row + t, n_kb - 1 - kb)
            else:
                _spin_until(SEM + sem_row + t, kb)
        async_reduce_add(dqa_desc, [dq_row0 + t * BLK, 0], dq_smem.index(w))
        if ORDERED:
            if PIPE:
                if t >= NW:
                    _complete1_and_release(SEM + sem_row + t - NW)
                    mbarrier.arrive(dq_empty.index((t - NW) % SLOTS), count=1)
            else:
                _complete_and_release(SEM + sem_row + t)
                mbarrier.arrive(dq_empty.index(w), count=1)
        else:
            tma.store_wait(pendings=0)     # the slot read: the owner may refill it
            mbarrier.arrive(dq_empty.index(w), count=1)
    if ORDERED:
        if PIPE:
            last = PAR + ((n_it - 1 - PAR) // NW) * NW
            _complete_and_release(SEM + sem_row + last)
            mbarrier.arrive(dq_empty.index(last % SLOTS), count=1)
    tma.store_wait(pendings=0)


@gluon.jit
def _op_step(t, ka, va, dk, dv, q_smem, do_smem, lse_smem, dl_smem, ready, empty,
             ds_smem, k_smem, dq_smem, ds_ready, ds_free, dq_full, dq_empty, qk_scale,
             WG: gl.constexpr, MASK: gl.constexpr, OWNER: gl.constexpr, ALONE: gl.constexpr,
             BLK: gl.constexpr, HEAD_D: gl.constexpr, STAGES: gl.constexpr, SLOTS: gl.constexpr):
    """Query block t of the ring into this warpgroup's dK, dV (the solution's _dkdv_gluon_step,
    same order of operations), plus dSᵀ into ds_smem[2·(t%2) + WG]; OWNER (t % 2 == WG): also
    dQ_t = dS_t K over both warpgroups' keys (ALONE: the causal first block, where the other
    warpgroup's keys all come after the queries: this warpgroup's half only), handed to the
    writer through dq_smem[t % SLOTS] (SLOTS even: a slot always has the same owner). Every
    wgmma retired inside."""
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BLK, 16])
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, HEAD_D, 16])
    a_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    col_layout: gl.constexpr = gl.SliceLayout(0, s_layout)
    dt: gl.constexpr = q_smem.dtype
    s = t % STAGES
    b = t % 2          # == WG for the owner
    u = t // 2         # this buffer's use count
    q = q_smem.index(s)
    do = do_smem.index(s)
    mbarrier.wait(ready.index(s), (t // STAGES) & 1)
    zero = gl.zeros([BLK, BLK], gl.float32, layout=s_layout)
    st_tok = warpgroup_mma(ka, q.permute((1, 0)), zero, use_acc=False, is_async=True)
    zero = gl.zeros([BLK, BLK], gl.float32, layout=s_layout)
    dpt_tok = warpgroup_mma(va, do.permute((1, 0)), zero, use_acc=False, is_async=True)
    st = warpgroup_mma_wait(num_outstanding=1, deps=(st_tok,))
    lse = lse_smem.index(s).load(col_layout)
    pt = gl.exp2(st * qk_scale - lse[None, :])
    if MASK:
        r = gl.arange(0, BLK, layout=gl.SliceLayout(1, s_layout))
        c = gl.arange(0, BLK, layout=col_layout)
        pt = gl.where(c[None, :] >= r[:, None], pt, 0.0)
    pt_op = gl.convert_layout(pt.to(dt), a_layout)
    dv_tok = warpgroup_mma(pt_op, do, dv, is_async=True)
    dpt = warpgroup_mma_wait(num_outstanding=1, deps=(dpt_tok,))
    delta = dl_smem.index(s).load(col_layout)
    dst = pt * (dpt - delta[None, :])
    ds16 = dst.to(dt)
    ds_op = gl.convert_layout(ds16, a_layout)
    dk_tok = warpgroup_mma(ds_op, q, dk, is_async=True)
    # dSᵀ (keys x queries) for the owner's dQ, under dV and dK; the buffer is free once the
    # owner's dQ of two blocks ago retired (a fresh barrier passes the first wait)
    mbarrier.wait(ds_free.index(b), (u & 1) ^ 1)
    mine = ds_smem.index(2 * b + WG)
    mine.store(ds16)
    fence_async_shared()
    if OWNER:
        # the other half; then dQ_t [64 q, D] = dS [q, my keys] K_mine + dS [q, its keys] K_its
        zero_o = gl.zeros([BLK, HEAD_D], gl.float32, layout=o_layout)
        if ALONE:
            dq_tok = warpgroup_mma(mine.permute((1, 0)), k_smem.index(WG), zero_o,
                                   use_acc=False, is_async=True)
        else:
            mbarrier.wait(ds_ready.index(b), u & 1)
            d0 = ds_smem.index(2 * b)
            d1 = ds_smem.index(2 * b + 1)
            dq_tok = warpgroup_mma(d0.permute((1, 0)), k_smem.index(0), zero_o,
                                   use_acc=False, is_async=True)
            dq_tok = warpgroup_mma(d1.permute((1, 0)), k_smem.index(1), dq_tok, is_async=True)
        # wgmma groups retire in order: dV, dK first (the stage's Q, dO free), then dQ
        dv, dk, pt_op, ds_op = warpgroup_mma_wait(
            num_outstanding=1 if ALONE else 2, deps=(dv_tok, dk_tok, pt_op, ds_op))
        mbarrier.arrive(empty.index(s), count=1)
        dq = warpgroup_mma_wait(num_outstanding=0, deps=(dq_tok,))
        mbarrier.arrive(ds_free.index(b), count=1)   # both dS halves read: refillable
        # the partial to the writer: slot t % SLOTS, free once the writer's reduce of SLOTS
        # blocks ago has read it
        w = t % SLOTS
        mbarrier.wait(dq_empty.index(w), ((t // SLOTS) & 1) ^ 1)
        slot = dq_smem.index(w)
        slot.store(dq)
        fence_async_shared()
        mbarrier.arrive(dq_full.index(w), count=1)
    else:
        mbarrier.arrive(ds_ready.index(b), count=1)
        dv, dk, pt_op, ds_op = warpgroup_mma_wait(num_outstanding=0,
                                                  deps=(dv_tok, dk_tok, pt_op, ds_op))
        mbarrier.arrive(empty.index(s), count=1)
    return dk, dv


@gluon.jit
def _op_keys(dk_desc, dv_desc, q_smem, do_smem, k_smem, v_smem, lse_smem, dl_smem, kv_bar,
             ready, empty, ds_smem, dq_smem, ds_ready, ds_free, dq_full, dq_empty,
             kv_row, n_it, qk_scale, scale,
             WG: gl.constexpr, BLK: gl.constexpr, HEAD_D: gl.constexpr, STAGES: gl.constexpr,
             CAUSAL: gl.constexpr, KREG: gl.constexpr, SLOTS: gl.constexpr):
    """A consumer warpgroup: keys WG·64 ... WG·64 + 63 of the program's 128 (the solution's
    _dkdv_gluon_keys, the ring walked in pairs: block 2p owned by warpgroup 0, 2p + 1 by 1;
    n_it is even, S and the first query being multiples of 128)."""
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, HEAD_D, 16])
    k_buf = k_smem.index(WG)
    v_buf = v_smem.index(WG)
    mbarrier.wait(kv_bar, 0)
    if KREG:
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
    p0 = 0
    if CAUSAL:
        # block 0 is WG0's diagonal (WG1's keys all after it: skipped, its stage released once
        # loaded, and its dS slot "filled" with nothing: ALONE), block 1 WG1's diagonal
        if WG == 0:
            dk, dv = _op_step(0, ka, va, dk, dv, q_smem, do_smem, lse_smem, dl_smem, ready,
                              empty, ds_smem, k_smem, dq_smem, ds_ready, ds_free, dq_full,
                              dq_empty, qk_scale, WG, True, True, True, BLK, HEAD_D, STAGES, SLOTS)
            dk, dv = _op_step(1, ka, va, dk, dv, q_smem, do_smem, lse_smem, dl_smem, ready,
                              empty, ds_smem, k_smem, dq_smem, ds_ready, ds_free, dq_full,
                              dq_empty, qk_scale, WG, False, False, False, BLK, HEAD_D, STAGES, SLOTS)
        else:
            mbarrier.wait(ready.index(0), 0)
            mbarrier.arrive(empty.index(0), count=1)
            mbarrier.arrive(ds_ready.index(0), count=1)   # keeps buffer 0's phases in step
            dk, dv = _op_step(1, ka, va, dk, dv, q_smem, do_smem, lse_smem, dl_smem, ready,
                              empty, ds_smem, k_smem, dq_smem, ds_ready, ds_free, dq_full,
                              dq_empty, qk_scale, WG, True, True, False, BLK, HEAD_D, STAGES, SLOTS)
        p0 = 1
    for p in range(p0, n_it // 2):
        dk, dv = _op_step(2 * p, ka, va, dk, dv, q_smem, do_smem, lse_smem, dl_smem, ready,
                          empty, ds_smem, k_smem, dq_smem, ds_ready, ds_free, dq_full, dq_empty,
                          qk_scale, WG, False, WG == 0, False, BLK, HEAD_D, STAGES, SLOTS)
        dk, dv = _op_step(2 * p + 1, ka, va, dk, dv, q_smem, do_smem, lse_smem, dl_smem, ready,
                          empty, ds_smem, k_smem, dq_smem, ds_ready, ds_free, dq_full, dq_empty,
                          qk_scale, WG, False, WG == 1, False, BLK, HEAD_D, STAGES, SLOTS)
    # K halves are read by the owners' dQ wgmmas until the last use of each dS buffer retired
    # (ds_free's last phase, n_it // 2 uses each): then the epilogue may overwrite them
    last = n_it // 2 - 1
    mbarrier.wait(ds_free.index(0), last & 1)
    mbarrier.wait(ds_free.index(1), last & 1)
    k_buf.store((dk * scale).to(dk_desc.dtype))
    v_buf.store(dv.to(dv_desc.dtype))
    fence_async_shared()
    tma.async_copy_shared_to_global(dk_desc, [kv_row + WG * BLK, 0], k_buf)
    tma.async_copy_shared_to_global(dv_desc, [kv_row + WG * BLK, 0], v_buf)
    tma.store_wait(pendings=0)


@gluon.jit
def _one_pass_kernel(q_desc, do_desc, k_desc, v_desc, dk_desc, dv_desc, lse_desc, dl_desc,
                     dqa_desc, SEM, S, BH, scale_hi, scale_lo, qk_scale_hi, qk_scale_lo,
                     HEAD_D: gl.constexpr, BLK: gl.constexpr, STAGES: gl.constexpr,
                     CAUSAL: gl.constexpr, KREG: gl.constexpr, ORDERED: gl.constexpr,
                     DS_LAYOUT: gl.constexpr, SLOTS: gl.constexpr, SPT: gl.constexpr,
                     NW: gl.constexpr, PIPE: gl.constexpr):
    """One program per (batch*head, 2·BLK keys), the solution's order; shared memory: the
    solution's (K, V 32 KB; 4 stages of Q, dO 64 KB; lse2, delta 2 KB) + dSᵀ 2 buffers x 2
    halves (32 KB) + SLOTS fp32 dQ slots (16 KB each): 198 KB at 4 stages and 4 slots."""
    n_kb = S // (2 * BLK)
    if CAUSAL:
        hz = gl.program_id(0) % BH
        if SPT:   # shortest first (the waited-on larger kb at smaller ids: DESC's order)
            kb = n_kb - 1 - gl.program_id(0) // BH
        else:
            kb = gl.program_id(0) // BH
        start_n = kb * (2 * BLK)
        q_lo = start_n
    else:
        hz = gl.program_id(0) // n_kb
        if SPT:
            kb = n_kb - 1 - gl.program_id(0) % n_kb
        else:
            kb = gl.program_id(0) % n_kb
        start_n = kb * (2 * BLK)
        q_lo = start_n * 0
    kv_row = hz * S + start_n
    n_it = (S - q_lo) // BLK
    q_row0 = hz * S + q_lo
    sem_row = hz * (S // BLK) + q_lo // BLK
    scale = scale_hi + scale_lo
    qk_scale = qk_scale_hi + qk_scale_lo

    q_smem = gl.allocate_shared_memory(q_desc.dtype, [STAGES, BLK, HEAD_D], q_desc.layout)
    do_smem = gl.allocate_shared_memory(do_desc.dtype, [STAGES, BLK, HEAD_D], do_desc.layout)
    k_smem = gl.allocate_shared_memory(k_desc.dtype, [2, BLK, HEAD_D], k_desc.layout)
    v_smem = gl.allocate_shared_memory(v_desc.dtype, [2, BLK, HEAD_D], v_desc.layout)
    lse_smem = gl.allocate_shared_memory(gl.float32, [STAGES, BLK], lse_desc.layout)
    dl_smem = gl.allocate_shared_memory(gl.float32, [STAGES, BLK], dl_desc.layout)
    ds_smem = gl.allocate_shared_memory(q_desc.dtype, [4, BLK, BLK], DS_LAYOUT)
    dq_smem = gl.allocate_shared_memory(gl.float32, [SLOTS, BLK, HEAD_D], dqa_desc.layout)
    kv_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    ds_ready = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    ds_free = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    dq_full = gl.allocate_shared_memory(gl.int64, [SLOTS, 1], mbarrier.MBarrierLayout())
    dq_empty = gl.allocate_shared_memory(gl.int64, [SLOTS, 1], mbarrier.MBarrierLayout())
    mbarrier.init(kv_bar, count=1)
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)
        mbarrier.init(empty.index(i), count=2)
    for i in gl.static_range(2):
        mbarrier.init(ds_ready.index(i), count=1)   # the non-owner's half is in
        mbarrier.init(ds_free.index(i), count=1)    # the owner's dQ wgmmas retired
    for i in gl.static_range(SLOTS):
        mbarrier.init(dq_full.index(i), count=1)    # the owner's partial is in its slot
        mbarrier.init(dq_empty.index(i), count=1)   # the writer's reduce has read the slot
    fence_async_shared()

    if NW == 2:
        gl.warp_specialize([
            (_op_keys, (dk_desc, dv_desc, q_smem, do_smem, k_smem, v_smem, lse_smem, dl_smem,
                        kv_bar, ready, empty, ds_smem, dq_smem, ds_ready, ds_free, dq_full,
                        dq_empty, kv_row, n_it, qk_scale, scale, 0, BLK, HEAD_D, STAGES, CAUSAL,
                        KREG, SLOTS)),
            (_op_keys, (dk_desc, dv_desc, q_smem, do_smem, k_smem, v_smem, lse_smem, dl_smem,
                        kv_bar, ready, empty, ds_smem, dq_smem, ds_ready, ds_free, dq_full,
                        dq_empty, kv_row, n_it, qk_scale, scale, 1, BLK, HEAD_D, STAGES, CAUSAL,
                        KREG, SLOTS)),
            (_dkdv_gluon_load, (q_desc, do_desc, k_desc, v_desc, lse_desc, dl_desc,
                                q_smem, do_smem, k_smem, v_smem, lse_smem, dl_smem,
                                kv_bar, ready, empty, kv_row, q_row0, n_it, BLK, STAGES)),
            (_op_writer, (dqa_desc, dq_smem, dq_full, dq_empty, SEM, sem_row, q_row0, n_it, kb,
                          n_kb, BLK, ORDERED, SLOTS, CAUSAL, SPT, 0, NW, PIPE)),
            (_op_writer, (dqa_desc, dq_smem, dq_full, dq_empty, SEM, sem_row, q_row0, n_it, kb,
                          n_kb, BLK, ORDERED, SLOTS, CAUSAL, SPT, 1, NW, PIPE)),
        ], [4, 1, 1, 1], [240, 24, 24, 24])
    else:
        gl.warp_specialize([
            (_op_keys, (dk_desc, dv_desc, q_smem, do_smem, k_smem, v_smem, lse_smem, dl_smem,
                        kv_bar, ready, empty, ds_smem, dq_smem, ds_ready, ds_free, dq_full,
                        dq_empty, kv_row, n_it, qk_scale, scale, 0, BLK, HEAD_D, STAGES, CAUSAL,
                        KREG, SLOTS)),
            (_op_keys, (dk_desc, dv_desc, q_smem, do_smem, k_smem, v_smem, lse_smem, dl_smem,
                        kv_bar, ready, empty, ds_smem, dq_smem, ds_ready, ds_free, dq_full,
                        dq_empty, kv_row, n_it, qk_scale, scale, 1, BLK, HEAD_D, STAGES, CAUSAL,
                        KREG, SLOTS)),
            (_dkdv_gluon_load, (q_desc, do_desc, k_desc, v_desc, lse_desc, dl_desc,
                                q_smem, do_smem, k_smem, v_smem, lse_smem, dl_smem,
                                kv_bar, ready, empty, kv_row, q_row0, n_it, BLK, STAGES)),
            (_op_writer, (dqa_desc, dq_smem, dq_full, dq_empty, SEM, sem_row, q_row0, n_it, kb,
                          n_kb, BLK, ORDERED, SLOTS, CAUSAL, SPT, 0, NW, PIPE)),
        ], [4, 1, 1], [240, 24, 24])


@triton.jit
def _dq_finish_kernel(DQA, DQ, n, scale_hi, scale_lo, BLOCK: tl.constexpr):
    """dq = dq_accum * scale, cast: the solution's (dq * scale).to(dtype), scale = hi + lo."""
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    ok = offs < n
    scale = scale_hi + scale_lo
    x = tl.load(DQA + offs, mask=ok)
    tl.store(DQ + offs, (x * scale).to(DQ.dtype.element_ty), mask=ok)


_GL_DTYPE = {torch.bfloat16: gl.bfloat16, torch.float16: gl.float16}


def _pad_rows(t, S, Sp, value=0.0):
    """[B, H, S, ...] -> [B, H, Sp, ...] contiguous, rows S.. filled with value."""
    if S == Sp:
        return t.contiguous()
    out = torch.full(t.shape[:2] + (Sp,) + t.shape[3:], value, dtype=t.dtype, device=t.device)
    out[:, :, :S] = t
    return out


def backward_from_delta(q, k, v, do, lse2, delta, causal, scale, ordered, stages=4,
                        slots=4, spt=False, nw=1, pipe=False):
    """The one-pass backward given delta = rowsum(dO * O): dq, dk, dv. S is padded to a multiple
    of 128 when needed (padded keys zero: no dQ contribution; padded queries lse2 = +inf: P = 0)."""
    B, H, S, D = q.shape
    assert D == 64, "the one-pass kernel is written for D 64"
    assert q.dtype in _GL_DTYPE and lse2.dtype == torch.float32
    Sp = triton.cdiv(S, PROG) * PROG
    q_, k_, v_, do_ = (_pad_rows(t, S, Sp) for t in (q, k, v, do))
    lse_ = _pad_rows(lse2, S, Sp, float("inf"))
    dl_ = _pad_rows(delta, S, Sp)
    dk = torch.empty_like(q_)
    dv = torch.empty_like(q_)
    dq_accum = torch.zeros(B * H * Sp, D, dtype=torch.float32, device=q.device)
    sem = torch.zeros(B * H * (Sp // BLK), dtype=torch.int32, device=q.device)
    gdt = _GL_DTYPE[q.dtype]
    tile = gl.NVMMASharedLayout.get_default_for([BLK, D], gdt)
    ds_layout = gl.NVMMASharedLayout.get_default_for([BLK, BLK], gdt)
    f32tile = gl.NVMMASharedLayout.get_default_for([BLK, D], gl.float32)
    row = gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=32, rank=1)
    d = {name: TensorDescriptor.from_tensor(t.view(B * H * Sp, D), [BLK, D], tile)
         for name, t in dict(q=q_, k=k_, v=v_, do=do_, dk=dk, dv=dv).items()}
    grid = (B * H * (Sp // PROG),)
    _one_pass_kernel[grid](
        d["q"], d["do"], d["k"], d["v"], d["dk"], d["dv"],
        TensorDescriptor.from_tensor(lse_.view(B * H * Sp), [BLK], row),
        TensorDescriptor.from_tensor(dl_.view(B * H * Sp), [BLK], row),
        TensorDescriptor.from_tensor(dq_accum, [BLK, D], f32tile), sem,
        Sp, B * H, *fa._split(scale), *fa._split(scale * LOG2E), HEAD_D=D, BLK=BLK,
        STAGES=stages, CAUSAL=bool(causal), KREG=True, ORDERED=bool(ordered),
        DS_LAYOUT=ds_layout, SLOTS=slots, SPT=bool(spt), NW=nw,
        PIPE=bool(pipe), num_warps=4)
    dq = torch.empty(B, H, Sp, D, dtype=q.dtype, device=q.device)
    n = dq.numel()
    _dq_finish_kernel[(triton.cdiv(n, 4096),)](dq_accum, dq, n, *fa._split(scale), BLOCK=4096,
                                              num_warps=4)
    if Sp != S:
        dq, dk, dv = (t[:, :, :S].contiguous() for t in (dq, dk, dv))
    return dq, dk, dv


def delta_of(o, do, lse2):
    """delta = rowsum(dO * O) by the solution's kernel ([B*H, S] fp32, as lse2)."""
    B, H, S, D = o.shape
    delta = torch.empty_like(lse2)
    fa._bwd_delta_kernel[(B * H, triton.cdiv(S, 64))](
        o, do, delta, *do.stride(), H, S, HEAD_D=D, BLOCK_M=64, F64=False, num_warps=4)
    return delta


def backward(q, k, v, o, do, lse2, delta, causal, scale, ordered, spt=False, nw=1, pipe=False):
    """dq, dk, dv of o = attention(q, k, v); delta None: computed here (the solution's kernel).
    q, k, v, o, do: [B, H, S, 64] bf16/fp16 contiguous; lse2: [B, H, S] fp32 (the solution
    forward's m + log2 l)."""
    if delta is None:
        delta = delta_of(o, do, lse2)
    return backward_from_delta(q, k, v, do, lse2, delta, causal, scale, ordered, spt=spt, nw=nw,
                               pipe=pipe)


def forward(q, k, v, causal, scale):
    """The solution's forward (o, lse2)."""
    return fa._fwd_impl(q, k, v, causal, scale, fa._direct)
