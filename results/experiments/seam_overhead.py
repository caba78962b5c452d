"""What the trusted seam costs per call: exercise 03's op (solutions), called in one process vs
through grader.proxy (the submission's process, shared tensors, observed with torch.profiler),
on the CPU path and, where there is one, the GPU.

    python results/experiments/seam_overhead.py          # from the repository root
"""
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from grader.discover import ROOT, discover  # noqa: E402
from grader.loader import load_track  # noqa: E402
from grader.proxy import RemoteImpl, Session  # noqa: E402

ex = discover(only="03")[0]
track = ex.tracks["cuda"]
local = load_track(ROOT / "solutions", ex, track)
session = Session(ROOT / "solutions", ex, track, timeout_s=600)
assert session.request("load", timeout_s=900).get("built")
remote = RemoteImpl(session)
devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
print(f"{'device':6} {'shape':>12} {'in-process us':>14} {'through the seam us':>20} {'observed':>9}")
for device in devices:
    for shape in ((64, 64), (1024, 1024)):
        x = torch.randn(shape, device=device)
        b = torch.randn(shape[1], device=device)
        for name, impl in (("local", local), ("remote", remote)):
            impl.bias_relu(x, b, 2.0)
        rows = []
        for name, impl in (("local", local), ("remote", remote)):
            n = 50
            if device == "cuda":
                torch.cuda.synchronize()
            t = time.perf_counter()
            for _ in range(n):
                impl.bias_relu(x, b, 2.0)
            if device == "cuda":
                torch.cuda.synchronize()
            rows.append((time.perf_counter() - t) / n * 1e6)
        print(f"{device:6} {str(shape):>12} {rows[0]:14.0f} {rows[1]:20.0f} {'yes':>9}")
session.close()
