"""Exercise 12 (matmul_tc), CUTLASS track: configurations of the CUTLASS 3.x GEMM at the graded
case (M = N = K = 8192, bf16, act = relu), built, checked and timed side by side against cuBLAS
(torch.addmm, no act) and F.linear + relu measured in the same process.

Each variant is solutions/12_matmul_tc/cutlass with a few `using` lines of
matmul_tc_kernels.cu set to other values (a text edit of a temporary copy; the solution is not
touched): the CTA tile, the cluster shape, the kernel and epilogue schedules, the epilogue tile,
the mainloop's stage count and the tile scheduler. The copy is built bf16-only
(`#define MATMUL_TC_BF16_ONLY`: half the build) and its make_arguments reads the tile
scheduler's run-time arguments from the environment (EX12_SWIZZLE: max_swizzle_size 1/2/4/8;
EX12_RASTER: M/N/H, raster_order AlongM/AlongN/Heuristic; and for the stream-K scheduler
EX12_DECOMP: h/dp/sk/splitk, EX12_REDUCTION: d/nd, EX12_SPLITS), so the scheduler variants
share one build. Every distinct build is made by the grader's own build (grader.build.build),
each in a process of its own (the ops of one TORCH_LIBRARY namespace, ex12_cutlass, register
once per process), all side by side first; then the timings one at a time, so no compiler
competes with them: every variant, then "default" once more at the end (the run's noise).

    python3 results/experiments/12_cutlass_variants.py --out $OUT/ex12     # GPU: the sweep
    python3 results/experiments/12_cutlass_variants.py --out $OUT/ex12 --shapes
        # + the best 3 variants (and default) at 16384x14336x4096 and 16384x4096x14336
    python3 results/experiments/12_cutlass_variants.py --only default,streamk
    python3 results/experiments/12_cutlass_variants.py --only default --set swizzle=8,raster=M
        # --set: scheduler arguments added to every chosen variant (names get a suffix)
    python3 results/experiments/12_cutlass_variants.py --build-only --jobs 2   # no GPU needed
    python3 results/experiments/12_cutlass_variants.py --sizes --all    # no GPU, ~2 min: each
        # build's mainloop stages and shared memory (does it fit in 227 KB?)
    python3 results/experiments/12_cutlass_variants.py --list                  # the variants
    ... --trees .cache/ex12-trees --keep  # a later run with the same --trees on the same
        # (warm) machine reuses the builds: ninja finds nothing to do (.cache/ is git-ignored)

Whole run on a 16-core H200 machine, default variant set: ~3.5 minutes expected, not yet
measured (7 distinct builds side by side, MAX_JOBS=2 each, ~1-1.5 minutes: one bf16-only build
took 74 s alone on one core of the 2-core CPU machine, 140-330 s two at a time there under other
load; then 12 timed rows of ~8-12 s each: process start, build cache hit, checks, 2 rounds of
addmm / F.linear + relu / the variant); --shapes adds ~1 minute (4 rows). A soft deadline
(--deadline, 340 s from the start) skips the rows that would start after it (their rows say
so), keeping the last "default" row; --shapes rows start only until --deadline + 20 s.

Columns of the table (printed last; full logs, diffs and results.json under --out):
  us         the variant, grader.timing.time_fn (the grader's method: triton.testing.do_bench
             median, L2 flushed between calls), the median over the rounds
  TFLOP/s    2 M N K over that time
  %addmm     torch.addmm's time in the same process over the variant's: the fraction of
             cuBLAS's rate (the issue's target: >= 95%; beating F.linear + relu needs ~97.5%)
  x lin      F.linear + relu's time in the same process over the variant's (> 1: faster)
  addmm/lin  the two baselines' times in that process (us)
  spread     max - min of the variant's per-round medians (us)
  check      relative error ||D - ref|| / ||ref|| against float64 at the graded case, and the
             small-shape checks (all three acts at odd but TMA-aligned shapes, a long K): the
             exercise's rule (normwise <= 2 u = 7.8e-3 for bf16, elementwise atol 8e-3 /
             rtol 1.6e-2 from exercise.toml); NaN/inf anywhere fails the variant
Rows are sorted by %addmm (the same-process ratio is steadier than the raw time across
processes: the GPU's clocks differ from one process to the next).

Why no stage-count variants in the default set: StageCountAutoCarveout already gives the most
stages that fit next to the epilogue; fewer only hide less latency and more do not fit. From
--sizes (CUTLASS 4.2.0.0; limit 232448 B per block): default / streamk / coop_256x128_* /
coop_c1x1 4 stages, 214016 B; pingpong_64x256 5 stages, 214016 B; pingpong_128x128 6 stages,
205824 B; epi_128x64 4 stages, 231424 B (1 KB to spare); coop_stages3 3 stages, 164864 B. The
`stages` knob is there ("coop_stages3" shows its use) if the lead wants to try it.
"""
import argparse
import concurrent.futures
import difflib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EX = "12_matmul_tc"
TRACK = "cutlass"
KERNELS = "matmul_tc_kernels.cu"
CASE = {"M": 8192, "N": 8192, "K": 8192, "act": "relu"}
SHAPES = [{"M": 16384, "N": 14336, "K": 4096, "act": "relu"},   # Llama-3-8B MLP up-projection
          {"M": 16384, "N": 4096, "K": 14336, "act": "relu"}]   # ... and down-projection
