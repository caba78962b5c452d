"""Exercise 04 (reduce_sum): a sound first kernel, the solution, torch.sum, and a read ceiling,
side by side at both benchmark cases (GPU only; ~1 minute, most of it one nvcc build).

    python results/experiments/04_first_kernel.py

Builds ONE tree: the solution plus two extra paths chosen at run time by EX04_MODE:
  solution  the two-stage kernel (16-byte loads, 4 accumulators, one partial per block)
  first     a sound first kernel: one element per thread per trip (grid-stride), the same
            shared-memory tree + shuffles, then ONE atomicAdd per block into a zeroed result
  probe     a read-bandwidth probe, not a sum: 16-byte loads of everything, each thread compares
            its values with a sentinel and writes only if one matches (never): the bytes a sum
            must read, no reduction and (almost) no writes. The ceiling the issue asks for.
Prints us, GB/s and fractions of the grader's copy and read ceilings (the graded fraction is of
the read one; the CUDA probe here cross-checks the grader's Triton read kernel), for reduce_sum of 2^28 float32 (graded) and reduce_sum_rows of (32768, 8192) bfloat16,
plus how many distinct results ten calls of each give (the first kernel's atomics vary).
Numbers go into exercise.toml (thresholds) and the README's "Measured".
"""
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EX, TRACK, KERNELS = "04_reduce_sum", "cuda", "reduce_sum_kernels.cu"

EXTRA = r'''
// --- experiment only: a sound first kernel and a read probe (results/experiments/04_*.py) ---
template <typename T>
__global__ void __launch_bounds__(kThreads)
first_kernel(const T* __restrict__ x, int64_t cols, typename Out<T>::type* __restrict__ out) {
  using A = typename Out<T>::type;
  __shared__ A smem[kThreads];
  const T* p = x + static_cast<int64_t>(blockIdx.y) * cols;
  A s = A(0);
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < cols;
       i += static_cast<int64_t>(gridDim.x) * kThreads)
    s += widen(p[i]);
  s = block_reduce_sum(s, smem);
  if (threadIdx.x == 0) atomicAdd(&out[blockIdx.y], s);
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
read_probe_kernel(const T* __restrict__ x, int64_t n, typename Out<T>::type* __restrict__ out) {
  constexpr int kVec = course::kVec16<T>;
  using V = course::Vec<T, kVec>;
  const V* pv = reinterpret_cast<const V*>(x);
  const int64_t nvec = n / kVec, stride = static_cast<int64_t>(gridDim.x) * kThreads;
  bool hit = false;
  int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  for (; i + 3 * stride < nvec; i += 4 * stride) {
    V v[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) v[u] = pv[i + u * stride];
#pragma unroll
    for (int u = 0; u < 4; ++u)
#pragma unroll
      for (int k = 0; k < kVec; ++k) hit |= widen(v[u].v[k]) == 12345.5f;
  }
  for (; i < nvec; i += stride)
#pragma unroll
    for (int k = 0; k < kVec; ++k) hit |= widen(pv[i].v[k]) == 12345.5f;
  if (hit) out[0] = 1;
}

'''

FIRST = r'''  if (rows == 0) return;
  const char* mode_env = std::getenv("EX04_MODE");  // read on every call: the script switches it
  const std::string mode = mode_env ? mode_env : "solution";
  if (mode == "first") {
    CUDA_CHECK(cudaMemsetAsync(out, 0, rows * sizeof(*out), stream));
    const dim3 grid(static_cast<unsigned>(splits), static_cast<unsigned>(rows));
    first_kernel<T><<<grid, kThreads, 0, stream>>>(x, cols, out);
    CUDA_LAUNCH_CHECK();
    return;
  }
  if (mode == "probe") {
    read_probe_kernel<T><<<course::num_sms() * kBlocksPerSm, kThreads, 0, stream>>>(
        x, rows * cols, out);
    CUDA_LAUNCH_CHECK();
    return;
  }
'''

