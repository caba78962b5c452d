"""Known-bad submissions of exercise 01 (vector_add): each is caught, with the message that
names the fix (the shared layout check, the stale-output check, the missing mask)."""
import json
import os
import subprocess
import sys

from conftest import ROOT

EX = "01_vector_add"


def failures(tree, select: str) -> dict:
    """Run the checks matching `select` (pytest -k) against `tree`: {check name: message}."""
    events = tree / "events.jsonl"
    env = {**os.environ, "CI": "1", "PYTHONPATH": os.pathsep.join(
        [str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])}
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "grader.plugin", str(ROOT / "exercises" / EX),
         "--tree", str(tree), "--events", str(events), "-k", select, "-q", "-p",
         "no:cacheprovider", "--rootdir", str(ROOT)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    results = [json.loads(line) for line in events.read_text().splitlines()
               if '"event": "result"' in line]
    assert results, f"no check ran:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    return {r["test"].split("::", 1)[-1]: r.get("message", "") for r in results
            if r["outcome"] == "failed"}


def test_ignoring_y_strides_fails_and_names_y(variant):
    """The issue's false pass: an add that refuses a strided x but reads a strided y as if it
    were contiguous scored full marks (only x was ever strided). Now y is, in turn, and the
    message is about y, not x."""
    tree = variant(EX, "triton", {"vector_add.py": [
        ('for name, t in (("x", x), ("y", y)):', 'for name, t in (("x", x),):')]})
    found = failures(tree, "test_strided_input_handled_or_refused")
    assert found, "a kernel that ignores y's strides passed"
    for name, msg in found.items():
        assert "with `y` given as a strided view" in msg, msg
        assert "the output is wrong when `y` is a strided view" in msg, msg
        assert "every other input (`x`) contiguous" in msg, msg
        assert "`x` was" not in msg and "`x` is a strided" not in msg, msg


def test_an_add_that_keeps_its_first_result_fails(variant):
    """A result cached by shape: right the first time, stale the second."""
    tree = variant(EX, "triton", {"vector_add.py": [
        ("    add_kernel[grid](x, y, out, n, BLOCK=BLOCK, num_warps=NUM_WARPS)\n    return out",
         "    add_kernel[grid](x, y, out, n, BLOCK=BLOCK, num_warps=NUM_WARPS)\n"
         "    global _kept\n"
         "    if '_kept' not in globals() or _kept.shape != x.shape:\n"
         "        _kept = out\n"
         "    return _kept")]})
    found = failures(tree, "test_new_contents_same_shapes")
    msg = found.get("test_new_contents_same_shapes[cpu]", "") or next(iter(found.values()), "")
    assert "the second call, same shapes, new input values, is wrong" in msg, found
