"""Known-bad submissions of exercise 09 (rmsnorm_quant): the seeds' bugs, each caught by a named
check with the message that names the mistake.

The seed lab (000, Task 6 and "Fused RMSNorm + Quantize") truncates instead of rounding, converts
to int8 before clamping, divides by zero on an all-zero row and (CUDA) races on shared memory by
parking the row's values in the reduction buffer. Each is rewritten here in our solution's shape
by small text edits (conftest.variant), so the variants stay in step with the solutions. Triton
variants run on the CPU interpreter; CUDA variants need a GPU (marked `gpu`).
"""
import json
import os
import subprocess
import sys

import pytest

from conftest import HAS_GPU, ROOT

EX = "09_rmsnorm_quant"
TIMEOUT_S = 900
DEVICE = "cuda" if HAS_GPU else "cpu"  # the plugin's device parameter for the Triton track

TRITON = "rmsnorm_quant.py"
KERNELS = "rmsnorm_quant_kernels.cu"


def results(tree, select: str, track: str = "triton") -> list[dict]:
    """Run the checks matching `select` (pytest -k) against `tree`: their result events."""
    events = tree / "events.jsonl"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])}
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "grader.plugin", str(ROOT / "exercises" / EX),
         "--tree", str(tree), "--track", track, "--events", str(events), "-k", select, "-q",
         "-p", "no:cacheprovider", "--rootdir", str(ROOT)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
    found = [json.loads(line) for line in events.read_text().splitlines()
             if '"event": "result"' in line] if events.exists() else []
    assert found, f"no check ran:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    return found


def failures(tree, select: str, track: str = "triton") -> dict:
    """{check name: message} of the checks matching `select` that failed."""
    return {r["test"].split("::", 1)[-1]: r.get("message", "")
            for r in results(tree, select, track) if r["outcome"] == "failed"}


def one_failure(found: dict, name: str) -> str:
    hits = [msg for check, msg in found.items() if check.startswith(name)]
    assert hits, f"{name} did not fail; failures: {list(found)}"
    return hits[0]


# --- Triton track, on the interpreter without a GPU --------------------------------------------

TRITON_TRUNCATE = {TRITON: [("r = _round_half_even(y * inv)", "r = y * inv"),
                            ("r = _round_half_even(((x * w) * rstd) * inv)",
                             "r = ((x * w) * rstd) * inv")]}

TRITON_CAST_BEFORE_CLAMP = {TRITON: [
    ("q = tl.minimum(tl.maximum(r, -QMAX), QMAX)  # clamp in float, then convert: no wraparound\n"
     "        tl.store(q_row + cols, q.to(tl.int8), mask=mask)",
     "q = r.to(tl.int8)  # the seed: convert, then clamp the int8 (a no-op by then)\n"
     "        q = tl.where(q > 127, 127, q)\n"
     "        q = tl.where(q < -127, -127, q)\n"
     "        tl.store(q_row + cols, q, mask=mask)")]}

TRITON_DIVIDE_BY_ZERO = {TRITON: [("safe = tl.where(nonzero, amax, QMAX)", "safe = amax"),
                                  ("inv = tl.where(nonzero, QMAX / safe, 0.0)",
                                   "inv = QMAX / safe")]}


def test_triton_truncation(variant):
    """The seed's `.to(tl.int8)` on y / scale truncates toward zero: 2.7 -> 2, -2.7 -> -2."""
    tree = variant(EX, "triton", TRITON_TRUNCATE)
    found = failures(tree, "test_q_matches_reference or test_long_rows")
    msg = one_failure(found, "test_q_matches_reference")
    assert "rounded toward zero (truncated)" in msg, msg
    assert "round to the nearest integer first" in msg, msg
    assert "rounded toward zero" in one_failure(found, "test_long_rows")


def test_triton_divide_by_zero_on_zero_rows(variant):
    """The seed's scale = max / 127 with no test for 0: 0 / 0 on an all-zero row."""
    tree = variant(EX, "triton", TRITON_DIVIDE_BY_ZERO)
    found = failures(tree, "test_all_zero_rows or test_q_matches_reference")
    msg = one_failure(found, f"test_all_zero_rows[{DEVICE}-torch.float32]")
    assert "scale of an all-zero row is 0.0, expected 1" in msg, msg
    assert "divides by zero" in msg, msg
    # random rows are never all zero: the general check passes, only the named one catches it
    assert not any(k.startswith("test_q_matches_reference") for k in found), found


