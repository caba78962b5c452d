"""Exercise 12 (matmul_tc): a sound first kernel, the solutions and the baselines, timed (GPU only).

    python results/experiments/12_first_kernel.py              # Triton + baselines, < 60 s
    python results/experiments/12_first_kernel.py --cutlass    # + the CUTLASS solution (builds
                                                               #   it first: minutes, timed)
    python results/experiments/12_first_kernel.py --sweep      # + 4096^3 and the LLM shapes

Prints TFLOP/s and the fraction of cuBLAS (torch.addmm, no activation) measured in the same run,
for bf16 act = relu. The thresholds in exercises/12_matmul_tc/exercise.toml are set from it:
"first" is what a learner's first working kernel reaches (row-major tile order, one fixed
config, no autotune), the solutions what the full lesson reaches. Two experiment rows time the
Hopper levers the Triton solution does not use yet (TMA descriptors, then TMA with a persistent
grid; same tile, fixed config); a row that fails to compile prints its error and the rest go on.
"""
import importlib.util
import os
import sys
import time
from pathlib import Path

import torch
import triton
import triton.language as tl
from triton.testing import do_bench

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


@triton.jit
def first_kernel(a_ptr, b_ptr, bias_ptr, c_ptr, M, N, K, sam, sak, sbk, sbn, scm, scn,
                 BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    # the first kernel that works: row-major tile order, masks everywhere, fp32 accumulator,
    # fused bias + relu; 128 x 128 x 32 tiles, 4 warps, the default 3 stages
    pid = tl.program_id(0)
    pid_m = pid // tl.cdiv(N, BN)
    pid_n = pid % tl.cdiv(N, BN)
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BK)):
        kk = k * BK + rk
        a = tl.load(a_ptr + rm[:, None] * sam + kk[None, :] * sak,
                    mask=(rm[:, None] < M) & (kk[None, :] < K), other=0.0)
        b = tl.load(b_ptr + kk[:, None] * sbk + rn[None, :] * sbn,
                    mask=(kk[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc)
    acc += tl.load(bias_ptr + rn, mask=rn < N, other=0.0).to(tl.float32)[None, :]
    acc = tl.maximum(acc, 0.0)
    tl.store(c_ptr + rm[:, None] * scm + rn[None, :] * scn, acc.to(c_ptr.dtype.element_ty),
             mask=(rm[:, None] < M) & (rn[None, :] < N))


def first(A, B, bias, act):
    M, K = A.shape
    N = B.shape[1]
    C = torch.empty((M, N), dtype=A.dtype, device=A.device)
    grid = (triton.cdiv(M, 128) * triton.cdiv(N, 128),)
    first_kernel[grid](A, B, bias, C, M, N, K, A.stride(0), A.stride(1), B.stride(0),
                       B.stride(1), C.stride(0), C.stride(1), BM=128, BN=128, BK=32, num_warps=4)
    return C


# --- experiment: TMA descriptors (host-side), one tile per program and persistent ------------
# Not used by the solution yet: measured here first (Hopper levers for the Triton track). The
# descriptors load [BM, BK] / [BK, BN] boxes with the copy engine (out-of-range elements read as
# 0, so the K, M and N tails need no masks) and store the [BM, BN] tile (out-of-range rows and
# columns dropped). 128 x 256 x 64, 8 warps, 3 stages (3 x 48 KB + 64 KB for the stored tile).

@triton.jit
def _tile_of(tile_id, num_pid_m, num_pid_n, GROUP_M: tl.constexpr):
    num_pid_in_group = GROUP_M * num_pid_n
    group_id = tile_id // num_pid_in_group
    first_pid_m = group_id * GROUP_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_M)
    pid_m = first_pid_m + ((tile_id % num_pid_in_group) % group_size_m)
    pid_n = (tile_id % num_pid_in_group) // group_size_m
    return pid_m, pid_n


@triton.jit
def _tma_tile(a_desc, b_desc, c_desc, bias_ptr, N, K, pid_m, pid_n, BM: tl.constexpr,
              BN: tl.constexpr, BK: tl.constexpr):
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BK)):
        a = a_desc.load([pid_m * BM, k * BK])
        b = b_desc.load([k * BK, pid_n * BN])
        acc = tl.dot(a, b, acc)
    rn = pid_n * BN + tl.arange(0, BN)
    acc += tl.load(bias_ptr + rn, mask=rn < N, other=0.0).to(tl.float32)[None, :]
    acc = tl.maximum(acc, 0.0)
    c_desc.store([pid_m * BM, pid_n * BN], acc.to(bias_ptr.dtype.element_ty))


@triton.jit
def tma_kernel(a_desc, b_desc, c_desc, bias_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr,
               BK: tl.constexpr, GROUP_M: tl.constexpr):
    pid_m, pid_n = _tile_of(tl.program_id(0), tl.cdiv(M, BM), tl.cdiv(N, BN), GROUP_M)
    _tma_tile(a_desc, b_desc, c_desc, bias_ptr, N, K, pid_m, pid_n, BM, BN, BK)


