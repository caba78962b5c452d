"""The grader's command line, the top of the house: arguments in, grader.run.grade (or a tool of
grader.tools: batch, bench, watch) out. A command imports only what it runs.

    python -m grader grade [--exercise 02] [--impl starter|solutions | --submission PATH]
                           [--json results.json] [--junit junit.xml] [--no-bench] [--quick]
                           [--build jit|aot] [--repro CHECK@EXAMPLE] [--sanitize TOOL]
    python -m grader batch SUBMISSIONS_DIR --out DIR [--exercise 01] [--no-bench] [--force]
                           [--slurm [--partition P] [--gpus-per-task 1] [--cpus-per-task 4]
                                    [--max-parallel N] [--tasks K]]
    python -m grader batch --collect DIR
    python -m grader bench [--exercise 06] [--impl solutions] [--out DIR] [--repeats N]
    python -m grader watch --exercise 02 [--impl starter|solutions | --submission PATH] [--quick]
    python -m grader list
"""
from __future__ import annotations

import argparse
import base64
import sys
from pathlib import Path

from grader.common.discover import SpecError, discover
from grader.common.paths import ROOT
from grader.common.settings import from_environment
from grader.run.grade import Submission, grade, write_reports
from grader.run.gradescope import VISIBILITY
from grader.run.progress import Progress


def _tree(args) -> Path:
    if args.submission:
        tree = Path(args.submission).resolve()
        if not tree.is_dir():
            sys.exit(f"grader: --submission {args.submission}: no such folder")
        return tree
    return ROOT / args.impl


def _exercises(which: str | None):
    """All exercises, one ('02'), or several ('01,02,06')."""
    if not which:
        return discover()
    return [ex for part in which.split(",") for ex in discover(only=part.strip())]


def _repro_refusal(repro: str, exercise: str | None) -> str | None:
    """What is wrong with a REPRO (check@example, as a failed check prints it), or None."""
    name, at, blob = repro.partition("@")
    form = "REPRO is the check's name, '@' and its example, as a failed check prints it"
    if not at:
        return f"--repro {repro!r} has no '@EXAMPLE': {form} (REPRO='name@example')"
    if not name or not blob:
        return f"--repro {repro!r} has no {'check name' if not name else 'example'}: {form}"
    try:
        base64.b64decode(blob, validate=True)
    except ValueError:
        return (f"--repro: the example {blob!r} is not one a failure printed (hypothesis' "
                f"choices in base64): copy it whole, in single quotes")
    if not exercise:
        return "--repro reruns a check of one exercise: give it (--exercise NN)"
    if "," in exercise:
        return (f"--repro reruns a check of one exercise, and --exercise names several "
                f"({exercise}): give the one whose check failed")
    return None


def cmd_grade(args) -> int:
    if args.repro and (refusal := _repro_refusal(args.repro, args.exercise)):
        sys.exit(f"grader: {refusal}")
    exercises = _exercises(args.exercise)
    base = from_environment()  # what a caller passed on (a batch, a test), then the arguments
    settings = base.replace(quick=args.quick or base.quick, build=args.build, repro=args.repro,
                            sanitize=args.sanitize, small=bool(args.sanitize) or base.small,
                            check_timeout=900 if args.sanitize else base.check_timeout,
                            signals=args.signals or base.signals,
                            keep=base.keep if args.keep is None else args.keep)
    sub = Submission(_tree(args), tuple(exercises), settings=settings, jobs=args.jobs,
                     bench=not (args.no_bench or args.repro or args.sanitize))
    result = grade(sub, Progress(aot=args.build == "aot"))
    print(write_reports(result, full=args.exercise is not None, repro=args.repro,
                        json_path=args.json, junit_path=args.junit, visibility=args.visibility,
                        times=args.time_report))
    return 0


def cmd_batch(args) -> int:
    if args.slurm:
        # a command's own modules: imported only for it
        from grader.tools.slurm import submit_command
        return submit_command(args)
    from grader.tools.batch import batch_command  # (as above)
    return batch_command(args)


def cmd_bench(args) -> int:
    from grader.tools.bench import bench_command  # a command's own: only for it
    return bench_command(_exercises(args.exercise), _tree(args), Path(args.out),
                         repeats=args.repeats)


