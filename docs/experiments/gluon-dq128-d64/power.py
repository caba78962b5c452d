"""Clocks and power under sustained forward+backward, issue 38's leaderboard case (B 1, H 16,
S 16384, D 64, causal, bf16): 13's solution against SDPA cuDNN, each step captured in a CUDA
graph and replayed back to back for ~4 s while NVML is sampled every 20 ms (SM clock, power,
the throttle reasons). Alternated A B A B. `python3 .whl/s22/power.py` from the repo root."""
import importlib.util
import statistics
import threading
import time

import pynvml
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.functional import scaled_dot_product_attention as sdpa

spec = importlib.util.spec_from_file_location(
    "fa13", "solutions/13_flash_attention/triton/flash_attention.py")
fa = importlib.util.module_from_spec(spec)
spec.loader.exec_module(fa)

import sys
# B H S D causal, default issue 38's leaderboard case; the wide one: 4 32 4096 128 0
B, H, S, D, CAUSAL = (int(a) for a in sys.argv[1:6]) if len(sys.argv) > 5 else (1, 16, 16384, 64, 1)
CAUSAL = bool(CAUSAL)
shape = (B, H, S, D)
q, k, v, do = (torch.randn(shape, device="cuda", dtype=torch.bfloat16) for _ in range(4))
q, k, v = (t.requires_grad_() for t in (q, k, v))


def ours():
    return torch.autograd.grad(fa.flash_attention(q, k, v, CAUSAL), (q, k, v), do)


def cudnn():
    with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
        return torch.autograd.grad(sdpa(q, k, v, is_causal=CAUSAL), (q, k, v), do)


def graph(step):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            step()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        step()
    return g


pynvml.nvmlInit()
h = pynvml.nvmlDeviceGetHandleByIndex(torch.cuda.current_device())


def sustained(g, seconds=4.0):
    for _ in range(20):
        g.replay()
    torch.cuda.synchronize()
    samples, stop = [], threading.Event()

    def sample():
        while not stop.is_set():
            samples.append((pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM),
                            pynvml.nvmlDeviceGetPowerUsage(h) / 1000,
                            pynvml.nvmlDeviceGetCurrentClocksThrottleReasons(h)))
            time.sleep(0.02)

    t = threading.Thread(target=sample)
    t.start()
    n, began = 0, time.time()
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record()
    while time.time() - began < seconds:
        for _ in range(50):
            g.replay()
        n += 50
        torch.cuda.synchronize()
    e1.record()
    torch.cuda.synchronize()
    stop.set()
    t.join()
    ms = e0.elapsed_time(e1) / n
    clocks = [s[0] for s in samples[5:]]
    watts = [s[1] for s in samples[5:]]
    reasons = sorted({hex(s[2]) for s in samples[5:]})
    return (f"{ms:.3f} ms a step over {n} replays; SM clock median {statistics.median(clocks):.0f} "
            f"MHz (min {min(clocks)}, max {max(clocks)}); power median "
            f"{statistics.median(watts):.0f} W (max {max(watts):.0f}); throttle reasons {reasons}")


graphs = {"solution": graph(ours), "cudnn": graph(cudnn)}
print("case", shape, "causal", CAUSAL, "; power limit", pynvml.nvmlDeviceGetEnforcedPowerLimit(h) / 1000, "W; max SM clock",
      pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_SM), "MHz")
for r in range(2):
    for name, g in graphs.items():
        print(f"run {r + 1} {name}: {sustained(g)}", flush=True)
