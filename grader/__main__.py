"""The grader's command line: discover -> build -> check -> benchmark -> report.

    python -m grader grade [--exercise 02] [--impl starter|solutions | --submission PATH]
                           [--json results.json] [--junit junit.xml] [--no-bench]
                           [--build jit|aot] [--repro CHECK@EXAMPLE]
    python -m grader batch SUBMISSIONS_DIR --out DIR [--exercise 01] [--no-bench] [--force]
                           [--slurm [--partition P] [--gpus-per-task 1] [--max-parallel N]]
    python -m grader batch --collect DIR
    python -m grader bench [--exercise 06] [--impl solutions] [--out results/bench]
    python -m grader list
"""
from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from pathlib import Path

from grader.discover import ROOT, SpecError, discover


def _tree(args) -> Path:
    if args.submission:
        tree = Path(args.submission).resolve()
        if not tree.is_dir():
            sys.exit(f"grader: --submission {args.submission}: no such folder")
        return tree
    return ROOT / args.impl


def _gpu_line() -> str:
    import torch
    try:
        import triton
        tv = triton.__version__
    except ImportError:
        tv = "not installed"
    if torch.cuda.is_available():
        where = torch.cuda.get_device_name()
    else:
        where = ("no GPU: Triton tracks run on the interpreter (small shapes); CUDA tracks are "
                 "built, and their GPU checks reported as 'needs a GPU'")
    return f"{where}; torch {torch.__version__}, triton {tv}"


