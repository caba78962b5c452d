"""Offline sm_90a compile (no GPU) of gluon_fwd64's kernel with the GPU machine's Triton (3.6.0,
installed aside in /tmp/t36), specialized as the host launch types it:

    PYTHONPATH=/tmp/t36 .venv/bin/python .whl/g38d/offline.py > .whl/g38d/offline.txt

Compiles the leaderboard case (B 1, H 16, S 16384, D 64, causal) and the non-causal kernel, for
AHEAD (default) and not, and prints per kernel: registers per thread (launch, ptxas; and the
highest register the consumer code touches in SASS), stack/spills (ptxas -v on the PTX), ptxas
info C7512 ("wgmma serialized", must be absent), shared memory (<= 232448 B), setmaxnreg,
wgmma shapes (SS: A from shared memory, RS: A from registers) and wait depths, TMA, mbarrier
ops, named barriers, SASS HGMMA/MUFU counts. Then the solution's Triton _fwd_kernel at its D 64
config, compiled the same way, and a side-by-side of the arithmetic the bits depend on: the
accumulator layout, ex2 flavour, FMA contraction, divide, log2, max. IR lands in /tmp/g38d_ir/.
"""
import importlib.util
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import torch
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from triton.runtime.jit import mangle_type
from triton.experimental.gluon._runtime import GluonASTSource

sys.dont_write_bytecode = True
HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(HERE))
import gluon_fwd64 as G  # noqa: E402

TARGET = GPUTarget("cuda", 90, 32)
SM90_SHARED = 232448
IR = Path("/tmp/g38d_ir")
IR.mkdir(exist_ok=True)
BIN = os.path.join(os.path.dirname(triton.__file__), "backends/nvidia/bin")


def compile_gluon(B, H, S, causal, ahead, stages=G.STAGES):
    t = torch.empty(B, H, S, 64, dtype=torch.bfloat16)      # CPU: only the descriptor types
    qd, kd, vd, od = G.make_descs(t, t, t, t)
    consts = G.constexprs(causal, stages, ahead)
    fn = G._fwd64_kernel
    types = dict(q_desc=mangle_type(qd), k_desc=mangle_type(kd), v_desc=mangle_type(vd),
                 o_desc=mangle_type(od), LSE="*fp32", S="i32", BH="i32", scale_hi="fp32",
                 scale_lo="fp32")
    sig, attrs = {}, {}
    for i, name in enumerate(fn.arg_names):   # as the launcher specializes: pointers and ints
        if name in consts:                    # divisible by 16 get tt.divisibility 16
            sig[name] = "constexpr"
        else:
            sig[name] = types[name]
            if name == "LSE" or (name == "S" and S % 16 == 0) or (name == "BH" and B * H % 16 == 0):
                attrs[(i,)] = [["tt.divisibility", 16]]
    src = GluonASTSource(fn, sig, constexprs=consts, attrs=attrs)
    return triton.compile(src, target=TARGET, options=dict(num_warps=4))


def compile_solution(causal):
    spec = importlib.util.spec_from_file_location(
        "ex13_solution_fa", ROOT / "solutions/13_flash_attention/triton/flash_attention.py")
    fa = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fa)
    launches = []

    def rec(kernel):
        def at(grid):
            def run(*a, **k):
                launches.append((kernel, grid, a, k))
            return run
        return type("Grid", (), {"__getitem__": lambda _s, g: at(g)})()

    fa._config = lambda q, *_: fa.CONFIGS[64]
    q = torch.randn(1, 16, 16384, 64).to(torch.bfloat16)
    fa._fwd_impl(q, q, q, causal, 1 / 8.0, rec)
    kernel, grid, args, kwargs = launches[0]
    options = {k: kwargs[k] for k in ("num_warps", "num_stages")}
    consts = {k: v for k, v in kwargs.items() if k not in options}
    sig, attrs = {}, {}
    for i, (name, arg) in enumerate(zip(kernel.arg_names, args)):
        if isinstance(arg, torch.Tensor):
            sig[name] = {torch.bfloat16: "*bf16", torch.float32: "*fp32"}[arg.dtype]
            attrs[(i,)] = [["tt.divisibility", 16]]
        elif isinstance(arg, int) and arg == 1:
            sig[name], consts[name] = "constexpr", 1
        elif isinstance(arg, int):
            sig[name] = "i32"
            if arg % 16 == 0:
                attrs[(i,)] = [["tt.divisibility", 16]]
        elif isinstance(arg, float):
            sig[name] = "fp32"                 # the plain launch's float type
    for n in consts:
        sig[n] = "constexpr"
    k = triton.compile(ASTSource(kernel, sig, constexprs=consts, attrs=attrs), target=TARGET,
                       options=options)
    return k, grid, kwargs


