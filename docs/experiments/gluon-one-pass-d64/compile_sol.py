"""Offline (no GPU): compile the solution's D 64 Gluon backward kernels for sm_90a as the eager
door launches them; print registers, spills, shared memory and PTX counts."""
import math, re, subprocess, sys, tempfile, os
sys.path.insert(0, "/work/main/tests"); sys.path.insert(0, "/work/main")
import pytest, torch
import test_ex13_flash_attention as t

BIN = "/tmp/t36/triton/backends/nvidia/bin/"


def figures(c, name):
    ptx = c.asm["ptx"]
    with tempfile.NamedTemporaryFile(suffix=".cubin", delete=False) as f:
        f.write(c.asm["cubin"]); path = f.name
    res = subprocess.run([BIN + "cuobjdump", "--dump-resource-usage", path], capture_output=True,
                         text=True).stdout
    os.unlink(path)
    m = re.search(r"REG:(\d+).*?SHARED:(\d+)", res)
    regs = m.group(1) if m else "?"
    setmax = sorted(set(re.findall(r"setmaxnreg\.\w+\.sync\.aligned\.u32 (\d+)", ptx)))
    line = (f"{name}: cubin REG={regs} "
            f"shared={c.metadata.shared} B, setmaxnreg={setmax}, "
            f"wgmma={len(re.findall(r'wgmma.mma_async', ptx))}, "
            f"cp.reduce.async.bulk.tensor={len(re.findall(r'cp.reduce.async.bulk.tensor', ptx))}, "
            f"cuobjdump: {res.strip().splitlines()[-1].strip() if res.strip() else '?'}")
    return line


def ptxas_spills(c):
    """ptxas -v on the kernel's own PTX (the spill lines of the kernel)."""
    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "k.ptx"); open(p, "w").write(c.asm["ptx"])
        r = subprocess.run([BIN + "ptxas", "-arch=sm_90a", "-v", p, "-o", os.path.join(d, "k.o")],
                           capture_output=True, text=True)
        return " | ".join(l.strip() for l in (r.stdout + r.stderr).splitlines()
                          if "spill" in l or "registers" in l)


if __name__ == "__main__":
    fa = t._load(t.SOLUTION, "ex13_solution")
    mp = pytest.MonkeyPatch()
    mp.setattr(fa, "_config", lambda q, *_: fa.CONFIGS[64]); mp.setattr(fa, "_sm90a", lambda x: True)
    rec = t._Recorder()
    for name in ("_bwd_delta_kernel", "_dkdv_gluon_kernel", "_dq_gluon_kernel"):
        mp.setattr(fa, name, rec(getattr(fa, name)))
    q, k, v, o, do = (torch.randn(1, 2, 1024, 64).to(torch.bfloat16) for _ in range(5))
    fa._bwd_impl(do, q, k, v, o, torch.randn(1, 2, 1024), True, 1 / math.sqrt(64), fa._direct)
    for kernel, grid, args, kwargs in rec.launches[1:]:
        c = t._compile(kernel, args, kwargs, "fp32")
        print(figures(c, kernel.__name__ + " (solution, D64 causal)"))
        print("   ptxas -v:", ptxas_spills(c))
