"""Measure: time a track at a benchmark case, with figures the judge can vouch for.

The submission's process times its own op with `timing.time_step`: one step (forward, or
forward+backward) captured in a CUDA graph, its replays timed by CUDA events with L2 flushed,
and the host cost of an eager call beside it. An op that cannot be captured is timed by events
around eager calls, and its figure says so. The judge does not take the figure on trust:

1. **Validated replays on the judge's clock.** The judge makes K input sets and sends them at
   once; the submission's process captures one graph per set (untimed). The judge then writes
   new random values (from a seed the submission cannot know in advance) into every set, times
   with its own wall clock the K back-to-back replays, minus the round trip of an empty
   request, and compares every output and gradient with the float64 reference of the values it
   wrote: a graph that does not compute from its inputs (a cached output, skipped or half the
   work, a special case for the benchmark size) fails here, and the performance earns nothing.
2. **The figure.** The replay time stands if the judge's wall clock agrees with it (within
   ESCAPE_RATIO plus a small slack); if it does not, the batch runs again on new values (three
   batches at most, the fastest counts: a hiccup of the machine is not the op's fault); if no
   batch agrees, the wall-clock time is used, with a warning.
3. **Physics.** A rate above 110% of the ceiling measured on this GPU is impossible: not
   credited, naming the ceiling.
4. **Who did the work.** One call at the benchmark case is observed like every check's call
   (delegation, side streams: grader.common.trust).

Baselines are trusted code, timed the same way in the judge's own process (grader.judge.baselines).
The figures go to the event log; the credit they earn is computed by grader.run.score, in the parent.
"""
from __future__ import annotations

import os
import random
import time

import torch

from grader.common import events as ev
from grader.common.ceilings import CEILINGS, rate
from grader.common.paths import CEILINGS as CEILING_CACHE
from grader.common.seam import transfer_copy, tree_map
from grader.common.trust import Delegation, SideStream
from grader.judge.alone import ALONE_UNCHECKED, Watch, alone, shared_problem
from grader.judge.answers import (
    Drawn,
    batch_size,
    draw,
    fresh_call,
    refill,
    scalars_of,
    validate,
)
from grader.judge.baselines import baseline_times, prepare_performance
from grader.judge.cases import dy_for, fresh_seed, make_inputs
from grader.judge.ceilings import measure_ceilings
from grader.judge.proxy import SubmissionDied, raise_remote, remote_call

# wall clock per call over the reported time that is believed: replays are launched in a few us
# and run back to back (their wall clock is their GPU time, a little less with a warm L2); eager
# calls (not capturable) carry their host time too
ESCAPE_RATIO = {"graph": 1.15, "events": 1.3}
ESCAPE_SLACK_MS = 0.05
IMPOSSIBLE = 1.10           # a rate above this fraction of the measured ceiling is not physical
BATCH_TRIES = 3             # validated batches at most, when the wall clock disagrees (below)
# a timing judge warms up before its gate only with this fraction of the GPU's memory free: its
# float64 validation at the benchmark case takes GiBs for a moment, and a check beside it that
# runs out waits for memory and runs again (grader.judge.oom)
WARM_FREE = 0.25
# a warming judge draws its timing's input sets ahead, with their float64 answers (Drawn), in
# at most this fraction of the GPU's memory, held at its gate: QUICK's batch of 13 at the
# leaderboard case takes 4.0 GB in both modes; up to 1 + AHEAD judges warm at once
# (grader.run.tracks), each leaving WARM_FREE of the memory free
DRAWN_FRACTION = 0.04


def escaped(event_ms: float, wall_ms: float, method: str = "graph") -> bool:
    """Is the wall time per call well above the reported time (work outside the timed region,
    or a reported time that is not the real one)?"""
    return wall_ms > ESCAPE_RATIO[method] * event_ms + ESCAPE_SLACK_MS


def _ok(reply: dict) -> dict:
    if not reply.get("ok"):
        raise_remote(reply.get("error") or {})
    return reply


