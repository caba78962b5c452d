"""_exp2_poly on the interpreter at edge values and a dense sweep: max relative error against
float64 2^x, and exact zeros at and below -127 (-inf included). Appends to check.log."""
import os
os.environ["TRITON_INTERPRET"] = "1"
import importlib.util, sys
import numpy as np
import torch, triton, triton.language as tl
HERE = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location("variants", os.path.join(HERE, "variants.py"))
V = importlib.util.module_from_spec(spec); spec.loader.exec_module(V)


@triton.jit
def k(X, Y, Z, N: tl.constexpr):
    o = tl.arange(0, N)
    x = tl.load(X + o)
    tl.store(Y + o, V._exp2_poly(x))
    x2 = tl.reshape(x, [N // 64, 64])      # the split path: the quarter and the half
    o2 = tl.reshape(o, [N // 64, 64])
    tl.store(Z + o2, V._exp2(x2, 4))
    tl.store(Z + N + o2, V._exp2(x2, 2))
    tl.store(Z + 2 * N + o2, V._exp2(x2, 0))


edge = [-float("inf"), -1e30, -1000.0, -127.0, -126.75, -126.5, -126.0, -125.5, -100.0, -0.5,
        -1e-7, 0.0, 1e-7, 0.49999997, 0.5, 0.5000001, 1.0, 7.9, 8.0]
x = torch.tensor(edge + list(np.linspace(-130, 8.5, 65536 - len(edge) - 64)) + [-1e30] * 64,
                 dtype=torch.float32)
x = x[:65536 // 64 * 64]
y = torch.empty_like(x); z = torch.empty(3 * len(x))
k[(1,)](x, y, z, len(x))
want = torch.exp2(x.double())
relerr = ((y.double() - want).abs() / want.clamp_min(1e-300))
normal = x >= -126
lines = [f"_exp2_poly: max relative error for x >= -126 (normal results): {relerr[normal].max().item():.3e}",
         f"  zeros: x <= -127 -> {int((y[x <= -127] == 0).sum())}/{int((x <= -127).sum())} exactly 0; "
         f"x in (-127, -126): max |y| {y[(x > -127) & (x < -126)].abs().max().item():.2e} (denormal range)",
         "  edges: " + ", ".join(f"{e:g}->{y[i].item():.6g}" for i, e in enumerate(edge)),
         f"  no NaN/inf: {bool(torch.isfinite(y).all())}; never negative: {bool((y >= 0).all())}"]
exact = z[2 * len(x):]   # the interpreter's own exp2 (POLY 0)
ex = torch.where(torch.arange(len(x)) % 64 % 2 == 1, y, exact)    # odd columns: the polynomial
# quarter: odd columns of the right half (64 columns: b index c>=16, column 2c+1 >= 33)
col = torch.arange(len(x)) % 64
q4 = torch.where((col % 2 == 1) & (col >= 32), y, exact)
lines.append(f"_exp2 split: POLY 4 equals poly on odd columns of the right half, exp2 elsewhere: "
             f"{torch.equal(z[:len(x)], q4)}; POLY 2 on odd columns: {torch.equal(z[len(x):2 * len(x)], ex)}")
out = "\n".join(lines)
print(out)
with open(os.path.join(HERE, "check.log"), "a") as f:
    f.write(out + "\n")
