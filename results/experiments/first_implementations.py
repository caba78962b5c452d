"""What a sound first implementation reaches, which sets the pass thresholds (GPU only).

    python results/experiments/first_implementations.py

Figures in the exercise.toml comments of 01 and 02.
"""
import shutil, subprocess, sys
from pathlib import Path
ROOT = Path(__file__).resolve().parents[2]
CHILD = r'''
import sys, torch
from pathlib import Path
sys.path.insert(0, sys.argv[-1])
from grader.discover import load_exercise, EXERCISES
from grader.loader import load_track
from grader.benchmark import time_fn, measure_ceilings
from grader.build import CACHE
bw = measure_ceilings(CACHE)["bandwidth"]
tree, exid, what = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
ex = load_exercise(EXERCISES / exid)
impl = load_track(tree, ex, next(iter(ex.tracks.values())))
n = 1 << 28
if exid == "01_vector_add":
    x = torch.randn(n, device="cuda"); y = torch.randn(n, device="cuda")
    ms = time_fn(lambda: impl.add(x, y))["ms"]; nbytes = 3 * 4 * n
else:
    base = torch.randn(n + 1, device="cuda", dtype=torch.bfloat16)
    x = base[1:] if what == "misaligned" else base[:n]
    ms = time_fn(lambda: impl.scale(x, 1.7))["ms"]; nbytes = 2 * 2 * n
print(f"{exid} {what}: {ms*1e3:.1f} us = {nbytes/(ms*1e-3)/1e9/bw*100:.1f}% of copy ({bw:.0f} GB/s)")
'''
def variant(name, exid, track, edits):
    tree = Path(f"/tmp/first_{name}"); dst = tree / exid / track
    shutil.rmtree(tree, ignore_errors=True); shutil.copytree(ROOT / "solutions" / exid / track, dst)
    for f, a, b in edits:
        t = (dst / f).read_text(); assert a in t, a; (dst / f).write_text(t.replace(a, b))
    return tree
runs = [
    (variant("b1024", "01_vector_add", "triton", [("vector_add.py", "BLOCK = 4096", "BLOCK = 1024"), ("vector_add.py", "NUM_WARPS = 8", "NUM_WARPS = 4")]), "01_vector_add", "BLOCK=1024,warps=4"),
    (variant("b128", "01_vector_add", "triton", [("vector_add.py", "BLOCK = 4096", "BLOCK = 128"), ("vector_add.py", "NUM_WARPS = 8", "NUM_WARPS = 4")]), "01_vector_add", "BLOCK=128,warps=4"),
    (ROOT / "solutions", "02_scale", "aligned"),
    (ROOT / "solutions", "02_scale", "misaligned"),
]
for tree, exid, what in runs:
    out = subprocess.run([sys.executable, "-c", CHILD, str(tree.resolve()), exid, what, str(ROOT)], capture_output=True, text=True)
    print(out.stdout.strip() or out.stderr[-400:], flush=True)
