"""Proxy: the `impl` the checks call, in the judge; every call runs in the submission's process
(grader.submission) and only data comes back.

    session = Session(tree, exercise, track)   # starts the submission's process
    impl = RemoteImpl(session)                 # impl.add(x, y), impl.op(...), impl.opcheck(...)

A call sends transfer copies of the tensor arguments (shared, not copied again: CUDA IPC on the
GPU), waits for the submission's process under the check's time limit, copies the outputs into this process's
own memory at once (so nothing the submission's process does later can change them), and writes back any
argument the op modified (an in-place op stays in-place, and `call_checked` still sees a
modified input). When an argument requires grad the call is an autograd.Function here whose
backward is another call: the graph stays in the submission's process.

Every call comes back with evidence (the ATen ops and kernels it used, their streams); the
trust rules (grader.common.trust) turn it into a failed check: delegation, a side stream. The
kernels in it are held against the launch records (grader.judge.launches) after every reply: a
report that disagrees with them is tampering.
"""
from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import weakref
from pathlib import Path

import torch

from grader.common import events as ev
from grader.common import seam, trust
from grader.common.processes import describe_exit
from grader.common.settings import current
from grader.judge.alone import Watch
from grader.judge.check import Mismatch
from grader.judge.launches import Records
from grader.judge.spawn import Spawner, key

_BUILTIN = {c.__name__: c for c in (NotImplementedError, ValueError, TypeError, IndexError,
                                    AssertionError, RuntimeError)}


class SubmissionDied(BaseException):
    """The submission's process ended (crash, exit, timeout): this check, and the rest, fail.

    Not an Exception: a check that accepts a refusal (`except (RuntimeError, ValueError)`) must
    not take a crash for one, and hypothesis must not try more examples on a dead process."""

    def __init__(self, reason: str, log: str = ""):
        super().__init__(reason)
        self.reason, self.log = reason, log


def raise_remote(err: dict):
    """Re-raise, here, an exception the submission's op raised there: the same built-in base
    (so a check expecting a RuntimeError or ValueError sees one), its type's name, message and
    notes, and where in the learner's file it was raised."""
    base = _BUILTIN.get(err.get("base"), RuntimeError)
    cls = type(err.get("type", "Error"), (base,), {"__module__": "submission"}) \
        if err.get("type") not in _BUILTIN else base
    e = cls(err.get("message", ""))
    e.grader_where = err.get("where", "")
    for n in err.get("notes", []):
        e.add_note(n)
    raise e


