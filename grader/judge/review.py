"""Review: read a track's source files before the submission runs, and flag, with file:line,
everything an honest kernel never needs.

The judge calls `review_track(folder, files)`; it reads files and never imports them. Python is
held to an allowlist (grader.judge.review_allow: the modules, builtins and attributes an honest
kernel file uses), with what names hold followed through the file (grader.judge.review_python,
grader.judge.review_flow); C++/CUDA to rules over the source with its comments and strings
blanked (grader.judge.review_cpp). Any finding marks the track "needs review" beside the automatic
checks, never instead of them.

Fail-safe: nothing here can stop the judge. A file it cannot read, decode or parse, a statement a
rule fails on, or a review that fails as a whole is itself a finding ("was not reviewed: ...").

What reading cannot do: see what C code does at run time, or follow every path data can take.
It makes anything that reaches the process's machinery a finding; what runs is checked at run time.
"""
from __future__ import annotations

import os
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

from grader.judge import review_allow as allow
from grader.judge.review_cpp import review_cpp
from grader.judge.review_python import module_aliases, review_python

PY = (".py",)
CPP = (".cpp", ".cc", ".cxx", ".cu", ".h", ".hh", ".hpp", ".cuh", ".inl")
# code Python, the loader or the driver can run (a cubin dropped into Triton's cache runs too)
BINARY = (".so", ".pyd", ".pyc", ".pyo", ".dylib", ".dll", ".cubin", ".fatbin", ".hsaco")
# bounds on what one review reads, so that no track makes the judge wait long (an adversarial
# Python file costs up to ~0.3 s per 10 KB to follow, C++ ~0.05 s; honest tracks are under
# 200 KB in all and their largest file ~50 KB): what lies beyond is a finding, "was not reviewed"
MAX_BYTES, MAX_PY_BYTES, MAX_TOTAL = 1_000_000, 200_000, 1_000_000
MAX_FILES, MAX_DEPTH, MAX_PER_FILE = 100, 4, 40
EXERCISES = Path(__file__).resolve().parents[2] / "exercises"

WHAT = {
    "grader": "reaches the grader's own modules",
    "main": "reaches the __main__ module (the grader's server)",
    "modules": "reaches the interpreter's modules, its import system or os",
    "patch": "changes an object it did not make",
    "namespace": "reaches into a namespace it did not define",
    "dynamic-code": "runs, decodes or unpickles code built at run time",
    "dynamic-name": "reads or sets an attribute whose name is computed at run time",
    "threads": "starts threads or processes",
    "native": "loads or patches native code the review cannot read",
    "signals": "sends or handles signals",
    "proc": "reads /proc",
    "introspection": "inspects frames, the garbage collector or other code's internals",
    "file-write": "uses files or the operating system",
    "intercept": "hooks into PyTorch's or Triton's dispatch, profiler, launcher or allocator",
    "graph": "captures or replays a CUDA graph",
    "stream": "runs work on a stream of its own, past the one the judge times",
    "aten-internal": "calls ATen's implementations directly, past the dispatcher the profiler sees",
    "library": "calls a vendor library instead of its own kernel",
    "python": "runs Python or TorchScript from C++",
    "obfuscation": "hides names from this review",
    "import": "imports or reaches a module an honest kernel never uses",
    "private": "reaches a private part of a library",
    "builtin": "uses a builtin an honest kernel never needs",
    "identity": "keys on object identity (id), as a result cache does",
    "value": "passes a module around as a value",
    "fallback": "falls back to PyTorch in an except clause around its kernel",
    "shadow": "is named like a module Python or the grader loads",
    "binary": "ships a compiled file the review cannot read",
    "link": "is or includes a file outside the track folder (not read)",
    "limits": "was not reviewed",
}


@dataclass(frozen=True)
class Finding:
    file: str   # relative to the track folder
    line: int
    rule: str   # a key of WHAT
    text: str   # for an instructor: what was seen, e.g. "changes an object ... (x.y = ...)"

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.text}"


def _entries(folder: Path) -> list[str]:
    """Every file and link under `folder` (relative, sorted), links not followed, bounded."""
    out = []
    for root, dirs, names in os.walk(folder, followlinks=False):
        rel = Path(root).relative_to(folder)
        if len(rel.parts) >= MAX_DEPTH:
            dirs[:] = []
        links = [d for d in dirs if (Path(root) / d).is_symlink()]
        out += sorted((rel / n).as_posix() for n in names + links)
        dirs.sort()
        if len(out) > 10 * MAX_FILES:
            break
    return out


def _pyc_runs_unchecked(path: Path) -> bool:
    """A __pycache__ entry Python would run without matching it to its source: one without a
    source beside the cache folder, or an unchecked hash-based pyc (PEP 552)."""
    source = path.parent.parent / (path.name.split(".")[0] + ".py")
    with open(path, "rb") as f:
        flags = int.from_bytes(f.read(8)[4:8], "little")
    return not source.is_file() or (flags & 1 and not flags & 2)


def _extension(folder: Path) -> str | None:
    """The module name the grader builds a C++/CUDA track into (its exercise.toml), for a track
    folder laid out as <tree>/<exercise>/<track>; None for any other folder."""
    spec = EXERCISES / folder.parent.name / "exercise.toml"
    if not spec.is_file():
        return None
    track = tomllib.loads(spec.read_text()).get("tracks", {}).get(folder.name, {})
    if not track.get("sources"):
        return None
    return track.get("extension") or f"{folder.parent.name}_{folder.name}"


