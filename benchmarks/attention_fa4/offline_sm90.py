"""Offline sm_90 compile (no GPU) of variants.py's forward for every variant at the two cases'
specialization, with triton 3.6 from /tmp/t36: registers, spills, smem, convert_layouts,
local (shared) loads/stores, MUFU ex2 count.
    PYTHONPATH=/tmp/t36 /work/main/.venv/bin/python offline_sm90.py"""
import importlib.util, os, re, subprocess, sys, tempfile, time
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
print("triton", triton.__version__, triton.__file__)
spec = importlib.util.spec_from_file_location("variants", os.path.join(os.path.dirname(os.path.abspath(__file__)), "variants.py"))
V = importlib.util.module_from_spec(spec); spec.loader.exec_module(V)
TARGET = GPUTarget("cuda", 90, 32)
IR = "/tmp/exp38_ir"; os.makedirs(IR, exist_ok=True)

def compile_fwd(D, causal, poly, lazy):
    cfg = V.CONFIGS[D]["fwd"]
    kern = V._fwd_kernel
    cons = dict(HEAD_D=D, BLOCK_M=cfg.own, BLOCK_N=cfg.step, CAUSAL=causal, F64=False, PREC="tf32",
                HOPPER=cfg.hopper, TMA=cfg.hopper and cfg.tma, POLY=poly, LAZY=lazy)
    sig, consts, attrs = {}, {}, {}
    for i, p in enumerate(kern.params):
        n = p.name
        if p.is_constexpr:
            sig[n] = "constexpr"; consts[n] = cons[n]
        elif n in ("Q", "K", "V", "O"):
            sig[n] = "*bf16"; attrs[(i,)] = [["tt.divisibility", 16]]
        elif n == "LSE":
            sig[n] = "*fp32"; attrs[(i,)] = [["tt.divisibility", 16]]
        elif n.startswith("scale"):
            sig[n] = "fp32"
        elif n.startswith("stride") and n.endswith("d"):
            sig[n] = "constexpr"; consts[n] = 1
        else:
            sig[n] = "i32"; attrs[(i,)] = [["tt.divisibility", 16]]
    k = triton.compile(ASTSource(kern, sig, constexprs=consts, attrs=attrs), target=TARGET,
                       options=dict(num_warps=cfg.warps, num_stages=cfg.stages))
    return k

def report(k, tag):
    ptx, ttgir = k.asm["ptx"], k.asm["ttgir"]
    open(f"{IR}/{tag}.ttgir", "w").write(ttgir); open(f"{IR}/{tag}.ptx", "w").write(ptx)
    with tempfile.NamedTemporaryFile(suffix=".cubin", delete=False) as f:
        f.write(k.asm["cubin"]); path = f.name
    bindir = os.path.join(os.path.dirname(triton.__file__), "backends/nvidia/bin")
    out = subprocess.run([f"{bindir}/cuobjdump", "--dump-resource-usage", path], capture_output=True, text=True).stdout
    sass = subprocess.run([f"{bindir}/cuobjdump", "-sass", path], capture_output=True, text=True).stdout
    open(f"{IR}/{tag}.sass", "w").write(sass)
    os.unlink(path)
    regs = re.search(r"REG:(\d+)", out); stack = re.search(r"STACK:(\d+)", out)
    return dict(regs=int(regs.group(1)) if regs else None, stack=int(stack.group(1)) if stack else None,
                smem_kb=round(k.metadata.shared / 1024, 1),
                cvt=len(re.findall(r"ttg\.convert_layout", ttgir)),
                ex2_ptx=len(re.findall(r"ex2\.approx", ptx)), mufu_ex2=len(re.findall(r"MUFU\.EX2", sass)),
                sts=len(re.findall(r"\bSTS", sass)), lds=len(re.findall(r"\bLDS", sass)),
                shfl=len(re.findall(r"SHFL", sass)), sass_lines=sass.count("\n"))

for D, causal in ((128, False), (64, True)):
    for name, (poly, lazy) in V.VARIANTS.items():
        if len(sys.argv) > 1 and name not in sys.argv[1:]:
            continue
        t = time.time()
        try:
            r = report(compile_fwd(D, causal, poly, lazy), f"D{D}_{name}")
        except Exception as e:
            c = e
            while c.__cause__ is not None or c.__context__ is not None:
                c = c.__cause__ or c.__context__
            r = f"FAILED {type(e).__name__}: root {type(c).__name__}: {str(c)[-1200:]}"
        print(f"D{D} {name:11s} {r} {time.time() - t:.1f}s", flush=True)
