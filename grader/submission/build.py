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
import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from grader.submission.build_errors import BuildError, explain_load_error, summarize_compiler_output
from grader.common.discover import Exercise, Track
from grader.common.paths import CACHE, INCLUDE, build_dir
from grader.common.settings import current


@dataclass
class Built:
    path: Path        # the shared library (already loaded into this process)
    module: object    # the imported module for a pybind11 extension, else None
    seconds: float    # wall time of the build step (compile + link, or the no-op check)
    rebuilt: bool     # False when ninja found nothing to do


def toolchain_env() -> list[str]:
    """Point torch at nvcc and at the CUDA library headers; return extra include folders.

    pip's torch ships headers such as cusparse.h (which ATen/cuda/CUDAContext.h includes) in
    site-packages/nvidia/cu*/include, not in nvcc's install, so we add that folder.
    """
    # ninja (a pip package) sits beside this interpreter, maybe not on PATH
    bindir = str(Path(sys.executable).parent)
    if bindir not in os.environ.get("PATH", "").split(os.pathsep):
        os.environ["PATH"] = bindir + os.pathsep + os.environ.get("PATH", "")
    if not os.environ.get("CUDA_HOME"):
        home = _find_cuda_home()
        if home is not None:
            os.environ["CUDA_HOME"] = str(home)
    _use_a_shared_libstdcxx_compiler()
    if "TORCH_CUDA_ARCH_LIST" not in os.environ:
        import torch
        if torch.cuda.is_available():
            major, minor = torch.cuda.get_device_capability()
            os.environ["TORCH_CUDA_ARCH_LIST"] = f"{major}.{minor}"
        else:  # no GPU here: build for Hopper, the machines this course targets
            os.environ["TORCH_CUDA_ARCH_LIST"] = "9.0"
    includes = []
    for site in map(Path, sys.path):
        nvidia = site / "nvidia"
        if nvidia.is_dir():
            includes += [str(p) for p in sorted(nvidia.glob("cu*/include")) if p.is_dir()]
    return includes


