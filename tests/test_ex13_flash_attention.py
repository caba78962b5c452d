"""Known-bad submissions of exercise 13 (flash_attention): each is caught, with the message that
names the fix.

The bad trees are made from the solution by small text edits (conftest.variant), so they stay in
step with it. Each runs only the checks that should catch it, on Triton's CPU interpreter when
there is no GPU (the interpreter is slow: each selection is a handful of tiny shapes).
"""
import json
import os
import subprocess
import sys

import pytest

from conftest import HAS_GPU, ROOT

EX = "13_flash_attention"
FILE = "flash_attention.py"
TIMEOUT_S = 900
DEVICE = "cuda" if HAS_GPU else "cpu"  # the plugin's device parameter for a Triton track


def failures(tree, select: str) -> dict:
    """Run the checks matching `select` (pytest -k) against `tree`: {check name: message}."""
    events = tree / "events.jsonl"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])}
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "grader.plugin", str(ROOT / "exercises" / EX),
         "--tree", str(tree), "--events", str(events), "-k", select, "-q", "-p",
         "no:cacheprovider", "--rootdir", str(ROOT)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
    results = [json.loads(line) for line in events.read_text().splitlines()
               if '"event": "result"' in line]
    assert results, f"no check ran:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    return {r["test"].split("::", 1)[-1]: r.get("message", "") for r in results
            if r["outcome"] == "failed"}


def one_failure(found: dict, name: str) -> str:
    hits = [msg for check, msg in found.items() if check.startswith(name)]
    assert hits, f"{name} did not fail; failures: {list(found)}"
    return hits[0]


def test_no_max_subtraction(variant):
    """The running max pinned at 0: exp2 of raw scores overflows once they pass ~128 (fp32)."""
    tree = variant(EX, "triton", {FILE: [("m_ij = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)",
                                          "m_ij = tl.maximum(m_i, 0.0)")]})
    found = failures(tree, "test_large_logits")
    msg = one_failure(found, f"test_large_logits[{DEVICE}-torch.float32]")
    assert "has NaN or inf" in msg and "exp overflowed" in msg, msg


def test_wrong_causal_offset(variant):
    """The forward's diagonal mask lets each query see one key past itself."""
    tree = variant(EX, "triton", {FILE: [("keep = keep & (offs_m[:, None] >= offs_n[None, :])",
                                          "keep = keep & (offs_m[:, None] + 1 >= offs_n[None, :])")]})
    found = failures(tree, "test_first_row_sees_one_key or test_causal_mask_position")
    msg = one_failure(found, "test_first_row_sees_one_key")
    assert "keys after the query leak into the causal row" in msg, msg
    msg = one_failure(found, "test_causal_mask_position")
    assert "expected [49] only" in msg, msg


def test_dq_accumulated_in_bf16(variant):
    """dq's running sum rounded to the input dtype after every key block."""
    tree = variant(EX, "triton", {FILE: [
        ("dq = _mma(ds.to(kT.dtype), tl.trans(kT), dq, PREC)",
         "dq = _mma(ds.to(kT.dtype), tl.trans(kT), dq, PREC).to(kT.dtype).to(dq.dtype)")]})
    msg = one_failure(failures(tree, "test_dq_sums_in_float32"), "test_dq_sums_in_float32")
    assert msg.startswith("dq: normwise relative error"), msg
    assert "a sum kept in bf16 across blocks" in msg, msg


def test_sdpa_called(variant):
    """The forward computed by PyTorch's scaled_dot_product_attention: refused as delegation."""
    tree = variant(EX, "triton", {FILE: [(
        "        o, lse = _fwd_impl(q, k, v, causal, scale, _direct)\n",
        "        o, lse = _fwd_impl(q, k, v, causal, scale, _direct)\n"
        "        o = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal,\n"
        "                                                             scale=scale)\n")]})
    msg = one_failure(failures(tree, "test_awkward_lengths"), "test_awkward_lengths")
    assert "called PyTorch's" in msg and "your own kernels do the work" in msg, msg


@pytest.mark.gpu
def test_score_matrix_stored(variant):
    """The forward keeps an S x S tensor for the backward (as a naive backward would)."""
    tree = variant(EX, "triton", {FILE: [(
        "        ctx.save_for_backward(q, k, v, o, lse)\n        ctx.causal, ctx.scale = causal, scale\n        return o\n",
        "        ctx.save_for_backward(q, k, v, o, lse)\n        ctx.causal, ctx.scale = causal, scale\n"
        "        ctx.p = torch.empty(q.shape[:3] + (q.shape[2],), dtype=q.dtype, device=q.device)\n"
        "        return o\n")]})
    msg = one_failure(failures(tree, "test_no_score_matrix_kept_for_the_backward"),
                      "test_no_score_matrix_kept_for_the_backward")
    assert "recompute P in the backward" in msg and "S x S matrix kept per call" in msg, msg