T0 = time.perf_counter()

# The knobs of the copy's GemmFor<T>, with the solution's values (the "default" variant).
BASE = {
    "tile": "_128, _256, _64",                          # TileShape = Shape<...>
    "cluster": "_2, _1, _1",                            # ClusterShape = Shape<...>
    "kernel": "KernelTmaWarpSpecializedCooperative",    # cutlass::gemm::<...>
    "epilogue": "TmaWarpSpecializedCooperative",        # cutlass::epilogue::<...>
    "epi_tile": "cutlass::epilogue::collective::EpilogueTileAuto",  # or "Shape<_128, _64>"
    "stages": "auto",                                   # StageCountAutoCarveout, or an int
    "scheduler": "void",                                # void = the persistent scheduler
}
PINGPONG = {"kernel": "KernelTmaWarpSpecializedPingpong", "epilogue": "TmaWarpSpecialized"}
STREAMK = {"scheduler": "cutlass::gemm::StreamKScheduler"}
# run-time scheduler arguments -> the environment variable the copy reads
SCHED_ENV = {"swizzle": "EX12_SWIZZLE", "raster": "EX12_RASTER", "decomp": "EX12_DECOMP",
             "reduction": "EX12_REDUCTION", "splits": "EX12_SPLITS"}

# name -> (why it might help, build knobs (over BASE), run-time scheduler arguments).
# In order of expected value; DEFAULT_SET is what a plain run times, the rest by --only/--all.
VARIANTS = {
    "default": ("the solution as it is: cooperative 128x256x64, cluster 2x1, persistent "
                "scheduler (swizzle 1, raster heuristic = AlongN here), auto epilogue tile 128x32",
                {}, {}),
    "streamk": ("stream-K scheduler, decomposition forced to StreamK (its heuristic keeps "
                "data-parallel here): 2048 tiles / 132 SMs = 15.5 waves, the 16th half empty "
                "(~3%); stream-K spreads the last 2 waves' K-work over every SM",
                STREAMK, {"decomp": "sk"}),
    "pingpong_64x256": ("pingpong, 64x256x64 per consumer warpgroup, cluster 2x1: one "
                        "warpgroup's epilogue overlaps the other's mainloop (cooperative stalls "
                        "the tensor cores during each tile's epilogue); same m64n256k16 wgmma",
                        {**PINGPONG, "tile": "_64, _256, _64"}, {}),
    "pingpong_128x128": ("pingpong, 128x128x64 per warpgroup, cluster 2x1: the epilogue hidden "
                         "as above, 6 stages instead of 4, smaller wgmma (m64n128)",
                         {**PINGPONG, "tile": "_128, _128, _64"}, {}),
    "swz8": ("default build, max_swizzle_size 8: each wave covers a squarer block of tiles, "
             "A and B strips reused from L2 (less HBM traffic and power at the power cap)",
             {}, {"swizzle": 8}),
    "streamk_nd": ("stream-K as above with the nondeterministic reduction (no turnstile: "
                   "partial tiles accumulate in any order)", STREAMK,
                   {"decomp": "sk", "reduction": "nd"}),
    "coop_256x128_c1x2": ("cooperative 256x128x64 (each warpgroup 128x128), cluster 1x2: the "
                          "two CTAs share A's bigger 256x64 tile by multicast; cuBLAS's usual "
                          "shape", {"tile": "_256, _128, _64", "cluster": "_1, _2, _1"}, {}),
    "rasterM": ("default build, raster order AlongM (the heuristic picks AlongN for 64x32 "
                "tiles): the wave walks down M, sharing B strips instead of A strips",
                {}, {"raster": "M"}),
    "coop_c1x1": ("default tile, cluster 1x1: no multicast (B read twice from L2) but no "
                  "cluster barrier coupling the two CTAs' pipelines",
                  {"cluster": "_1, _1, _1"}, {}),
    "epi_128x64": ("default with the epilogue tile 128x64 instead of auto 128x32: 4 epilogue "
                   "steps per tile instead of 8 (fewer barriers, wider TMA stores), 16 KB more "
                   "smem (still 4 mainloop stages)", {"epi_tile": "Shape<_128, _64>"}, {}),
    "swz4": ("default build, max_swizzle_size 4", {}, {"swizzle": 4}),
    # --- not in the default set (--only NAME, or --all) ---
    "coop_256x128_c2x1": ("cooperative 256x128x64, cluster 2x1 (multicast of the smaller B tile)",
                          {"tile": "_256, _128, _64"}, {}),
    "coop_c1x2": ("default tile, cluster 1x2 (multicast of A's 128x64 tile instead of B's 64x256)",
                  {"cluster": "_1, _2, _1"}, {}),
    "swz2": ("default build, max_swizzle_size 2", {}, {"swizzle": 2}),
    "swz8_rasterM": ("default build, swizzle 8 and raster AlongM", {},
                     {"swizzle": 8, "raster": "M"}),
    "streamk_swz8": ("stream-K (deterministic) with swizzle 8", STREAMK,
                     {"decomp": "sk", "swizzle": 8}),
    "pingpong_64x256_swz8": ("pingpong 64x256x64 with swizzle 8",
                             {**PINGPONG, "tile": "_64, _256, _64"}, {"swizzle": 8}),
    "pingpong_64x256_c1x1": ("pingpong 64x256x64, cluster 1x1",
                             {**PINGPONG, "tile": "_64, _256, _64", "cluster": "_1, _1, _1"}, {}),
    "coop_stages3": ("default with 3 mainloop stages fixed (StageCount<3>) instead of the auto 4",
                     {"stages": 3}, {}),
}
DEFAULT_SET = ["default", "streamk", "pingpong_64x256", "pingpong_128x128", "swz8", "streamk_nd",
               "coop_256x128_c1x2", "rasterM", "coop_c1x1", "epi_128x64", "swz4"]


