"""Offline evidence for the bits (no GPU): rebuild, from the LLVM IR of the solution's Triton
_fwd_kernel (D 64 config) and of gluon_fwd64's kernel, the fp32 expression trees of
  - every row max of S fed to a butterfly shuffle (m's block max),
  - every row sum of P fed to a butterfly shuffle (l's block sum),
  - every ex2 argument (p = ex2(qk*qk_scale - m_new), alpha = ex2(m - m_new)),
with the wgmma result registers as leaves S0..S31 (the index in the wgmma's 32-float result:
the same (row, column) of an m64n64 warpgroup tile in both kernels' layouts), and compare the
sets. Normalized before comparing: the mask select in either operand order -> M(Sk); _join's
`(0 + hi) + lo` -> `hi + lo` (0 + hi = hi exactly for hi > 0); the loop-carried m (a phi), and
the -inf m starts from, -> mprev; value names dropped. Run after offline.py:

    .venv/bin/python .whl/g38d/reduction_order.py
"""
import re
import sys
from pathlib import Path

IR = Path("/tmp/g38d_ir")
sys.setrecursionlimit(100000)
MASK_C = "0xC6293E5940000000"      # fp32(-1.0e30) as LLVM prints it
NEG_INF = "0xFFF0000000000000"


def parse(text):
    defs = {}
    for ln in text.splitlines():
        m = re.match(r"\s*(%[\w.]+) = (.*)$", ln)
        if m:
            defs[m.group(1)] = re.sub(r",? !dbg ![0-9]+", "", m.group(2))
    return defs


def tree(defs, v, memo, stack=()):
    if v in memo:
        return memo[v]
    if not v.startswith("%") or v not in defs:
        return NEG_INF if v == NEG_INF else ("0" if v in ("0.000000e+00",) else v)
    if v in stack:
        return "mprev"                     # a cycle through a loop phi
    stack = stack + (v,)
    rhs = defs[v]
    rec = lambda x: tree(defs, x, memo, stack)  # noqa: E731
    out = "?"
    if m := re.match(r"extractvalue \{[^}]*\} (%[\w.]+), (\d+)", rhs):
        src = defs.get(m.group(1), "")
        out = f"S{m.group(2)}" if "asm" in src else f"ev({rec(m.group(1))},{m.group(2)})"
    elif m := re.match(r"(fadd|fmul|fsub)(?: \w+)* float (\S+), (\S+)$", rhs):
        out = f"{m.group(1)}({rec(m.group(2))},{rec(m.group(3))})"
    elif m := re.match(r"(?:tail )?call (?:\w+ )*float @([\w.]+)\((.*)\)", rhs):
        args = [a.split()[-1] for a in m.group(2).split(", ")]
        name = m.group(1).replace("llvm.nvvm.", "").replace("llvm.", "")
        # libdevice's __nv_exp2f: ex2.approx.ftz.f or ex2.approx.f behind an __nvvm_reflect
        # test that Triton resolves to ftz (the PTX of both kernels has only ex2.approx.ftz.f32)
        name = {"ex2.approx.ftz.f": "exp2", "ex2.approx.f": "exp2"}.get(name, name)
        ops = [rec(a) for a in args]
        if name == "maxnum.f32":
            ops = ["mprev" if o == NEG_INF else o for o in ops]
        if name == "maxnum.f32" and "mprev" in ops:   # maxnum(-inf, x) == maxnum(x, -inf)
            ops = sorted(ops, key=lambda x: x != "mprev")
        out = f"{name}(" + ",".join(ops) + ")"
    elif m := re.match(r"(?:tail )?call i32 @llvm\.nvvm\.shfl\.sync\.bfly\.i32\(i32 -1, i32 "
                       r"(\S+), i32 (\d+), i32 31\)", rhs):
        out = f"shfl{m.group(2)}({rec(m.group(1))})"
    elif m := re.match(r"bitcast (?:float|i32) (\S+) to (?:i32|float)", rhs):
        out = rec(m.group(1))
    elif m := re.match(r"select (?:\w+ )*i1 (\S+), float (\S+), float (\S+)", rhs):
        a, b = rec(m.group(2)), rec(m.group(3))
        out = f"M({b})" if a == MASK_C else f"M({a})" if b == MASK_C else f"sel({a},{b})"
    elif m := re.match(r"phi float (.*)$", rhs):
        inc = {rec(x) for x in re.findall(r"\[ (\S+), %[\w.]+ \]", m.group(1))}
        out = inc.pop() if len(inc) == 1 else "mprev"
    memo[v] = out
    return out