def sh(*cmd):
    r = subprocess.run(list(cmd), capture_output=True, text=True)
    return r.stdout + r.stderr


def ptxas_report(name, ptx):
    (IR / f"{name}.ptx").write_text(ptx)
    out = sh(os.path.join(BIN, "ptxas"), "-arch=sm_90a", "-v", "--warn-on-spills",
             str(IR / f"{name}.ptx"), "-o", str(IR / f"{name}.cubin"))
    lines = [ln.strip() for ln in out.splitlines()
             if any(w in ln for w in ("spill", "Used", "C7512", "serializ", "arning", "rror"))]
    return lines, out


def sass(name):
    return sh(os.path.join(BIN, "nvdisasm"), "-hex", str(IR / f"{name}.cubin"))


def count(pattern, text):
    return len(re.findall(pattern, text))


def report(name, k, secs):
    md = k.metadata
    ptx, ttgir = k.asm["ptx"], k.asm["ttgir"]
    (IR / f"{name}.ttgir").write_text(ttgir)
    (IR / f"{name}.llir").write_text(k.asm["llir"])
    print(f"=== {name}: compiled in {secs:.1f}s")
    lines, full = ptxas_report(name, ptx)
    regs = re.search(r"Used (\d+) registers", full)
    print(f"warps {md.num_warps} ({32 * md.num_warps} threads); registers/thread at launch "
          f"{regs.group(1) if regs else '?'} (ptxas)")
    for ln in lines:
        print("  ptxas:", ln)
    c7512 = "C7512" in full or "serialized" in full
    print(f"  C7512 / 'wgmma serialized': {'PRESENT (BAD)' if c7512 else 'absent'}")
    spills = re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", full)
    stack = re.findall(r"(\d+) bytes stack frame", full)
    print(f"  spills (stores, loads): {spills}  stack: {stack}")
    print(f"shared memory {md.shared} bytes ({md.shared / 1024:.1f} KB; limit {SM90_SHARED}: "
          f"{'ok' if md.shared <= SM90_SHARED else 'OVER'})")
    print("setmaxnreg:", sorted(set(re.sub(r"\s+", " ", s) for s in re.findall(
        r"setmaxnreg\.(?:inc|dec)\.sync\.aligned\.u32\s+\d+", ptx))))
    shapes = {}
    for mm in re.finditer(r"wgmma\.mma_async\.sync\.aligned\.(m64n\d+k\d+)[^{]*\{[^}]*\}\s*,"
                          r"\s*(\{|%)", ptx):
        key = mm.group(1) + (" RS" if mm.group(2) == "{" else " SS")
        shapes[key] = shapes.get(key, 0) + 1
    print("wgmma.mma_async (PTX, static):", shapes, "; wait_group depths:",
          sorted(set(re.findall(r"wgmma\.wait_group\.sync\.aligned\s+(\d+)", ptx))))
    print("TTGIR warp_group_dot_wait pendings:",
          re.findall(r"warp_group_dot_wait[^\n]*pendings = (\d+)", ttgir))
    print("TMA loads:", count(r"cp\.async\.bulk\.tensor\.\dd\.shared::cluster\.global", ptx),
          "; TMA stores:", count(r"cp\.async\.bulk\.tensor\.\dd\.global\.shared", ptx))
    print("mbarrier ops:", {op: count(op, ptx) for op in
                            ("mbarrier.init", "mbarrier.arrive", "mbarrier.try_wait",
                             "expect_tx")})
    print("named barriers:", sorted(set(re.sub(r"\s+", " ", s) for s in re.findall(
        r"bar\.(?:sync|arrive)\s+\d+(?:,\s*\d+)?", ptx))))
    print("PTX math: ex2", sorted(set(re.findall(r"ex2\.approx[.\w]*", ptx))),
          "| fma.rn.f32", count(r"fma\.rn\.f32", ptx), "| div", sorted(set(re.findall(
              r"div\.\w+\.f32", ptx))),
          "| log2", sorted(set(re.findall(r"lg2\.approx[.\w]*|__nv_log2f", ptx))),
          "| max", sorted(set(re.findall(r"\bmax\.[\w.]*f32", ptx))),
          "| local ld/st", count(r"\bld\.local", ptx), count(r"\bst\.local", ptx))
    d = sass(name)
    hg = {}
    for x in re.findall(r"HGMMA\.[^ ;]+", d):
        hg[x] = hg.get(x, 0) + 1
    rmax = max([int(r) for r in re.findall(r"\bR(\d+)\b", d)] or [0])
    # MUFU.EX2 issued while this warpgroup has wgmmas in flight (between a WARPGROUP.ARRIVE and
    # the next WARPGROUP.DEPBAR in program order): the exponentials the tensor cores can hide
    # (groups counted from WARPGROUP.ARRIVE; WARPGROUP.DEPBAR.LE gsb0, N leaves at most N)
    pending, under, total = 0, 0, 0
    for ln in d.splitlines():
        if "WARPGROUP.ARRIVE" in ln:
            pending += 1
        elif m := re.search(r"WARPGROUP\.DEPBAR\.LE gsb0, (0x[0-9a-f]+)", ln):
            pending = min(pending, int(m.group(1), 16))
        elif "MUFU.EX2" in ln:
            total += 1
            under += pending > 0
    print("SASS:", hg, "| MUFU.EX2", count(r"MUFU\.EX2", d), "| FFMA", count(r"\bFFMA\b", d),
          "| BAR.SYNC", count(r"BAR\.SYNC", d),
          "| WARPGROUP.DEPBAR", count(r"WARPGROUP\.DEPBAR", d),
          "| highest register R%d" % rmax)
    print(f"SASS: MUFU.EX2 issued with this warpgroup's wgmmas in flight: {under} of {total}")
    return dict(regs=regs.group(1) if regs else "?", spills=spills, c7512=c7512,
                shared=md.shared, shapes=shapes, rmax=rmax)