@triton.jit
def tma_persistent_kernel(a_desc, b_desc, c_desc, bias_ptr, M, N, K, NUM_PROGRAMS,
                          BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
                          GROUP_M: tl.constexpr):
    num_pid_m = tl.cdiv(M, BM)
    num_pid_n = tl.cdiv(N, BN)
    for tile_id in range(tl.program_id(0), num_pid_m * num_pid_n, NUM_PROGRAMS):
        pid_m, pid_n = _tile_of(tile_id, num_pid_m, num_pid_n, GROUP_M)
        _tma_tile(a_desc, b_desc, c_desc, bias_ptr, N, K, pid_m, pid_n, BM, BN, BK)


def tma(A, B, bias, act, persistent=False, BM=128, BN=256, BK=64, stages=3, warps=8):
    from triton.tools.tensor_descriptor import TensorDescriptor
    M, K = A.shape
    N = B.shape[1]
    C = torch.empty((M, N), dtype=A.dtype, device=A.device)
    a_desc = TensorDescriptor.from_tensor(A, [BM, BK])
    b_desc = TensorDescriptor.from_tensor(B, [BK, BN])
    c_desc = TensorDescriptor.from_tensor(C, [BM, BN])
    tiles = triton.cdiv(M, BM) * triton.cdiv(N, BN)
    opts = dict(BM=BM, BN=BN, BK=BK, GROUP_M=8, num_warps=warps, num_stages=stages)
    if persistent:
        progs = min(tiles, torch.cuda.get_device_properties(A.device).multi_processor_count
                    if A.is_cuda else 4)
        tma_persistent_kernel[(progs,)](a_desc, b_desc, c_desc, bias, M, N, K, progs, **opts)
    else:
        tma_kernel[(tiles,)](a_desc, b_desc, c_desc, bias, M, N, K, **opts)
    return C


def load_file(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def build_cutlass():
    """Build the CUTLASS solution with the flags it needs (sm_90a, CUTLASS's include folders)."""
    import cutlass_library
    from torch.utils import cpp_extension
    from grader.build import CACHE, _toolchain_env
    includes = _toolchain_env()
    src = Path(cutlass_library.source_path)
    folder = ROOT / "solutions" / "12_matmul_tc" / "cutlass"
    out = CACHE / "build" / "experiments" / "12_matmul_tc-cutlass"
    out.mkdir(parents=True, exist_ok=True)
    os.environ["TORCH_CUDA_ARCH_LIST"] = "9.0a"
    start = time.perf_counter()
    cpp_extension.load(name="matmul_tc_cutlass_exp",
                       sources=[str(folder / "matmul_tc_kernels.cu"), str(folder / "matmul_tc.cpp")],
                       build_directory=str(out), extra_cflags=["-O3"],
                       extra_cuda_cflags=["-O3", "-lineinfo"],
                       extra_include_paths=[str(src / "include"), str(src / "tools" / "util" / "include")]
                       + includes, is_python_module=False, verbose=False)
    print(f"CUTLASS build (cold if {out} was empty): {time.perf_counter() - start:.1f} s")
    return load_file(folder / "matmul_tc.py", "ex12_cutlass_solution").matmul_act


def main():
    ref = load_file(ROOT / "exercises" / "12_matmul_tc" / "reference.py", "ex12_reference")
    triton_sol = load_file(ROOT / "solutions" / "12_matmul_tc" / "triton" / "matmul_tc.py",
                           "ex12_triton_solution").matmul_act
    impls = {"first (Triton, row-major, fixed config)": first,
             "solution Triton": triton_sol,
             "experiment: Triton TMA": tma,
             "experiment: Triton TMA persistent": lambda *a: tma(*a, persistent=True)}
    if "--cutlass" in sys.argv:
        impls["solution CUTLASS"] = build_cutlass()
    compiled = torch.compile(ref.reference, dynamic=False)
    baselines = {"addmm (cuBLAS, no act)": ref.addmm, "F.linear + relu": ref.linear_act,
                 "eager (A @ B + bias, relu)": ref.reference, "compile": compiled}
    cases = [(8192, 8192, 8192)]
    if "--sweep" in sys.argv:
        cases += [(4096, 4096, 4096), (16384, 14336, 4096), (16384, 4096, 14336)]
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}")
    for M, N, K in cases:
        gen = torch.Generator(device="cuda").manual_seed(0)
        args = ref.bench_inputs({"M": M, "N": N, "K": K}, torch.bfloat16, "cuda", gen)
        want = ref.reference(*[a.double() if isinstance(a, torch.Tensor) else a for a in args])
        flops = 2 * M * N * K
        rows = []
        for name, fn in {**baselines, **impls}.items():
            try:
                out = fn(*args)
            except Exception as e:  # an experiment that does not compile here: say so, go on
                print(f"{name}: failed: {type(e).__name__}: {str(e).splitlines()[0][:200]}")
                continue
            err = ((out.double() - want).norm() / want.norm()).item()
            ms = do_bench(lambda: fn(*args), warmup=100, rep=500)
            rows.append((name, ms, err))
        cublas = rows[0][1]
        print(f"\nM={M} N={N} K={K} bf16 relu ({flops / 1e12:.2f} TFLOP)")
        print(f"{'':42s} {'us':>9s} {'TFLOP/s':>8s} {'of cuBLAS':>9s} {'rel err':>9s}")
        for name, ms, err in rows:
            print(f"{name:42s} {ms * 1e3:9.1f} {flops / ms / 1e9:8.1f} {cublas / ms:9.1%} "
                  f"{err:9.2e}")
        del args, want


if __name__ == "__main__":
    main()
