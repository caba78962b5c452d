"""What a learner reads while and after grading: progress lines from a growing event log, and
hypothesis' report cut to the drawn values."""
import io
import json

from grader.run.progress import Progress


class Terminal(io.StringIO):
    def isatty(self):
        return True


def _append(path, **event):
    with open(path, "a") as f:
        f.write(json.dumps(event) + "\n")


def test_plain_lines_once_per_stage(tmp_path):
    events, out = tmp_path / "events.jsonl", io.StringIO()
    p = Progress(out)
    p.begin("02_scale [cuda]", events, "checks", ("scale.cu",))
    p.tick("02_scale [cuda]")
    p.tick("02_scale [cuda]")  # nothing new: no second line
    _append(events, event="build", ok=True, seconds=31.4)
    _append(events, event="collected", tests=[{"id": i} for i in range(3)])
    _append(events, event="result", test=0, outcome="passed")
    with open(events, "a") as f:
        f.write('{"event": "result", "te')  # a line still being written is not read yet
    p.tick("02_scale [cuda]")
    p.tick("02_scale [cuda]")
    p.end("02_scale [cuda]")
    assert out.getvalue().splitlines() == ["02_scale [cuda] building scale.cu",
                                           "02_scale [cuda] built (31 s); 3 checks"]


def test_terminal_display_is_drawn_in_place_and_cleared(tmp_path):
    events, out = tmp_path / "events.jsonl", Terminal()
    p = Progress(out)
    p.begin("01_vector_add [triton]", events, "checks")
    _append(events, event="build", ok=True, seconds=0)
    _append(events, event="collected", tests=[{"id": i} for i in range(8)])
    _append(events, event="result", test=0, outcome="passed")
    p.tick("01_vector_add [triton]")
    assert "01_vector_add [triton] check 2/8 " in out.getvalue()
    assert "\n" not in out.getvalue()  # drawn in place (rich's live display), not appended
    p.print("checked 01_vector_add")  # the grade's own lines go above it
    assert "checked 01_vector_add\n" in out.getvalue()
    p.end("01_vector_add [triton]")
    assert not p.live.is_started  # the display was taken down (transient: nothing left)
    assert "\x1b[?25h" in out.getvalue()  # and the cursor shown again


def test_hypothesis_report_keeps_the_drawn_values_only():
    """A failing property check shows what was drawn, not the fixtures (some print as pages)."""
    from types import SimpleNamespace
    from grader.judge.plugin import _hypothesis
    note = ("Failing test case: test_backward_matches_reference(\n"
            "    impl=Impl(solutions/05_softmax/triton),\n"
            "    exercise=Exercise(\n"
            "        number='05',\n"
            "        name='softmax',\n"
            "    ),\n"
            "    data=data(...),\n"
            "    dtype=torch.bfloat16,\n"
            "    seed=19523,\n"
            ")\n"
            "Draw 1 ((rows, N)): (7, 3)\n"
            "Draw 2 (layout): 'MN'\n"
            "\nYou can reproduce this test case by temporarily adding "
            "@reproduce_failure('6.170.15', b'AEECQkxD') as a decorator on your test function")
    item = SimpleNamespace(fixturenames=["impl", "exercise", "device"])
    example, blob, rest = _hypothesis([note, "another note"], item)
    assert example == "dtype=torch.bfloat16, seed=19523, (rows, N)=(7, 3), layout='MN'"
    assert blob == "AEECQkxD" and rest == ["another note"]


def test_an_ahead_of_time_build_is_not_called_building(tmp_path):
    """With --build aot the library exists before the checks: the line says it is loaded, not
    built (seen on the H200: "building reduce_sum_kernels.cu ... built (0 s)")."""
    events, out = tmp_path / "events.jsonl", io.StringIO()
    p = Progress(out, aot=True)
    p.begin("04_reduce_sum [cuda]", events, "checks", ("reduce_sum_kernels.cu",))
    p.tick("04_reduce_sum [cuda]")
    _append(events, event="build", ok=True, seconds=0.0)
    _append(events, event="collected", tests=[{"id": 0}])
    p.tick("04_reduce_sum [cuda]")
    p.end("04_reduce_sum [cuda]")
    assert out.getvalue().splitlines() == [
        "04_reduce_sum [cuda] loading the library built ahead of time",
        "04_reduce_sum [cuda] loaded (built ahead of time); 1 checks"]


def test_checks_failing_with_the_same_words_are_said_once():
    """A forward-only 05 fails 22 checks with one message ("start the backward: ..."): it is
    printed once, with the first check's example, and the others named under it by check,
    their cases counted; a different message still gets its own FAIL."""
    from grader.common.discover import discover
    from grader.run.report import feedback
    from grader.run.results import Check, TrackResult
    from grader.run.score import score
    ex = discover(only="05")[0]
    same = "start the backward: softmax_bwd: not implemented yet"
    checks = [Check("test_forward[cpu]", "correctness", "passed"),
              Check("test_bwd[cpu]", "correctness", "failed", same, example="seed=0"),
              *[Check(f"test_awkward[cpu-{d}]", "correctness", "failed", same)
                for d in ("f32", "f16", "bf16")],
              Check("test_other[cpu]", "correctness", "failed", "y[3] is 2.0, expected 1.0"),
              Check("test_gradcheck[cpu-(13,)]", "gradcheck", "failed", same)]
    r = TrackResult("05_softmax", "triton", "/tree", build={"ok": True}, checks=checks)
    text = feedback(ex, r, score(ex, r), full=True)
    assert text.count(same) == 1, text
    assert "6 check(s) failed" in text and "failing example: seed=0" in text, text
    assert ("  FAIL the same way: test_awkward (3 cases), test_gradcheck[cpu-(13,)]"
            in text.splitlines()), text
    assert "  FAIL test_other[cpu]" in text.splitlines(), text
