"""Exercise 12 — matmul_tc, Triton track, solved: act(A @ B + bias) on tensor cores.

    matmul_act(A [M, K], B [K, N], bias [N], act) -> [M, N], act in "none", "relu", "gelu_tanh"

One kernel: each program computes a BLOCK_M x BLOCK_N tile of the output, walking K in steps
of BLOCK_K with `tl.dot` (tensor cores: wgmma on Hopper, mma on Ampere) into an fp32
accumulator, then adds the bias, applies the activation and casts to the input dtype in
registers before the one store: the epilogue is fused, D is written once and never re-read.

Napkin math, the graded case (bf16, M = N = K = 8192, relu): 2 M N K = 1.10e12 flops, 403 MB of
compulsory traffic (A and B read once, D written once). At the H200's measured rates, 709
TFLOP/s (cuBLAS bf16) and 4.28 TB/s (copy), that is ~1551 us of math against ~94 us of memory:
compute-bound by ~16x. The memory traffic that matters is the re-reading of A and B tiles: a
tile of 128 x 256 reads (128 + 256) * K elements to do 2 * 128 * 256 * K flops, i.e. 85 flops
per bf16 element loaded (~43 per byte) from L2, and the grouped tile order below keeps those
re-reads in L2 rather than HBM. F.linear + relu moves D twice more (relu reads and rewrites
it): 268 MB, ~63 us at copy speed, ~4% of the GEMM, which the fused epilogue saves.

Registered as a `torch.library.triton_op` (ex12_triton::matmul_act) so torch.compile sees the
kernel (no graph break, no opaque call).
"""
import torch
import triton
import triton.language as tl
from torch.library import triton_op, wrap_triton

ACTS = {"none": 0, "relu": 1, "gelu_tanh": 2}
BLOCK_K = 64  # every GPU config uses the same BLOCK_K, so EVEN_K is known before tuning
TUNE_FROM = 1 << 30  # autotune from M * N * K = 1024^3 on (about 2 GFLOP, ~3 us on an H200)


def _configs():
    """A small, honest list: the shapes that do well for 16-bit GEMMs on Hopper/Ampere.

    128 x 256 with 8 warps (two warpgroups) is the usual Hopper winner at large sizes, with 3
    or 4 pipeline stages: each stage of a 128 x 256 x 64 bf16 tile holds 48 KB of A and B, so 4
    stages (192 KB) still fit in the H100/H200's 227 KB of shared memory and let the loads run
    one tile further ahead (a config that does not fit is skipped by the autotuner). 128 x 128
    and 64-row tiles cover skinny problems (M = 1, decode-sized) where big tiles leave SMs idle.
    Each is compiled and timed once per distinct (M, N, K): a few seconds at first call.
    """
    out = []
    for bm, bn, stages, warps in [(128, 256, 3, 8), (128, 256, 4, 8), (256, 128, 3, 8),
                                  (256, 128, 4, 8), (128, 128, 4, 8), (128, 128, 4, 4),
                                  (64, 256, 4, 4), (64, 128, 4, 4), (128, 64, 4, 4)]:
        out.append(triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "GROUP_M": 8},
                                 num_stages=stages, num_warps=warps))
    return out


@triton.jit
def _grouped_tile(pid, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
    # Grouped ("super-grouped") tile order: consecutive programs take GROUP_M row-tiles of one
    # column band before moving right, so a band of B (and GROUP_M bands of A) stay in L2 while
    # they are reused, instead of sweeping all of A for every column of tiles.
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_pid_in_group = GROUP_M * num_pid_n
    group_id = pid // num_pid_in_group
    first_pid_m = group_id * GROUP_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_M)
    pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
    pid_n = (pid % num_pid_in_group) // group_size_m
    return pid_m, pid_n


@triton.jit
def _bias_act(acc, bias_ptr, offs_n, stride_bias, N, ACT: tl.constexpr):
    # The fused epilogue, in fp32 registers: bias, then the activation (the caller casts once).
    bias = tl.load(bias_ptr + offs_n * stride_bias, mask=offs_n < N, other=0.0).to(tl.float32)
    acc = acc + bias[None, :]
    if ACT == 1:
        acc = tl.maximum(acc, 0.0)
    elif ACT == 2:
        # gelu_tanh(x) = 0.5 x (1 + tanh(u)) = x * sigmoid(2u) = x / (1 + exp(-2u)),
        # u = sqrt(2/pi) (x + 0.044715 x^3); finite for every x (exp(-2u) = inf gives -0)
        u = 0.7978845608028654 * (acc + 0.044715 * acc * acc * acc)
        acc = acc / (1.0 + tl.exp(-2.0 * u))
    return acc


