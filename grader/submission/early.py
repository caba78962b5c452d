"""Early: the early rebuild of a track's changed sources, while its process imports torch.

A one-line edit of a kernel recompiles one object (~3-4 s of nvcc), and before it the
submission's process imports torch (~4 s on the GPU host): cpp_extension.load needs torch, but
ninja does not. So the submission's process (grader.submission), first thing, starts a child that
runs ninja on the build.ninja a previous build left; build() waits for it (the build lock) and
takes over what it did. The build folder is the submission's to write, so its build.ninja is
not trusted code: the child closes the file system to itself first, as the submission's
process does (grader.submission.sandbox). A stale build.ninja (new flags or sources) only means
cpp_extension.load rebuilds the rest, as it would have.

    python -m grader.submission.early --out BUILD_DIR --report FILE [--allow PATH ...]
"""
from __future__ import annotations

import argparse
import fcntl
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from grader.common.paths import build_dir
from grader.common.settings import current
from grader.submission.ninja import ninja_tool
from grader.submission.sandbox import close_filesystem


def start_early_rebuild(tree: Path, exercise_id: str, track_name: str, allow: list[Path],
                        report: Path, env: dict | None = None, new_session: bool = False):
    """Start the early rebuild (above) if the track was built before; returns the child, or None.
    Its report is written to `report`, which the build reads (`read_report`). `env` (default:
    this process's) and `new_session`: for the watch loop, which starts it itself, before the
    submission's process exists (that process is then told `--early-report`)."""
    out = build_dir(tree, exercise_id, track_name)
    if not (out / "build.ninja").exists() or current().sanitize:
        return None
    cmd = [sys.executable, "-m", "grader.submission.early", "--out", str(out),
           "--report", str(report)] + [f"--allow={a}" for a in allow]
    return subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, env=env, start_new_session=new_session)


def read_report(path: Path | None) -> dict | None:
    """What the early rebuild did ({"before": {library: mtime}, "seconds"}); None if it did not
    run (or has not taken the build lock yet: then build() does it all)."""
    try:
        return json.loads(path.read_text()) if path else None
    except (OSError, ValueError):
        return None


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m grader.submission.early")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--report", type=Path, required=True)
    p.add_argument("--allow", type=Path, action="append", default=[])
    args = p.parse_args(argv)
    close_filesystem(args.allow)  # its build.ninja is the submission's to write: not trusted
    ninja = ninja_tool()
    if ninja is None:
        return 1
    out = args.out
    with open(out / ".grader-lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        before = {p.name: p.stat().st_mtime_ns for p in out.glob("*.so")}
        start = time.perf_counter()
        jobs = ["-j", os.environ["MAX_JOBS"]] if os.environ.get("MAX_JOBS") else []
        # a failure is left to cpp_extension.load, which runs it again and reports it
        subprocess.run([ninja] + jobs, cwd=out, stdin=subprocess.DEVNULL,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        args.report.write_text(json.dumps({"before": before,
                                           "seconds": time.perf_counter() - start}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
