"""Experiment: a deterministic FlashAttention backward in ONE pass, dQ by ordered fp32 atomics.

RESULT (one NVIDIA H200, torch 2.11, triton 3.6, 2026-11-29): correct and deterministic, and
slower than the solution's two-kernel backward at both of issue 38's cases, even without the
order (plain atomics) and with TMA bulk reductions: docs/performance.md, "flash-attention-one-
pass". Kept in git history, not in the tree (a Triton kernel outside solutions/).

Exercise 13's solution (solutions/13_flash_attention/triton/flash_attention.py) is deterministic
because every output block has one owner: a dK/dV kernel (one program per key block j) and a
separate dQ kernel (one program per query block i). Both recompute P and dP, so a block pair
(i, j) costs 7 matmuls:

    dK/dV kernel: S = K Qᵀ, dP = V dOᵀ, dV += Pᵀ dO, dK += dSᵀ Q          4
    dQ kernel:    S = Q Kᵀ, dP = dO Vᵀ, dQ += dS K                         3 (2 of them again)

cuDNN and FlashAttention-3 do 5: the dK/dV program also forms dQ_i's contribution dS_ij K_j
(the 5th matmul) and adds it into an fp32 dQ accumulator with atomic adds. Plain atomics make dQ
differ in its last bits from run to run (fp32 addition is not associative and the programs
arrive in a different order each run). This file keeps the additions in a FIXED order with a
semaphore per query block: counter[i] in global memory counts the key blocks that have added into
dQ_i so far; the program of key block j spins until counter[i] equals its rank among the key
blocks that touch query block i, adds its tile, then increments the counter. The same order of
the same fp32 additions every run => dQ bit for bit the same. A last small kernel multiplies the
fp32 accumulator by the softmax scale and casts it to the input dtype.

Which order (FlashAttention-3's, hopper/mainloop_bwd_sm90_tma_gmma_ws.hpp, store_dq):
  not causal: ascending key block (rank = j). Programs of one head start together, so in the
      first wave key block j idles ~j block-pair steps behind j-1; later programs start as
      earlier ones finish, already staggered one step apart, and stop waiting. At the wide case
      (64 key blocks x 64 query blocks per head, ~2 heads per wave of 132 programs) that is
      ~2·64²/2 = 4k idle steps of 128·64² = 524k: ~1%. FA3 has a newer "shift" schedule for
      this case, not tried here.
  causal: DESCENDING key block (rank = (number of key blocks touching i) - 1 - j), and the
      programs launched shortest first (key block n-1 first, FA3's "SPT"): key block j reaches
      query block i at step i - j of its loop, so in lock-step each query block is visited in
      exactly this order and nobody waits. (Ascending order with the heaviest block first would
      make key block j wait for key block 0 to walk down to its diagonal: ~2j idle steps.) The
      price: a head's longest program (key block 0) starts last, a tail of up to one program
      (256 steps of 64 queries at the leaderboard case, against ~2000-4000 steps per SM).

Why it cannot deadlock, and what that relies on: a program only ever waits for programs of the
same head that come EARLIER in the launch order (lower rank <=> lower logical id). Take the
unfinished program with the lowest logical id: everything before it has finished, so every
counter it waits on already holds its rank; it finishes, and by induction all do. This needs the
earlier programs to be running (resident on an SM) or finished while a later one spins:
  order="pid"    the logical id is tl.program_id. Correct only because the GPU launches programs
                 in program-id order and never parks a resident one: true on NVIDIA hardware in
                 practice, NOT promised by the CUDA programming model. FlashAttention-3's
                 deterministic mode relies on exactly this.
  order="ticket" (default) the logical id is taken at the start of the program from a global
                 counter (tl.atomic_add, CUB's "dynamic tile id" trick of decoupled look-back):
                 a program holding ticket t is running, and so is, or was, every holder of a
                 ticket < t. Only forward progress of resident programs is assumed, not the
                 launch order. One extra atomic per program.
On Triton's CPU interpreter programs run one after another in program-id order, so the lower
ranks have always finished and a spin could only hang: there (spin="check") a program instead
counts it if the counter does not already hold its rank, and the launcher then requires zero
such turns and every counter at the number of key blocks touching its query block (a wrong rank
formula or a missed increment fails loudly; both were tried). The interpreter runs no inline PTX
and ignores tl.device_assert.

Napkin math (useful flops as the FlashAttention papers count them: forward 4·B·H·S²·D, half when
causal; forward+backward 3.5x, the backward 2.5x = 5 matmuls):
  matmuls per block pair: 5 here vs 7 in the solution: the backward's tensor-core work x 5/7
      (-29%); if the backward were purely matmul-bound, forward+backward 1 + 2.5·7/5 = 4.5 -> 3.5
      forward-units, ~-22%.
  what the atomics cost: per block pair (BLOCK_M x BLOCK_N, head dim D) 4·BLOCK_M·D bytes of
      fp32 reductions into L2 against 5·2·BLOCK_M·BLOCK_N·D flops: 0.4/BLOCK_N bytes per flop.
      At 400 TFLOP/s of useful backward work that is 2.5 TB/s of L2 atomics with BLOCK_N = 64 and
      1.25 TB/s with BLOCK_N = 128 (the leaderboard case, B1 H16 S16384 D64 causal, 64 x 64
      tiles: 526k block pairs x 16 KB = 8.6 GB of reductions). L2 atomic throughput on H200 is
      not measured here: it is THE unknown of this experiment, hence large BLOCK_N candidates.
      For comparison the solution's dQ kernel reads K_j and V_j again per pair: 4·BLOCK_N·D bytes
      of L2 reads, the same order of traffic, but plain reads. (FA3 adds a whole tile with one
      TMA bulk reduction from shared memory, cp.reduce.async.bulk; Triton has no such op here.)
  waiting: see "Which order". Each turn is also a chain wait -> atomics -> barrier -> release
      fence -> next program's acquire (~a few µs of latency per query block when it is on the
      critical path), hidden when programs are staggered.
  extras: an fp32 dQ buffer zeroed per call (B·H·S·D·4 bytes: 67 MB at the leaderboard case,
      ~15 µs of memset) and the final scale+cast pass (read 67 MB, write 33 MB, ~25 µs): small
      against a ~5 ms step.
  pipelining: a Triton while loop nested in the query-block loop, and a tl.debug_barrier() in
      it, each stop Triton from software-pipelining that loop (num_stages then does nothing).
      Compiled for sm_90 on a CPU (triton.compile to a GPUTarget, no GPU; 2026-11-29, Triton
      3.8): with both, the TTGIR has no async copies; spin="asm" (the wait, and the barrier
      before the release, as inline PTX) gets the same cp.async pipeline as the solution's dK/dV
      kernel. spin="loop" is the Triton-only version, kept for comparison.
  registers (ptxas -v, sm_90a, same compile, bf16, causal D 64 / non-causal D 128): the extra
      fp32 dQ tile costs registers. D 64: own,step,warps 64,64,8: no spill; 128,64,8: 28 bytes;
      64,64,4: 172 bytes (the solution's dK/dV at 64,64,4: none). D 128: 64,64,8: 292 bytes;
      128,64,8: 760; 64,64,4: 2780 (the solution's first dK/dV kernel at 64,64,4: 388).

Run:
  check (CPU, Triton interpreter; ~35 s on 2 busy cores; on a GPU it runs the GPU configs):
      TRITON_INTERPRET=1 python3 docs/experiments/attention_semaphore_bwd.py --check
  bench (a CUDA GPU; writes its log to $OUT too):
      python3 docs/experiments/attention_semaphore_bwd.py --bench [--cases leaderboard,wide]
          [--configs "own,step,warps,stages[,spin[,order]];..."] [--no-sweep] [--watchdog S]
      own = BLOCK_N (key rows per program), step = BLOCK_M (query rows per step). Each
      candidate compiles (~20-40 s), is checked, then timed: one case per command keeps a run
      under 10 minutes. A candidate that hangs (a deadlock) ends the run after --watchdog
      seconds with a stack dump; the log so far is kept.
"""
import argparse
import faulthandler
import importlib.util
import math
import os
import sys
import time
from collections import namedtuple
from pathlib import Path

