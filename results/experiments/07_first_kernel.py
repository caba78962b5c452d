"""Exercise 07 (layernorm): time a sound first CUDA implementation, the solution and the
baselines at the graded case, (32768, 4096) bf16 (GPU only; ~1 min from the repo root,
--sweep-constants ~3 min more on a 16-core host: the variants build in parallel, ~40 s, then
each is timed in a process of its own, ~12 s each).

    python results/experiments/07_first_kernel.py [--sweep-constants]

"first" is what a learner writes first, built with nvcc alone (no ATen: 1-2 s) and called
through ctypes: one 256-thread block per row with 2-byte loads and the statistics in two passes
over global memory (mean, then the squared deviations, then y: x read three times, the later
reads mostly from L1/L2); backward one block per row for dx and a second kernel for dw/db
(column tiles x row chunks, fp32 partials, a small reduce), which reads x and dy again.

Prints, per implementation: forward, forward+backward and backward-alone times (median of
triton.testing.do_bench, L2 flushed), and each as a fraction of the copy bandwidth measured in
the same run, by the bytes of reference.traffic (backward: 805.6 MB); the largest difference
from F.layer_norm of y and of dx, dw, db (the same dy). These set the thresholds in
exercises/07_layernorm/exercise.toml (pass: near "first"; full: near the solution).

--sweep-constants also builds the solution with other values of the constants at the top of
solutions/07_layernorm/cuda/layernorm_kernels.cu (CONSTANTS below: the forward as a block per
row, Welford, persistent, the first solution's shape; the backward without prefetch, with its
dw/db sums in global memory, with other block shapes) and prints the same rows, one per variant.
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
    xg, wg, bg = (t.detach().clone().requires_grad_() for t in (x, w, b))
    ref.native(xg, wg, bg, eps).backward(dy)
    want_grads = [t.grad.float() for t in (xg, wg, bg)]
    out = []
    for name, fn in impls.items():
        try:
            err = (fn(x, w, b, eps).float() - want).abs().max().item()
            f = bench(lambda: fn(x, w, b, eps))
            xg, wg, bg = (t.detach().clone().requires_grad_() for t in (x, w, b))
            fb = bench(lambda: fn(xg, wg, bg, eps).backward(dy))
            bw = backward_ops[name](x, w, b, dy) if name in backward_ops else fb - f
            ideal = lambda nbytes, us: nbytes / us / 1e3 / gbs
            xg, wg, bg = (t.detach().clone().requires_grad_() for t in (x, w, b))
            fn(xg, wg, bg, eps).backward(dy)
            grad_err = {f"max_err_{n}": (t.grad.float() - e).abs().max().item()
                        for n, t, e in zip(("dx", "dw", "db"), (xg, wg, bg), want_grads)}
            out.append({"impl": name, "fwd_us": round(f, 1), "fwd_of_copy": round(ideal(fwd_b, f), 3),
                        "fwdbwd_us": round(fb, 1), "fwdbwd_of_copy": round(ideal(all_b, fb), 3),
                        "bwd_us": round(bw, 1), "bwd_of_copy": round(ideal(bwd_b, bw), 3),
                        "bwd_timed": name in backward_ops, "max_err_vs_native": err, **grad_err})
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


KERNELS = "layernorm_kernels.cu"


def const(name: str, old, new) -> tuple[str, str]:
    """An edit of one constant's line at the top of the solution's kernels file."""
    kind = "bool" if isinstance(old, bool) else "int"
    text = lambda v: str(v).lower() if kind == "bool" else str(v)
    return (f"constexpr {kind} {name} = {text(old)};", f"constexpr {kind} {name} = {text(new)};")


# The solution's defaults (2026-11-23): forward a warp per row (kFwdWarpRows = 4 rows per block,
# 16 vectors per lane), statistics in two passes over registers, not persistent; backward
# persistent with 128-thread blocks (kBwdVecsPerThread = 4), kBwdBlocksPerSM = 4, the next row
# prefetched, w in registers, dw/db sums in shared memory. Each variant changes one or a few of
# these (ptxas register counts of the bf16 kernels, CUDA 13.0, sm_90, in the comments).
CONSTANTS = {
    # forward: Welford/Chan merges (a division per shuffle step) instead of the two-pass sums
    "fwd_welford": [const("kFwdWelford", False, True)],
    # forward: a block per row, 128 threads x 4 vectors (68 registers: 7 rows per SM; 4 barriers)
    "fwd_block_k4": [const("kFwdWarpRows", 4, 0)],
    # forward: a block per row, 64 threads x 8 vectors (2 warps per barrier; 64 registers)
    "fwd_block_k8": [const("kFwdWarpRows", 4, 0), const("kFwdVecsPerThread", 4, 8)],
    # forward: a warp per row, persistent with the next row prefetched (2x the x registers)
    "fwd_warp_persistent": [const("kFwdPersistent", False, True)],
    # forward as first solved: 512 threads x 1 vector, Welford, persistent (248.5 us then)
    "fwd_as_first": [const("kFwdWarpRows", 4, 0), const("kFwdVecsPerThread", 4, 1),
                     const("kFwdWelford", False, True), const("kFwdPersistent", False, True)],
    # backward: no prefetch, up to 6 blocks per SM (shared memory allows 6 at N = 4096; ptxas
    # still takes 128 registers, so 4 fit: this measures the prefetch at the same occupancy)
    "bwd_no_prefetch": [const("kBwdPrefetch", True, False), const("kBwdBlocksPerSM", 4, 6)],
    # backward: dw/db sums read-modified-written in the partial rows (L1/L2), not shared memory
    "bwd_global_sums": [const("kBwdDwDbShared", True, False)],
    # backward: w read per row from L1 instead of kept in registers
    "bwd_w_from_l1": [const("kBwdCacheW", True, False)],
    # backward: 256 threads x 2 vectors (106 registers: 2 blocks per SM)
    "bwd_k2": [const("kBwdVecsPerThread", 4, 2)],
    # backward: 2 blocks per SM (half the partial rows: ~9 MB less to write and read back)
    "bwd_bps2": [const("kBwdBlocksPerSM", 4, 2)],
    # backward in the first solution's shape: 512 threads x 1 vector, 2 blocks per SM (64
    # registers; the first solution's kernel had 98: 1 block)
    "bwd_as_first": [const("kBwdVecsPerThread", 4, 1), const("kBwdBlocksPerSM", 4, 2)],
    # both: "evict first" cache hints on the streams of rows (x, dy loads; y, dx stores)
    "stream_hints": [const("kStreamHints", False, True)],
}


def variant_tree(name: str, edits) -> Path:
    """A copy of the solution's track with `edits` applied to its kernels file."""
    tree = Path(tempfile.mkdtemp(prefix=f"ex07-{name}-"))
    dst = tree / "07_layernorm" / "cuda"
    shutil.copytree(ROOT / "solutions" / "07_layernorm" / "cuda", dst)
    cu = dst / KERNELS
    text = cu.read_text()
    for a, b in edits:
        assert text.count(a) == 1, (name, a)
        text = text.replace(a, b)
    cu.write_text(text)
    return tree


