"""Host time per call of 03's extension, old (HEAD: ATen in the .cu, torch/extension.h) against new
(common.cuh .cu; ATen.h + pybind.h .cpp) and new with torch/extension.h: tiny tensors, so the
GPU never limits; calls timed back to back by the wall clock, variants interleaved."""
import os, sys, time, shutil, tempfile
from pathlib import Path
import torch
from torch.utils import cpp_extension

ROOT = Path.cwd()
os.environ.setdefault("TORCH_CUDA_ARCH_LIST", "9.0")
tmp = Path(tempfile.mkdtemp())
new = ROOT / "solutions/03_bias_relu/cuda"
old = ROOT / ".whl/old03/03_bias_relu/cuda"
ext_h = tmp / "ext"; ext_h.mkdir()
shutil.copy(new / "bias_relu_kernels.cu", ext_h)
src = (new / "bias_relu.cpp").read_text().replace(
    "#include <torch/csrc/utils/pybind.h>  // pybind11, and its casters for at::Tensor", "#include <torch/extension.h>")
(ext_h / "bias_relu.cpp").write_text(src)
variants = {"old": old, "new": new, "new+extension.h": ext_h}
mods = {}
for i, (name, d) in enumerate(variants.items()):
    t = time.time()
    b = tmp / f"b{i}"; b.mkdir()
    mods[name] = cpp_extension.load(name=f"bias_relu_ext{i}", sources=[str(d / "bias_relu_kernels.cu"), str(d / "bias_relu.cpp")],
                                    extra_cuda_cflags=["-O3", "-lineinfo"], extra_cflags=["-O3"],
                                    extra_include_paths=[str(ROOT / "include")], build_directory=str(b), verbose=False)
    print(f"built {name} in {time.time() - t:.1f} s", flush=True)

x = torch.randn(4, 64, device="cuda"); bias = torch.randn(64, device="cuda")
y = mods["old"].forward(x, bias, 1.0); g = torch.randn_like(y)
for name, m in mods.items():
    assert torch.equal(m.forward(x, bias, 1.0), y)
    a, b = m.backward(g, y, 1.0); a0, b0 = mods["old"].backward(g, y, 1.0)
    assert torch.equal(a, a0) and torch.equal(b, b0), name
N = 20000
res = {k: {"fwd": [], "bwd": []} for k in mods}
for rep in range(5):
    for name, m in mods.items():
        f = m.forward
        torch.cuda.synchronize(); t = time.perf_counter()
        for _ in range(N): f(x, bias, 1.0)
        torch.cuda.synchronize(); res[name]["fwd"].append((time.perf_counter() - t) / N * 1e6)
        bw = m.backward
        torch.cuda.synchronize(); t = time.perf_counter()
        for _ in range(N): bw(g, y, 1.0)
        torch.cuda.synchronize(); res[name]["bwd"].append((time.perf_counter() - t) / N * 1e6)
for name, r in res.items():
    print(f"{name:18s} forward us/call {sorted(r['fwd'])}  backward {sorted(r['bwd'])}")
