"""Exercise 07 (layernorm): time a sound first CUDA implementation, the solution and the
baselines at the graded case, (32768, 4096) bf16 (GPU only; ~1-1.5 min from the repo root,
--sweep-constants ~30 s more per variant).

    python results/experiments/07_first_kernel.py [--sweep-constants]

"first" is what a learner writes first, built with nvcc alone (no ATen: 1-2 s) and called
through ctypes: one 256-thread block per row with 2-byte loads and the statistics in two passes
over global memory (mean, then the squared deviations, then y: x read three times, the later
reads mostly from L1/L2); backward one block per row for dx and a second kernel for dw/db
(column tiles x row chunks, fp32 partials, a small reduce), which reads x and dy again.

Prints, per implementation: forward, forward+backward and backward-alone times (median of
triton.testing.do_bench, L2 flushed), and each as a fraction of the copy bandwidth measured in
the same run, by the bytes of reference.traffic (backward: 805.6 MB). These set the thresholds
in exercises/07_layernorm/exercise.toml (pass: near "first"; full: near the solution).

--sweep-constants also builds the solution with other kFwdPersistent / kFwdVecsPerThread /
kBwdVecsPerThread / kBwdBlocksPerSM and register caps (__launch_bounds__) for the forward and
the backward (8 variants, each in a process of its own: ~20 s a build) and prints the same rows.
"""
import ctypes
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
import triton.testing  # noqa: E402

M, N, EPS = 32768, 4096, 1e-5

FIRST_CU = r"""
#include <cuda_bf16.h>
#include <cuda_runtime.h>
typedef __nv_bfloat16 bf16;
__device__ float block_sum(float v, float* sh) {      // blockDim 256
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  __syncthreads();
  if ((threadIdx.x & 31) == 0) sh[threadIdx.x >> 5] = v;
  __syncthreads();
  float t = 0;
  for (int i = 0; i < (int)(blockDim.x >> 5); ++i) t += sh[i];
  return t;
}
__global__ void fwd(const bf16* x, const bf16* w, const bf16* b, bf16* y, float* mean, float* rstd,
                    int n, float eps) {
  __shared__ float sh[32];
  const bf16* xr = x + (long long)blockIdx.x * n;
  bf16* yr = y + (long long)blockIdx.x * n;
  float s = 0;
  for (int i = threadIdx.x; i < n; i += blockDim.x) s += __bfloat162float(xr[i]);
  const float mu = block_sum(s, sh) / n;
  float v = 0;
  for (int i = threadIdx.x; i < n; i += blockDim.x) { float d = __bfloat162float(xr[i]) - mu; v += d * d; }
  const float r = rsqrtf(block_sum(v, sh) / n + eps);
  if (threadIdx.x == 0) { mean[blockIdx.x] = mu; rstd[blockIdx.x] = r; }
  for (int i = threadIdx.x; i < n; i += blockDim.x)
    yr[i] = __float2bfloat16((__bfloat162float(xr[i]) - mu) * r * __bfloat162float(w[i]) + __bfloat162float(b[i]));
}
__global__ void bwd_dx(const bf16* dy, const bf16* x, const bf16* w, const float* mean, const float* rstd,
                       bf16* dx, int n) {
  __shared__ float sh[32];
  const long long o = (long long)blockIdx.x * n;
  const float mu = mean[blockIdx.x], r = rstd[blockIdx.x];
  float s1 = 0, s2 = 0;
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    const float g = __bfloat162float(dy[o + i]) * __bfloat162float(w[i]);
    s1 += g; s2 += g * (__bfloat162float(x[o + i]) - mu) * r;
  }
  s1 = block_sum(s1, sh) / n; s2 = block_sum(s2, sh) / n;
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    const float g = __bfloat162float(dy[o + i]) * __bfloat162float(w[i]);
    const float xh = (__bfloat162float(x[o + i]) - mu) * r;
    dx[o + i] = __float2bfloat16(r * (g - s1 - xh * s2));
  }
}
// grid (n / 256, chunks): thread = column, loops over its chunk of rows; fp32 partials [chunks, n]
__global__ void bwd_dwdb(const bf16* dy, const bf16* x, const float* mean, const float* rstd,
                         float* pw, float* pb, int m, int n, int rows_per_chunk) {
  const int col = blockIdx.x * blockDim.x + threadIdx.x;
  if (col >= n) return;
  const int r0 = blockIdx.y * rows_per_chunk, r1 = min(m, r0 + rows_per_chunk);
  float sw = 0, sb = 0;
  for (int r = r0; r < r1; ++r) {
    const float d = __bfloat162float(dy[(long long)r * n + col]);
    sw += d * (__bfloat162float(x[(long long)r * n + col]) - mean[r]) * rstd[r];
    sb += d;
  }
  pw[(long long)blockIdx.y * n + col] = sw; pb[(long long)blockIdx.y * n + col] = sb;
}
__global__ void reduce(const float* pw, const float* pb, bf16* dw, bf16* db, int chunks, int n) {
  const int col = blockIdx.x * blockDim.x + threadIdx.x;
  if (col >= n) return;
  float sw = 0, sb = 0;
  for (int c = 0; c < chunks; ++c) { sw += pw[(long long)c * n + col]; sb += pb[(long long)c * n + col]; }
  dw[col] = __float2bfloat16(sw); db[col] = __float2bfloat16(sb);
}
extern "C" {
void first_fwd(const void* x, const void* w, const void* b, void* y, float* mean, float* rstd, int m, int n,
               float eps, cudaStream_t s) {
  fwd<<<m, 256, 0, s>>>((const bf16*)x, (const bf16*)w, (const bf16*)b, (bf16*)y, mean, rstd, n, eps);
}
void first_bwd(const void* dy, const void* x, const void* w, const float* mean, const float* rstd, void* dx,
               void* dw, void* db, float* pw, float* pb, int chunks, int m, int n, cudaStream_t s) {
  bwd_dx<<<m, 256, 0, s>>>((const bf16*)dy, (const bf16*)x, (const bf16*)w, mean, rstd, (bf16*)dx, n);
  bwd_dwdb<<<dim3((n + 255) / 256, chunks), 256, 0, s>>>((const bf16*)dy, (const bf16*)x, mean, rstd, pw,
                                                         pb, m, n, (m + chunks - 1) / chunks);
  reduce<<<(n + 255) / 256, 256, 0, s>>>(pw, pb, (bf16*)dw, (bf16*)db, chunks, n);
}
}
"""


