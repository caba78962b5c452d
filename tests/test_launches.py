"""The launch records (grader/submission/launches.cpp, grader.judge.launches): an evidence path a
Python patch in the submission's process cannot reach, held against the profiler's report.

Here: the extension builds, loads in a process without a GPU and says so through the records;
the framing (this grade's secret, the sequence) rejects lines forged from Python, the judge's
cross-check on synthetic records names a rewritten report and accuses no faithful one. On the
GPU (`gpu`): it records beside torch's profiler, the solutions are graded with it on and never
accused, and a forged report the watched functions do not see is caught by the records alone.
"""
import os
import socket
import subprocess
import sys
import textwrap

import pytest

from grader.common.discover import discover
from grader.common.paths import ROOT
from grader.common.preamble import send_preamble
from grader.judge import launches as L
from grader.judge.launches_build import built
from grader.run.grade import grade_track
from grader.run.score import score

EX = {e.number: e for e in discover()}


# --- the extension, and its channel -------------------------------------------------------

CHILD = textwrap.dedent("""
    import os, sys
    from grader.common.preamble import recv_preamble
    from grader.submission.launches import open_launches

    class NoGPU:
        gpu = False

    preamble, fd = recv_preamble(int(sys.argv[1]))
    launches = open_launches(preamble, fd, NoGPU())
    print("status:", launches.status)
    print("still open:", os.path.exists(f"/proc/self/fd/{fd}"))
    if len(sys.argv) > 2:  # what a submission may do: write into every descriptor it has
        for name in os.listdir("/proc/self/fd"):
            try:
                os.write(int(name), sys.argv[2].encode())
            except OSError:
                pass
""")