CHILD = r'''
import os, sys, torch
from pathlib import Path
sys.path.insert(0, sys.argv[2])
from grader.discover import load_exercise, EXERCISES
from grader.loader import load_track
from grader.timing import time_fn, measure_ceilings
from grader.build import CACHE
ceil = measure_ceilings(CACHE, ["bandwidth", "read_bandwidth"])
copy_bw, grader_read = ceil["bandwidth"], ceil["read_bandwidth"]
ex = load_exercise(EXERCISES / "04_reduce_sum")
impl = load_track(Path(sys.argv[1]), ex, ex.tracks["cuda"])
ref = impl._reference
print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}; "
      f"copy bandwidth {copy_bw:.0f} GB/s, read bandwidth {grader_read:.0f} GB/s (the grader's "
      f"ceilings; the graded fraction is of the read one)")
g = torch.Generator(device="cuda").manual_seed(0)
cases = [("reduce_sum 2^28 fp32", impl.reduce_sum, ref.reference,
          ref.bench_inputs({"n": 1 << 28}, torch.float32, "cuda", g)[0], 4 * (1 << 28) + 4),
         ("reduce_sum_rows (32768, 8192) bf16", impl.reduce_sum_rows, ref.reference_rows,
          ref.bench_inputs_rows({"M": 32768, "N": 8192}, torch.bfloat16, "cuda", g)[0],
          2 * 32768 * 8192 + 4 * 32768)]
for name, fn, eager, x, nbytes in cases:
    os.environ["EX04_MODE"] = "probe"
    read_ms = time_fn(lambda: fn(x))["ms"]
    read_bw = nbytes / (read_ms * 1e-3) / 1e9
    print(f"\n{name}: {nbytes / 1e9:.3f} GB; CUDA read probe {read_ms * 1e3:.1f} us = "
          f"{read_bw:.0f} GB/s ({read_bw / grader_read:.3f} of the grader's read ceiling)")
    print(f"  {'what':<26}{'us':>9}{'GB/s':>8}{'/copy':>8}{'/read':>8}  distinct results in 10 calls")
    torch._dynamo.reset()
    rows = [("first kernel (atomics)", "first", fn), ("solution (two-stage)", "solution", fn),
            ("torch.sum eager", None, eager),
            ("torch.sum compile", None, torch.compile(eager, dynamic=False))]
    for label, mode, f in rows:
        if mode:
            os.environ["EX04_MODE"] = mode
        t = time_fn(lambda: f(x))
        bw = nbytes / (t["ms"] * 1e-3) / 1e9
        distinct = len({f(x).cpu().numpy().tobytes() for _ in range(10)})
        print(f"  {label:<26}{t['ms'] * 1e3:9.1f}{bw:8.0f}{bw / copy_bw:8.3f}{bw / grader_read:8.3f}  "
              f"{distinct}  (p20-p80 {t['p20'] * 1e3:.1f}-{t['p80'] * 1e3:.1f} us)")
    os.environ["EX04_MODE"] = "solution"
'''


def make_tree() -> Path:
    tree = Path("/tmp/ex04_experiment")
    dst = tree / EX / TRACK
    shutil.rmtree(tree, ignore_errors=True)
    shutil.copytree(ROOT / "solutions" / EX / TRACK, dst)
    text = (dst / KERNELS).read_text()
    for old, new in [("#include <algorithm>\n", "#include <algorithm>\n#include <cstdlib>\n#include <string>\n"),
                     ("template <typename T>\nbool vector_path", EXTRA + "template <typename T>\nbool vector_path"),
                     ("  if (rows == 0) return;  // a launch with 0 blocks is an error (\"invalid configuration\")\n", FIRST)]:
        assert old in text, old
        text = text.replace(old, new, 1)
    (dst / KERNELS).write_text(text)
    return tree


if __name__ == "__main__":
    out = subprocess.run([sys.executable, "-c", CHILD, str(make_tree()), str(ROOT)], cwd=ROOT,
                         capture_output=True, text=True)
    print(out.stdout.strip())
    if out.returncode:
        print(out.stderr[-3000:])
        sys.exit(out.returncode)