def _own_modules(folder: Path, names: list[str], extension: str | None) -> dict:
    """The modules the track's files make importable (name -> what each imported at its top
    level), and its built extension."""
    own = {extension: {}} if extension else {}
    for name in names:
        p = Path(name)
        if p.suffix == ".py" and (folder / name).is_file() and not (folder / name).is_symlink():
            stem = p.stem if p.stem != "__init__" else (p.parent.name or "")
            if not stem.isidentifier():
                continue
            try:
                data = (folder / name).read_bytes() if (folder / name).stat().st_size <= \
                    MAX_PY_BYTES else b""
            except OSError:
                data = b""
            own[stem] = {**own.get(stem, {}), **module_aliases(data)}
            if len(p.parts) > 1 and p.parts[0].isidentifier():
                own.setdefault(p.parts[0], {})  # a package of the track
    return own


def _shadows(name: str) -> str | None:
    """Why a top-level module of the track would not be what importing its name gives."""
    top = name.split("/")[0]
    stem = top[:-3] if top.endswith(".py") else top if "." not in top else None
    if not stem or stem == "__pycache__":
        return None
    if (stem in allow.STDLIB or stem in allow.ROOTS or stem in ("grader", "numpy", "pytest")) \
            and stem != "test":  # Python's own test suite: nothing imports it (a learner's test)
        return f"{stem}: Python imports its own {stem} first, or this one in its place"
    if re.fullmatch(r"(reference|submission)_\w+", stem):
        return f"{stem}: the grader's name for a module it loads"
    return None


def _review_file(folder: Path, name: str, own: dict) -> list[tuple[int, str, str]]:
    path = folder / name
    data = path.read_bytes()
    if path.suffix.lower() in PY:
        return review_python(data, own)
    return review_cpp(data)


def review_track(folder: Path, files: list[str], extension: str | None = None) -> list[Finding]:
    """Read every source of a track (its declared files, and any other Python, C++ or CUDA
    file under it) and return what an honest kernel never needs: the declared files first,
    each file's findings in line order. `extension`: the module its C++ sources are built into
    (default: read from the exercise's spec). Never raises."""
    found: list[Finding] = []
    try:
        _review(Path(folder), files, extension, found)
    except Exception as e:  # noqa: BLE001 - nothing in the review may stop the judge
        found.append(Finding(".", 1, "limits", f"{WHAT['limits']}: the review failed: "
                                               f"{type(e).__name__}: {e}"[:200]))
    return found


def _review(folder: Path, files: list[str], extension: str | None, found: list[Finding]):
    top = folder.resolve()
    names = list(dict.fromkeys([*files, *_entries(folder)]))
    try:
        extension = extension or _extension(folder)
    except Exception:  # noqa: BLE001 - a spec the grader itself will refuse
        extension = None
    own = _own_modules(folder, names, extension)
    heads = dict.fromkeys(n.split("/")[0] + ("/" if "/" in n else "") for n in names)
    for head in heads:  # a module or package of the track named like one Python already has
        if (head.endswith("/") or head.endswith(".py")) and (why := _shadows(head.rstrip("/"))):
            found.append(Finding(head, 1, "shadow", f"{WHAT['shadow']} ({why})"))
    read = total = 0
    for name in names:
        path = folder / name
        suffix = path.suffix.lower()
        try:
            if not (path.is_file() or path.is_symlink()):
                continue
            if not path.resolve().is_relative_to(top):
                found.append(Finding(name, 1, "link", WHAT["link"]))
                continue
            if suffix in BINARY and (suffix != ".pyc" or path.parent.name != "__pycache__"
                                     or _pyc_runs_unchecked(path)):
                found.append(Finding(name, 1, "binary", f"{WHAT['binary']} ({path.name})"))
                continue
            if suffix not in PY + CPP or not path.is_file():
                continue
            size = path.stat().st_size
            limit = MAX_PY_BYTES if suffix in PY else MAX_BYTES
            why = ("more than 100 source files" if read == MAX_FILES else
                   f"larger than {limit // 1000} KB" if size > limit else
                   f"the track's sources pass {MAX_TOTAL // 1_000_000} MB" if total + size >
                   MAX_TOTAL else None)
            if why:
                found.append(Finding(name, 1, "limits", f"{WHAT['limits']}: {why}"))
                continue
            read, total = read + 1, total + size
            raw = _review_file(folder, name, own)
        except Exception as e:  # noqa: BLE001 - an unreadable file is a finding, not a crash
            found.append(Finding(name, 1, "limits", f"{WHAT['limits']}: {type(e).__name__}: "
                                                    f"{e}"[:200]))
            continue
        seen = set()
        for line, rule, detail in sorted(raw, key=lambda r: r[0]):  # the first said per line
            if (line, rule) not in seen and len(seen) < MAX_PER_FILE:
                seen.add((line, rule))
                text = f"{WHAT[rule]}: {detail}" if rule == "limits" else f"{WHAT[rule]} ({detail})"
                found.append(Finding(name, line, rule, text))
