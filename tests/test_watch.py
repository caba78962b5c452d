"""make watch-NN: the warm loop gives the verdicts a fresh grade gives, from processes forked out
of zygotes that never touched CUDA, sandboxed as ever; it sees a save once, and Ctrl-C leaves
nothing behind. On the CPU (01, Triton's interpreter)."""
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from conftest import make_variant
from grader.common.forking import Forker
from grader.common.processes import child_env
from grader.common.discover import discover
from grader.run.grade import Submission, grade, write_reports
from grader.common.paths import ROOT
from grader.common.settings import from_environment
from grader.tools.watch import Watcher
from grader.run.zygotes import Zygote, ZygoteError

EX01 = discover(only="01")[0]
FILE = "01_vector_add/triton/vector_add.py"
ADD = "out = x.to(tl.float32) + y.to(tl.float32)"
SUB = ADD.replace("+", "-")
STRIDED = "        if not t.is_contiguous():"
CRASH = STRIDED + "\n            import os, signal\n            os.kill(os.getpid(), signal.SIGSEGV)"
TAMPER = ("import torch\n"
          "import torch.library\n"
          "torch.library.opcheck = lambda *a, **k: None\n"
          "try:\n"
          f"    open({str(ROOT / 'grader' / 'run' / 'score.py')!r}, 'a').write('# changed')\n"
          "except OSError:\n"
          "    pass\n")


def verdicts(g):
    """What a grade decided, per track: the build, each check's outcome, the points, tampering."""
    return [(r.track, bool(r.build.get("ok")), [(c.name, c.outcome) for c in r.checks],
             round(s.total, 2), bool(r.tampering)) for _, r, s in g.rows]


def fresh(tree):
    """What `python -m grader grade --exercise 01 --submission TREE --no-bench` decides."""
    return grade(Submission(tree, (EX01,), bench=False))


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))


def test_the_watch_loop_gives_the_verdicts_of_a_fresh_grade(tmp_path):
    tree = make_variant(tmp_path / "tree", "01_vector_add", "triton", {})
    source = tree / FILE
    solved = source.read_text()
    said = tmp_path / "said.txt"
    w = Watcher(tree, EX01, stream=open(said, "w"))
    try:
        w.start()
        assert len(w.zygotes) == 2 and isinstance(w.launcher, Forker), "no zygote served"
        good = w.regrade()
        first = fresh(tree)
        assert verdicts(good) == verdicts(first)
        # the same files: the same scorecard and feedback, line for line
        assert write_reports(good, full=True) == write_reports(first, full=True)
        assert "Landlock ABI" in good.rows[0][1].build["sandbox"]  # sandboxed in the fork

        edit(source, ADD, SUB)  # breaks: every value is wrong
        broken = w.regrade()
        assert verdicts(broken) == verdicts(fresh(tree))
        assert broken.rows[0][2].total < good.rows[0][2].total

        # crashes on a strided input: run with last time's failures first, the strided check
        # crashes before the refusals are run; the loop runs it again in the usual order
        source.write_text(solved.replace(STRIDED, CRASH, 1))
        crashed = w.regrade()
        assert any(c.outcome == "crashed" for c in crashed.rows[0][1].checks)
        assert said.read_text().count("again in the usual order") == 1
        assert verdicts(crashed) == verdicts(fresh(tree))

        source.write_text(solved)  # fixed: last time's failures run first, then the rest
        fixed = w.regrade()
        assert verdicts(fixed) == verdicts(first)

        # the sandbox and the watched functions, in a forked process as in a started one
        source.write_text(solved.replace("import torch\n", TAMPER, 1))
        score_py = (ROOT / "grader" / "run" / "score.py").read_bytes()
        r, s = w.regrade().rows[0][1:]
        assert (ROOT / "grader" / "run" / "score.py").read_bytes() == score_py
        assert any("grader/run/score.py" in t for t in r.tampering), r.tampering
        assert any("replaced torch.library.opcheck" in t for t in r.tampering), r.tampering
        assert s.total == 0
    finally:
        w.close()
    assert all(not z.alive() for z in w.zygotes) and not w.tmp.exists()


def test_a_zygote_that_would_touch_cuda_refuses_to_serve(tmp_path):
    """grader.judge.plugin asks torch.cuda.is_available() at import: a zygote preloading it would
    initialise CUDA before forking (on a GPU), so it refuses, naming the import."""
    z = Zygote("judge", child_env(), tmp_path / "zygote.log", preload=["grader.judge.plugin"])
    with pytest.raises(ZygoteError, match=r"CUDA was queried .*importing grader\.judge\.plugin"):
        z.ready()
    assert not z.alive()


