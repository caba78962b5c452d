"""Build: JIT-compile a track's C++/CUDA sources with torch.utils.cpp_extension + ninja.

One build folder per (submission tree, exercise, track) under `.cache/build/`, outside the
learner's tree, so starter and solution builds never share objects or names, and nothing is
written next to the learner's files. ninja keeps one object per source: an unchanged tree
relinks nothing, and a changed `.cu` recompiles only itself.

A failed build raises `BuildError` whose message is the first real compiler errors with file,
line and the offending source line, not the whole template backtrace.
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from grader.discover import ROOT, Exercise, Track

CACHE = Path(os.environ.get("GRADER_CACHE", ROOT / ".cache"))
INCLUDE = ROOT / "include"  # common.cuh (kernel side) and aten_cuda.h (binding side): shared helpers


class BuildError(RuntimeError):
    """The sources did not compile or link; the message is written for the learner."""


@dataclass
class Built:
    path: Path        # the shared library (already loaded into this process)
    module: object    # the imported module for a pybind11 extension, else None
    seconds: float    # wall time of the build step (compile + link, or the no-op check)
    rebuilt: bool     # False when ninja found nothing to do


def tree_tag(tree: Path) -> str:
    """A short stable name for a submission tree: 'starter', 'solutions', or name-hash."""
    tree = tree.resolve()
    if tree.parent == ROOT:
        return tree.name
    return f"{tree.name}-{hashlib.sha1(str(tree).encode()).hexdigest()[:8]}"


def build_dir(tree: Path, exercise: Exercise, track: Track) -> Path:
    return _build_dir(tree, exercise.id, track.name)


def _build_dir(tree: Path, exercise_id: str, track_name: str) -> Path:
    return CACHE / "build" / tree_tag(tree) / f"{exercise_id}-{track_name}"


def _toolchain_env() -> list[str]:
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
    if track.arch:  # one track per process builds: the runner's, or an AOT build's
        os.environ["TORCH_CUDA_ARCH_LIST"] = track.arch
    return includes, list(track.cuda_flags)


def build(tree: Path, exercise: Exercise, track: Track) -> Built:
    """Compile, link and load the track's sources; raise BuildError with a short summary."""
    includes = _toolchain_env()  # before torch.utils.cpp_extension reads CUDA_HOME on import
    extra_includes, extra_flags = track_options(track)
    from torch.utils import cpp_extension
    if os.environ.get("CUDA_HOME") and cpp_extension.CUDA_HOME != os.environ["CUDA_HOME"]:
        cpp_extension.CUDA_HOME = os.environ["CUDA_HOME"]  # imported earlier by someone else

    folder = tree / exercise.id / track.name
    missing = [s for s in track.sources if not (folder / s).is_file()]
    if missing:
        raise BuildError(f"missing source file(s): {', '.join(str(folder / m) for m in missing)}")
    out = build_dir(tree, exercise, track)
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
        try:
            module = cpp_extension.load(
                name=track.extension,
                sources=[str(folder / s) for s in track.sources],
                build_directory=str(out),
                extra_cflags=["-O3"],
                extra_cuda_cflags=["-O3", "-lineinfo"] + extra_flags,
                extra_include_paths=[str(INCLUDE)] + includes + extra_includes,
                is_python_module=track.python_module,
                verbose=False,
            )
        except (RuntimeError, subprocess.CalledProcessError) as e:
            raise BuildError(summarize_compiler_output(str(e), tree)) from None
        except (ImportError, OSError) as e:
            raise BuildError(explain_load_error(str(e))) from None
    rebuilt = before is None or so.stat().st_mtime_ns != before
    return Built(path=so, module=module if track.python_module else None, seconds=time.perf_counter() - start, rebuilt=rebuilt)


# --- the early rebuild -------------------------------------------------------------------------
#
# A one-line edit of a kernel recompiles one object (~3-4 s of nvcc), and before it the
# submission's process imports torch (~4 s on the GPU host): cpp_extension.load needs torch, but
# ninja does not. So the submission's process (grader.runner), first thing, starts a child that
# runs ninja on the build.ninja a previous build left; build() waits for it (the build lock) and
# takes over what it did. The build folder is the submission's to write, so its build.ninja is
# not trusted code: the child closes the file system to itself first, as the submission's
# process does (grader.runner.sandbox). A stale build.ninja (new flags or sources) only means
# cpp_extension.load rebuilds the rest, as it would have.

EARLY_REPORT = "GRADER_EARLY_BUILD"  # env: the file the child writes what it did into


def start_early_rebuild(tree: Path, exercise_id: str, track_name: str, allow: list[Path],
                        report: Path):
    """Start the early rebuild (above) if the track was built before; returns the child."""
    out = _build_dir(tree, exercise_id, track_name)
    if not (out / "build.ninja").exists() or os.environ.get("GRADER_SANITIZE"):
        return None
    os.environ[EARLY_REPORT] = str(report)
    cmd = [sys.executable, "-m", "grader.build", "--early", str(out), "--report", str(report)]
    cmd += [f"--allow={a}" for a in allow]
    return subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)


