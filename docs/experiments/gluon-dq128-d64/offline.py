"""Offline (no GPU) sm_90a compile of dq128's dQ kernel variants and the solution's D 64 dQ kernel,
as their launchers launch them (CPU tensors; the tests' _Recorder and _compile), with Triton 3.6:
ptxas -v (the bundled ptxas, re-run on the PTX to see its warnings), the highest register in the
SASS, spills, shared memory, the HGMMA instructions by shape.
    cd /work/main && PYTHONPATH=/tmp/t36 .venv/bin/python .whl/s22/dq128/offline.py [> offline.txt]
"""
import collections
import math
import re
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
sys.path[:0] = [str(HERE), str(ROOT / "tests"), str(ROOT)]

import torch  # noqa: E402
import triton  # noqa: E402

import dq128  # noqa: E402
import test_ex13_flash_attention as t  # noqa: E402

fa = dq128.fa
BIN = Path(triton.__file__).parent / "backends" / "nvidia" / "bin"
DUMP = Path(tempfile.gettempdir()) / "dq128_offline"
DUMP.mkdir(exist_ok=True)

VARIANTS = {   # name: dq_new's plan (None: the solution's kernel, dq_old)
    "old (solution, 64-key steps)": None,
    "new S4 DOREG": dict(STAGES=4, DOREG=True, PAIRS=False),
    "new S3 DOREG": dict(STAGES=3, DOREG=True, PAIRS=False),
    "new S5 DOREG": dict(STAGES=5, DOREG=True, PAIRS=False),
    "new S6 DOREG": dict(STAGES=6, DOREG=True, PAIRS=False),
    "new S4 dO-smem": dict(STAGES=4, DOREG=False, PAIRS=False),
    "new S4 DOREG PAIRS": dict(STAGES=4, DOREG=True, PAIRS=True),
    "new S4 dO-smem PAIRS": dict(STAGES=4, DOREG=False, PAIRS=True),
}


def launch(plan, causal, D=64, S=512):
    """The kernel, grid, arguments of one dq_old / dq_new call on CPU tensors (nothing runs)."""
    rec = t._Recorder()
    q, k, v, do, dq = (torch.randn(2, 3, S, D).to(torch.bfloat16) for _ in range(5))
    lse, delta = torch.randn(2, 3, S), torch.randn(2, 3, S)
    name, owner = ("_dq_gluon_kernel", fa) if plan is None else ("_dq128_kernel", dq128)
    kernel = getattr(owner, name)
    setattr(owner, name, rec(kernel))
    try:
        if plan is None:
            dq128.dq_old(q, k, v, do, lse, delta, dq, causal, 1 / math.sqrt(D))
        else:
            dq128.dq_new(q, k, v, do, lse, delta, dq, causal, 1 / math.sqrt(D), plan)
    finally:
        setattr(owner, name, kernel)
    [(kern, grid, args, kwargs)] = rec.launches
    return kern, args, kwargs


def report(c, tag):
    ptx = c.asm["ptx"]
    (DUMP / f"{tag}.ptx").write_text(ptx)
    cubin = DUMP / f"{tag}.cubin"
    cubin.write_bytes(c.asm["cubin"])
    r = subprocess.run([str(BIN / "ptxas"), "-v", "--gpu-name=sm_90a", str(DUMP / f"{tag}.ptx"),
                        "-o", str(DUMP / f"{tag}.ptxas.cubin")], capture_output=True, text=True)
    log = r.stderr
    sass = subprocess.run([str(BIN / "cuobjdump"), "-sass", str(cubin)], capture_output=True,
                          text=True).stdout
    (DUMP / f"{tag}.sass").write_text(sass)
    regs = [int(x) for x in re.findall(r"\bR(\d+)\b", sass)]
    hgmma = collections.Counter(re.findall(r"HGMMA\.(\d+x\d+x\d+)\.F32\.BF16(?:\.\w+)*", sass))
    hgmma_a = collections.Counter(
        "R" if re.search(r"HGMMA\.\S+\s+R\d+,\s*R\d+", line) else "gdesc"
        for line in sass.splitlines() if "HGMMA." in line)
    used = re.search(r"Used (\d+) registers", log)
    spill = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", log)
    return dict(
        ptxas_used=int(used.group(1)) if used else None,
        max_reg_sass=max(regs) if regs else None,
        spill_st_ld=tuple(int(x) for x in spill.groups()) if spill else None,
        stl_ldl=(len(re.findall(r"\bSTL\b", sass)), len(re.findall(r"\bLDL\b", sass))),
        C7512="C7512" in log,
        notes=[line.split(":", 1)[1].strip()[:60] for line in log.splitlines()
               if re.search(r"warning|\(C\d+\)", line)],
        smem=c.metadata.shared,
        hgmma=dict(hgmma), hgmma_A=dict(hgmma_a),
        wgmma_wait=len(re.findall(r"WARPGROUP\.DEPBAR", sass)),
        setmaxnreg=sorted({int(x, 16) for x in
                           re.findall(r"USETMAXREG\.\S+\s+(?:UP\d,\s*)?(0x[0-9a-f]+)", sass)}),
        sts_lds=(len(re.findall(r"\bSTS\b", sass)), len(re.findall(r"\bLDS(?:M)?\b", sass))),
        sass_lines=sass.count("\n"))


def main():
    print("triton", triton.__version__, triton.__file__, "ptxas", BIN / "ptxas")
    for name, plan in VARIANTS.items():
        for causal in (True, False):
            tag = re.sub(r"\W+", "_", name) + ("_causal" if causal else "_full")
            try:
                kern, args, kwargs = launch(plan, causal)
                r = report(t._compile(kern, args, kwargs, "fp32"), tag)
                ok = r["smem"] <= t.SM90_SHARED
                print(f"{name:24s} causal={causal!s:5s} {'' if ok else 'SMEM OVER LIMIT '}{r}",
                      flush=True)
            except Exception as e:  # noqa: BLE001
                msg = str(e).strip().splitlines()
                print(f"{name:24s} causal={causal!s:5s} FAILED {type(e).__name__}: "
                      f"{' | '.join(msg[:6])[:1500]}", flush=True)


if __name__ == "__main__":
    main()
