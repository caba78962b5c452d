"""Exercise 09: one call of the CUDA solution, or of the seed-shaped race variant, for
compute-sanitizer's racecheck. Run from the repository root on a GPU; build first (no sanitizer),
then run the same command under the sanitizer:

    python results/experiments/09_racecheck.py race            # builds /tmp/ex09_race_tree
    compute-sanitizer --tool racecheck python results/experiments/09_racecheck.py race
    compute-sanitizer --tool racecheck python results/experiments/09_racecheck.py solution

The race variant is the one tests/test_ex09_rmsnorm_quant.py grades (CUDA_SHARED_RACE): the row's
values x*w parked in the reduction buffer while block_sum_max still reduces through it (each
warp's lane 0 writes its (sum, max) pair over the first columns, with no barrier against warp 0's
parking). Expected: hazards reported for the variant, "0 hazards" for the solution. One
(8, 4096) bf16 call: 8 blocks of 128 threads (4 warps each), so several warps' slots are in use.
"""
import shutil
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from grader.discover import discover  # noqa: E402
from grader.loader import load_track  # noqa: E402

EX = "09_rmsnorm_quant"
RACE_TREE = Path("/tmp/ex09_race_tree")


def race_tree() -> Path:
    from test_ex09_rmsnorm_quant import CUDA_SHARED_RACE
    dst = RACE_TREE / EX / "cuda"
    src = ROOT / "solutions" / EX / "cuda"
    if dst.exists():
        shutil.rmtree(dst)
    shutil.copytree(src, dst)
    for name, pairs in CUDA_SHARED_RACE.items():
        text = (dst / name).read_text()
        for old, new in pairs:
            assert old in text, f"{old!r} not in the solution's {name}"
            text = text.replace(old, new, 1)
        (dst / name).write_text(text)
    return RACE_TREE


def main():
    which = sys.argv[1] if len(sys.argv) > 1 else "race"
    tree = race_tree() if which == "race" else ROOT / "solutions"
    ex = discover(only="09")[0]
    impl = load_track(tree, ex, ex.tracks["cuda"])
    g = torch.Generator().manual_seed(0)
    x = torch.randn((8, 4096), generator=g).to("cuda", torch.bfloat16)
    w = torch.ones(4096, device="cuda", dtype=torch.bfloat16)
    q, scale = impl.rmsnorm_quant(x, w, 1e-6)
    torch.cuda.synchronize()
    print(f"{which}: q[0, :40] = {q[0, :40].tolist()}")
    print(f"{which}: scale = {scale.tolist()}")


if __name__ == "__main__":
    main()
