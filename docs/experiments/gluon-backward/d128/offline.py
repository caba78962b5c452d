"""Offline sm_90a compile (no GPU) of gluon_bwd128's two kernels with the GPU machine's Triton
(3.6.0), installed aside in /tmp/t36, at the D 128 benchmark specialization (B 4, H 32, S 4096,
D 128, bf16), for the default CONFIG and the alternative switches:

    PYTHONPATH=/tmp/t36 /work/main/.venv/bin/python /work/main/.whl/g38c/offline.py [--all]

Prints per kernel: registers per thread (launch), stack/spills (ptxas -v, which also prints
C7512 "wgmma serialized" if it happens), shared memory, warps, setmaxnreg, the wgmma shapes (SS:
A from shared memory, RS: A from registers), wait_group depths, TMA loads/stores, mbarrier ops,
named barriers, SASS HGMMA count and the highest register used, and any shuffles or local
memory in the SASS. IR lands in /tmp/g38c_ir/.
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
import gluon_bwd128 as G  # noqa: E402

TARGET = GPUTarget("cuda", 90, 32)
IR = Path("/tmp/g38c_ir")
IR.mkdir(exist_ok=True)
BIN = os.path.join(os.path.dirname(triton.__file__), "backends/nvidia/bin")


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


def compile_kernel(which, causal, cfg, B=4, H=32, S=4096, D=128):
    d = descs(B, H, S, D)
    m = {k: mangle_type(v) for k, v in d.items()}
    if which == "dkdv":
        types = dict(q_desc=m["q"], do_desc=m["do"], k_desc=m["k"], v_desc=m["v"],
                     dk_desc=m["dk"], dv_desc=m["dv"], lse_desc=m["lse"], dl_desc=m["delta"],
                     qk_scale="fp32", scale="fp32", S="i32", BH="i32")
        return compile_one(G._dkdv_kernel, types, G.dkdv_constexprs(causal, cfg), ("S",))
    types = dict(q_desc=m["q"], do_desc=m["do"], k_desc=m["k"], v_desc=m["v"],
                 dq_desc=m["dq"], lse_ptr="*fp32", dl_ptr="*fp32",
                 qk_scale="fp32", scale="fp32", S="i32", BH="i32")
    return compile_one(G._dq_kernel, types, G.dq_constexprs(causal, cfg), ("S", "lse_ptr", "dl_ptr"))


def resource_usage(cubin):
    with tempfile.NamedTemporaryFile(suffix=".cubin", delete=False) as f:
        f.write(cubin)
        path = f.name
    out = subprocess.run([os.path.join(BIN, "cuobjdump"), "--dump-resource-usage", path],
                         capture_output=True, text=True).stdout
    os.unlink(path)
    return out


def report(tag, k, secs, brief=False):
    md = k.metadata
    ptx, ttgir = k.asm["ptx"], k.asm["ttgir"]
    (IR / f"{tag}.ttgir").write_text(ttgir)
    (IR / f"{tag}.ptx").write_text(ptx)
    (IR / f"{tag}.cubin").write_bytes(k.asm["cubin"])
    ru = resource_usage(k.asm["cubin"])
    regs = re.search(r"REG:(\d+)", ru)
    stack = re.search(r"STACK:(\d+)", ru)
    pv = subprocess.run([os.path.join(BIN, "ptxas"), "-arch=sm_90a", "-v", str(IR / f"{tag}.ptx"),
                         "-o", str(IR / f"{tag}.ptxas.cubin")], capture_output=True, text=True)
    ptxas_lines = [ln.strip() for ln in (pv.stdout + pv.stderr).splitlines()
                   if "spill" in ln or "Used" in ln or "Performance" in ln or "C7512" in ln
                   or "warning" in ln.lower()]
    c7512 = any("C7512" in ln or "serialized" in ln for ln in ptxas_lines)
    spills = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", " ".join(ptxas_lines))
    shapes = {}
    for mm in re.finditer(r"wgmma\.mma_async\.sync\.aligned\.(m64n\d+k\d+)[^{]*\{[^}]*\}\s*,\s*(\{|%)", ptx):
        key = mm.group(1) + ("RS" if mm.group(2) == "{" else "SS")
        shapes[key] = shapes.get(key, 0) + 1
    dis = subprocess.run([os.path.join(BIN, "nvdisasm"), "-hex", str(IR / f"{tag}.cubin")],
                         capture_output=True, text=True).stdout
    (IR / f"{tag}.sass").write_text(dis)
    hg = {}
    for x in re.findall(r"HGMMA\.[^ ]+", dis):
        hg[x] = hg.get(x, 0) + 1
    hgmma_total = sum(hg.values())
    # HGMMA with A from registers: the first source after the accumulator is R, not gdesc
    hg_rs = len(re.findall(r"HGMMA\.[^ ]+ R\d+, R\d+, gdesc", dis)) + \
        len(re.findall(r"HGMMA\.[^ ]+ R\d+, R\d+, R\d+", dis))
    maxreg = max((int(r) for r in re.findall(r"\bR(\d+)\b", dis)), default=-1)
    depbar0 = len(re.findall(r"WARPGROUP\.DEPBAR\.LE gsb0, 0x0", dis))
    shfl = len(re.findall(r"\bSHFL\.", dis))
    lcl = len(re.findall(r"\b(?:LDL|STL)\b", dis))
    print(f"=== {tag}: compiled in {secs:.1f}s")
    print(f"registers/thread (launch, cuobjdump) {regs.group(1) if regs else '?'}; "
          f"stack {stack.group(1) if stack else '?'} bytes; highest register in SASS R{maxreg}")
    print("ptxas -v:", " | ".join(ptxas_lines))
    print(f"spills: {spills.group(1) + ' / ' + spills.group(2) if spills else '?'} bytes "
          f"(stores / loads); C7512 wgmma serialized: {'YES' if c7512 else 'no'}; "
          f"SASS LDL/STL {lcl}, SHFL {shfl}")
    print(f"shared memory {md.shared} bytes ({md.shared / 1024:.1f} KB); warps {md.num_warps} "
          f"({32 * md.num_warps} threads)")
    print("wgmma.mma_async (PTX, static):", shapes, "; wait_group:",
          sorted(set(re.sub(r"\s+", " ", s) for s in re.findall(r"wgmma\.wait_group\.sync\.aligned\s+\d+", ptx))))
    print(f"SASS HGMMA: {hg} (A from registers: {hg_rs} of {hgmma_total}); "
          f"'WARPGROUP.DEPBAR.LE gsb0, 0x0': {depbar0}")
    summary = dict(regs=regs.group(1) if regs else "?", maxreg=maxreg, c7512=c7512,
                   spills="/".join(spills.groups()) if spills else "?",
                   stack=stack.group(1) if stack else "?", smem=md.shared,
                   ss=sum(v for k_, v in shapes.items() if k_.endswith("SS")),
                   rs=sum(v for k_, v in shapes.items() if k_.endswith("RS")))
    if brief:
        return summary
    print("setmaxnreg:", sorted(set(re.sub(r"\s+", " ", s) for s in
                                    re.findall(r"setmaxnreg\.(?:inc|dec)\.sync\.aligned\.u32\s+\d+", ptx))))
    print("TMA loads:", len(re.findall(r"cp\.async\.bulk\.tensor\.\dd\.shared::cluster\.global", ptx)),
          "(1d:", len(re.findall(r"cp\.async\.bulk\.tensor\.1d\.shared::cluster\.global", ptx)), ")",
          "; TMA stores:", len(re.findall(r"cp\.async\.bulk\.tensor\.\dd\.global\.shared", ptx)))
    print("mbarrier ops:", {op: len(re.findall(op, ptx)) for op in
                            ("mbarrier.init", "mbarrier.arrive", "mbarrier.try_wait", "expect_tx")})
    print("named barriers:", sorted(set(re.sub(r"\s+", " ", s) for s in
                                        re.findall(r"bar\.(?:sync|arrive)\s+\d+(?:,\s*\d+)?", ptx))))
    print("warp_group_dot_wait pendings in TTGIR:",
          re.findall(r"warp_group_dot_wait[^\n]*pendings = (\d+)", ttgir))
    print("ld.shared / st.shared / stmatrix / ldmatrix in PTX:",
          len(re.findall(r"\bld\.shared", ptx)), len(re.findall(r"\bst\.shared", ptx)),
          len(re.findall(r"stmatrix", ptx)), len(re.findall(r"ldmatrix", ptx)))
    return summary


def main():
    print(f"triton {triton.__version__} from {os.path.dirname(triton.__file__)}; target sm_90a; "
          f"B 4 H 32 S 4096 D 128 bf16; CONFIG {G.CONFIG}")
    runs = [("dkdv", False, None), ("dq", False, None), ("dkdv", True, None), ("dq", True, None)]
    if "--all" in sys.argv:
        runs += [("dkdv", False, dict(DKDV_OVERLAP=False)),
                 ("dkdv", False, dict(DKDV_KREG=True, DKDV_OVERLAP=False)),
                 ("dkdv", False, dict(DKDV_KREG=True, DKDV_OVERLAP=True)),
                 ("dkdv", False, dict(DKDV_STAGES=3)),
                 ("dq", False, dict(DQ_DOREG=False)),
                 ("dq", False, dict(DQ_STAGES=3)),
                 ("dkdv", False, dict(DKDV_DEFER=True)),
                 ("dkdv", False, dict(DKDV_DEFER=True, DKDV_OVERLAP=False)),
                 ("dkdv", True, dict(DKDV_DEFER=True)),
                 ("dq", False, dict(DQ_DEFER=True)),
                 ("dq", True, dict(DQ_DEFER=True)),
                 ("dq", False, dict(DQ_DEFER=True, DQ_DOREG=False))]
    table = []
    for which, causal, cfg in runs:
        tag = f"{which}_{'causal' if causal else 'noncausal'}" + \
            ("" if not cfg else "_" + "_".join(f"{k}{int(v)}" for k, v in cfg.items()))
        print(f"\n--- {which}, {'causal' if causal else 'not causal'}, "
              f"switches {cfg or 'default'} ---")
        t = time.time()
        try:
            k = compile_kernel(which, causal, cfg)
        except Exception as e:  # noqa: BLE001
            print(f"[{tag}] COMPILE FAILED: {type(e).__name__}: {str(e)[:3000]}")
            continue
        table.append((tag, report(tag, k, time.time() - t)))
    print("\n--- summary (registers: launch / highest in SASS of the 240 setmaxnreg gives the "
          "consumers; spills: store/load bytes; wgmma: static PTX count) ---")
    print(f"{'kernel, causality, switches':58s} {'regs':>5s} {'maxR':>5s} {'stack':>5s} "
          f"{'spills':>7s} {'C7512':>5s} {'smem B':>7s} {'SS':>3s} {'RS':>3s}")
    for tag, s in table:
        print(f"{tag:58s} {s['regs']:>5s} {('R' + str(s['maxreg'])):>5s} {s['stack']:>5s} "
              f"{s['spills']:>7s} {('YES' if s['c7512'] else 'no'):>5s} {s['smem']:>7d} "
              f"{s['ss']:>3d} {s['rs']:>3d}")


if __name__ == "__main__":
    main()
