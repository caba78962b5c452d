"""PCH: the headers every binding includes, precompiled once per compiler, torch and flags.

A CUDA track's .cpp (its op: checks, dtype dispatch, registration) includes ATen and
torch/library.h, and parsing them is most of its compile: 9-16 s of g++ per track on the 2-core
machine, ~3 s with them precompiled. GCC reads a precompiled header (PCH) in place of a header
when it was made with the same flags, so the grader makes one of the headers every binding
includes (PCH_HEADERS), once per compiler, torch and flags, in its cache; each build
force-includes it (-include), and the file's own #includes of the same headers are then no-ops
(include guards). A compiler that is not GCC, a PCH GCC refuses (other flags) or none at all:
the headers are parsed as before, with the same result. The course's own header (aten_cuda.h)
is left out: a file that defines its helpers itself must not meet them twice.

The submission's process never writes it (its sandbox: it could put code into every other
track's build): a child of the grade process makes it, beside the checks, holding a lock; a
build that finds the lock held waits for the PCH.

    python -m grader.submission.pch     (started by the grade process: grader.run.grade)

The child says on its first line whether it makes the PCH ("held": it holds the lock, which a
build waits on), or not ("known": this toolchain's PCH, or its failure, is there; "busy": another
grade is making it). Its imports until then are the standard library's: the grade process waits
for that line before it starts any judge.
"""
from __future__ import annotations

import fcntl
import hashlib
import importlib.util
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from grader.common.paths import INCLUDE, PCH_DIR, PCH_LOCK
from grader.submission.ninja import write_ninja

PCH_HEADERS = ("ATen/Dispatch.h", "ATen/OpMathType.h", "ATen/core/Tensor.h", "ATen/ops/empty.h",
               "ATen/ops/empty_like.h", "c10/cuda/CUDAGuard.h", "c10/cuda/CUDAStream.h",
               "torch/library.h", "cuda_bf16.h", "cuda_fp16.h", "cuda_runtime_api.h")
PCH_WAIT_S = 120  # a build waits this long at most for the PCH being made (~20-40 s on 2 cores)