PRELOADED = """
import json, os, sys, tempfile
from grader.run.preload import preload
before = dict(os.environ)
if sys.argv[1] == "preload":
    preload("submission")
else:
    import torch._dynamo
print(json.dumps({"dynamo": "torch._dynamo" in sys.modules, "tempdir": tempfile.tempdir,
                  "changed": sorted(k for k in os.environ if os.environ[k] != before.get(k))}))
"""


def test_a_zygotes_imports_leave_its_environment_as_it_was(tmp_path):
    """torch._dynamo, preloaded in the zygotes, sets TORCHINDUCTOR_CACHE_DIR and pins tempfile's
    folder as it imports; a forked submission's process that kept them would write outside the
    folders its sandbox allows (it sets its own after the fork). The zygote puts both back."""
    env = {k: v for k, v in child_env().items()
           if k not in ("TORCHINDUCTOR_CACHE_DIR", "TMPDIR")}
    env["TMPDIR"] = str(tmp_path)
    said = {}
    for how in ("import", "preload"):
        out = subprocess.run([sys.executable, "-c", PRELOADED, how], env=env, cwd=ROOT,
                             capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr[-2000:]
        said[how] = json.loads(out.stdout.strip().splitlines()[-1])
    # the hazard is real: the import alone changes both
    assert said["import"]["changed"] == ["TORCHINDUCTOR_CACHE_DIR"]
    assert said["import"]["tempdir"] == str(tmp_path)
    assert said["preload"] == {"dynamo": True, "tempdir": None, "changed": []}


def test_a_save_is_seen_once_after_the_editor_is_done(tmp_path):
    """An editor's save: a backup rename, a write in two parts. One change, its time the last
    write's."""
    tree = make_variant(tmp_path / "tree", "01_vector_add", "triton", {})
    source = tree / FILE
    w = Watcher(tree, EX01, stream=open(os.devnull, "w"), poll_s=0.05)
    try:
        seen = w._snapshot()
        text = source.read_text()

        def save():
            time.sleep(0.1)
            source.rename(source.with_suffix(".py~"))
            time.sleep(0.12)
            with open(source, "w") as f:
                f.write(text[:100])
                f.flush()
                time.sleep(0.03)
                f.write(text[100:] + "# saved\n")
        t = threading.Thread(target=save)
        t.start()
        tracks, seen, at = w._wait(seen)
        t.join()
        assert tracks == {"triton"} and source.read_text().endswith("# saved\n")
        assert abs(at - source.stat().st_mtime) < 1e-3
        stop = threading.Event()
        threading.Timer(0.3, stop.set).start()
        assert w._wait(seen, stop)[0] == set()  # nothing more: one save
    finally:
        w.close()


def _descendants(pid: int) -> set[int]:
    kids = {}
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                ppid = int((p / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            kids.setdefault(ppid, set()).add(int(p.name))
    found, todo = set(), [pid]
    while todo:
        for k in kids.get(todo.pop(), ()):
            if k not in found:
                found.add(k)
                todo.append(k)
    return found


def _wait_for(log: Path, text: str, count: int, proc, timeout: float = 240) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        out = log.read_text()
        if out.count(text) >= count:
            return out
        assert proc.poll() is None, out
        time.sleep(0.05)
    raise AssertionError(f"no {text!r} x{count} in:\n{log.read_text()}")


def test_make_watch_regrades_on_save_and_ctrl_c_leaves_nothing(tmp_path):
    tree = make_variant(tmp_path / "tree", "01_vector_add", "triton", {})
    source = tree / FILE
    files = lambda: sorted(str(p.relative_to(tree)) for p in tree.rglob("*"))
    before_files = files()
    git = lambda: subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"],
                                 cwd=ROOT, capture_output=True, text=True).stdout
    before_git = git()
    log = tmp_path / "watch.log"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "grader", "watch", "--exercise", "01",
                                 "--submission", str(tree)], cwd=ROOT, stdout=out,
                                stderr=subprocess.STDOUT, env=env)
    try:
        _wait_for(log, "watch: the first grade took", 1, proc)
        started = _descendants(proc.pid)
        assert len(started) >= 2  # the zygotes (and whatever they forked since)
        with open(source, "a") as f:
            f.write("# a one-line change\n")
        out = _wait_for(log, "from your save to this result", 1, proc)
        assert out.count("Scorecard for") == 2 and "9/9" in out.rsplit("Scorecard for", 1)[1]
        started |= _descendants(proc.pid)
        # a save that hangs the op, then the fix saved while its checks hang: the hanging
        # regrade is cancelled (its processes killed) and the fix graded at once
        solved = source.read_text()
        checking = log.read_text().count("imported; 9 checks")
        source.write_text(solved.replace("    out = torch.empty_like(x)\n",
                                         "    while True:\n        pass\n", 1))
        _wait_for(log, "imported; 9 checks", checking + 1, proc)
        time.sleep(0.5)
        started |= _descendants(proc.pid)
        source.write_text(solved)
        out = _wait_for(log, "from your save to this result", 2, proc, timeout=60)
        assert "the regrade of the older files is cancelled" in out
        assert "9/9" in out.rsplit("Scorecard for", 1)[1]
        started |= _descendants(proc.pid)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    assert log.read_text().rstrip().endswith("watch: stopped")
    def still_alive():
        return [p for p in started if Path(f"/proc/{p}").exists()
                and "Z" not in Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()[0]]
    # torch's shared-memory manager (the seam's file_system tensors) ends by itself once its
    # last client has gone: a moment, not never
    deadline = time.monotonic() + 10
    while (alive := still_alive()) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not alive, [(p, Path(f"/proc/{p}/cmdline").read_bytes().replace(b"\0", b" ")[:200])
                       for p in alive]
    assert [f for f in files() if f not in before_files] == []  # (no __pycache__ either)
    assert git() == before_git  # nor into the repository


