"""On the H200, from the repo root:  python3 .whl/s22/dq128/gpu.py

dq128's dQ kernel (key blocks of 128) against the solution's Gluon backward (key blocks of 64):
  (a) smoke: every variant at (1, 2, 1024) causal and not, in a child process (60 s timeout: a
      hang does not eat the call); only the variants that pass go on;
  (b) correctness, D 64, causal and not, shapes (1,2,128) (1,2,1024) (2,3,2048) (1,16,16384):
      dq against the solution's _bwd_impl (max abs diff, bits equal?) and a float64 reference
      (normwise relative error), dk/dv from bwd against the solution's, determinism;
  (c) timing, triton.testing.do_bench_cudagraph at (1, 16, 16384, 64) causal: _bwd_gluon vs
      dq128.bwd, and the dQ kernels alone, 3 repeats each (interleaved), medians.
(b) and (c) run in a second child (90 s timeout). Writes only under /tmp (Triton's cache) and
$OUT (summary.txt) if set.
"""
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
os.environ.setdefault("TRITON_CACHE_DIR", "/tmp/dq128-triton-cache")
os.environ["PYTHONDONTWRITEBYTECODE"] = "1"
sys.dont_write_bytecode = True
SHAPES = [(1, 2, 128), (1, 2, 1024), (2, 3, 2048), (1, 16, 16384)]
D = 64
LINES = []


def say(*a):
    line = " ".join(str(x) for x in a)
    LINES.append(line)
    print(line, flush=True)


def setup():
    sys.path.insert(0, str(HERE))
    import torch
    import dq128
    return torch, dq128, dq128.fa


