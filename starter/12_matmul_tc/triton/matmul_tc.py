"""Exercise 12 — matmul_tc, Triton track: act(A @ B + bias) on tensor cores.

    matmul_act(A [M, K], B [K, N], bias [N], act) -> [M, N], act in "none", "relu", "gelu_tanh"

Each program computes one BLOCK_M x BLOCK_N tile of the output: it walks K in steps of BLOCK_K,
multiplying tiles of A and B with `tl.dot` (tensor cores) into an fp32 accumulator, then adds
the bias, applies the activation and casts, in registers, before its one store. Read the
README first (the flops, the bytes, the tile order, the hints).

What is given: the argument checks, the registration as a torch.library.triton_op (so
torch.compile sees the kernel), the launcher, and the kernel's signature. What is missing is
marked TODO, with roughly how many lines it takes.
"""
import torch
import triton
import triton.language as tl
from torch.library import triton_op, wrap_triton

ACTS = {"none": 0, "relu": 1, "gelu_tanh": 2}
BLOCK_K = 64  # every GPU config uses the same BLOCK_K, so EVEN_K is known before tuning
TUNE_FROM = 1 << 30  # autotune from M * N * K = 1024^3 on (about 2 GFLOP, ~3 us on an H200)


def _configs():
    """The configurations triton.autotune times, once per distinct (M, N, K).

    TODO (step 4, ~8 lines): a small, honest list (5-8 configs) of BLOCK_M x BLOCK_N tiles,
    GROUP_M, num_stages and num_warps: large tiles for large problems, smaller ones for skinny
    ones. Each config costs compile time at the first call: do not list 50.
    """
    return [triton.Config({"BLOCK_M": 64, "BLOCK_N": 64, "GROUP_M": 8}, num_stages=3,
                          num_warps=4)]


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
    # TODO (step 1, ~15 lines): which tile this program computes (start with
    # pid_m = pid // num_pid_n, pid_n = pid % num_pid_n), the row / column / k offsets, the
    # pointers to the first A and B tiles (int64 row offsets), and the K loop: load a tile of
    # A and of B (masking the K tail unless EVEN_K: what must a masked element read as?),
    # accumulate with tl.dot into an fp32 accumulator, advance the pointers.
    #
    # TODO (step 2, ~8 lines): the epilogue, in fp32: + bias (one value per column), the
    # activation (relu; gelu_tanh = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))), then
    # cast to c_ptr.dtype.element_ty and store with a mask for the last row and column tiles.
    #
    # TODO (step 3, ~8 lines): the grouped tile order: replace the row-major pid -> (pid_m,
    # pid_n) mapping so that consecutive programs share tiles of B (README: "tile order").
    pass


# On a GPU: tuned per distinct (M, N, K) (and dtype, through the kernel's signature).
_matmul_act_tuned = triton.autotune(configs=_configs(), key=["M", "N", "K"])(_matmul_act_kernel)


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
    # TODO: delete this line once the kernel computes something (step 1).
    raise NotImplementedError("matmul_act: not implemented yet (triton/matmul_tc.py, step 1)")
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
    """act(A @ B + bias): A [M, K], B [K, N], bias [N], bf16 or fp16; fp32 accumulation."""
    return matmul_act_op(A, B, bias, act)
