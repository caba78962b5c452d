"""The cheats a grader must survive: each known-bad submission is rejected, with the right reason,
and the repository is left as it was. (See README, "What the grader trusts".)

Each entry is a solution with a small edit (conftest.variant), so the gallery stays in step with
the solutions. Entries that need a kernel on the GPU are marked `gpu`; the rest run here, on
Triton's CPU interpreter or a C++ CPU path.
"""
import os
import subprocess

from pathlib import Path

import pytest

from grader.common.discover import discover
from grader.run.grade import grade_track
from grader.common.paths import ROOT
from grader.run.score import score

EX = {e.number: e for e in discover()}
ADD_DEF = "def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:\n"
LAUNCH = "    add_kernel[grid](x, y, out, n, BLOCK=BLOCK, num_warps=NUM_WARPS)\n"
KERNEL_ADD = "out = x.to(tl.float32) + y.to(tl.float32)"
FAST = "matches_reference or length_one"  # the checks that matter for these entries (02: the
                                          # first; 01: both)


@pytest.fixture(scope="module", autouse=True)
def repository_unchanged():
    """After the whole gallery, every file of the repository is as it was (git's view)."""
    def state():
        out = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=ROOT,
                             capture_output=True, text=True)
        return out.stdout if out.returncode == 0 else None
    before = state()
    yield
    if os.environ.get("CI"):  # elsewhere, people may be editing the tree meanwhile
        assert state() == before, "grading the gallery changed the repository"


def grade(tree, number="01", track=None, **kw):
    ex = EX[number]
    t = ex.tracks[track] if track else next(iter(ex.tracks.values()))
    r = grade_track(tree, ex, t, **kw)
    return r, score(ex, r)


class _Failed(dict):
    """The failed checks' messages by name; asking for one that did not fail says what happened
    instead (the checks' outcomes, how the judge ended, its last lines), not a bare KeyError."""

    def __init__(self, r):
        super().__init__((c.name.split("[")[0], c.message) for c in r.checks
                         if c.outcome == "failed")
        self.r = r

    def __missing__(self, name):
        r = self.r
        raise AssertionError(
            f"check {name!r} did not fail. outcomes: "
            f"{[(c.name, c.outcome, c.message[:200]) for c in r.checks]}; build: {r.build}; "
            f"ended: {r.ended!r}; tampering: {r.tampering}\nlog tail:\n{r.log_tail}")


def failed(r):
    return _Failed(r)


def v01(variant, *edits):
    return variant("01_vector_add", "triton", {"vector_add.py": list(edits)})


@pytest.fixture
def fast(configure):
    configure(select=FAST)


# --- delegation: the op must be the submission's own kernels ---------------------------------

def test_delegating_to_pytorch_is_named(variant, fast):
    r, s = grade(v01(variant, (ADD_DEF, ADD_DEF + "    return x + y\n")))
    msgs = failed(r)
    assert "called PyTorch's aten::add" in msgs["your kernels do the work"]
    assert "your own kernels do the work" in msgs["test_matches_reference"]
    assert s.correctness == 0


def test_delegating_to_the_reference_module(variant, fast):
    r, s = grade(v01(variant, (ADD_DEF, ADD_DEF +
        "    import importlib.util, pathlib\n"
        f"    p = pathlib.Path({str(ROOT)!r}) / 'exercises/01_vector_add/reference.py'\n"
        "    spec = importlib.util.spec_from_file_location('r', p)\n"
        "    m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)\n"
        "    return m.reference(x, y)\n")))
    assert "aten::add" in failed(r)["your kernels do the work"] and s.correctness == 0


def test_no_kernel_at_all(variant, fast):
    r, s = grade(v01(variant, (ADD_DEF, ADD_DEF +
        "    import numpy as np\n"
        "    return torch.from_numpy(np.add(x.numpy(), y.numpy()))\n")))
    msg = failed(r)["your kernels do the work"]
    # numpy() itself dispatches conversions (resolve_conj, to): either way, no kernel of its own
    assert any(k in msg for k in ("launched no Triton kernel", "no kernel of its own",
                                  "called PyTorch's")), msg
    assert s.correctness == 0