def build_first(tmp: Path):
    src, lib = tmp / "first.cu", tmp / "first.so"
    src.write_text(FIRST_CU)
    subprocess.run(["nvcc", "-O3", "-arch=sm_90", "-shared", "-Xcompiler", "-fPIC", str(src),
                    "-o", str(lib)], check=True)
    return ctypes.CDLL(str(lib))


class First(torch.autograd.Function):
    """The first implementation as an autograd function (ctypes calls on the current stream)."""
    lib = None
    chunks = 256

    @staticmethod
    def forward(ctx, x, w, b, eps):
        y = torch.empty_like(x)
        mean = torch.empty(x.shape[0], device=x.device)
        rstd = torch.empty_like(mean)
        s = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
        First.lib.first_fwd(*(ctypes.c_void_p(t.data_ptr()) for t in (x, w, b, y, mean, rstd)),
                            ctypes.c_int(x.shape[0]), ctypes.c_int(x.shape[1]),
                            ctypes.c_float(eps), s)
        ctx.save_for_backward(x, w, mean, rstd)
        return y

    @staticmethod
    def backward(ctx, dy):
        x, w, mean, rstd = ctx.saved_tensors
        dy = dy.contiguous()
        dx, dw, db = torch.empty_like(x), torch.empty_like(w), torch.empty_like(w)
        pw = torch.empty(First.chunks, x.shape[1], device=x.device)
        pb = torch.empty_like(pw)
        s = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
        First.lib.first_bwd(*(ctypes.c_void_p(t.data_ptr()) for t in
                              (dy, x, w, mean, rstd, dx, dw, db, pw, pb)),
                            ctypes.c_int(First.chunks), ctypes.c_int(x.shape[0]),
                            ctypes.c_int(x.shape[1]), s)
        return dx, dw, db, None


