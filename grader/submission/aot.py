"""AOT: ahead-of-time builds of a track (`--build aot`), as a custom op ships.

A setup.py build (torch.utils.cpp_extension's CUDAExtension + BuildExtension) makes a shared
library once, against one torch; whoever uses it loads the binary (torch.ops.load_library, or an
import) and needs no compiler. The library lands outside the learner's tree (grader.common.paths.aot_dir)
beside a manifest (aot.json) that records the torch it was built against: a C++ extension calls
into libtorch through C++ symbols whose layout changes between torch releases, so loading it into
another torch is refused here, by name, instead of crashing later.

    python -m grader.submission.aot --tree T --exercise 06_rmsnorm --track cuda

builds one track before its checks (the grade process runs it: the submission's process may not
write the AOT folder) and prints its manifest as one JSON line, or {"error": ...}.
"""
from __future__ import annotations

import argparse
import fcntl
import hashlib
import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import torch

from grader.common.discover import Exercise, Track, load_exercise
from grader.common.paths import EXERCISES, INCLUDE
from grader.common.paths import aot_dir as _aot_dir
from grader.submission.build import Built
from grader.submission.build_errors import (
    BuildError,
    explain_load_error,
    summarize_compiler_output,
)
from grader.submission.toolchain import toolchain_env, track_options

AOT_MANIFEST = "aot.json"
AOT_CFLAGS = ["-O3"]
AOT_CUDA_CFLAGS = ["-O3", "-lineinfo"]

# The build script, run in a fresh interpreter (a compiler crash or a hang cannot take the
# caller with it, and setuptools' global state stays out of the grader). Its one argument is a
# JSON file saying what to build.
_SETUP_SCRIPT = '''\
import json, sys
from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension, CUDAExtension

cfg = json.load(open(sys.argv[1]))
kind = CUDAExtension if any(s.endswith(".cu") for s in cfg["sources"]) else CppExtension
ext = kind(name=cfg["extension"], sources=cfg["sources"], include_dirs=cfg["include_dirs"],
           extra_compile_args={"cxx": cfg["cflags"], "nvcc": cfg["cuda_cflags"]})
setup(name=cfg["extension"], version="0.0.0", ext_modules=[ext],
      cmdclass={"build_ext": BuildExtension.with_options(
          no_python_abi_suffix=not cfg["python_module"])},
      script_args=["-q", "build_ext", "--build-lib", cfg["build_lib"],
                   "--build-temp", cfg["build_temp"]])
'''


def aot_dir(tree: Path, exercise: Exercise, track: Track) -> Path:
    return _aot_dir(tree, exercise.id, track.name)


def _fingerprint(folder: Path, track: Track, includes: list[str]) -> str:
    """What the binary is made of, besides torch: the track's sources and headers (not its
    Python file), the shared headers, the flags and the target GPUs. A change to any of them
    means a new build."""
    h = hashlib.sha256()
    headers = {f for f in track.files if f.endswith((".h", ".hpp", ".cuh", ".inl"))}
    files = [(f, folder / f) for f in sorted(headers | set(track.sources))]
    files += [(f"include/{p.relative_to(INCLUDE)}", p) for p in sorted(INCLUDE.rglob("*"))
              if p.is_file()]
    for name, path in files:
        h.update(name.encode() + b"\0")
        h.update(path.read_bytes() if path.is_file() else b"<missing>")
        h.update(b"\0")
    h.update(repr((AOT_CFLAGS, AOT_CUDA_CFLAGS, os.environ.get("TORCH_CUDA_ARCH_LIST"),
                   os.environ.get("CXX"), os.environ.get("CUDA_HOME"), includes,
                   track.extension, track.python_module, track.cuda_flags)).encode())
    return h.hexdigest()[:16]


def read_aot_manifest(tree: Path, exercise: Exercise, track: Track) -> dict | None:
    try:
        return json.loads((aot_dir(tree, exercise, track) / AOT_MANIFEST).read_text())
    except (OSError, ValueError):
        return None