def _links_shared_libstdcxx(compiler: str) -> bool:
    try:
        out = subprocess.run([compiler, "-print-file-name=libstdc++.so"], capture_output=True,
                             text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return False
    return os.path.isabs(out) and os.path.exists(out)


def _use_a_shared_libstdcxx_compiler() -> None:
    """An extension must use the process's shared libstdc++. A compiler that links it statically
    (seen: CXX=/opt/gcc/bin/g++ on the GPU machines) puts a second copy in the .so; its stream
    facets then clash with torch's and the first TORCH_CHECK message that formats a number
    segfaults. Such a CXX is swapped for the g++/gcc on PATH."""
    cxx = os.environ.get("CXX")
    if not cxx or _links_shared_libstdcxx(cxx):
        return
    for name, cc in (("g++", "gcc"), ("c++", "cc")):
        candidate = shutil.which(name)
        if candidate and candidate != cxx and _links_shared_libstdcxx(candidate):
            os.environ["CXX"] = candidate
            if shutil.which(cc):
                os.environ["CC"] = shutil.which(cc)
            return


def _find_cuda_home() -> Path | None:
    """The CUDA install: nvcc plus its runtime library (an nvcc on PATH may be a wrapper script
    in /usr/local/bin, whose parent is not the install)."""
    nvcc = shutil.which("nvcc")
    candidates = [Path(p) for p in (os.environ.get("CUDA_PATH"),) if p]
    if nvcc:
        candidates.append(Path(nvcc).resolve().parent.parent)
    candidates.append(Path("/usr/local/cuda"))
    for home in candidates:
        has_lib = any(home.glob("lib64/libcudart*")) or any(home.glob("targets/*/lib/libcudart*"))
        if (home / "bin" / "nvcc").exists() and has_lib:
            return home
    return None


def _cutlass_headers() -> list[str]:
    try:
        import cutlass_library
    except ImportError:
        raise BuildError("needs nvidia-cutlass (pip install nvidia-cutlass): its C++ headers are "
                         "this track's CUTLASS") from None
    root = Path(cutlass_library.source_path)
    return [str(root / "include"), str(root / "tools" / "util" / "include")]


HEADERS = {"cutlass": _cutlass_headers}  # header packages a track may ask for (`headers`)


def track_options(track: Track) -> tuple[list[str], list[str]]:
    """(include folders, nvcc flags) a track declares beyond the defaults; sets its arch."""
    includes = [d for h in track.headers for d in HEADERS[h]()]
    if track.arch:  # one track per process builds: the submission's, or an AOT build's
        os.environ["TORCH_CUDA_ARCH_LIST"] = track.arch
    return includes, list(track.cuda_flags)


def build(tree: Path, exercise: Exercise, track: Track) -> Built:
    """Compile, link and load the track's sources; raise BuildError with a short summary."""
    includes = toolchain_env()  # before torch.utils.cpp_extension reads CUDA_HOME on import
    extra_includes, extra_flags = track_options(track)
    from torch.utils import cpp_extension
    if os.environ.get("CUDA_HOME") and cpp_extension.CUDA_HOME != os.environ["CUDA_HOME"]:
        cpp_extension.CUDA_HOME = os.environ["CUDA_HOME"]  # imported earlier by someone else

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
        early = _early_report()  # the rebuild started while this process imported torch
        if early is not None:
            before = early["before"].get(so.name)
            start -= early["seconds"]
        (out / "lock").unlink(missing_ok=True)
        ninja = dict(name=track.extension, sources=[str(folder / s) for s in track.sources],
                     extra_cuda_cflags=["-O3", "-lineinfo"] + extra_flags,
                     extra_include_paths=[str(INCLUDE)] + includes + extra_includes)
        pch = precompiled_header(includes, meanwhile=lambda: _compile_kernels(out, ninja)) \
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
    return Built(path=so, module=module if track.python_module else None, seconds=time.perf_counter() - start, rebuilt=rebuilt)


# --- the binding side's precompiled header -----------------------------------------------------
#
# A CUDA track's .cpp (its op: checks, dtype dispatch, registration) includes ATen and
# torch/library.h, and parsing them is most of its compile: 9-16 s of g++ per track on the 2-core
# machine, ~3 s with them precompiled. GCC reads a precompiled header (PCH) in place of a header
# when it was made with the same flags, so the grader makes one of the headers every binding
# includes (PCH_HEADERS), once per compiler, torch and flags, in its cache; each build
# force-includes it (-include), and the file's own #includes of the same headers are then no-ops
# (include guards). A compiler that is not GCC, a PCH GCC refuses (other flags) or none at all:
# the headers are parsed as before, with the same result. The course's own header (aten_cuda.h)
# is left out: a file that defines its helpers itself must not meet them twice.
#
# The submission's process never writes it (its sandbox: it could put code into every other
# track's build). The grade process starts `python -m grader.submission.build --pch` beside the checks,
# holding a lock the child inherits; a build that finds the lock held waits for the PCH.

PCH_HEADERS = ("ATen/Dispatch.h", "ATen/OpMathType.h", "ATen/core/Tensor.h", "ATen/ops/empty.h",
               "ATen/ops/empty_like.h", "c10/cuda/CUDAGuard.h", "c10/cuda/CUDAStream.h",
               "torch/library.h", "cuda_bf16.h", "cuda_fp16.h", "cuda_runtime_api.h")
PCH_DIR = CACHE / "pch"
PCH_LOCK = PCH_DIR / "building.lock"  # held while a PCH is being made (whichever its flags)
PCH_WAIT_S = 120  # a build waits this long at most for the PCH being made (~20-40 s on 2 cores)


def start_pch(tracks) -> None:
    """The grade process, for a JIT build: make the PCH in a child of its own, beside the
    checks, if a track to build has a .cpp and this toolchain's PCH is not known made (or
    known to fail: _pch_known). The lock is taken here, before any judge starts, and passed
    on: no build can look for the PCH before it is held."""
    if not any(s.endswith(".cpp") for t in tracks for s in t.sources) or _pch_known():
        return
    PCH_DIR.mkdir(parents=True, exist_ok=True)
    fd = os.open(PCH_LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:  # another grade is making it: the builds wait for that one
            return
        # the child holds the lock until it exits (one open file, shared by both descriptors)
        subprocess.Popen([sys.executable, "-m", "grader.submission.build", "--pch"], pass_fds=(fd,),
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, start_new_session=True)
    finally:
        os.close(fd)


def _pch_plan(includes: list[str]) -> tuple[list[str], Path] | None:
    """(the compiler's command line without the source, the PCH header's path) for the flags a
    JIT build of a binding uses, or None (not GCC; a torch whose ninja writer differs)."""
    import hashlib
    import shlex
    import tempfile
    from torch.utils import cpp_extension
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
        text = _write_ninja(Path(tmp), name="pch", sources=["pch.cpp"], extra_cuda_cflags=[],
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


def precompiled_header(includes: list[str], meanwhile=None) -> list[str]:
    """A build's flags for the PCH (["-include", header]), or [] where there is none: waits
    while one is being made, after doing `meanwhile` (the track's kernels) if it must wait."""
    plan = _pch_plan(includes)
    if plan is None:
        return []
    header = plan[1]
    gch = header.with_name(header.name + ".gch")
    if not gch.exists() and PCH_LOCK.exists():
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


def _compile_kernels(out: Path, ninja: dict) -> None:
    """While the PCH is being made: the track's .cu objects, through the build.ninja that
    cpp_extension.load writes next (its own writer: the .cu commands do not depend on the
    PCH's flags, so load then finds them made and compiles only the .cpp). A failure is left
    to load, which runs it again and reports it."""
    text = _write_ninja(out, **ninja)
    targets = re.findall(r"^build (\S+\.cuda\.o):", text or "", re.M)
    tool = _ninja()
    if targets and tool:
        subprocess.run([tool, *targets], cwd=out, stdin=subprocess.DEVNULL,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _write_ninja(folder: Path, **args) -> str | None:
    """The build.ninja torch.utils.cpp_extension writes for a JIT build of a binding with
    these arguments (name, sources, extra_cuda_cflags, extra_include_paths), written into
    `folder`; its text, or None where this torch's writer (an internal) is spelled otherwise."""
    import inspect
    from torch.utils import cpp_extension
    writer = cpp_extension._write_ninja_file_to_build_library
    args = dict(path=str(folder / "build.ninja"), extra_cflags=["-O3"], extra_sycl_cflags=[],
                extra_ldflags=[], with_cuda=True, with_sycl=False, is_standalone=False, **args)
    try:
        params = inspect.signature(writer).parameters
        writer(**{k: v for k, v in args.items() if k in params})
        return (folder / "build.ninja").read_text()
    except Exception:
        return None


def _ninja() -> str | None:
    """ninja (a pip package) beside this interpreter, or on PATH."""
    return shutil.which("ninja", path=os.pathsep.join(
        [str(Path(sys.executable).parent), os.environ.get("PATH", "")]))


def _pch_main() -> int:
    """`python -m grader.submission.build --pch`: make the PCH for this machine's flags, if missing."""
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
                      "(grader/submission/build.py).\n" + "".join(f"#include <{h}>\n" for h in PCH_HEADERS))
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


def _toolchain() -> list:
    """What picks the PCH's flags and compiler, read without importing torch (~2 s): this
    interpreter, torch's installed files, the compiler and CUDA asked for."""
    import importlib.util
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


# --- the early rebuild -------------------------------------------------------------------------
#
# A one-line edit of a kernel recompiles one object (~3-4 s of nvcc), and before it the
# submission's process imports torch (~4 s on the GPU host): cpp_extension.load needs torch, but
# ninja does not. So the submission's process (grader.submission), first thing, starts a child that
# runs ninja on the build.ninja a previous build left; build() waits for it (the build lock) and
# takes over what it did. The build folder is the submission's to write, so its build.ninja is
# not trusted code: the child closes the file system to itself first, as the submission's
# process does (grader.submission.sandbox). A stale build.ninja (new flags or sources) only means
# cpp_extension.load rebuilds the rest, as it would have.

_EARLY_REPORT: list[Path] = []  # the file the child writes what it did into (this process)
_ADOPTED: list[Path] = []  # an early rebuild the watch loop started for this process


def adopt_early_rebuild(report: Path) -> None:
    """The watch loop (grader.tools.watch) started this track's early rebuild the moment it saw the
    save, before this process existed: take over its report instead of starting another."""
    _ADOPTED[:] = [report]


def start_early_rebuild(tree: Path, exercise_id: str, track_name: str, allow: list[Path],
                        report: Path, env: dict | None = None, new_session: bool = False):
    """Start the early rebuild (above) if the track was built before; returns the child. `env`
    (default: this process's) and `new_session`: for the watch loop, which starts it itself."""
    if _ADOPTED:
        _EARLY_REPORT[:] = [_ADOPTED.pop()]
        return None
    out = build_dir(tree, exercise_id, track_name)
    if not (out / "build.ninja").exists() or current().sanitize:
        return None
    _EARLY_REPORT[:] = [report]
    cmd = [sys.executable, "-m", "grader.submission.build", "--early", str(out), "--report", str(report)]
    cmd += [f"--allow={a}" for a in allow]
    return subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, env=env, start_new_session=new_session)


def _early_report() -> dict | None:
    """What the early rebuild did ({"before": {library: mtime}, "seconds"}), once; None if it
    did not run (or has not taken the build lock yet: then build() does it all)."""
    path = _EARLY_REPORT.pop() if _EARLY_REPORT else None
    try:
        return json.loads(path.read_text()) if path else None
    except (OSError, ValueError):
        return None


def _early_main(out: Path, report: Path, allow: list[Path]) -> int:
    from grader.submission.sandbox import close_filesystem  # only this child needs it
    close_filesystem(allow)
    ninja = _ninja()
    if ninja is None:
        return 1
    with open(out / ".grader-lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        before = {p.name: p.stat().st_mtime_ns for p in out.glob("*.so")}
        start = time.perf_counter()
        jobs = ["-j", os.environ["MAX_JOBS"]] if os.environ.get("MAX_JOBS") else []
        # a failure is left to cpp_extension.load, which runs it again and reports it
        subprocess.run([ninja] + jobs, cwd=out, stdin=subprocess.DEVNULL,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        report.write_text(json.dumps({"before": before,
                                      "seconds": time.perf_counter() - start}))
    return 0


if __name__ == "__main__":  # the early rebuild's child (start_early_rebuild), or the PCH's
    import argparse
    _p = argparse.ArgumentParser(prog="python -m grader.submission.build")
    _p.add_argument("--pch", action="store_true")
    _p.add_argument("--early", type=Path)
    _p.add_argument("--report", type=Path)
    _p.add_argument("--allow", type=Path, action="append", default=[])
    _a = _p.parse_args()
    sys.exit(_pch_main() if _a.pch else _early_main(_a.early, _a.report, _a.allow))
