"""Known-bad submissions of exercise 05 (softmax): each is caught, with the message that names
the fix.

The bad trees are made from the solution by small text edits (conftest.variant), so they stay in
step with it. Each runs only the checks that should catch it, on Triton's CPU interpreter when
there is no GPU (a few seconds each).
"""
import json
import os
import subprocess
import sys

from conftest import HAS_GPU, ROOT

EX = "05_softmax"
TIMEOUT_S = 300
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
    """exp(x) instead of exp(x - max): inf / inf = NaN once |x| passes ~89 (float32)."""
    tree = variant(EX, "triton", {"softmax.py": [("e = tl.exp(x - m)", "e = tl.exp(x)")]})
    found = failures(tree, "test_large_magnitudes")
    for dtype in ("float32", "float16", "bfloat16"):
        msg = one_failure(found, f"test_large_magnitudes[{DEVICE}-torch.{dtype}]")
        assert "y has NaN or inf in rows" in msg and "exp overflowed" in msg, msg
        assert "subtracting the max keeps every exponent <= 0" in msg, msg


def test_block_that_truncates_long_rows(variant):
    """One block per row, clipped to the maximum block size: the rest of a long row is dropped."""
    tree = variant(EX, "triton", {"softmax.py": [
        ("one_block = N <= max_block", "one_block = True"),
        ("block = triton.next_power_of_2(N) if one_block",
         "block = min(triton.next_power_of_2(N), max_block) if one_block")]})
    msg = one_failure(failures(tree, "test_rows_longer_than_a_block"),
                      "test_rows_longer_than_a_block")
    assert "rows longer than one block: loop over the row in blocks" in msg, msg
    assert msg.startswith("y:"), msg


def test_exp_in_float16(variant):
    """exp computed in float16: ~3 significant digits, wrong for float32 inputs."""
    # (tl.exp refuses float16 operands: round its argument and its result to float16 instead)
    to16 = "tl.exp((x - m).to(tl.float16).to(acc_ty)).to(tl.float16).to(acc_ty)"
    tree = variant(EX, "triton", {"softmax.py": [
        ("e = tl.exp(x - m)", f"e = {to16}"),                    # one block
        ("(tl.exp(x - m) * inv)", f"({to16} * inv)")]})         # the online second pass
    found = failures(tree, "test_float32_accuracy")
    for n in (7, 100, 700):  # one block, and (on the CPU interpreter) the online path
        msg = one_failure(found, f"test_float32_accuracy[{DEVICE}-N={n}]")
        assert msg.startswith("y:"), msg
        assert "what 16-bit arithmetic gives" in msg, msg
        assert "compute exp and the sum in float32" in msg, msg


def test_backward_from_x_instead_of_y(variant):
    """The backward reads x where the formula needs the forward's output y."""
    tree = variant(EX, "triton", {"softmax.py": [
        ("ctx.save_for_backward(y)", "ctx.save_for_backward(x)")]})
    msg = one_failure(failures(tree, "test_awkward_shape"), "test_awkward_shape")
    assert msg.startswith("dx (= y * (dy - sum(dy * y)))"), msg
    assert "the backward needs the forward's output y (ctx.save_for_backward(y))" in msg, msg


def test_online_softmax_without_the_minus_inf_guard(variant):
    """Rescaling a lane that has seen only -inf: exp(-inf - (-inf)) = NaN poisons the row sum."""
    tree = variant(EX, "triton", {"softmax.py": [
        ('seen = m_new > float("-inf")', "seen = m_new == m_new")]})
    found = failures(tree, "test_rows_of_minus_inf")
    msg = one_failure(found, "test_rows_of_minus_inf")
    assert "exp(-inf - (-inf)) is NaN" in msg and "tl.where" in msg, msg


def test_forward_only_passes_the_forward_stage(variant):
    """A learner who has written only the forward: the forward checks pass, the backward ones
    say "start the backward" (they used to fail every check that also called the backward)."""
    tree = variant(EX, "triton", {"softmax.py": [(
        "def softmax_bwd(y: torch.Tensor, dy: torch.Tensor) -> torch.Tensor:\n",
        "def softmax_bwd(y: torch.Tensor, dy: torch.Tensor) -> torch.Tensor:\n"
        "    raise NotImplementedError('softmax_bwd: not implemented yet')\n")]})
    found = failures(tree, "test_awkward_shape or test_forward_matches_reference")
    assert found, "the backward stub was not noticed"
    for name, msg in found.items():
        assert "backward" in name, (name, msg)
        assert msg.startswith("start the backward: softmax_bwd: not implemented yet"), msg
