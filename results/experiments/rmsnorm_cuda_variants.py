"""Build, check and time variants of the 06 CUDA solution at (8, 4096, 4096) bf16 (GPU only).

    python results/experiments/rmsnorm_cuda_variants.py [--list] [--no-baselines] [NAME ...]

A variant is solutions/06_rmsnorm/cuda with some of the constants at the top of
rmsnorm_kernels.cu changed (VARIANTS below: a text edit of each `constexpr ... NAME = value;` on
a copy in a temporary tree). One run, about 3-4 minutes on a 16-core H200 machine:

  1. the copy bandwidth (grader.timing: a device copy of 1 GiB of bf16, 2 GiB moved), once now
     and once at the end;
  2. every variant built at once, each in a process of its own, by the grader's own build
     (grader.build: torch.utils.cpp_extension.load + ninja, the grader's flags), and its kernel
     file compiled once more by nvcc with --resource-usage for the registers and spills of the
     bf16 16-byte kernels; meanwhile, unless --no-baselines, one process times the baselines
     (F.rms_norm, torch.compile of the reference, the Triton solution, Liger when installed);
  3. then, one at a time, a process per variant (the ops of one namespace are registered once
     per process) that checks y, dx and dw against the exercise's reference in float64 with the
     exercise's tolerances (dw's grows with the rows, as in its checks) at 16-byte and scalar
     paths, short, long and single rows, four dtypes and the graded case itself (plus the same
     dw bits twice), and times, by triton.testing.do_bench medians (grader.timing.time_fn, L2
     flushed): the forward, the backward op alone (rmsnorm_bwd on a saved rstd), and
     forward+backward (rmsnorm(x, w).backward(dy)), each as a fraction of the copy bandwidth by
     the bytes of the exercise's traffic model (backward: 805.5 MB).

Prints a JSON line per variant as it finishes, a table at the end, and the best forward and
backward configurations: the forward's constants (kFwd*) and the backward's (kBwd*) are
independent, so the best of each combine. Variants that fail a check are never "best".
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "solutions" / "06_rmsnorm" / "cuda"
KERNELS = "rmsnorm_kernels.cu"
SHAPE = (8, 4096, 4096)
EPS = 1e-6

# name -> {constant: value} over the solution's defaults (see rmsnorm_kernels.cu, Configuration)
OLD_BWD = {"kBwdRowsAhead": 0, "kBwdVecsPerThread": 2, "kBwdBlocksPerSM": 4, "kBwdMinBlocksPerSM": 1}
VARIANTS = {
    "default": {},
    # the first solution (2026-11-21): one block per row forward, backward without prefetch
    "old": {"kFwdPersistent": "false", "kFwdMinBlocksPerSM": 1, **OLD_BWD},
    # forward variants (the backward at its default)
    "fwd_row": {"kFwdPersistent": "false", "kFwdMinBlocksPerSM": 1},
    "fwd_row_vpt2": {"kFwdPersistent": "false", "kFwdMinBlocksPerSM": 1, "kFwdVecsPerThread": 2},
    "fwd_regs": {"kFwdRowsAhead": 1},
    "fwd_regs_min4": {"kFwdRowsAhead": 1, "kFwdMinBlocksPerSM": 4},
    "fwd_ring2": {"kFwdRowsAhead": 2},
    "fwd_ring4": {"kFwdRowsAhead": 4},
    "fwd_ring3_min2": {"kFwdMinBlocksPerSM": 2},
    "fwd_ring3_min4": {"kFwdMinBlocksPerSM": 4},
    "fwd_ring3_vpt2": {"kFwdVecsPerThread": 2, "kFwdMinBlocksPerSM": 2},
    # backward variants (the forward at its default)
    "bwd_old": dict(OLD_BWD),
    "bwd_regs": {"kBwdRowsAhead": 1},
    "bwd_ring2": {"kBwdRowsAhead": 2},
    "bwd_ring4": {"kBwdRowsAhead": 4},
    "bwd_ring3_min1": {"kBwdMinBlocksPerSM": 1},
    "bwd_ring3_min3": {"kBwdMinBlocksPerSM": 3, "kBwdBlocksPerSM": 3},
    "bwd_ring3_vpt2": {"kBwdVecsPerThread": 2, "kBwdMinBlocksPerSM": 1},
}


def edit(text: str, consts: dict) -> str:
    for name, value in consts.items():
        pat = re.compile(rf"(constexpr \w+ {name} = )[^;]+;")
        assert len(pat.findall(text)) == 1, f"{name} is not one `constexpr ... {name} = ...;`"
        text = pat.sub(rf"\g<1>{str(value).lower() if isinstance(value, bool) else value};", text)
    return text


def make_tree(base: Path, name: str) -> Path:
    tree = base / name
    dst = tree / "06_rmsnorm" / "cuda"
    shutil.copytree(SRC, dst)
    (dst / KERNELS).write_text(edit((dst / KERNELS).read_text(), VARIANTS[name]))
    return tree


CACHE = {}  # GRADER_CACHE for the children: the variants' builds stay in the temporary folder


def run_py(*args, timeout=300):
    env = {**os.environ, **CACHE,
           "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    try:
        out = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True,
                             env=env, cwd=ROOT, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout} s (a hung kernel?)"}
    lines = [l for l in out.stdout.splitlines() if l.startswith("{")]
    if lines:
        return json.loads(lines[-1])
    return {"error": (out.stderr.strip() or out.stdout.strip())[-600:]}


# --- in a child process ------------------------------------------------------------------------

def child_build(tree: Path) -> dict:
    """The grader's build of the variant, then ptxas' registers for its bf16 16-byte kernels."""
    import torch
    from grader.build import build
    from grader.discover import EXERCISES, load_exercise
    ex = load_exercise(EXERCISES / "06_rmsnorm")
    t0 = time.perf_counter()
    build(tree, ex, ex.tracks["cuda"])
    out = {"build_s": round(time.perf_counter() - t0, 1)}
    major, minor = torch.cuda.get_device_capability()
    nvcc = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda")) / "bin" / "nvcc"
    src = tree / "06_rmsnorm" / "cuda" / KERNELS
    cmd = [str(nvcc), "-c", str(src), "-o", str(src.with_suffix(".o")), "--resource-usage",
           f"-I{ROOT / 'include'}", "-O3", "-std=c++17", "--expt-relaxed-constexpr",
           f"-gencode=arch=compute_{major}{minor},code=sm_{major}{minor}",
           "-D__CUDA_NO_HALF_OPERATORS__", "-D__CUDA_NO_HALF_CONVERSIONS__",
           "-D__CUDA_NO_BFLOAT16_CONVERSIONS__", "-D__CUDA_NO_HALF2_OPERATORS__"]
    log = subprocess.run(cmd, capture_output=True, text=True).stderr
    kernel = None
    for line in log.splitlines():
        m = re.search(r"Function properties for (\S+)", line) or re.search(r"Compiling entry function '(\S+)'", line)
        if m:
            kernel = m.group(1)
        m = re.search(r"REG:(\d+)", line) or re.search(r"Used (\d+) registers", line)
        if m and kernel and "__nv_bfloat16Li8E" in kernel:
            key = "fwd" if "rmsnorm_fwd_kernel" in kernel else "bwd" if "rmsnorm_bwd_kernel" in kernel else None
            if key:
                out[f"{key}_regs"] = int(m.group(1))
        m = re.search(r"(\d+) bytes spill stores", line)
        if m and kernel and "__nv_bfloat16Li8E" in kernel and int(m.group(1)):
            key = "fwd" if "rmsnorm_fwd_kernel" in kernel else "bwd"
            out[f"{key}_spill"] = int(m.group(1))
    return out


def _inputs(shape, dtype, seed):
    from grader.strategies import randn
    x = randn(shape, seed=seed, dtype=dtype, device="cuda")
    w = randn(shape[-1], seed=seed + 1, dtype=dtype, device="cuda", scale=0.5, offset=1.0)
    dy = randn(shape, seed=seed + 2, dtype=dtype, device="cuda")
    return x, w, dy


def check(rmsnorm, ex, ref) -> str:
    """'ok', or the first mismatch: the exercise's checks in miniature, on the GPU."""
    import math
    import torch
    from grader import check as chk
    from grader.testing import expected_grads, sum_tol, value_and_grads
    bf16, f16, f32, f64 = torch.bfloat16, torch.float16, torch.float32, torch.float64
    # 16-byte and scalar (N % 8 != 0 for bf16) paths; one row, fewer rows than blocks, short
    # rows (fewer threads), rows with a tail past the registers (4104, 65536), four dtypes
    cases = [((4, 4096), bf16), ((1, 4096), bf16), ((1000, 4104), bf16), ((33, 65536), bf16),
             ((300, 4097), bf16), ((2048, 1000), bf16), ((5, 8), bf16), ((4096,), bf16),
             ((3, 700, 4096), bf16), ((300, 4096), f16), ((300, 4096), f32), ((37, 1000), f32),
             ((64, 4096), f64), ((9, 65537), f32), ((3, 131075), bf16)]
    try:
        for i, (shape, dtype) in enumerate(cases):
            x, w, dy = _inputs(shape, dtype, 10 + i)
            (y,), (dx, dw) = value_and_grads(lambda a, b: rmsnorm(a, b, EPS), x, w, wrt=(0, 1), dy=dy)
            (y0,), (dx0, dw0) = expected_grads(lambda a, b: ref.reference(a, b, EPS), x, w,
                                               wrt=(0, 1), dy=dy)
            tol = ex.tolerance[str(dtype).removeprefix("torch.")]
            rows = math.prod(shape[:-1])
            chk.assert_close(y, y0, tol=tol, dtype=dtype, what="y", shape=shape)
            chk.assert_close(dx, dx0, tol=tol, dtype=dtype, what="dx", shape=shape)
            chk.assert_close(dw, dw0, tol=sum_tol(tol, rows, dtype), dtype=dtype, what="dw",
                             shape=shape)
        # the graded case itself (every row of every block), and the same dw bits twice
        g = torch.Generator(device="cuda").manual_seed(0)
        x = torch.randn(SHAPE, device="cuda", dtype=bf16, generator=g)
        w = 1.0 + 0.1 * torch.randn(SHAPE[-1], device="cuda", dtype=bf16, generator=g)
        dy = torch.randn(SHAPE, device="cuda", dtype=bf16, generator=g)
        (y,), (dx, dw) = value_and_grads(lambda a, b: rmsnorm(a, b, EPS), x, w, wrt=(0, 1), dy=dy)
        (y0,), (dx0, dw0) = expected_grads(lambda a, b: ref.reference(a, b, EPS), x, w,
                                           wrt=(0, 1), dy=dy)
        tol = ex.tolerance["bfloat16"]
        chk.assert_close(y, y0, tol=tol, dtype=bf16, what="y", shape=SHAPE)
        chk.assert_close(dx, dx0, tol=tol, dtype=bf16, what="dx", shape=SHAPE)
        chk.assert_close(dw, dw0, tol=sum_tol(tol, SHAPE[0] * SHAPE[1], bf16), dtype=bf16,
                         what="dw", shape=SHAPE)
        del y0, dx0, dw0
        (_,), (_, dw2) = value_and_grads(lambda a, b: rmsnorm(a, b, EPS), x, w, wrt=(0, 1), dy=dy)
        if not torch.equal(dw, dw2):
            return "dw differs between two runs (not deterministic)"
    except chk.Mismatch as e:
        return f"FAIL: {str(e)[:400]}"
    return "ok"


