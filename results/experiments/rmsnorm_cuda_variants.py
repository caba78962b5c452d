"""Time variants of the 06 CUDA solution at (8, 4096, 4096) bf16 (GPU only).

    python results/experiments/rmsnorm_cuda_variants.py [triton base vpt1 ...]

Each variant is the solution with a text edit, built and timed in a process of its own (the
ops of one namespace cannot be registered twice in one process). Figures in RESULTS.md.
"""
import shutil, subprocess, sys
from pathlib import Path
ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "solutions/06_rmsnorm/cuda"
FWD_LB = "__global__ void __launch_bounds__(kMaxThreads)\nrmsnorm_fwd_kernel"
BWD_LB = "__global__ void __launch_bounds__(kMaxThreads)\nrmsnorm_bwd_kernel"
VARIANTS = {
    "base": [],
    "vpt1": [("constexpr int kVecsPerThread = 2;", "constexpr int kVecsPerThread = 1;")],
    "vpt4": [("constexpr int kVecsPerThread = 2;", "constexpr int kVecsPerThread = 4;")],
    "bwd_lb256x4_b4": [(BWD_LB, BWD_LB.replace("(kMaxThreads)", "(256, 4)"))],
    "bwd_lb256x3_b4": [(BWD_LB, BWD_LB.replace("(kMaxThreads)", "(256, 3)"))],
    "bwd_lb256x4_b8": [(BWD_LB, BWD_LB.replace("(kMaxThreads)", "(256, 4)")),
                       ("constexpr int kBwdBlocksPerSM = 4;", "constexpr int kBwdBlocksPerSM = 8;")],
}
CHILD = r'''
import sys, json, torch
from pathlib import Path
sys.path.insert(0, sys.argv[-1])
from grader.discover import load_exercise, EXERCISES
from grader.loader import load_track
from grader.benchmark import time_fn
ex = load_exercise(EXERCISES / "06_rmsnorm")
impl = load_track(Path(sys.argv[1]), ex, ex.tracks[sys.argv[2]])
x = torch.randn(8, 4096, 4096, device="cuda", dtype=torch.bfloat16)
w = torch.randn(4096, device="cuda", dtype=torch.bfloat16)
f = time_fn(lambda: impl.rmsnorm(x, w, 1e-6))["ms"]
xg = x.clone().requires_grad_(True); wg = w.clone().requires_grad_(True)
dy = torch.randn_like(x)
fb = time_fn(lambda: impl.rmsnorm(xg, wg, 1e-6).backward(dy), grad_to_none=[xg, wg])["ms"]
print(json.dumps({"fwd_us": round(f * 1e3, 1), "fwdbwd_us": round(fb * 1e3, 1)}))
'''
which = sys.argv[1:] or list(VARIANTS)
for name in which:
    if name == "triton":
        tree = ROOT / "solutions"; track = "triton"
    else:
        tree = Path(f"/tmp/var_{name}"); track = "cuda"
        dst = tree / "06_rmsnorm" / "cuda"
        shutil.rmtree(tree, ignore_errors=True); shutil.copytree(SRC, dst)
        text = (dst / "rmsnorm.cu").read_text()
        for a, b in VARIANTS[name]:
            assert a in text, (name, a); text = text.replace(a, b)
        (dst / "rmsnorm.cu").write_text(text)
    out = subprocess.run([sys.executable, "-c", CHILD, str(tree), track, str(ROOT)], capture_output=True, text=True)
    line = out.stdout.strip().splitlines()[-1] if out.stdout.strip() else out.stderr[-500:]
    print(f"{name:18s} {line}", flush=True)