def load_solution(tree: Path):
    """Build the track of `tree` (the grader's build: compiler and include paths) and import
    its layernorm.py; returns the module."""
    from grader.build import build
    from grader.discover import EXERCISES, load_exercise
    ex = load_exercise(EXERCISES / "07_layernorm")
    build(tree, ex, ex.tracks["cuda"])  # loads the library: registers torch.ops.ex07_cuda
    path = tree / "07_layernorm" / "cuda" / "layernorm.py"
    spec = importlib.util.spec_from_file_location("ex07_solution", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def bench(fn):
    return triton.testing.do_bench(fn, warmup=50, rep=200, return_mode="median") * 1e3  # us


def copy_gbs() -> float:
    a = torch.empty(1 << 30, dtype=torch.bfloat16, device="cuda").normal_()
    b = torch.empty_like(a)
    us = bench(lambda: b.copy_(a))
    del a, b
    return 2 * 2 * (1 << 30) / us / 1e3


def rows(impls: dict, backward_ops: dict, gbs: float) -> list:
    sys.path.insert(0, str(ROOT / "exercises" / "07_layernorm"))
    import reference as ref
    case = {"M": M, "N": N}
    fwd_b = ref.traffic(case, torch.bfloat16, "forward")["bytes"]
    all_b = ref.traffic(case, torch.bfloat16, "forward_backward")["bytes"]
    bwd_b = all_b - fwd_b
    g = torch.Generator(device="cuda").manual_seed(0)
    x, w, b, eps = ref.bench_inputs(case, torch.bfloat16, "cuda", g)
    dy = torch.randn_like(x)
    want = ref.native(x, w, b, eps).float()
    out = []
    for name, fn in impls.items():
        try:
            err = (fn(x, w, b, eps).float() - want).abs().max().item()
            f = bench(lambda: fn(x, w, b, eps))
            xg, wg, bg = (t.detach().clone().requires_grad_() for t in (x, w, b))
            fb = bench(lambda: fn(xg, wg, bg, eps).backward(dy))
            bw = backward_ops[name](x, w, b, dy) if name in backward_ops else fb - f
            ideal = lambda nbytes, us: nbytes / us / 1e3 / gbs
            out.append({"impl": name, "fwd_us": round(f, 1), "fwd_of_copy": round(ideal(fwd_b, f), 3),
                        "fwdbwd_us": round(fb, 1), "fwdbwd_of_copy": round(ideal(all_b, fb), 3),
                        "bwd_us": round(bw, 1), "bwd_of_copy": round(ideal(bwd_b, bw), 3),
                        "bwd_timed": name in backward_ops, "max_err_vs_native": err})
        except Exception as e:  # a missing peer (liger) or a failed build: report, go on
            out.append({"impl": name, "error": f"{type(e).__name__}: {str(e)[:200]}"})
    return out


def main():
    assert torch.cuda.is_available(), "needs a GPU"
    sys.path.insert(0, str(ROOT / "exercises" / "07_layernorm"))
    import reference as ref
    gbs = copy_gbs()
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}; copy {gbs:.0f} GB/s; "
          f"(M, N) = ({M}, {N}) bf16", flush=True)
    tmp = Path(tempfile.mkdtemp(prefix="ex07-"))
    First.lib = build_first(tmp)
    first = lambda x, w, b, eps: First.apply(x, w, b, eps)
    impls = {"first": first}
    backward_ops = {}
    try:
        sol = load_solution(ROOT / "solutions")
        impls["solution"] = sol.layernorm
        bwd_op = torch.ops.ex07_cuda.layernorm_bwd

        def sol_bwd(x, w, b, dy):
            _, mean, rstd = torch.ops.ex07_cuda.layernorm_fwd(x, w, b, EPS)
            return bench(lambda: bwd_op(dy, x, w, mean, rstd, [True, True, True]))
        backward_ops["solution"] = sol_bwd

        def sol_bwd_dx(x, w, b, dy):  # only dx (frozen w, b): no partials
            _, mean, rstd = torch.ops.ex07_cuda.layernorm_fwd(x, w, b, EPS)
            return bench(lambda: bwd_op(dy, x, w, mean, rstd, [True, False, False]))
    except Exception as e:
        print(f"# solution: {type(e).__name__}: {e}")
        sol_bwd_dx = None
    impls.update({"native": ref.native, "compile": torch.compile(ref.reference, dynamic=False),
                  "eager": ref.reference, "liger": ref.liger})
    for r in rows(impls, backward_ops, gbs):
        print(json.dumps(r), flush=True)
    if sol_bwd_dx is not None:
        g = torch.Generator(device="cuda").manual_seed(0)
        x, w, b, _ = ref.bench_inputs({"M": M, "N": N}, torch.bfloat16, "cuda", g)
        print(json.dumps({"impl": "solution backward, dx only", "bwd_us":
                          round(sol_bwd_dx(x, w, b, torch.randn_like(x)), 1)}), flush=True)
    shutil.rmtree(tmp, ignore_errors=True)
    if "--sweep-constants" in sys.argv:
        sweep()


