"""What Inductor's compile-worker pool costs a grader process (grader.spawn.compile_in_process).

    python results/experiments/inductor_pool.py [--out DIR]

For TORCHINDUCTOR_COMPILE_THREADS unset (Inductor's default: one worker per core, up to 32)
and 1 (compile in the process), in a fresh process each, with the Inductor cache cold and then
warm: the wall time of the first forward+backward call of 06's compiled reference at its graded
case, and, 5 s later, the processes that call left behind and the CPU seconds they burned.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

CHILD = r"""
import json, os, sys, time
began = time.perf_counter()
import torch
sys.path.insert(0, os.getcwd())
from grader.discover import discover
from grader.measure import make_inputs, step, _dy_for
from grader.reference import load_reference
ex = discover(only="06")[0]
ref = load_reference(ex)
args = make_inputs(ex, ref, ex.benchmark.case, 1)
dy = _dy_for(ref, args, ex)
fn = torch.compile(ref.reference, dynamic=False)
imported = time.perf_counter() - began
t = time.perf_counter()
step(fn, args, "forward_backward", ex.benchmark.grad_args, dy)[0]()
torch.cuda.synchronize()
first = time.perf_counter() - t
time.sleep(5)
tick = os.sysconf("SC_CLK_TCK")
def kids(pid):
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                f = open(f"/proc/{d}/stat").read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(f[1]) == pid:
                out.append(int(d))
    return out + [k for c in out for k in kids(c)]
procs = kids(os.getpid())
cpu = 0.0
for p in procs:
    try:
        f = open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()
        cpu += (int(f[11]) + int(f[12])) / tick
    except OSError:
        pass
print(json.dumps({"import_s": round(imported, 2), "first_call_s": round(first, 2),
                  "processes_left": len(procs), "their_cpu_s": round(cpu, 1)}))
"""


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", default=None)
    a = p.parse_args()
    rows = []
    for threads in (None, "1"):
        cache = tempfile.mkdtemp(prefix="inductor-pool-")
        for state in ("cold", "warm"):
            env = {k: v for k, v in os.environ.items() if k != "TORCHINDUCTOR_COMPILE_THREADS"}
            env["TORCHINDUCTOR_CACHE_DIR"] = cache
            if threads:
                env["TORCHINDUCTOR_COMPILE_THREADS"] = threads
            t = time.perf_counter()
            r = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True,
                               text=True, start_new_session=True)
            line = (r.stdout.strip().splitlines() or ["{}"])[-1]
            try:
                row = json.loads(line)
            except ValueError:
                row = {"error": (r.stderr or r.stdout)[-400:]}
            row.update(threads=threads or f"default ({os.cpu_count()} cores)", cache=state,
                       process_s=round(time.perf_counter() - t, 1))
            rows.append(row)
            print(json.dumps(row), flush=True)
    if a.out:
        os.makedirs(a.out, exist_ok=True)
        with open(os.path.join(a.out, "inductor_pool.json"), "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