def _child(*extra) -> tuple[L.Records, subprocess.CompletedProcess]:
    """A process that receives the preamble as the submission's process does, and sets the
    records up without a GPU; the judge's Records for it, after its first reply."""
    records, fd, preamble = L.open_records()
    assert fd is not None, preamble
    ours, theirs = socket.socketpair()
    send_preamble(ours, preamble, fd)
    os.close(fd)
    mine = theirs.detach()
    run = subprocess.run([sys.executable, "-c", CHILD, str(mine), *extra], pass_fds=(mine,),
                         cwd=ROOT, capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    os.close(mine)
    ours.close()
    records.after("load", {}, {"ok": True})
    return records, run


def test_it_builds_and_says_no_gpu_through_the_records():
    so, why = built()
    assert so is not None and so.exists(), why
    records, run = _child()
    assert run.returncode == 0, run.stderr[-3000:]
    assert "status: unavailable: no GPU here" in run.stdout, run.stdout + run.stderr[-2000:]
    # the socket's number Python was given is closed: the extension holds it elsewhere
    assert "still open: False" in run.stdout, run.stdout
    assert records.state == "unavailable" and records.reason == "no GPU here", records.summary()
    assert not records.findings


def test_a_line_forged_from_python_is_caught():
    """Python may write into any descriptor it has (it lists them in /proc/self/fd): a line
    without this grade's secret is a forgery, even where the records are unavailable."""
    records, run = _child("0123 2 L 1 s7 - add_kernel")
    assert run.returncode == 0, run.stderr[-3000:]
    assert any(f.startswith(L.FORGED) and "without this grade's secret" in f
               for f in records.findings), records.findings


# --- the judge's side, on synthetic records -------------------------------------------------

SECRET = "ab" * 16
MARKER = "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>(int)"
ADD = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>(int)"


class Fake:
    """The extension's side of a records socket, written by hand."""

    def __init__(self):
        ours, self.sock = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.records = L.Records(ours, SECRET)
        self.seq = 0
        self.window = 0

    def say(self, kind, rest="", secret=SECRET, seq=None):
        self.seq += 1
        self.sock.send(f"{secret} {self.seq if seq is None else seq} {kind} {rest}".encode())

    def ready(self):
        self.say("A", "1")
        self.call([])  # the set-up's self-test window
        self.say("R", "subscribed to CUPTI")
        assert self.records.after("load", {}, {"ok": True}) == []
        assert self.records.state == "ready"

    def call(self, launches, graphs=0):
        """One window: the marker on stream 7, then `launches` [(name, stream)]."""
        self.window += 1
        self.say("B", str(self.window))
        self.say("L", f"{self.window} s7 M {MARKER}")
        for name, stream in launches:
            self.say("L", f"{self.window} {stream} - {name}")
        for _ in range(graphs):
            self.say("G", f"{self.window} s7")
        self.say("E", f"{self.window} {1 + len(launches) + graphs}")

    def reply(self, kernels, stream=7, op="call"):
        observed = {"ops": [], "kernels": kernels, "stream": stream, "gpu": True, "work": True}
        return self.records.after(op, {"target": ("entry", "add")},
                                  {"ok": True, "observed": observed})


@pytest.fixture
def fake():
    f = Fake()
    f.ready()
    return f


def test_a_faithful_report_is_not_accused(fake):
    fake.call([("add_kernel", "s7"), (ADD, "s7")])
    assert fake.reply([["add_kernel", 7, False, True], [ADD, 7, True, True]]) == []
    assert fake.records.checked == 1


def test_a_report_without_a_launched_kernel_is_held_for_a_second_look(fake):
    """A report that only lacks kernels is what the profiler's dropped records look like: held
    (`pending`) until the proxy has observed the call again, and TAMPERING once confirmed."""
    fake.call([("add_kernel", "s7"), (ADD, "s7")])
    assert fake.reply([["add_kernel", 7, False, True]]) == []
    lacked = fake.records.take_pending()
    assert len(lacked) == 1 and lacked[0].startswith(L.REWRITTEN), lacked
    assert "at::native::vectorized_elementwise_kernel launched 1 time(s)" in lacked[0], lacked
    assert fake.records.confirm(lacked) == lacked and fake.records.findings == lacked
    fake.call([(ADD, "s7")])
    assert fake.reply([[ADD, 7, True, True]]) == [] and not fake.records.pending


def _session(fake, calls):
    """A judge's Session whose submission answers each request with the next of `calls`
    ([launches], [reported kernels]): the records of its window, then its reply."""
    from grader.judge import proxy
    s = proxy.Session.__new__(proxy.Session)
    s.dead, s._release, s.attempts, s.timeout_s, s.records = None, [], [], 10, fake.records
    sent = []

    def exchange(payload, limit):
        sent.append(dict(payload))
        launches, kernels = calls.pop(0)
        fake.call(launches)
        return {"ok": True, "graph": len(sent), "observed": {
            "ops": [], "kernels": kernels, "stream": 7, "gpu": True, "work": True}}
    s._exchange = exchange
    return s, sent


def test_the_proxy_observes_a_call_again_where_its_report_only_lacked_kernels(fake):
    both = [("add_kernel", "s7"), (ADD, "s7")]
    # dropped once: the call again, its first graph freed, its agreeing report judged
    s, sent = _session(fake, [(both, [["add_kernel", 7, False, True]]),
                              (both, [["add_kernel", 7, False, True], [ADD, 7, True, True]])])
    reply = s.request("call", target=("entry", "add"))
    assert s.attempts == [] and len(sent) == 2 and reply["graph"] == 2
    assert sent[1]["release"] == [1] and sent[1]["target"] == sent[0]["target"]
    # lacking them again: TAMPERING, named
    fake = Fake()
    fake.ready()
    s, sent = _session(fake, [(both, [["add_kernel", 7, False, True]])] * 2)
    s.request("call", target=("entry", "add"))
    assert len(sent) == 2 and s.attempts and s.attempts[0].startswith(L.REWRITTEN), s.attempts
    # a renamed kernel is no drop: TAMPERING at once, the call not made again
    fake = Fake()
    fake.ready()
    s, sent = _session(fake, [([(ADD, "s7")], [["my::elementwise_kernel", 7, False, True]])])
    s.request("call", target=("entry", "add"))
    assert len(sent) == 1 and s.attempts and s.attempts[0].startswith(L.REWRITTEN), s.attempts


def test_a_renamed_kernel_is_tampering(fake):
    fake.call([(ADD, "s7")])
    found = fake.reply([["void my::vectorized_elementwise_kernel<4>(int)", 7, False, True]])
    assert found and found[0].startswith(L.REWRITTEN), found


def test_a_kernel_never_launched_is_tampering_unless_a_graph_ran(fake):
    fake.call([("add_kernel", "s7")])
    found = fake.reply([["add_kernel", 7, False, True], ["my_token_kernel", 7, False, False]])
    assert found and "my_token_kernel" in found[0] and "never launched" in found[0], found
    fake.call([("add_kernel", "s7")], graphs=1)
    assert fake.reply([["add_kernel", 7, False, True], ["graph_node", 7, False, True]]) == []


def test_a_kernel_moved_to_the_callers_stream_is_tampering(fake):
    fake.call([("add_kernel", "s13")])
    found = fake.reply([["add_kernel", 7, False, True]])
    assert found and "on another stream" in found[0], found
    fake.call([("add_kernel", "s13")])
    assert fake.reply([["add_kernel", 13, False, True]]) == []  # the truth: another stream


def test_an_unknown_stream_or_name_accuses_nobody(fake):
    fake.call([("add_kernel", "-"), ("?", "s7")])
    assert fake.reply([["add_kernel", 13, False, True], [ADD, 7, True, True]]) == []


def test_a_report_without_the_marker_is_tampering(fake):
    """What replacing the evidence's analysis with an empty report leaves."""
    fake.call([(ADD, "s7")])
    found = fake.reply([], stream=None)
    assert found and "marker kernel" in found[0], found


def test_a_call_without_its_window_or_a_window_without_a_call(fake):
    found = fake.reply([["add_kernel", 7, False, True]])
    assert found and found[0].startswith(L.STOPPED) and "hold 0" in found[0], found
    fake.call([("add_kernel", "s7")])
    fake.call([(ADD, "s7")])  # a second window in one call: the submission called begin/end
    found = fake.reply([["add_kernel", 7, False, True]])
    assert found and "hold 2" in found[0], found
    fake.call([])  # a window in a request that observes nothing
    found = fake.records.after("load", {}, {"ok": True})
    assert found and "reported 0 observed call(s)" in found[0], found


def test_two_calls_on_the_same_buffers_are_two_windows(fake):
    fake.call([("add_kernel", "s7")])
    fake.call([("add_kernel", "s7")])
    observed = {"ops": [], "kernels": [["add_kernel", 7, False, True]], "stream": 7}
    assert fake.records.after("twice", {"target": ("entry", "add")},
                              {"ok": True, "observed": [observed, dict(observed)]}) == []
    assert fake.records.checked == 2


def test_a_failed_call_proves_nothing_either_way(fake):
    fake.call([(ADD, "s7")])
    assert fake.records.after("call", {}, {"ok": False, "error": {}}) == []


def test_forged_gaps_and_counts(fake):
    fake.say("L", "9 s7 - add_kernel", secret="cd" * 16)
    fake.say("B", str(fake.window + 1), seq=fake.seq + 5)
    fake.window += 1
    fake.seq += 5
    fake.say("L", f"{fake.window} s7 M {MARKER}")
    fake.say("E", f"{fake.window} 3")
    found = fake.reply([])
    assert any("without this grade's secret" in f for f in found), found
    assert any("came after record" in f for f in found), found
    assert any("counted 3 launches" in f for f in found), found


def test_a_cupti_fault_inside_a_call_is_tampering(fake):
    fake.window += 1
    fake.say("B", str(fake.window))
    fake.say("F", f"{fake.window} enabling launch callback 307 failed: CUPTI_ERROR_INVALID")
    fake.say("L", f"{fake.window} s7 M {MARKER}")
    fake.say("E", f"{fake.window} 1")
    found = fake.reply([])
    assert found and "tore CUPTI down" in found[0], found


def test_unavailable_records_accuse_nobody():
    f = Fake()
    f.say("A", "1")
    f.say("U", "no GPU here")
    assert f.records.after("load", {}, {"ok": True}) == []
    f.call([("add_kernel", "s7")])  # whatever comes later is not held against anyone
    assert f.reply([]) == [] and f.records.state == "unavailable"


def test_kernel_names_compare_as_the_profiler_spells_them():
    assert L.kernel_key(ADD) == "at::native::vectorized_elementwise_kernel"
    assert L.kernel_key("add_kernel") == "add_kernel"
    assert L.kernel_key("_Z10add_kernelPKfS0_Pfi") == "add_kernel"
    assert L.kernel_key("scale_kernel(float const*, float*, float, long)") == "scale_kernel"
    assert L.kernel_key("void at::native::(anonymous namespace)::fill<float>(int)") == \
        "at::native::{anonymous}::fill"


# --- on the GPU -----------------------------------------------------------------------------

def _grade(tree, number, track=None):
    ex = EX[number]
    t = ex.tracks[track] if track else next(iter(ex.tracks.values()))
    r = grade_track(tree, ex, t)
    return r, score(ex, r)


def _records_line(r) -> str:
    line = next((l for l in r.log_tail.splitlines() if l.startswith("launch records:")), "")
    print(f"{r.exercise} [{r.track}]: {line or 'no records line in the judge log'}")
    return line


@pytest.mark.gpu
def test_the_records_stand_beside_the_profiler():
    """One submission's process, as the judge starts it: the records are ready, and each call
    is seen by both the extension and the profiler (which still reports the kernels)."""
    import torch

    from grader.judge.proxy import Session, _call
    ex = EX["01"]
    s = Session(ROOT / "solutions", ex, ex.tracks["triton"])
    try:
        s.loaded = s.request("load", timeout_s=300)
        assert s.loaded.get("built"), s.loaded
        assert s.records.state == "ready", s.records.summary()
        x, y = (torch.randn(1 << 20, device="cuda") for _ in range(2))
        for _ in range(3):
            out, reply = _call(s, ("entry", "add"), [x, y], {}, [], "add()")
            assert torch.equal(out, x + y)
        kernels = reply["observed"]["kernels"]
        print("the profiler's kernels:", kernels, "\nthe records' last window:",
              s.records.last, "\n" + s.records.summary())
        assert any("add_kernel" in k[0] for k in kernels), kernels
        assert any("add_kernel" in l.name for l in s.records.last.launches), s.records.last
        assert s.records.checked == 3 and not s.records.findings, s.records.findings
    finally:
        s.close()


def _not_accused(configure, number, track, select):
    configure(select=select)
    r, s = _grade(ROOT / "solutions", number, track)
    line = _records_line(r)
    assert not r.tampering, r.tampering
    own = [c for c in r.checks if c.name == "your kernels do the work"]
    assert own and own[0].outcome == "passed", [(c.name, c.outcome, c.message) for c in r.checks]
    assert line.startswith("launch records: ready") and " 0 disagreement" in line, line


@pytest.mark.gpu
def test_a_solution_is_never_accused(configure):
    """01's solution, every check, with the records on: held against the report at every call."""
    _not_accused(configure, "01", "triton", None)


ADD_DEF = "def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:\n"
REWRITE_THE_REPLY = (
    "import torch\nimport grader.common.seam as _seam\n_dumps = _seam.dumps\n"
    "def _clean(o):\n"
    "    if isinstance(o, dict):\n"
    "        o['ops'] = []\n"
    "        o['kernels'] = [[k[0].replace('at::native', 'mine'), k[1], False, k[3]]\n"
    "                        for k in o.get('kernels') or []]\n"
    "def _forged(obj):\n"
    "    if isinstance(obj, dict) and 'observed' in obj:\n"
    "        seen = obj['observed']\n"
    "        for o in seen if isinstance(seen, list) else [seen]:\n"
    "            _clean(o)\n"
    "    return _dumps(obj)\n"
    "_seam.dumps = _forged\n")


@pytest.mark.gpu
def test_a_report_rewritten_in_flight_is_caught_by_the_records_alone(variant, configure):
    """x + y, and the reply's serializer rewritten to report it as the submission's own kernel
    (one of the forgeries the watched functions do not see): the records show PyTorch's."""
    configure(select="matches_reference or length_one")
    tree = variant("01_vector_add", "triton", {"vector_add.py": [
        ("import torch\n", REWRITE_THE_REPLY), (ADD_DEF, ADD_DEF + "    return x + y\n")]})
    r, s = _grade(tree, "01")
    _records_line(r)
    assert any(t.startswith(L.REWRITTEN) for t in r.tampering), r.tampering
    assert not any(t.startswith("replaced ") for t in r.tampering), r.tampering
    assert s.total == 0


@pytest.mark.gpu
def test_a_replaced_analysis_is_caught_and_the_report_stays_true(variant, configure):
    """tests/test_trust.py's forgery (the evidence's analysis replaced in its module): the
    watched functions see it. The server analyses with the function it bound before the
    submission loaded, so the report stays true and the records agree with it: no second
    accusation (an H200, 2026-11-28: only "replaced ...analyse")."""
    configure(select="matches_reference or length_one")
    tree = variant("01_vector_add", "triton", {"vector_add.py": [
        ("import torch\n", "import torch\nimport grader.submission.evidence as _e\n"
         "_e.analyse = lambda events, allowed: {'ops': [], 'kernels': [], 'stream': None}\n"),
        (ADD_DEF, ADD_DEF + "    return x + y\n")]})
    r, s = _grade(tree, "01")
    _records_line(r)
    assert any("replaced grader.submission.evidence.analyse" in t for t in r.tampering)
    assert not any(t.startswith(L.REWRITTEN) for t in r.tampering), r.tampering
    assert s.total == 0


@pytest.mark.gpu
@pytest.mark.parametrize("number,track,select", [
    ("13", "triton", "test_matches_reference or test_awkward_lengths"),
    ("02", "cuda", "test_each_a or test_runs_on_the_current_stream"),
])
def test_more_solutions_are_never_accused(configure, number, track, select):
    """Attention's forward and backward (Triton, shares of the checks in judges side by side),
    and a CUDA C++ extension's kernels (mangled names, the runtime's launches)."""
    _not_accused(configure, number, track, select)