def log(msg: str):
    print(f"[{time.perf_counter() - T0:6.1f}s] {msg}", flush=True)


# --- the text edits ----------------------------------------------------------------------------

HELPER = r'''
// ---- 12_cutlass_variants.py: the tile scheduler's run-time arguments from the environment ----
namespace ex12_variants {
inline const char* env(const char* name) {
  const char* s = std::getenv(name);
  return (s != nullptr && *s != '\0') ? s : nullptr;
}
// stream-K only fields (decomposition, reduction, splits): absent from the persistent scheduler
template <class S>
auto set_stream_k(S& s, int) -> decltype(s.decomposition_mode, s.reduction_mode, void()) {
  using D = decltype(s.decomposition_mode);
  using R = decltype(s.reduction_mode);
  if (const char* v = env("EX12_DECOMP")) {
    std::string x(v);
    s.decomposition_mode = x == "dp" ? D::DataParallel : x == "sk" ? D::StreamK
                         : x == "splitk" ? D::SplitK : D::Heuristic;
  }
  if (const char* v = env("EX12_REDUCTION")) {
    s.reduction_mode = v[0] == 'n' ? R::Nondeterministic : R::Deterministic;
  }
  if (const char* v = env("EX12_SPLITS")) s.splits = std::atoi(v);
}
template <class S>
void set_stream_k(S&, long) {}
template <class S>
void set_scheduler(S& s) {
  if (const char* v = env("EX12_SWIZZLE")) s.max_swizzle_size = std::atoi(v);
  if (const char* v = env("EX12_RASTER")) {
    using O = decltype(s.raster_order);
    s.raster_order = v[0] == 'M' ? O::AlongM : v[0] == 'N' ? O::AlongN : O::Heuristic;
  }
  set_stream_k(s, 0);
}
}  // namespace ex12_variants

'''


def sub1(text: str, pattern: str, repl, what: str) -> str:
    new, n = re.subn(pattern, repl, text)
    if n != 1:
        raise SystemExit(f"{KERNELS}: the spot '{what}' matched {n} times (pattern {pattern!r}); "
                         f"the solution changed: update 12_cutlass_variants.py's edits")
    return new


def edit_source(text: str, knobs: dict) -> str:
    """The solution's .cu -> the variant's: every spot edited (with the solution's own value for
    the default), so a spot that moved in the solution fails loudly instead of silently."""
    k = {**BASE, **knobs}
    if "!defined(MATMUL_TC_BF16_ONLY)" not in text:
        raise SystemExit(f"{KERNELS}: no MATMUL_TC_BF16_ONLY switch any more")
    text = ("// 12_cutlass_variants.py copy: " + json.dumps(knobs, sort_keys=True) + "\n"
            "#define MATMUL_TC_BF16_ONLY 1\n#include <cstdlib>\n" + text)
    text = sub1(text, r"using TileShape = Shape<[^;]*>;",
                lambda m: f"using TileShape = Shape<{k['tile']}>;", "TileShape")
    text = sub1(text, r"using ClusterShape = Shape<[^;]*>;",
                lambda m: f"using ClusterShape = Shape<{k['cluster']}>;", "ClusterShape")
    text = sub1(text, r"using KernelSchedule = cutlass::gemm::\w+;",
                lambda m: f"using KernelSchedule = cutlass::gemm::{k['kernel']};",
                "KernelSchedule")
    text = sub1(text, r"using EpilogueSchedule = cutlass::epilogue::\w+;",
                lambda m: (f"using EpilogueSchedule = cutlass::epilogue::{k['epilogue']};\n"
                           f"  using EpilogueTile = {k['epi_tile']};\n"
                           f"  using TileSchedulerTag = {k['scheduler']};"),
                "EpilogueSchedule")
    text = sub1(text, r"cutlass::epilogue::collective::EpilogueTileAuto, ElementAccumulator",
                lambda m: "EpilogueTile, ElementAccumulator", "the epilogue builder's tile")
    stages = (r"cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>\(\s*"
              r"sizeof\(typename CollectiveEpilogue::SharedStorage\)\)>")
    text = sub1(text, stages,
                (lambda m: m.group(0)) if k["stages"] == "auto"
                else (lambda m: f"cutlass::gemm::collective::StageCount<{int(k['stages'])}>"),
                "the mainloop's stage count")
    text = sub1(text, r"GemmUniversal<Shape<int, int, int, int>,\s*CollectiveMainloop, "
                      r"CollectiveEpilogue>",
                lambda m: ("GemmUniversal<Shape<int, int, int, int>, CollectiveMainloop, "
                           "CollectiveEpilogue, TileSchedulerTag>"), "GemmUniversal")
    text = sub1(text, r"\ntemplate <class T>\ntypename GemmFor<T>::Gemm::Arguments make_arguments",
                lambda m: HELPER + m.group(0), "make_arguments (helper)")
    text = sub1(text, r"(  args\.hw_info\.sm_count = p\.sm_count;\n)(  return args;)",
                lambda m: m.group(1) + "  ex12_variants::set_scheduler(args.scheduler);\n"
                + m.group(2), "make_arguments (scheduler)")
    return text