def _pch_plan(includes: list[str]) -> tuple[list[str], Path] | None:
    """(the compiler's command line without the source, the PCH header's path) for the flags a
    JIT build of a binding uses, or None (not GCC; a torch whose ninja writer differs)."""
    from torch.utils import cpp_extension  # not before the first line (above)
    cxx = cpp_extension.get_cxx_compiler() if hasattr(cpp_extension, "get_cxx_compiler") \
        else os.environ.get("CXX", "c++")
    try:
        version = subprocess.run([cxx, "--version"], capture_output=True, text=True,
                                 timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    if "clang" in version.lower() or not any(w in version for w in ("GCC", "g++", "Free Software")):
        return None  # clang reads its own PCH format, not GCC's
    # the flags cpp_extension would write for a binding: its own ninja writer, dry-run
    with tempfile.TemporaryDirectory() as tmp:
        text = write_ninja(Path(tmp), name="pch", sources=["pch.cpp"], extra_cuda_cflags=[],
                            extra_include_paths=[str(INCLUDE)] + includes)
    line = next((ln for ln in (text or "").splitlines() if ln.startswith("cflags = ")), None)
    if line is None:
        return None
    # a macro defined otherwise than when the PCH was made makes GCC refuse it: the extension's
    # name differs per track (and no header in PCH_HEADERS uses it)
    flags = [f for f in shlex.split(line[len("cflags = "):])
             if not f.startswith("-DTORCH_EXTENSION_NAME=")]
    key = hashlib.sha256(json.dumps([cxx, version, flags, PCH_HEADERS]).encode()).hexdigest()
    return [cxx, *flags], PCH_DIR / key[:16] / "course_pch.h"


def precompiled_header(includes: list[str], meanwhile=None, wait: bool = True) -> list[str]:
    """A build's flags for the PCH (["-include", header]), or [] where there is none: waits
    while one is being made, after doing `meanwhile` (the track's kernels) if it must wait.
    `wait=False`: the PCH if it is made already, else none at once (a pybind11 binding, whose
    <torch/extension.h> costs most of its compile with or without it: waiting would put its
    compile after its kernels' instead of beside them)."""
    plan = _pch_plan(includes)
    if plan is None:
        return []
    header = plan[1]
    gch = header.with_name(header.name + ".gch")
    if wait and not gch.exists() and PCH_LOCK.exists():
        try:
            with open(PCH_LOCK) as lock:  # read-only: the submission's sandbox allows that
                try:
                    fcntl.flock(lock, fcntl.LOCK_SH | fcntl.LOCK_NB)
                except BlockingIOError:  # being made: compile what does not need it first
                    if meanwhile is not None:
                        meanwhile()
                deadline = time.monotonic() + PCH_WAIT_S
                while time.monotonic() < deadline:
                    try:
                        fcntl.flock(lock, fcntl.LOCK_SH | fcntl.LOCK_NB)
                        break  # nobody is making one
                    except BlockingIOError:
                        time.sleep(0.1)
        except OSError:
            pass
    return ["-include", str(header)] if gch.exists() else []


def _toolchain() -> list:
    """What picks the PCH's flags and compiler, read without importing torch (~2 s): this
    interpreter, torch's installed files, the compiler and CUDA asked for."""
    spec = importlib.util.find_spec("torch")
    origin = spec.origin if spec is not None and spec.origin else ""
    stamp = os.stat(origin).st_mtime_ns if origin and os.path.exists(origin) else 0
    return [sys.executable, origin, stamp, os.environ.get("CXX"), os.environ.get("CUDA_HOME"),
            os.environ.get("PATH")]


def _pch_known() -> bool:
    """The last PCH child ran for this same toolchain, and its PCH (or its failure) is there:
    no child is needed (it would import torch only to find it so)."""
    try:
        known = json.loads((PCH_DIR / "known.json").read_text())
    except (OSError, ValueError):
        return False
    return known.get("toolchain") == json.loads(json.dumps(_toolchain())) and any(
        os.path.exists(known.get(k) or "") for k in ("made", "failed"))


def main() -> int:
    """`python -m grader.submission.pch`: say on the first line what this child does (above),
    then make the PCH for this machine's flags if it must."""
    def say(what: str) -> None:
        print(what, flush=True)
        os.dup2(os.open(os.devnull, os.O_WRONLY), 1)  # nobody reads further
    if _pch_known():
        say("known")
        return 0
    PCH_DIR.mkdir(parents=True, exist_ok=True)
    lock = open(PCH_LOCK, "a")  # held until this process exits
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:  # another grade is making it: the builds wait for that one
        say("busy")
        return 0
    say("held")
    # imports torch: only once the first line is said (above)
    from grader.submission.toolchain import toolchain_env
    toolchain = _toolchain()  # before toolchain_env() sets what a build process sets too
    plan = _pch_plan(toolchain_env())
    if plan is None:
        return 0
    command, header = plan
    gch = header.with_name(header.name + ".gch")
    failed = header.parent / "failed.txt"
    done = lambda: (PCH_DIR / "known.json").write_text(json.dumps(
        {"toolchain": toolchain, "made": str(gch), "failed": str(failed)}))
    if gch.exists() or failed.exists():
        done()
        return 0
    header.parent.mkdir(parents=True, exist_ok=True)
    header.write_text("// The headers every binding includes, precompiled by the grader "
                      "(grader/submission/pch.py).\n" +
                      "".join(f"#include <{h}>\n" for h in PCH_HEADERS))
    tmp = gch.with_name(f"{gch.name}.{os.getpid()}.tmp")
    run = subprocess.run(command + ["-x", "c++-header", str(header), "-o", str(tmp)],
                         stdin=subprocess.DEVNULL, capture_output=True, text=True)
    if run.returncode != 0:  # kept: later grades do not try again (delete it to retry)
        tmp.unlink(missing_ok=True)
        failed.write_text(run.stderr[-4000:])
        done()
        return 1
    tmp.replace(gch)  # whole or not at all: a build never reads half a PCH
    done()
    return 0


if __name__ == "__main__":
    sys.exit(main())
