"""Offline sm_90a compile (no GPU) of gluon_bwd's two kernels with the GPU machine's Triton
(3.6.0), installed aside in /tmp/t36, at the leaderboard case's specialization (B 1, H 16,
S 16384, D 64, causal, bf16):

    PYTHONPATH=/tmp/t36 .venv/bin/python .whl/g38b/offline.py  [--noncausal]

Prints per kernel: registers per thread (launch), stack/spills (ptxas -v), shared memory, warps,
setmaxnreg, the wgmma shapes (SS: A from shared memory, RS: A from registers), wait_group depths,
TMA loads/stores, mbarrier ops, named barriers. IR lands in /tmp/g38b_ir/.
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

sys.dont_write_bytecode = True
sys.path.insert(0, str(Path(__file__).resolve().parent))
import gluon_bwd as G  # noqa: E402

TARGET = GPUTarget("cuda", 90, 32)
IR = Path("/tmp/g38b_ir")
IR.mkdir(exist_ok=True)


def descs(B, H, S, D):
    # descriptors built from CPU tensors: only their types (block shape, layout) matter here
    t = torch.empty(B, H, S, D, dtype=torch.bfloat16)
    lse = torch.empty(B, H, S, dtype=torch.float32)
    delta = torch.empty(B * H * S, dtype=torch.float32)
    return G.make_descs(t, t, t, t, t, t, t, lse, delta)


def compile_one(fn, types, consts, div16):
    sig, attrs = {}, {}
    for i, name in enumerate(fn.arg_names):
        if name in consts:
            sig[name] = "constexpr"
        else:
            sig[name] = types[name]
            if name in div16:
                attrs[(i,)] = [["tt.divisibility", 16]]
    src = GluonASTSource(fn, sig, constexprs=consts, attrs=attrs)
    return triton.compile(src, target=TARGET, options=dict(num_warps=4))


def compile_all(B=1, H=16, S=16384, D=64, causal=True):
    d = descs(B, H, S, D)
    consts = G._constexprs(D, causal)
    m = {k: mangle_type(v) for k, v in d.items()}
    dkdv_types = dict(q_desc=m["q"], do_desc=m["do"], k_desc=m["k"], v_desc=m["v"],
                      dk_desc=m["dk"], dv_desc=m["dv"], lse_desc=m["lse"], dl_desc=m["delta"],
                      qk_scale="fp32", scale="fp32", S="i32", BH="i32")
    dq_types = dict(q_desc=m["q"], do_desc=m["do"], k_desc=m["k"], v_desc=m["v"],
                    dq_desc=m["dq"], lse_ptr="*fp32", dl_ptr="*fp32",
                    qk_scale="fp32", scale="fp32", S="i32", BH="i32")
    out = {}
    for name, fn, types, div in (("dkdv", G._dkdv_kernel, dkdv_types, ("S",)),
                                 ("dq", G._dq_kernel, dq_types, ("S", "lse_ptr", "dl_ptr"))):
        t = time.time()
        try:
            out[name] = (compile_one(fn, types, consts, div), time.time() - t)
        except Exception as e:  # noqa: BLE001
            msg = str(e)
            print(f"[{name}] COMPILE FAILED: {type(e).__name__}: {msg[:3000]}")
            out[name] = (None, time.time() - t)
    return out


def resource_usage(cubin):
    with tempfile.NamedTemporaryFile(suffix=".cubin", delete=False) as f:
        f.write(cubin)
        path = f.name
    tool = os.path.join(os.path.dirname(triton.__file__), "backends/nvidia/bin/cuobjdump")
    out = subprocess.run([tool, "--dump-resource-usage", path], capture_output=True, text=True).stdout
    os.unlink(path)
    return out


def report(name, k, secs):
    print(f"=== {name}: compiled in {secs:.1f}s")
    md = k.metadata
    ptx, ttgir = k.asm["ptx"], k.asm["ttgir"]
    (IR / f"{name}.ttgir").write_text(ttgir)
    (IR / f"{name}.ptx").write_text(ptx)
    ru = resource_usage(k.asm["cubin"])
    regs = re.search(r"REG:(\d+)", ru)
    stack = re.search(r"STACK:(\d+)", ru)
    print(f"warps: {md.num_warps} in all (4 default = consumer WG0, 4 worker = consumer WG1, "
          f"1 worker = TMA producer, padded to 3 warpgroups); {32 * md.num_warps} threads")
    print(f"registers/thread (launch, cuobjdump) {regs.group(1) if regs else '?'}; "
          f"stack {stack.group(1) if stack else '?'} bytes")
    print(f"shared memory {md.shared} bytes ({md.shared / 1024:.1f} KB)")
    print("setmaxnreg:", sorted(set(re.sub(r"\s+", " ", s) for s in
                                    re.findall(r"setmaxnreg\.(?:inc|dec)\.sync\.aligned\.u32\s+\d+", ptx))))
    shapes = {}
    for mm in re.finditer(r"wgmma\.mma_async\.sync\.aligned\.(m64n\d+k\d+)[^{]*\{[^}]*\}\s*,\s*(\{|%)", ptx):
        key = mm.group(1) + ("RS" if mm.group(2) == "{" else "SS")
        shapes[key] = shapes.get(key, 0) + 1
    print("wgmma.mma_async (PTX, static count):", shapes, "; wait_group:",
          sorted(set(re.sub(r"\s+", " ", s) for s in re.findall(r"wgmma\.wait_group\.sync\.aligned\s+\d+", ptx))))
    print("TMA loads:", len(re.findall(r"cp\.async\.bulk\.tensor\.\dd\.shared::cluster\.global", ptx)),
          "(1d:", len(re.findall(r"cp\.async\.bulk\.tensor\.1d\.shared::cluster\.global", ptx)), ")",
          "; TMA stores:", len(re.findall(r"cp\.async\.bulk\.tensor\.\dd\.global\.shared", ptx)))
    print("mbarrier ops:", {op: len(re.findall(op, ptx)) for op in
                            ("mbarrier.init", "mbarrier.arrive", "mbarrier.try_wait", "expect_tx")})
    print("named barriers:", sorted(set(re.sub(r"\s+", " ", s) for s in
                                        re.findall(r"bar\.(?:sync|arrive)\s+\d+(?:,\s*\d+)?", ptx))))
    ptxas = os.path.join(os.path.dirname(triton.__file__), "backends/nvidia/bin/ptxas")
    pv = subprocess.run([ptxas, "-arch=sm_90a", "-v", str(IR / f"{name}.ptx"), "-o",
                         str(IR / f"{name}.cubin")], capture_output=True, text=True)
    for ln in (pv.stdout + pv.stderr).splitlines():
        if "spill" in ln or "Used" in ln or "Performance" in ln or "warning" in ln.lower():
            print("ptxas:", ln.strip())
    print("local ld/st in PTX:", len(re.findall(r"\bld\.local", ptx)), len(re.findall(r"\bst\.local", ptx)))
    print("warp_group_dot_wait pendings in TTGIR:",
          re.findall(r"warp_group_dot_wait[^\n]*pendings = (\d+)", ttgir))
    # SASS: HGMMA count and whether the A operand is registers (R) or a descriptor (gdesc)
    try:
        dis = subprocess.run([os.path.join(os.path.dirname(triton.__file__),
                                           "backends/nvidia/bin/nvdisasm"), "-hex",
                              str(IR / f"{name}.cubin")], capture_output=True, text=True).stdout
        h = re.findall(r"HGMMA\.[^ ]+", dis)
        kinds = {}
        for x in h:
            kinds[x] = kinds.get(x, 0) + 1
        print("SASS HGMMA:", kinds)
    except Exception as e:  # noqa: BLE001
        print("nvdisasm failed:", e)


def main():
    causal = "--noncausal" not in sys.argv
    print(f"triton {triton.__version__} from {os.path.dirname(triton.__file__)}; target sm_90a; "
          f"B 1 H 16 S 16384 D 64 {'causal' if causal else 'not causal'} bf16")
    for name, (k, secs) in compile_all(causal=causal).items():
        if k is not None:
            report(name, k, secs)


if __name__ == "__main__":
    main()