def test_hiding_from_the_profiler_does_not_hide(variant, fast):
    r, s = grade(v01(variant, ("import torch\n", "import torch\nimport contextlib\n"
        "torch.profiler.profile = lambda *a, **k: contextlib.nullcontext()\n"
        "torch.autograd.profiler.record_function = lambda *a, **k: contextlib.nullcontext()\n"),
        (ADD_DEF, ADD_DEF + "    return x + y\n")))
    assert "aten::add" in failed(r)["your kernels do the work"] and s.correctness == 0


@pytest.mark.timeout(1800)
def test_delegating_from_cpp_through_aten(variant, configure):
    """03's C++ CPU path calling at::relu / at::mul instead of its loops: the dispatcher sees it."""
    configure(select="forward_matches")
    tree = variant("03_bias_relu", "cuda", {"bias_relu.cpp": [(
        "return x.is_cuda() ? bias_relu_forward_cuda(xc, bc, scale) : forward_cpu(xc, bc, scale);",
        "return x.is_cuda() ? bias_relu_forward_cuda(xc, bc, scale) : at::relu(xc * scale + bc);")]})
    r, s = grade(tree, "03")
    msg = failed(r)["your kernels do the work"]
    assert "called PyTorch's" in msg and ("aten::mul" in msg or "aten::relu" in msg), msg


# --- the checks and the results are out of the submission's reach ----------------------------

# --- evidence made in the submission's process: rewritten, it is tampering ---------------------

def test_replacing_what_the_evidence_rests_on_is_tampering(variant, fast):
    """Three lines that replace opcheck, or the function that reports the ops and kernels seen,
    in the submission's own process: seen by the server (bound before the submission ran),
    reported as tampering (the track scores 0), and the source flagged for review."""
    r, s = grade(v01(variant, ("import torch\n", "import torch\nimport torch.library\n"
        "torch.library.opcheck = lambda *a, **k: None\n"
        "import grader.submission.evidence as _e\n"
        "_e.analyse = lambda events, allowed: {'ops': [], 'kernels': [], 'stream': None}\n"),
        (ADD_DEF, ADD_DEF + "    return x + y\n")))
    assert any("replaced torch.library.opcheck" in t for t in r.tampering), r.tampering
    assert any("replaced grader.submission.evidence.analyse" in t for t in r.tampering), r.tampering
    assert s.total == 0
    assert any("torch.library.opcheck = ..." in f for f in r.review), r.review
    assert any("grader" in f for f in r.review), r.review


def test_replacing_the_servers_procedure_handler_is_tampering(variant, fast):
    """The server runs as the submission's process's __main__ (python -m grader.submission): a
    submission that reaches it there and replaces a handler is seen, and flagged for review."""
    r, s = grade(v01(variant, ("import torch\n", "import torch\nimport sys\n"
        "sys.modules['__main__'].SubmissionServer.do_run = lambda self, name, args: "
        "{'value': None}\n")))
    assert any("replaced SubmissionServer.do_run" in t for t in r.tampering), r.tampering
    assert s.total == 0 and any("__main__" in f or "sys.modules" in f for f in r.review), r.review


def test_pytorch_on_a_second_thread_is_seen(variant, fast):
    """x + y computed on another Python thread, beside one token Triton launch: the profiler
    records every thread's ATen ops, not only the calling thread's."""
    r, s = grade(v01(variant, (LAUNCH, LAUNCH + "    import threading\n"
        "    box = []\n    t = threading.Thread(target=lambda: box.append(x + y))\n"
        "    t.start(); t.join()\n    return box[0]\n")))
    assert "aten::add" in failed(r)["your kernels do the work"], failed(r)
    assert any("thread" in f for f in r.review), r.review


