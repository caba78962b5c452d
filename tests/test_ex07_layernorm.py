"""Known-bad submissions of exercise 07 (layernorm): each is caught by the check meant for it,
with the message that names the fix.

The bad trees are the solution with a small text edit (conftest.variant), so they stay in step
with it. Only the checks that matter run (pytest -k), in a subprocess: each variant is a fresh
tree and is built from scratch (two sources, ~2-3 min on 2 cores, ~20 s on a GPU host). The
variants that edit the C++ CPU loops run anywhere; those that edit the CUDA kernels need a GPU.
"""
import os
import re
import subprocess
import sys

import pytest

from conftest import ROOT

EX = "07_layernorm"
CPP = "layernorm.cpp"
FWD_CU = "layernorm_fwd.cu"   # the kernels, in two files: the forward family
BWD_CU = "layernorm_bwd.cu"   # and the backward family


def run_checks(tree, select: str, timeout: int = 1200) -> tuple[int, str]:
    """Run the exercise's checks selected by `select` (pytest -k) against `tree`."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "CI": "1", "MAX_JOBS": os.environ.get("MAX_JOBS", "2")}
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "grader.plugin", str(ROOT / "exercises" / EX),
         "--tree", str(tree), "-q", "-p", "no:cacheprovider", "-k", select],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    return out.returncode, out.stdout + out.stderr


def failed(output: str) -> set[str]:
    """The failed checks' ids, e.g. {'test_large_offsets[cpu-(7, 300)]'}."""
    return set(re.findall(r"^FAILED \S+::(\w+(?:\[[^\]]*\])?)", output, re.M))  # ids hold spaces


# --- the C++ CPU loops (run anywhere) ----------------------------------------------------------

ONE_PASS_CPU = (
    "    const Stats<A> st = row_stats<A>(xr, N);\n",
    "    A s = 0, ss = 0;  // one pass: var = E[x^2] - E[x]^2\n"
    "    for (int64_t j = 0; j < N; ++j) {\n"
    "      const A v = static_cast<A>(xr[j]);\n"
    "      s += v;\n"
    "      ss += v * v;\n"
    "    }\n"
    "    const Stats<A> st{static_cast<A>(N), s / N, ss - s * s / N};\n")


def test_one_pass_variance_cpu(variant):
    """var = E[x²] - E[x]² in float32: fine on N(0, 1) data, lost at mean 1e4."""
    tree = variant(EX, "cuda", {CPP: [ONE_PASS_CPU]})
    code, out = run_checks(tree, "large_offsets or forward_matches")
    bad = failed(out)
    assert code != 0 and any(t.startswith("test_large_offsets[cpu") for t in bad), out[-3000:]
    assert "E[x^2] - E[x]^2 subtracts two numbers of size 1e8" in out, out[-3000:]
    assert not any(t.startswith("test_forward_matches_reference") for t in bad), bad


BF16_SUMS_CPU = ("  std::vector<A> dw_acc(N, A(0)), db_acc(N, A(0));",
                 "  std::vector<T> dw_acc(N, T(0)), db_acc(N, T(0));  // running sums in T")


def test_dw_db_accumulated_in_bf16_cpu(variant):
    """dw and db summed in the storage dtype: bf16 running sums stall after a few hundred rows."""
    tree = variant(EX, "cuda", {CPP: [BF16_SUMS_CPU]})
    code, out = run_checks(tree, "dw_db_over_many_rows")
    assert code != 0 and "test_dw_db_over_many_rows[cpu]" in failed(out), out[-3000:]
    assert "sum them in float32" in out, out[-3000:]


# --- the CUDA kernels (GPU only) ---------------------------------------------------------------

ONE_PASS_CU = [
    ("        vec_dev(fresh(xc[k]), mean0, a1, a2);",
     "        vec_dev(fresh(xc[k]), A(0), a1, a2);  // one pass: sums of x and x^2"),
    ("      const A c = s1 / static_cast<A>(N);\n      mean = mean0 + c;\n"
     "      // biased variance; >= 0 in real numbers, clamped against a rounding below 0\n"
     "      rstd = rsqrt_(std::max((s2 - s1 * c) / static_cast<A>(N), A(0)) + eps);\n",
     "      mean = s1 / static_cast<A>(N);  // var = E[x^2] - E[x]^2\n"
     "      rstd = rsqrt_(s2 / static_cast<A>(N) - mean * mean + eps);\n")]