def build_key(name: str) -> str:
    return json.dumps({**BASE, **VARIANTS[name][1]}, sort_keys=True)


def make_tree(tree_name: str, knobs: dict, base: Path, out: Path | None) -> Path:
    """A copy of the solution's CUTLASS track with the variant's edits: the tree's path."""
    tree = base / tree_name
    dst = tree / EX / TRACK
    src = ROOT / "solutions" / EX / TRACK
    old = (src / KERNELS).read_text()
    new = edit_source(old, knobs)
    same = dst.is_dir() and all(
        (dst / f.name).is_file() and (dst / f.name).read_bytes() == f.read_bytes()
        for f in src.iterdir() if f.is_file() and f.name != KERNELS) and (
        (dst / KERNELS).is_file() and (dst / KERNELS).read_text() == new)
    if not same:  # an unchanged tree keeps its files' times: ninja rebuilds nothing (--trees)
        if dst.exists():
            shutil.rmtree(dst)
        shutil.copytree(src, dst)
        (dst / KERNELS).write_text(new)
    if out is not None:
        diff = difflib.unified_diff(old.splitlines(True), new.splitlines(True),
                                    f"solutions/{EX}/{TRACK}/{KERNELS}", f"{tree_name}/{KERNELS}")
        (out / f"{tree_name}.diff").write_text("".join(diff))
    return tree


# --- without a GPU: each build's stage count and shared memory --------------------------------

SIZES_INCLUDES = """
#include <cutlass/cutlass.h>
#include <cutlass/epilogue/collective/collective_builder.hpp>
#include <cutlass/epilogue/thread/activation.h>
#include <cutlass/gemm/collective/collective_builder.hpp>
#include <cutlass/gemm/device/gemm_universal_adapter.h>
#include <cutlass/gemm/kernel/gemm_universal.hpp>
#include <cute/tensor.hpp>
#include <cstdio>
#include "matmul_tc.h"
using namespace cute;
"""


def sizes_report(names: list, base: Path):
    """One host program holding every distinct build's MatmulAct + GemmFor (no kernel is
    instantiated: ~1-2 minutes of one core for all), printing the mainloop's stage count and the
    kernel's shared memory (the limit is 232448 B): does a variant fit, and with how many stages."""
    import cutlass_library
    cutlass = Path(cutlass_library.source_path)
    orig = (ROOT / "solutions" / EX / TRACK / KERNELS).read_text()
    keys, parts, lines = set(), [], []
    for n in names:
        if build_key(n) in keys:
            continue
        keys.add(build_key(n))
        src = edit_source(orig, VARIANTS[n][1])
        start = src.index("template <class T>\nstruct MatmulAct {")
        end = src.index("\n// ---- 12_cutlass_variants.py: the tile scheduler")
        parts.append(f"namespace v_{n} {{\n{src[start:end]}\n}}\n")
        lines.append(
            f'  {{ using G = v_{n}::GemmFor<cutlass::bfloat16_t>;\n'
            f'    std::printf("%-24s stages %d  smem %6d B  epilogue smem %6d B\\n", "{n}",\n'
            f'      int(G::CollectiveMainloop::DispatchPolicy::Stages),\n'
            f'      int(G::GemmKernel::SharedStorageSize),\n'
            f'      int(sizeof(typename G::CollectiveEpilogue::SharedStorage))); }}')
    base.mkdir(parents=True, exist_ok=True)
    shutil.copy(ROOT / "solutions" / EX / TRACK / "matmul_tc.h", base / "matmul_tc.h")
    (base / "sizes.cu").write_text("#define NDEBUG\n" + SIZES_INCLUDES + "".join(parts)
                                   + "int main() {\n" + "\n".join(lines) + "\n  return 0;\n}\n")
    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    cmd = [nvcc, "-std=c++17", "-O0", "-arch=sm_90a", "--expt-relaxed-constexpr", "-I", str(base),
           "-I", str(cutlass / "include"), "-I", str(cutlass / "tools" / "util" / "include"),
           str(base / "sizes.cu"), "-o", str(base / "sizes")]
    log(f"nvcc (host program, {len(parts)} builds' types)")
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode:
        print(out.stderr[-3000:])
        raise SystemExit("the sizes program did not compile")
    print(subprocess.run([str(base / "sizes")], capture_output=True, text=True).stdout, end="")
    print("(shared memory limit per block: 232448 B)", flush=True)


