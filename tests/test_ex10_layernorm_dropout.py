"""Known-bad submissions of exercise 10 (layernorm_dropout): each is caught, with the message
that names the fix.

The bad trees are made from the solution by small text edits (conftest.variant), so they stay in
step with it. Each runs only the checks that should catch it, on Triton's CPU interpreter when
there is no GPU.
"""
import json
import os
import subprocess
import sys

import pytest

from conftest import HAS_GPU, ROOT

EX = "10_layernorm_dropout"
FILE = "layernorm_dropout.py"
TIMEOUT_S = 600
DEVICE = "cuda" if HAS_GPU else "cpu"  # the plugin's device parameter for a Triton track

FWD_KEEP = "keep = _keep(seed, row, 0, N, p, BLOCK, N_ROUNDS)\n"
BWD_KEEP = "keep = _keep(seed, row, 0, N, p, BLOCK, N_ROUNDS)   # regenerated, not loaded"
COUNTER8 = "j = row * q + start // 8 + tl.arange(0, BLOCK // 8)"   # one counter per 8 values


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


def test_same_numbers_for_every_row(variant):
    """The counter leaves out the row: every row gets the same mask. Values, gradients and the
    kept fraction all look right; only the statistics across rows show it."""
    tree = variant(EX, "triton", {FILE: [(COUNTER8, "j = start // 8 + tl.arange(0, BLOCK // 8)")]})
    found = failures(tree, "test_mask_statistics or test_backward_matches_reference")
    msg = one_failure(found, "test_mask_statistics")
    assert "the rows share random numbers" in msg and "row * N + col" in msg, msg
    assert not any(k.startswith("test_backward_matches_reference") for k in found), found


def test_kept_values_not_rescaled(variant):
    """y = z where kept instead of z / (1 - p): E[y] is (1 - p) z."""
    tree = variant(EX, "triton", {FILE: [
        ("y = tl.where(keep, z * scale, zero)", "y = tl.where(keep, z, zero)")]})
    found = failures(tree, "test_kept_values_are_rescaled or test_forward_matches_reference")
    msg = one_failure(found, "test_kept_values_are_rescaled")
    assert "expected 1/(1-p) = 2" in msg and "inverted dropout" in msg, msg
    msg = one_failure(found, "test_forward_matches_reference")
    assert "y where kept (layernorm(x) / (1 - p))" in msg, msg


def test_backward_draws_another_mask(variant):
    """The backward uses seed + 1: its gradients belong to another mask than the forward's."""
    tree = variant(EX, "triton", {FILE: [(BWD_KEEP, BWD_KEEP.replace("(seed,", "(seed + 1,"))]})
    found = failures(tree, "test_backward_regenerates_the_same_mask or "
                           "test_backward_matches_reference or test_forward_matches_reference")
    msg = one_failure(found, "test_backward_regenerates_the_same_mask")
    assert "the backward used another mask than the forward" in msg, msg
    msg = one_failure(found, "test_backward_matches_reference")
    assert "the backward draws another mask" in msg, msg
    assert not any(k.startswith("test_forward_matches_reference") for k in found), found


def test_seed_ignored(variant):
    """A constant instead of the seed: every seed gives the same mask."""
    tree = variant(EX, "triton", {FILE: [("tl.randint4x(seed, j, N_ROUNDS)",
                                          "tl.randint4x(0, j, N_ROUNDS)")]})
    found = failures(tree, "test_same_seed_same_mask_other_seed_other_mask")
    msg = one_failure(found, "test_same_seed_same_mask_other_seed_other_mask")
    assert "Another seed must give an independent mask" in msg, msg


def test_mask_depends_on_the_grid(variant):
    """The forward mixes the number of programs (= rows) into the seed: the same element gets
    another number when x has another number of rows."""
    tree = variant(EX, "triton", {FILE: [
        (FWD_KEEP, FWD_KEEP.replace("(seed,", "(seed + tl.num_programs(0),"))]})
    found = failures(tree, "test_mask_depends_only_on_seed_and_index")
    msg = one_failure(found, "test_mask_depends_only_on_seed_and_index")
    assert "got different masks" in msg and "never from the program id, the grid size" in msg, msg


def test_one_pass_variance(variant):
    """var = E[x^2] - E[x]^2 in float32: fine for centred rows, noise for mean 1e4."""
    tree = variant(EX, "triton", {FILE: [(
        "rstd = 1.0 / tl.sqrt(tl.sum(xc * xc, axis=0) / N + eps)\n        if EVEN:",
        "rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / N - mean * mean + eps)\n        if EVEN:")]})
    found = failures(tree, "test_large_offset or test_p_zero_is_layernorm")
    msg = one_failure(found, "test_large_offset")
    assert "E[x^2] - E[x]^2 loses every digit" in msg, msg
    assert not any(k.startswith("test_p_zero_is_layernorm") for k in found), found


def test_drops_with_probability_1_minus_p(variant):
    """keep = u < p: the kept fraction is p instead of 1 - p."""
    tree = variant(EX, "triton", {FILE: [("        keep = u >= p\n", "        keep = u < p\n"),
                                         ("        keep = u >= p\n", "        keep = u < p\n"),
                                         ("    keep = u16 >= t\n", "    keep = u16 < t\n")]})
    found = failures(tree, "test_forward_matches_reference")
    msg = one_failure(found, "test_forward_matches_reference")
    assert "kept fraction" in msg or "p = 0 must drop nothing" in msg, msg


def test_no_eps_in_the_square_root(variant):
    """rstd = 1 / sqrt(var): a constant row (variance 0) gives inf * 0 = NaN."""
    tree = variant(EX, "triton", {FILE: [(
        "rstd = 1.0 / tl.sqrt(tl.sum(xc * xc, axis=0) / N + eps)\n        if EVEN:",
        "rstd = 1.0 / tl.sqrt(tl.sum(xc * xc, axis=0) / N)\n        if EVEN:")]})
    found = failures(tree, "test_constant_rows or test_p_zero_is_layernorm")
    msg = one_failure(found, "test_constant_rows")
    assert "NaN or inf for constant rows" in msg and "add eps before the square root" in msg, msg
    assert not any(k.startswith("test_p_zero_is_layernorm") for k in found), found


@pytest.mark.gpu
def test_stored_mask_is_caught_by_its_cost(variant):
    """A forward that keeps a bool mask (here: allocated beside y and held on ctx until the
    backward) is correct in every value: it is caught by the memory it keeps."""
    tree = variant(EX, "triton", {FILE: [(
        "        ctx.p, ctx.seed = p, seed\n",
        "        ctx.p, ctx.seed = p, seed\n"
        "        ctx.mask = torch.empty(x.shape, dtype=torch.bool, device=x.device)\n")]})
    found = failures(tree, "test_no_mask_kept_for_the_backward or test_forward_matches_reference")
    msg = one_failure(found, "test_no_mask_kept_for_the_backward")
    assert "that is a stored mask" in msg, msg
    assert not any(k.startswith("test_forward_matches_reference") for k in found), found