@triton.jit
def _matmul_act_kernel(a_ptr, b_ptr, bias_ptr, c_ptr,   # A [M, K], B [K, N], bias [N], C [M, N]
                       M, N, K,
                       stride_am, stride_ak,            # any strides: views need no copy
                       stride_bk, stride_bn,
                       stride_cm, stride_cn,
                       stride_bias,
                       ACT: tl.constexpr,               # 0 none, 1 relu, 2 gelu_tanh
                       EVEN_K: tl.constexpr,            # K % BLOCK_K == 0: no K mask needed
                       BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                       GROUP_M: tl.constexpr):
    pid_m, pid_n = _grouped_tile(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)

    # Rows and columns past M / N wrap around (% M): the loads need no mask, the extra rows are
    # computed on valid data and never stored.
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_am = tl.max_contiguous(tl.multiple_of(offs_m % M, BLOCK_M), BLOCK_M)
    offs_bn = tl.max_contiguous(tl.multiple_of(offs_n % N, BLOCK_N), BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    # int64 row offsets: m * stride_am passes 2^31 for A of 16384 x 131072 elements
    a_ptrs = a_ptr + offs_am[:, None].to(tl.int64) * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_k[:, None].to(tl.int64) * stride_bk + offs_bn[None, :] * stride_bn

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)  # fp32: a 16-bit sum loses K's bits
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        if EVEN_K:
            a = tl.load(a_ptrs)
            b = tl.load(b_ptrs)
        else:  # the K tail: columns of A / rows of B past K read as 0 and add nothing
            k_left = K - k * BLOCK_K
            a = tl.load(a_ptrs, mask=offs_k[None, :] < k_left, other=0.0)
            b = tl.load(b_ptrs, mask=offs_k[:, None] < k_left, other=0.0)
        acc = tl.dot(a, b, acc)  # tensor cores, fp32 accumulation
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk

    acc = _bias_act(acc, bias_ptr, offs_n, stride_bias, N, ACT)  # the fused epilogue
    c = acc.to(c_ptr.dtype.element_ty)  # one cast, one store
    c_ptrs = c_ptr + offs_m[:, None].to(tl.int64) * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c_ptrs, c, mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


# On a GPU: tuned per distinct (M, N, K) (and dtype, through the kernel's signature).
_matmul_act_tuned = triton.autotune(configs=_configs(), key=["M", "N", "K"])(_matmul_act_kernel)


@triton.jit
def _matmul_act_tma_kernel(a_desc, b_desc, c_desc,       # TMA descriptors of A, B and C
                           c_ptr,                         # C itself (for its dtype)
                           bias_ptr, stride_bias, M, N, K,
                           ACT: tl.constexpr,
                           BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                           GROUP_M: tl.constexpr):
    # The same tile, order and epilogue as _matmul_act_kernel, but A's and B's tiles come in by
    # the copy engine (TMA): one instruction moves a whole [BLOCK_M, BLOCK_K] box into shared
    # memory, with no address arithmetic in the threads, and reads past M, N or K as zeros (so
    # no masks); C's tile goes out the same way, clipped at M and N.
    pid_m, pid_n = _grouped_tile(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
    off_m = pid_m * BLOCK_M
    off_n = pid_n * BLOCK_N

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        a = a_desc.load([off_m, k * BLOCK_K])
        b = b_desc.load([k * BLOCK_K, off_n])
        acc = tl.dot(a, b, acc)

    acc = _bias_act(acc, bias_ptr, off_n + tl.arange(0, BLOCK_N), stride_bias, N, ACT)
    c_desc.store([off_m, off_n], acc.to(c_ptr.dtype.element_ty))


# The TMA kernel's one config (128 x 256 x 64, 3 stages, 8 warps, GROUP_M 8): the fastest of 27
# tried at 8192^3 bf16 on an H100 (2026-11-25, by the experiment 12_triton_variants.py: git
# history, removed in commit 3e7a589; docs/performance.md says how to read it):
# 1548 us (98.9% of torch.addmm there, 1.07x F.linear + relu) against 1689 us for the pointer
# kernel with the same config and 1768 us for the autotuned pointer kernel.
TMA_CONFIG = dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, GROUP_M=8, num_stages=3, num_warps=8)


def _tma_ok(A, B) -> bool:
    """Can the TMA kernel take these (Hopper or newer; rows contiguous, and the base pointers and
    row strides of A, B and the new C multiples of 16 bytes, as TMA boxes need)?"""
    if not (A.is_cuda and torch.cuda.get_device_capability(A.device)[0] >= 9):
        return False
    es = A.element_size()
    N = B.shape[1]
    return (A.stride(1) == 1 and B.stride(1) == 1 and A.data_ptr() % 16 == 0
            and B.data_ptr() % 16 == 0 and (A.stride(0) * es) % 16 == 0
            and (B.stride(0) * es) % 16 == 0 and (N * es) % 16 == 0)


