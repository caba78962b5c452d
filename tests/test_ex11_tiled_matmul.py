"""Exercise 11 (tiled_matmul): known-bad submissions, each caught by the right check with the
right message. Made from the solution by small text edits (conftest.variant), so they stay in
step with it. They break the CUDA kernels, so they need a GPU (the CPU path is not edited).

    python -m pytest tests/test_ex11_tiled_matmul.py -q        (on the GPU machine)
"""
import pytest

from grader.discover import discover
from grader.grade import grade_track

EX11 = discover(only="11")[0]
KERNELS = "linear_relu_kernels.cu"

pytestmark = pytest.mark.gpu


def grade(tree):
    return grade_track(tree, EX11, EX11.tracks["cuda"])


def failures(result):
    """check name (without the parameters) -> the list of its failed results"""
    out = {}
    for c in result.checks:
        if c.outcome == "failed":
            out.setdefault(c.name.split("[")[0], []).append(c)
    return out


def cuda_failures(result):
    return {name: [c for c in cs if "cuda" in c.name] for name, cs in failures(result).items()
            if any("cuda" in c.name for c in cs)}


def test_k_tail_not_zero_filled(variant):
    """The seed's bug: outside the matrix the loader keeps what it had (the previous tile's
    values) instead of staging zeros; the last, partial K tile adds them again."""
    tree = variant("11_tiled_matmul", "cuda", {KERNELS: [
        ("out[j] = (r < op.rows && c + j < op.cols) ? p[r * op.ld + c + j] : T(0);",
         "if (r < op.rows && c + j < op.cols) out[j] = p[r * op.ld + c + j];")]})
    r = grade(tree)
    assert r.build.get("ok"), r.build
    f = cuda_failures(r)
    assert "test_k_tails" in f, sorted(f)
    msg = f["test_k_tails"][0].message
    assert "first mismatches (index: got vs expected)" in msg and "last K tile" in msg, msg
    # K = 12 and 20 (multiples of 4) take the 16-byte path, which this edit leaves intact
    assert any(c.outcome == "passed" and c.name.startswith("test_k_tails[cuda-12]")
               for c in r.checks), [(c.name, c.outcome) for c in r.checks if "k_tails" in c.name]


def test_missing_barrier_between_tiles(variant):
    """No __syncthreads() after storing the next tile: warps read a buffer others are still
    writing, and overwrite one others are still reading."""
    tree = variant("11_tiled_matmul", "cuda", {KERNELS: [
        ("    __syncthreads();\n    buf ^= 1;", "    buf ^= 1;")]})
    r = grade(tree)
    assert r.build.get("ok"), r.build
    f = cuda_failures(r)
    caught = {"test_many_tiles", "test_forward_matches_reference", "test_awkward_shapes",
              "test_backward_matches_reference"} & set(f)
    assert caught, sorted(f)
    if "test_many_tiles" in f:
        assert "race on shared memory" in f["test_many_tiles"][0].message


def test_bias_indexed_by_row(variant):
    """bias[m] instead of bias[n]: right only where the row and column indices agree."""
    tree = variant("11_tiled_matmul", "cuda", {KERNELS: [
        ("v[j] = acc[i][h * 4 + j] + bcol[h * 4 + j];",
         "v[j] = acc[i][h * 4 + j] + (bias != nullptr ? bias[m] : T(0));")]})
    r = grade(tree)
    assert r.build.get("ok"), r.build
    f = cuda_failures(r)
    assert "test_bias_is_per_column" in f, sorted(f)
    assert "the bias is per column" in f["test_bias_is_per_column"][0].message


def test_relu_mask_not_applied_in_backward(variant):
    """dZ = dY everywhere: the backward forgets that the ReLU blocked half the outputs."""
    tree = variant("11_tiled_matmul", "cuda", {KERNELS: [
        ("const T g = y[r * N + n] > T(0) ? dy[r * N + n] : T(0);",
         "const T g = dy[r * N + n];")]})
    r = grade(tree)
    assert r.build.get("ok"), r.build
    f = cuda_failures(r)
    assert "test_relu_mask_in_backward" in f, sorted(f)
    assert "dZ = dY * (Y > 0)" in f["test_relu_mask_in_backward"][0].message
    assert "test_forward_matches_reference" not in f  # the forward is untouched
