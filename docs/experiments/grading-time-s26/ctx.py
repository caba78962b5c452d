"""How long CUDA context creation takes when N processes make theirs at once (torch imported
first, then a barrier, then the first CUDA tensor)."""
import os, subprocess, sys, tempfile, time
CHILD = r'''
import os, sys, time, torch
open(sys.argv[1] + f".{os.getpid()}", "w").close()
while not os.path.exists(sys.argv[2]): time.sleep(0.001)
t = time.perf_counter(); torch.empty(1, device="cuda"); torch.cuda.synchronize()
print(f"{time.perf_counter() - t:.3f}")
'''
for n in [1, 2, 4, 8, 16, 32]:
    d = tempfile.mkdtemp()
    ready, go = os.path.join(d, "r"), os.path.join(d, "go")
    ps = [subprocess.Popen([sys.executable, "-c", CHILD, ready, go], stdout=subprocess.PIPE, text=True) for _ in range(n)]
    while len([f for f in os.listdir(d) if f.startswith("r.")]) < n: time.sleep(0.01)
    t = time.perf_counter(); open(go, "w").close()
    outs = sorted(float(p.communicate()[0]) for p in ps)
    print(f"N={n:2d}: all contexts made in {time.perf_counter() - t:.2f} s; each {outs[0]:.2f}-{outs[-1]:.2f} s, median {outs[n // 2]:.2f}", flush=True)