def _share(v):
    """Tensors (in containers too) as copies the submission's process maps, not the judge's own."""
    return tree_map(lambda t: transfer_copy(t) if isinstance(t, torch.Tensor) else t, v)


def warm_up(session, exercise, ref, stop=lambda: False) -> Drawn | None:
    """A timing's first seconds, spent before its turn where the grade allows it (no track is
    timing: checks still run, and share the GPU as ever): this process's CUDA context, the
    submission's first call in each mode at the benchmark case (its kernels loaded, their
    launchers made) and this process's float64 validation of it (cuBLAS, the reference's
    kernels). On an H200 those took ~1 s of QUICK's 3 s timing of 13 at its turn (2026-11-30).
    Nothing is timed or kept: the timing warms up again on inputs of its own and validates
    every timed call afresh. Then the timing's input sets and their answers are drawn (Drawn),
    until `stop()`: the grade asks before its first timing. A failure here is the timing's to
    meet and report: it returns None, as it does where the memory is short."""
    b = exercise.benchmark
    free, total = torch.cuda.mem_get_info()
    if free < total * WARM_FREE:  # the checks beside it hold the memory: theirs come first
        return None
    drawn = Drawn()
    try:
        for mode in b.modes:
            args = make_inputs(exercise, ref, b.case, fresh_seed())
            dy = dy_for(ref, args, exercise) if mode == "forward_backward" else None
            r = session.request("warm", entry=b.call, args=_share(args), mode=mode,
                                grad_args=list(b.grad_args), wrap=b.wrap,
                                dy=_share(dy) if dy is not None else None,
                                timeout_s=max(600, session.timeout_s))
            if not r.get("ok"):
                return None
            validate(exercise, ref, args, mode, r["outs"], dy)
            k = batch_size(args)
            del args, dy, r
        torch.cuda.synchronize()
        # an op whose answer its output decides (`matching`: expect) is answered after it
        if not hasattr(ref, "matching"):
            free, _ = torch.cuda.mem_get_info()
            budget = min(DRAWN_FRACTION * total, free - WARM_FREE * total)
            for mode in b.modes:
                drawn.sets[mode], used = draw(exercise, ref, mode, k, budget - drawn.bytes,
                                               stop)
                drawn.bytes += used
            torch.cuda.synchronize()
        return drawn
    except SubmissionDied:
        raise
    except Exception:  # (out of memory beside the checks, an output of the wrong shape, ...)
        return None
    finally:
        torch.cuda.empty_cache()  # its blocks back to the checks still running beside it


