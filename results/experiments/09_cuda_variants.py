"""Exercise 09 (rmsnorm_quant), CUDA track: the rows kernel's variants at the graded case,
(32768, 4096) bf16 -> int8 + fp32 scales, built, checked and timed side by side.

Each variant is solutions/09_rmsnorm_quant/cuda with some of the constants at the top of
rmsnorm_quant_kernels.cu set to other values (a text edit of a temporary copy; the file's comments
say what each trades). Every variant is built with the grader's build (grader.build.build) and
checked and timed in a process of its own: the ops of one namespace (ex09_cuda) register once per
process. All builds first, side by side (one process per core, less two), then the timings one
at a time, so no compiler competes with them: the Triton kernel, every variant, and "default"
once more at the end (the run's noise).

    python results/experiments/09_cuda_variants.py                # GPU: build, check, time
    python results/experiments/09_cuda_variants.py --only default,first
    python results/experiments/09_cuda_variants.py --nvcc         # no GPU needed: nvcc -c of
        # each variant's .cu as the grader compiles it, ptxas registers and spills (sm_90) and
        # the order of the graded kernel's loads, multiplies, barrier and stores in its SASS
    python results/experiments/09_cuda_variants.py --build-only   # no GPU needed: the builds

Whole run on a 16-core H200 machine: ~3-3.5 minutes (13 builds side by side, ~1 minute; then
15 timings of ~8-10 s: process start, build cache hit, copy, timing, checks). Columns:
  us          grader.timing.time_fn, the grader's method: triton.testing.do_bench median (L2
              flushed between calls), with the 20th-80th percentiles
  GB/s        reference.traffic's 402.8 MB per call over that time
  of copy     that over the copy bandwidth measured in the same process (a 2 GiB bf16 tensor
              copied: 4 GiB moved), as the grader's ceiling is
  check       q and scale against the exercise's float64 reference with the exercise's own
              rule (check_q of exercises/09_rmsnorm_quant/test_rmsnorm_quant.py: q exact except
              within 1 near a half-integer, scale rtol 1e-5), at the graded case and at odd shapes
              of each dtype (N = 1, 7, 4095, 4104, 16384, 65537, a misaligned view, zero rows);
              "dq1" counts the q that differ by 1 at the graded case (all near halves if ok)
The row "triton kernel" is the Triton solution's kernel launched directly (4 warps), the
same-run yardstick (~104 us on an H200, 2026-11-22).
"""
import argparse
import concurrent.futures
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EX = "09_rmsnorm_quant"
KERNELS = "rmsnorm_quant_kernels.cu"
M, N, EPS = 32768, 4096, 1e-6

# name -> (what it is, {constant: value}); every other constant keeps the file's default.
VARIANTS = {
    "default": ("the file as it is", {}),
    "first": ("the first version (136.4 us, 2026-11-22): each vector loaded, then used, in turn",
              {"kLoadsFirst": "false"}),
    "vpt2": ("256 threads of 2 vectors a row", {"kVecsPerThread": 2}),
    "vpt8": ("64 threads of 8 vectors, a block per row, __launch_bounds__(128)",
             {"kVecsPerThread": 8, "kSmallBlock": 128, "kSmallMinBlocks": 1}),
    "warp_rows": ("one warp per row (16 vectors a thread), 4 rows a block, shuffles only",
                  {"kVecsPerThread": 16, "kRowsPerBlock": 4, "kWarpRows": "true",
                   "kSmallBlock": 0, "kMaxBlockThreads": 128}),
    "separate": ("two exchanges (sum, then max): two barriers a row",
                 {"kPairedReduction": "false"}),
    "rows2": ("2 rows of 128 threads per 256-thread block", {"kRowsPerBlock": 2}),
    "lb128x10": ("__launch_bounds__(128, 10): <= 48 registers, 10 rows per SM",
                 {"kSmallBlock": 128, "kSmallMinBlocks": 10}),
    "lb128x12": ("__launch_bounds__(128, 12): <= 40 registers (spills), 12 rows per SM",
                 {"kSmallBlock": 128, "kSmallMinBlocks": 12}),
    "streaming": ("x by __ldcs, q by __stcs (evict-first)", {"kStreaming": "true"}),
    "lb128x10_streaming": ("lb128x10 and streaming together",
                           {"kSmallBlock": 128, "kSmallMinBlocks": 10, "kStreaming": "true"}),
    "persistent": ("resident grid looping over rows, w once, next row's x prefetched",
                   {"kPersistent": "true", "kSmallBlock": 128, "kSmallMinBlocks": 1}),
    "persistent_lb5": ("persistent, __launch_bounds__(128, 5): <= 102 registers",
                       {"kPersistent": "true", "kSmallBlock": 128, "kSmallMinBlocks": 5}),
}