def test_triton_cast_before_clamp_is_dead_code_here(variant):
    """The seed converts to int8 and then clamps the int8, which can no longer exceed 127.

    Under this op's scale rule the mistake has no effect: scale = max|y| / 127 puts every
    y / scale in [-127, 127] up to a few float32 ulps, so rounding never reaches 128 and the clamp
    never engages (it would with a static or floored scale, the README says). No check can
    tell this variant from the solution, and none should fail it: this test pins that down, so
    that a change of the scale rule (which would make the order matter) is noticed here.
    test_q_never_wraps_around still holds the edges a wrong conversion breaks (exactly ±127 at
    maxima of either sign, never -128).
    """
    tree = variant(EX, "triton", TRITON_CAST_BEFORE_CLAMP)
    ran = results(tree, "test_q_never_wraps_around or test_properties or test_one_huge_element")
    failed = {r["test"]: r.get("message", "") for r in ran if r["outcome"] == "failed"}
    assert not failed, failed


# --- CUDA track, on a GPU ----------------------------------------------------------------------

CUDA_TRUNCATE = {KERNELS: [("const float r = rintf(y * inv);", "const float r = y * inv;")]}

CUDA_DIVIDE_BY_ZERO = {KERNELS: [("const bool nonzero = amax > 0.f;",
                                  "const bool nonzero = true;")]}

# The seed keeps the row's values in the reduction buffer ("Reuse shared mem") while the block
# still reduces through it. Here x*w is parked in `red` (viewed as floats) before
# block_sum_max: lane 0 of each warp then writes its (sum, max) pair, red[warp], on top of
# columns 0..2*warps-1, so those columns of every row are quantized from the reduction's
# partials. Within one warp (rows of <= 256 bf16, as in test_many_rows) that is deterministic
# (thread 0 parks, then writes red[0] over columns 0 and 1); across warps the parking and the
# other warps' partial writes race (compute-sanitizer racecheck reports them). Rows are limited
# to 8192 here so the parked row fits the buffer.
CUDA_SHARED_RACE = {KERNELS: [
    ("__shared__ float2 red[32];  // block_sum_max's (sum, max) per warp: nothing else here",
     "__shared__ float2 red[32 + 4096];  // the seed: the row's values \"reuse shared mem\" too"),
    ("      mx = fmaxf(mx, fabsf(v[k][j]));\n",
     "      mx = fmaxf(mx, fabsf(v[k][j]));\n"
     "      reinterpret_cast<float*>(red)[(k * tpr + tid) * VEC + j] = v[k][j];\n"),
    ("qv.v[j] = quantize(v[k][j] * rstd, s.inv);",
     "qv.v[j] = quantize(reinterpret_cast<float*>(red)[c + j] * rstd, s.inv);"),
    ("if (vec_ok && course::ceil_div(N, V * kVecsPerThread) <= kMaxThreads)",
     "if (vec_ok && N <= 8192 && course::ceil_div(N, V * kVecsPerThread) <= kMaxThreads)"),
    ("} else if (course::ceil_div(N, kScalarsPerThread) <= kMaxThreads) {",
     "} else if (N <= 8192 && course::ceil_div(N, kScalarsPerThread) <= kMaxThreads) {")]}


@pytest.mark.gpu
def test_cuda_truncation(variant):
    """The float-to-int8 conversion without rintf truncates."""
    tree = variant(EX, "cuda", CUDA_TRUNCATE)
    msg = one_failure(failures(tree, "test_q_matches_reference and cuda", "cuda"),
                      "test_q_matches_reference[cuda]")
    assert "rounded toward zero (truncated)" in msg, msg


@pytest.mark.gpu
def test_cuda_divide_by_zero_on_zero_rows(variant):
    tree = variant(EX, "cuda", CUDA_DIVIDE_BY_ZERO)
    msg = one_failure(failures(tree, "test_all_zero_rows and cuda", "cuda"),
                      "test_all_zero_rows[cuda-torch.float32]")
    assert "expected 1" in msg and "divides by zero" in msg, msg


@pytest.mark.gpu
def test_cuda_shared_memory_race(variant):
    """The row parked in the reduction buffer: the same columns of every row come out wrong
    (the reductions' writes land on them), and calls may disagree (the race itself).
    compute-sanitizer --tool racecheck reports the hazards (README, "The seed's race")."""
    tree = variant(EX, "cuda", CUDA_SHARED_RACE)
    found = failures(tree, "(test_many_rows or test_repeated_calls_agree or test_long_rows) "
                           "and cuda", "cuda")
    msg = one_failure(found, "test_many_rows[cuda]")
    assert "the same few slots of every row" in msg and "shared-memory buffer" in msg, msg
    assert "block reduction" in msg, msg