def time_submission(session, exercise, ref, case, mode: str, *, batch: bool = True,
                    drawn: Drawn | None = None) -> dict:
    """Time the submission's op at `case` in `mode` (in its process), and vouch for it.
    `drawn`: the input sets drawn ahead (warm_up), at the benchmark case."""
    b = exercise.benchmark
    began = time.perf_counter()
    trace = lambda what: print(f"[timing]   {mode} {what}: {time.perf_counter() - began:.2f} s",
                               flush=True)
    args = make_inputs(exercise, ref, case, fresh_seed())
    dy = dy_for(ref, args, exercise) if mode == "forward_backward" else None
    torch.cuda.synchronize()
    r = session.request("time", entry=b.call, args=_share(args), mode=mode,
                        grad_args=list(b.grad_args), dy=_share(dy) if dy is not None else None,
                        wrap=b.wrap, timeout_s=max(600, session.timeout_s))
    t = {k: _ok(r)[k] for k in ("ms", "p20", "p80", "host_ms", "method")}
    if r.get("capture_error"):
        e = r["capture_error"]
        t["capture_error"] = (f"{e.get('where', '')}: " if e.get("where") else "") + \
            f"{e.get('type')}: {str(e.get('message', '')).splitlines()[0][:300]}"
    spent = ", ".join(f"{k} {v:.2f} s" for k, v in (r.get("seconds") or {}).items())
    trace(f"GPU time ({t['method']}) and host time" + (f" ({spent})" if spent else ""))
    del args, dy
    if not batch:
        return t
    # who did the work, at this size: one observed call (raises Delegation / SideStream)
    one = make_inputs(exercise, ref, case, fresh_seed())
    target = ("compiled", b.call, b.wrap) if b.wrap else ("entry", b.call)
    with torch.no_grad():
        remote_call(session, target, one, what=f"{b.call}() at the benchmark case")
    trace("the observed call")
    # the validated batch, on the judge's clock: K fresh input sets, plus one for the warm-up.
    # An honest op's wall clock agrees with its events; when it does not, the batch runs again
    # on new input sets (up to BATCH_TRIES in all) and the fastest counts: a hiccup of the
    # machine (another process starting, the clocks) is not an accusation, while work that
    # escapes the events escapes them every time. Every batch's outputs are validated.
    k = batch_size(one)
    ahead = drawn.take(mode) if drawn is not None and case == b.case else []
    warm_dy = dy_for(ref, one, exercise) if mode == "forward_backward" else None
    warmup = _share((one, warm_dy))
    del one, warm_dy
    walls, problem = [], None
    for attempt in range(BATCH_TRIES):
        wall_ms, problem = _validated_batch(session, exercise, ref, case, mode, k, warmup,
                                            graphs=t["method"] == "graph", trace=trace,
                                            ahead=ahead)
        ahead = []  # a batch run again draws its own sets
        walls.append(wall_ms)
        trace(f"batch {attempt + 1}: {k} input sets staged, run ({wall_ms * 1e3:.1f} us a call) "
              f"and validated")
        if problem or not escaped(t["ms"], min(walls), t["method"]):
            break
    del warmup
    t["wall_ms"] = min(walls)
    t["walls_ms"] = walls
    t["batch"] = k
    t["problem"] = problem
    return t


def _validated_batch(session, exercise, ref, case, mode, k, warmup, *, graphs: bool,
                     trace=lambda what: None, ahead=()):
    """Stage k input sets in the submission's process (a graph captured on each), write new
    values into every set, time the k back-to-back replays (or calls) with the judge's clock
    (minus an empty request's round trip), and hold every output to float64 of the values the
    judge wrote. `ahead`: the first sets, drawn ahead with their answers (Drawn); the others
    are drawn here. Returns (ms per call, the first problem or None)."""
    b = exercise.benchmark
    ahead = list(ahead)[:k]
    staged = [a[0] for a in ahead] + [make_inputs(exercise, ref, case, fresh_seed())
                                      for _ in range(k - len(ahead))]
    sent = _share(staged)
    sent_dys = _share([dy_for(ref, s, exercise) for s in staged]) \
        if mode == "forward_backward" else None
    del staged
    torch.cuda.synchronize()
    limit = max(600, session.timeout_s)
    _ok(session.request("stage", entry=b.call, warmup=warmup, sets=sent, mode=mode,
                        grad_args=list(b.grad_args), dys=sent_dys, wrap=b.wrap, graphs=graphs,
                        timeout_s=limit))
    trace(f"  {k} input sets made, shared and staged")
    # new values, in place, into the memory the graphs read: what the replays must compute from
    written = []  # each set's Call: the values written, and the answer where drawn ahead
    for i, args in enumerate(sent):
        c = ahead[i][1] if i < len(ahead) else \
            fresh_call(exercise, ref, mode, case, scalars_of(args), answer=False)
        refill(args, c.args)
        if sent_dys is not None:
            refill(sent_dys[i], c.dy)
        written.append(c)
    torch.cuda.synchronize()
    start = time.perf_counter()
    session.request("noop")
    noop = time.perf_counter() - start
    start = time.perf_counter()
    _ok(session.request("go", timeout_s=limit))
    wall = time.perf_counter() - start
    trace("  new values written, the batch run")
    reply = _ok(session.request("collect", timeout_s=limit))
    outs = [[o.clone() if isinstance(o, torch.Tensor) else None for o in call]
            for call in reply["outs"]]
    del sent, sent_dys, reply
    trace("  outputs collected")
    problem = None
    for i, c in enumerate(written):
        problem = validate(exercise, ref, c.args, mode, outs[i], c.dy, c.want)
        if problem:
            problem = f"call {i + 1} of {k}: {problem}"
            break
    # what a captured call holds fixed (its scalars), per set, for the calls run alone below
    fixed = [scalars_of(c.args) for c in written]
    del written, outs
    trace("  validated against float64")
    alone_calls = [a[2] for a in ahead]
    del ahead
    problem = problem or _each_call_its_own(session, exercise, ref, case, mode, fixed, limit,
                                            alone_calls)
    del alone_calls
    trace("  each call run alone on new values and validated")
    _ok(session.request("unstage"))
    torch.cuda.empty_cache()
    return max(wall - noop, 1e-6) * 1e3 / k, problem