def _jobs(args, n: int) -> int:
    """Tracks checked at once: half the cores (each check is a judge and a submission's process,
    mostly waiting on each other and on the GPU; 8 on a 16-core GPU host, one on 2 cores), and
    one where the submission's process cannot be sandboxed (then a repository change must be
    pinned on one track)."""
    from grader.trust import landlock_available
    if not landlock_available():
        return 1
    return max(1, min(n, args.jobs or (os.cpu_count() or 2) // 2))


def _exercises(which: str | None):
    """All exercises, one ('02'), or several ('01,02,06')."""
    if not which:
        return discover()
    return [ex for part in which.split(",") for ex in discover(only=part.strip())]


def cmd_grade(args) -> int:
    from concurrent.futures import ThreadPoolExecutor, as_completed
    from grader.gradescope import gradescope, junit, write_json
    from grader.report import feedback, scorecard
    from grader.score import score

    exercises = _exercises(args.exercise)
    tree = _tree(args)
    if args.repro:  # read by grader.plugin in the judge (the environment is passed on)
        if len(exercises) != 1 or "@" not in args.repro:
            sys.exit("grader: --repro CHECK@EXAMPLE goes with one --exercise (copy the command "
                     "a failed check printed)")
        os.environ["GRADER_REPRO"] = args.repro
        args.no_bench = True
    if args.build:  # read by grader.loader in the submission's process (the environment is passed on)
        os.environ["GRADER_BUILD"] = args.build
    start = time.perf_counter()
    from grader.progress import Progress
    progress = Progress()
    pairs = [(ex, t) for ex in exercises for t in ex.tracks.values()]
    results = {}
    # the checks of different tracks run side by side (the GPU is shared fine for checks), and
    # beside them, in a small pool of their own (queued behind the checks, they finished ~30 s
    # after them), the baselines' torch.compile, so the timing phase finds them compiled ...
    jobs = _jobs(args, len(pairs))
    # each checking process's share of the cores for torch's CPU ops (grader.isolate._spawn)
    os.environ["GRADER_CHECK_THREADS"] = str(max(1, (os.cpu_count() or 2) // jobs))
    with ThreadPoolExecutor(jobs) as pool, ThreadPoolExecutor(WARM_JOBS) as warming:
        todo = {pool.submit(_check, tree, ex, t, progress): (ex, t)
                for ex, t in _longest_first(pairs)}
        import torch  # (here, while the workers start: 2-3 s off the edit loop)
        bench = not args.no_bench and torch.cuda.is_available()
        run_cache = _run_cache() if bench else None
        device = torch.cuda.get_device_name() if bench else None
        warm = [warming.submit(_warm, tree, ex, device) for ex in exercises
                if bench and ex.benchmark]
        # the first timing's worker starts as soon as its track's checks have loaded the build
        # (not before: one build, reported by the checks), and gets ready beside the checks
        from grader.trust import landlock_available
        ahead = bench and landlock_available()
        prepared = {}
        early = threading.Thread(target=_prepare_first, daemon=True,
                                 args=(tree, pairs, todo, progress, prepared)) if ahead else None
        if early is not None:
            early.start()
        for done in as_completed(todo):
            ex, t = todo[done]
            r = results[(ex.id, t.name)] = done.result()
            _durations(record={f"{ex.id}/{t.name}": time.perf_counter() - start})
            progress.print(f"checked {ex.id} [{t.name}]: {r.count('correctness', 'passed')}/"
                           f"{r.total('correctness')} correctness checks passed "
                           f"({time.perf_counter() - start:.0f} s)")
        for w in warm:
            w.result()
        if early is not None:
            early.join()
    if warm:
        progress.print(f"baselines compiled ahead ({time.perf_counter() - start:.0f} s)")
    rows = []
    # ... and each timing runs alone on the GPU, while the next track's worker gets ready
    # (starts its submission's process and loads the track, then waits at its gate)
    from grader.isolate import timeable
    timed = [(ex, t) for ex, t in pairs if bench and timeable(ex, results[(ex.id, t.name)])]
    try:
        _time_all(tree, pairs, results, bench, timed, ahead, prepared, progress, start)
    finally:
        for w in prepared.values():  # a timing that raised: no worker left at its gate
            w.cancel()
    for ex, t in pairs:
        rows.append((ex, results[(ex.id, t.name)], score(ex, results[(ex.id, t.name)])))
    if run_cache is not None:
        run_cache.cleanup()
        os.environ.pop("GRADER_RUN_CACHE", None)
    rel = tree.relative_to(ROOT) if tree.is_relative_to(ROOT) else tree
    title = f"Scorecard for {rel}  ({_gpu_line()})"
    table = scorecard(rows, title=title)
    full = args.exercise is not None  # one exercise: every failure in full
    notes = [n for n in (feedback(ex, r, full=full) for ex, r, _ in rows) if n]
    print("\n" + table)
    if notes:
        print("\n" + "\n\n".join(notes))
    if args.repro:
        print(f"\nREPRO: only {args.repro.partition('@')[0]} ran, on its failing example; the "
              f"points above are not a score (run without REPRO for that)")
    if args.json:
        path = Path(args.json)
        write_json(path, gradescope(rows, seconds=time.perf_counter() - start, summary=table,
                                    visibility=args.visibility))
        print(f"\nresults.json (Gradescope format): {path}")
    if args.junit:
        path = Path(args.junit)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(junit(rows, seconds=time.perf_counter() - start))
        print(f"JUnit XML: {path}")
    return 0


WARM_JOBS = 3  # exercises whose baselines compile at once beside the checks (CPU-heavy)


def _durations(record: dict | None = None) -> dict:
    """How long each track's checks took here last time (seconds from the run's start to its
    result), kept in .cache/durations.json by the judge; `record` adds to it."""
    import json
    from grader.build import CACHE
    path = CACHE / "durations.json"
    try:
        known = json.loads(path.read_text())
    except (OSError, ValueError):
        known = {}
    if record:
        known.update({k: round(v, 1) for k, v in record.items()})
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(known, indent=1, sort_keys=True))
        tmp.replace(path)
    return known


def _longest_first(pairs):
    """The order the checks start in: the longest last time first (the whole phase is as long
    as its last track); never measured here: higher exercise numbers first (bigger builds and
    shapes: a CUTLASS build, autotuned GEMMs)."""
    known = _durations()
    return sorted(pairs, key=lambda p: (-known.get(f"{p[0].id}/{p[1].name}", 1e9),
                                        -int(p[0].number)))


def _run_cache():
    """A folder for this run's baseline timings (grader.measure._quick_baselines): the tracks of
    one exercise share one measurement. Only where the submission's process is sandboxed (it
    cannot write there); otherwise every track times its baselines itself."""
    import tempfile
    from grader.trust import landlock_available
    if os.environ.get("GRADER_QUICK") or not landlock_available():
        return None
    folder = tempfile.TemporaryDirectory(prefix="grader-run-")
    os.environ["GRADER_RUN_CACHE"] = folder.name  # passed on to the timing workers
    return folder


def _warm(tree, ex, device: str) -> None:
    """The exercise's compiled baselines, compiled ahead in a judge-only worker (no submission
    code): grader.measure.warm_baselines. A failure only means the timing phase compiles;
    compiled already on this GPU (grader.measure.warm_marker): nothing to do."""
    import tempfile
    from grader.isolate import _worker
    from grader.measure import warm_marker
    if not any(n == "compile" or n.startswith("compile:") for n in ex.benchmark.baselines):
        return
    if os.environ.get("GRADER_QUICK"):  # QUICK takes the baselines' times from its cache: no
        return                          # compile needed (on a miss the timing phase compiles)
    if warm_marker(ex, device).exists():
        return
    track = next(iter(ex.tracks.values()))
    with tempfile.TemporaryDirectory(prefix="grader-warm-") as tmp:
        _worker(tree, ex, track, "warm", Path(tmp) / "warm.jsonl", min(ex.timeout_s, 600))


def _prepare_first(tree, pairs, todo, progress, prepared) -> None:
    """Start the first timings' workers (grader.isolate.Prepared; the first 1 + AHEAD) once
    each track's checks have loaded its build: their process starts, torch imports, track loads
    and the baselines' callables (~10 s each on a GPU host) then overlap the checks instead of
    following them. A track that turns out not timeable has it cancelled (time_track)."""
    from grader.isolate import Prepared
    for ex, t in [p for p in pairs if p[0].benchmark is not None][:1 + AHEAD]:
        check = next(f for f, pair in todo.items() if pair == (ex, t))
        label = f"{ex.id} [{t.name}]"
        while not check.done() and not progress.loaded(label):
            time.sleep(0.1)
        if check.done() and check.exception() is not None:
            continue
        prepared[(ex.id, t.name)] = Prepared(tree, ex, t)


AHEAD = 2  # timing workers started ahead of their turn: getting one ready (its processes, torch,
#           CUDA, the baselines' callables) took ~15 s on the GPU host, longer than many timings
#           (2-20 s): with one ahead the GPU waited for it (2026-11-25, RESULTS.md)


def _time_all(tree, pairs, results, bench, timed, ahead, prepared, progress, start) -> None:
    """Each timing alone on the GPU, in exercise order; with `ahead`, the next AHEAD tracks'
    workers are started while this one times (each waits at its gate: grader.isolate.Prepared)."""
    import torch
    from grader.isolate import Prepared, time_track
    for ex, t in pairs:
        r = results[(ex.id, t.name)]
        if bench:
            began = time.perf_counter()
            k = timed.index((ex, t)) if (ex, t) in timed else -1
            if ahead and k >= 0 and (ex.id, t.name) not in prepared:
                prepared[(ex.id, t.name)] = Prepared(tree, ex, t)
            if ahead and k >= 0:
                for nex, nt in timed[k + 1:k + 1 + AHEAD]:
                    if (nex.id, nt.name) not in prepared:
                        prepared[(nex.id, nt.name)] = Prepared(tree, nex, nt)
            time_track(tree, ex, t, r, progress=progress,
                       prepared=prepared.pop((ex.id, t.name), None))
            if k >= 0:
                progress.print(f"timed {ex.id} [{t.name}] in {time.perf_counter() - began:.0f} "
                               f"s ({time.perf_counter() - start:.0f} s)")
        elif ex.benchmark is not None:
            r.performance = r.performance or {
                "status": "needs a GPU" if not torch.cuda.is_available() else "not measured"}


def _check(tree, ex, t, progress=None):
    from grader.isolate import check_track
    _build_ahead(tree, ex, t)
    return check_track(tree, ex, t, progress=progress)


def _build_ahead(tree, ex, t) -> None:
    """With GRADER_BUILD=aot, build the track's library here, before its checks: the
    submission's process then only loads the binary (it may not write the AOT folder). A
    failed build is recorded beside it, and that process reports it as the track's build
    failure."""
    from grader.loader import build_mode
    if not t.sources or build_mode() != "aot":
        return
    from grader.build import BuildError, aot_dir, build_aot
    try:
        m = build_aot(tree, ex, t)
    except BuildError:
        print(f"built ahead of time {ex.id} [{t.name}]: failed (see the scorecard)", flush=True)
        return
    where = aot_dir(tree, ex, t) / m["library"]
    where = where.relative_to(ROOT) if where.is_relative_to(ROOT) else where
    state = f"built in {m['seconds']:.0f} s" if m.get("fresh") else "up to date"
    print(f"built ahead of time {ex.id} [{t.name}]: {where} ({state}, torch {m['torch']}, "
          f"TORCH_CUDA_ARCH_LIST={m['arch_list']})", flush=True)


def cmd_batch(args) -> int:
    from grader.batch import batch_command
    return batch_command(args)


def cmd_bench(args) -> int:
    from grader.bench import bench_command
    return bench_command(_exercises(args.exercise), _tree(args), Path(args.out),
                         repeats=args.repeats)


def cmd_list(args) -> int:
    for ex in discover():
        print(f"{ex.number}  {ex.name:<18} {', '.join(ex.tracks):<16} "
              f"{', '.join(ex.dtypes):<36} {ex.title}")
    return 0


def _visibility(text: str) -> str:
    from grader.gradescope import visibility_arg
    try:
        return visibility_arg(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e))


VISIBILITY = dict(action="append", type=_visibility, default=[], metavar="KIND=WHEN",
                  help="Gradescope visibility, e.g. property=after_due_date (KIND: all, property, "
                       "checks, gradcheck, performance, stdout; WHEN: visible, hidden, "
                       "after_due_date, after_published); repeatable")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m grader")
    sub = p.add_subparsers(dest="command", required=True)
    for name, default_impl in (("grade", "starter"), ("bench", "solutions")):
        s = sub.add_parser(name)
        s.add_argument("--exercise", help="exercises by number (02) or folder name; several: "
                                          "01,02,06")
        s.add_argument("--impl", default=default_impl, choices=["starter", "solutions"],
                       help=f"which tree of this repository (default {default_impl})")
        s.add_argument("--submission", help="grade a tree elsewhere, shaped like starter/")
    grade = sub.choices["grade"]
    grade.add_argument("--json", help="write Gradescope's results.json here")
    grade.add_argument("--junit", help="write JUnit XML here (one testcase per check)")
    grade.add_argument("--no-bench", action="store_true", help="skip the performance step")
    grade.add_argument("--jobs", type=int, default=0,
                       help="tracks checked at once (default: a quarter of the cores)")
    grade.add_argument("--build", choices=["jit", "aot"], default=None,
                       help="jit: torch.utils.cpp_extension.load (default); aot: a setup.py "
                            "build into .cache/aot/, loaded as a shipped binary")
    grade.add_argument("--visibility", **VISIBILITY)
    grade.add_argument("--repro", metavar="CHECK@EXAMPLE",
                       help="run one failing check on its failing example again (the scorecard "
                            "prints the command); needs --exercise")
    batch = sub.add_parser("batch", help="grade every submission in a folder (a class)")
    batch.add_argument("submissions", nargs="?", help="a folder of submissions: trees shaped "
                                                      "like starter/, or .zip files of one")
    batch.add_argument("--out", help="per submission results.json and "
                                                   "junit.xml, and summary.csv")
    batch.add_argument("--exercise", help="one exercise, by number (01) or folder name")
    batch.add_argument("--no-bench", action="store_true", help="skip the performance step")
    batch.add_argument("--force", action="store_true",
                       help="grade again submissions that already have a results.json")
    batch.add_argument("--workers", type=int, default=0,
                       help="submissions graded at once (default: one per GPU; one without)")
    batch.add_argument("--build", choices=["jit", "aot"], default=None,
                       help="passed on to each submission's grade")
    batch.add_argument("--visibility", **VISIBILITY)
    batch.add_argument("--slurm", action="store_true",
                       help="submit one Slurm job array (sbatch) grading shards of the class")
    batch.add_argument("--partition", help="with --slurm: sbatch --partition")
    batch.add_argument("--gpus-per-task", type=int, default=1,
                       help="with --slurm: GPUs per array task (default 1; 0: CPU checks only)")
    batch.add_argument("--max-parallel", type=int, default=0,
                       help="with --slurm: array tasks running at once (sbatch --array=0-K%%N)")
    batch.add_argument("--tasks", type=int, default=0,
                       help="with --slurm: array tasks (shards; default one per submission, at "
                            "most 256)")
    batch.add_argument("--collect", metavar="OUT",
                       help="merge OUT's per-submission results into summary.csv and index.html "
                            "(also while Slurm tasks still run)")
    sub.choices["bench"].add_argument("--out", default=str(ROOT / "results" / "bench"))
    sub.choices["bench"].add_argument("--repeats", type=int, default=2,
                                      help="times the graded case is measured (the spread of "
                                           "the medians is shown; default 2)")
    sub.add_parser("list")
    args = p.parse_args(argv)
    try:
        return {"grade": cmd_grade, "bench": cmd_bench, "batch": cmd_batch,
                "list": cmd_list}[args.command](args)
    except SpecError as e:
        print(f"grader: bad exercise spec: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
