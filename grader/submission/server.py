"""Server: what the submission's process serves the judge, one request at a time, over its
socket: load the track, call the op (observed by the profiler), its backward, opcheck,
torch.compile, and (grader.submission.timed) the timing loop and the validated batch.

Made by grader.submission (the process's main) after its sandbox is up and before any of the
submission's code runs: the functions the evidence rests on are bound here first, and checked
after every request (`_watched`, `_redirected`).
"""
from __future__ import annotations

import os
import time
import traceback
from collections import OrderedDict
from pathlib import Path

import torch
import triton

try:  # every thread's ATen ops (below): a torch without the option profiles the calling thread
    from torch._C._profiler import _ExperimentalConfig
except ImportError:
    _ExperimentalConfig = None

from grader.common import seam
from grader.common.discover import load_exercise
from grader.common.paths import EXERCISES
from grader.common.poison import poison_fresh_memory
from grader.common.processes import step_aside
from grader.common.pyfile import LoadError
from grader.common.trust import allowed_ops
from grader.submission.build_errors import BuildError
from grader.submission.compiles import Compiles
from grader.submission.evidence import analyse, redirected, watched
from grader.submission.launches import OFF
from grader.submission.loader import load_track
from grader.submission.timed import Timed


# --- what the judge may ask ----------------------------------------------------------------------

