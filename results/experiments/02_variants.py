"""Time variants of the 02 scale kernel against `a * x` and a copy, in one run (GPU only).

    python results/experiments/02_variants.py               # build, check, time (~1 min on 16 cores)
    python results/experiments/02_variants.py --build-only  # just compile every variant (no GPU needed)

The graded case: x = 2^28 bf16, a = 1.7 (1.07 GB of traffic). Each variant is
solutions/02_scale/cuda/scale_kernels.cu with its constants (kThreads, kVecsPerThread,
kBlocksPerSM, kStreaming) set by a text edit, or "old": the vector kernel before issue 13 (one
wave of 256-thread blocks in a grid-stride loop, 4 vectors per thread a grid apart), kept below as
source. The kernel file has no ATen, so nvcc alone builds each into a shared library with a C
entry point per dtype (all variants in parallel), called through ctypes on torch tensors'
data_ptr() and PyTorch's current stream.

Every variant is first checked bit for bit against torch's `a * x` (fp32 math rounded once for
fp16/bf16: the same bits) in all four dtypes, over lengths around the vector and tile widths,
aligned and misaligned (x = base[1:]), outputs NaN-poisoned, and at the graded case. Then
rounds of: a 2 GiB device copy (1 GiB bf16 read + 1 GiB written, as grader/timing.py measures
the ceiling), eager `a * x`, every variant; each timed by grader.timing.time_fn
(triton.testing.do_bench, L2 flushed, the median). A row reports the median over rounds, in us,
as a fraction of the copy bandwidth of the same run, and as eager's time over its own.
"""
import argparse
import concurrent.futures
import ctypes
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
SRC = ROOT / "solutions/02_scale/cuda/scale_kernels.cu"
CONSTS = {"kThreads": "int", "kVecsPerThread": "int", "kBlocksPerSM": "int", "kStreaming": "bool"}

# name -> constants to set (None: the file as it is, the solution's default), what it tests
VARIANTS = {
    "default": (None, "the solution as committed"),
    "pytorch": (dict(kThreads=128, kVecsPerThread=1, kBlocksPerSM=0, kStreaming=False),
                "PyTorch's sm_90 shape: 128 threads, one 16 B vector each, a full grid"),
    "t128v2": (dict(kThreads=128, kVecsPerThread=2, kBlocksPerSM=0, kStreaming=False),
               "2 vectors in flight per thread, full grid"),
    "t128v4": (dict(kThreads=128, kVecsPerThread=4, kBlocksPerSM=0, kStreaming=False),
               "4 vectors in flight per thread, full grid"),
    "t256v2": (dict(kThreads=256, kVecsPerThread=2, kBlocksPerSM=0, kStreaming=False),
               "256-thread blocks, 2 vectors each, full grid"),
    "t128v2_cs": (dict(kThreads=128, kVecsPerThread=2, kBlocksPerSM=0, kStreaming=True),
                  "t128v2 with evict-first hints (__ldcs/__stcs)"),
    "t256v4_wave": (dict(kThreads=256, kVecsPerThread=4, kBlocksPerSM=8, kStreaming=False),
                    "one wave (SMs x 8 blocks) looping over contiguous tiles"),
    "old": ("OLD", "before issue 13: one wave, grid-stride, 4 vectors a grid apart"),
}