def _each_call_its_own(session, exercise, ref, case, mode, fixed, limit,
                       ahead=()) -> str | None:
    """The staged calls again, untimed, one at a time in a random order: new values into a
    set, its call alone, its outputs read before any other call runs. A batch whose calls were
    served by one launch (the last call computing every set: "superbatching") passes `go`'s
    check, whose outputs are read after all of them; here the calls that did no work of their
    own hand back the previous values' answers."""
    k = len(fixed)
    for i in random.Random(fresh_seed()).sample(range(k), k):
        c = ahead[i] if i < len(ahead) else \
            fresh_call(exercise, ref, mode, case, fixed[i], answer=False)
        reply = _ok(session.request("prove", index=i, args=_share(c.args),
                                    dy=_share(c.dy) if c.dy is not None else None,
                                    timeout_s=limit))
        outs = [o.clone() if isinstance(o, torch.Tensor) else None for o in reply["outs"]]
        del reply
        problem = validate(exercise, ref, c.args, mode, outs, c.dy, c.want)
        if problem:
            return (f"call {i + 1} of {k}, run alone on new values, did not compute its own "
                    f"answer (one launch serving several timed calls?): {problem}")
    return None


def figures_for(exercise, model, t, ceilings) -> dict:
    """Rates, fraction of the ceiling, the figure used and why, for one mode of a track."""
    b = exercise.benchmark
    t = dict(t)
    warnings = []
    method = t.get("method", "graph")
    if t.get("capture_error"):
        warnings.append(f"not capturable in a CUDA graph ({t['capture_error']}): timed by "
                        f"events around eager calls, which hold the host's time too")
    # against the GPU time reported (before a wall-clock figure may replace it)
    host_bound = t.get("host_ms") is not None and t["host_ms"] > t["ms"]
    if "wall_ms" in t and escaped(t["ms"], t["wall_ms"], method):
        tries = len(t.get("walls_ms") or [t["wall_ms"]])
        fastest = f" (the fastest of {tries} validated batches)" if tries > 1 else ""
        if host_bound and method == "events":
            # host-bound: back-to-back calls go at the host's pace, not the GPU's; no accusation
            # (the message only: host_ms comes from the submission's process, so the figure
            # used is the judge's wall clock either way)
            warnings.append(f"back-to-back calls took {t['wall_ms'] * 1e3:.0f} us each on the "
                            f"judge's clock{fastest} against {t['ms'] * 1e3:.0f} us of GPU time "
                            f"a call: the host, not the GPU, sets this op's pace (host-bound, "
                            f"below); the wall-clock time is used")
        else:
            warnings.append(f"wall clock {t['wall_ms'] * 1e3:.0f} us per call vs "
                            f"{t['ms'] * 1e3:.0f} us reported{fastest}: the reported time does "
                            f"not hold all the work (the host waiting for the GPU inside each "
                            f"call: .item(), .cpu(), a synchronize; a side stream; or a reported "
                            f"time that is not the real one); the wall-clock time is used")
        t["ms"] = t["wall_ms"]
    t["rate"] = rate(model, t["ms"], b.ceiling)
    t["fraction"] = t["rate"] / ceilings[b.ceiling]
    t["impossible"] = t["fraction"] > IMPOSSIBLE
    if t["impossible"]:
        c = CEILINGS[b.ceiling]
        warnings.append(f"{t['rate']:.4g} {c.unit} is {100 * t['fraction']:.0f}% of the "
                        f"{c.label} measured on this GPU ({ceilings[b.ceiling]:.4g} {c.unit}): "
                        f"impossible, so not credited")
    if host_bound:
        t["host_bound"] = True
    t["warnings"] = warnings
    return t


