"""13's solution with its forward swapped for gluon_fa.forward where it applies (D 128, not causal,
bf16, S % 128 == 0): gradients against float64 at small shapes (the backward consumes gluon's
lse2), then forward+backward at (4, 32, 4096, 128) against the solution as it is and cuDNN."""
import importlib.util, statistics, sys, time
from pathlib import Path
import torch, triton.testing
HERE = Path(__file__).resolve().parent; ROOT = HERE.parent.parent
sys.path.insert(0, str(HERE)); import gluon_fa as G
spec = importlib.util.spec_from_file_location("sol13", ROOT / "solutions/13_flash_attention/triton/flash_attention.py")
S = importlib.util.module_from_spec(spec); spec.loader.exec_module(S)
orig = S._fwd_impl
def swapped(q, k, v, causal, scale, launch):
    if (not causal and q.dtype == torch.bfloat16 and q.shape[-1] == 128 and q.shape[-2] % 128 == 0
            and all(t.is_contiguous() for t in (q, k, v))):
        o, lse = G.forward(q, k, v, scale)
        return o, lse.reshape(q.shape[:3])
    return orig(q, k, v, causal, scale, launch)
def ref64(q, k, v, do):
    q, k, v, do = (t.double().requires_grad_(t is not do) for t in (q, k, v, do))
    o = torch.softmax(q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5, -1) @ v
    o.backward(do); return o, q.grad, k.grad, v.grad
def rel(a, b): return ((a.double() - b).norm() / b.norm()).item()
for shape in [(1, 2, 128, 128), (1, 2, 1024, 128), (2, 3, 2048, 128)]:
    g = torch.Generator(device="cuda").manual_seed(1)
    q, k, v, do = (torch.randn(shape, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(4))
    want = ref64(q, k, v, do)
    for name in ("solution", "swapped"):
        S._fwd_impl = orig if name == "solution" else swapped
        qq, kk, vv = (t.clone().requires_grad_() for t in (q, k, v))
        o = S.flash_attention(qq, kk, vv, False); o.backward(do)
        errs = [rel(x, w) for x, w in zip((o, qq.grad, kk.grad, vv.grad), want)]
        print(shape, name, "rel err o, dq, dk, dv:", " ".join(f"{e:.2e}" for e in errs), "PASS" if max(errs) < 2e-2 else "FAIL", flush=True)
from torch.nn.attention import SDPBackend, sdpa_kernel
import torch.nn.functional as F
g = torch.Generator(device="cuda").manual_seed(2)
q, k, v, do = (torch.randn(4, 32, 4096, 128, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(4))
def step(fn):
    qq, kk, vv = (t.detach().requires_grad_() for t in (q, k, v))
    def run():
        o = fn(qq, kk, vv); torch.autograd.grad(o, (qq, kk, vv), do)
    return run
def cudnn(a, b, c):
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        return F.scaled_dot_product_attention(a, b, c)
rows = {}
for name, fn in [("solution", lambda a, b, c: S.flash_attention(a, b, c, False)),
                 ("swapped", lambda a, b, c: S.flash_attention(a, b, c, False)), ("cudnn", cudnn)]:
    S._fwd_impl = swapped if name == "swapped" else orig
    runs = [triton.testing.do_bench_cudagraph(step(fn), rep=100) for _ in range(3)]
    print(f"fwd+bwd {name:9s} {statistics.median(runs):.4f} ms  runs " + ", ".join(f"{r:.4f}" for r in runs), flush=True)