# --- children: one build, or one variant's checks and timings ----------------------------------

def child_build(tree: Path):
    sys.path.insert(0, str(ROOT))
    from grader.build import build
    from grader.discover import discover
    ex = discover(only="12")[0]
    built = build(tree, ex, ex.tracks[TRACK])
    print(json.dumps({"built_s": round(built.seconds, 1), "rebuilt": built.rebuilt}))


def _load(tree: Path):
    sys.path.insert(0, str(ROOT))
    sys.path.insert(0, str(ROOT / "exercises" / EX))
    import torch
    from grader.build import build
    from grader.discover import discover
    ex = discover(only="12")[0]
    build(tree, ex, ex.tracks[TRACK])  # cached by the build phase: loads the library
    import reference as ref
    return ex, ref, torch.ops.ex12_cutlass.matmul_act


def _inputs(M, N, K, seed, device="cuda"):
    """As the exercise's checks: A @ B is O(1) whatever K, bias O(1)."""
    import torch
    g = torch.Generator(device=device).manual_seed(seed)
    A = torch.randn((M, K), generator=g, device=device).to(torch.bfloat16)
    B = (torch.randn((K, N), generator=g, device=device) * K ** -0.5).to(torch.bfloat16)
    bias = torch.randn((N,), generator=g, device=device).to(torch.bfloat16)
    return A, B, bias


def _check(out, A, B, bias, act, ref, tol, rel_bound, elementwise=True) -> tuple[float, str]:
    """(normwise relative error, '' or what failed) against float64."""
    import torch
    want = ref.reference(A.double(), B.double(), bias.double(), act)
    got = out.double()
    bad = int((~torch.isfinite(got)).sum())
    if bad:
        return float("nan"), f"{bad} NaN/inf"
    scale = want.norm().item()
    rel = (got - want).norm().item() / (scale if scale > 0 else 1.0)
    if rel > rel_bound:
        return rel, f"rel err {rel:.3g} > {rel_bound:.3g}"
    if elementwise:
        over = (got - want).abs() > tol["atol"] + tol["rtol"] * want.abs()
        if bool(over.any()):
            i = int(over.flatten().nonzero()[0])
            return rel, (f"{int(over.sum())} elements off (first at {divmod(i, got.shape[1])}: "
                         f"{got.flatten()[i].item():.4g} vs {want.flatten()[i].item():.4g})")
    return rel, ""


SMALL_CASES = [(1000, 776, 520, act) for act in ("none", "relu", "gelu_tanh")] + [
    (129, 264, 1000, "relu"), (8, 4096, 4096, "relu"), (2048, 2056, 2040, "gelu_tanh"),
    (300, 384, 12288, "relu"), (256, 256, 65536, "none")]


def _time_rounds(fns: dict, rounds: int) -> dict:
    """{name: [per-round median us]}: the functions interleaved, round after round."""
    from grader.timing import time_fn
    out = {n: [] for n in fns}
    for _ in range(rounds):
        for n, f in fns.items():
            out[n].append(time_fn(f)["ms"] * 1e3)
    return out