def bench_inputs():
    import torch
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(SHAPE, device="cuda", dtype=torch.bfloat16, generator=g)
    w = 1.0 + 0.1 * torch.randn(SHAPE[-1], device="cuda", dtype=torch.bfloat16, generator=g)
    dy = torch.randn_like(x)
    return x, w, dy


def time_us(fn, **kw) -> float:
    from grader.timing import time_fn
    return round(time_fn(fn, **kw)["ms"] * 1e3, 1)


def child_time(tree: Path) -> dict:
    import torch
    from grader.discover import EXERCISES, load_exercise
    from grader.loader import load_track
    ex = load_exercise(EXERCISES / "06_rmsnorm")
    sys.path.insert(0, str(EXERCISES / "06_rmsnorm"))
    import reference as ref
    impl = load_track(tree, ex, ex.tracks["cuda"])  # built already: ninja finds nothing to do
    out = {"check": check(impl.rmsnorm, ex, ref)}
    torch.cuda.empty_cache()
    x, w, dy = bench_inputs()
    out["fwd_us"] = time_us(lambda: impl.rmsnorm(x, w, EPS))
    _, rstd = torch.ops.ex06_cuda.rmsnorm_fwd(x, w, EPS)
    out["bwd_us"] = time_us(lambda: torch.ops.ex06_cuda.rmsnorm_bwd(dy, x, w, rstd))
    xg, wg = x.clone().requires_grad_(), w.clone().requires_grad_()
    out["fwdbwd_us"] = time_us(lambda: impl.rmsnorm(xg, wg, EPS).backward(dy), grad_to_none=[xg, wg])
    return out