class Session:
    """The submission's process for one (tree, exercise, track), and what it reported so far."""

    def __init__(self, tree: Path, exercise, track, *, timeout_s: float = 600, protect=(),
                 started=None, spawner: Spawner = Spawner()):
        self.exercise, self.track = exercise, track
        self.tree = Path(tree).resolve()
        self.timeout_s = timeout_s
        self.violations: list[str] = []   # delegation / side-stream findings, first few
        self.attempts: list[str] = []     # writes into the repository the submission tried
        self.calls = 0
        self.ok_calls = 0
        self.stub_seen = False  # a check failed on "not implemented yet"
        self.dead: SubmissionDied | None = None
        self._release: list[int] = []  # graphs the judge no longer holds: freed with the next request
        tool = current().sanitize  # memcheck, racecheck, initcheck, synccheck
        self.sanitizer = sanitizer_command(tool) if tool else None
        # A process the judge started before importing torch (grader.judge) is adopted when it
        # was started for exactly this; under a sanitizer the command differs: start afresh.
        if started is not None and (tool or started.key != key(
                self.tree, exercise.id, track.name, protect)):
            _kill(started.proc)
            started = None
        if started is None:
            started = spawner.start(self.tree, exercise.id, track.name, protect,
                                    self.sanitizer if isinstance(self.sanitizer, list) else None)
        self.proc, self.conn = started.proc, started.conn
        self.scratch, self.log_path = started.scratch, started.log_path
        # its launch records, held against the profiler's report after every reply
        self.records = started.records or Records(None, "", "not started with this session")
        weakref.finalize(self, _kill, self.proc)

    # the channel ---------------------------------------------------------------------------

    def request(self, op: str, *, timeout_s: float | None = None, **payload) -> dict:
        if self.dead is not None:
            raise self.dead
        payload["op"] = op
        if self._release:
            payload["release"], self._release = self._release, []
        limit = timeout_s or self.timeout_s
        reply = self._exchange(payload, limit)
        found = list(reply.get("attempts") or []) + self.records.after(op, payload, reply)
        lacked = self.records.take_pending()
        if lacked:
            # only kernels lacking, as when the profiler drops records (grader.judge.launches):
            # the same call again (its first graph freed), judged instead where it agrees
            again = {k: v for k, v in payload.items() if k != "release"}
            if isinstance(reply.get("graph"), int):
                again["release"] = [reply["graph"]]
            reply = self._exchange(again, limit)
            found += list(reply.get("attempts") or []) + self.records.after(op, again, reply)
            still = self.records.take_pending()
            found += self.records.confirm(lacked + still) if still else []
            print(f"launch records: {lacked[0][:300]}; observed again, " + (
                "it lacked kernels again" if still else "the report agreed with the records: "
                "records the profiler dropped"), file=sys.stderr, flush=True)
        for a in found:
            if a not in self.attempts:
                self.attempts.append(str(a))
        return reply

    def _exchange(self, payload: dict, limit: float) -> dict:
        """Send one request, and return the submission's reply (a dict) or end the session."""
        try:
            seam.send(self.conn, payload)
            if not self.conn.poll(limit):
                self._die(f"timed out: a check ran past its time limit of {limit:.0f} s (an "
                          f"infinite loop or a hung kernel?)", kill=True)
            reply = seam.recv_untrusted(self.conn)
        except (EOFError, OSError, BrokenPipeError):
            self._die(None)
        except seam.UnsafeMessage as e:
            self._die(f"the submission's process sent a forged message: {e}", kill=True)
        if not isinstance(reply, dict):
            self._die("the submission's process sent something that is not a reply", kill=True)
        return reply

    def _die(self, reason: str | None, kill: bool = False):
        if kill:
            _kill(self.proc)
        try:
            code = self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            _kill(self.proc)
            code = self.proc.wait()
        if reason is None:
            reason = describe_exit(code, None, "") or "the submission's process ended"
        log = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        cuda = re.search(r"CUDA error: ([^\n]+)", log)
        if cuda and "CUDA error" not in reason:  # what broke the context, before it crashed
            reason += f" after CUDA error: {cuda.group(1).strip()}"
        self.dead = SubmissionDied(reason, log)
        raise self.dead

    def close(self) -> None:
        if self.dead is None and self.proc.poll() is None:
            try:
                self.request("exit", timeout_s=10)
            except SubmissionDied:
                pass
        if self.records.sock is not None:  # the judge's log: were the records on, and held?
            print(self.records.summary(), file=sys.stderr, flush=True)
        _kill(self.proc)

    # evidence -------------------------------------------------------------------------------

    def judge(self, observed: dict | None, what: str) -> None:
        """Turn a call's evidence into a failed check (delegation, side stream)."""
        if not observed:
            return
        for kind, why in ((trust.Delegation, trust.delegation(observed, self.exercise,
                                                               self.track, what=what,
                                                               sanitized=self.sanitizer is not None)),
                          (trust.SideStream, trust.side_stream(observed, what=what))):
            if why:
                if len(self.violations) < 5 and why not in self.violations:
                    self.violations.append(why)
                raise kind(why)


def record_compiles(session: Session, record) -> None:
    """The Triton specializations the submission's process compiled (an event: where a grade's
    seconds go; the process reports them, so they are figures, never evidence)."""
    try:
        reply = session.request("stats", timeout_s=30)
    except SubmissionDied:
        return
    if reply.get("ok"):
        record(ev.Compiles(**{k: reply[k] for k in ("specializations", "kernels", "seconds",
                                                    "compiled", "emulated")}))


def sanitizer_command(tool: str):
    """compute-sanitizer's command line for `tool`, or a one-line reason it cannot run here."""
    if tool not in ("memcheck", "racecheck", "initcheck", "synccheck"):
        return (f"SANITIZE={tool}: not a compute-sanitizer tool (memcheck, racecheck, initcheck, "
                f"synccheck)")
    home = Path(os.environ.get("CUDA_HOME") or "/usr/local/cuda")
    exe = shutil.which("compute-sanitizer") or (
        str(home / "bin" / "compute-sanitizer") if (home / "bin" / "compute-sanitizer").exists()
        else None)
    if exe is None:
        return "compute-sanitizer is not installed here (it ships with the CUDA toolkit)"
    if not torch.cuda.is_available():
        return "compute-sanitizer needs a GPU: there is none here"
    # application-only: the submission's process's own kernels; the child processes of a build (ninja, nvcc,
    # the host compiler) run unsanitized (under the default, `all`, torch's `ninja --version`
    # probe failed on the H200 machine and the build reported "Ninja is required")
    return [exe, "--tool", tool, "--target-processes", "application-only", "--print-limit", "10",
            "--show-backtrace", "no"]


