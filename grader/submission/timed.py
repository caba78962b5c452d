"""Timed: the submission server's timing procedures (grader.judge.measure asks for them): the
op's GPU time and host cost, whether a step can be captured, and the validated batch (stage, go,
collect, each call alone: prove). A mixin of grader.submission.server.SubmissionServer, which
holds the loaded track (`_target`), the torch module and the error reply (`_error`).
"""
from __future__ import annotations

import time

from grader.common.poison import poison_fresh_memory
from grader.common.timing import capture, host_ms, make_step, time_step


class Timed:
    def _unpoisoned(self) -> None:
        """Timing measures the op, not the grader: fresh allocations stop being NaN-filled (a
        fill is a full extra write pass). A timing has a submission process of its own."""
        poison_fresh_memory(False)

    def _timed(self, entry, wrap):
        """What a timing calls: the entry point, or (`wrap`, make bench's model around the op)
        the exercise's reference.<wrap>(entry point) under torch.compile, as a user runs it."""
        if wrap is None:
            return getattr(self.impl, entry)
        return self._target(("compiled", entry, wrap))

    def do_time(self, entry, args, mode, grad_args, dy, wrap=None) -> dict:
        """The op's GPU time (grader.common.timing.time_step: graph replay, L2 flushed; events if it
        cannot be captured, with the reason) and its host cost, on the judge's inputs."""
        began = time.perf_counter()
        self._unpoisoned()
        run = make_step(self._timed(entry, wrap), args, mode, grad_args, dy)
        t = time_step(run)
        timed = time.perf_counter()
        error = t.pop("capture_error", None)
        if error is not None:
            t["capture_error"] = self._error(error)
        t["host_ms"] = host_ms(run)
        # where this request's seconds went: the judge's [timing] trace prints them (a figure
        # for the log, made in the submission's process: never evidence)
        t["seconds"] = {"captured and replayed": round(timed - began, 2),
                        "host time": round(time.perf_counter() - timed, 2)}
        return t

    def do_warm(self, entry, args, mode, grad_args, dy, wrap=None) -> dict:
        """One untimed call on the judge's inputs, before the timing's turn (grader.judge.measure
        .warm_up): its kernels loaded and launched once. Its outputs, copied, go back for the
        judge to warm its own validation with."""
        self._unpoisoned()
        outs = make_step(self._timed(entry, wrap), args, mode, grad_args, dy)()
        copied = [o.clone() if isinstance(o, self.torch.Tensor) else None for o in outs]
        del outs
        self.torch.cuda.synchronize()
        self.torch.cuda.empty_cache()  # the call's other blocks back to the checks beside it
        return {"outs": copied}

    def do_capture(self, entry, args, mode, grad_args, dy, wrap=None) -> dict:
        """Can one step be captured in a CUDA graph? (The check "capturable": training and
        serving stacks capture their steps.) The reason and the learner's line if not."""
        self._unpoisoned()
        try:
            graph, outs = capture(make_step(self._timed(entry, wrap), args, mode, grad_args, dy))
            graph.replay()
            self.torch.cuda.synchronize()
        except Exception as e:
            self.torch.cuda.synchronize()
            return {"capturable": False, "error": self._error(e)}
        finally:
            poison_fresh_memory()  # the checks go on: fresh memory is poisoned again
        return {"capturable": True}

    def do_stage(self, entry, warmup, sets, mode, grad_args, dys, wrap=None,
                 graphs=True) -> dict:
        """Receive a validated batch (opening shared memory is not the op's time), warm up on an
        input set of its own that is never timed, and (`graphs`) capture one graph per input set,
        each reading that set's memory: the judge then writes new values into every set before
        `go`, so a replay computes from inputs it has never seen. Without `graphs` (an op that
        cannot be captured) `go` calls the op eagerly on each set."""
        torch = self.torch
        self._unpoisoned()
        fn = self._timed(entry, wrap)
        w_args, w_dy = warmup
        make_step(fn, w_args, mode, grad_args, w_dy)()
        steps = [make_step(fn, args, mode, grad_args, dys[k] if dys else None)
                 for k, args in enumerate(sets)]
        # (graph, its static outputs, the step) per set; or the eager step. The step stays
        # referenced: it holds the set's tensors, memory the judge shared with this process,
        # which is unmapped here when the last reference goes (the graph reads it at replay)
        self.staged = [capture(run) + (run,) for run in steps] if graphs else steps
        self.staged_inputs = [(args, dys[k] if dys else None) for k, args in enumerate(sets)]
        self.graphs_staged, self.results = graphs, None
        torch.cuda.synchronize()
        return {}

    def do_go(self) -> dict:
        """Back-to-back replays (or calls), one per staged input set; answer when the stream is
        done. The judge times this request with its own clock."""
        if self.graphs_staged:
            for graph, _, _ in self.staged:
                graph.replay()
        else:
            self.results = [run() for run in self.staged]
        self.torch.cuda.current_stream().synchronize()
        return {}

    def do_collect(self) -> dict:
        """Each set's outputs: a graph's static outputs after its replay, or the calls'."""
        return {"outs": [o for _, o, _ in self.staged] if self.graphs_staged else self.results}

    def do_prove(self, index, args, dy) -> dict:
        """One staged call alone, untimed: the judge's new values (`args`, `dy`) written into
        set `index`'s memory, that set's replay (or call) and nothing else, then its outputs
        copied out before any other call runs. Outputs right after `go` show that the batch
        computed every set; these show that each call computed its own (not one launch serving
        several timed calls: "superbatching")."""
        torch = self.torch
        with torch.no_grad():
            for dst, src in zip(self.seam.tensors_in(self.staged_inputs[index]),
                                self.seam.tensors_in((args, dy))):
                dst.copy_(src)
        if self.graphs_staged:
            graph, outs, _ = self.staged[index]
            graph.replay()
        else:
            outs = self.staged[index]()
        copied = [o.clone() if isinstance(o, torch.Tensor) else None for o in outs]
        torch.cuda.current_stream().synchronize()
        return {"outs": copied}

    def do_unstage(self) -> dict:
        self.staged = self.staged_inputs = self.results = None
        return {}