def _early_report() -> dict | None:
    """What the early rebuild did ({"before": {library: mtime}, "seconds"}), once; None if it
    did not run (or has not taken the build lock yet: then build() does it all)."""
    path = os.environ.pop(EARLY_REPORT, None)
    try:
        return json.loads(Path(path).read_text()) if path else None
    except (OSError, ValueError):
        return None


def _early_main(out: Path, report: Path, allow: list[Path]) -> int:
    from grader.runner import sandbox
    sandbox(allow)
    ninja = shutil.which("ninja", path=os.pathsep.join(
        [str(Path(sys.executable).parent), os.environ.get("PATH", "")]))
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


# --- summarizing compiler output -------------------------------------------------------------

_GCC = re.compile(r"^(?P<file>[^\s:][^:]*):(?P<line>\d+):(?:(?P<col>\d+):)?\s*(?:fatal )?error:\s*(?P<msg>.*)$")
_NVCC = re.compile(r"^(?P<file>\S+)\((?P<line>\d+)\):\s*(?:catastrophic )?error:?\s*(?P<msg>.*)$")
_LINK = re.compile(r"(undefined reference to .*|multiple definition of .*|cannot find -l\S+|"
                   r"ld(?:\.\w+)?: error: .*)")


def summarize_compiler_output(text: str, tree: Path, limit: int = 5) -> str:
    """The first `limit` distinct errors, learner files first, each with its source line."""
    tree = tree.resolve()
    errors, seen = [], set()
    lines = text.splitlines()
    for i, raw in enumerate(lines):
        m = _GCC.match(raw.strip()) or _NVCC.match(raw.strip())
        if not m:
            continue
        file, line, msg = m.group("file"), int(m.group("line")), m.group("msg").strip()
        # nvcc puts the message on the next line when it is long
        if not msg and i + 1 < len(lines):
            msg = lines[i + 1].strip()
        key = (file, line, msg)
        if key in seen:
            continue
        seen.add(key)
        errors.append((file, line, msg))
    if not errors:
        link = [m.group(1) for m in map(_LINK.search, lines) if m]
        if link:
            return "link failed:\n  " + "\n  ".join(_demangle(link[:limit]))
        tail = "\n  ".join(l for l in lines[-25:] if l.strip())
        return f"build failed (no compiler error line found); the end of the output:\n  {tail}"

    def mine(err):  # errors in the learner's own files come first
        return 0 if Path(err[0]).resolve().is_relative_to(tree) else 1

    errors.sort(key=mine)
    out = [f"{len(errors)} compiler error(s); the first {min(limit, len(errors))}:"]
    for file, line, msg in errors[:limit]:
        path = Path(file)
        shown = path.resolve().relative_to(tree) if path.resolve().is_relative_to(tree) else path
        out.append(f"  {shown}:{line}: error: {msg}")
        try:
            src = path.read_text(errors="replace").splitlines()[line - 1]
            out.append(f"      {line} | {src.strip()}")
        except (OSError, IndexError):
            pass
    return "\n".join(out)


def _demangle(items: list[str]) -> list[str]:
    cxxfilt = shutil.which("c++filt")
    if not cxxfilt:
        return items
    res = subprocess.run([cxxfilt], input="\n".join(items), capture_output=True, text=True)
    return res.stdout.splitlines() or items


def explain_load_error(text: str) -> str:
    m = re.search(r"undefined symbol: (\S+)", text)
    if m:
        name = _demangle([m.group(1)])[0]
        return (f"the library built but does not load: undefined symbol {name}\n"
                f"  (a function is declared and called but never defined: check its name and "
                f"signature match between the .cpp and the .cu)")
    return f"the library built but does not load: {text.strip()}"


# --- ahead-of-time builds (GRADER_BUILD=aot) -------------------------------------------------
#
# What shipping a custom op looks like: a setup.py build (torch.utils.cpp_extension's
# CUDAExtension + BuildExtension) makes a shared library once, against one torch; whoever uses
# it loads the binary (torch.ops.load_library, or an import) and needs no compiler. The library
# lands outside the learner's tree, in .cache/aot/<tree>/<exercise>-<track>/, beside a manifest
# (aot.json) that records the torch it was built against: a C++ extension calls into libtorch
# through C++ symbols whose layout changes between torch releases, so loading it into another
# torch is refused here, by name, instead of crashing later.

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
    return CACHE / "aot" / tree_tag(tree) / f"{exercise.id}-{track.name}"


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
    import torch
    tree = Path(tree).resolve()
    includes = _toolchain_env()
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
    import torch
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
    import torch
    tree = Path(tree).resolve()
    start = time.perf_counter()
    includes = _toolchain_env()
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
            import importlib.util
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


if __name__ == "__main__":  # the early rebuild's child (start_early_rebuild)
    import argparse
    _p = argparse.ArgumentParser(prog="python -m grader.build")
    _p.add_argument("--early", type=Path, required=True)
    _p.add_argument("--report", type=Path, required=True)
    _p.add_argument("--allow", type=Path, action="append", default=[])
    _a = _p.parse_args()
    sys.exit(_early_main(_a.early, _a.report, _a.allow))