@pytest.mark.gpu
def test_one_pass_variance_cuda(variant):
    tree = variant(EX, "cuda", {FWD_CU: ONE_PASS_CU})
    code, out = run_checks(tree, "large_offsets")
    bad = failed(out)
    assert code != 0 and any(t.startswith("test_large_offsets[cuda") for t in bad), out[-3000:]
    assert not any(t.startswith("test_large_offsets[cpu") for t in bad), bad
    assert "E[x^2] - E[x]^2 subtracts two numbers of size 1e8" in out, out[-3000:]


BF16_SUMS_CU = [
    ("          aw.v[j] += d * xh;\n          ab.v[j] += d;\n",
     "          aw.v[j] = to_acc(from_acc<T>(aw.v[j] + d * xh));  // running sums in T\n"
     "          ab.v[j] = to_acc(from_acc<T>(ab.v[j] + d));\n")]


@pytest.mark.gpu
def test_dw_db_accumulated_in_bf16_cuda(variant):
    tree = variant(EX, "cuda", {BWD_CU: BF16_SUMS_CU})
    code, out = run_checks(tree, "dw_db_over_many_rows")
    assert code != 0 and "test_dw_db_over_many_rows[cuda]" in failed(out), out[-3000:]
    assert "sum them in float32" in out, out[-3000:]


@pytest.mark.gpu
def test_missing_syncthreads(variant):
    """block_sum2 without its second barrier: threads read the result slot before warp 0 has
    written it (they get the previous row's sums)."""
    tree = variant(EX, "cuda", {BWD_CU: [(
        "      course::block_sum2(s1, s2, shared);\n",
        "      {  // block_sum2 without its second barrier\n"
        "        const int lane = t & 31, warp = t >> 5;\n"
        "        s1 = course::warp_sum(s1);\n"
        "        s2 = course::warp_sum(s2);\n"
        "        if (lane == 0) shared[0][warp] = s1, shared[1][warp] = s2;\n"
        "        __syncthreads();\n"
        "        if (warp == 0) {\n"
        "          A a = lane < (nt >> 5) ? shared[0][lane] : A(0);\n"
        "          A b = lane < (nt >> 5) ? shared[1][lane] : A(0);\n"
        "          a = course::warp_sum(a);\n"
        "          b = course::warp_sum(b);\n"
        "          if (lane == 0) shared[0][32] = a, shared[1][32] = b;\n"
        "        }\n"
        "        s1 = shared[0][32];\n"
        "        s2 = shared[1][32];\n"
        "      }\n")]})
    code, out = run_checks(tree, "backward_matches or rows_longer")
    bad = failed(out)
    assert code != 0 and any("[cuda" in t for t in bad), out[-3000:]
    assert "dx: " in out, out[-3000:]


@pytest.mark.gpu
def test_wrong_row_stride(variant):
    """Rows assumed N apart: a view x[:, :N] of a wider matrix is read from the wrong places."""
    tree = variant(EX, "cuda", {FWD_CU: [("reinterpret_cast<const V*>(x + r * ldx);  // int64",
                                      "reinterpret_cast<const V*>(x + r * N);  // int64"),
                                     ("    const V* xr = reinterpret_cast<const V*>(x + row * ldx);\n"
                                      "    V* yr",
                                      "    const V* xr = reinterpret_cast<const V*>(x + row * N);\n"
                                      "    V* yr")]})
    code, out = run_checks(tree, "strided")
    bad = failed(out)
    assert "test_strided_x_handled_or_refused[cuda-row stride > N]" in bad, out[-3000:]
    assert "`x` was a strided view" in out and "Pass its strides to the kernel" in out, out[-3000:]


@pytest.mark.gpu
def test_dx_only_backward_launches_nothing(variant):
    """The dx-only backward's grid capped by the number of dw/db partial rows, which is 0 when
    w and b need no gradient: no kernel runs and dx is never written (the first pass had this
    bug: the GPU check reported that the backward launched no kernel of its own)."""
    tree = variant(EX, "cuda", {BWD_CU: [("  const int64_t cap = kDwDb ? max_blocks : rows;\n",
                                      "  const int64_t cap = max_blocks;\n")]})
    code, out = run_checks(tree, "only_the_gradients")
    # the ids hold spaces ("grad of x"), which failed() does not capture whole: match the lines
    fails = lambda wrt: re.search(rf"^FAILED \S+::test_only_the_gradients_asked_for"
                                  rf"\[cuda-grad of {re.escape(wrt)}\]", out, re.M)
    assert code != 0 and fails("x"), out[-3000:]
    assert "launched no kernel" in out or "dx: " in out, out[-3000:]
    assert not fails("w+b"), out[-3000:]