def child_baselines() -> dict:
    """fwd and fwd+bwd of the baselines (their backward alone: the difference)."""
    import torch
    from grader.discover import EXERCISES, load_exercise
    from grader.loader import load_track
    ex = load_exercise(EXERCISES / "06_rmsnorm")
    sys.path.insert(0, str(EXERCISES / "06_rmsnorm"))
    import reference as ref
    fns = {"native": ref.native, "compile": torch.compile(ref.reference, dynamic=False),
           "liger": ref.liger}
    try:
        fns["triton"] = load_track(ROOT / "solutions", ex, ex.tracks["triton"]).rmsnorm
    except Exception as e:  # noqa: BLE001 (reported, not fatal)
        print(f"# triton: {type(e).__name__}: {e}", file=sys.stderr)
    x, w, dy = bench_inputs()
    out = {}
    for name, fn in fns.items():
        try:
            f = time_us(lambda: fn(x, w, EPS))
            xg, wg = x.clone().requires_grad_(), w.clone().requires_grad_()
            fb = time_us(lambda: fn(xg, wg, EPS).backward(dy), grad_to_none=[xg, wg])
            out[name] = {"fwd_us": f, "fwdbwd_us": fb, "bwd_us": round(fb - f, 1), "bwd_timed": False}
        except Exception as e:  # noqa: BLE001 (a missing peer: reported, not fatal)
            out[name] = {"error": f"{type(e).__name__}: {str(e)[:120]}"}
    return out