def _median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2] if len(xs) % 2 else 0.5 * (xs[len(xs) // 2 - 1] + xs[len(xs) // 2])


def child_run(tree: Path, name: str, rounds: int, shapes: bool):
    import torch
    ex, ref, op = _load(tree)
    tol = ex.tolerance["bfloat16"]
    rel_bound = 2 * 2.0 ** -8  # the checks' REL_BOUND for bf16: 2 units of roundoff
    try:
        from importlib.metadata import version
        cutlass = version("nvidia-cutlass")
    except Exception:
        cutlass = "?"
    row = {"name": name, "device": torch.cuda.get_device_name(), "torch": torch.__version__,
           "cutlass": cutlass,
           "sched_env": {k: v for k, v in os.environ.items() if k.startswith("EX12_")}}
    cases = SHAPES if shapes else [CASE]
    if not shapes:
        fails, worst = [], 0.0
        for i, (M, N, K, act) in enumerate(SMALL_CASES):
            A, B, bias = _inputs(M, N, K, 100 + i)
            try:
                rel, why = _check(op(A, B, bias, act), A, B, bias, act, ref, tol, rel_bound)
            except Exception as e:  # refused or crashed: the variant fails
                rel, why = float("nan"), f"{type(e).__name__}: {str(e).splitlines()[0][:150]}"
            worst = max(worst, rel) if rel == rel else worst
            if why:
                fails.append(f"{M}x{N}x{K} {act}: {why}")
        row["small_worst_rel"] = worst
        row["small_fails"] = fails
        torch.cuda.synchronize()
    row["cases"] = []
    for case in cases:
        g = torch.Generator(device="cuda").manual_seed(0)
        A, B, bias, act = ref.bench_inputs(case, torch.bfloat16, "cuda", g)
        flops = ref.traffic(case, torch.bfloat16, "forward")["flops"]
        fns = {"addmm": lambda: ref.addmm(A, B, bias),
               "linear_act": lambda: ref.linear_act(A, B, bias, act),
               "variant": lambda: op(A, B, bias, act)}
        t = _time_rounds(fns, rounds)
        us = {n: _median(v) for n, v in t.items()}
        r = {"M": case["M"], "N": case["N"], "K": case["K"], "rounds": t,
             "us": round(us["variant"], 1), "addmm_us": round(us["addmm"], 1),
             "linear_us": round(us["linear_act"], 1),
             "spread": round(max(t["variant"]) - min(t["variant"]), 1),
             "tflops": round(flops / us["variant"] / 1e6, 1),
             "addmm_tflops": round(flops / us["addmm"] / 1e6, 1),
             "of_addmm": us["addmm"] / us["variant"], "x_linear": us["linear_act"] / us["variant"]}
        rel, why = _check(op(A, B, bias, act), A, B, bias, act, ref, tol, rel_bound,
                          elementwise=False)
        r["rel_err"], r["check"] = rel, why
        del A, B, bias
        torch.cuda.empty_cache()
        row["cases"].append(r)
        print(json.dumps({"progress": f"{case['M']}x{case['N']}x{case['K']}",
                          "us": r["us"], "of_addmm": round(r["of_addmm"], 4)}), flush=True)
    print(json.dumps(row), flush=True)


# --- the parent ----------------------------------------------------------------------------------

def run_child(args: list, log_path: Path, env_extra: dict | None = None,
              timeout: int = 600) -> tuple[dict | None, str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]), "PYTHONUNBUFFERED": "1", **(env_extra or {})}
    for v in SCHED_ENV.values():  # only the variant's own scheduler arguments
        if v not in (env_extra or {}):
            env.pop(v, None)
    # a session of its own, so that a child past its limit is stopped with its compilers
    proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--child", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            cwd=ROOT, start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
        code = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        stdout, stderr = proc.communicate()
        stdout = f"timed out after {timeout} s\n{stdout}"
        code = -1
    text = stdout + "\n--- stderr ---\n" + stderr
    log_path.write_text(text)
    lines = [l for l in text.split("\n--- stderr ---\n")[0].splitlines()
             if l.startswith("{") and '"progress"' not in l]
    if not lines:  # (a row printed before a crash at exit still counts)
        err = text.split("\n--- stderr ---\n")[-1].strip() or text
        # the traceback's last exception (a BuildError's summary, a RuntimeError): its lines
        m = list(re.finditer(r"(?m)^[\w.]*(Error|Exception|Expired)\b[^\n]*", err))
        snippet = err[m[-1].start():] if m else err[-800:]
        return None, "\n".join(snippet.strip().splitlines()[:8])
    return json.loads(lines[-1]), ""