# The vector kernel before issue 13 (the solution's one-file scale.cu, in the git history; common.cuh's
# types here for ATen's), and its launch: grid = min(work / 256, SMs x resident blocks).
OLD = r'''
#include "common.cuh"
#include <algorithm>
#include <cstdint>
namespace {
using course::Acc;
constexpr int kThreads = 256;
constexpr int kUnroll = 4;
template <typename T> using Vector = course::Vec<T, course::kVec16<T>>;
template <typename T>
__device__ __forceinline__ T scale_one(T x, typename Acc<T>::type a) {
  return course::from_acc<T>(a * course::to_acc(x));
}
template <typename T>
__global__ void __launch_bounds__(kThreads)
scale_kernel(const T* __restrict__ x, T* __restrict__ out, typename Acc<T>::type a, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    out[i] = scale_one(x[i], a);
}
template <typename T>
__global__ void __launch_bounds__(kThreads)
scale_kernel_vec(const T* __restrict__ x, T* __restrict__ out, typename Acc<T>::type a, int64_t n) {
  using Vec = Vector<T>;
  constexpr int kSize = course::kVec16<T>;
  const Vec* __restrict__ xv = reinterpret_cast<const Vec*>(x);
  Vec* __restrict__ outv = reinterpret_cast<Vec*>(out);
  const int64_t n_vec = n / kSize;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  int64_t i = tid;
  for (; i + (kUnroll - 1) * stride < n_vec; i += kUnroll * stride) {
    Vec v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) v[u] = xv[i + u * stride];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
#pragma unroll
      for (int k = 0; k < kSize; ++k) v[u].v[k] = scale_one(v[u].v[k], a);
      outv[i + u * stride] = v[u];
    }
  }
  for (; i < n_vec; i += stride) {
    Vec v = xv[i];
#pragma unroll
    for (int k = 0; k < kSize; ++k) v.v[k] = scale_one(v.v[k], a);
    outv[i] = v;
  }
  const int64_t t = n_vec * kSize + tid;
  if (t < n) out[t] = scale_one(x[t], a);
}
template <auto kKernel>
int grid_size(int64_t work_items) {
  static const int per_sm = [] {
    int b = 0;
    CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, kKernel, kThreads, 0));
    return std::max(b, 1);
  }();
  const int64_t one_wave = static_cast<int64_t>(course::num_sms()) * per_sm;
  return static_cast<int>(std::min((work_items + kThreads - 1) / kThreads, one_wave));
}
}  // namespace
template <typename T, typename A>
void scale_launch(const T* x, T* out, A a, int64_t n, cudaStream_t stream) {
  if (course::aligned_for<T, course::kVec16<T>>(x) && course::aligned_for<T, course::kVec16<T>>(out)) {
    const int64_t work = n / course::kVec16<T> + 1;
    scale_kernel_vec<T><<<grid_size<scale_kernel_vec<T>>(work), kThreads, 0, stream>>>(x, out, a, n);
  } else {
    scale_kernel<T><<<grid_size<scale_kernel<T>>(n), kThreads, 0, stream>>>(x, out, a, n);
  }
  CUDA_LAUNCH_CHECK();
}
'''

# One C entry point per dtype: `a` arrives as a double and is converted to the math type here,
# as scale.cpp does; an exception (a failed launch) comes back as its message.
SHIM = r'''
#include "kernels.cu"
#include <exception>
#include <string>
template <typename T, typename A>
static const char* call(const void* x, void* out, double a, long long n, void* stream) {
  static thread_local std::string msg;
  try {
    scale_launch<T, A>(static_cast<const T*>(x), static_cast<T*>(out), static_cast<A>(a), n,
                       static_cast<cudaStream_t>(stream));
    return nullptr;
  } catch (const std::exception& e) {
    msg = e.what();
    return msg.c_str();
  }
}
extern "C" const char* scale_float32(const void* x, void* o, double a, long long n, void* s) { return call<float, float>(x, o, a, n, s); }
extern "C" const char* scale_float64(const void* x, void* o, double a, long long n, void* s) { return call<double, double>(x, o, a, n, s); }
extern "C" const char* scale_float16(const void* x, void* o, double a, long long n, void* s) { return call<__half, float>(x, o, a, n, s); }
extern "C" const char* scale_bfloat16(const void* x, void* o, double a, long long n, void* s) { return call<__nv_bfloat16, float>(x, o, a, n, s); }
'''

# what torch.utils.cpp_extension and grader/build.py pass to nvcc for the track's .cu file
NVCC_FLAGS = ["-std=c++17", "-O3", "-lineinfo", "--expt-relaxed-constexpr",
              "-D__CUDA_NO_HALF_OPERATORS__", "-D__CUDA_NO_HALF_CONVERSIONS__",
              "-D__CUDA_NO_BFLOAT16_CONVERSIONS__", "-D__CUDA_NO_HALF2_OPERATORS__"]


def defaults(text: str) -> dict:
    found = {}
    for name, typ in CONSTS.items():
        m = re.findall(rf"constexpr {typ} {name} = (\w+);", text)
        assert len(m) == 1, f"{SRC.name}: expected one 'constexpr {typ} {name} = ...;', found {m}"
        found[name] = {"true": True, "false": False}.get(m[0], m[0])
        found[name] = int(found[name]) if typ == "int" else found[name]
    return found


def variant_source(name: str) -> tuple[str, str]:
    """(kernel file text, its constants as a label)."""
    consts, _ = VARIANTS[name]
    text = SRC.read_text()
    if consts == "OLD":
        return OLD, "threads=256 vecs=4 one wave, grid-stride"
    if consts is not None:
        for key, value in consts.items():
            typ = CONSTS[key]
            lit = ("true" if value else "false") if typ == "bool" else str(value)
            text, count = re.subn(rf"constexpr {typ} {key} = \w+;", f"constexpr {typ} {key} = {lit};", text)
            assert count == 1, (name, key)
    c = defaults(text)
    grid = "full grid" if c["kBlocksPerSM"] == 0 else f"<= SMs x {c['kBlocksPerSM']} blocks"
    label = f"threads={c['kThreads']} vecs={c['kVecsPerThread']} {grid}" + (" cs" if c["kStreaming"] else "")
    return text, label