def child_copy() -> dict:
    from grader.timing import CEILINGS
    return {"copy_gbs": round(CEILINGS["bandwidth"].measure(), 1)}


# --- the parent --------------------------------------------------------------------------------

def fractions(r: dict, gbs: float) -> dict:
    sys.path.insert(0, str(ROOT / "exercises" / "06_rmsnorm"))
    import torch
    import reference as ref
    case = {"B": SHAPE[0], "S": SHAPE[1], "N": SHAPE[2]}
    fwd_b = ref.traffic(case, torch.bfloat16, "forward")["bytes"]
    all_b = ref.traffic(case, torch.bfloat16, "forward_backward")["bytes"]
    of = lambda nbytes, us: round(nbytes / (us * 1e-6) / 1e9 / gbs, 3)
    out = dict(r)
    for key, nbytes in (("fwd", fwd_b), ("bwd", all_b - fwd_b), ("fwdbwd", all_b)):
        if isinstance(r.get(f"{key}_us"), (int, float)):
            out[f"{key}_of_copy"] = of(nbytes, r[f"{key}_us"])
    return out


def main(names: list, baselines: bool) -> None:
    start = time.perf_counter()
    copy0 = run_py("--copy")
    gbs = copy0.get("copy_gbs")
    if not gbs:
        sys.exit(f"copy bandwidth not measured: {copy0}")
    print(f"# copy {gbs} GB/s; {SHAPE} bf16; variants: {' '.join(names)}", flush=True)
    base = Path(tempfile.mkdtemp(prefix="rmsnorm-variants-"))
    CACHE["GRADER_CACHE"] = str(base / "cache")
    trees = {n: make_tree(base, n) for n in names}
    jobs = max(1, min(len(names), (os.cpu_count() or 2) // 2))
    with ThreadPoolExecutor(max_workers=jobs + 1) as pool:
        side = pool.submit(run_py, "--baselines") if baselines else None
        builds = dict(zip(names, pool.map(lambda n: run_py("--build", str(trees[n])), names)))
        print(f"# built {len(names)} variants in {time.perf_counter() - start:.0f} s "
              f"({jobs} at a time)", flush=True)
        base_rows = side.result() if side else {}
    rows = {}
    for name in names:
        r = dict(builds[name])
        if "error" not in r:
            r.update(run_py("--time", str(trees[name]), timeout=240))
        rows[name] = fractions(r, gbs)
        print(json.dumps({"variant": name, **rows[name]}), flush=True)
    copy1 = run_py("--copy").get("copy_gbs")
    if isinstance(base_rows.get("error"), str):
        print(f"# baselines: {base_rows.pop('error')}", flush=True)
    base_rows = {name: fractions(r, gbs) for name, r in base_rows.items()}
    for name, r in base_rows.items():
        print(json.dumps({"baseline": name, **r}), flush=True)
    shutil.rmtree(base, ignore_errors=True)

    def cell(r, key):
        us, frac = r.get(f"{key}_us"), r.get(f"{key}_of_copy")
        return f"{us:7.1f} {frac:5.1%}" if us is not None and frac is not None else f"{'-':>13}"
    print(f"\n# copy {gbs} GB/s at the start, {copy1} GB/s at the end; "
          f"{time.perf_counter() - start:.0f} s in all")
    print(f"{'variant':16s} {'regs f/b':>9s} {'spill f/b':>9s} {'fwd us':>13s} {'bwd us':>13s} "
          f"{'fwd+bwd us':>13s}  check")
    for name, r in list(rows.items()) + [(f"[{n}]", r) for n, r in base_rows.items()]:
        regs = f"{r.get('fwd_regs', '-')}/{r.get('bwd_regs', '-')}"
        spill = f"{r.get('fwd_spill', 0)}/{r.get('bwd_spill', 0)}" if "fwd_regs" in r else ""
        status = r.get("check", "") if "error" not in r else "ERROR " + r["error"][-200:]
        print(f"{name:16s} {regs:>9s} {spill:>9s} {cell(r, 'fwd')} {cell(r, 'bwd')} "
              f"{cell(r, 'fwdbwd')}  {status}")
    good = {n: r for n, r in rows.items() if r.get("check") == "ok"}
    # the best forward among the variants that change the forward (and the default), the best
    # backward likewise: the others repeat the default's kernel (their spread is the noise)
    changes = lambda n, p: n == "default" or any(c.startswith(p) for c in VARIANTS[n])
    for key, prefix in (("fwd", "kFwd"), ("bwd", "kBwd"), ("fwdbwd", "k")):
        timed = [(r[f"{key}_us"], n) for n, r in good.items()
                 if f"{key}_us" in r and changes(n, prefix)]
        if timed:
            us, n = min(timed)
            print(f"# best {key}: {n} ({us} us, {good[n][f'{key}_of_copy']:.1%} of copy)")
    print("# the forward's constants (kFwd*) and the backward's (kBwd*) are independent: take "
          "the best forward variant's kFwd* and the best backward variant's kBwd*")


if __name__ == "__main__":
    args = sys.argv[1:]
    if args[:1] == ["--build"]:
        print(json.dumps(child_build(Path(args[1]))))
    elif args[:1] == ["--time"]:
        print(json.dumps(child_time(Path(args[1]))))
    elif args[:1] == ["--baselines"]:
        print(json.dumps(child_baselines()))
    elif args[:1] == ["--copy"]:
        print(json.dumps(child_copy()))
    elif "--list" in args:
        for n, c in VARIANTS.items():
            print(f"{n:16s} {c}")
    else:
        chosen = [a for a in args if not a.startswith("--")] or list(VARIANTS)
        unknown = [n for n in chosen if n not in VARIANTS]
        if unknown:
            sys.exit(f"unknown variant(s) {unknown}; --list shows them")
        main(chosen, baselines="--no-baselines" not in args)