class SubmissionServer(Timed):
    """Serves the judge's requests, one at a time, over the socket."""

    def __init__(self, args, conn, attempts, sandbox_state, early: Path | None = None):
        self.seam = seam
        self.torch = torch
        self.early = early  # the early rebuild's report (grader.submission.early)
        poison_fresh_memory()  # an element a kernel forgets to write reads NaN
        self.conn = conn
        self.args = args
        self.attempts = attempts
        self.sandbox = sandbox_state
        self.exercise = load_exercise(EXERCISES / args.exercise)
        self.track = self.exercise.tracks[args.track]
        self.allowed = allowed_ops(self.exercise, self.track)
        self.gpu = torch.cuda.is_available()
        self.graphs: OrderedDict = OrderedDict()  # graph id -> (leaves, outputs, observed)
        self.next_graph = 0
        self.impl = None
        self.triton_launches = 0
        self.observing = False  # inside _observed's profiler session
        # Bound before any submission code runs. The autograd profiler is the layer under
        # torch.profiler.profile (the same Kineto/CUPTI session and events): the wrapper's start
        # asks hasattr(torch, "_inductor"), which imports Inductor and dynamo (~1.5 s here,
        # ~5 s on the GPU machines) in a process that never compiles anything.
        self._profile = torch.autograd.profiler.profile
        self._record = torch.autograd.profiler.record_function
        # every thread's ATen ops, not only the calling thread's (a second Python thread doing
        # the op's work with PyTorch must show)
        try:
            self._all_threads = _ExperimentalConfig(profile_all_threads=True)
        except TypeError:  # (an older torch: the calling thread)
            self._all_threads = None
        self._watched = watched(SubmissionServer)  # what the evidence rests on, as it was
        #                                     before the submission's code ran (checked after
        #                                     every request)
        self._marker = torch.zeros(1, device="cuda") if self.gpu else None
        self._wrap_triton()
        self.compiles = Compiles()  # where a grade's seconds go: figures, never evidence
        self.launches = OFF  # the launch records (grader.submission.launches), set by the main
        self.compiles.install(interpreted=os.environ.get("TRITON_INTERPRET") == "1")

    def _wrap_triton(self) -> None:
        """Count Triton launches; on the interpreter, mark its own PyTorch calls as not the
        submission's (it copies arguments with ATen ops inside a launch), and make its bf16
        arithmetic compute on values as the GPU does (grader.submission.interp)."""
        if os.environ.get("TRITON_INTERPRET") == "1":
            # the interpreter's modules (and our shims of them): only where it runs
            from triton.runtime.interpreter import GridExecutor as cls

            from grader.submission.interp import install  # (as above)
            install()
            name = "__call__"
        else:
            cls, name = triton.runtime.jit.JITFunction, "run"
        original = getattr(cls, name)
        server = self

        def launch(*a, **kw):
            server.triton_launches += 1
            if not server.observing:
                # a timed call: record_function is a dispatcher call of its own (~40 us of CPU
                # per launch on the H200 machine), which would count against the submission's
                # host time
                return original(*a, **kw)
            with server._record("grader::triton_launch"):
                return original(*a, **kw)
        setattr(cls, name, launch)

    # the loop -----------------------------------------------------------------------------------

    def serve(self) -> None:
        recv_trusted, send = self.seam.recv_trusted, self.seam.send
        while True:
            try:
                msg = recv_trusted(self.conn)
            except (EOFError, OSError):
                return
            kind = msg.pop("op")
            if kind == "exit":
                send(self.conn, {"ok": True})
                return
            for gid in msg.pop("release", ()):
                self.graphs.pop(gid, None)
            try:
                reply = getattr(self, "do_" + kind)(**msg)
                reply["ok"] = True
            except BaseException as e:  # the op failed: the judge re-raises it in the check
                if isinstance(e, (KeyboardInterrupt, SystemExit)):
                    raise
                reply = {"ok": False, "error": self._error(e)}
            reply["attempts"] = list(self.attempts.seen) + redirected(self._watched, self)
            try:
                send(self.conn, reply)
            except Exception as e:  # e.g. an output that cannot be shared: say so, stay up
                send(self.conn, {"ok": False, "attempts": reply["attempts"], "error": {
                    "type": type(e).__name__, "base": "RuntimeError",
                    "message": f"the result could not be sent back to the checks: {e}"}})

    def _error(self, e: BaseException) -> dict:
        tree = Path(self.args.tree).resolve()
        frames = [f for f in traceback.extract_tb(e.__traceback__)
                  if Path(f.filename).resolve().is_relative_to(tree)]
        info = {"type": type(e).__name__, "message": str(e)[:6000],
                "notes": [str(n) for n in getattr(e, "__notes__", [])][:6]}
        # what raised underneath (a Triton CompilationError says where, its cause says what);
        # not a context suppressed by `raise ... from None`, nor a cause that repeats the
        # message (the interpreter's InterpreterError is repr() of its cause)
        under = lambda c: c.__cause__ or (None if c.__suppress_context__ else c.__context__)
        cause, seen = under(e), 0
        while cause is not None and seen < 3:
            first = (str(cause).strip().splitlines() or [""])[-1][:400]
            if first not in info["message"]:
                info["notes"].append(f"caused by {type(cause).__name__}: {first}")
            # where: the innermost line of the learner's files (on the interpreter a kernel's
            # error is raised inside the kernel's own line, and re-raised at its launch)
            frames = [f for f in traceback.extract_tb(cause.__traceback__)
                      if Path(f.filename).resolve().is_relative_to(tree)] or frames
            cause, seen = under(cause), seen + 1
        if "Expected dtype ['fp32', 'fp64'] but got" in info["message"]:
            info["notes"].append("Triton's math functions (tl.exp, tl.log, tl.sqrt, ...) take "
                                 "float32 or float64: convert their argument with "
                                 ".to(tl.float32) first")
        if frames:
            info["where"] = f"{Path(frames[-1].filename).name}:{frames[-1].lineno}"
        for base in (NotImplementedError, ValueError, TypeError, IndexError, AssertionError,
                     RuntimeError):
            if isinstance(e, base):
                info["base"] = base.__name__
                break
        return info

    def do_load(self) -> dict:
        try:
            return self._load()
        finally:
            step_aside()  # the build (if any) is done: the checks beside other builds

    def _load(self) -> dict:
        start = time.perf_counter()
        try:
            self.impl = load_track(Path(self.args.tree), self.exercise, self.track, self.early)
        except BuildError as e:
            return {"built": False, "stage": "build", "message": str(e), "sandbox": self.sandbox,
                    "seconds": round(time.perf_counter() - start, 2)}
        except LoadError as e:
            return {"built": False, "stage": "import", "message": str(e), "sandbox": self.sandbox,
                    "seconds": round(time.perf_counter() - start, 2)}
        b = self.impl._built
        return {"built": True, "stage": "build" if b else "import",
                "seconds": round(b.seconds if b else time.perf_counter() - start, 2),
                "rebuilt": b.rebuilt if b else None, "sandbox": self.sandbox,
                "gpu": self.torch.cuda.get_device_name() if self.gpu else None,
                "torch": str(self.torch.__version__)}

    def _target(self, target):
        kind = target[0]
        if kind == "entry":
            return getattr(self.impl, target[1])
        if kind == "op":
            return self.impl.op(target[1])
        if kind == "compiled":
            _, entry, wrap = target
            return lambda *a: self.impl.compiled(entry, *a, wrap=wrap)
        raise ValueError(f"unknown target {target!r}")

    def do_call(self, target, args, kwargs, grad, observe=True) -> dict:
        torch = self.torch
        fn = self._target(target)
        args = list(args)
        for i in grad:
            args[i] = args[i].detach().requires_grad_(True)
        ins = [(i, a) for i, a in enumerate(args) if isinstance(a, torch.Tensor)]
        # work to judge: every input has elements (an op on an empty batch rightly launches
        # nothing), decided again below once the outputs are known
        work = bool(ins) and all(a.numel() for _, a in ins)
        on_gpu = any(a.is_cuda for _, a in ins)
        observed, out = self._observed(lambda: fn(*args, **kwargs),
                                       observe and target[0] != "compiled", work, on_gpu)
        outs = out if isinstance(out, (tuple, list)) else (out,)
        if observed is not None and not any(isinstance(o, torch.Tensor) and o.numel()
                                            for o in outs):
            observed["work"] = False  # nothing to compute: no kernel is owed
        reply = {"single": not isinstance(out, (tuple, list)), "observed": observed}
        if not all(isinstance(o, torch.Tensor) or o is None for o in outs):
            reply["outs"] = tuple(None for _ in outs)
            reply["bad_output"] = f"returned {type(out).__name__}, not tensors"
            return reply
        reply["aliases"] = [(k, i, o.storage_offset(), tuple(o.shape), tuple(o.stride()),
                             o.dtype == a.dtype)
                            for k, o in enumerate(outs) if isinstance(o, torch.Tensor)
                            for i, a in ins if self.seam.shares_memory(o, a)]
        aliased = {k for k, *_ in reply["aliases"]}
        # an output that is (a view of) an input does not travel: the judge rebuilds it from its
        # own tensor (and a tensor received from the judge cannot be sent back anyway)
        reply["outs"] = tuple(o.detach() if isinstance(o, torch.Tensor) and k not in aliased
                              else None for k, o in enumerate(outs))
        reply["differentiable"] = [bool(isinstance(o, torch.Tensor) and o.requires_grad)
                                   for o in outs]
        if grad and any(reply["differentiable"]):
            gid = self.next_graph
            self.next_graph += 1
            # kept until the judge's node for it is freed (it says so with its next request);
            # a backward through a compiled model is not judged for delegation: the model
            # around the op (Linear layers) is PyTorch's by design
            self.graphs[gid] = ([args[i] for i in grad], outs, target[0] != "compiled")
            while len(self.graphs) > 4096:  # a judge that never frees: bounded all the same
                self.graphs.popitem(last=False)
            reply["graph"] = gid
        return reply

    def do_twice(self, target, args, refill) -> dict:
        """Two calls on the same buffers: the op on `args`, then `refill`'s values written into
        those same tensors, and the op again (a result cached by pointer, or state kept between
        calls, shows in the second). Both calls' outputs (the first copied before the second
        call) and both calls' evidence."""
        torch = self.torch
        fn = self._target(target)
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        work = bool(tensors) and all(a.numel() for a in tensors)
        on_gpu = any(a.is_cuda for a in tensors)
        observed, outs = [], []
        for k in range(2):
            if k:
                with torch.no_grad():
                    for a, r in zip(tensors, [r for r in refill if isinstance(r, torch.Tensor)]):
                        a.copy_(r)
            ev, out = self._observed(lambda: fn(*args), True, work, on_gpu)
            got = out if isinstance(out, (tuple, list)) else (out,)
            outs.append(tuple(o.detach().clone() if isinstance(o, torch.Tensor) else None
                              for o in got))
            observed.append(ev)
        return {"outs": outs, "observed": observed,
                "single": not isinstance(out, (tuple, list))}

    def do_footprint(self) -> dict:
        """Give cached blocks back to the driver (what the judge then reads through NVML is what
        this process holds alive), and say which process to read."""
        if self.gpu:
            self.torch.cuda.synchronize()
            self.torch.cuda.empty_cache()
        return {"pid": os.getpid()}

    def do_backward(self, graph, grads) -> dict:
        torch = self.torch
        if graph not in self.graphs:
            raise RuntimeError("this graph was released (more than 4096 graphs kept alive)")
        leaves, outs, observe = self.graphs[graph]
        pairs = [(o, g) for o, g in zip(outs, grads)
                 if isinstance(o, torch.Tensor) and o.requires_grad and g is not None]
        # as for a call: no kernel is owed when an input or the incoming gradient is empty (the
        # gradient of a sum over no rows is a fill of zeros)
        work = all(l.numel() for l in leaves) and all(g.numel() for _, g in pairs)
        on_gpu = any(l.is_cuda for l in leaves)
        observed, res = self._observed(
            lambda: torch.autograd.grad([o for o, _ in pairs], leaves, [g for _, g in pairs],
                                        retain_graph=True, allow_unused=True),
            observe, work, on_gpu)
        return {"grads": tuple(g.detach() if g is not None else None for g in res),
                "observed": observed}

    def do_noop(self) -> dict:
        return {}

    def do_prepare(self) -> dict:
        """What a timing's first forward+backward would otherwise import at its turn on the
        GPU: torch.autograd.grad's first call imports torch.fx's symbolic shapes, and with them
        sympy (3.1 s of a 3.2 s first step on the GPU host, whose site-packages hold no
        bytecode: cProfile, 2026-11-29). Asked by a timing judge waiting at its gate
        (grader.judge.phases); CPU only, no submission code runs."""
        import torch.fx.experimental.symbolic_shapes  # noqa: F401
        return {}

    def do_stats(self) -> dict:
        """The Triton specializations compiled so far (grader.submission.compiles)."""
        return self.compiles.stats()

    def do_run(self, name, args) -> dict:
        """A trusted procedure of the exercise's reference.py, given the track's entry points:
        for what cannot cross the seam (an nn.Module to build, move and train). It returns data
        and tensors; the checks judge them."""
        value = getattr(self.impl._reference, name)(self.impl, *args)
        if self.gpu:
            self.torch.cuda.synchronize()
        detach = lambda v: v.detach() if isinstance(v, self.torch.Tensor) else v
        return {"value": self.seam.tree_map(detach, value)}

    def do_opcheck(self, qualname, args, kwargs, test_utils=None) -> dict:
        self.impl.opcheck(qualname, args, kwargs, test_utils)
        return {}

    def _observed(self, fn, observe: bool, work: bool, on_gpu: bool):
        """Run fn; with `observe`, under the profiler, and return the evidence."""
        torch = self.torch
        if not observe:
            out = fn()
            if self.gpu:
                torch.cuda.current_stream().synchronize()
            return None, out
        launches = self.triton_launches
        self.observing = True
        try:
            with self._profile(use_cpu=True, use_device="cuda" if self.gpu else None,
                               use_kineto=True, experimental_config=self._all_threads) as prof, \
                    self.launches.window():  # this call's launch records, judged by the judge
                if self.gpu:
                    with self._record("grader::marker"):
                        self._marker.zero_()  # a kernel on the caller's current stream
                out = fn()
                if self.gpu:
                    torch.cuda.synchronize()  # every kernel, side streams too, into the trace
        finally:
            self.observing = False
        observed = analyse(prof.function_events, self.allowed)
        # gpu: the call's tensors are on the GPU, so its work must show as kernels there (a CUDA
        # track's C++ CPU path on a GPU machine launches none, rightly)
        observed.update(triton=self.triton_launches - launches, gpu=on_gpu, work=work)
        return observed, out