def test_a_result_cached_by_pointer_is_caught_on_the_cpu(variant, fast, configure):
    """Two calls on the same buffers, new values written in between (grader.judge.proxy._Entry.twice):
    a result kept by the inputs' pointers is the first call's answer, wrong for the second."""
    configure(select="new_contents")
    r, s = grade(v01(variant, (ADD_DEF, "_cache = {}\n\n\n" + ADD_DEF +
        "    key = (x.data_ptr(), y.data_ptr(), x.numel())\n"
        "    if key in _cache:\n        return _cache[key]\n"
        "    _cache[key] = _add(x, y)\n    return _cache[key]\n\n\ndef _add(x, y):\n")))
    msg = failed(r)["test_new_contents_same_shapes"]
    # the cached call computes nothing (no kernel of its own ran), or hands back a stale answer
    assert ("second of two calls on the same buffers" in msg and "launched no" in msg) or \
        "the second call" in msg, msg


def test_an_undeclared_mutation_fails_on_the_cpu(variant, configure):
    """08's in-place op without mutates_args: on the interpreter opcheck still runs its schema
    test, which sees the write into `residual` the schema does not declare."""
    configure(select="opcheck")
    tree = variant("08_add_rmsnorm", "triton", {"add_rmsnorm.py": [(
        '@triton_op("ex08_triton::add_rmsnorm_inplace", mutates_args=("residual",))',
        '@triton_op("ex08_triton::add_rmsnorm_inplace", mutates_args=())')]})
    r, s = grade(tree, "08")
    assert "residual is not defined as mutable but was mutated" in failed(r)["test_opcheck"]


def _signal_fence(mode):
    """Skip where this machine cannot put up the fence `mode` asks for (auto: Landlock's scope,
    ABI 6+; seccomp: the fallback, libseccomp); the state line the sandbox then reports says."""
    from grader.common.machine import landlock_abi
    if mode == "auto" and landlock_abi() < 6:
        pytest.skip(f"Landlock ABI {landlock_abi()} has no signal scope (Linux 6.12+)")
    if mode == "seccomp":
        import ctypes
        try:
            ctypes.CDLL("libseccomp.so.2")
        except OSError:
            pytest.skip("no libseccomp.so.2 here: the seccomp fallback cannot be put up")
    return "signals: Landlock scope" if mode == "auto" else "signals: seccomp filter"


@pytest.mark.parametrize("mode", ["auto", "seccomp"])
def test_a_submission_cannot_signal_outside_its_sandbox(tmp_path, mode):
    """Landlock's signal scope (ABI 6+), or the seccomp filter where the kernel is older (forced
    here by signals = seccomp): the sandboxed process cannot kill a process started before it,
    alone or as a group; its own signals (to itself, to its threads) still arrive."""
    import signal
    import sys
    state = _signal_fence(mode)
    victim = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                              start_new_session=True)
    try:
        code = subprocess.run([sys.executable, "-c", (
            "import os, signal, sys, threading\n"
            f"sys.path.insert(0, {str(ROOT)!r})\n"
            "from pathlib import Path\n"
            "from grader.submission.sandbox import close_filesystem\n"
            f"print(close_filesystem([Path({str(tmp_path)!r})], signals={mode!r}))\n"
            "got = []\n"
            "signal.signal(signal.SIGUSR1, lambda *a: got.append(threading.get_ident()))\n"
            "os.kill(os.getpid(), signal.SIGUSR1)\n"
            "t = threading.Thread(target=lambda: [None for _ in range(10**6)])\n"
            "t.start(); signal.pthread_kill(t.ident, signal.SIGUSR1); t.join()\n"
            "if len(got) != 2:\n"
            "    sys.exit(4)\n"
            "for attack in (lambda: os.kill({0}, signal.SIGKILL),\n"
            "               lambda: os.killpg({0}, signal.SIGKILL)):\n"
            "    try:\n"
            "        attack()\n"
            "    except PermissionError:\n"
            "        continue\n"
            "    sys.exit(5)\n"
            "sys.exit(3)\n").format(victim.pid)], capture_output=True, text=True, timeout=60)
        assert code.returncode == 3, code.stdout + code.stderr
        assert state in code.stdout, code.stdout
        assert victim.poll() is None
    finally:
        victim.kill()