def set_constants(text: str, values: dict) -> str:
    """`constexpr <type> <name> = <value>;` -> the new value, each name exactly once."""
    for name, value in values.items():
        pattern = re.compile(rf"^(constexpr \w+ {name} = )[^;]+;", re.M)
        text, n = pattern.subn(rf"\g<1>{value};", text)
        assert n == 1, f"{name}: {n} definitions in {KERNELS}"
    return text


def make_tree(name: str, base: Path) -> Path:
    """A copy of the solution's CUDA track with the variant's constants: the tree's path."""
    tree = base / name
    dst = tree / EX / "cuda"
    if dst.exists():
        shutil.rmtree(dst)
    shutil.copytree(ROOT / "solutions" / EX / "cuda", dst)
    cu = dst / KERNELS
    cu.write_text(set_constants(cu.read_text(), VARIANTS[name][1]))
    return tree


# --- without a GPU: registers --------------------------------------------------------------------

def nvcc_report(names, base: Path):
    """nvcc -c of each variant's .cu as grader/build.py compiles it (-O3 -lineinfo, common.cuh on
    the include path) for sm_90 with -Xptxas -v: the rows kernels' registers and spills."""
    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    for name in names:
        tree = make_tree(name, base)
        src = tree / EX / "cuda" / KERNELS
        out = subprocess.run([nvcc, "-O3", "-lineinfo", "-std=c++17", "-arch=sm_90",
                              "-Xptxas", "-v", "-I", str(ROOT / "include"), "-c", str(src),
                              "-o", str(tree / "k.o")], capture_output=True, text=True)
        if out.returncode:
            print(f"{name}: nvcc failed\n{out.stderr[-2000:]}")
            continue
        kernels, current = [], None
        for line in out.stderr.splitlines():
            m = re.search(r"Compiling entry function '(\S+)'", line)
            if m:
                current = demangle(m.group(1)) if "rows_kernel" in m.group(1) else None
                spill = 0
            m = re.search(r"(\d+) bytes spill stores", line)
            if m:
                spill = int(m.group(1))
            m = re.search(r"Used (\d+) registers", line)
            if m and current:
                kernels.append(f"{current} {m.group(1)}"
                               + (f" (spills {spill} B)" if spill else ""))
        print(f"{name:18s} " + "; ".join(kernels), flush=True)
        for kernel, order in sass_orders(tree / "k.o").items():
            print(f"{'':18s} {kernel} SASS in order: {order}", flush=True)


def sass_orders(obj: Path) -> dict:
    """The bf16 16-byte kernels' global loads, multiplies, barriers and stores in program order
    ("LDGx8 FMULx32 BAR ...": every load first; the first version reads "LDGx2 FMULx8 LDGx2
    ..."), by cuobjdump (CUDA's, or the one Triton ships); {} if there is none."""
    tool = shutil.which("cuobjdump")
    if not tool:
        try:
            import triton
            cand = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
            tool = str(cand) if cand.exists() else None
        except ImportError:
            tool = None
    if not tool:
        return {}
    out = subprocess.run([tool, "-sass", str(obj)], capture_output=True, text=True).stdout
    orders, ops = {}, None
    for line in out.splitlines():
        if "Function :" in line:
            sym = line.split("Function :", 1)[1].strip()
            ops = [] if re.search(r"rows_kernelI13__nv_bfloat16Li8E", sym) else None
            if ops is not None:
                orders[demangle(sym)] = ops
            continue
        m = re.search(r"\b(LDG|FMUL|BAR|STG)\b", line) if ops is not None else None
        if m:
            ops.append(m.group(1))
    return {k: " ".join(f"{op}x{n}" if n > 1 else op for op, n in runs(v))
            for k, v in orders.items()}