import torch
import triton
import triton.language as tl

ROOT = Path(__file__).resolve().parents[2]
INTERPRET = os.environ.get("TRITON_INTERPRET", "0") == "1"


def _load_module(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# the solution: its forward, its delta kernel and its small jit helpers are reused as they are
fa = _load_module(ROOT / "solutions/13_flash_attention/triton/flash_attention.py", "fa13_sem")
_ptrs, _load, _head, _join, _mma = fa._ptrs, fa._load, fa._head, fa._join, fa._mma

# own: key rows per program (BLOCK_N), a multiple of step: query rows per loop step (BLOCK_M).
# spin: "asm" (GPU), "loop" (GPU, Triton while loop), "check" (interpreter: no wait, verified).
# order: "ticket" (logical id from a global counter) or "pid" (tl.program_id; relies on the launch
# order, see the docstring).
Cfg = namedtuple("Cfg", "own step warps stages spin order", defaults=("asm", "ticket"))
# 16-bit inputs on the GPU: first guesses, NOT timed (the --bench sweep is there to tune them),
# from the napkin math and the static register counts in the docstring. D 64: BLOCK_N 128 halves
# the atomics per flop; D 128: 128-row dK and dV tiles spill, so 64, and 8 warps to spill less.
DEFAULTS = {64: Cfg(128, 64, 8, 2), 128: Cfg(64, 64, 8, 2)}
WIDE = Cfg(32, 32, 4, 1)                        # fp32 inputs on the GPU (checks only)
CPU = Cfg(16, 16, 1, 1, "check", "ticket")      # the interpreter: the solution's blocks of 16


# --- the semaphore -----------------------------------------------------------------------------

@triton.jit
def _wait_turn(lock, rank, errors, SPIN: tl.constexpr):
    """Return once the counter at `lock` (one query block's) equals `rank`: every key block
    ordered before this one has added its dQ tile. With acquire semantics: the additions made
    before the matching release (_pass_turn) are visible to what this program does next."""
    if SPIN == "asm":
        # every thread spins on its own acquire load of the counter (the 32 lanes of a warp read
        # the same word: one transaction), so each thread's own later atomics are ordered after
        # the release it observed. The PTX label is local to the { } scope, so the asm can be
        # inlined several times in one kernel; the memory clobber keeps the compiler from
        # hoisting the dQ atomics above it. Inline PTX, not a Triton while loop: see "loop".
        tl.inline_asm_elementwise(
            """{
            .reg .pred p;
            .reg .b32 c;
            spin_wait:
            ld.global.acquire.gpu.b32 c, [$1];
            setp.ne.s32 p, c, $2;
            @p bra spin_wait;
            mov.b32 $0, c;
            }""",
            "=r,l,r,~{memory}", [lock, rank], dtype=tl.int32, is_pure=False, pack=1)
    elif SPIN == "loop":
        # the same in Triton: a scalar atomic is done by one thread and its result broadcast
        # to the others through shared memory and a barrier (cutlass's wait_eq: one thread
        # acquires, then the CTA synchronizes). A loop nested in the query-block loop: Triton
        # then does not software-pipeline that loop (sm_90 TTGIR: no async copies).
        cnt = tl.atomic_add(lock, 0, sem="acquire")
        while cnt != rank:
            cnt = tl.atomic_add(lock, 0, sem="acquire")
    elif SPIN == "none":
        pass    # measurement only: no order, dQ not deterministic
    else:
        # "check", the interpreter: programs run one at a time in program-id order, so every
        # program ranked before this one has finished and the counter must hold `rank` already.
        # A spin here could only hang; a turn taken out of order is counted in `errors` instead,
        # which the launcher reads back (tl.device_assert is a no-op on the interpreter).
        tl.atomic_add(errors, (tl.load(lock) != rank).to(tl.int32))


@triton.jit
def _pass_turn(lock, SPIN: tl.constexpr, TMA: tl.constexpr):
    """Hand query block i's turn to the next key block: every thread's dQ atomics first (a CTA
    barrier), then one release increment by one thread (a scalar atomic) - the pattern of
    cutlass's GenericBarrier::arrive_inc and of cooperative groups' grid sync: bar.sync makes the
    other threads' additions precede the releasing thread's release fence."""
    if SPIN == "none":
        return
    if TMA:
        # the TMA reduction is asynchronous: wait for its writes (not only for its reads of
        # shared memory, which is what Triton's own wait after it waits for), and order the
        # async proxy's writes before the generic proxy's release below
        tl.inline_asm_elementwise("cp.async.bulk.wait_group 0;\n fence.proxy.async.global;"
                                  "\n mov.u32 $0, 0;", "=r,~{memory}", [], dtype=tl.int32,
                                  is_pure=False, pack=1)
    if SPIN == "asm":
        # the barrier as inline PTX, opaque to Triton: a tl.debug_barrier() in the loop body
        # stops Triton's software pipelining of the loop (seen in the sm_90 TTGIR: no async
        # copies). Safe here: every thread runs it the same number of times (no warp
        # specialization), and the memory clobber keeps the compiler from moving memory
        # operations across it.
        tl.inline_asm_elementwise("bar.sync 0;\n mov.u32 $0, 0;", "=r,~{memory}", [],
                                  dtype=tl.int32, is_pure=False, pack=1)
    else:
        tl.debug_barrier()
    tl.atomic_add(lock, 1, sem="release")


# --- the fused backward ------------------------------------------------------------------------

@triton.jit
def _fused_inner(dk, dv, k, v, q_base, do_base, lse_base, delta_base, dq_base, locks_base,
                 stride_qs, stride_qd, stride_ds, stride_dd, offs_n, offs_d, off_hz, kb, lo, hi,
                 S, qk_scale, HEAD_D: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_M: tl.constexpr,
                 CAUSAL: tl.constexpr, DIAG: tl.constexpr, BOUNDS: tl.constexpr,
                 EVEN_N: tl.constexpr, PREC: tl.constexpr, SPIN: tl.constexpr,
                 dq_desc, TMA: tl.constexpr):
    """Query blocks lo, lo + BLOCK_M, ... < hi into key block kb's (dk, dv), transposed as in
    the solution (Pᵀ = exp2(qk_scale · k qᵀ - lse2)), and each one's dQ contribution dS K into
    the fp32 accumulator, in turn. DIAG: mask queries before the keys; BOUNDS: queries may pass
    S (lse = inf there: P = 0)."""
    offs_m0 = tl.arange(0, BLOCK_M)
    n_qb = tl.cdiv(S, BLOCK_M)
    locks = locks_base + 2 + off_hz.to(tl.int64) * n_qb      # this head's counters
    for start_m in range(lo, hi, BLOCK_M):
        offs_m = start_m + offs_m0
        q_ptrs = _ptrs(q_base, offs_m, offs_d, stride_qs, stride_qd, True)      # qᵀ [D, BM]
        do_ptrs = _ptrs(do_base, offs_m, offs_d, stride_ds, stride_dd, False)   # dO [BM, D]
        if BOUNDS:
            ok = offs_m < S
            qT = tl.load(q_ptrs, mask=ok[None, :], other=0.0)
            do = tl.load(do_ptrs, mask=ok[:, None], other=0.0)
            lse = tl.load(lse_base + offs_m, mask=ok, other=float("inf"))    # -> P = 0 there
            delta = tl.load(delta_base + offs_m, mask=ok, other=0.0)
        else:
            qT = tl.load(q_ptrs)
            do = tl.load(do_ptrs)
            lse = tl.load(lse_base + offs_m)
            delta = tl.load(delta_base + offs_m)
        # the 5 matmuls: S, dV, dP, dK, dQ
        qkT = tl.dot(k, qT, input_precision=PREC)                               # [BN, BM]
        pT = tl.math.exp2(qkT * qk_scale - lse[None, :])
        if DIAG:
            pT = tl.where(offs_m[None, :] >= offs_n[:, None], pT, 0.0)
        if not EVEN_N:
            # keys past S: k was read as 0, so qk = 0 and P = exp2(-lse), which need not be
            # finite; dK, dV of those rows are never stored, but dQ sums over the key rows
            pT = tl.where((offs_n < S)[:, None], pT, 0.0)
        dv = _mma(pT.to(do.dtype), do, dv, PREC)
        dpT = tl.dot(v, tl.trans(do), input_precision=PREC)
        dsT = (pT * (dpT - delta[None, :])).to(qT.dtype)     # dS in the input dtype, as solved
        dk = _mma(dsT, tl.trans(qT), dk, PREC)
        dq = tl.dot(tl.trans(dsT), k, input_precision=PREC)  # [BM, D] fp32, the scale: at the end
        # this key block's rank among those that touch query block i (the order of the adds)
        if CAUSAL:
            # key blocks 0 .. last touch it (last: the one holding its last valid row); they
            # add in descending order, the one on the diagonal first
            rank = (tl.minimum(start_m + BLOCK_M, S) - 1) // BLOCK_N - kb
        else:
            rank = kb                                        # all of them, ascending
        lock = locks + start_m // BLOCK_M
        _wait_turn(lock, rank, locks_base + 1, SPIN)
        dq_ptrs = dq_base + offs_m[:, None] * HEAD_D + offs_d[None, :]
        # relaxed: the ordering comes from the acquire above and the release in _pass_turn
        if TMA:
            # one bulk reduction of the whole tile (cp.reduce.async.bulk.tensor, FA3's way):
            # rows past S are clipped by the descriptor's [BH, S, D] shape
            dq_desc.atomic_add([off_hz, start_m, 0], dq.reshape(1, BLOCK_M, HEAD_D))
        elif BOUNDS:
            tl.atomic_add(dq_ptrs, dq, mask=(offs_m < S)[:, None], sem="relaxed")
        else:
            tl.atomic_add(dq_ptrs, dq, sem="relaxed")
        _pass_turn(lock, SPIN, TMA)
    return dk, dv


@triton.jit
def _bwd_fused_kernel(Q, K, V, DO, LSE, DELTA, DK, DV, DQACC, LOCKS,
                      stride_qb, stride_qh, stride_qs, stride_qd,
                      stride_kb, stride_kh, stride_ks, stride_kd,
                      stride_vb, stride_vh, stride_vs, stride_vd,
                      stride_db, stride_dh, stride_ds, stride_dd,
                      H, S, scale_hi, scale_lo, qk_scale_hi, qk_scale_lo,
                      HEAD_D: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_M: tl.constexpr,
                      CAUSAL: tl.constexpr, EVEN_N: tl.constexpr, PREC: tl.constexpr,
                      SPIN: tl.constexpr, TICKET: tl.constexpr, TMA: tl.constexpr, BH):
    """One program per (key block, batch*head), a 1-D grid, head-major: dK_j, dV_j, and dQ_i +=
    dS_ij K_j for every query block i it meets, in the fixed order of _fused_inner. DQACC: fp32
    [B*H, S, D], zeros; LOCKS: int32, zeros: [0] the ticket counter, [1] turns taken out of order
    (spin="check" only), then one counter per (batch*head, query block)."""
    acc_ty = tl.float32
    n_kb = tl.cdiv(S, BLOCK_N)
    if TICKET:
        pid = tl.atomic_add(LOCKS, 1, sem="relaxed")    # logical id = arrival order
    else:
        pid = tl.program_id(0)                           # logical id = launch order (assumed)
    off_hz = pid // n_kb
    o = pid % n_kb
    if CAUSAL:
        kb = n_kb - 1 - o        # shortest first: the last key block (one diagonal block) first
    else:
        kb = o
    scale = _join(scale_hi, scale_lo, acc_ty)
    qk_scale = _join(qk_scale_hi, qk_scale_lo, acc_ty)
    start_n = kb * BLOCK_N
    offs_n = start_n + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_D)
    k = _load(_head(K, off_hz, H, stride_kb, stride_kh), offs_n, offs_d, stride_ks, stride_kd, S)
    v = _load(_head(V, off_hz, H, stride_vb, stride_vh), offs_n, offs_d, stride_vs, stride_vd, S)
    q_base = _head(Q, off_hz, H, stride_qb, stride_qh)
    do_base = _head(DO, off_hz, H, stride_db, stride_dh)
    lse_base = LSE + off_hz.to(tl.int64) * S
    delta_base = DELTA + off_hz.to(tl.int64) * S
    dq_base = DQACC + off_hz.to(tl.int64) * S * HEAD_D
    dk = tl.zeros([BLOCK_N, HEAD_D], acc_ty)
    dv = tl.zeros([BLOCK_N, HEAD_D], acc_ty)
    if TMA:
        dq_desc = tl.make_tensor_descriptor(DQACC, shape=[BH, S, HEAD_D],
                                            strides=[S * HEAD_D, HEAD_D, 1],
                                            block_shape=[1, BLOCK_M, HEAD_D])
    else:
        dq_desc = DQACC
    full = (S // BLOCK_M) * BLOCK_M
    if CAUSAL:
        # queries before start_n never see these keys: start at the diagonal, masked; query
        # blocks starting at or past S do not exist (no counter): stop at S
        lo = start_n + BLOCK_N
        dk, dv = _fused_inner(dk, dv, k, v, q_base, do_base, lse_base, delta_base, dq_base,
                              LOCKS, stride_qs, stride_qd, stride_ds, stride_dd, offs_n, offs_d,
                              off_hz, kb, start_n, tl.minimum(lo, S), S, qk_scale, HEAD_D, BLOCK_N,
                              BLOCK_M, CAUSAL, True, True, EVEN_N, PREC, SPIN, dq_desc, TMA)
    else:
        lo = start_n * 0
    dk, dv = _fused_inner(dk, dv, k, v, q_base, do_base, lse_base, delta_base, dq_base, LOCKS,
                          stride_qs, stride_qd, stride_ds, stride_dd, offs_n, offs_d, off_hz, kb,
                          lo, full, S, qk_scale, HEAD_D, BLOCK_N, BLOCK_M, CAUSAL, False, False,
                          EVEN_N, PREC, SPIN, dq_desc, TMA)
    dk, dv = _fused_inner(dk, dv, k, v, q_base, do_base, lse_base, delta_base, dq_base, LOCKS,
                          stride_qs, stride_qd, stride_ds, stride_dd, offs_n, offs_d, off_hz, kb,
                          tl.maximum(lo, full), S, S, qk_scale, HEAD_D, BLOCK_N, BLOCK_M, CAUSAL,
                          False, True, EVEN_N, PREC, SPIN, dq_desc, TMA)
    out = off_hz.to(tl.int64) * S * HEAD_D + offs_n[:, None] * HEAD_D + offs_d[None, :]
    tl.store(DK + out, (dk * scale).to(DK.dtype.element_ty), mask=(offs_n < S)[:, None])
    tl.store(DV + out, dv.to(DV.dtype.element_ty), mask=(offs_n < S)[:, None])


@triton.jit
def _dq_cast_kernel(DQACC, DQ, N, scale_hi, scale_lo, BLOCK: tl.constexpr):
    """dq = scale · (the fp32 accumulator), in dq's dtype (both contiguous [B, H, S, D])."""
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    ok = offs < N
    x = tl.load(DQACC + offs, mask=ok, other=0.0)
    tl.store(DQ + offs, (x * _join(scale_hi, scale_lo, tl.float32)).to(DQ.dtype.element_ty),
             mask=ok)


# --- launchers ---------------------------------------------------------------------------------

def default_cfg(q) -> Cfg:
    if INTERPRET or not q.is_cuda:
        return CPU
    if q.dtype == torch.float32:
        return WIDE
    return DEFAULTS[int(q.shape[-1])]


def backward(q, k, v, o, lse, do, causal, scale, cfg=None):
    """dq, dk, dv of o = attention(q, k, v) for the upstream gradient do, from the solution's
    forward's o and lse2, deterministically, in one fused pass (+ the delta and the dq cast)."""
    fa._check(q, k, v)
    if q.dtype == torch.float64:
        raise TypeError("float64 is not supported here (fp32 atomics); use the solution")
    if do.shape != q.shape or do.dtype != q.dtype:
        raise ValueError(f"do must be {tuple(q.shape)} {q.dtype}, got {tuple(do.shape)} {do.dtype}")
    cfg = cfg or default_cfg(q)
    if cfg.own % cfg.step:
        raise ValueError(f"own (BLOCK_N) must be a multiple of step (BLOCK_M), got {cfg}")
    if INTERPRET and cfg.spin == "asm":
        raise ValueError("spin='asm' is inline PTX: not on the interpreter (use 'check')")
    B, H, S, D = q.shape
    dq, dk, dv = (torch.empty(q.shape, dtype=q.dtype, device=q.device) for _ in range(3))
    if dq.numel() == 0:
        return dq, dk, dv
    o = o.contiguous()                     # the delta kernel reads o as contiguous
    n_kb, n_qb = triton.cdiv(S, cfg.own), triton.cdiv(S, cfg.step)
    # zeroed per call: the sum starts from 0 and every counter from 0 (the ticket too)
    dq_acc = torch.zeros(q.shape, dtype=torch.float32, device=q.device)
    locks = torch.zeros(2 + B * H * n_qb, dtype=torch.int32, device=q.device)
    delta = torch.empty_like(lse)
    if cfg.spin in ("tma", "tmanone"):
        triton.set_allocator(fa._scratch)     # the in-kernel descriptor's 128 bytes
    fa._bwd_delta_kernel[(B * H, triton.cdiv(S, 64))](
        o, do, delta, *do.stride(), H, S, HEAD_D=D, BLOCK_M=64, F64=False, num_warps=4)
    _bwd_fused_kernel[(B * H * n_kb,)](
        q, k, v, do, lse, delta, dk, dv, dq_acc, locks,
        *q.stride(), *k.stride(), *v.stride(), *do.stride(), H, S,
        *fa._split(scale), *fa._split(scale * fa.LOG2E), HEAD_D=D, BLOCK_N=cfg.own,
        BLOCK_M=cfg.step, CAUSAL=bool(causal), EVEN_N=S % cfg.own == 0, PREC=fa._kind(q)["PREC"],
        SPIN={"tma": "asm", "tmanone": "none"}.get(cfg.spin, cfg.spin),
        TICKET=cfg.order == "ticket", TMA=cfg.spin in ("tma", "tmanone"), BH=B * H,
        num_warps=cfg.warps, num_stages=cfg.stages)
    if cfg.spin == "check":
        _verify_turns(locks, B * H, n_kb, n_qb, S, cfg, causal)
    n = dq.numel()
    _dq_cast_kernel[(triton.cdiv(n, 1024),)](dq_acc, dq, n, *fa._split(scale), BLOCK=1024,
                                             num_warps=4)
    return dq, dk, dv


def _verify_turns(locks, heads, n_kb, n_qb, S, cfg, causal):
    """spin="check": no turn taken out of order, every ticket handed out, and every query block's
    counter at the number of key blocks that touch it (each passed its turn exactly once)."""
    locks = locks.cpu()
    i = torch.arange(n_qb)
    want = ((torch.clamp((i + 1) * cfg.step, max=S) - 1) // cfg.own + 1 if causal
            else torch.full((n_qb,), n_kb))
    got = locks[2:].view(heads, n_qb)
    if locks[1] != 0 or not torch.equal(got, want.to(got.dtype).expand(heads, n_qb)) or (
            cfg.order == "ticket" and locks[0] != heads * n_kb):
        raise RuntimeError(f"semaphore protocol broken: {int(locks[1])} turns out of order, "
                           f"tickets {int(locks[0])} of {heads * n_kb}, counters {got.tolist()}, "
                           f"expected {want.tolist()} per head")


def attention_fwd_bwd(q, k, v, do, causal, scale=None, cfg=None):
    """The solution's forward, then this backward; no autograd. Returns o, dq, dk, dv."""
    scale = fa._scale(q, scale)
    o, lse = fa._fwd_impl(q, k, v, causal, scale, fa._direct)
    return (o, *backward(q, k, v, o, lse, do, causal, scale, cfg))


# --- --check: the CPU interpreter against float64 ------------------------------------------------

def reference(q, k, v, do, causal, scale):
    """o, dq, dk, dv in float64 by plain torch: softmax(scale q kᵀ + causal mask) v, autograd."""
    q, k, v = (t.detach().double().requires_grad_() for t in (q, k, v))
    s = scale * q @ k.transpose(-1, -2)
    if causal:
        S = q.shape[-2]
        s = s.masked_fill(~torch.ones(S, S, dtype=torch.bool, device=q.device).tril(),
                          float("-inf"))
    o = torch.softmax(s, dim=-1) @ v
    o.backward(do.double())
    return o.detach(), q.grad, k.grad, v.grad


def _rel(got, want):
    got, want = got.double(), want.double()
    den = want.norm().item()
    return (got - want).norm().item() / (den if den > 0 else 1.0)


def check():
    if INTERPRET:
        # the repository's interpreter shim (what the grader runs learners' kernels under):
        # numpy has no bfloat16, and without it the interpreter computes on bf16 bit patterns
        sys.path.insert(0, str(ROOT))
        from grader.submission.interp import install
        install()
    else:
        print("note: --check is meant for TRITON_INTERPRET=1 with CPU tensors")
    dev = "cpu" if INTERPRET or not torch.cuda.is_available() else "cuda"
    c = CPU if dev == "cpu" else None
    wide = c._replace(own=32) if c else Cfg(64, 32, 4, 1)            # BLOCK_N 2 x BLOCK_M
    loop = c._replace(spin="loop", order="pid") if c else Cfg(32, 32, 4, 1, "loop", "pid")
    # (shape, causal, dtype, cfg)
    cases = []
    for shape in ((1, 2, 17, 64), (2, 1, 40, 64), (1, 1, 33, 128), (1, 1, 1, 64)):
        for causal in (True, False):
            cases.append((shape, causal, torch.float32, c))
    for shape in ((1, 2, 17, 64), (1, 1, 33, 128)):
        for causal in (True, False):
            cases.append((shape, causal, torch.bfloat16, c))
    for causal in (True, False):
        cases.append(((1, 1, 40, 64), causal, torch.float32, wide))    # rank with BN > BM
    cases.append(((1, 1, 40, 64), True, torch.float16, wide))
    cases.append(((2, 1, 33, 64), True, torch.float32, loop))          # the while-loop spin
    rows, ok_all = [], True
    hdr = (f"{'shape':<16} {'causal':<6} {'dtype':<8} {'cfg':<24} {'o':>8} {'dq':>8} {'dk':>8} "
           f"{'dv':>8} {'dq~sol':>8} {'det':>4} {'s':>5}  result")
    print(hdr)
    print("-" * len(hdr))
    for shape, causal, dtype, cfg in cases:
        if not INTERPRET:   # a real spin that deadlocks: a stack dump and exit, not a hang
            faulthandler.dump_traceback_later(120, exit=True)
        if cfg is not None and cfg.spin == "loop" and INTERPRET and not ok_all:
            print(f"{str(shape):<16} skipped: spin='loop' could hang where an earlier row failed")
            continue
        t0 = time.time()
        g = torch.Generator().manual_seed(hash((shape, causal)) % 2**31)
        q, k, v, do = (torch.randn(shape, generator=g).to(dtype).to(dev) for _ in range(4))
        scale = 1.0 / math.sqrt(shape[-1])
        try:
            o, dq, dk, dv = attention_fwd_bwd(q, k, v, do, causal, scale, cfg)
        except Exception as e:
            print(f"{str(shape):<16} {str(causal):<6} {str(dtype)[6:]:<8} FAIL: "
                  f"{type(e).__name__}: {e}", flush=True)
            rows.append(False)
            ok_all = False
            continue
        want = reference(q, k, v, do, causal, scale)
        errs = [_rel(a, b) for a, b in zip((o, dq, dk, dv), want)]
        tol = 1e-4 if dtype == torch.float32 else 1e-2
        # determinism: a second backward on the same inputs, bit for bit (on the interpreter
        # trivially so: its programs run one at a time; the --bench sweep checks it on the GPU)
        _, lse = fa._fwd_impl(q, k, v, causal, scale, fa._direct)
        dq2, dk2, dv2 = backward(q, k, v, o, lse, do, causal, scale, cfg)
        det = torch.equal(dq, dq2) and torch.equal(dk, dk2) and torch.equal(dv, dv2)
        # informational: the solution's own (two-kernel) dq
        sol_dq = fa._bwd_impl(do, q, k, v, o, lse, causal, scale, fa._direct)[0]
        diff, den = (dq.double() - sol_dq.double()).norm().item(), want[1].norm().item()
        vs_sol = diff / den if den > 0 else diff
        ok = all(e <= tol for e in errs) and det and all(torch.isfinite(t).all() for t in
                                                          (o, dq, dk, dv))
        ok_all &= ok
        cs = cfg or default_cfg(q)
        cname = f"{cs.own},{cs.step},{cs.warps},{cs.stages},{cs.spin},{cs.order}"
        print(f"{str(shape):<16} {str(causal):<6} {str(dtype)[6:]:<8} {cname:<24} "
              + " ".join(f"{e:8.1e}" for e in errs) + f" {vs_sol:8.1e} {str(det)[0]:>4} "
              f"{time.time() - t0:5.1f}  {'PASS' if ok else 'FAIL'} (tol {tol:.0e})", flush=True)
        rows.append(ok)
    faulthandler.cancel_dump_traceback_later()
    print(f"\n{sum(rows)}/{len(rows)} passed: {'PASS' if ok_all else 'FAIL'}\n"
          "o dq dk dv: normwise error relative to float64; dq~sol: |dq - the solution's "
          "two-kernel dq| / |float64 dq|;\ndet: two backward runs bitwise equal; s: seconds")
    return ok_all


# --- --bench: the GPU ----------------------------------------------------------------------------

CASES = {"leaderboard": dict(B=1, H=16, S=16384, D=64, causal=True),
         "wide": dict(B=4, H=32, S=4096, D=128, causal=False)}
# the default first, then its neighbours, then the default with the Triton spin loop (no
# pipelining) and with launch-order ids (FA3's assumption) for comparison
SWEEP_OLD = {64: [Cfg(128, 64, 8, 2), Cfg(128, 64, 8, 3), Cfg(64, 64, 8, 2), Cfg(64, 64, 8, 3),
              Cfg(64, 64, 4, 3), Cfg(128, 64, 8, 2, "loop"), Cfg(128, 64, 8, 2, "asm", "pid")],
         128: [Cfg(64, 64, 8, 2), Cfg(64, 64, 8, 3), Cfg(128, 64, 8, 2), Cfg(64, 32, 4, 2),
               Cfg(64, 64, 4, 2), Cfg(64, 64, 8, 2, "loop"), Cfg(64, 64, 8, 2, "asm", "pid")]}
# session 5: the cost of the order (none), and FA3's bulk reduction (tma, tmanone)
SWEEP = {64: [Cfg(64, 64, 4, 3, "none"), Cfg(64, 64, 4, 3, "tma"), Cfg(64, 64, 4, 3, "tmanone"),
              Cfg(128, 64, 8, 3, "none"), Cfg(128, 64, 8, 3, "tma"), Cfg(128, 64, 8, 3, "tmanone")],
         128: [Cfg(128, 64, 8, 2, "none"), Cfg(128, 64, 8, 2, "tma"),
               Cfg(128, 64, 8, 2, "tmanone"), Cfg(64, 64, 4, 2, "tma")]}
LOGFILE = Path(os.environ.get("OUT", ".")) / f"attention_semaphore_bwd-{int(time.time())}.log"


def log(*a):
    line = " ".join(str(x) for x in a)
    print(line, flush=True)
    with open(LOGFILE, "a") as f:   # line by line: a run cut off (or hung) keeps its log
        f.write(line + "\n")


def _flops(case, mode):
    fwd = 4 * case["B"] * case["H"] * case["S"] ** 2 * case["D"] * (0.5 if case["causal"] else 1)
    return {"fwd+bwd": 3.5, "bwd": 2.5}[mode] * fwd


def _time(fn, grads=None, reps=3, rep_ms=60):
    out = []
    for _ in range(reps):
        t = triton.testing.do_bench_cudagraph(fn, rep=rep_ms, grad_to_none=grads,
                                              quantiles=[0.5])
        out.append(t[0] if isinstance(t, (list, tuple)) else t)
    out.sort()
    return out[len(out) // 2], (out[-1] - out[0]) / out[len(out) // 2]


def _report(name, cname, mode, case, fn, grads=None):
    try:
        fn()
        torch.cuda.synchronize()
        ms, spread = _time(fn, grads)
        log(f"| {name} | {cname} | {mode} | {ms:.3f} ({spread:.1%}) | "
            f"{_flops(case, mode) / (ms * 1e-3) / 1e12:.0f} |")
        return ms
    except Exception as e:  # e.g. out of shared memory for a candidate, cuDNN not available
        log(f"| {name} | {cname} | {mode} | failed: {type(e).__name__}: "
            f"{str(e).splitlines()[0][:200] if str(e) else ''} | |")
        torch.cuda.synchronize()
        return None


def parse_configs(text):
    out = []
    for item in text.split(";"):
        f = item.strip().split(",")
        if f and f[0]:
            out.append(Cfg(*map(int, f[:4]), *f[4:]))
    return out


def bench(case_names, configs, sweep, watchdog):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention as sdpa
    log(f"device {torch.cuda.get_device_name()}, torch {torch.__version__}, triton "
        f"{triton.__version__}, {time.strftime('%Y-%m-%d %H:%M:%S %Z')}")
    log("command: " + " ".join(sys.argv))
    log("solution CONFIGS: " + repr(fa.CONFIGS))
    log("\n| row | case | mode | ms (spread) | TFLOP/s |\n|---|---|---|---|---|")
    for cname in case_names:
        case = CASES[cname]
        B, H, S, D, causal = (case[x] for x in ("B", "H", "S", "D", "causal"))
        g = torch.Generator(device="cuda").manual_seed(0)
        q, k, v, do = (torch.randn((B, H, S, D), device="cuda", generator=g).to(torch.bfloat16)
                       for _ in range(4))
        scale = 1.0 / math.sqrt(D)
        # the solution, through its autograd door
        ql, kl, vl = (t.clone().requires_grad_() for t in (q, k, v))
        _report("solution", cname, "fwd+bwd", case,
                lambda: fa.flash_attention(ql, kl, vl, causal).backward(do), [ql, kl, vl])
        o, lse = fa._fwd_impl(q, k, v, causal, scale, fa._direct)
        _report("solution", cname, "bwd", case,
                lambda: fa._bwd_impl(do, q, k, v, o, lse, causal, scale, fa._direct))
        qc, kc, vc = (t.clone().requires_grad_() for t in (q, k, v))

        def cudnn():
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                sdpa(qc, kc, vc, is_causal=causal).backward(do)
        _report("sdpa_cudnn", cname, "fwd+bwd", case, cudnn, [qc, kc, vc])
        # the solution's gradients: what every candidate is checked against
        ql.grad = kl.grad = vl.grad = None
        fa.flash_attention(ql, kl, vl, causal).backward(do)
        want = (ql.grad, kl.grad, vl.grad)
        cands = configs if configs else ([DEFAULTS[D]] + ([c for c in SWEEP[D] if c != DEFAULTS[D]]
                                                          if sweep else []))
        for cfg in cands:
            name = f"semaphore {cfg.own},{cfg.step},{cfg.warps},{cfg.stages},{cfg.spin},{cfg.order}"
            # a deadlocked spin would hang here forever: dump the stack and exit instead
            faulthandler.dump_traceback_later(watchdog, exit=True)
            try:
                _, dq, dk, dv = attention_fwd_bwd(q, k, v, do, causal, scale, cfg)
                _, dq2, dk2, dv2 = attention_fwd_bwd(q, k, v, do, causal, scale, cfg)
                torch.cuda.synchronize()
            except Exception as e:
                faulthandler.cancel_dump_traceback_later()
                log(f"| {name} | {cname} | check | failed: {type(e).__name__}: "
                    f"{str(e).splitlines()[0][:200] if str(e) else ''} | |")
                continue
            errs = [_rel(a, b) for a, b in zip((dq, dk, dv), want)]
            det = torch.equal(dq, dq2) and torch.equal(dk, dk2) and torch.equal(dv, dv2)
            log(f"  {name} {cname}: vs solution dq {errs[0]:.1e} dk {errs[1]:.1e} dv "
                f"{errs[2]:.1e}, deterministic {det}")
            if max(errs) < 1e-2 and (det or cfg.spin in ("none", "tmanone")):
                _report(name, cname, "fwd+bwd", case,
                        lambda: attention_fwd_bwd(q, k, v, do, causal, scale, cfg))
                _report(name, cname, "bwd", case,
                        lambda: backward(q, k, v, o, lse, do, causal, scale, cfg))
            else:
                log(f"| {name} | {cname} | - | REJECTED (error or not deterministic) | |")
            faulthandler.cancel_dump_traceback_later()
            torch.cuda.empty_cache()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--check", action="store_true", help="CPU interpreter vs float64")
    p.add_argument("--bench", action="store_true", help="time on a CUDA GPU")
    p.add_argument("--cases", default=",".join(CASES), help="--bench cases")
    p.add_argument("--configs", default="", help='"own,step,warps,stages[,spin[,order]];..."')
    p.add_argument("--no-sweep", action="store_true", help="--bench: the default config only")
    p.add_argument("--watchdog", type=float, default=180,
                   help="--bench: seconds a candidate may take before the run is killed")
    a = p.parse_args()
    if not (a.check or a.bench):
        p.error("give --check and/or --bench")
    ok = True
    if a.check:
        ok = check()
    if a.bench:
        if not torch.cuda.is_available() or INTERPRET:
            sys.exit("--bench needs a CUDA GPU and no TRITON_INTERPRET")
        bench(a.cases.split(","), parse_configs(a.configs), not a.no_sweep, a.watchdog)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