# the op of a submission that signals the judge, the grader (the judge's parent) and the
# grader's process group, SIGKILL each, and computes only if every one was refused
SIGNALS_OUT = (
    "    import os, signal\n"
    "    judge = os.getppid()\n"
    "    top = int(open(f'/proc/{judge}/stat').read().rsplit(')', 1)[1].split()[1])\n"
    "    for attack in (lambda: os.kill(judge, signal.SIGKILL),\n"
    "                   lambda: os.kill(top, signal.SIGKILL),\n"
    "                   lambda: os.killpg(os.getpgid(top), signal.SIGKILL)):\n"
    "        try:\n"
    "            attack()\n"
    "        except PermissionError:\n"
    "            continue\n"
    "        raise RuntimeError('a signal left the sandbox')\n")


@pytest.mark.parametrize("mode", ["auto", "seccomp"])
def test_killing_the_judge_or_the_grader_is_refused(variant, configure, mode):
    """SIGKILL to the judge, to the grader's own process and to its group, from the op: each is
    refused (Landlock's scope, or the seccomp fallback), the grade completes, and the line under
    the scorecard says which fence was on. The review flags the signals and /proc for a person."""
    state = _signal_fence(mode)
    configure(select="matches_reference", signals=mode)
    r, s = grade(v01(variant, (ADD_DEF, ADD_DEF + SIGNALS_OUT)))
    assert state in r.build.get("sandbox", ""), r.build
    assert not r.ended and not failed(r), (r.ended, dict(failed(r)), r.log_tail)
    assert any(c.name.startswith("test_matches_reference") and c.outcome == "passed"
               for c in r.checks), [(c.name, c.outcome) for c in r.checks]
    assert any("signal" in f for f in r.review), r.review


@pytest.mark.parametrize("tree", ["review_fixtures/public", "public_kernels"])
def test_public_kernels_are_not_accused(tree, configure):
    """Correct public kernels as 06 submissions, with only the exercise's glue: a Liger-style
    RMSNorm written from its documented algorithm, and Liger-Kernel's own (where the package is
    installed). Their values pass, nothing is flagged for review, no delegation is alleged; what
    their design does not offer (registration with the dispatcher, rows past Liger's 64K
    columns) is not selected here."""
    if tree == "public_kernels":
        pytest.importorskip("liger_kernel", reason="Liger-Kernel is not installed here")
    configure(select="forward_matches or backward_matches")
    ex = EX["06"]
    r = grade_track(ROOT / "tests" / tree, ex, ex.tracks["triton"])
    assert not r.review and not r.tampering, (r.review, r.tampering)
    assert not failed(r), dict(failed(r))
    assert any(c.name == "your kernels do the work" and c.outcome == "passed" for c in r.checks)


def test_monkeypatching_the_checker_changes_nothing(variant, fast):
    r, s = grade(v01(variant, ("import torch\n", "import torch\nimport grader.judge.check as _c\n"
        "_c.assert_close = lambda *a, **k: None\n_c.call_checked = lambda f, *a, **k: f(*a)\n"),
        (KERNEL_ADD, KERNEL_ADD.replace("+", "-"))))
    assert "elements differ" in failed(r)["test_matches_reference"]


FORGE = ("import glob, json, os\n"
         "for f in glob.glob('/tmp/grader-*/*.jsonl') + glob.glob('/tmp/*/grader-*/*.jsonl'):\n"
         "    try:\n"
         "        open(f, 'a').write(json.dumps({'event': 'result', 'test': 'x', 'outcome': 'passed'}) + '\\n')\n"
         "    except OSError:\n"
         "        pass\n")