def cmd_watch(args) -> int:
    exercises = _exercises(args.exercise)
    if len(exercises) != 1:
        sys.exit("grader: watch follows one exercise: --exercise NN")
    from grader.tools.watch import watch_command  # a command's own: only for it
    return watch_command(_tree(args), exercises[0], quick=args.quick)


def cmd_list(args) -> int:
    for ex in discover():
        print(f"{ex.number}  {ex.name:<18} {', '.join(ex.tracks):<16} "
              f"{', '.join(ex.dtypes):<36} {ex.title}")
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m grader")
    sub = p.add_subparsers(dest="command", required=True)
    for name, default_impl in (("grade", "starter"), ("bench", "solutions")):
        s = sub.add_parser(name)
        s.add_argument("--exercise", help="by number (02) or folder name; several: 01,02,06")
        s.add_argument("--impl", default=default_impl, choices=["starter", "solutions"],
                       help=f"which tree of this repository (default {default_impl})")
        s.add_argument("--submission", help="grade a tree elsewhere, shaped like starter/")
    g = sub.choices["grade"]
    g.add_argument("--json", help="write Gradescope's results.json here")
    g.add_argument("--junit", help="write JUnit XML here (one testcase per check)")
    g.add_argument("--no-bench", action="store_true", help="skip the performance step")
    g.add_argument("--quick", action="store_true", help="the edit loop: the forward's checks, "
                   "one example per property check, none of the backward's other checks, no "
                   "opcheck nor torch.compile, the baselines' last times on this GPU; not for "
                   "grading")
    g.add_argument("--jobs", type=int, default=0, help="tracks checked at once (default: half "
                   "the cores; one without Landlock)")
    g.add_argument("--build", choices=["jit", "aot"], default="jit", help="jit: "
                   "torch.utils.cpp_extension.load; aot: a setup.py build, loaded as a binary")
    g.add_argument("--repro", metavar="CHECK@EXAMPLE", help="run one failing check on its "
                   "failing example again (a failure prints the command); needs --exercise")
    g.add_argument("--sanitize", choices=["memcheck", "racecheck", "initcheck", "synccheck"],
                   help="the CUDA checks at small shapes under compute-sanitizer; no timing")
    g.add_argument("--signals", choices=["auto", "seccomp"], help="the submission's signal "
                   "fence: auto (Landlock's signal scope where the kernel has it, else a seccomp "
                   "filter) or seccomp (the filter even there); the line under the scorecard "
                   "says which is on")
    g.add_argument("--keep", type=int, metavar="SECONDS", help="keep this grade's processes "
                   "(two that imported torch, triton and pytest) ready for the next command, "
                   "until SECONDS pass without one; where Landlock scopes abstract sockets "
                   "(ABI 6: the submission cannot reach them), on a machine without a GPU. make "
                   "grade and make exercise-NN keep them 900 s (WARM=0: not)")
    g.add_argument("--visibility", **VISIBILITY)
    g.add_argument("--time-report", action="store_true", help="where the grade's seconds went, "
                   "per track: builds, checks, references, Triton compiles, timing")
    b = sub.add_parser("batch", help="grade every submission in a folder (a class)")
    if (argv if argv is not None else sys.argv[1:])[:1] == ["batch"]:
        from grader.tools.batch import add_arguments  # a command's own: only for it
        add_arguments(b)
    sub.choices["bench"].add_argument("--out", default=str(ROOT / "docs"))
    sub.choices["bench"].add_argument("--repeats", type=int, default=2, help="times the graded "
                                      "case is measured (the medians' spread is shown)")
    w = sub.add_parser("watch", help="regrade one exercise on every save of its files")
    w.add_argument("--exercise", required=True, help="by number (02) or folder name")
    w.add_argument("--impl", default="starter", choices=["starter", "solutions"],
                   help="which tree of this repository (default starter)")
    w.add_argument("--submission", help="a tree elsewhere, shaped like starter/")
    w.add_argument("--quick", action="store_true", help="QUICK's examples, and the timing")
    sub.add_parser("list")
    args = p.parse_args(argv)
    try:
        return {"grade": cmd_grade, "bench": cmd_bench, "batch": cmd_batch,
                "watch": cmd_watch, "list": cmd_list}[args.command](args)
    except SpecError as e:
        print(f"grader: bad exercise spec: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
