"""Exercise 08 (add_rmsnorm): known-bad submissions are caught, with the message that names the
fix. Each bad tree is the solution with a small edit (conftest.variant), checked by the grader's
pytest plugin on the check(s) that must catch it (Triton's interpreter on a CPU machine).
"""
import subprocess
import sys

import pytest

from grader.paths import ROOT
from grader.results import read_events

from conftest import HAS_GPU

EX = "08_add_rmsnorm"
FILE = "add_rmsnorm.py"


def failures(tree, tmp_path, select):
    """Run the checks matching `select` (pytest -k) on `tree`: {check name: failure message}."""
    events = tmp_path / f"events-{len(list(tmp_path.iterdir()))}.jsonl"
    out = subprocess.run([sys.executable, "-m", "pytest", "-p", "grader.plugin",
                          f"exercises/{EX}", "--tree", str(tree), "-q", "-p", "no:cacheprovider",
                          "-k", select, "--events", str(events)],
                         cwd=ROOT, capture_output=True, text=True, timeout=900)
    results = [e for e in read_events(events) if e.get("event") == "result"]
    assert results, f"no check ran:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    failed = {}
    for e in results:
        if e["outcome"] == "failed":
            name = e["test"].split("::")[-1].split("[")[0]
            failed[name] = "\n".join([e.get("message", "")] + e.get("notes", []))
    outcomes = [(e["test"].split("::")[-1], e["outcome"], e.get("phase")) for e in results]
    return Failures(failed, outcomes)


class Failures(dict):
    """{check name: message} of the failed checks; a missing one says what happened instead."""

    def __init__(self, failed, outcomes):
        super().__init__(failed)
        self.outcomes = outcomes

    def __missing__(self, name):
        raise AssertionError(f"{name} did not fail; outcomes: {self.outcomes}")


def bad(variant, *edits):
    return variant(EX, "triton", {FILE: list(edits)})


def test_h_not_stored(variant, tmp_path):
    """Only y written: h comes back as it was allocated (NaN)."""
    tree = bad(variant, ("        tl.store(h_ptr + row * N + cols, h_st, mask=mask)\n", ""))
    f = failures(tree, tmp_path, "test_forward_matches_reference")
    msg = f["test_forward_matches_reference"]
    assert "h (= x + residual)" in msg and "outputs start as NaN" in msg, msg


def test_norm_of_x_instead_of_h(variant, tmp_path):
    tree = bad(variant, ("        h = h_st.to(acc_ty)\n        rstd",
                         "        h = x\n        rstd"))
    msg = failures(tree, tmp_path, "test_forward_matches_reference")[
        "test_forward_matches_reference"]
    assert msg.startswith("y:") and "first mismatches (index: got vs expected)" in msg, msg


def test_dh_without_the_gradient_from_y(variant, tmp_path):
    """dx = dresidual = only the gradient arriving at the h output."""
    tree = bad(variant, ("            dh = (wdy - hhat * c) * rstd\n",
                         "            dh = wdy * 0.0\n"))
    f = failures(tree, tmp_path, "test_backward_matches_reference or test_gradient_of_one_output")
    msg = f["test_backward_matches_reference"]
    assert msg.startswith("dx:") and "the gradient through the norm, from dy" in msg, msg
    assert "test_gradient_of_one_output" in f  # y alone: dx = 0 there


def test_in_place_form_writes_x(variant, tmp_path):
    tree = bad(variant, ("_launch_fwd(x, residual, w, y, residual, rstd, eps)",
                         "_launch_fwd(x, residual, w, y, x, rstd, eps)"))
    f = failures(tree, tmp_path, "test_in_place")
    assert "add_rmsnorm_ modified `x`" in f["test_in_place_form"], f["test_in_place_form"]
    assert "test_in_place_matches_functional" in f


def test_in_place_form_loses_h_in_a_copy(variant, tmp_path):
    """A strided residual silently made contiguous: h lands in the copy."""
    tree = bad(variant, ('raise ValueError("residual must be contiguous: the in-place form '
                         'writes h into it")', "residual = residual.contiguous()"))
    f = failures(tree, tmp_path, "test_in_place_strided_residual")
    msg = f["test_in_place_strided_residual_handled_or_refused"]
    assert "residual after the call" in msg and ".contiguous() copies" in msg, msg


def test_dw_accumulated_in_bf16(variant, tmp_path):
    """The running dw sum rounded to the storage dtype at every row."""
    tree = bad(variant, ("            dw += dy * hhat\n",
                         "            dw = (dw + dy * hhat).to(h_ptr.dtype.element_ty)"
                         ".to(acc_ty)\n"))
    msg = failures(tree, tmp_path, "test_dw_over_many_rows")["test_dw_over_many_rows"]
    assert msg.startswith("dw (the sum over rows") and "bfloat16" in msg, msg


@pytest.mark.gpu
def test_undeclared_mutation(variant, tmp_path):
    """The in-place op writes residual but declares no mutation: opcheck's schema test says so
    (it needs a GPU: opcheck cannot run on Triton's interpreter)."""
    assert HAS_GPU
    tree = bad(variant, ('mutates_args=("residual",))', "mutates_args=())"))
    msg = failures(tree, tmp_path, "test_opcheck")["test_opcheck"]
    assert "opcheck(ex08_triton::add_rmsnorm_inplace) failed" in msg, msg