def test_forged_result_lines_are_not_read(variant, fast):
    r, s = grade(v01(variant, ("import torch\n", "import torch\n" + FORGE),
                     (KERNEL_ADD, KERNEL_ADD.replace("+", "-"))))
    assert "elements differ" in failed(r)["test_matches_reference"]
    assert r.count("correctness", "passed") <= 1  # at most the zero-length check


def test_forging_then_exiting(variant, fast):
    r, s = grade(v01(variant, ("import torch\n", "import torch\n" + FORGE + "os._exit(0)\n")))
    assert s.total == 0 and not r.build.get("ok")
    assert "ended" in r.build["message"] or "exited" in r.build["message"], r.build


def test_writing_into_every_descriptor(variant, fast):
    r, s = grade(v01(variant, ("import torch\n", "import torch\nimport os\n"
        "for fd in range(3, 64):\n"
        "    try:\n        os.write(fd, b'\\x00\\x00\\x00\\x10{\"ok\": true}passed!!')\n"
        "    except OSError:\n        pass\n")))
    assert s.total == 0
    assert not r.build.get("ok") or r.ended, (r.build, r.ended)


def test_a_forged_pickle_is_refused(variant, fast):
    r, s = grade(v01(variant, ("import torch\n", "import torch\nimport os, pickle, sys\n"
        "from multiprocessing.connection import Connection\n"
        "class Evil:\n    def __reduce__(self):\n        return (os.system, ('touch /tmp/pwned-by-submission',))\n"
        "Connection(int(sys.argv[sys.argv.index('--fd') + 1])).send_bytes(pickle.dumps({'ok': True, 'x': Evil()}))\n")))
    assert s.total == 0
    assert "forged message" in r.build.get("message", "") + r.ended, (r.build, r.ended)
    assert not os.path.exists("/tmp/pwned-by-submission")


def test_killing_the_judge_scores_nothing(variant, fast):
    r, s = grade(v01(variant, ("import torch\n", "import torch\nimport os, signal\n"
                                "os.kill(os.getppid(), signal.SIGKILL)\n")))
    assert s.total == 0 and (r.ended or not r.build.get("ok")), (r.ended, r.build)


# --- the repository cannot be changed ----------------------------------------------------------

def _tamper(target: str) -> str:
    return ("import torch\n"
            "try:\n"
            f"    open({str(ROOT / target)!r}, 'w').write('def test_anything():\\n    pass\\n')\n"
            "except OSError:\n"
            "    pass\n")


@pytest.mark.parametrize("target", ["exercises/01_vector_add/test_vector_add.py",
                                    "grader/run/score.py", "results.json"])
def test_rewriting_the_repository_is_tampering(variant, fast, target):
    before = (ROOT / target).read_bytes() if (ROOT / target).exists() else None
    r, s = grade(v01(variant, ("import torch\n", _tamper(target))))
    assert r.tampering and target in " ".join(r.tampering), r.tampering
    assert s.total == 0
    after = (ROOT / target).read_bytes() if (ROOT / target).exists() else None
    assert after == before


def test_without_landlock_the_snapshot_undoes_every_change(tmp_path):
    """The fallback where a kernel has no Landlock: every file under the roots is kept, and a
    change, a deletion or a new file is undone and named (outside the skipped caches)."""
    from grader.run.snapshot import Snapshot
    (tmp_path / "a.py").write_text("a")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.py").write_text("b")
    (tmp_path / "cache").mkdir()
    snap = Snapshot.take([tmp_path], skip={str(tmp_path / "cache")})
    (tmp_path / "a.py").write_text("changed")
    (tmp_path / "sub" / "b.py").unlink()
    (tmp_path / "new.py").write_text("new")
    (tmp_path / "cache" / "built.so").write_text("a build output")
    changed = snap.restore()
    assert sorted(Path(c).name for c in changed) == ["a.py", "b.py", "new.py"], changed
    assert (tmp_path / "a.py").read_text() == "a" and (tmp_path / "sub" / "b.py").read_text() == "b"
    assert not (tmp_path / "new.py").exists() and (tmp_path / "cache" / "built.so").exists()


