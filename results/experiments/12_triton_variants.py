"""Exercise 12 (matmul_tc), Triton track: which kernel closes the gap to F.linear + relu (GPU).

The Triton solution runs the graded case (8192^3 bf16, act = relu) at ~91% of cuBLAS's rate
(torch.addmm); to beat F.linear + relu it needs ~96-97%. This script times, on the graded
inputs and with the grader's helper (grader.timing.time_fn: do_bench with an L2 flush before
every repetition, median; one process, but for the warp-specialized family):

    baselines   torch.addmm (cuBLAS, no act), F.linear + relu, the solution (its autotuner)
    ptr         the solution's own kernel (solutions/12_matmul_tc/triton/matmul_tc.py) at fixed configs, one
                by one, no autotune: which configs its list should hold
    tma-persist TMA loads and stores through host-side descriptors
                (triton.tools.tensor_descriptor.TensorDescriptor) in a persistent grid: one
                program per SM loops over the tiles in grouped order, tl.range(...,
                flatten=True) lets the next tile's loads run during this tile's epilogue
                (Triton's tutorial 09, matmul_kernel_tma_persistent); EPILOGUE_SUBTILE stores
                the tile as two halves (half the staging shared memory: room for a 4th stage);
                one variant stores with plain pointer stores instead
    dev-persist the same with device-side descriptors (tl.make_tensor_descriptor, global
                scratch from triton.set_allocator; tutorial 09, matmul_kernel_descriptor_
                persistent)
    tma         host descriptors, one tile per program (TMA without the persistent grid)
    ptr-persist the pointer loads in a persistent grid, with and without flatten
    dev-persist-ws  device descriptors + tl.range(..., warp_specialize=True, flatten=False):
                Triton 3.6 runs its Hopper warp-specialization pass (add_hopper_warpspec) on
                such loops, with num_warps=4: a producer warpgroup issues the TMA loads, two
                consumer warpgroups split the tile and run wgmma and the epilogue. Run in a
                child process (a hang or a bad address on this new path costs one row, not
                the run; a child that dies is replaced for the rows after it)

Every candidate fuses bias + activation + cast in its epilogue and is checked (||out - ref|| /
||ref|| against float64, within the tests' bound 2u = 7.8e-3 for bf16; NaN fails) at the graded
shape and at a small ragged shape. A candidate that fails to compile or to run is reported and
the run goes on (past --budget seconds the remaining in-process candidates are skipped). The end
re-times the baselines, the solution and the 3 best candidates (noise), then prints the best
config per family and a compact table last. us = median; %addmm = t(addmm) / t; xlin =
t(F.linear + relu) / t (> 1: faster than F.linear + relu, the issue's target).

    python3 results/experiments/12_triton_variants.py --out DIR            # GPU, ~2.5 min
    python3 results/experiments/12_triton_variants.py --out DIR --shapes   # + the best 2 on
                                             # 4096^3, 16384x14336x4096, 16384x4096x14336
    python3 results/experiments/12_triton_variants.py --only 'tma-persist'  # a subset (regex)
    python3 results/experiments/12_triton_variants.py --list                # the candidates

Without a GPU:

    TRITON_INTERPRET=1 python results/experiments/12_triton_variants.py --dry
        # every candidate on Triton's CPU interpreter, tiny fp16 shapes, checked, not timed
        # (Triton 3.6's interpreter needs numpy < 2.4)
    python results/experiments/12_triton_variants.py --compile-only
        # every candidate compiled for sm_90 (Hopper) by the installed Triton, no GPU needed:
        # registers, spills, shared memory against the 227 KB an H100/H200 block may use
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

if "--dry" in sys.argv:  # must precede the first import of triton
    os.environ["TRITON_INTERPRET"] = "1"

import torch
import triton
import triton.language as tl

ROOT = Path(__file__).resolve().parents[2]
EX = "12_matmul_tc"
sys.path.insert(0, str(ROOT))

GRADED = (8192, 8192, 8192)
SHAPES = [(4096, 4096, 4096), (16384, 14336, 4096), (16384, 4096, 14336)]  # --shapes, (M, N, K)
# small ragged checks (M, N not multiples of any tile); K a multiple of 64 for the pointer
# kernels (their EVEN_K fast path: the same compiled binary as the graded shape), one K tail
# for the TMA kernels (TMA zero-fills past K); all multiples of 16: no new specialization
SMALL = {"ptr": (272, 400, 320), "tma": (272, 400, 336)}
ACTS = {"none": 0, "relu": 1, "gelu_tanh": 2}
REL_BOUND = {torch.bfloat16: 2 * 2.0 ** -8, torch.float16: 2 * 2.0 ** -11}  # the tests' 2u
SMEM_LIMIT = 232448  # bytes of shared memory one block may use on H100/H200 (227 KB)
ISOLATE_DEFAULT = "dev-persist-ws"
ROW_TIMEOUT = 45  # s without a line from a child process: it hangs, kill it

MODE = "gpu"      # "gpu", "dry" (interpreter), "compile" (compile for sm_90 only)
NUM_SMS = 132     # set from the device in main()
LAST = {}         # the last compiled kernel a launch returned ("kernel"), for its resources


# --------------------------------------------------------------------------------------------
# kernels (all: fp32 accumulation, bias + activation in fp32, one cast on the store)
# --------------------------------------------------------------------------------------------

@triton.jit
def _act(acc, ACT: tl.constexpr):
    if ACT == 1:
        acc = tl.maximum(acc, 0.0)
    elif ACT == 2:  # gelu_tanh = x / (1 + exp(-2u)), as in the solution
        u = 0.7978845608028654 * (acc + 0.044715 * acc * acc * acc)
        acc = acc / (1.0 + tl.exp(-2.0 * u))
    return acc


@triton.jit
def _tile_of(tile_id, num_pid_m, num_pid_n, GROUP_M: tl.constexpr):
    # the solution's grouped order: GROUP_M row-tiles of one column band, then the next band
    num_pid_in_group = GROUP_M * num_pid_n
    group_id = tile_id // num_pid_in_group
    first_pid_m = group_id * GROUP_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_M)
    pid_m = first_pid_m + ((tile_id % num_pid_in_group) % group_size_m)
    pid_n = (tile_id % num_pid_in_group) // group_size_m
    return pid_m, pid_n


@triton.jit
def _epilogue(acc, c_desc, c_ptr, stride_cm, bias_ptr, off_m, off_n, M, N,
              ACT: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
              EPILOGUE_SUBTILE: tl.constexpr, STORE_TMA: tl.constexpr):
    offs_n = off_n + tl.arange(0, BLOCK_N)
    bias = tl.load(bias_ptr + offs_n, mask=offs_n < N, other=0.0).to(tl.float32)
    acc = _act(acc + bias[None, :], ACT)
    out_ty = c_ptr.dtype.element_ty
    if STORE_TMA:  # the copy engine stores the tile; rows/columns past M/N are dropped
        if EPILOGUE_SUBTILE:  # two [BM, BN/2] stores: half the staging shared memory
            acc = tl.reshape(acc, (BLOCK_M, 2, BLOCK_N // 2))
            acc = tl.permute(acc, (0, 2, 1))
            acc0, acc1 = tl.split(acc)
            c_desc.store([off_m, off_n], acc0.to(out_ty))
            c_desc.store([off_m, off_n + BLOCK_N // 2], acc1.to(out_ty))
        else:
            c_desc.store([off_m, off_n], acc.to(out_ty))
    else:  # plain masked stores (no staging tile in shared memory)
        offs_m = off_m + tl.arange(0, BLOCK_M)
        c_ptrs = c_ptr + offs_m[:, None].to(tl.int64) * stride_cm + offs_n[None, :]
        tl.store(c_ptrs, acc.to(out_ty), mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


@triton.jit
def ptr_persistent_kernel(a_ptr, b_ptr, bias_ptr, c_ptr, M, N, K,
                          stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                          ACT: tl.constexpr, EVEN_K: tl.constexpr,
                          BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                          GROUP_M: tl.constexpr, NUM_SMS: tl.constexpr, FLATTEN: tl.constexpr):
    # tutorial 09's matmul_kernel_persistent with the solution's loads and epilogue
    start_pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    k_tiles = tl.cdiv(K, BLOCK_K)
    num_tiles = num_pid_m * num_pid_n
    tile_id_c = start_pid - NUM_SMS  # the epilogue's own counter (as in the tutorial)
    offs_k = tl.arange(0, BLOCK_K)
    for tile_id in tl.range(start_pid, num_tiles, NUM_SMS, flatten=FLATTEN):
        pid_m, pid_n = _tile_of(tile_id, num_pid_m, num_pid_n, GROUP_M)
        offs_am = tl.max_contiguous(tl.multiple_of(
            (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M, BLOCK_M), BLOCK_M)
        offs_bn = tl.max_contiguous(tl.multiple_of(
            (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N, BLOCK_N), BLOCK_N)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for ki in range(k_tiles):
            kk = ki * BLOCK_K + offs_k
            a_ptrs = a_ptr + offs_am[:, None].to(tl.int64) * stride_am + kk[None, :] * stride_ak
            b_ptrs = b_ptr + kk[:, None].to(tl.int64) * stride_bk + offs_bn[None, :] * stride_bn
            if EVEN_K:
                a = tl.load(a_ptrs)
                b = tl.load(b_ptrs)
            else:
                a = tl.load(a_ptrs, mask=kk[None, :] < K, other=0.0)
                b = tl.load(b_ptrs, mask=kk[:, None] < K, other=0.0)
            acc = tl.dot(a, b, acc)
        tile_id_c += NUM_SMS
        pid_m, pid_n = _tile_of(tile_id_c, num_pid_m, num_pid_n, GROUP_M)
        offs_cm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_cn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        bias = tl.load(bias_ptr + offs_cn, mask=offs_cn < N, other=0.0).to(tl.float32)
        acc = _act(acc + bias[None, :], ACT)
        c_ptrs = c_ptr + offs_cm[:, None].to(tl.int64) * stride_cm + offs_cn[None, :] * stride_cn
        tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty),
                 mask=(offs_cm[:, None] < M) & (offs_cn[None, :] < N))


@triton.jit
def tma_kernel(a_desc, b_desc, c_desc, bias_ptr, c_ptr, M, N, K, stride_cm,
               ACT: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
               BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
               EPILOGUE_SUBTILE: tl.constexpr, STORE_TMA: tl.constexpr):
    # one tile per program, A [BM, BK] and B [BK, BN] boxes by TMA (zero past M, N, K)
    pid_m, pid_n = _tile_of(tl.program_id(0), tl.cdiv(M, BLOCK_M), tl.cdiv(N, BLOCK_N), GROUP_M)
    off_m = pid_m * BLOCK_M
    off_n = pid_n * BLOCK_N
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for ki in range(tl.cdiv(K, BLOCK_K)):
        a = a_desc.load([off_m, ki * BLOCK_K])
        b = b_desc.load([ki * BLOCK_K, off_n])
        acc = tl.dot(a, b, acc)
    _epilogue(acc, c_desc, c_ptr, stride_cm, bias_ptr, off_m, off_n, M, N, ACT, BLOCK_M,
              BLOCK_N, EPILOGUE_SUBTILE, STORE_TMA)


@triton.jit
def _persistent_loop(a_desc, b_desc, c_desc, bias_ptr, c_ptr, M, N, K, stride_cm,
                     ACT: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                     BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr, NUM_SMS: tl.constexpr,
                     EPILOGUE_SUBTILE: tl.constexpr, STORE_TMA: tl.constexpr,
                     FLATTEN: tl.constexpr, WARP_SPECIALIZE: tl.constexpr):
    # tutorial 09's matmul_kernel_tma_persistent / _descriptor_persistent, B as [K, N]
    start_pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    k_tiles = tl.cdiv(K, BLOCK_K)
    num_tiles = num_pid_m * num_pid_n
    tile_id_c = start_pid - NUM_SMS  # breaks the prologue/epilogue dependency (tutorial)
    for tile_id in tl.range(start_pid, num_tiles, NUM_SMS, flatten=FLATTEN,
                            warp_specialize=WARP_SPECIALIZE):
        pid_m, pid_n = _tile_of(tile_id, num_pid_m, num_pid_n, GROUP_M)
        off_am = pid_m * BLOCK_M
        off_bn = pid_n * BLOCK_N
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for ki in range(k_tiles):
            a = a_desc.load([off_am, ki * BLOCK_K])
            b = b_desc.load([ki * BLOCK_K, off_bn])
            acc = tl.dot(a, b, acc)
        tile_id_c += NUM_SMS
        pid_m, pid_n = _tile_of(tile_id_c, num_pid_m, num_pid_n, GROUP_M)
        _epilogue(acc, c_desc, c_ptr, stride_cm, bias_ptr, pid_m * BLOCK_M, pid_n * BLOCK_N,
                  M, N, ACT, BLOCK_M, BLOCK_N, EPILOGUE_SUBTILE, STORE_TMA)


@triton.jit
def tma_persistent_kernel(a_desc, b_desc, c_desc, bias_ptr, c_ptr, M, N, K, stride_cm,
                          ACT: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                          BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr, NUM_SMS: tl.constexpr,
                          EPILOGUE_SUBTILE: tl.constexpr, STORE_TMA: tl.constexpr,
                          FLATTEN: tl.constexpr, WARP_SPECIALIZE: tl.constexpr):
    _persistent_loop(a_desc, b_desc, c_desc, bias_ptr, c_ptr, M, N, K, stride_cm, ACT, BLOCK_M,
                     BLOCK_N, BLOCK_K, GROUP_M, NUM_SMS, EPILOGUE_SUBTILE, STORE_TMA, FLATTEN,
                     WARP_SPECIALIZE)


@triton.jit
def dev_persistent_kernel(a_ptr, b_ptr, bias_ptr, c_ptr, M, N, K, stride_am, stride_bk, stride_cm,
                          ACT: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                          BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr, NUM_SMS: tl.constexpr,
                          EPILOGUE_SUBTILE: tl.constexpr, STORE_TMA: tl.constexpr,
                          FLATTEN: tl.constexpr, WARP_SPECIALIZE: tl.constexpr):
    # descriptors built on the device (global scratch from triton.set_allocator); row strides
    # are runtime values, the last dimension must be contiguous (checked by the launcher)
    a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[stride_am, 1],
                                       block_shape=[BLOCK_M, BLOCK_K])
    b_desc = tl.make_tensor_descriptor(b_ptr, shape=[K, N], strides=[stride_bk, 1],
                                       block_shape=[BLOCK_K, BLOCK_N])
    if EPILOGUE_SUBTILE:
        c_desc = tl.make_tensor_descriptor(c_ptr, shape=[M, N], strides=[stride_cm, 1],
                                           block_shape=[BLOCK_M, BLOCK_N // 2])
    else:
        c_desc = tl.make_tensor_descriptor(c_ptr, shape=[M, N], strides=[stride_cm, 1],
                                           block_shape=[BLOCK_M, BLOCK_N])
    _persistent_loop(a_desc, b_desc, c_desc, bias_ptr, c_ptr, M, N, K, stride_cm, ACT, BLOCK_M,
                     BLOCK_N, BLOCK_K, GROUP_M, NUM_SMS, EPILOGUE_SUBTILE, STORE_TMA, FLATTEN,
                     WARP_SPECIALIZE)


# --------------------------------------------------------------------------------------------
# launchers
# --------------------------------------------------------------------------------------------

def load_file(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


SOL = None  # the solution module (solutions/12_matmul_tc/triton/matmul_tc.py)
REF = None  # exercises/12_matmul_tc/reference.py


def launch(kernel, grid, *args, **kw):
    """kernel[grid](...) on a GPU or the interpreter; --compile-only: compile it for sm_90."""
    if MODE == "compile":
        LAST["kernel"] = compile_sm90(kernel, args, kw)
        return
    LAST["kernel"] = kernel[grid](*args, **kw)


def compile_sm90(kernel, args, kw):
    """Compile as a launch would on an H100/H200 (capability 9.0), without a GPU: the JIT's own
    binder gives the signature, specialization (divisibility by 16, ints equal to 1) and
    options (Triton 3.6's runtime/jit.py: create_function_from_signature, _pack_args)."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource, compile, make_backend
    from triton.runtime.jit import create_function_from_signature
    target = GPUTarget("cuda", 90, 32)
    backend = make_backend(target)
    binder = create_function_from_signature(kernel.signature, kernel.params, backend)
    bound, spec, opts = binder(*args, **kw)
    options, signature, constexprs, attrs = kernel._pack_args(backend, kw, bound, spec, opts)
    return compile(ASTSource(kernel, signature, constexprs, attrs), target=target,
                   options=options.__dict__)


def resources(k):
    """(registers, spilled bytes, dynamic shared bytes, warps) of a compiled kernel."""
    if k is None or MODE == "dry":
        return None
    md = k.metadata
    regs, spills = getattr(k, "n_regs", None), getattr(k, "n_spills", None)
    if MODE == "compile":  # no driver: read the cubin with the cuobjdump Triton ships
        try:
            tool = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
            with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
                f.write(k.asm["cubin"])
                f.flush()
                txt = subprocess.run([str(tool), "--dump-resource-usage", f.name],
                                     capture_output=True, text=True, timeout=60).stdout
            m = re.search(r"REG:(\d+).*?LOCAL:(\d+)", txt)
            regs, spills = (int(m.group(1)), int(m.group(2))) if m else (None, None)
        except Exception:
            pass
    return {"regs": regs, "spills": spills, "smem": md.shared, "warps": md.num_warps}


def _empty_out(A, B):
    return torch.empty((A.shape[0], B.shape[1]), dtype=A.dtype, device=A.device)


def _tma_ready(*ts):
    """TMA: last dimension contiguous, 16-byte aligned base and row stride (the fast path;
    the pointer kernel serves any strides)."""
    for t in ts:
        es = t.element_size()
        if t.stride(-1) != 1 or t.data_ptr() % 16 or (t.stride(0) * es) % 16:
            raise ValueError(f"TMA needs contiguous 16-byte aligned rows, got strides "
                             f"{tuple(t.stride())}")


@dataclass(frozen=True)
class Cfg:
    bm: int
    bn: int
    bk: int
    g: int
    s: int
    w: int
    sub: bool = False      # EPILOGUE_SUBTILE
    tma_store: bool = True
    flatten: bool = True
    ws: bool = False

    def label(self):
        out = f"{self.bm}x{self.bn}x{self.bk} s{self.s} w{self.w} g{self.g}"
        if self.sub:
            out += " sub"
        if not self.tma_store:
            out += " ptrstore"
        if not self.flatten:
            out += " noflat"
        if self.ws:
            out += " ws"
        return out


def run_ptr(c: Cfg, A, B, bias, act):
    M, K = A.shape
    N = B.shape[1]
    C = _empty_out(A, B)
    grid = (triton.cdiv(M, c.bm) * triton.cdiv(N, c.bn),)
    launch(SOL._matmul_act_kernel, grid, A, B, bias, C, M, N, K, A.stride(0), A.stride(1),
           B.stride(0), B.stride(1), C.stride(0), C.stride(1), bias.stride(0),
           ACT=ACTS[act], EVEN_K=K % c.bk == 0, BLOCK_M=c.bm, BLOCK_N=c.bn, BLOCK_K=c.bk,
           GROUP_M=c.g, num_warps=c.w, num_stages=c.s)
    return C


def _grid_persistent(M, N, c: Cfg):
    return (min(NUM_SMS, triton.cdiv(M, c.bm) * triton.cdiv(N, c.bn)),)


def run_ptr_persist(c: Cfg, A, B, bias, act):
    M, K = A.shape
    N = B.shape[1]
    C = _empty_out(A, B)
    launch(ptr_persistent_kernel, _grid_persistent(M, N, c), A, B, bias, C, M, N, K,
           A.stride(0), A.stride(1), B.stride(0), B.stride(1), C.stride(0), C.stride(1),
           ACT=ACTS[act], EVEN_K=K % c.bk == 0, BLOCK_M=c.bm, BLOCK_N=c.bn, BLOCK_K=c.bk,
           GROUP_M=c.g, NUM_SMS=NUM_SMS, FLATTEN=c.flatten, num_warps=c.w, num_stages=c.s)
    return C


def _host_descs(c: Cfg, A, B, C):
    from triton.tools.tensor_descriptor import TensorDescriptor
    _tma_ready(A, B, C)
    return (TensorDescriptor.from_tensor(A, [c.bm, c.bk]),
            TensorDescriptor.from_tensor(B, [c.bk, c.bn]),
            TensorDescriptor.from_tensor(C, [c.bm, c.bn // 2 if c.sub else c.bn]))


def run_tma(c: Cfg, A, B, bias, act):
    M, K = A.shape
    N = B.shape[1]
    C = _empty_out(A, B)
    a_d, b_d, c_d = _host_descs(c, A, B, C)
    grid = (triton.cdiv(M, c.bm) * triton.cdiv(N, c.bn),)
    launch(tma_kernel, grid, a_d, b_d, c_d, bias.contiguous(), C, M, N, K, C.stride(0),
           ACT=ACTS[act], BLOCK_M=c.bm, BLOCK_N=c.bn, BLOCK_K=c.bk, GROUP_M=c.g,
           EPILOGUE_SUBTILE=c.sub, STORE_TMA=c.tma_store, num_warps=c.w, num_stages=c.s)
    return C


def run_tma_persist(c: Cfg, A, B, bias, act):
    M, K = A.shape
    N = B.shape[1]
    C = _empty_out(A, B)
    a_d, b_d, c_d = _host_descs(c, A, B, C)
    launch(tma_persistent_kernel, _grid_persistent(M, N, c), a_d, b_d, c_d, bias.contiguous(),
           C, M, N, K, C.stride(0), ACT=ACTS[act], BLOCK_M=c.bm, BLOCK_N=c.bn, BLOCK_K=c.bk,
           GROUP_M=c.g, NUM_SMS=NUM_SMS, EPILOGUE_SUBTILE=c.sub, STORE_TMA=c.tma_store,
           FLATTEN=c.flatten, WARP_SPECIALIZE=c.ws, num_warps=c.w, num_stages=c.s)
    return C


def run_dev_persist(c: Cfg, A, B, bias, act):
    M, K = A.shape
    N = B.shape[1]
    C = _empty_out(A, B)
    _tma_ready(A, B, C)
    launch(dev_persistent_kernel, _grid_persistent(M, N, c), A, B, bias.contiguous(), C,
           M, N, K, A.stride(0), B.stride(0), C.stride(0), ACT=ACTS[act], BLOCK_M=c.bm,
           BLOCK_N=c.bn, BLOCK_K=c.bk, GROUP_M=c.g, NUM_SMS=NUM_SMS, EPILOGUE_SUBTILE=c.sub,
           STORE_TMA=c.tma_store, FLATTEN=c.flatten, WARP_SPECIALIZE=c.ws, num_warps=c.w,
           num_stages=c.s)
    return C


# --------------------------------------------------------------------------------------------
# the candidates, in the order they run (the most promising of each family first)
# --------------------------------------------------------------------------------------------

def candidates():
    C = Cfg
    fams = [
        # the solution's kernel, one config at a time (its autotune list: 128x256 and 256x128,
        # s3/s4, w8, GROUP_M 8, among others): stages, GROUP_M and the tile's orientation
        ("ptr", "ptr", run_ptr, [
            C(128, 256, 64, 8, 3, 8), C(128, 256, 64, 8, 4, 8),
            C(128, 256, 64, 16, 3, 8), C(128, 256, 64, 16, 4, 8),
            C(256, 128, 64, 8, 3, 8), C(256, 128, 64, 8, 4, 8),
            C(128, 256, 64, 4, 3, 8)]),
        # tutorial 09 on Hopper: TMA + persistent (+ subtiled epilogue for a 4th stage)
        ("tma-persist", "tma", run_tma_persist, [
            C(128, 256, 64, 8, 3, 8), C(128, 256, 64, 8, 3, 8, sub=True),
            C(128, 256, 64, 8, 4, 8, sub=True), C(128, 256, 64, 8, 4, 8, tma_store=False),
            C(128, 256, 64, 16, 3, 8, sub=True), C(256, 128, 64, 8, 3, 8, sub=True),
            C(128, 128, 64, 8, 4, 4), C(128, 128, 64, 8, 4, 8)]),
        ("dev-persist", "tma", run_dev_persist, [
            C(128, 256, 64, 8, 3, 8, sub=True), C(128, 256, 64, 8, 4, 8, sub=True),
            C(128, 256, 64, 8, 3, 8)]),
        ("tma", "tma", run_tma, [
            C(128, 256, 64, 8, 3, 8), C(128, 256, 64, 8, 4, 8, sub=True)]),
        # the pointer kernel in a persistent grid: flatten=True pipelines it poorly here (Triton
        # 3.6, sm_90: a third of the cp.async of the others, 80 KB of shared memory), so both
        ("ptr-persist", "ptr", run_ptr_persist, [
            C(128, 256, 64, 8, 3, 8, flatten=False), C(128, 256, 64, 8, 3, 8)]),
        # Hopper warp specialization (tutorial 09: device descriptors, flatten=False, no
        # subtile). Triton 3.6 specializes only with num_warps=4 (--compile-only: 12 warps, a
        # producer and two consumer warpgroups, setmaxnreg); at num_warps=8 the pass leaves the
        # loop as it is. The two consumers split the tile (128x256 = 2 x 64x256), as CUTLASS's
        # cooperative schedule does. 128x256 with 4 stages needs 257 KB (> 227 KB): not listed.
        # Known not to compile for sm_90 with 3.6, so not listed either:
        # EPILOGUE_SUBTILE + WS (WSDataPartition: "unsupported op type") and host descriptors +
        # WS ("tensor descriptor block and tensor types must match": the partition halves the
        # block the host descriptor fixed), as the tutorial's Hopper notes say
        ("dev-persist-ws", "tma", run_dev_persist, [
            C(128, 256, 64, 8, 3, 4, flatten=False, ws=True),
            C(128, 128, 64, 8, 4, 4, flatten=False, ws=True),
            C(128, 128, 64, 8, 5, 4, flatten=False, ws=True),
            C(256, 128, 64, 8, 3, 4, flatten=False, ws=True),
            C(128, 256, 64, 16, 3, 4, flatten=False, ws=True)]),
    ]
    out = []
    for fam, small, fn, cfgs in fams:
        for c in cfgs:
            out.append({"name": f"{fam} {c.label()}", "family": fam, "small": small,
                        "fn": fn, "cfg": c})
    return out


# --------------------------------------------------------------------------------------------
# measuring
# --------------------------------------------------------------------------------------------

T0 = time.perf_counter()
LOG_LINES = []


def log(msg="", quiet=False):
    line = f"[{time.perf_counter() - T0:6.1f}s] {msg}" if msg else ""
    LOG_LINES.append(line)
    if not quiet:
        print(line, flush=True)


def device():
    return "cpu" if MODE in ("dry", "compile") else "cuda"


def dtype():
    return torch.float16 if MODE == "dry" else torch.bfloat16  # bf16 tl.dot: not on interpreter


def make_inputs(M, N, K, seed=0):
    if MODE == "compile":  # nothing runs: shapes, strides and alignment are what matter
        dt = dtype()
        return (torch.empty((M, K), dtype=dt), torch.empty((K, N), dtype=dt),
                torch.empty((N,), dtype=dt), "relu")
    g = torch.Generator(device=device()).manual_seed(seed)
    return REF.bench_inputs({"M": M, "N": N, "K": K, "act": "relu"}, dtype(), device(), g)


def expected(args):
    A, B, bias, act = args
    if MODE == "compile":
        return None
    return REF.reference(A.double(), B.double(), bias.double(), act)


def rel_err(out, want):
    """||out - want|| / ||want|| in float64; inf when any output is not finite."""
    if want is None:
        return None
    o = out.double()
    if not bool(torch.isfinite(o).all()):
        return math.inf
    return ((o - want).norm() / want.norm()).item()


def sync():
    if MODE == "gpu":
        torch.cuda.synchronize()


def timed(fn):
    """The grader's helper: median and p20-p80 in us (None off the GPU)."""
    if MODE != "gpu":
        return None
    from grader.timing import time_fn
    t = time_fn(fn)
    return {k: v * 1e3 for k, v in t.items()}  # ms -> us


def measure(name, fn, args, want, small=None, time_it=True, check=True):
    """One row: first call (compile), check, small check, timing. Never raises."""
    row = {"name": name, "shape": "x".join(map(str, (args[0].shape[0], args[1].shape[1],
                                                      args[0].shape[1]))), "status": "ok"}
    try:
        LAST.pop("kernel", None)
        t = time.perf_counter()
        out = fn(*args)
        sync()
        row["first_call_s"] = round(time.perf_counter() - t, 2)
        res = resources(LAST.get("kernel"))
        if res:
            row.update(res)
        if MODE == "compile":
            fits = row.get("smem") is None or row["smem"] <= SMEM_LIMIT
            row["status"] = "compiled" if fits else f"smem {row['smem']} > {SMEM_LIMIT}"
            return row
        bound = REL_BOUND[args[0].dtype]
        row["err"] = rel_err(out, want) if check else None  # addmm has no activation
        row["ok"] = not check or (row["err"] is not None and row["err"] <= bound)
        del out
        if small is not None:
            s_args, s_want = small
            s_out = fn(*s_args)
            sync()
            row["small_err"] = rel_err(s_out, s_want)
            row["small_ok"] = row["small_err"] <= bound
        if not row["ok"] or (small is not None and not row["small_ok"]):
            row["status"] = "WRONG"
        if time_it:
            t = timed(lambda: fn(*args))
            if t:
                row.update(us=t["ms"], p20=t["p20"], p80=t["p80"])
    except Exception as e:  # a candidate that does not compile or run here: say so, go on
        first = (str(e).strip().splitlines() or [""])[0][:300]
        row["status"] = "FAILED"
        row["error"] = f"{type(e).__name__}: {first}"
        LOG_LINES.append(traceback.format_exc())
        try:
            sync()
        except Exception as e2:  # a sticky CUDA error: the rest of the process cannot run
            row["error"] += f" (and CUDA is now unusable: {type(e2).__name__})"
            raise CudaLost(row) from e2
    return row


class CudaLost(Exception):
    """A candidate left a sticky CUDA error (an illegal address...): nothing more can run in
    this process. Carries the candidate's row."""


def fmt_row(r, flops, t_addmm, t_lin):
    parts = [f"{r['name']:44s}"]
    if r.get("us"):
        us = r["us"]
        parts.append(f"{us:8.1f} us {flops / us / 1e6:6.1f} TF/s")
        if t_addmm:
            parts.append(f"{t_addmm / us:6.1%} addmm")
        if t_lin:
            parts.append(f"{t_lin / us:5.3f}x lin")
    if r.get("err") is not None:
        parts.append(f"err {r['err']:.2e}")
    if r.get("small_err") is not None:
        parts.append(f"small {r['small_err']:.1e}")
    if r.get("regs") is not None or r.get("smem") is not None:
        parts.append(f"regs {r.get('regs')} spill {r.get('spills')} smem {r.get('smem')} "
                     f"w{r.get('warps')}")
    if r.get("first_call_s") is not None:
        parts.append(f"1st {r['first_call_s']}s")
    if r["status"] not in ("ok",):
        parts.append(r["status"] + (f" {r['error']}" if r.get("error") else ""))
    return "  ".join(parts)


# --------------------------------------------------------------------------------------------
# child processes (the isolated families)
# --------------------------------------------------------------------------------------------

def run_child(names, shapes, out_dir, timeout_s, families):
    """Run candidates `names` on `shapes` in fresh processes (same GPU, one after the other);
    their rows. A child that dies (a crash, a hang killed at the deadline) costs only the row
    it was on: the candidates after it run in a new child while time is left."""
    deadline = time.perf_counter() + timeout_s
    todo = [(n, list(s)) for s in shapes for n in names]  # the child's own order
    rows = []
    while todo:
        left = deadline - time.perf_counter()
        if left < 15:
            break
        spec = {"jobs": todo,
                "result": str(Path(out_dir) / f"child-{os.getpid()}-{time.time_ns()}.json")}
        spec_path = Path(spec["result"]).with_suffix(".spec.json")
        spec_path.write_text(json.dumps(spec))
        cmd = [sys.executable, str(Path(__file__).resolve()), "--child", str(spec_path),
               "--out", str(out_dir)]
        log(f"child process for {len(todo)} row(s), {left:.0f} s left")
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        heard = [time.perf_counter()]
        stop = threading.Event()

        def watchdog():  # kill at the deadline, or after ROW_TIMEOUT s without a line (a hang)
            while not stop.wait(1.0):
                now = time.perf_counter()
                if now > deadline or now - heard[0] > ROW_TIMEOUT:
                    proc.kill()
                    return
        threading.Thread(target=watchdog, daemon=True).start()
        try:
            for line in proc.stdout:
                heard[0] = time.perf_counter()
                log("  child| " + line.rstrip())
            proc.wait()
        finally:
            stop.set()
        got = json.loads(Path(spec["result"]).read_text()) if Path(spec["result"]).exists() else []
        rows += got
        todo = todo[len(got):]
        if todo and proc.returncode != 4:  # 4: the child recorded its failing row itself
            n, s = todo.pop(0)  # the row the child died on
            rows.append({"name": n, "family": families[n], "shape": "x".join(map(str, s)),
                         "status": "FAILED", "error": f"child process died on it (exit "
                                                      f"{proc.returncode}; negative: killed, hung "
                                                      f"> {ROW_TIMEOUT} s or past the deadline)"})
            log(f"{n} {s}: the child died on it (exit {proc.returncode})")
    for n, s in todo:
        rows.append({"name": n, "family": families[n], "shape": "x".join(map(str, s)),
                     "status": "skipped (child time)"})
    return rows


def child_main(spec_path):
    spec = json.loads(Path(spec_path).read_text())
    cands = {c["name"]: c for c in candidates()}
    rows = []
    result = Path(spec["result"])
    smalls = {}
    shapes = []
    for _, shape in spec["jobs"]:
        if shape not in shapes:
            shapes.append(shape)
    for shape in shapes:
        args = make_inputs(*shape)
        want = expected(args)
        print(f"inputs {shape} ready", flush=True)
        for name in [n for n, s in spec["jobs"] if s == shape]:
            c = cands[name]
            small = None
            if tuple(shape) == GRADED:
                if c["small"] not in smalls:
                    s_args = make_inputs(*SMALL[c["small"]], seed=1)
                    smalls[c["small"]] = (s_args, expected(s_args))
                small = smalls[c["small"]]
            fn = (lambda A, B, bias, act, c=c: c["fn"](c["cfg"], A, B, bias, act))
            try:
                r = measure(name, fn, args, want, small)
            except CudaLost as e:  # keep its row, and let a fresh child run the rest
                r = e.args[0]
                r["family"] = c["family"]
                rows.append(r)
                result.write_text(json.dumps(rows))
                print(fmt_row(r, 2 * math.prod(shape), None, None), flush=True)
                os._exit(4)
            r["family"] = c["family"]
            rows.append(r)
            result.write_text(json.dumps(rows))  # after every row: a kill keeps what ran
            print(fmt_row(r, 2 * math.prod(shape), None, None), flush=True)
        del args, want


# --------------------------------------------------------------------------------------------
# main
# --------------------------------------------------------------------------------------------

def main():
    global MODE, NUM_SMS, SOL, REF
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="/tmp/12_triton_variants", help="folder for the log, json")
    p.add_argument("--shapes", action="store_true", help="the best 2 on the sweep's shapes too")
    p.add_argument("--only", default=None, help="regex on candidate names")
    p.add_argument("--budget", type=float, default=150.0,
                   help="seconds after which the remaining in-process candidates are skipped")
    p.add_argument("--isolate", default=ISOLATE_DEFAULT,
                   help="families run in a child process (comma-separated; '' for none)")
    p.add_argument("--list", action="store_true")
    p.add_argument("--dry", action="store_true", help="Triton's interpreter, tiny fp16 shapes")
    p.add_argument("--compile-only", action="store_true", help="compile for sm_90, no GPU")
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    a = p.parse_args()

    MODE = "dry" if a.dry else "compile" if a.compile_only else "gpu"
    if MODE == "dry" and os.environ.get("TRITON_INTERPRET") != "1":
        raise SystemExit("--dry needs TRITON_INTERPRET=1 before triton is imported")
    SOL = load_file(ROOT / "solutions" / EX / "triton" / "matmul_tc.py", "ex12_triton_solution")
    REF = load_file(ROOT / "exercises" / EX / "reference.py", "ex12_reference")
    cands = [c for c in candidates() if not a.only or re.search(a.only, c["name"])]
    if a.list:
        for c in cands:
            print(c["name"])
        return
    out_dir = Path(a.out)
    out_dir.mkdir(parents=True, exist_ok=True)

    if MODE == "gpu":
        NUM_SMS = torch.cuda.get_device_properties(0).multi_processor_count
        # device-side descriptors (tl.make_tensor_descriptor) take 128 B of global scratch per
        # program from this allocator
        triton.set_allocator(lambda size, align, stream: torch.empty(size, device="cuda",
                                                                    dtype=torch.int8))
    elif MODE == "dry":
        NUM_SMS = 3  # a few programs: each persistent program loops over several tiles
    if a.child:
        child_main(a.child)
        return

    graded = GRADED if MODE != "dry" else (200, 264, 136)  # dry: ragged M, N and a K tail
    small_shapes = SMALL if MODE != "dry" else {"ptr": (72, 40, 64), "tma": (72, 40, 64)}
    dev = torch.cuda.get_device_name() if MODE == "gpu" else MODE
    log(f"{dev}, torch {torch.__version__}, triton {triton.__version__}, mode {MODE}, "
        f"{NUM_SMS} SMs; case {graded} {str(dtype()).removeprefix('torch.')} relu; "
        f"{len(cands)} candidates")
    flops = 2 * math.prod(graded)
    args = make_inputs(*graded)
    want = expected(args)
    small = {k: (lambda s: (s, expected(s)))(make_inputs(*v, seed=1))
             for k, v in small_shapes.items()}
    log("inputs and the float64 reference ready")

    rows = []
    base = {"addmm (cuBLAS, no act)": REF.addmm, "F.linear + relu": REF.linear_act,
            "solution (autotuned)": SOL.matmul_act}
    t_addmm = t_lin = None
    if MODE != "compile":
        for name, f in base.items():
            r = measure(name, f, args, want, small["ptr"] if "solution" in name else None,
                        check=not name.startswith("addmm"))
            r["family"] = "baseline"
            rows.append(r)
            if name.startswith("addmm"):
                t_addmm = r.get("us")
            elif name.startswith("F.linear"):
                t_lin = r.get("us")
            log(fmt_row(r, flops, t_addmm, t_lin))
        if MODE == "gpu":
            try:
                log(f"solution's autotuner picked: {SOL._matmul_act_tuned.best_config}")
            except Exception:
                pass

    isolate = {f for f in a.isolate.split(",") if f} if MODE == "gpu" else set()
    local = [c for c in cands if c["family"] not in isolate]
    remote = [c for c in cands if c["family"] in isolate]
    lost = False
    for c in local:
        if lost:
            rows.append({"name": c["name"], "family": c["family"], "shape": "x".join(map(str, graded)),
                         "status": "skipped (CUDA lost)"})
            continue
        if MODE == "gpu" and time.perf_counter() - T0 > a.budget:
            rows.append({"name": c["name"], "family": c["family"], "status": "skipped (budget)",
                         "shape": "x".join(map(str, graded))})
            log(f"{c['name']}: skipped, past the --budget of {a.budget:.0f} s")
            continue
        fn = (lambda A, B, bias, act, c=c: c["fn"](c["cfg"], A, B, bias, act))
        try:
            r = measure(c["name"], fn, args, want, small[c["small"]])
        except CudaLost as e:
            r, lost = e.args[0], True
            log("CUDA context lost: the remaining in-process rows are skipped")
        r["family"] = c["family"]
        rows.append(r)
        log(fmt_row(r, flops, t_addmm, t_lin))
    if remote:
        fams = {c["name"]: c["family"] for c in cands}
        rows += run_child([c["name"] for c in remote], [list(graded)], out_dir, families=fams,
                          timeout_s=max(60.0, min(90.0, 225.0 - (time.perf_counter() - T0))))
        for r in rows[-len(remote):]:
            log(fmt_row(r, flops, t_addmm, t_lin), quiet=True)

    def good(rs):
        return sorted((r for r in rs if r.get("us") and r["status"] == "ok"
                       and r.get("family") != "baseline"), key=lambda r: r["us"])

    # noise: the baselines, the solution and the best in-process candidates once more
    by_name = {c["name"]: c for c in cands}
    if MODE == "gpu" and not lost:
        again = [(n, f) for n, f in base.items()]
        for r in [r for r in good(rows) if r["family"] not in isolate][:3]:
            c = by_name[r["name"]]
            again.append((r["name"], lambda A, B, bias, act, c=c: c["fn"](c["cfg"], A, B, bias,
                                                                            act)))
        log("again (noise):")
        for n, f in again:
            try:
                t = timed(lambda: f(*args))
                first = next(r for r in rows if r["name"] == n)
                first["us_again"] = t["ms"]
                log(f"  {n:44s} {t['ms']:8.1f} us (first {first.get('us', float('nan')):.1f})")
            except Exception as e:
                log(f"  {n}: {type(e).__name__}: {e}")

    shape_rows = []
    if a.shapes and MODE == "gpu" and not lost:
        best2 = good(rows)[:2]
        log(f"--shapes: {', '.join(r['name'] for r in best2)} + baselines on {SHAPES}")
        del args, want
        torch.cuda.empty_cache()
        for shape in SHAPES:
            s_args = make_inputs(*shape)
            s_want = expected(s_args)
            here = []
            for name, f in base.items():
                r = measure(name, f, s_args, s_want, check=not name.startswith("addmm"))
                r["family"] = "baseline"
                here.append(r)
            for r0 in best2:
                c = by_name[r0["name"]]
                if c["family"] in isolate:
                    continue
                fn = (lambda A, B, bias, act, c=c: c["fn"](c["cfg"], A, B, bias, act))
                r = measure(c["name"], fn, s_args, s_want)
                r["family"] = c["family"]
                here.append(r)
            for r in here:
                log(f"{r['shape']}: " + fmt_row(r, 2 * math.prod(shape), None, None))
            shape_rows += here
            del s_args, s_want
            torch.cuda.empty_cache()
        iso = [r["name"] for r in best2 if by_name[r["name"]]["family"] in isolate]
        if iso:
            shape_rows += run_child(iso, [list(s) for s in SHAPES], out_dir, timeout_s=90,
                                    families={c["name"]: c["family"] for c in cands})

    # ---- the report: every row, the shapes, then the compact table LAST (<= ~22 lines, so a
    # `tail -25` of the output holds it) ----------------------------------------------------------
    (out_dir / "12_triton_variants.json").write_text(json.dumps(
        {"device": dev, "torch": torch.__version__, "triton": triton.__version__, "mode": MODE,
         "case": graded, "rows": rows, "shape_rows": shape_rows}, indent=1, default=str))
    w = max([len(r["name"]) for r in rows] + [20])
    hdr = (f"{'candidate':{w}s} {'us':>8s} {'again':>8s} {'TF/s':>6s} {'%addmm':>7s} "
           f"{'xlin':>6s} {'rel err':>8s} {'small':>8s} {'regs':>4s} {'spill':>5s} "
           f"{'smem':>6s} status")
    legend = (f"{dev} | triton {triton.__version__} | torch {torch.__version__} | {graded} "
              f"relu, {MODE} | %addmm = t(addmm)/t, xlin = t(F.linear+relu)/t (> 1 wins)")

    def f(v, spec):  # a number, or "-" in the same width
        width = int(re.match(r"\d+", spec).group())
        return format(v, spec) if isinstance(v, (int, float)) else "-".rjust(width)

    def tline(r, fl, ta, tlin, full=True):
        us = r.get("us")
        out = (f"{r['name']:{w}s} {f(us, '8.1f')} {f(r.get('us_again'), '8.1f')} "
               f"{f(fl / us / 1e6 if us else None, '6.1f')} "
               f"{f(ta / us * 100 if us and ta else None, '6.1f')}% "
               f"{f(tlin / us if us and tlin else None, '6.3f')} {f(r.get('err'), '8.1e')} "
               f"{f(r.get('small_err'), '8.1e')}")
        if full:
            out += (f" {f(r.get('regs'), '4d')} {f(r.get('spills'), '5d')} "
                    f"{f(r.get('smem'), '6d')}")
        return out + f" {r['status']}" + (f": {r['error'][:90]}" if r.get("error") else "")

    lines = ["", "all rows:", legend, hdr, "-" * len(hdr)]
    lines += [tline(r, flops, t_addmm, t_lin) for r in rows]
    shape_best = []
    for shape in (SHAPES if shape_rows else []):
        key = "x".join(map(str, shape))
        sr = [r for r in shape_rows if r["shape"] == key]
        ta = next((r.get("us") for r in sr if r["name"].startswith("addmm")), None)
        tli = next((r.get("us") for r in sr if r["name"].startswith("F.linear")), None)
        lines += ["", f"M x N x K = {key}:"]
        lines += [tline(r, 2 * math.prod(shape), ta, tli) for r in sr]
        parts = [f"{r['name'].split(' ')[0] if r.get('family') != 'baseline' else r['name']}"
                 f" {tli / r['us']:.3f}x" for r in sr
                 if r.get("us") and tli and not r["name"].startswith(("addmm", "F.linear"))]
        if ta and tli:
            parts.insert(0, f"addmm {tli / ta:.3f}x")
        shape_best.append(f"  {key:18s} xlin: " + ", ".join(parts))

    # the compact table: baselines, the best row of each family, failures, the shapes
    hdr_c = hdr[:hdr.index(" regs")] + " status"
    lines += ["", "SUMMARY " + legend, hdr_c, "-" * len(hdr_c)]
    fams = []
    for r in rows:
        if r.get("family") not in fams:
            fams.append(r.get("family"))
    for fam in fams:
        fr = [r for r in rows if r.get("family") == fam]
        if fam == "baseline":
            lines += [tline(r, flops, t_addmm, t_lin, full=False) for r in fr]
            continue
        ok = good(fr)
        if ok:
            lines.append(tline(ok[0], flops, t_addmm, t_lin, full=False)
                         + f" (best of {len(fr)})")
        else:
            st = sorted({r["status"] for r in fr})
            lines.append(f"{fam:{w}s} " + ("no timed correct row" if MODE == "gpu" else
                                          "not timed in this mode") + f" ({', '.join(st)})")
    bad = [r for r in rows if r["status"] not in ("ok", "compiled")]
    if bad:
        lines.append(f"not ok: {len(bad)} of {len(rows)} rows: " + "; ".join(
            f"{r['name']} ({r['status']})" for r in bad[:6]) + (" ..." if len(bad) > 6 else ""))
    if shape_best:
        lines.append("shapes (t(F.linear+relu) / t, best 2 and the solution, > 1 wins):")
        lines += shape_best
    lines.append(f"total {time.perf_counter() - T0:.0f} s; log and json in {out_dir}")
    for line in lines:
        LOG_LINES.append(line)
        print(line)
    (out_dir / "12_triton_variants.log").write_text("\n".join(LOG_LINES) + "\n")


if __name__ == "__main__":
    main()
