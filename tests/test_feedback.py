"""What a learner reads while and after grading: progress lines from the judges' events as a
growing log gives them, and hypothesis' report cut to the drawn values."""
import io

from grader.common import events as ev
from grader.run.follow import Follower
from grader.run.progress import Progress


class Terminal(io.StringIO):
    def isatty(self):
        return True


def _follow(p, tmp_path, label, phase, sources, write):
    """A follower feeding `p` the events `write(recorder, log)` appends to a judge's log."""
    path = tmp_path / f"{phase}.jsonl"
    f = Follower()
    f.subscribe(p.on_event)
    f.begin(label, phase, path, sources)
    write(ev.Recorder(path), path)
    f.end(label, phase)
    f.close()


def test_plain_lines_once_per_stage(tmp_path):
    out = io.StringIO()
    p = Progress(out)

    def write(record, path):
        record(ev.Build(ok=True, seconds=31.4))
        record(ev.Collected(tests=[{"id": i} for i in range(3)]))
        record(ev.Result(test="0", outcome="passed"))
        with open(path, "a") as f:
            f.write('{"event": "result", "te')  # a line still being written is not read yet
    _follow(p, tmp_path, "02_scale [cuda]", "checks", ("scale.cu",), write)
    assert out.getvalue().splitlines() == ["02_scale [cuda] building scale.cu",
                                           "02_scale [cuda] built (31 s); 3 checks"]


def test_a_log_read_as_it_grows_keeps_each_line_whole(tmp_path):
    """Tail: a line still being written waits for its end, and a character of several bytes
    (×, —) does not shift the next read."""
    path = tmp_path / "e.jsonl"
    record, tail = ev.Recorder(path), ev.Tail(path)
    record(ev.Result(test="a", outcome="failed", message="off by 2× — see"))
    with open(path, "a") as f:
        f.write('{"event": "done"')
    assert [type(e) for e in tail.new()] == [ev.Result]
    with open(path, "a") as f:
        f.write('}\n')
    assert [type(e) for e in tail.new()] == [ev.Done] and tail.new() == []


def test_terminal_display_is_drawn_in_place_and_cleared(tmp_path):
    out = Terminal()
    p = Progress(out)
    label = "01_vector_add [triton]"
    p.on_event(label, "checks", ev.Began(label=label, phase="checks"))
    for e in (ev.Build(ok=True, seconds=0), ev.Collected(tests=[{"id": i} for i in range(8)]),
              ev.Result(test="0", outcome="passed")):
        p.on_event(label, "checks", e)
    p.live.refresh()
    assert "01_vector_add [triton] check 2/8 " in out.getvalue()
    assert "\n" not in out.getvalue()  # drawn in place (rich's live display), not appended
    p.print("checked 01_vector_add")  # the grade's own lines go above it
    assert "checked 01_vector_add\n" in out.getvalue()
    p.on_event(label, "checks", ev.Exited(label=label))
    assert not p.live.is_started  # the display was taken down (transient: nothing left)
    assert "\x1b[?25h" in out.getvalue()  # and the cursor shown again


def test_hypothesis_report_keeps_the_drawn_values_only():
    """A failing property check shows what was drawn, not the fixtures (some print as pages)."""
    from types import SimpleNamespace
    from grader.judge.explain import hypothesis_report
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
    example, blob, rest = hypothesis_report([note, "another note"], item)
    assert example == "dtype=torch.bfloat16, seed=19523, (rows, N)=(7, 3), layout='MN'"
    assert blob == "AEECQkxD" and rest == ["another note"]


def test_an_ahead_of_time_build_is_not_called_building(tmp_path):
    """With --build aot the library exists before the checks: the line says it is loaded, not
    built (seen on the H200: "building reduce_sum_kernels.cu ... built (0 s)")."""
    out = io.StringIO()
    p = Progress(out, aot=True)

    def write(record, path):
        record(ev.Build(ok=True, seconds=0.0))
        record(ev.Collected(tests=[{"id": 0}]))
    _follow(p, tmp_path, "04_reduce_sum [cuda]", "checks", ("reduce_sum_kernels.cu",), write)
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
    r = TrackResult("05_softmax", "triton", "/tree", build={"ok": True}, checks=tuple(checks))
    text = feedback(ex, r, score(ex, r), full=True)
    assert text.count(same) == 1, text
    assert "6 check(s) failed" in text and "failing example: seed=0" in text, text
    assert ("  FAIL the same way: test_awkward (3 cases), test_gradcheck[cpu-(13,)]"
            in text.splitlines()), text
    assert "  FAIL test_other[cpu]" in text.splitlines(), text