def test_the_sandbox_is_on():
    """Landlock makes the repository read-only to the submission where the kernel has it; the
    hash check stands behind it everywhere."""
    r, _ = grade(ROOT / "solutions", "01")
    state = r.build.get("sandbox", "")
    try:
        import landlock
        landlock.landlock_abi_version()
    except Exception:
        pytest.skip(f"no Landlock on this machine: {state}")
    assert state.startswith("Landlock ABI"), state
    assert not r.tampering and not failed(r), failed(r)
    assert any(c.name == "your kernels do the work" and c.outcome == "passed" for c in r.checks)


# --- values: what a fast-but-wrong op tries -----------------------------------------------------

def test_output_written_after_returning(variant, fast):
    """The kernel runs after the op returned (a thread): the judge has already read the output."""
    r, s = grade(v01(variant, (LAUNCH, "    import threading, time\n"
        "    def later():\n        time.sleep(0.3)\n" + "    " + LAUNCH +
        "    threading.Thread(target=later).start()\n")))
    # the judge copied the output when the call returned; no kernel had run during the call
    msg = failed(r)["test_matches_reference"]
    assert "never written" in msg or "launched no Triton kernel" in msg, msg


def test_zeroing_the_inputs_before_the_reference_reads_them(variant, fast):
    r, s = grade(v01(variant, (LAUNCH, LAUNCH + "    x.zero_(); y.zero_(); out.zero_()\n")))
    assert "input `x` was modified" in failed(r)["test_matches_reference"]


def test_zeroing_the_inputs_later_changes_nothing_here(variant, fast):
    r, s = grade(v01(variant, (LAUNCH, "    import threading, time\n    out.zero_()\n"
        "    threading.Thread(target=lambda: (time.sleep(0.2), x.zero_(), y.zero_())).start()\n"
        "    return out\n")))
    msg = failed(r)["test_matches_reference"]  # zeros returned, no kernel in the call
    assert "elements differ" in msg or "launched no Triton kernel" in msg, msg


def test_nan_and_inf_never_pass(variant, fast):
    r, s = grade(v01(variant, (LAUNCH, LAUNCH + "    out.fill_(float('nan'))\n")))
    assert "NaN" in failed(r)["test_matches_reference"]


def test_low_precision_math(variant, fast):
    r, s = grade(v01(variant, (KERNEL_ADD, "out = x.to(tl.float16) + y.to(tl.float16)")))
    msg = failed(r)["test_matches_reference"]
    # bf16 inputs beyond fp16's range overflow in fp16 (inf), or values round to fp16's grid:
    # either way the message says to compute in float32
    assert "compute in float32" in msg or "16-bit" in msg, msg


def test_returning_something_else(variant, fast):
    r, s = grade(v01(variant, (ADD_DEF, ADD_DEF + "    return [x, y]\n")))
    msg = failed(r)["test_matches_reference"]
    assert any(k in msg for k in ("not tensors", "not a tensor", "launched no Triton kernel")), msg


# --- the GPU: streams, caching, the benchmark case, the clock ---------------------------------

@pytest.mark.gpu
def test_delegating_through_at_in_cuda(variant, fast):
    tree = variant("02_scale", "cuda", {"scale.cpp": [
        ("#include <torch/library.h>", "#include <ATen/ops/mul.h>\n#include <torch/library.h>"),
        ("  if (n == 0) return out;  // a launch", "  if (n > 0) return at::mul(x, a);\n  if (n == 0) return out;  // a launch")]})
    r, s = grade(tree, "02")
    assert "aten::mul" in failed(r)["your kernels do the work"] and s.correctness == 0