def _matmul_act_tma(A, B, bias, act):
    from triton.tools.tensor_descriptor import TensorDescriptor
    M, K = A.shape
    N = B.shape[1]
    C = torch.empty((M, N), dtype=A.dtype, device=A.device)
    c = TMA_CONFIG
    a_desc = TensorDescriptor.from_tensor(A, [c["BLOCK_M"], c["BLOCK_K"]])
    b_desc = TensorDescriptor.from_tensor(B, [c["BLOCK_K"], c["BLOCK_N"]])
    c_desc = TensorDescriptor.from_tensor(C, [c["BLOCK_M"], c["BLOCK_N"]])
    grid = (triton.cdiv(M, c["BLOCK_M"]) * triton.cdiv(N, c["BLOCK_N"]),)
    _matmul_act_tma_kernel[grid](a_desc, b_desc, c_desc, C, bias, bias.stride(0), M, N, K,
                                 ACT=ACTS[act], **c)
    return C


def _check(A, B, bias, act):
    if act not in ACTS:
        raise ValueError(f"act must be one of {tuple(ACTS)}, got {act!r}")
    for name, t, dims in (("A", A, 2), ("B", B, 2), ("bias", bias, 1)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a tensor, got {type(t).__name__}")
        if t.dim() != dims:
            raise ValueError(f"{name} must be {dims}-D, got shape {tuple(t.shape)}")
    if A.dtype not in (torch.bfloat16, torch.float16):
        raise TypeError(f"A must be bfloat16 or float16 (tensor cores with fp32 accumulation), "
                        f"got {A.dtype}")
    if B.shape[0] != A.shape[1]:
        raise ValueError(f"B must have A.shape[1] = {A.shape[1]} rows (B is [K, N]), got shape "
                         f"{tuple(B.shape)}")
    if bias.shape[0] != B.shape[1]:
        raise ValueError(f"bias must have shape [{B.shape[1]}] (B's columns), got "
                         f"{tuple(bias.shape)}")
    for name, t in (("B", B), ("bias", bias)):
        if t.dtype != A.dtype:
            raise TypeError(f"{name} must have A's dtype {A.dtype}, got {t.dtype}")
        if t.device != A.device:
            raise ValueError(f"{name} must be on A's device {A.device}, got {t.device}")


@triton_op("ex12_triton::matmul_act", mutates_args=())
def matmul_act_op(A: torch.Tensor, B: torch.Tensor, bias: torch.Tensor, act: str) -> torch.Tensor:
    _check(A, B, bias, act)
    M, K = A.shape
    N = B.shape[1]
    C = torch.empty((M, N), dtype=A.dtype, device=A.device)
    if M == 0 or N == 0:
        return C
    if K == 0:
        raise ValueError("A: K = A.shape[1] = 0 (an empty sum) is not supported")
    args = (A, B, bias, C, M, N, K, A.stride(0), A.stride(1), B.stride(0), B.stride(1),
            C.stride(0), C.stride(1), bias.stride(0))
    if A.is_cuda and M * N * K >= TUNE_FROM:
        grid = lambda meta: (triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"]),)
        wrap_triton(_matmul_act_tuned)[grid](*args, ACT=ACTS[act], EVEN_K=K % BLOCK_K == 0,
                                             BLOCK_K=BLOCK_K)
    elif A.is_cuda:
        # small problems (a few microseconds): one config; tuning them would cost more than it
        # could save, and every new shape would be tuned again
        grid = (triton.cdiv(M, 64) * triton.cdiv(N, 64),)
        wrap_triton(_matmul_act_kernel)[grid](*args, ACT=ACTS[act], EVEN_K=K % BLOCK_K == 0,
                                              BLOCK_M=64, BLOCK_N=64, BLOCK_K=BLOCK_K, GROUP_M=8,
                                              num_warps=4, num_stages=3)
    else:
        # Triton's CPU interpreter: one small fixed config (autotuning would time every config
        # on the interpreter, for nothing)
        bm, bn, bk = 32, 32, 16
        grid = (triton.cdiv(M, bm) * triton.cdiv(N, bn),)
        wrap_triton(_matmul_act_kernel)[grid](*args, ACT=ACTS[act], EVEN_K=K % bk == 0,
                                              BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=4)
    return C


def matmul_act(A: torch.Tensor, B: torch.Tensor, bias: torch.Tensor, act: str = "none"):
    """act(A @ B + bias): A [M, K], B [K, N], bias [N], bf16 or fp16; fp32 accumulation.

    Two doors, as in 06. Under torch.compile: the registered op (Inductor sees its pointer
    kernel; no graph break). In eager mode, for big GEMMs whose rows TMA can take: the TMA
    kernel, launched directly (a TMA descriptor is a host object that the registered op's
    fake-tensor and tracing paths would have to build too: not attempted here)."""
    if not torch.compiler.is_compiling() and A.is_cuda:
        _check(A, B, bias, act)
        M, K = A.shape
        N = B.shape[1]
        if M * N * K >= TUNE_FROM and _tma_ok(A, B):
            return _matmul_act_tma(A, B, bias, act)
    return matmul_act_op(A, B, bias, act)