def build_all(names: list, base: Path, out: Path, jobs: int | None) -> dict:
    """The distinct builds of `names`, side by side: {name: (tree, error or '')}."""
    trees = {}
    for n in names:
        key = build_key(n)
        if key not in trees:  # named after the first variant that needs it ("default" if so)
            tree_name = "default" if key == build_key("default") else n
            trees[key] = make_tree(tree_name, VARIANTS[n][1], base, out)
    cores = os.cpu_count() or 4
    workers = jobs or max(1, min(len(trees), cores - 2))
    max_jobs = str(max(1, min(2, cores // workers)))  # ninja jobs a build: .cu and .cpp
    log(f"building {len(trees)} distinct trees ({', '.join(t.name for t in trees.values())}), "
        f"{workers} at a time, MAX_JOBS={max_jobs}")
    results = {}
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        futs = {pool.submit(run_child, ["build", str(t)], out / f"build-{t.name}.log",
                            {"MAX_JOBS": max_jobs}, 900): key for key, t in trees.items()}
        for f in concurrent.futures.as_completed(futs):
            key = futs[f]
            built, err = f.result()
            results[key] = (trees[key], err, built)
            if built:
                log(f"built {trees[key].name} in {built['built_s']} s")
            else:
                log(f"BUILD FAILED {trees[key].name}: " + " / ".join(err.splitlines()[:4]))
    return {n: results[build_key(n)] for n in names}


def sched_env(sched: dict) -> dict:
    return {SCHED_ENV[k]: str(v) for k, v in sched.items()}


def fmt_row(r: dict, what: str = "") -> str:
    if r.get("error"):
        return f"{r['label']:26s} {'-':>7s} {'':7s} {'':7s} {'':6s} {'':15s} {'':6s}  " \
               f"{r['error'][:200]}"
    c = r["cases"][0]
    fails = r.get("small_fails") or []
    check = ("ok" if not c["check"] and not fails else
             "FAIL " + "; ".join(([c["check"]] if c["check"] else []) + fails)[:70])
    check = f"{c['rel_err']:.2e} {check}"
    return (f"{r['label']:26s} {c['us']:7.1f} {c['tflops']:7.1f} {c['of_addmm']:7.2%} "
            f"{c['x_linear']:6.3f} {c['addmm_us']:7.1f}/{c['linear_us']:7.1f} {c['spread']:6.1f}  "
            f"{check}" + (f"  | {what}" if what else ""))


HEADER = (f"{'variant':26s} {'us':>7s} {'TFLOP/s':>7s} {'%addmm':>7s} {'x lin':>6s} "
          f"{'addmm/lin (us)':>15s} {'spread':>6s}  rel err, check")


def sweep(names: list, extra: dict, a, out: Path, base: Path):
    built = build_all(names, base, out, a.jobs)
    (out / "builds.json").write_text(json.dumps(
        {n: {"tree": str(t), "error": e, "build": b} for n, (t, e, b) in built.items()},
        indent=2))
    if a.build_only:
        print("\nbuilds:")
        for n in names:
            t, e, b = built[n]
            print(f"  {n:26s} tree {t.name:22s} " + (f"ok, {b['built_s']} s" if b else
                                                      f"FAILED: {e.splitlines()[0] if e else ''}"),
                  flush=True)
        return
    rows = []
    suffix = ("+" + ",".join(f"{k}={v}" for k, v in extra.items())) if extra else ""
    jobs = list(names)
    if "default" in names:
        jobs.append("default")  # the same again: the run's noise
    for i, n in enumerate(jobs):
        label = n + suffix + (" (again)" if i >= len(names) else "")
        sched = {**VARIANTS[n][2], **extra}
        tree, err, _ = built[n]
        if err:
            rows.append({"name": n, "label": label,
                         "error": "build failed: " + " / ".join(err.splitlines()[:3])})
            log(f"{label}: build failed")
            continue
        last = i == len(jobs) - 1
        if time.perf_counter() - T0 > a.deadline - (0 if last else 15):
            rows.append({"name": n, "label": label, "error": "skipped: past --deadline"})
            log(f"{label}: skipped (past the deadline)")
            continue
        log(f"{label}: checks + timings (sched {sched or 'default'})")
        row, err = run_child(["run", str(tree), n, str(a.rounds)],
                             out / ("run-" + re.sub(r"[^\w.=+-]+", "_", label) + ".log"),
                             sched_env(sched), 300)
        if row is None:
            rows.append({"name": n, "label": label, "error": f"run failed: {err[:300]}"})
            log(f"{label}: RUN FAILED: {err.splitlines()[0] if err else '?'}")
            continue
        row["label"] = label
        rows.append(row)
        log(fmt_row(row))
    (out / "results.json").write_text(json.dumps(rows, indent=2))

    shape_rows = []
    if a.shapes:
        ok = [r for r in rows if not r.get("error") and not r["cases"][0]["check"]
              and not r.get("small_fails") and "(again)" not in r["label"]]
        best = [r["name"] for r in sorted(ok, key=lambda r: -r["cases"][0]["of_addmm"])[:3]]
        if "default" not in best and any(r["name"] == "default" for r in ok):
            best.append("default")
        for n in best:
            if time.perf_counter() - T0 > a.deadline + a.shapes_extra:
                shape_rows.append({"name": n, "label": n, "error": "skipped: out of time"})
                log(f"shapes {n}: skipped (out of time)")
                continue
            log(f"shapes {n}: " + ", ".join(f"{s['M']}x{s['N']}x{s['K']}" for s in SHAPES))
            row, err = run_child(["run", str(built[n][0]), n, str(a.rounds), "--shapes"],
                                 out / f"shapes-{n}.log",
                                 sched_env({**VARIANTS[n][2], **extra}), 300)
            if row is None:
                shape_rows.append({"name": n, "label": n, "error": f"failed: {err[:200]}"})
                continue
            row["label"] = n
            shape_rows.append(row)
        (out / "shapes.json").write_text(json.dumps(shape_rows, indent=2))

    lines = []
    if shape_rows:
        lines.append("\nother shapes (bf16 relu): us, %addmm, x lin, rel err per shape")
        for r in shape_rows:
            if r.get("error"):
                lines.append(f"  {r['label']:24s} {r['error']}")
                continue
            cells = [f"{c['M']}x{c['N']}x{c['K']}: {c['us']:8.1f} us {c['of_addmm']:6.2%} "
                     f"x{c['x_linear']:.3f} {c['rel_err']:.1e}{' ' + c['check'] if c['check'] else ''}"
                     for c in r["cases"]]
            lines.append(f"  {r['label']:24s} " + " | ".join(cells))
    r0 = next((r for r in rows if r.get("device")), {})
    dev = f"{r0.get('device', '?')}, torch {r0.get('torch', '?')}, cutlass {r0.get('cutlass', '?')}"
    lines.append(f"\nexercise 12, CUTLASS variants, {CASE['M']}x{CASE['N']}x{CASE['K']} bf16 relu, {dev}, "
                 f"{a.rounds} rounds; {time.perf_counter() - T0:.0f} s in all; logs in {out}")
    lines.append(HEADER)
    ordered = sorted(rows, key=lambda r: -(r["cases"][0]["of_addmm"] if not r.get("error")
                                           else -1))
    for r in ordered:
        lines.append(fmt_row(r, VARIANTS[r["name"]][0][:70] if r["name"] in VARIANTS else ""))
    text = "\n".join(lines)
    (out / "table.txt").write_text(text + "\n")
    print(text, flush=True)


def main():
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        if sys.argv[2] == "build":
            child_build(Path(sys.argv[3]))
        else:
            child_run(Path(sys.argv[3]), sys.argv[4], int(sys.argv[5]), "--shapes" in sys.argv)
        return
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", help="comma-separated variant names (default: the default set)")
    p.add_argument("--all", action="store_true", help="every variant, not only the default set")
    p.add_argument("--list", action="store_true", help="print the variants and exit")
    p.add_argument("--set", default="", help="scheduler arguments for every chosen variant, "
                   "e.g. swizzle=8,raster=M (keys: " + ", ".join(SCHED_ENV) + ")")
    p.add_argument("--build-only", action="store_true", help="only the builds (no GPU needed)")
    p.add_argument("--sizes", action="store_true", help="no GPU, ~2 min: each build's stage "
                   "count and shared memory (a host program of the builds' types)")
    p.add_argument("--shapes", action="store_true",
                   help="then the best 3 (and default) at " +
                   ", ".join(f"{s['M']}x{s['N']}x{s['K']}" for s in SHAPES))
    p.add_argument("--rounds", type=int, default=2, help="timing rounds per process (2)")
    p.add_argument("--jobs", type=int, help="builds at a time (default: cores - 2)")
    p.add_argument("--deadline", type=float, default=340.0,
                   help="seconds from the start after which no new variant row starts (340)")
    p.add_argument("--shapes-extra", type=float, default=20.0,
                   help="seconds past --deadline that --shapes rows may still start (20)")
    p.add_argument("--out", help="folder for logs, diffs and results (default: $OUT/"
                   "12_cutlass_variants if $OUT is set, else a temporary folder)")
    p.add_argument("--keep", action="store_true", help="keep the variant trees and their builds")
    p.add_argument("--trees", help="folder for the variant trees (default: a new temporary "
                   "folder); with --keep, a later run with the same --trees reuses the builds")
    a = p.parse_args()
    if a.list:
        for n, (why, knobs, sched) in VARIANTS.items():
            mark = "*" if n in DEFAULT_SET else " "
            print(f"{mark} {n:24s} build {json.dumps(knobs) if knobs else '(default)'} "
                  f"sched {json.dumps(sched) if sched else '-'}\n      {why}")
        return
    names = a.only.split(",") if a.only else (list(VARIANTS) if a.all else list(DEFAULT_SET))
    unknown = [n for n in names if n not in VARIANTS]
    if unknown:
        p.error(f"unknown variant(s) {unknown}; known: {', '.join(VARIANTS)}")
    extra = {}
    for item in filter(None, a.set.split(",")):
        k, _, v = item.partition("=")
        if k not in SCHED_ENV or not v:
            p.error(f"--set {item!r}: keys are {', '.join(SCHED_ENV)}")
        extra[k] = v
    if a.sizes:
        out = None
    elif a.out:
        out = Path(a.out)
    elif os.environ.get("OUT"):
        out = Path(os.environ["OUT"]) / "12_cutlass_variants"
    else:
        out = Path(tempfile.mkdtemp(prefix="ex12-variants-out-"))
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
    if a.trees:
        base = Path(a.trees).resolve()
        base.mkdir(parents=True, exist_ok=True)
    else:
        base = Path(tempfile.mkdtemp(prefix="ex12-variants-"))
    log(f"{len(names)} variants ({', '.join(names)}){' with ' + a.set if a.set else ''}; "
        f"out {out}; trees {base}")
    try:
        if a.sizes:
            return sizes_report(names, base / "sizes")
        sweep(names, extra, a, out, base)
    finally:
        if not a.keep:
            sys.path.insert(0, str(ROOT))
            from grader.build import CACHE, tree_tag
            for t in base.iterdir():  # only the trees this script makes, and their builds
                if t.is_dir() and (t.name in VARIANTS or t.name == "sizes"):
                    shutil.rmtree(CACHE / "build" / tree_tag(t), ignore_errors=True)
                    shutil.rmtree(t, ignore_errors=True)
            if not a.trees:
                shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
