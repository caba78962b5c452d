"""Submission: the submission's process. It builds and imports one track and serves what the judge
asks (a call of the op, its backward, opcheck, torch.compile, the timing loop) and nothing else.

    python -m grader.submission --fd N --tree T --exercise 02_scale --track cuda --scratch DIR

Started by the judge (grader.judge.spawn) with a socket as its only channel. Before the submission is
imported it: makes the file system read-only except its scratch folder and the track's build
caches (Linux Landlock, where the kernel has it); fences its signals, so that it cannot kill the
judge or the grader (Landlock's scope, or a seccomp filter: grader.submission.sandbox); records attempts to
write into the repository (an audit hook); poisons fresh allocations with NaN; and wraps every call in torch.profiler, so
the judge sees which PyTorch ops and kernels the submission's op used and on which stream (and
records the kernels launched below Python too, for the judge to hold that report against:
grader.submission.launches). What
this process reports is evidence the judge weighs, never a verdict: the judge compares values
itself, keeps its own clock and re-checks the repository by hash.
"""
from __future__ import annotations

import argparse
import gc
import os
import sys
from multiprocessing.connection import Connection
from pathlib import Path

# Nothing imported at the top imports torch: the early rebuild starts before torch does.
from grader.common.paths import build_dir, submission_caches
from grader.common.preamble import recv_preamble
from grader.common.pyfile import source_only_under
from grader.common.settings import current
from grader.submission.early import start_early_rebuild
from grader.submission.sandbox import Attempts, close_filesystem


def _writable_roots(args) -> list[Path]:
    tree = Path(args.tree)
    return [Path(args.scratch), build_dir(tree, args.exercise, args.track),
            submission_caches(tree), Path("/dev")]


def _set_env(args) -> None:
    """Caches a submission may write, inside the roots it may write."""
    cache = submission_caches(Path(args.tree))
    for var, sub in (("TRITON_CACHE_DIR", "triton"), ("TORCHINDUCTOR_CACHE_DIR", "inductor"),
                     ("CUDA_CACHE_PATH", "nv"), ("XDG_CACHE_HOME", "xdg")):
        os.environ[var] = str(cache / sub)
        (cache / sub).mkdir(parents=True, exist_ok=True)
    os.environ["TMPDIR"] = args.scratch
    os.environ["PYTHONDONTWRITEBYTECODE"] = "1"
    sys.dont_write_bytecode = True
    # the tree's modules are compiled from their source (grader.common.pyfile): a __pycache__ shipped
    # in the tree (a .pyc that does not match its source) is never run instead of the source
    source_only_under(Path(args.tree))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m grader.submission")
    p.add_argument("--fd", type=int, required=True)
    p.add_argument("--tree", required=True)
    p.add_argument("--exercise", required=True)
    p.add_argument("--track", required=True)
    p.add_argument("--scratch", required=True)
    p.add_argument("--protect", action="append", default=[])
    p.add_argument("--early-report", type=Path, help="the report of an early rebuild started "
                                                     "for this process (the watch loop)")
    args = p.parse_args(argv)
    # the judge's first message: the launch records' extension and socket (used below)
    preamble, records_fd = recv_preamble(args.fd)
    os.chdir(args.scratch)
    _set_env(args)
    roots = _writable_roots(args)
    for root in roots:  # before the sandbox closes: a folder that is not there cannot be allowed
        root.mkdir(parents=True, exist_ok=True)
    early = args.early_report
    if early is None and current().build == "jit":  # what changed recompiles while torch imports
        early = Path(args.scratch) / "early-build.json"
        start_early_rebuild(Path(args.tree), args.exercise, args.track, roots, early)
    import torch  # after the early rebuild's start (above)
    if not torch.cuda.is_available():
        os.environ.setdefault("TRITON_INTERPRET", "1")  # before anything imports triton
    from grader.submission.launches import open_launches  # (as above: it imports torch)
    from grader.submission.server import SubmissionServer  # imports Triton: after the above
    conn = Connection(args.fd)
    attempts = Attempts([Path(x) for x in args.protect], roots)
    sys.addaudithook(attempts.hook)  # permanent: no Python code can remove it
    state = close_filesystem(roots)
    server = SubmissionServer(args, conn, attempts, state, early)  # poisons fresh memory
    # the launch records, set up before any submission code runs (the server's profiler and
    # marker kernel in hand)
    server.launches = open_launches(preamble, records_fd, server)
    gc.freeze()  # the grader's imports, out of the collector's sight (as in grader.judge)
    server.serve()
    return 0


if __name__ == "__main__":
    code = main()
    # the judge asked this process to exit (or went away): nothing is left to say, and Python's
    # shutdown with torch loaded costs a second of CPU that the judge's own end competes with
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