def norm(t):
    t = re.sub(r"fadd\((%?[\w.]*),0\)", r"\1", t)          # (0 + hi) -> hi ... first operand
    t = re.sub(r"fadd\(0,(%?[\w.]*)\)", r"\1", t)
    t = re.sub(r"%[\w.]+", "%", t)
    return t.replace(NEG_INF, "mprev")


def collect(name):
    text = (IR / f"{name}.llir").read_text()
    defs = parse(text)
    memo = {}
    res = {"row max (shuffled)": set(), "row sum (shuffled)": set(), "ex2 argument": set()}
    for v, rhs in defs.items():
        if b := re.search(r"shfl\.sync\.bfly\.i32\(i32 -1, i32 (\S+), i32 (\d+)", rhs):
            t = norm(tree(defs, b.group(1), memo))
            if t.startswith("maxnum") and "S" in t:
                res["row max (shuffled)"].add(f"shfl{b.group(2)}:{t}")
            elif t.startswith("fadd") and "exp2" in t:
                res["row sum (shuffled)"].add(f"shfl{b.group(2)}:{t}")
        if "ex2.approx.ftz.f(" in rhs or "ex2.approx.f(" in rhs:
            res["ex2 argument"].add(norm(tree(defs, v, memo)))
    return res


def leaves(t):
    return " ".join(re.findall(r"M\(S\d+|S\d+", t)[:16]).replace("(", "")


def main():
    sol = {c: collect(f"solution_fwd_kernel_{c}") for c in ("causal", "noncausal")}
    ok_all = True
    for name, ref in (("fwd64_causal_ahead_st6", "causal"), ("fwd64_causal_plain_st6", "causal"),
                      ("fwd64_noncausal_ahead_st6", "noncausal"),
                      ("fwd64_noncausal_plain_st6", "noncausal")):
        g = collect(name)
        a = sol[ref]
        print(f"== {name} vs the solution's _fwd_kernel ({ref})")
        for kind in a:
            sa, sg = a[kind], g[kind]
            unresolved = sum("?" in t for t in sg | sa)
            # not causal, the solution's masked loop is compiled but runs no trip (mid = end)
            ok = (sg == sa if ref == "causal" else sg <= sa) and not unresolved and sg
            ok_all &= bool(ok)
            verdict = "IDENTICAL SETS" if sg == sa else \
                "gluon's a SUBSET (the rest: the solution's masked loop)" if sg <= sa else \
                "DIFFERENT"
            print(f"  {kind:20s} distinct trees: solution {len(sa):3d}, gluon {len(sg):3d}; "
                  f"{verdict}"
                  f"{'' if not unresolved else f' ({unresolved} with unresolved leaves)'}")
            if kind != "ex2 argument":
                for t in sorted(sa | sg)[:4]:
                    print(f"      {'S' if t in sa else '-'}{'G' if t in sg else '-'} "
                          f"{t[:6]} {len(t)} chars, leaves from: {leaves(t)} ...")
            for t in sorted(sg - sa)[:2]:
                print("      only gluon:   ", t[:400])
            for t in sorted(sa - sg)[:2]:
                print("      only solution:", t[:400])
    print("VERDICT:", "the same fp32 expression trees" if ok_all else "differences: see above")


if __name__ == "__main__":
    main()