def test_a_grade_of_several_tracks_forks_from_zygotes_with_the_same_verdicts(monkeypatch):
    """`make grade` forks its judges and submission's processes from two zygotes
    (grader.run.grade._forking): the same verdicts as processes started afresh, and no zygote
    left behind."""
    from grader.run import grade as grade_module
    from grader.run import zygotes as zygotes_module
    exercises = (EX01, discover(only="05")[0])
    started = []
    real = zygotes_module.start_zygotes

    def spy(*a, **k):
        started.append(real(*a, **k))
        return started[-1]
    monkeypatch.setattr(zygotes_module, "start_zygotes", spy)  # grade's zygote_forker starts them
    # the starters run in full (an unchanged one is otherwise answered without a process)
    run = from_environment().replace(build_starters=True)
    forked = grade(Submission(ROOT / "starter", exercises, settings=run, bench=False))
    assert len(started) == 1
    assert not any(z.alive() for z in started[0])
    monkeypatch.setattr(grade_module, "FORK_AT", 99)
    afresh = grade(Submission(ROOT / "starter", exercises, settings=run, bench=False))
    assert len(started) == 1
    assert verdicts(forked) == verdicts(afresh)
    assert all(r.not_implemented for _, r, _ in forked.rows), verdicts(forked)


def test_the_early_line_waits_for_every_share_of_a_track():
    """The watch loop's early line (how last time's failures did) for a track checked in shares:
    not before every judge has collected its checks and each of last time's failures has a
    result, wherever it ran; the display counts the track's checks over its judges."""
    import io
    from grader.common import events as ev
    from grader.tools.watch import _WatchProgress
    out = io.StringIO()
    p = _WatchProgress(out)
    p.expect(("test_a", "test_b"), time.monotonic())
    label = "13_flash_attention [triton]"
    tests = lambda *names: [{"id": f"t::{n}", "name": n} for n in names] + \
        [{"id": "grader::own_work", "name": "your kernels do the work"}]
    for i in range(2):
        p.on_event(label, "checks", ev.Began(label=label, phase="checks"))
    p.on_event(label, "checks", ev.Collected(tests=tests("test_a", "test_c"), share=[0, 2]))
    p.on_event(label, "checks", ev.Result(test="t::test_a", outcome="passed"))
    assert "failed last time" not in out.getvalue()  # test_b's judge has not collected yet
    p.on_event(label, "checks", ev.Collected(tests=tests("test_b"), share=[1, 2]))
    assert p.tracks[(label, "checks")].total == 4
    p.on_event(label, "checks", ev.Result(test="t::test_b", outcome="failed"))
    assert "1 of 2 pass now; still failing: test_b" in out.getvalue()
    p.on_event(label, "checks", ev.Exited(label=label))
    assert (label, "checks") in p.tracks  # one of its two judges is still running
    p.on_event(label, "checks", ev.Exited(label=label))
    assert (label, "checks") not in p.tracks
