"""Nsight Compute's reading of SDPA cuDNN's forward+backward at issue 38's leaderboard case
(B 1, H 16, S 16384, D 64, causal, bf16), read as benchmarks/flash_attention_sweep.py reads the
solution's. `python3 .whl/s22/cudnn_ncu.py OUTDIR` (it runs ncu on itself with --child)."""
import subprocess
import sys
from pathlib import Path

if sys.argv[1] == "--child":
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention as sdpa
    q, k, v, do = (torch.randn(1, 16, 16384, 64, device="cuda", dtype=torch.bfloat16)
                   for _ in range(4))
    q, k, v = (t.requires_grad_() for t in (q, k, v))
    with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
        for profiled in (False, True):
            if profiled:
                torch.cuda.profiler.start()
            sdpa(q, k, v, is_causal=True).backward(do)
            torch.cuda.synchronize()
        torch.cuda.profiler.stop()
    sys.exit(0)

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from flash_attention_sweep import SECTIONS, ncu_readings  # noqa: E402

out = Path(sys.argv[1])
cmd = ["ncu", "--clock-control", "none", "--profile-from-start", "off", "--target-processes",
       "all", "--csv", "--page", "raw", "--print-units", "base"]
for s in SECTIONS:
    cmd += ["--section", s]
cmd += ["--metrics", "gpu__time_duration.sum,launch__registers_per_thread",
        sys.executable, __file__, "--child"]
p = subprocess.run(cmd, capture_output=True, text=True, timeout=200)
(out / "cudnn_ncu.csv").write_text(p.stdout)
(out / "cudnn_ncu.err").write_text(p.stderr[-20000:])
print(f"ncu exit {p.returncode}; SDPA cuDNN forward+backward, leaderboard case:")
for line in ncu_readings(p.stdout):
    print("  " + line)
