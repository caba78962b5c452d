"""Is each backward deterministic? Issue 38's leaderboard case (B 1, H 16, S 16384, D 64, causal,
bf16): SDPA cuDNN, SDPA flash and 13's solution, each backward run 5 times on the same inputs;
how many of the runs' dq, dk, dv differ from the first run's, bitwise, and by how much."""
import importlib.util

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.functional import scaled_dot_product_attention as sdpa

spec = importlib.util.spec_from_file_location(
    "fa13", "solutions/13_flash_attention/triton/flash_attention.py")
fa = importlib.util.module_from_spec(spec)
spec.loader.exec_module(fa)
g = torch.Generator(device="cuda").manual_seed(0)
q, k, v, do = (torch.randn(1, 16, 16384, 64, device="cuda", generator=g).to(torch.bfloat16)
               for _ in range(4))
q, k, v = (t.requires_grad_() for t in (q, k, v))


def run(name):
    if name == "solution":
        return torch.autograd.grad(fa.flash_attention(q, k, v, True), (q, k, v), do)
    backend = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION}[name]
    with sdpa_kernel([backend]):
        return torch.autograd.grad(sdpa(q, k, v, is_causal=True), (q, k, v), do)


for name in ("cudnn", "flash", "solution"):
    first = run(name)
    differ = {"dq": 0, "dk": 0, "dv": 0}
    worst = {"dq": 0.0, "dk": 0.0, "dv": 0.0}
    for _ in range(4):
        again = run(name)
        for key, a, b in zip(("dq", "dk", "dv"), first, again):
            if not torch.equal(a, b):
                differ[key] += 1
                worst[key] = max(worst[key], (a.float() - b.float()).abs().max().item())
    torch.cuda.synchronize()
    print(f"{name}: of 4 runs after the first, differing bitwise: "
          + ", ".join(f"{k} {differ[k]} (max |diff| {worst[k]:.3g})" for k in differ), flush=True)