def nvcc_and_arch():
    from grader.build import _find_cuda_home, _use_a_shared_libstdcxx_compiler
    _use_a_shared_libstdcxx_compiler()  # the GPU hosts' CXX may link libstdc++ statically
    home = Path(os.environ["CUDA_HOME"]) if os.environ.get("CUDA_HOME") else _find_cuda_home()
    nvcc = str(home / "bin" / "nvcc") if home else shutil.which("nvcc")
    if not nvcc:
        sys.exit("no nvcc: set CUDA_HOME")
    import torch
    major, minor = torch.cuda.get_device_capability() if torch.cuda.is_available() else (9, 0)
    arch = [f"-gencode=arch=compute_{major}{minor},code=sm_{major}{minor}"]
    host = ["-ccbin", os.environ["CC"]] if os.environ.get("CC") else []  # as torch's builds do
    return nvcc, arch + host


def build(name: str, work: Path, nvcc: str, extra: list) -> dict:
    text, label = variant_source(name)
    d = work / name
    d.mkdir(parents=True)
    (d / "kernels.cu").write_text(text)
    (d / "shim.cu").write_text(SHIM)
    so = d / f"scale_{name}.so"
    cmd = [nvcc, *NVCC_FLAGS, *extra, f"-I{ROOT / 'include'}", "-Xcompiler", "-fPIC", "-shared",
           "-cudart", "shared", "-Xptxas", "-v", str(d / "shim.cu"), "-o", str(so)]
    start = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    info = {"name": name, "label": label, "so": so, "seconds": time.perf_counter() - start}
    if out.returncode != 0:
        info["error"] = (out.stdout + out.stderr)[-3000:]
        return info
    # registers / spills of the bf16 vector kernel, from ptxas -v
    lines = out.stderr.splitlines()
    for i, line in enumerate(lines):
        if "Compiling entry function" in line and "scale_kernel_vec" in line and "bfloat16" in line:
            tail = " ".join(lines[i + 1:i + 4])
            regs = re.search(r"Used (\d+) registers", tail)
            spill = re.search(r"(\d+) bytes spill stores", tail)
            info["regs"] = int(regs.group(1)) if regs else None
            info["spill"] = int(spill.group(1)) if spill else None
    return info


class Lib:
    def __init__(self, so: Path):
        self.lib = ctypes.CDLL(str(so))
        self.fns = {}
        for dt in ("float32", "float64", "float16", "bfloat16"):
            f = getattr(self.lib, f"scale_{dt}")
            f.restype = ctypes.c_char_p
            f.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_double, ctypes.c_longlong,
                          ctypes.c_void_p]
            self.fns[dt] = f

    def __call__(self, x, out, a):
        import torch
        err = self.fns[str(x.dtype)[6:]](x.data_ptr(), out.data_ptr(), a, x.numel(),
                                         torch.cuda.current_stream().cuda_stream)
        if err:
            raise RuntimeError(err.decode())
        return out