def demangle(sym: str) -> str:
    """bf16<VEC,VPT,MAXT,MINB> for rows_kernel<__nv_bfloat16, VEC, VPT, MAXT, MINB>."""
    m = re.search(r"rows_kernelI(\w+?)Li(\d+)ELi(\d+)ELi(\d+)ELi(\d+)E", sym)
    if not m:
        return sym
    t = {"13__nv_bfloat16": "bf16", "6__half": "f16", "f": "f32"}.get(m.group(1), m.group(1))
    return f"{t}<{','.join(m.groups()[1:])}>"


def runs(ops: list) -> list:
    out = []
    for op in ops:
        if out and out[-1][0] == op:
            out[-1][1] += 1
        else:
            out.append([op, 1])
    return out


# --- on the GPU -----------------------------------------------------------------------------------

def child_build(tree: Path):
    sys.path.insert(0, str(ROOT))
    from grader.build import build
    from grader.discover import discover
    ex = discover(only="09")[0]
    built = build(tree, ex, ex.tracks["cuda"])
    print(json.dumps({"built_s": round(built.seconds, 1)}))


def copy_gbs(time_fn) -> float:
    import torch
    a = torch.empty(1 << 30, dtype=torch.bfloat16, device="cuda").normal_()  # 2 GiB
    b = torch.empty_like(a)
    ms = time_fn(lambda: b.copy_(a))["ms"]
    del a, b
    torch.cuda.empty_cache()
    return 2 * 2 * (1 << 30) / (ms * 1e-3) / 1e9


