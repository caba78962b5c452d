"""Known-bad submissions for exercise 12 (matmul_tc): each must be caught, with the right message.

The bad trees are made from the solutions by small text edits (conftest.variant), so they stay
in step with the solutions. Triton variants run on the interpreter (small shapes); the
CUTLASS variants need a GPU (and the sm_90a + CUTLASS-include build of the cutlass track).
"""
import json
import subprocess
import sys

import pytest

from conftest import ROOT

EX = "12_matmul_tc"



def run_checks(tree, track: str, select: str) -> dict:
    """Run the exercise's checks selected by `-k select` against `tree`; name -> result event."""
    events = tree / "events.jsonl"
    cmd = [sys.executable, "-m", "pytest", "-p", "grader.plugin", str(ROOT / "exercises" / EX),
           "--tree", str(tree), "--track", track, "-k", select, "-q", "--events", str(events)]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=1800)
    if not events.exists():
        raise AssertionError(f"the checks did not run:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    out = {}
    for line in events.read_text().splitlines():
        e = json.loads(line)
        if e.get("event") == "result":
            out[e["test"].split("::")[-1]] = e
    return out


def failed(results: dict, name: str) -> str:
    """The failure message of every run of check `name` (all parameters); fails if none failed."""
    runs = {k: v for k, v in results.items() if k.split("[")[0] == name}
    assert runs, f"{name} did not run: {sorted(results)}"
    bad = [v for v in runs.values() if v["outcome"] == "failed"]
    assert bad, f"{name} passed for a known-bad submission: {runs}"
    return "\n".join(v.get("message", "") for v in bad)


# --- Triton, on the interpreter (float16) --------------------------------------------------------

def test_triton_bias_after_activation(variant):
    """act(acc) + bias instead of act(acc + bias)."""
    tree = variant(EX, "triton", {"matmul_tc.py": [
        ("    acc = acc + bias[None, :]\n    if ACT == 1:", "    if ACT == 1:"),
        ("    return acc\n", "    acc = acc + bias[None, :]\n    return acc\n")]})
    r = run_checks(tree, "triton", "test_activation_sees_the_bias and float16")
    msg = failed(r, "test_activation_sees_the_bias")
    assert "add the bias before the activation" in msg


def test_triton_fp16_accumulator(variant):
    """The running sum kept in float16: overflows where the exact result fits."""
    tree = variant(EX, "triton", {"matmul_tc.py": [
        ("acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)",
         "acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float16)")]})
    r = run_checks(tree, "triton", "test_partial_sums_beyond_fp16_range")
    msg = failed(r, "test_partial_sums_beyond_fp16_range")
    assert "Accumulate in float32" in msg and "65504" in msg


def test_triton_k_tail_mask_ignores_k(variant):
    """The K-tail masks compare with the block size instead of the K left: the last step reads
    past K (into the next columns of A's rows and the rows of B after K)."""
    tree = variant(EX, "triton", {"matmul_tc.py": [
        ("mask=offs_k[None, :] < k_left", "mask=offs_k[None, :] < BLOCK_K"),
        ("mask=offs_k[:, None] < k_left", "mask=offs_k[:, None] < BLOCK_K")]})
    r = run_checks(tree, "triton", "test_k_tail_reads_nothing_past_k and float16")
    msg = failed(r, "test_k_tail_reads_nothing_past_k")
    assert "must mask (or never load) k >= K" in msg


def test_triton_output_rounded_before_the_epilogue(variant):
    """A @ B rounded to the 16-bit dtype before the bias and activation: two roundings."""
    tree = variant(EX, "triton", {"matmul_tc.py": [
        ("    acc = acc + bias[None, :]\n",  # (the checks below are the float16 ones)
         "    acc = acc.to(tl.float16).to(tl.float32) * 1.001 + bias[None, :]\n")]})
    r = run_checks(tree, "triton", "test_matches_reference and float16")
    msg = failed(r, "test_matches_reference")
    assert "||out - ref|| / ||ref||" in msg or "elements differ" in msg


# --- CUTLASS, on a GPU -------------------------------------------------------------------------

@pytest.mark.gpu
def test_cutlass_epilogue_without_activation(variant):
    """LinCombPerColBias (bias only) where LinCombPerColBiasEltAct was meant."""
    tree = variant(EX, "cutlass", {"matmul_tc_kernels.cu": [
        ("  using Fusion = cutlass::epilogue::fusion::LinCombPerColBiasEltAct<\n"
         "      MatmulAct, ElementD,",
         "  using Fusion = cutlass::epilogue::fusion::LinCombPerColBias<\n      ElementD,"),
        ("  fusion.activation.act = p.act;\n", "")]})
    r = run_checks(tree, "cutlass", "test_activation_sees_the_bias")
    msg = failed(r, "test_activation_sees_the_bias")
    assert "act=relu" in msg or "act=gelu_tanh" in msg


@pytest.mark.gpu
def test_cutlass_per_row_bias(variant):
    """A per-row bias (bias[m]) where the op adds bias[n] to every column n."""
    tree = variant(EX, "cutlass", {"matmul_tc_kernels.cu": [
        ("fusion::LinCombPerColBiasEltAct<", "fusion::LinCombPerRowBiasEltAct<")]})
    r = run_checks(tree, "cutlass", "test_activation_sees_the_bias")
    msg = failed(r, "test_activation_sees_the_bias")
    assert "elements differ" in msg


@pytest.mark.gpu
def test_cutlass_activation_ignored(variant):
    """The activation's argument never set: every act runs as "none"."""
    tree = variant(EX, "cutlass", {"matmul_tc_kernels.cu": [
        ("  fusion.activation.act = p.act;\n", "")]})
    r = run_checks(tree, "cutlass", "test_matches_reference or test_activation_sees_the_bias")
    msg = failed(r, "test_activation_sees_the_bias")
    assert "add the bias before the activation" in msg


def test_a_crash_on_a_view_is_a_crash_not_a_refusal(variant):
    """The submission's process dies on the view the K-tail check passes: that check crashed
    (the check accepts refusals as RuntimeError/ValueError, and must not take the crash for
    one, nor blame the message of a refusal that never happened)."""
    tree = variant(EX, "triton", {"matmul_tc.py": [
        ("    args = (A, B, bias, C,",
         "    if A.stride(0) != A.shape[1]:\n        import os, signal\n"
         "        os.kill(os.getpid(), signal.SIGSEGV)\n    args = (A, B, bias, C,")]})
    r = run_checks(tree, "triton", "test_k_tail_reads_nothing_past_k and float16")
    runs = [v for k, v in r.items() if k.startswith("test_k_tail_reads_nothing_past_k")]
    assert runs and all(v["outcome"] == "failed" and v.get("crashed") for v in runs), runs
    assert all("segmentation fault" in v["message"] and "refused" not in v["message"]
               for v in runs), runs