def main():
    print(f"triton {triton.__version__} from {os.path.dirname(triton.__file__)}; target sm_90a")
    summary = []
    for causal, ahead, stages in ((True, True, G.STAGES), (False, True, G.STAGES),
                                  (True, False, G.STAGES), (False, False, G.STAGES),
                                  (True, True, 4), (True, True, 8)):
        name = f"fwd64_{'causal' if causal else 'noncausal'}_{'ahead' if ahead else 'plain'}" \
               f"_st{stages}"
        print(f"\n##### gluon_fwd64 B 1 H 16 S 16384 D 64 {'causal' if causal else 'not causal'}"
              f" AHEAD={ahead} STAGES={stages}")
        t = time.time()
        try:
            k = compile_gluon(1, 16, 16384, causal, ahead, stages)
        except Exception as e:  # noqa: BLE001
            print(f"COMPILE FAILED: {type(e).__name__}: {str(e)[:3000]}")
            continue
        summary.append((name, report(name, k, time.time() - t)))

    for causal in (True, False):
        name = f"solution_fwd_kernel_{'causal' if causal else 'noncausal'}"
        print(f"\n##### the solution's Triton _fwd_kernel, CONFIGS[64], "
              f"{'causal' if causal else 'not causal'} (for the bits comparison)")
        t = time.time()
        k, grid, kw = compile_solution(causal)
        print("grid", grid, "constexprs/options", kw)
        print("accumulator layout:", re.findall(r"#mma = [^\n]*", k.asm["ttgir"]))
        report(name, k, time.time() - t)
    gl_ir = (IR / "fwd64_causal_ahead_st6.ttgir").read_text()
    print("\nGluon accumulator layout:", re.findall(r"#mma = [^\n]*", gl_ir))
    print("\n##### summary")
    for name, r in summary:
        print(f"{name:32s} regs {r['regs']:>4s} (SASS up to R{r['rmax']})  spills {r['spills']}"
              f"  C7512 {'PRESENT' if r['c7512'] else 'absent'}  shared {r['shared']} B  "
              f"wgmma {r['shapes']}")


if __name__ == "__main__":
    main()