def sweep():
    """Each variant: the solution with some constants changed. All are built first, in parallel
    (each build is mostly one compiler process), then each is timed alone in a fresh process
    (the ops of one namespace cannot be registered twice in one process)."""
    from grader.build import CACHE, tree_tag
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MAX_JOBS": "2"}
    trees = {name: variant_tree(name, edits) for name, edits in CONSTANTS.items()}
    builds = {}
    for name, tree in trees.items():
        log = open(tree / "build.log", "w")
        builds[name] = subprocess.Popen([sys.executable, __file__, "--build", str(tree)], env=env,
                                        stdout=log, stderr=subprocess.STDOUT)
    failed = {}
    for name, p in builds.items():
        if p.wait() != 0:
            failed[name] = (trees[name] / "build.log").read_text()[-600:]
    for name, tree in trees.items():
        if name in failed:
            print(f"{name}: build failed: {failed[name]}", flush=True)
        else:
            out = subprocess.run([sys.executable, __file__, "--child", str(tree)],
                                 capture_output=True, text=True, env=env)
            lines = [l for l in out.stdout.splitlines() if l.startswith("{")]
            print(f"{name}: {lines[-1] if lines else out.stderr[-400:]}", flush=True)
        shutil.rmtree(tree, ignore_errors=True)
        shutil.rmtree(CACHE / "build" / tree_tag(tree), ignore_errors=True)


def build_only(tree: Path):
    from grader.build import build
    from grader.discover import EXERCISES, load_exercise
    ex = load_exercise(EXERCISES / "07_layernorm")
    build(tree, ex, ex.tracks["cuda"])


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
    elif len(sys.argv) > 2 and sys.argv[1] == "--build":
        build_only(Path(sys.argv[2]))
    else:
        main()