@pytest.mark.gpu
def test_a_side_stream_is_a_failed_check(variant, fast):
    tree = variant("02_scale", "cuda", {"scale.cpp": [
        ("  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();",
         "  static cudaStream_t side = [] { cudaStream_t s; cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking); return s; }();\n"
         "  const cudaStream_t stream = side;")]})
    r, s = grade(tree, "02")
    assert "not on the caller's current stream" in failed(r)["your kernels do the work"]
    assert s.correctness < EX["02"].points["correctness"]


@pytest.mark.gpu
def test_output_cached_by_pointer(variant, fast):
    r, s = grade(v01(variant, (ADD_DEF, "_cache = {}\n\n\n" + ADD_DEF +
        "    key = (x.data_ptr(), y.data_ptr(), x.numel())\n"
        "    if key in _cache:\n        return _cache[key]\n"
        "    _cache[key] = _add(x, y)\n    return _cache[key]\n\n\ndef _add(x, y):\n")),
        bench=True)
    p = r.performance or {}
    why = (p.get("problem") or "") + " ".join(failed(r).values())
    assert not s.credit, (s, p)
    # a cached call computes nothing: no kernel of its own ran (or, where the cache hands back
    # a stale result for new values, the output is wrong)
    assert any(k in why for k in ("no kernel of its own", "not this call's answer",
                                  "elements differ")), why


@pytest.mark.gpu
def test_special_casing_the_benchmark_size(variant, fast):
    r, s = grade(v01(variant, (ADD_DEF, ADD_DEF +
        "    if x.numel() == 1 << 28:\n        return torch.empty_like(x)\n")), bench=True)
    p = r.performance or {}
    assert s.credit == 0.0, (s, p)
    assert any(k in p.get("problem", "") for k in ("no kernel of its own", "NaN",
                                                    "not this call's answer")), p


@pytest.mark.gpu
def test_delegating_only_at_the_benchmark_size(variant, fast):
    r, s = grade(v01(variant, (ADD_DEF, ADD_DEF + "    if x.numel() == 1 << 28:\n        return x + y\n")),
                 bench=True)
    p = r.performance or {}
    assert s.credit == 0.0 and "aten::add" in p.get("problem", ""), (s, p)


@pytest.mark.gpu
def test_a_patched_timer_is_overruled_by_the_wall_clock(variant, fast):
    r, s = grade(v01(variant, ("import torch\n", "import torch\nimport triton.testing as _tt\n"
        "_tt.do_bench = lambda fn, *a, quantiles=None, **k: (fn(), [0.001, 0.001, 0.001])[1]\n")),
        bench=True)
    # the timer is one of what the evidence rests on (grader.submission._watched): replacing it
    # is tampering, named, and the track scores 0; where it is not seen, the wall clock still
    # overrules the figure
    if r.tampering:
        assert any("triton.testing.do_bench" in t for t in r.tampering), r.tampering
        assert s.total == 0
        return
    f = r.performance["figures"]["forward"]
    assert "wall-clock time is used" in " ".join(r.performance["warnings"])
    assert f["ms"] == f["wall_ms"] and f["fraction"] < 1.1


@pytest.mark.gpu
def test_a_race_fails(variant, configure):
    """06's dw reduction without the barrier between writing its shared partial sums and warp
    0 reading them: other warps' slots are read before they are written."""
    configure(select="backward_matches or dw_over_many_rows")
    tree = variant("06_rmsnorm", "cuda", {"rmsnorm_kernels.cu": [
        ("  sums[threadIdx.y][threadIdx.x] = s;\n  __syncthreads();",
         "  sums[threadIdx.y][threadIdx.x] = s;")]})
    r, s = grade(tree, "06", "cuda")
    assert "dw" in " ".join(failed(r).values()) and "differ" in " ".join(failed(r).values())
