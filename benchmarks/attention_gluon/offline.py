"""Offline sm_90a compile (no GPU) of gluon_fa._fa_fwd_kernel with the GPU machine's Triton (3.6.0),
installed aside in /tmp/t36:

    PYTHONPATH=/tmp/t36 .venv/bin/python benchmarks/attention_gluon/offline.py

Prints registers per thread, stack/spills, shared memory, warps, the wgmma shapes (SS: A from
shared memory, RS: A from registers), TMA loads/stores, setmaxnreg, barrier ops. IR lands in
/tmp/g38_ir/.
"""
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import triton
from triton.backends.compiler import GPUTarget
from triton.runtime.jit import mangle_type
from triton.experimental.gluon._runtime import GluonASTSource

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gluon_fa as G  # noqa: E402

TARGET = GPUTarget("cuda", 90, 32)
IR = Path("/tmp/g38_ir")
IR.mkdir(exist_ok=True)


def compile_kernel(B=4, H=32, S=4096, D=128):
    # descriptors built from CPU tensors: only their types (block shape, layout) matter here
    q = torch.empty(B, H, S, D, dtype=torch.bfloat16)
    descs = G.make_descs(q, q, q, q)
    fn = G._fa_fwd_kernel
    consts = dict(HEAD_D=D, BLOCK_M=G.BLOCK_M, BLOCK_N=G.BLOCK_N, WG_M=G.WG_M, STAGES=G.STAGES,
                  CONSUMER_REGS=G.CONSUMER_REGS, PRODUCER_REGS=G.PRODUCER_REGS)
    types = dict(q_desc=mangle_type(descs[0]), k_desc=mangle_type(descs[1]),
                 v_desc=mangle_type(descs[2]), o_desc=mangle_type(descs[3]),
                 lse_ptr="*fp32", qk_scale="fp32", S="i32")
    sig, attrs = {}, {}
    for i, name in enumerate(fn.arg_names):
        if name in consts:
            sig[name] = "constexpr"
        else:
            sig[name] = types[name]
            if name in ("lse_ptr", "S"):
                attrs[(i,)] = [["tt.divisibility", 16]]
    src = GluonASTSource(fn, sig, constexprs=consts, attrs=attrs)
    return triton.compile(src, target=TARGET, options=dict(num_warps=4))


def resource_usage(cubin):
    with tempfile.NamedTemporaryFile(suffix=".cubin", delete=False) as f:
        f.write(cubin)
        path = f.name
    tool = os.path.join(os.path.dirname(triton.__file__), "backends/nvidia/bin/cuobjdump")
    out = subprocess.run([tool, "--dump-resource-usage", path], capture_output=True, text=True).stdout
    os.unlink(path)
    return out


def main():
    print(f"triton {triton.__version__} from {os.path.dirname(triton.__file__)}; target sm_90a")
    t = time.time()
    k = compile_kernel()
    print(f"compiled in {time.time() - t:.1f}s")
    md = k.metadata
    ptx, ttgir = k.asm["ptx"], k.asm["ttgir"]
    (IR / "fa.ttgir").write_text(ttgir)
    (IR / "fa.ptx").write_text(ptx)
    ru = resource_usage(k.asm["cubin"])
    regs = re.search(r"REG:(\d+)", ru)
    stack = re.search(r"STACK:(\d+)", ru)
    print(f"warps: {md.num_warps} in all = 4 (default partition: consumer warpgroup 0) + 4 (worker: "
          f"consumer warpgroup 1) + 1 (worker: TMA producer), padded to 3 warpgroups; "
          f"{32 * md.num_warps} threads")
    print(f"registers/thread (launch, cuobjdump) {regs.group(1) if regs else '?'}; "
          f"stack {stack.group(1) if stack else '?'} bytes")
    print("cuobjdump:", " ".join(ru.split()))
    print(f"shared memory {md.shared} bytes ({md.shared / 1024:.1f} KB)")
    print("setmaxnreg:", sorted(set(re.findall(r"setmaxnreg\.(?:inc|dec)\.sync\.aligned\.u32\s+\d+", ptx))))
    shapes = {}
    for m in re.finditer(r"wgmma\.mma_async\.sync\.aligned\.(m64n\d+k\d+)[^{]*\{[^}]*\}\s*,\s*(\{|%)", ptx):
        key = m.group(1) + ("RS" if m.group(2) == "{" else "SS")
        shapes[key] = shapes.get(key, 0) + 1
    print("wgmma.mma_async:", shapes, "; wgmma.wait_group:",
          sorted(set(re.findall(r"wgmma\.wait_group\.sync\.aligned\s+\d+", ptx))))
    print("TMA loads (cp.async.bulk.tensor ... global):",
          len(re.findall(r"cp\.async\.bulk\.tensor\.\dd\.shared::cluster\.global", ptx)),
          "; TMA stores:", len(re.findall(r"cp\.async\.bulk\.tensor\.\dd\.global\.shared", ptx)))
    print("mbarrier ops:", {op: len(re.findall(op, ptx)) for op in
                            ("mbarrier.init", "mbarrier.arrive", "mbarrier.try_wait", "expect_tx")})
    print("bar.sync/bar.arrive (named barriers):", sorted(set(re.findall(r"bar\.(?:sync|arrive)\s+\d+(?:,\s*\d+)?", ptx))))
    # ptxas -v on the PTX: spills, and any wgmma serialisation warning ("Potential Performance Loss")
    ptxas = os.path.join(os.path.dirname(triton.__file__), "backends/nvidia/bin/ptxas")
    pv = subprocess.run([ptxas, "-arch=sm_90a", "-v", str(IR / "fa.ptx"), "-o", str(IR / "fa.cubin")],
                        capture_output=True, text=True)
    for ln in (pv.stdout + pv.stderr).splitlines():
        if "spill" in ln or "Used" in ln or "Performance" in ln or "warning" in ln.lower():
            print("ptxas:", ln.strip())
    print("local memory ld/st in PTX:", len(re.findall(r"\bld\.local", ptx)), len(re.findall(r"\bst\.local", ptx)))
    print("waits in TTGIR:", re.findall(r"warp_group_dot_wait[^\n]*pendings = (\d+)", ttgir))


if __name__ == "__main__":
    main()
