"""Exercise 09: why the CUDA solution's kernel times slower than the Triton one (issue 11).

At (32768, 4096) bf16 the grader's timing (triton.testing.do_bench: before every call it zeroes
a 256 MB buffer to flush L2, then times the call with events) gave the CUDA track 123.3 us and
the Triton track 104.3 us, but the judge's wall clock over 8 back-to-back validated calls gave
99.8 us per CUDA call and 110.0 per Triton call (results/gpu-2026-11-22-r2/grade-08-09-10.txt).
Which is the kernel, and which is the method? This times both kernels, in one process, under
several ways of "flushing" between calls, and then (--ncu, run under Nsight Compute) prints
what the hardware counters say about one call of each:

    flush=zero    do_bench's own: zero 256 MB (L2 left full of dirty lines to write back)
    flush=read    read 256 MB instead (L2 left full of clean lines: nothing to write back)
    rotate        no flush; 8 input/output sets in turn (each call's data is cold anyway:
                  8 x 403 MB is far past the 60 MB L2), events around each call
    back-to-back  the same 8 sets, events around all 8 calls (what the judge's clock sees,
                  without Python's gaps)

    python results/experiments/09_why_slower.py                 # the timings (GPU)
    ncu --clock-control none -k regex:rmsnorm_quant --launch-skip 4 --launch-count 2 \
        --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy \
        --section WarpStateStats python results/experiments/09_why_slower.py --ncu
"""
import argparse
import importlib.util
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EX = "09_rmsnorm_quant"
M, N, EPS = 32768, 4096, 1e-6
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "exercises" / EX))


def load_ops():
    """(cuda op, triton kernel launcher): the two solutions' kernels, called directly."""
    import torch
    import triton
    from grader.build import build
    from grader.discover import discover
    ex = discover(only="09")[0]
    build(ROOT / "solutions", ex, ex.tracks["cuda"])  # the grader's build: loads the library
    cuda = torch.ops.ex09_cuda.rmsnorm_quant
    text = (ROOT / "solutions" / EX / "triton" / "rmsnorm_quant.py").read_text()
    path = Path(tempfile.mkdtemp(prefix="ex09-")) / "ex09_triton_direct.py"
    path.write_text(text.replace("ex09_triton::", "ex09_direct::"))
    spec = importlib.util.spec_from_file_location("ex09_triton_direct", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)

    def tri(x, w, eps):
        q = torch.empty(x.shape, dtype=torch.int8, device=x.device)
        scale = torch.empty(x.shape[0], dtype=torch.float32, device=x.device)
        mod._rmsnorm_quant_kernel[(x.shape[0],)](
            x, w, q, scale, x.stride(0), x.stride(1), x.shape[1], eps,
            BLOCK_N=triton.next_power_of_2(x.shape[1]), ONE_BLOCK=True, num_warps=4)
        return q, scale
    return {"cuda": cuda, "triton": tri}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--ncu", action="store_true", help="a few calls of each, for ncu to catch")
    a = p.parse_args()
    import torch
    import reference as ref
    from grader.timing import time_fn
    ops = load_ops()
    g = torch.Generator(device="cuda").manual_seed(0)
    case = {"M": M, "N": N}
    nbytes = ref.traffic(case, torch.bfloat16, "forward")["bytes"]
    sets = [ref.bench_inputs(case, torch.bfloat16, "cuda", g) for _ in range(8)]
    if a.ncu:  # kernel launches 0-3 warm up, 4-5 are profiled (--launch-skip 4 --launch-count 2)
        for name in ("cuda", "triton"):
            for k in range(3):
                ops[name](*sets[k])
            torch.cuda.synchronize()
        return
    cache = torch.empty(256 << 20, dtype=torch.int8, device="cuda")
    flush = {"zero": lambda: cache.zero_(), "read": lambda: cache.sum(dtype=torch.int32)}
    rows = []
    for name, op in ops.items():
        x, w, eps = sets[0]
        r = {"kernel": name, "do_bench": time_fn(lambda: op(x, w, eps))["ms"] * 1e3}
        for how, f in flush.items():
            times = []
            for i in range(60):
                f()
                s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                s.record()
                op(*sets[i % 8])
                e.record()
                torch.cuda.synchronize()
                times.append(s.elapsed_time(e) * 1e3)
            r[f"flush={how}"] = statistics.median(times[10:])
        times = []
        for i in range(60):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            op(*sets[i % 8])
            e.record()
            torch.cuda.synchronize()
            times.append(s.elapsed_time(e) * 1e3)
        r["rotate"] = statistics.median(times[10:])
        loops = []
        for _ in range(8):
            torch.cuda.synchronize()
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            for k in range(8):
                op(*sets[k])
            e.record()
            torch.cuda.synchronize()
            loops.append(s.elapsed_time(e) * 1e3 / 8)
        r["back-to-back"] = statistics.median(loops[2:])
        rows.append(r)
    cols = ["do_bench", "flush=zero", "flush=read", "rotate", "back-to-back"]
    print(f"(M, N) = ({M}, {N}) bf16, {nbytes / 1e6:.1f} MB per call; {torch.cuda.get_device_name()}, "
          f"torch {torch.__version__}")
    print(f"{'kernel':8s}" + "".join(f"{c:>15s}" for c in cols) + "   (us per call, median)")
    for r in rows:
        print(f"{r['kernel']:8s}" + "".join(f"{r[c]:15.1f}" for c in cols))
    print(f"{'GB/s':8s}" + "".join(f"{'':>15s}" for _ in cols))
    for r in rows:
        print(f"{r['kernel']:8s}" + "".join(f"{nbytes / r[c] / 1e3:15.0f}" for c in cols))


if __name__ == "__main__":
    main()