def inputs(torch, fa, B, H, S, causal, seed=0):
    """q, k, v, do (randn bf16), the solution's forward o and lse2, and delta as _bwd_impl makes
    it: what _bwd_gluon receives."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    q, k, v, do = (torch.randn(B, H, S, D, device="cuda", generator=g).to(torch.bfloat16)
                   for _ in range(4))
    scale = 1 / math.sqrt(D)
    o, lse = fa._fwd_impl(q, k, v, causal, scale, fa._direct)
    delta = torch.empty_like(lse)
    fa._bwd_delta_kernel[(B * H, (S + 63) // 64)](o, do, delta, *do.stride(), H, S, HEAD_D=D,
                                                  BLOCK_M=64, F64=False, num_warps=4)
    return q, k, v, do, o, lse, delta, scale


def new_grads(torch, dq128, q, k, v, do, lse, delta, causal, scale, plan):
    dq, dk, dv = (torch.empty_like(q) for _ in range(3))
    dq128.bwd(q, k, v, do, lse, delta, dq, dk, dv, causal, scale, plan)
    return dq, dk, dv


def smoke(names):
    torch, dq128, fa = setup()
    for causal in (True, False):
        q, k, v, do, o, lse, delta, scale = inputs(torch, fa, 1, 2, 1024, causal)
        ref = fa._bwd_impl(do, q, k, v, o, lse, causal, scale, fa._direct)[0].float()
        for name in names:
            try:
                dq = new_grads(torch, dq128, q, k, v, do, lse, delta, causal, scale,
                               dq128.VARIANTS[name])[0]
                torch.cuda.synchronize()
            except Exception as e:  # noqa: BLE001  (a compile error: the other variants go on)
                print(f"smoke {name} causal={causal} {type(e).__name__}: "
                      f"{str(e).strip()[-800:]} FAIL", flush=True)
                continue
            diff = (dq.float() - ref).abs().max().item() / ref.abs().max().item()
            ok = bool(torch.isfinite(dq).all()) and diff < 1e-2
            print(f"smoke {name} causal={causal} maxdiff/max={diff:.3g} "
                  f"{'PASS' if ok else 'FAIL'}", flush=True)


def reference_dq(torch, q, k, v, do, causal, scale, chunk=4096):
    """float64 dq = scale · (P ∘ (dO Vᵀ - rowsum(dO ∘ O))) K, per head, in query chunks."""
    B, H, S, _ = q.shape
    out = torch.empty(q.shape, dtype=torch.float64, device=q.device)
    for b in range(B):
        for h in range(H):
            q64, k64, v64, do64 = (t[b, h].double() for t in (q, k, v, do))
            for i in range(0, S, chunk):
                s = scale * (q64[i:i + chunk] @ k64.T)
                if causal:
                    rows = torch.arange(i, min(i + chunk, S), device=q.device)[:, None]
                    s.masked_fill_(torch.arange(S, device=q.device)[None, :] > rows, -math.inf)
                p = torch.softmax(s, dim=-1)
                del s
                dp = do64[i:i + chunk] @ v64.T
                delta = (do64[i:i + chunk] * (p @ v64)).sum(-1, keepdim=True)
                out[b, h, i:i + chunk] = scale * ((p * (dp - delta)) @ k64)
                del p, dp
    return out


def rel(torch, x, ref):
    return ((x.double() - ref).norm() / ref.norm()).item()


def check(names):
    torch, dq128, fa = setup()
    say(f"gpu {torch.cuda.get_device_name()}  torch {torch.__version__}  "
        f"triton {__import__('triton').__version__}")
    bad = []
    for B, H, S in SHAPES:
        for causal in (True, False):
            t0 = time.time()
            q, k, v, do, o, lse, delta, scale = inputs(torch, fa, B, H, S, causal)
            assert fa.CONFIGS[D]["dkdv"].gluon and fa._gluon_ok(q, k, v, fa._direct, do, lse), \
                "the solution's _bwd_impl would not take its Gluon path here"
            sq, sk, sv = fa._bwd_impl(do, q, k, v, o, lse, causal, scale, fa._direct)
            ref = reference_dq(torch, q, k, v, do, causal, scale)
            tag = f"({B},{H},{S}) causal={causal!s:5s}"
            say(f"{tag} solution dq: rel err vs fp64 {rel(torch, sq, ref):.3e}")
            for name in names:
                plan = dq128.VARIANTS[name]
                dq, dk, dv = new_grads(torch, dq128, q, k, v, do, lse, delta, causal, scale, plan)
                dq2 = new_grads(torch, dq128, q, k, v, do, lse, delta, causal, scale, plan)[0]
                same = torch.equal(dq, sq)
                det = torch.equal(dq, dq2)
                kv_same = torch.equal(dk, sk) and torch.equal(dv, sv)
                diff = (dq.float() - sq.float()).abs().max().item()
                err = rel(torch, dq, ref)
                say(f"{tag} {name:16s} dq maxdiff vs solution {diff:.3g} bits_equal={same} "
                    f"rel err vs fp64 {err:.3e} deterministic={det} dk,dv_equal={kv_same}")
                if not (det and kv_same and err < 2 * rel(torch, sq, ref) + 1e-3):
                    bad.append((tag, name))
            del q, k, v, do, o, lse, delta, sq, sk, sv, ref
            torch.cuda.empty_cache()
            say(f"{tag} {time.time() - t0:.1f}s")
    say("CORRECTNESS", "FAILED " + str(bad) if bad else "ok")
    return torch, dq128, fa


def timing(torch, dq128, fa, names, repeats=3):
    from triton.testing import do_bench_cudagraph
    B, H, S, causal = 1, 16, 16384, True
    q, k, v, do, o, lse, delta, scale = inputs(torch, fa, B, H, S, causal)
    dq, dk, dv = (torch.empty_like(q) for _ in range(3))
    args = (q, k, v, do, lse, delta)
    fns = {"old bwd (_bwd_gluon)": lambda: fa._bwd_gluon(*args, dq, dk, dv, causal, scale),
           "new bwd (dq128.bwd S4)": lambda: dq128.bwd(*args, dq, dk, dv, causal, scale),
           "old dQ kernel": lambda: dq128.dq_old(*args, dq, causal, scale)}
    for name in names:
        fns[f"new dQ kernel {name}"] = (
            lambda p=dq128.VARIANTS[name]: dq128.dq_new(*args, dq, causal, scale, p))
    if "S4" not in names:
        del fns["new bwd (dq128.bwd S4)"]
    for fn in fns.values():   # compile and warm
        fn()
    torch.cuda.synchronize()
    times = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            times[name].append(do_bench_cudagraph(fn, rep=50, return_mode="median"))
    say(f"timing at ({B},{H},{S},{D}) causal, do_bench_cudagraph medians of {repeats} (ms):")
    for name, ts in times.items():
        say(f"  {name:28s} {statistics.median(ts):.4f}   [{', '.join(f'{t:.4f}' for t in ts)}]")
    ob = statistics.median(times["old bwd (_bwd_gluon)"])
    od = statistics.median(times["old dQ kernel"])
    for name in fns:
        if name.startswith("new"):
            new = statistics.median(times[name])
            base = ob if "bwd" in name else od
            say(f"  {name:28s} {new - base:+.4f} ms ({(new / base - 1) * 100:+.1f}%)")


def child(mode, arg, timeout):
    cmd = [sys.executable, str(Path(__file__).resolve()), mode, *arg]
    try:
        r = subprocess.run(cmd, timeout=timeout, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True)
        out, rc = r.stdout, r.returncode
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        rc = f"TIMEOUT after {timeout} s"
    for line in out.splitlines():
        say("  | " + line)
    say(f"{mode} exit: {rc}")
    return out


def main():
    t0 = time.time()
    say("== (a) smoke, child, 60 s")
    out = child("--smoke", [], 60)
    passed = [line.split()[1:3] for line in out.splitlines()
              if line.startswith("smoke ") and line.endswith("PASS")]
    names = [n for n, c in passed if c == "causal=True" and [n, "causal=False"] in passed]
    if not names:
        say("SUMMARY: smoke failed or hung: no variant goes on")
    else:
        say(f"== (b) correctness and (c) timing, child, 90 s: variants {names}")
        out = child("--main", names, 90)
        lines = out.splitlines()
        start = next((i for i, line in enumerate(lines) if line.startswith("timing at")), None)
        say("== SUMMARY")
        for line in lines:
            if line.startswith("CORRECTNESS") or "bits_equal=False" in line \
                    or "deterministic=False" in line or "dk,dv_equal=False" in line:
                say(line)
        if sum("bits_equal=True" in line for line in lines):
            say(f"dq bits equal to the solution's in {sum('bits_equal=True' in x for x in lines)}"
                f" of {sum('bits_equal=' in x for x in lines)} (shape, causal, variant) checks")
        for line in lines[start:] if start is not None else ["timing: none (see above)"]:
            say(line)
    say(f"total {time.time() - t0:.0f} s")
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], "summary.txt").write_text("\n".join(LINES) + "\n")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--smoke":
        _, dq128_, _ = setup()
        smoke(list(dq128_.VARIANTS))
    elif len(sys.argv) > 1 and sys.argv[1] == "--main":
        torch_, dq128_, fa_ = check(sys.argv[2:])
        timing(torch_, dq128_, fa_, sys.argv[2:])
    else:
        main()
