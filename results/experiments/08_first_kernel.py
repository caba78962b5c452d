"""Exercise 08 (add_rmsnorm): a sound first implementation and the solution against the
baselines at the graded case, (32768, 4096) bf16 (GPU only, under a minute).

    python results/experiments/08_first_kernel.py

"first" is the solution with what a first attempt leaves out: 4 warps for every row length, the
gradient of h materialized as zeros and read by the backward (no set_materialize_grads(False)),
and the dw reduction one partial row per step in 16 programs (REDUCE_ROWS = 1, REDUCE_BLOCK =
256). "solution, old dw reduce" is the solution with only that last change (what was measured
as "solution" on 2026-11-22). Then the backward op alone, for the solution and that variant,
with the gradient of h None or zeros, and the copy of dx autograd makes for a second leaf.
Times are medians (triton.testing.do_bench, L2 flushed between repetitions).
Also timed: "add + F.rms_norm" (the unfused pair: h goes to memory and comes back), the eager
composite (reference.py), torch.compile of it, and Liger's fused add + RMSNorm when installed.
The figures set the thresholds in exercises/08_add_rmsnorm/exercise.toml.
"""
import importlib.util
import sys
from pathlib import Path

import torch
import triton.testing

ROOT = Path(__file__).resolve().parents[2]
SOLUTION = ROOT / "solutions/08_add_rmsnorm/triton/add_rmsnorm.py"
M, N, EPS = 32768, 4096, 1e-6


def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


OLD_REDUCE = [("REDUCE_BLOCK = 32 ", "REDUCE_BLOCK = 256 "),
              ("REDUCE_ROWS = 64 ", "REDUCE_ROWS = 1 ")]


def variant(name, edits):
    """The solution with text edits, in its own op namespace."""
    text = SOLUTION.read_text()
    for old, new in [("ex08_triton::", f"ex08_{name}::")] + edits:
        assert old in text, old
        text = text.replace(old, new)
    path = Path(f"/tmp/ex08_{name}_kernel.py")
    path.write_text(text)
    return load(path, f"ex08_{name}_kernel")


def first_variant():
    """The solution with a first attempt's omissions."""
    return variant("first", [("F64=x.dtype == torch.float64, num_warps=_num_warps(block))",
                              "F64=x.dtype == torch.float64, num_warps=4)"),
                             ("    ctx.set_materialize_grads(False)\n", "")] + OLD_REDUCE)


def main():
    if not torch.cuda.is_available():
        print("needs a GPU")
        return
    ref = load(ROOT / "exercises/08_add_rmsnorm/reference.py", "ex08_reference")
    sol = load(SOLUTION, "ex08_solution")
    first = first_variant()
    old = variant("oldreduce", OLD_REDUCE)
    gen = torch.Generator(device="cuda").manual_seed(0)
    x, r, w, eps = ref.bench_inputs({"M": M, "N": N}, torch.bfloat16, "cuda", gen)

    src = torch.empty(1 << 29, device="cuda", dtype=torch.bfloat16)   # 1 GiB, far past L2
    dst = torch.empty_like(src)
    copy_ms = triton.testing.do_bench(lambda: dst.copy_(src), warmup=50, rep=200, return_mode="median")
    bw = 2 * src.numel() * 2 / (copy_ms * 1e-3)
    del src, dst

    def unfused(x, r, w, eps):
        h = x + r
        return torch.nn.functional.rms_norm(h, (h.shape[-1],), w, eps), h

    fns = {"solution": sol.add_rmsnorm, "solution, old dw reduce": old.add_rmsnorm,
           "first": first.add_rmsnorm, "add + F.rms_norm": unfused,
           "eager": ref.reference, "compile": torch.compile(ref.reference, dynamic=False)}
    try:
        ref.liger(x, r, w, eps)
        fns["liger"] = ref.liger
    except ImportError as e:
        print(f"liger: not installed ({e})")

    fwd_bytes = ref.traffic({"M": M, "N": N}, torch.bfloat16, "forward")["bytes"]
    fb_bytes = ref.traffic({"M": M, "N": N}, torch.bfloat16, "forward_backward")["bytes"]
    dy = torch.randn_like(x)
    leaves = [t.detach().clone().requires_grad_() for t in (x, r, w)]

    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}; copy {bw / 1e9:.0f} GB/s; "
          f"(M, N) = ({M}, {N}) bf16")
    print(f"{'':24s} {'fwd us':>8s} {'% copy':>7s} {'fwd+bwd us':>11s} {'% copy':>7s}")
    rows = {}
    for name, fn in fns.items():
        y, h = fn(x, r, w, eps)
        want_y, want_h = ref.reference(x.double(), r.double(), w.double(), eps)
        err = max((y.double() - want_y).abs().max().item(),
                  (h.double() - want_h).abs().max().item())
        f_ms = triton.testing.do_bench(lambda: fn(x, r, w, eps), warmup=25, rep=100,
                                       return_mode="median")

        def step():
            out = fn(*leaves, eps)
            out[0].backward(dy)
        step()
        fb_ms = triton.testing.do_bench(step, warmup=25, rep=100, grad_to_none=leaves,
                                        return_mode="median")
        rows[name] = (f_ms, fb_ms)
        print(f"{name:24s} {f_ms * 1e3:8.1f} {fwd_bytes / (f_ms * 1e-3) / bw * 100:6.1f}% "
              f"{fb_ms * 1e3:11.1f} {fb_bytes / (fb_ms * 1e-3) / bw * 100:6.1f}%   "
              f"(max err {err:.3g})", flush=True)
    c = rows["compile"][1]
    for name in ("solution", "solution, old dw reduce", "first"):
        print(f"{name}: fwd+bwd speedup over compile {c / rows[name][1]:.2f}x" +
              (f", over liger {rows['liger'][1] / rows[name][1]:.2f}x" if "liger" in rows else ""))

    # the backward alone: where does the time go?
    _, h, rstd = sol.add_rmsnorm_fwd(x, r, w, eps)
    zeros = torch.zeros_like(h)
    for name, mod in (("solution", sol), ("solution, old dw reduce", old)):
        for what, dh in (("dh None", None), ("dh zeros", zeros)):
            ms = triton.testing.do_bench(lambda: mod.add_rmsnorm_bwd(dy, dh, h, w, rstd),
                                         warmup=25, rep=100, return_mode="median")
            print(f"backward op alone, {name}, {what}: {ms * 1e3:.1f} us")
    ms = triton.testing.do_bench(lambda: h.clone(), warmup=25, rep=100, return_mode="median")
    print(f"dx.clone() (autograd's copy for the second leaf): {ms * 1e3:.1f} us")
    ms = triton.testing.do_bench(lambda: torch.zeros_like(h), warmup=25, rep=100,
                                 return_mode="median")
    print(f"zeros_like(h) (a materialized gradient of h): {ms * 1e3:.1f} us")


if __name__ == "__main__":
    main()