CONSTANTS = {
    # the solution's forward is one block per row since 2026-11-22 (persistent: 248.5 us, H200)
    "fwd_persistent": [("constexpr bool kFwdPersistent = false;", "constexpr bool kFwdPersistent = true;")],
    "fwd_vpt2": [("constexpr int kFwdVecsPerThread = 1;", "constexpr int kFwdVecsPerThread = 2;")],
    "bwd_vpt2": [("constexpr int kBwdVecsPerThread = 1;", "constexpr int kBwdVecsPerThread = 2;")],
    "bwd_bps1": [("constexpr int kBwdBlocksPerSM = 2;", "constexpr int kBwdBlocksPerSM = 1;")],
    "bwd_bps4": [("constexpr int kBwdBlocksPerSM = 2;", "constexpr int kBwdBlocksPerSM = 4;")],
    # ptxas (CUDA 13.0, sm_90): the bf16 backward with dx and dw/db uses 98 registers, so only
    # one 512-thread block fits an SM (16 warps). Capped at 64 (2 blocks, 32 warps) it spills
    # ~150 bytes per thread: which wins is this row.
    "bwd_launch_bounds_2": [(
        "template <typename T, int VEC, int K, bool kDx, bool kDwDb>\n"
        "__global__ void __launch_bounds__(kMaxThreads)",
        "template <typename T, int VEC, int K, bool kDx, bool kDwDb>\n"
        "__global__ void __launch_bounds__(kMaxThreads, 2)")],
    # the bf16 forward uses 52 registers: 2 blocks of 512 threads per SM. Capped at 32 (4
    # blocks) it spills ~90 bytes per thread; capped at 40 (3 blocks) less
    "fwd_launch_bounds_4": [(
        "template <typename T, int VEC, int K>\n__global__ void __launch_bounds__(kMaxThreads)",
        "template <typename T, int VEC, int K>\n__global__ void __launch_bounds__(kMaxThreads, 4)")],
    "fwd_launch_bounds_3": [(
        "template <typename T, int VEC, int K>\n__global__ void __launch_bounds__(kMaxThreads)",
        "template <typename T, int VEC, int K>\n__global__ void __launch_bounds__(kMaxThreads, 3)")],
}


def sweep():
    """Each variant: the solution with one constant changed, built and timed in a fresh process
    (the ops of one namespace cannot be registered twice in one process)."""
    for name, edits in CONSTANTS.items():
        tree = Path(tempfile.mkdtemp(prefix=f"ex07-{name}-"))
        dst = tree / "07_layernorm" / "cuda"
        shutil.copytree(ROOT / "solutions" / "07_layernorm" / "cuda", dst)
        cu = dst / "layernorm_kernels.cu"
        text = cu.read_text()
        for a, b in edits:
            assert a in text, (name, a)
            text = text.replace(a, b)
        cu.write_text(text)
        out = subprocess.run([sys.executable, __file__, "--child", str(tree)], capture_output=True,
                             text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
        lines = [l for l in out.stdout.splitlines() if l.startswith("{")]
        print(f"{name}: {lines[-1] if lines else out.stderr[-400:]}", flush=True)
        shutil.rmtree(tree, ignore_errors=True)


def child(tree: Path):
    sys.path.insert(0, str(ROOT / "exercises" / "07_layernorm"))
    sol = load_solution(tree)
    bwd_op = torch.ops.ex07_cuda.layernorm_bwd

    def sol_bwd(x, w, b, dy):
        _, mean, rstd = torch.ops.ex07_cuda.layernorm_fwd(x, w, b, EPS)
        return bench(lambda: bwd_op(dy, x, w, mean, rstd, [True, True, True]))
    for r in rows({"solution": sol.layernorm}, {"solution": sol_bwd}, copy_gbs()):
        print(json.dumps(r), flush=True)


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        child(Path(sys.argv[2]))
    else:
        main()
