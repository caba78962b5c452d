"""Build: JIT-compile a track's C++/CUDA sources with torch.utils.cpp_extension + ninja.

One build folder per (submission tree, exercise, track) under the grader's cache (grader.common.paths),
outside the learner's tree, so starter and solution builds never share objects or names, and
nothing is written next to the learner's files. ninja keeps one object per source: an unchanged
tree relinks nothing, and a changed `.cu` recompiles only itself, started early (below) while
the submission's process imports torch. The toolchain set-up here is shared with the
ahead-of-time build (grader.submission.aot). A failed build raises BuildError (grader.submission.build_errors).
"""
from __future__ import annotations

import fcntl
import os
import re
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from grader.common.discover import Exercise, Track
from grader.common.paths import INCLUDE, build_dir
from grader.submission.build_errors import (
    BuildError,
    explain_load_error,
    summarize_compiler_output,
)
from grader.submission.early import read_report
from grader.submission.ninja import ninja_tool, write_ninja
from grader.submission.pch import precompiled_header
from grader.submission.toolchain import toolchain_env, track_options


@dataclass
class Built:
    path: Path        # the shared library (already loaded into this process)
    module: object    # the imported module for a pybind11 extension, else None
    seconds: float    # wall time of the build step (compile + link, or the no-op check)
    rebuilt: bool     # False when ninja found nothing to do


def build(tree: Path, exercise: Exercise, track: Track, early: Path | None = None) -> Built:
    """Compile, link and load the track's sources; raise BuildError with a short summary.
    `early`: the report of the early rebuild started for this process (grader.submission.early)."""
    includes = toolchain_env()
    extra_includes, extra_flags = track_options(track)
    # not at the top: the module reads CUDA_HOME when it loads (toolchain_env sets it, above)
    # and asks CUDA whether there is a GPU (a zygote, which preloads this module, must not)
    from torch.utils import cpp_extension
    if os.environ.get("CUDA_HOME") and cpp_extension.CUDA_HOME != os.environ["CUDA_HOME"]:
        cpp_extension.CUDA_HOME = os.environ["CUDA_HOME"]  # loaded earlier by someone else

    folder = tree / exercise.id / track.name
    missing = [s for s in track.sources if not (folder / s).is_file()]
    if missing:
        raise BuildError(f"missing source file(s): {', '.join(str(folder / m) for m in missing)}")
    out = build_dir(tree, exercise.id, track.name)
    out.mkdir(parents=True, exist_ok=True)
    if track.sources and any(s.endswith(".cu") for s in track.sources) and not os.environ.get("CUDA_HOME"):
        raise BuildError("no CUDA compiler found: install the CUDA toolkit or set CUDA_HOME")
    so = out / f"{track.extension}.so"
    # Our own lock (released by the OS if a worker dies) guards torch's file lock, which a
    # killed build would otherwise leave behind and make every later build wait forever.
    with open(out / ".grader-lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        start = time.perf_counter()
        before = so.stat().st_mtime_ns if so.exists() else None
        done = read_report(early)  # the rebuild started while this process imported torch
        if done is not None:
            before = done["before"].get(so.name)
            start -= done["seconds"]
        (out / "lock").unlink(missing_ok=True)
        ninja = dict(name=track.extension, sources=[str(folder / s) for s in track.sources],
                     extra_cuda_cflags=["-O3", "-lineinfo"] + extra_flags,
                     extra_include_paths=[str(INCLUDE)] + includes + extra_includes)
        # 03's pybind11 binding (python_module): its .cpp beside its .cu at once, not after it
        # (docs/performance.md, "Grading time on the CPU": 03's build before and after)
        pch = precompiled_header(includes, meanwhile=lambda: _compile_kernels(out, ninja),
                                 wait=not track.python_module) \
            if any(s.endswith(".cpp") for s in track.sources) else []
        try:
            module = cpp_extension.load(**ninja, build_directory=str(out),
                                        extra_cflags=["-O3"] + pch,
                                        is_python_module=track.python_module, verbose=False)
        except (RuntimeError, subprocess.CalledProcessError) as e:
            raise BuildError(summarize_compiler_output(str(e), tree)) from None
        except (ImportError, OSError) as e:
            raise BuildError(explain_load_error(str(e))) from None
    rebuilt = before is None or so.stat().st_mtime_ns != before
    return Built(path=so, module=module if track.python_module else None,
                 seconds=time.perf_counter() - start, rebuilt=rebuilt)


def _compile_kernels(out: Path, ninja: dict) -> None:
    """While the PCH is being made: the track's .cu objects, through the build.ninja that
    cpp_extension.load writes next (its own writer: the .cu commands do not depend on the
    PCH's flags, so load then finds them made and compiles only the .cpp). A failure is left
    to load, which runs it again and reports it."""
    text = write_ninja(out, **ninja)
    targets = re.findall(r"^build (\S+\.cuda\.o):", text or "", re.M)
    tool = ninja_tool()
    if targets and tool:
        subprocess.run([tool, *targets], cwd=out, stdin=subprocess.DEVNULL,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


