"""The launch records on a GPU, in one run (≤ 4 minutes): what tests/test_launches.py's GPU tests
need to hold, with the details to read when one does not.

    python3 tests/launches_gpu.py        # from the repository root; logs under $OUT (or ./out)

1. the extension builds (the judge's build, grader/judge/launches_build.py);
2. a probe process sets the records up as the submission's process does, then runs calls under
   the profiler, each in a window: PyTorch ops, a Triton kernel, a kernel on a side stream; each
   call's report (grader.submission.evidence.analyse) is held against its records by the judge's
   cross-check, and both are printed. Twice: as designed (the records take CUPTI's subscriber
   over from torch's profiler), and with KINETO_USE_DAEMON=1 (Kineto never subscribes: the
   fallback, should the takeover fail);
3. tests/test_launches.py, GPU tests included (the solutions graded with the records on, and the
   forgeries), with the time left.
"""
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = Path(os.environ.get("OUT") or ROOT / "out")
BUDGET = int(os.environ.get("LAUNCHES_BUDGET", 225))  # seconds, the whole run

PROBE = r'''
import json, os, sys, time
t0 = time.time()
import torch, triton, triton.language as tl
from torch._C._profiler import _ExperimentalConfig
from grader.common.preamble import send_preamble, recv_preamble
from grader.judge.launches import open_records
from grader.submission.evidence import analyse
from grader.submission.launches import open_launches

print("torch", torch.__version__, "cuda", torch.version.cuda, "triton", triton.__version__,
      torch.cuda.get_device_name(), "KINETO_USE_DAEMON=" + os.environ.get("KINETO_USE_DAEMON", ""))

class Server:  # what open_launches needs of the submission's server
    gpu = True
    _profile = torch.autograd.profiler.profile
    _all_threads = _ExperimentalConfig(profile_all_threads=True)
    _marker = torch.zeros(1, device="cuda")

records, fd, preamble = open_records()
print("preamble", preamble)
import socket
a, b = socket.socketpair()
send_preamble(a, preamble, fd)
os.close(fd)
preamble, fd = recv_preamble(b.fileno())
t = time.time()
launches = open_launches(preamble, fd, Server)
print(f"set-up: {launches.status} ({time.time() - t:.2f} s)")
print("judge:", records.after("load", {}, {"ok": True}), records.summary())

@triton.jit
def add_kernel(x, y, out, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out + i, tl.load(x + i, mask=i < n) + tl.load(y + i, mask=i < n), mask=i < n)

def triton_add(x, y):
    out = torch.empty_like(x)
    add_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, out, x.numel(), BLOCK=1024)
    return out

side = torch.cuda.Stream()
def on_side(x, y):
    with torch.cuda.stream(side):
        return triton_add(x, y)

def graph_of(x, y):
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        o = x * y
    return g

x, y = (torch.randn(1 << 20, device="cuda") for _ in range(2))
triton_add(x, y); torch.cuda.synchronize()  # compiled outside the windows
g = graph_of(x, y); torch.cuda.synchronize()
calls = [("torch x + y", lambda: x + y), ("triton add", lambda: triton_add(x, y)),
         ("torch sum + mul", lambda: (x * y).sum()), ("a side stream", lambda: on_side(x, y)),
         ("a graph replay", lambda: g.replay()), ("matmul (cuBLAS)",
          lambda: torch.randn(256, 256, device="cuda") @ torch.randn(256, 256, device="cuda"))]
for name, fn in calls:
    t = time.time()
    with Server._profile(use_cpu=True, use_device="cuda", use_kineto=True,
                         experimental_config=Server._all_threads) as prof, launches.window():
        with torch.autograd.profiler.record_function("grader::marker"):
            Server._marker.zero_()
        fn()
        torch.cuda.synchronize()
    observed = analyse(prof.function_events, frozenset())
    found = records.after("call", {"target": ("entry", name)}, {"ok": True, "observed": observed})
    print(f"\n== {name} ({time.time() - t:.2f} s): findings {found}")
    print("  report: stream", observed["stream"], [(k[0][:90], k[1], k[2], k[3]) for k in observed["kernels"]])
    w = records.last
    print("  records:", [(l.stream, l.flags, l.name[:90]) for l in w.launches] if w else None,
          "graphs", w.graphs if w else None)
print("\n" + records.summary(), f"(probe {time.time() - t0:.1f} s)")
'''


def run(cmd, log, timeout, env=None):
    start = time.time()
    with open(OUT / log, "w") as f:
        try:
            code = subprocess.run(cmd, cwd=ROOT, stdout=f, stderr=subprocess.STDOUT,
                                  timeout=max(10, timeout), env=env).returncode
        except subprocess.TimeoutExpired:
            code = "timed out"
    print(f"{log}: exit {code} ({time.time() - start:.0f} s)")
    print((OUT / log).read_text()[-6000:], flush=True)


def main() -> int:
    began = time.time()
    OUT.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
    sys.path.insert(0, str(ROOT))
    from grader.judge.launches_build import built
    t = time.time()
    so, why = built()
    print(json.dumps({"built": str(so), "why": why, "seconds": round(time.time() - t, 1)}))
    if so is None:
        return 1
    run([sys.executable, "-c", PROBE], "probe-takeover.log", 45, env)
    if "set-up: ready" not in (OUT / "probe-takeover.log").read_text():  # the fallback's probe
        run([sys.executable, "-c", PROBE], "probe-daemon.log", 45, {**env, "KINETO_USE_DAEMON": "1"})
    left = BUDGET - (time.time() - began)
    run([sys.executable, "-m", "pytest", "tests/test_launches.py", "-v", "-rA",
         "-p", "no:cacheprovider", f"--junitxml={OUT / 'junit.xml'}"], "pytest.log", left, env)
    print(f"total {time.time() - began:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