def grade_performance(exercise, track, session, record, prepared: tuple | None = None,
                      drawn: Drawn | None = None) -> None:
    """Time one track at the graded case against the baselines; record the performance event.
    `prepared`: prepare_performance(exercise), done ahead; `drawn`: warm_up's input sets."""
    b = exercise.benchmark
    if b is None:
        return
    if not torch.cuda.is_available():
        record(ev.Performance(status="needs a GPU"))
        return
    began = time.perf_counter()
    spent: dict[str, float] = {}  # where the seconds go: the Performance event's `seconds`

    def stage(what: str, part: str) -> None:
        now = time.perf_counter() - began
        spent[part] = round(spent.get(part, 0.0) + now - sum(spent.values()), 2)
        print(f"[timing] {what}: {now:.1f} s", flush=True)  # (Settings.keep_logs keeps it)
    ceilings = measure_ceilings(CEILING_CACHE)
    stage("ceilings", "ceilings")
    ref, fns = prepared or prepare_performance(exercise)
    stage("reference and baselines ready", "baselines")
    figures, problem = {}, None
    # who may run kernels while the track is timed: this judge and the submission's process
    watch = Watch({os.getpid(), session.proc.pid})
    for mode in b.modes:
        model = getattr(ref, b.model)(b.case, getattr(torch, b.dtype), mode)
        try:
            t, shared = alone(lambda: time_submission(session, exercise, ref, b.case, mode,
                                                      drawn=drawn),
                              watch, trace=lambda what: print(f"[timing] {what}", flush=True))
            if shared:
                t["shared"] = {str(pid): util for pid, util in shared.items()}
                t["problem"] = t.get("problem") or shared_problem(f"the {mode} timing", shared)
            stage(f"{mode}: the submission timed and validated", "submission")
        except (Delegation, SideStream) as e:
            problem = str(e)
            break
        except SubmissionDied as e:
            problem = f"the submission's process ended while timing: {e.reason}"
            break
        except Exception as e:
            problem = f"the op failed while timing: {type(e).__name__}: {str(e)[:300]}"
            break
        problem = problem or t.pop("problem", None)
        f = figures_for(exercise, model, t, ceilings)
        f["model"] = model
        f["baselines"] = baseline_times(exercise, ref, mode, fns)
        stage(f"{mode}: baselines", "baselines")
        # a baseline slowed by another process's kernels would make every speedup large
        problem = problem or next((bt["error"] for bt in f["baselines"].values()
                                   if bt.get("shared")), None)
        f["speedup"] = {n: bt["ms"] / f["ms"] for n, bt in f["baselines"].items() if "ms" in bt}
        figures[mode] = f
        if problem:
            break
    c = CEILINGS[b.ceiling]
    # figures only: the credit they earn is grader.run.score's, in the parent
    record(ev.Performance(
        status="measured" if figures else "rejected", case=b.case, dtype=b.dtype,
        ceiling_name=c.label, ceiling_unit=c.unit, ceiling_value=ceilings[b.ceiling],
        figures=figures, problem=problem, seconds=spent,
        warnings=[w for f in figures.values() for w in f.get("warnings", [])] +
        ([] if watch.able else [ALONE_UNCHECKED]) +
        ([f"no performance credit: {problem}"] if problem else [])))