def _write_manifest(out: Path, data: dict) -> None:
    tmp = out / (AOT_MANIFEST + ".tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    os.replace(tmp, out / AOT_MANIFEST)


def build_aot(tree: Path, exercise: Exercise, track: Track, *, timeout_s: float | None = None,
              force: bool = False) -> dict:
    """Build the track's library ahead of time with CUDAExtension/BuildExtension; return its
    manifest. Nothing is compiled when the library for these sources, flags and this torch is
    already there (nor when the same sources already failed: the failure is recorded and
    raised again). Raises BuildError with the first compiler errors."""
    tree = Path(tree).resolve()
    includes = toolchain_env()
    extra_includes, extra_flags = track_options(track)
    includes = includes + extra_includes
    folder = tree / exercise.id / track.name
    missing = [s for s in track.sources if not (folder / s).is_file()]
    if missing:
        raise BuildError(f"missing source file(s): {', '.join(str(folder / m) for m in missing)}")
    if any(s.endswith(".cu") for s in track.sources) and not os.environ.get("CUDA_HOME"):
        raise BuildError("no CUDA compiler found: install the CUDA toolkit or set CUDA_HOME")
    out = aot_dir(tree, exercise, track)
    out.mkdir(parents=True, exist_ok=True)
    fingerprint = _fingerprint(folder, track, includes)
    with open(out / ".grader-lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        old = read_aot_manifest(tree, exercise, track)
        if (not force and old and old.get("fingerprint") == fingerprint
                and old.get("torch") == torch.__version__):
            if not old.get("ok") and not old.get("timed_out"):  # a slow machine may retry
                raise BuildError(old.get("error", "the ahead-of-time build failed"))
            if old.get("ok") and (out / old["library"]).is_file():
                return old
        cfg = {"extension": track.extension, "python_module": track.python_module,
               "sources": [str(folder / s) for s in track.sources],
               "include_dirs": [str(INCLUDE)] + includes,
               "cflags": AOT_CFLAGS, "cuda_cflags": AOT_CUDA_CFLAGS + extra_flags,
               "build_lib": str(out), "build_temp": str(out / "build")}
        (out / "setup_aot.py").write_text(_SETUP_SCRIPT)
        (out / "setup_aot.json").write_text(json.dumps(cfg, indent=2))
        for stale in out.glob(f"{track.extension}*.so"):
            stale.unlink()
        (out / AOT_MANIFEST).unlink(missing_ok=True)
        manifest = {"ok": False, "exercise": exercise.id, "track": track.name,
                    "extension": track.extension, "python_module": track.python_module,
                    "fingerprint": fingerprint, "torch": torch.__version__,
                    "torch_cuda": torch.version.cuda,
                    "python": f"{sys.version_info.major}.{sys.version_info.minor}",
                    "arch_list": os.environ.get("TORCH_CUDA_ARCH_LIST"),
                    "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        start = time.perf_counter()
        # a session of its own: a build past its limit is stopped with its compilers
        proc = subprocess.Popen([sys.executable, str(out / "setup_aot.py"),
                                 str(out / "setup_aot.json")], cwd=out, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            text = proc.communicate(timeout=timeout_s or exercise.timeout_s)[0]
            code = proc.returncode
        except subprocess.TimeoutExpired:
            text = code = None
            os.killpg(proc.pid, signal.SIGKILL)  # not yet reaped: the group is still its own
            proc.communicate()
        manifest["seconds"] = round(time.perf_counter() - start, 1)
        libs = sorted(out.glob(f"{track.extension}*.so"))
        if text is None:
            manifest["timed_out"] = True
            manifest["error"] = (f"the ahead-of-time build took longer than "
                                 f"{timeout_s or exercise.timeout_s:.0f} s and was stopped")
        elif code != 0 or not libs:
            manifest["error"] = summarize_compiler_output(text, tree)
        else:
            manifest.update(ok=True, library=libs[0].name)
        _write_manifest(out, manifest)
        if not manifest["ok"]:
            raise BuildError(manifest["error"])
        return {**manifest, "fresh": True}


def _rebuild_hint(exercise: Exercise) -> str:
    return (f"rebuild it against this torch: `make exercise-{exercise.number} BUILD=aot` "
            f"(python -m grader grade --exercise {exercise.number} --build aot), which rebuilds a "
            f"library whose recorded torch differs from the running one")


def check_aot_manifest(manifest: dict, exercise: Exercise, path: Path) -> None:
    """Refuse a library built for another torch (or Python, or without this GPU's code)."""
    built, here = manifest.get("torch"), torch.__version__
    if built != here:
        raise BuildError(
            f"refusing to load the ahead-of-time library {path}: it was built against torch "
            f"{built}, and this process runs torch {here}. A C++/CUDA extension is pinned to the "
            f"ABI of the torch it was built against (libtorch's C++ symbols change between "
            f"releases), so loading it here could fail on a missing symbol or crash later; "
            f"{_rebuild_hint(exercise)}")
    py = f"{sys.version_info.major}.{sys.version_info.minor}"
    if manifest.get("python_module") and manifest.get("python", py) != py:
        raise BuildError(f"refusing to load {path}: a Python module built for Python "
                         f"{manifest['python']}, and this is Python {py}; {_rebuild_hint(exercise)}")
    if torch.cuda.is_available() and manifest.get("arch_list"):
        major, minor = torch.cuda.get_device_capability()
        archs = manifest["arch_list"].replace(";", " ").replace(",", " ").split()
        ok = any(a.split("+")[0].rstrip("af") == f"{major}.{minor}" or
                 ("+PTX" in a and float(a.split("+")[0].rstrip("af")) <= major + minor / 10)
                 for a in archs)
        if not ok:
            raise BuildError(f"the ahead-of-time library {path} has code for "
                             f"TORCH_CUDA_ARCH_LIST={manifest['arch_list']} but this GPU is "
                             f"sm_{major}{minor}: rebuild with TORCH_CUDA_ARCH_LIST including "
                             f"{major}.{minor}")


def load_aot(tree: Path, exercise: Exercise, track: Track) -> Built:
    """Load the track's ahead-of-time library, building it first when there is none for these
    sources; refuse one recorded as built against another torch."""
    tree = Path(tree).resolve()
    start = time.perf_counter()
    includes = toolchain_env()
    folder = tree / exercise.id / track.name
    manifest = read_aot_manifest(tree, exercise, track)
    rebuilt = False
    if manifest is None or manifest.get("fingerprint") != _fingerprint(folder, track, includes):
        try:
            manifest = build_aot(tree, exercise, track)
        except PermissionError as e:  # a sandboxed process may not write the AOT folder
            raise BuildError(
                f"there is no ahead-of-time library for these sources, and this process may "
                f"not write {aot_dir(tree, exercise, track)} ({e.strerror}): build it first "
                f"with `python -m grader grade --build aot`, which builds every CUDA track "
                f"before its checks start") from None
        rebuilt = True
    if not manifest.get("ok"):
        raise BuildError(manifest.get("error", "the ahead-of-time build failed"))
    path = aot_dir(tree, exercise, track) / manifest["library"]
    check_aot_manifest(manifest, exercise, path)
    try:
        if track.python_module:
            spec = importlib.util.spec_from_file_location(track.extension, path)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
        else:
            torch.ops.load_library(str(path))
            module = None
    except (ImportError, OSError, RuntimeError) as e:
        raise BuildError(explain_load_error(str(e))) from None
    seconds = manifest.get("seconds", 0.0) if rebuilt else time.perf_counter() - start
    return Built(path=path, module=module, seconds=seconds, rebuilt=rebuilt)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m grader.submission.aot")
    p.add_argument("--tree", required=True, type=Path)
    p.add_argument("--exercise", required=True)
    p.add_argument("--track", required=True)
    args = p.parse_args(argv)
    exercise = load_exercise(EXERCISES / args.exercise)
    try:
        manifest = build_aot(args.tree, exercise, exercise.tracks[args.track])
    except BuildError as e:
        manifest = {"error": str(e)}
    print(json.dumps(manifest), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