def check(lib: Lib) -> str | None:
    """None, or the first difference from torch's a * x."""
    import torch
    g = torch.Generator(device="cuda").manual_seed(0)
    lengths = [1, 7, 8, 9, 127, 1023, 1024, 1025, 2047, 2049, 4095, 4096, 4097,
               (1 << 16) + 9, (1 << 20) + 3, 3 * 4096 * 8 + 5]
    for dtype in (torch.float32, torch.float64, torch.float16, torch.bfloat16):
        for n in lengths:
            for offset in (0, 1):
                base = torch.randn(n + offset, device="cuda", dtype=dtype, generator=g)
                x = base[offset:]
                for a in (1.7, -2.75, 1.0 + 2.0 ** -8):
                    out = torch.full_like(x, float("nan"))
                    lib(x, out, a)
                    want = a * x
                    if not torch.equal(out, want):
                        bad = (out != want).nonzero().flatten()
                        i = int(bad[0])
                        return (f"{dtype} n={n} offset={offset} a={a}: {bad.numel()} differ, first "
                                f"[{i}] got {out[i].item()!r} want {want[i].item()!r}")
    x = torch.randn(1 << 28, device="cuda", dtype=torch.bfloat16, generator=g)
    out = torch.full_like(x, float("nan"))
    lib(x, out, 1.7)
    if not torch.equal(out, 1.7 * x):
        return f"bf16 n=2^28: {int((out != 1.7 * x).sum())} elements differ"
    torch.cuda.synchronize()
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("names", nargs="*", help=f"variants (default: all): {', '.join(VARIANTS)}")
    ap.add_argument("--build-only", action="store_true", help="compile, time nothing")
    ap.add_argument("--rounds", type=int, default=3, help="timing rounds (default 3)")
    args = ap.parse_args()
    names = args.names or list(VARIANTS)
    unknown = [n for n in names if n not in VARIANTS]
    if unknown:
        sys.exit(f"unknown variant(s) {unknown}; known: {list(VARIANTS)}")
    t0 = time.perf_counter()
    import torch
    if not args.build_only and not torch.cuda.is_available():
        sys.exit("needs a GPU (or --build-only)")
    nvcc, extra = nvcc_and_arch()
    work = Path(tempfile.mkdtemp(prefix="scale02_variants_"))
    print(f"building {len(names)} variants with {nvcc} ({' '.join(extra)}) in {work}", flush=True)
    with concurrent.futures.ThreadPoolExecutor(max_workers=min(len(names), os.cpu_count() or 1)) as ex:
        built = list(ex.map(lambda n: build(n, work, nvcc, extra), names))
    for b in built:
        status = "FAILED" if "error" in b else f"regs {b.get('regs')}, spill {b.get('spill')} B"
        print(f"  {b['name']:12s} {b['seconds']:5.1f} s  {status}   ({b['label']})", flush=True)
        if "error" in b:
            print(b["error"])
    built = [b for b in built if "error" not in b]
    if args.build_only:
        print(f"done in {time.perf_counter() - t0:.0f} s")
        return 0 if len(built) == len(names) else 1

    from grader.timing import time_fn
    props = torch.cuda.get_device_properties(0)
    print(f"\n{props.name}, {props.multi_processor_count} SMs, torch {torch.__version__}", flush=True)
    failed = []
    for b in built:
        b["lib"] = Lib(b["so"])
        problem = check(b["lib"])
        if problem:
            print(f"  {b['name']:12s} WRONG: {problem}", flush=True)
            failed.append(b["name"])
    built = [b for b in built if b["name"] not in failed]
    if not built:
        print("no variant to time")
        return 1
    print(f"checked bit for bit against a * x (4 dtypes, {len(built)} variants passed)", flush=True)

    n, a = 1 << 28, 1.7
    x = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    out = torch.empty_like(x)
    src = torch.randn(1 << 29, device="cuda", dtype=torch.bfloat16)  # 1 GiB, as grader/timing.py
    dst = torch.empty_like(src)
    nbytes = 2 * 2 * n
    times = {"copy": [], "eager": [], **{b["name"]: [] for b in built}}
    for r in range(args.rounds):
        order = built if r % 2 == 0 else built[::-1]  # alternate, so drift does not favour one
        times["copy"].append(time_fn(lambda: dst.copy_(src))["ms"])
        times["eager"].append(time_fn(lambda: a * x)["ms"])
        for b in order:
            f = b["lib"]
            times[b["name"]].append(time_fn(lambda: f(x, out, a))["ms"])
    med = {k: statistics.median(v) * 1e3 for k, v in times.items()}  # us
    spread = {k: (min(v) * 1e3, max(v) * 1e3) for k, v in times.items()}
    copy_bw = 2 * (1 << 30) / (med["copy"] * 1e-6)  # B/s
    ideal_us = nbytes / copy_bw * 1e6
    print(f"\nn = 2^28 bf16, a = {a}: {nbytes / 1e9:.2f} GB; copy {copy_bw / 1e9:.0f} GB/s "
          f"(2 GiB in {med['copy']:.1f} us): ideal {ideal_us:.1f} us; "
          f"medians of {args.rounds} rounds (min-max)\n")
    print(f"{'variant':12s} {'us':>8s} {'min-max':>15s} {'of copy':>8s} {'vs eager':>9s}  what")
    rows = [("eager", "PyTorch a * x")] + [(b["name"], b["label"] + ("  <- default" if b["name"] == "default" else ""))
                                           for b in built]
    for name, what in rows:
        lo, hi = spread[name]
        print(f"{name:12s} {med[name]:8.1f} {lo:7.1f}-{hi:<7.1f} {ideal_us / med[name]:8.3f} "
              f"{med['eager'] / med[name]:8.3f}x  {what}", flush=True)
    best = min((b["name"] for b in built), key=lambda k: med[k])
    print(f"\nfastest: {best} ({med[best]:.1f} us, {ideal_us / med[best]:.3f} of copy); target: "
          f">= 0.98 of copy and <= eager ({med['eager']:.1f} us)")
    if failed:
        print(f"WRONG results: {failed}")
    print(f"done in {time.perf_counter() - t0:.0f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
