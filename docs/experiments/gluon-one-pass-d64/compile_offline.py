"""Offline (no GPU): compile the one-pass kernel (unordered and ordered, causal and not) and
the solution's dK/dV and dQ kernels for sm_90a, with the arguments their launchers pass;
print registers (cubin), ptxas spills, shared memory, wgmma and TMA-reduce counts.
Run: cd /work/main && PYTHONPATH=/tmp/t36 .venv/bin/python /work/exp38c/compile_offline.py"""
import math, os, re, subprocess, sys, tempfile
sys.path.insert(0, "/work/main/tests"); sys.path.insert(0, "/tmp/t36"); sys.path.insert(0, "/work/main")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pytest, torch
import test_ex13_flash_attention as t

t.POINTER[torch.int32] = "*i32"
BIN = "/tmp/t36/triton/backends/nvidia/bin/"
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "offline")
os.makedirs(OUT, exist_ok=True)


def figures(c, name):
    ptx = c.asm["ptx"]
    with tempfile.TemporaryDirectory() as d:
        cub = os.path.join(d, "k.cubin"); open(cub, "wb").write(c.asm["cubin"])
        res = subprocess.run([BIN + "cuobjdump", "--dump-resource-usage", cub],
                             capture_output=True, text=True).stdout
        p = os.path.join(d, "k.ptx"); open(p, "w").write(ptx)
        r = subprocess.run([BIN + "ptxas", "-arch=sm_90a", "-v", "--warn-on-spills", p, "-o",
                            os.path.join(d, "k.o")], capture_output=True, text=True)
    pt = r.stdout + r.stderr
    m = re.search(r"REG:(\d+)", res)
    spills = re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", pt)
    warn = [l.strip() for l in pt.splitlines() if "arning" in l]
    setmax = re.findall(r"setmaxnreg\.(inc|dec)\.sync\.aligned\.u32\s+(\d+)", ptx)
    open(os.path.join(OUT, name.split()[0] + ".ptx"), "w").write(ptx)
    return (f"{name}: cubin REG={m.group(1) if m else '?'} (launch), setmaxnreg="
            f"{sorted(set(n for _, n in setmax))}, ptxas spills(st,ld)={spills}, "
            f"shared={c.metadata.shared} B, wgmma.mma_async={ptx.count('wgmma.mma_async')}, "
            f"cp.reduce.async.bulk.tensor={ptx.count('cp.reduce.async.bulk.tensor')}, "
            f"ld.acquire={ptx.count('ld.acquire')}, red.release={ptx.count('red.release')}"
            + (f"\n   ptxas warnings: {warn}" if warn else ""))


def solution():
    fa = t._load(t.SOLUTION, "ex13_solution")
    for causal in (True, False):
        mp = pytest.MonkeyPatch()
        mp.setattr(fa, "_config", lambda q, *_: fa.CONFIGS[64]); mp.setattr(fa, "_sm90a", lambda x: True)
        rec = t._Recorder()
        for name in ("_bwd_delta_kernel", "_dkdv_gluon_kernel", "_dq_gluon_kernel"):
            mp.setattr(fa, name, rec(getattr(fa, name)))
        q, k, v, o, do = (torch.randn(1, 2, 1024, 64).to(torch.bfloat16) for _ in range(5))
        fa._bwd_impl(do, q, k, v, o, torch.randn(1, 2, 1024), causal, 1 / math.sqrt(64), fa._direct)
        for kernel, grid, args, kwargs in rec.launches[1:]:
            c = t._compile(kernel, args, kwargs, "fp32")
            print(figures(c, f"sol{kernel.__name__}_causal{int(causal)} (solution)"), flush=True)
        mp.undo()


def one_pass(dtypes=(torch.bfloat16,), spt=False, nw=1, pipe=False, cases=None):
    import one_pass as op
    for dtype in dtypes:
        for causal in (True, False):
            for ordered in (False, True):
                if cases and (causal, ordered) not in cases:
                    continue
                mp = pytest.MonkeyPatch()
                rec = t._Recorder()
                mp.setattr(op, "_one_pass_kernel", rec(op._one_pass_kernel))
                mp.setattr(op, "_dq_finish_kernel", rec(op._dq_finish_kernel))
                q, k, v, do = (torch.randn(1, 2, 1024, 64).to(dtype) for _ in range(4))
                lse, delta = torch.randn(1, 2, 1024), torch.randn(1, 2, 1024)
                op.backward_from_delta(q, k, v, do, lse, delta, causal, 0.125, ordered, spt=spt, nw=nw, pipe=pipe)
                mp.undo()
                for kernel, grid, args, kwargs in rec.launches:
                    if kernel.__name__ == "_dq_finish_kernel" and (causal, ordered) != (True, False):
                        continue
                    c = t._compile(kernel, args, kwargs, "fp32")
                    tag = f"{kernel.__name__}_{str(dtype)[6:]}_causal{int(causal)}_ordered{int(ordered)}_spt{int(spt)}_nw{nw}_pipe{int(pipe)}"
                    print(figures(c, tag), flush=True)


if __name__ == "__main__":
    what = sys.argv[1:] or ["one_pass", "solution"]
    if "one_pass" in what:
        one_pass()
    if "pipe" in what:
        one_pass(pipe=True, cases=[(True, True), (False, True)])
        one_pass(nw=2, cases=[(True, True), (True, False)])
        one_pass(nw=2, pipe=True, cases=[(True, True), (False, True)])
    if "spt" in what:
        one_pass(spt=True)
    if "fp16" in what:
        one_pass((torch.float16,))
    if "solution" in what:
        solution()


def meta():
    import one_pass as op
    mp = pytest.MonkeyPatch(); rec = t._Recorder()
    mp.setattr(op, "_one_pass_kernel", rec(op._one_pass_kernel))
    mp.setattr(op, "_dq_finish_kernel", rec(op._dq_finish_kernel))
    q, k, v, do = (torch.randn(1, 2, 1024, 64).to(torch.bfloat16) for _ in range(4))
    op.backward_from_delta(q, k, v, do, torch.randn(1, 2, 1024), torch.randn(1, 2, 1024), True, 0.125, True)
    kernel, grid, args, kwargs = rec.launches[0]
    c = t._compile(kernel, args, kwargs, "fp32")
    for m in c.metadata.tensordesc_meta:
        print(m)
    print("grid", grid, "num_warps", c.metadata.num_warps)
