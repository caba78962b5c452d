"""Offline sm_90 compile (no GPU) of cand.py's kernels for every variant at the benchmark cases'
specialization: registers, stack (spills), shared memory, wgmma shapes with SS (A from shared
memory) or RS (A from registers), and the pendings of each warp_group_dot_wait. With the GPU
machine's Triton (3.6) installed aside:

    pip install --no-deps --target /tmp/t36 triton==3.6.0
    PYTHONPATH=/tmp/t36 .venv/bin/python benchmarks/attention_candidates/offline_sm90.py [variant ...]

(the solution's kernels compiled this way give ncu's figures: 128/232/128 registers at D 64,
238/255+spill/253 at D 128). TTGIR and PTX land in /tmp/a38_ir/.
"""
import importlib.util
import os
import sys
from pathlib import Path
import re
import time

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

TARGET = GPUTarget("cuda", 90, 32)


def compile_sm90(fn, args: dict, num_warps=4, num_stages=3, div16=()):
    """args: name -> type string ('*bf16', 'i32', 'fp32') or ('constexpr', value)."""
    sig, consts, attrs = {}, {}, {}
    for i, name in enumerate(fn.arg_names):
        a = args[name]
        if isinstance(a, tuple):
            sig[name] = "constexpr"
            consts[name] = a[1]
        else:
            sig[name] = a
            if a.startswith("*") or name in div16:
                attrs[(i,)] = [["tt.divisibility", 16]]
    src = ASTSource(fn, sig, constexprs=consts, attrs=attrs)
    k = triton.compile(src, target=TARGET, options=dict(num_warps=num_warps, num_stages=num_stages))
    return k


def report(k):
    md = k.metadata
    ptx = k.asm.get("ptx", "")
    shapes = {}
    for m in re.finditer(r"wgmma\.mma_async\.sync\.aligned\.(m64n\d+k\d+)[^{]*\{[^}]*\}\s*,\s*(\{|%)", ptx):
        key = m.group(1) + ("RS" if m.group(2) == "{" else "SS")
        shapes[key] = shapes.get(key, 0) + 1
    import subprocess
    import tempfile
    with tempfile.NamedTemporaryFile(suffix=".cubin", delete=False) as f:
        f.write(k.asm["cubin"]); path = f.name
    out = subprocess.run([os.path.join(os.path.dirname(triton.__file__), "backends/nvidia/bin/cuobjdump"), "--dump-resource-usage", path],
                         capture_output=True, text=True).stdout
    os.unlink(path)
    regs = re.search(r"REG:(\d+)", out); stack = re.search(r"STACK:(\d+)", out)
    return dict(regs=int(regs.group(1)) if regs else None, stack=int(stack.group(1)) if stack else None,
                smem_kb=round(md.shared / 1024, 1), wgmma=shapes)


PTRS = set("Q K V O DO DK DV DQ".split()); F32P = {"LSE", "DELTA"}
FLOATS = {"scale_hi", "scale_lo", "qk_scale_hi", "qk_scale_lo"}
CASE = {64: dict(causal=True), 128: dict(causal=False)}

def args_for(kern, D, cfg, causal, which):
    a = {}
    tma = cfg.hopper and cfg.tma
    flat = tma and bool(cfg.persist)
    cons = dict(HEAD_D=D, CAUSAL=causal, F64=False, PREC="tf32", HOPPER=cfg.hopper, TMA=tma,
                PIPE=cfg.pipe, REG=cfg.reg, PERSIST=bool(cfg.persist), FLAT=flat,
                BMAJOR=cfg.bmajor)
    if which == "dkdv": cons.update(BLOCK_N=cfg.own, BLOCK_M=cfg.step)
    else: cons.update(BLOCK_M=cfg.own, BLOCK_N=cfg.step)
    for p in kern.params:
        n = p.name
        if p.is_constexpr: a[n] = ("constexpr", cons[n])
        elif n in PTRS: a[n] = "*bf16"
        elif n in F32P: a[n] = "*fp32"
        elif n in FLOATS: a[n] = "fp32"
        elif n.startswith("stride") and n.endswith("d"): a[n] = ("constexpr", 1)
        else: a[n] = "i32"
    return a

spec = importlib.util.spec_from_file_location("cand", Path(__file__).resolve().parent / "cand.py")
cand = importlib.util.module_from_spec(spec)
spec.loader.exec_module(cand)
IR = Path("/tmp/a38_ir")
IR.mkdir(exist_ok=True)
KERN = {"fwd": cand._fwd_kernel, "dkdv": cand._bwd_dkdv_kernel, "dq": cand._bwd_dq_kernel}
want = sys.argv[1:] or list(cand.VARIANTS)
seen = {}
for vname in want:
    for D in (64, 128):
        for which, cfg in cand.VARIANTS[vname][D].items():
            key = (D, which, cfg)
            if key in seen:
                continue
            kern = KERN[which]
            div = {p.name for p in kern.params if not p.is_constexpr and p.name.startswith("stride")} | {"H", "S", "BH"}
            t = time.time()
            try:
                k = compile_sm90(kern, args_for(kern, D, cfg, CASE[D]["causal"], which), cfg.warps, cfg.stages, div)
                r = report(k)
                ttgir = k.asm["ttgir"]
                waits = re.findall(r"warp_group_dot_wait[^\n]*pendings = (\d+)", ttgir)
                r["waits"] = ",".join(waits)
                seen[key] = r
                open(IR / f"ir_{vname}_{D}_{which}.ttgir", "w").write(ttgir)
                open(IR / f"ir_{vname}_{D}_{which}.ptx", "w").write(k.asm["ptx"])
            except Exception as e:
                r = f"FAILED {type(e).__name__}: {str(e)[:400]}"
            print(f"{vname:13s} D{D:<3d} {which:5s} {tuple(cfg)} {r} {time.time()-t:.1f}s", flush=True)