def sanitizer_findings(log: str, limit: int = 12) -> list[str]:
    """compute-sanitizer's reports in the submission's process's output: the error lines and where (with
    -lineinfo, the learner's file:line)."""
    lines = [l.removeprefix("========= ").rstrip() for l in log.splitlines()
             if l.startswith("=========") and l.strip("= ").strip()]
    keep = [l for l in lines if not l.startswith(("COMPUTE-SANITIZER", "Program hit",
                                                  "Saved host backtrace", "Host Frame"))]
    return keep[:limit]


def _kill(proc) -> None:
    if proc.poll() is None:
        try:
            os.kill(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass


# --- the call ----------------------------------------------------------------------------------

def _send_args(args):
    """Transfer copies of every tensor argument, and the originals they stand for."""
    pairs = []

    def conv(v):
        if isinstance(v, torch.Tensor):
            c = seam.transfer_copy(v)
            pairs.append((v, c))
            return c
        return v
    sent = seam.tree_map(conv, list(args))
    return sent, pairs


def _write_back(pairs) -> None:
    """The op modified an argument: make the caller's tensor show it, as an in-place op would."""
    for orig, copy in pairs:
        if orig.device.type == "meta":
            continue  # a shape without data: nothing to write back
        if torch.equal(orig.detach(), copy):
            continue  # the common case, one pass without allocating (NaN inputs go on below)
        same = torch.eq(orig.detach(), copy) | (torch.isnan(orig.detach()) & torch.isnan(copy)) \
            if orig.is_floating_point() else torch.eq(orig.detach(), copy)
        if orig.numel() and not bool(same.all()):
            with torch.no_grad():
                orig.copy_(copy)


def _receive(out):
    """Outputs into this process's own memory, now (a later change in the submission's process is ignored)."""
    if out is None:
        return None
    if not isinstance(out, torch.Tensor):
        raise Mismatch(f"the op returned {type(out).__name__}, not a tensor")
    return out.clone(memory_format=torch.preserve_format)


def remote_call(session: Session, target, args, kwargs=None, *, what: str):
    """Call `target` in the submission's process with `args`; autograd-aware."""
    kwargs = kwargs or {}
    grad = [i for i, a in enumerate(args) if isinstance(a, torch.Tensor) and a.requires_grad]
    if grad and torch.is_grad_enabled():
        meta = {}
        outs = _RemoteFunction.apply(session, target, list(args), kwargs, grad, what, meta,
                                     *[args[i] for i in grad])
        return outs[0] if meta["single"] else tuple(outs)
    return _call(session, target, args, kwargs, [], what)[0]


def _call(session, target, args, kwargs, grad, what):
    sent, pairs = _send_args(args)
    if any(c.is_cuda for _, c in pairs):
        torch.cuda.synchronize()  # the transfer copies are complete before the submission's process reads them
    reply = session.request("call", target=target, args=sent, kwargs=kwargs, grad=grad)
    session.calls += 1
    if not reply.get("ok"):
        _write_back(pairs)
        raise_remote(reply.get("error") or {})
    session.judge(reply.get("observed"), what)
    session.ok_calls += 1
    if reply.get("bad_output"):
        raise Mismatch(f"{what} {reply['bad_output']}")
    outs = [_receive(o) for o in reply["outs"]]
    _write_back(pairs)
    for k, i, off, shape, stride, same_dtype in reply.get("aliases") or []:
        # the op returned (a view of) an input: hand back that view of the caller's own tensor,
        # so the checks see the aliasing as they would in one process
        if not same_dtype:
            raise Mismatch(f"{what} returned a view of its input argument {i} with another "
                           f"dtype: return a new tensor")
        outs[k] = args[i].detach().as_strided(shape, stride, off)
    result = outs[0] if reply.get("single") else tuple(outs)
    return result, reply


class _RemoteFunction(torch.autograd.Function):
    """Forward: a call in the submission's process, which keeps the graph; backward: another call."""

    @staticmethod
    def forward(ctx, session, target, args, kwargs, grad, what, meta, *tensors):
        result, reply = _call(session, target, args, kwargs, grad, what)
        meta["single"] = bool(reply.get("single"))
        outs = (result,) if meta["single"] else tuple(result)
        ctx.session, ctx.graph, ctx.what, ctx.n_in = session, reply.get("graph"), what, len(tensors)
        if ctx.graph is not None:  # the submission's process keeps the graph as long as this node lives
            weakref.finalize(ctx, session._release.append, ctx.graph)
        diff = reply.get("differentiable") or []
        nondiff = [o for o, d in zip(outs, diff) if isinstance(o, torch.Tensor) and not d]
        if nondiff:
            ctx.mark_non_differentiable(*nondiff)
        return outs

    @staticmethod
    def backward(ctx, *gouts):
        if ctx.graph is None:
            raise RuntimeError(f"{ctx.what}: its output does not require grad in the submission "
                               f"(no backward is registered)")
        reply = ctx.session.request("backward", graph=ctx.graph,
                                    grads=[seam.transfer_copy(g) if g is not None else None
                                           for g in gouts])
        if not reply.get("ok"):
            raise_remote(reply.get("error") or {})
        ctx.session.judge(reply.get("observed"), f"the backward of {ctx.what}")
        grads = [_receive(g) for g in reply["grads"]]
        return (None,) * 7 + tuple(grads)


class _Entry:
    """An entry point of the submission: a call crosses to its process (remote_call); `twice`
    calls it twice there on the same buffers."""

    def __init__(self, session, name):
        self.session, self.name = session, name

    def __call__(self, *args, **kwargs):
        return remote_call(self.session, ("entry", self.name), args, kwargs,
                           what=f"{self.name}()")

    def twice(self, args, refill):
        """(first outputs, second outputs): the op on `args`, then on the same tensors in the
        submission's process with `refill`'s values written into them."""
        sent, _ = _send_args(args)
        again, _ = _send_args(refill)
        if any(isinstance(t, torch.Tensor) and t.is_cuda for t in seam.tensors_in(sent)):
            torch.cuda.synchronize()
        reply = self.session.request("twice", target=("entry", self.name), args=sent,
                                     refill=again)
        if not reply.get("ok"):
            raise_remote(reply.get("error") or {})
        for k, seen in enumerate(reply["observed"]):
            self.session.judge(seen, f"{self.name}() ({'first' if k == 0 else 'second'} of two "
                                   f"calls on the same buffers)")
        self.session.ok_calls += 1
        outs = [tuple(_receive(o) for o in call) for call in reply["outs"]]
        return tuple(o[0] if reply.get("single") else o for o in outs)


class RemoteImpl:
    """What the checks call: the track's entry points, plus op / opcheck / compiled (see
    grader.submission.loader.Impl: the same interface, in the submission's process)."""

    def __init__(self, session: Session):
        self._session = session
        self._entries = set(session.track.entry_points)

    def __getattr__(self, name):
        if name.startswith("_") or name not in self._entries:
            raise AttributeError(name)
        return _Entry(self._session, name)

    def footprint(self) -> int | None:
        """Bytes of GPU memory the submission's process holds, as the driver counts them (NVML,
        read here: nothing that process runs can change the figure), after it gave its cached
        blocks back. None where NVML cannot say (no GPU, no pynvml, no per-process figures)."""
        reply = self._session.request("footprint")
        gpu = Watch(())  # NVML and its handle of this process's GPU (grader.judge.alone)
        if not gpu.able:
            return None
        try:
            for p in gpu.nvml.nvmlDeviceGetComputeRunningProcesses(gpu.handle):
                if p.pid == reply.get("pid") and p.usedGpuMemory is not None:
                    return int(p.usedGpuMemory)
        except Exception:
            return None
        return None

    def __repr__(self) -> str:
        s = self._session
        return f"Impl({s.tree.name}/{s.exercise.id}/{s.track.name})"

    def op(self, qualname: str):
        return lambda *a, **kw: remote_call(self._session, ("op", qualname), a, kw,
                                            what=qualname)

    def opcheck(self, qualname: str, args: tuple, kwargs: dict | None = None,
                test_utils: tuple | None = None) -> None:
        def conv(v):
            if not isinstance(v, torch.Tensor):
                return v
            c = seam.transfer_copy(v)
            return c.requires_grad_() if v.requires_grad and v.is_leaf else c
        sent = seam.tree_map(conv, list(args))
        if any(isinstance(t, torch.Tensor) and t.is_cuda for t in seam.tensors_in(sent)):
            torch.cuda.synchronize()
        reply = self._session.request("opcheck", qualname=qualname, args=sent,
                                      kwargs=dict(kwargs or {}), test_utils=test_utils)
        if not reply.get("ok"):
            raise_remote(reply.get("error") or {})

    def run(self, procedure: str, *args):
        """reference.<procedure>(impl, *args), run beside the submission (grader.submission.SubmissionServer.do_run);
        returns its data, tensors copied into this process."""
        sent, _ = _send_args(args)
        if any(isinstance(t, torch.Tensor) and t.is_cuda for t in seam.tensors_in(sent)):
            torch.cuda.synchronize()
        reply = self._session.request("run", name=procedure, args=sent)
        if not reply.get("ok"):
            raise_remote(reply.get("error") or {})
        return seam.tree_map(lambda v: _receive(v) if isinstance(v, torch.Tensor) else v,
                             reply["value"])

    def compiled(self, entry: str, *args, wrap: str | None = None):
        return remote_call(self._session, ("compiled", entry, wrap), args,
                           what=f"torch.compile of {entry}()")