def load_check_q():
    """check_q of the exercise's own tests (the rule the grader applies to q and scale)."""
    sys.path.insert(0, str(ROOT / "exercises" / EX))
    spec = importlib.util.spec_from_file_location("ex09_tests",
                                                  ROOT / "exercises" / EX / "test_rmsnorm_quant.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.check_q


def odd_shape_checks(op, ref, check_q, device="cuda") -> list:
    """The variant at shapes that take every path: short rows, N not a multiple of the vector,
    rows longer than a block, a misaligned view, an all-zero row. Failures as strings."""
    import torch
    g = torch.Generator(device=device).manual_seed(1)
    fails = []
    for dtype in (torch.bfloat16, torch.float16, torch.float32):
        cases = [(3, 1), (5, 7), (1000, 256), (7, 4095), (9, 4104), (17, 4096), (33, 8192),
                 (5, 16384), (3, 32768), (3, 65537), (2, 3, 1000)]
        for shape in cases:
            x = torch.randn(shape, generator=g, device=device).to(dtype)
            w = (1 + 0.5 * torch.randn(shape[-1], generator=g, device=device)).to(dtype)
            if shape == (17, 4096):
                x[3] = 0  # an all-zero row: scale 1, q 0
            views = [("contiguous", x)]
            if len(shape) == 2 and shape[1] > 1:
                wide = torch.randn(shape[0], shape[1] + 1, generator=g, device=device).to(dtype)
                views.append(("misaligned view", wide[:, 1:]))
            for what, xi in views:
                try:
                    q, s = op(xi, w, EPS)
                    check_q(q, s, xi, w, EPS, ref, shape=shape)
                except Exception as e:  # Mismatch, or an error the op raised
                    fails.append(f"{dtype} {shape} {what}: {str(e).splitlines()[0][:160]}")
    return fails


def child_run(tree: Path, name: str):
    sys.path.insert(0, str(ROOT))
    import torch
    from grader.build import build
    from grader.discover import discover
    from grader.timing import time_fn
    ex = discover(only="09")[0]
    build(tree, ex, ex.tracks["cuda"])  # cached by the build phase: loads the library
    op = torch.ops.ex09_cuda.rmsnorm_quant
    sys.path.insert(0, str(ROOT / "exercises" / EX))
    import reference as ref
    out = {"name": name, "copy_gbs": round(copy_gbs(time_fn))}
    case = {"M": M, "N": N}
    nbytes = ref.traffic(case, torch.bfloat16, "forward")["bytes"]
    g = torch.Generator(device="cuda").manual_seed(0)
    x, w, eps = ref.bench_inputs(case, torch.bfloat16, "cuda", g)
    t = time_fn(lambda: op(x, w, eps))
    out.update(us=round(t["ms"] * 1e3, 1), p20=round(t["p20"] * 1e3, 1),
               p80=round(t["p80"] * 1e3, 1), gbs=round(nbytes / (t["ms"] * 1e-3) / 1e9))
    out["of_copy"] = round(out["gbs"] / out["copy_gbs"], 3)
    q, s = op(x, w, eps)
    want_q, want_s = ref.reference(x, w, eps)  # fp32 eager: for the dq / scale statistics
    dq = (q.int() - want_q.int()).abs()
    out["dq1"] = int((dq == 1).sum())
    out["dq_max"] = int(dq.max())
    out["scale_rel"] = float(((s - want_s).abs() / want_s.abs()).max())
    try:
        check_q = load_check_q()
    except Exception as e:  # the test module needs hypothesis and grader.*: say so, go on
        out["check"] = f"check_q not importable ({e}); dq_max={out['dq_max']}"
    else:
        fails = []
        try:
            check_q(q, s, x, w, eps, ref, shape=(M, N))
        except Exception as e:
            fails.append(f"graded case: {str(e).splitlines()[0][:200]}")
        del x, q, s, want_q, want_s
        torch.cuda.empty_cache()
        fails += odd_shape_checks(op, ref, check_q)
        out["check"] = "ok" if not fails else f"FAIL {len(fails)}: " + " | ".join(fails[:3])
    print(json.dumps(out), flush=True)


def child_triton():
    """The Triton solution's kernel launched directly at 4 warps (09_first_kernel.py's row)."""
    sys.path.insert(0, str(ROOT))
    import torch
    import triton
    from grader.timing import time_fn
    sys.path.insert(0, str(ROOT / "exercises" / EX))
    import reference as ref
    text = (ROOT / "solutions" / EX / "triton" / "rmsnorm_quant.py").read_text()
    path = Path(tempfile.mkdtemp(prefix="ex09-triton-")) / "ex09_triton_direct.py"
    path.write_text(text.replace("ex09_triton::", "ex09_direct::"))
    spec = importlib.util.spec_from_file_location("ex09_triton_direct", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)

    def run(x, w, eps):
        q = torch.empty(x.shape, dtype=torch.int8, device=x.device)
        scale = torch.empty(x.shape[0], dtype=torch.float32, device=x.device)
        mod._rmsnorm_quant_kernel[(x.shape[0],)](
            x, w, q, scale, x.stride(0), x.stride(1), x.shape[1], eps,
            BLOCK_N=triton.next_power_of_2(x.shape[1]), ONE_BLOCK=True, num_warps=4)
        return q, scale
    case = {"M": M, "N": N}
    nbytes = ref.traffic(case, torch.bfloat16, "forward")["bytes"]
    out = {"name": "triton kernel", "copy_gbs": round(copy_gbs(time_fn))}
    g = torch.Generator(device="cuda").manual_seed(0)
    x, w, eps = ref.bench_inputs(case, torch.bfloat16, "cuda", g)
    t = time_fn(lambda: run(x, w, eps))
    out.update(us=round(t["ms"] * 1e3, 1), p20=round(t["p20"] * 1e3, 1),
               p80=round(t["p80"] * 1e3, 1), gbs=round(nbytes / (t["ms"] * 1e-3) / 1e9))
    out["of_copy"] = round(out["gbs"] / out["copy_gbs"], 3)
    q, s = run(x, w, eps)
    want_q, _ = ref.reference(x, w, eps)
    dq = (q.int() - want_q.int()).abs()
    out.update(dq1=int((dq == 1).sum()), dq_max=int(dq.max()), check="(not checked)")
    print(json.dumps(out), flush=True)


def run_child(args: list, timeout: int = 600) -> tuple[dict | None, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, __file__, "--child", *args], capture_output=True,
                         text=True, env=env, timeout=timeout, cwd=ROOT)
    lines = [l for l in out.stdout.splitlines() if l.startswith("{")]
    if out.returncode or not lines:
        return None, (out.stderr or out.stdout)[-1500:]
    return json.loads(lines[-1]), ""


