"""11: why a right fp32 linear_relu failed the timed validation at 4096^3 (CPU, ~2.5 min on 2 cores).

Output on the 2-core CPU machine, 2026-11-22:
    sequential fp32 Z in 48 s
    max |Z - Z64|: 2.0966386687248928e-05  mask flips: 2
    plain reference: timed output 1 is not this call's answer (relative error 0.00101, bound 0.0001): ...
    matching:        None
    matching, zeros: timed output 0 is not this call's answer (relative error 1, bound 0.0001): ...
"""
# A right fp32 answer with a GPU-like error: Z summed over K one product at a time (as the
# tiled kernel's per-thread accumulator does), then the grads through that Z's mask.
import sys, time, torch
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[2]))
from grader.reference import load_reference
from grader.discover import discover
from grader.measure import validate
ex = discover(only="11")[0]; ref = load_reference(ex)
torch.set_num_threads(2)
m = n = k = 4096
g = torch.Generator().manual_seed(1)
A, B, bias = ref.bench_inputs({"M": m, "N": n, "K": k}, torch.float32, "cpu", g)
t = time.time()
Z = bias.expand(m, n).clone()
for i in range(k):
    Z.addr_(A[:, i], B[i, :])
print(f"sequential fp32 Z in {time.time() - t:.0f} s")
Y = torch.relu(Z)
dy = torch.randn(m, n, generator=g)
dZ = dy * (Y > 0)
dA, dB, db = dZ @ B.t(), A.t() @ dZ, dZ.sum(0)
Z64 = torch.addmm(bias.double(), A.double(), B.double())
print("max |Z - Z64|:", (Z.double() - Z64).abs().max().item(), " mask flips:", int(((Z64 > 0) != (Y > 0)).sum()))
args = (A, B, bias)
r = ref.matching
del ref.matching
print("plain reference:", validate(ex, ref, args, "forward_backward", (Y, dA, dB, db), dy))
ref.matching = r
print("matching:       ", validate(ex, ref, args, "forward_backward", (Y, dA, dB, db), dy))
print("matching, zeros:", validate(ex, ref, args, "forward_backward", (Y * 0, dA * 0, dB * 0, db * 0), dy))
