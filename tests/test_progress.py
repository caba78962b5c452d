"""grader.progress: what a track is doing while the learner waits, from its growing event log."""
import io
import json

from grader.progress import Progress


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


def test_terminal_line_is_rewritten_and_cleared(tmp_path):
    events, out = tmp_path / "events.jsonl", Terminal()
    p = Progress(out)
    p.begin("01_vector_add [triton]", events, "checks")
    _append(events, event="build", ok=True, seconds=0)
    _append(events, event="collected", tests=[{"id": i} for i in range(8)])
    _append(events, event="result", test=0, outcome="passed")
    p.tick("01_vector_add [triton]")
    assert out.getvalue().startswith("\r01_vector_add [triton] check 2/8 ")
    assert "\n" not in out.getvalue()
    p.end("01_vector_add [triton]")
    assert out.getvalue().endswith("\r")  # the line was blanked out
