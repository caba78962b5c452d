"""Exercise 10 (layernorm_dropout): time a first kernel and the solution at the graded case, so
the thresholds in exercises/10_layernorm_dropout/exercise.toml can be set from measurements.

    python results/experiments/10_first_kernel.py        (from the repository root, on a GPU)

Rows (all the solution's kernels, with its generator switches flipped):
  first kernel     tl.rand per element (one Philox4x32-10 call per element, 3 of its 4 outputs
                   thrown away): what a learner writes first
  solution, 10 rds tl.rand4x: one Philox call per 4 elements (FOUR_PER_CALL = True), 10 rounds
  solution         the same with Philox4x32-7 (N_ROUNDS = 7: the solution's default)
  16-bit halves    HALF_WORDS = True: 16-bit uniforms, one Philox call per 8 elements, 7 rounds
  eager            F.layer_norm then F.dropout (stores a bool mask)
  compile          torch.compile of the same
Forward GB/s counts read x + write y only (reference.traffic); "copy" is a device-to-device copy
of 2 GiB measured in the same run. Prints a table; takes well under a minute.
"""
import importlib.util
import sys
from pathlib import Path

import torch
import triton

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


sol = load(ROOT / "solutions/10_layernorm_dropout/triton/layernorm_dropout.py", "sol10")
ref = load(ROOT / "exercises/10_layernorm_dropout/reference.py", "ref10")

M, N, P = 32768, 4096, 0.1
case = {"M": M, "N": N, "p": P}
dtype = torch.bfloat16
gen = torch.Generator(device="cuda").manual_seed(0)
x, w, b, p, seed, eps = ref.bench_inputs(case, dtype, "cuda", gen)
dy = torch.randn_like(x)


def bench(fn):
    return triton.testing.do_bench(fn, warmup=25, rep=200, return_mode="median") * 1e3  # us


def copy_gbs():
    n = 1 << 30  # 2 GiB of bf16
    a = torch.empty(n, dtype=dtype, device="cuda").normal_()
    c = torch.empty_like(a)
    us = bench(lambda: c.copy_(a))
    del a, c
    return 2 * n * 2 / us / 1e3


def fwd_bwd(fn):
    xs, ws, bs = (t.detach().requires_grad_() for t in (x, w, b))

    def run():
        y = fn(xs, ws, bs, p, seed, eps)
        y.backward(dy)
        xs.grad = ws.grad = bs.grad = None
    return run


def solution(four, rounds, half=False):
    def fn(*a):
        sol.FOUR_PER_CALL, sol.N_ROUNDS, sol.HALF_WORDS = four, rounds, half
        return sol.layernorm_dropout(*a)
    return fn


def main():
    ceiling = copy_gbs()
    fwd_bytes = ref.traffic(case, dtype, "forward")["bytes"]
    both_bytes = ref.traffic(case, dtype, "forward_backward")["bytes"]
    compiled = torch.compile(ref.reference, dynamic=False)
    rows = [("first kernel (tl.rand per element)", solution(False, 10)),
            ("solution, 10 rounds (tl.rand4x)", solution(True, 10)),
            ("solution (tl.rand4x, 7 rounds)", solution(True, 7)),
            ("16-bit halves (HALF_WORDS), 7 rounds", solution(True, 7, True)),
            ("eager (F.layer_norm, F.dropout)", ref.reference),
            ("compile", compiled)]
    print(f"layernorm_dropout ({M}, {N}) bf16, p = {P}; {torch.cuda.get_device_name()}; "
          f"copy {ceiling:.0f} GB/s")
    print(f"{'':38s} {'fwd us':>8s} {'GB/s':>6s} {'of copy':>7s} {'fwd+bwd us':>10s} "
          f"{'of copy':>7s}")
    for name, fn in rows:
        try:
            with torch.no_grad():
                f_us = bench(lambda: fn(x, w, b, p, seed, eps))
            b_us = bench(fwd_bwd(fn))
        except Exception as e:  # a variant that does not compile must not lose the other rows
            print(f"{name:38s} failed: {type(e).__name__}: {str(e)[:200]}")
            continue
        f_gbs = fwd_bytes / f_us / 1e3
        print(f"{name:38s} {f_us:8.1f} {f_gbs:6.0f} {f_gbs / ceiling:7.1%} {b_us:10.1f} "
              f"{both_bytes / b_us / 1e3 / ceiling:7.1%}")
    # sanity: the kept fraction at the graded case, the solution's default and HALF_WORDS
    for half in (False, True):
        sol.FOUR_PER_CALL, sol.N_ROUNDS, sol.HALF_WORDS = True, 7, half
        try:
            y = sol.layernorm_dropout(x, w, b, p, seed, eps)
            print(f"kept fraction, HALF_WORDS={half}: {(y != 0).float().mean().item():.5f} "
                  f"(expected {1 - P:.5f}; HALF_WORDS: {1 - round(P * 65536) / 65536:.5f})")
        except Exception as e:
            print(f"kept fraction, HALF_WORDS={half}: failed: {type(e).__name__}")
    sol.FOUR_PER_CALL, sol.N_ROUNDS, sol.HALF_WORDS = True, 7, False


if __name__ == "__main__":
    main()