def build_all(names, base: Path) -> dict:
    """Every variant's tree, built side by side, each in a process of its own (the build also
    loads the library, and a namespace registers once per process): {name: (tree, error)}."""
    trees = {n: make_tree(n, base) for n in names}
    cores = os.cpu_count() or 4
    workers = max(1, min(len(names), cores - 2))
    os.environ.setdefault("MAX_JOBS", str(max(1, cores // len(names))))  # ninja jobs a build
    start = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        futures = {n: pool.submit(run_child, ["build", str(trees[n])]) for n in names}
        results = {n: f.result() for n, f in futures.items()}
    print(f"built {len(names)} variants, {workers} at a time, in "
          f"{time.perf_counter() - start:.0f} s", flush=True)
    out = {}
    for n in names:
        built, err = results[n]
        if built is None:
            print(f"{n}: build failed\n{err}", flush=True)
        out[n] = (trees[n], None if built else err)
    return out


def gpu_sweep(names, base: Path, build_only: bool = False):
    start = time.perf_counter()
    print(f"{len(names)} variants of {KERNELS}; (M, N) = ({M}, {N}) bf16, 402.8 MB per call",
          flush=True)
    built = build_all(names, base)  # first, so no compiler competes with the timings
    if build_only:
        return
    rows = []
    jobs = [("triton kernel", ["triton"])]
    jobs += [(n, ["run", str(built[n][0]), n]) for n in names if built[n][1] is None]
    if "default" in names and built["default"][1] is None:  # the same again: the run's noise
        jobs.append(("default", ["run", str(built["default"][0]), "default"]))
    for name, args in jobs:  # one at a time: the GPU to itself
        row, err = run_child(args)
        if row is None:
            print(f"{name}: failed\n{err}", flush=True)
            continue
        rows.append(row)
        show(row)
    print(f"\nsorted ({time.perf_counter() - start:.0f} s in all):")
    print(f"{'variant':18s} {'us':>7s} {'p20-p80':>13s} {'GB/s':>6s} {'of copy':>8s}  "
          f"{'dq1':>5s}  check  | what")
    for r in sorted(rows, key=lambda r: r["us"]):
        what = VARIANTS[r["name"]][0] if r["name"] in VARIANTS else "the Triton solution's kernel"
        print(f"{r['name']:18s} {r['us']:7.1f} {r['p20']:6.1f}-{r['p80']:6.1f} {r['gbs']:6d} "
              f"{r['of_copy']:7.1%}  {r['dq1']:5d}  {r['check'][:60]}  | {what}")


def show(r: dict):
    print(f"{r['name']:16s} {r['us']:7.1f} us (p20-p80 {r['p20']}-{r['p80']})  {r['gbs']} GB/s  "
          f"{r['of_copy']:.1%} of copy ({r['copy_gbs']} GB/s)  dq1={r['dq1']} "
          f"dq_max={r['dq_max']}  check: {r['check']}", flush=True)


def main():
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        kind = sys.argv[2]
        if kind == "build":
            child_build(Path(sys.argv[3]))
        elif kind == "run":
            child_run(Path(sys.argv[3]), sys.argv[4])
        else:
            child_triton()
        return
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--only", help="comma-separated variant names (default: all)")
    p.add_argument("--nvcc", action="store_true", help="no GPU: registers and spills per variant")
    p.add_argument("--keep", action="store_true", help="keep the variant trees and builds")
    p.add_argument("--build-only", action="store_true",
                   help="only the side-by-side builds (no GPU needed): do they compile and link")
    a = p.parse_args()
    names = a.only.split(",") if a.only else list(VARIANTS)
    unknown = [n for n in names if n not in VARIANTS]
    if unknown:
        p.error(f"unknown variant(s) {unknown}; known: {', '.join(VARIANTS)}")
    base = Path(tempfile.mkdtemp(prefix="ex09-variants-"))
    try:
        if a.nvcc:
            nvcc_report(names, base)
        else:
            gpu_sweep(names, base, build_only=a.build_only)
    finally:
        if not a.keep:
            shutil.rmtree(base, ignore_errors=True)
            if not a.nvcc:  # the builds the grader's cache holds for these temporary trees
                sys.path.insert(0, str(ROOT))
                from grader.build import CACHE, tree_tag
                for n in names:
                    shutil.rmtree(CACHE / "build" / tree_tag(base / n), ignore_errors=True)


if __name__ == "__main__":
    main()
