"""Discover: find the exercises and read their declarative specs (`exercise.toml`).

An exercise is a folder `exercises/NN_name/` holding `exercise.toml` (what to grade),
`reference.py` (the PyTorch reference, input makers, the traffic model) and `test_*.py` (the
checks). This module only reads and validates; it never imports a submission.

A bad spec raises `SpecError` naming the file and the field, e.g.
    exercises/02_scale/exercise.toml: tracks.cuda.sources: 'scale.cpp' is not in tracks.cuda.files
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from pathlib import Path

import tomllib

from grader.common.ceilings import CEILINGS
from grader.common.known_bad import KnownBad
from grader.common.known_bad import load as load_known_bad
from grader.common.paths import EXERCISES, ROOT

DTYPES = ("float64", "float32", "float16", "bfloat16")
METRICS = ("fraction_of_ceiling", "speedup")
MODES = ("forward", "forward_backward")


class SpecError(ValueError):
    """A spec that cannot be graded: the message names the file and the field."""


@dataclass(frozen=True)
class Track:
    name: str                 # "cuda", "triton", ...
    files: tuple[str, ...]    # every file a learner edits, relative to the track folder
    sources: tuple[str, ...]  # the subset JIT-built with torch.utils.cpp_extension (.cu/.cpp)
    extension: str            # the built module's name (what Python imports or torch.ops loads)
    python_module: bool       # True: a pybind11 module; False: a TORCH_LIBRARY shared library
    module: str | None        # Python file imported for the entry points (None: torch.ops)
    ops_namespace: str | None  # where entry points live when module is None
    entry_points: tuple[str, ...]
    cpu: bool                 # the track also runs on CPU tensors (a C++ CPU path)
    start: str                # one-line hint: where a learner starts
    allow: tuple[str, ...] = ()  # PyTorch ops this track may call besides the exercise's
    arch: str | None = None      # TORCH_CUDA_ARCH_LIST for this track (e.g. "9.0a": wgmma, TMA)
    cuda_flags: tuple[str, ...] = ()  # extra nvcc flags
    headers: tuple[str, ...] = ()     # header packages on the include path (grader.submission.build.HEADERS)
    own_kernels: tuple[str, ...] = ()  # library kernel names that are this track's own (CUTLASS)
    specializations: int | None = None  # the most Triton specializations its checks may compile
    #                                     (grader.submission.compiles; tests/test_exercises.py)
    shards: int = 1           # on a GPU, its checks run in this many judges at once (each its
    #                           share: grader.judge.plugin), for a track whose compiles are long
    shards_alone: int | None = None  # graded alone (make exercise-NN, make watch-NN), up to this
    #                                  many where the cores allow (grader.run.grade._shares)


@dataclass(frozen=True)
class Threshold:
    metric: str               # "fraction_of_ceiling" or "speedup"
    baseline: str | None      # for "speedup": over which baseline
    mode: str                 # "forward" or "forward_backward"
    pass_at: float            # partial credit starts here
    full_at: float            # full credit from here


@dataclass(frozen=True)
class Benchmark:
    call: str                 # the entry point timed
    inputs: str               # reference.py function: (case, dtype, device, generator) -> args
    model: str                # reference.py function: (case, dtype, mode) -> {"bytes", "flops"}
    ceiling: str              # which measured ceiling the kernel is held to (grader.common.timing)
    dtype: str
    case: dict                # the graded case
    sweep: tuple[dict, ...]   # sizes for `make bench`
    modes: tuple[str, ...]
    grad_args: tuple[int, ...]  # for forward_backward: which positional inputs get gradients
    baselines: tuple[str, ...]  # "eager", "compile", or a function name in reference.py
    peers: tuple[str, ...]      # optional baselines: reported as missing when they fail to import
    thresholds: tuple[Threshold, ...]
    # `make bench` only, never scored: more cases timed beside the graded one ([[benchmark.extra]])
    extras: tuple["Extra", ...] = ()
    wrap: str | None = None     # (an extra's) reference.py function: wrap(op) -> a model around
    #                             the op, compiled whole (torch.compile, fullgraph) on both sides
    # baselines or peers whose reference.py function runs torch.compile itself (05's
    # compiled_composite, 13's flex): compiled ahead like "compile", and, kept, not re-timed
    compiled: tuple[str, ...] = ()

    def compiles(self, name: str) -> bool:
        """Does this baseline compile on its first call (seconds of dynamo and Inductor)?"""
        return name == "compile" or name.startswith("compile:") or name in self.compiled


@dataclass(frozen=True)
class Extra:
    """A case `make bench` times beside the graded one, and never scores: a second entry point
    at its own case (04's reduce_sum_rows), or the op inside a compiled model (06's
    Linear -> rmsnorm -> Linear). Every field not given is the [benchmark]'s."""
    name: str                 # the heading of its table in bench.md
    call: str
    reference: str            # reference.py function: what the baselines run and what the
    #                           timed outputs are validated against (before `wrap`)
    inputs: str
    model: str
    ceiling: str
    dtype: str
    case: dict
    modes: tuple[str, ...]
    grad_args: tuple[int, ...]
    baselines: tuple[str, ...]  # as [benchmark]'s, plus "compile:NAME": torch.compile of NAME
    wrap: str | None


@dataclass(frozen=True)
class Exercise:
    number: str               # "02"
    name: str                 # "scale"
    dir: Path
    title: str
    summary: str
    dtypes: tuple[str, ...]   # the dtypes the op accepts (the benchmark's is one of them)
    tolerance: dict           # dtype -> {"atol": .., "rtol": ..}
    points: dict              # "correctness" / "gradcheck" / "performance" -> int
    tracks: dict              # name -> Track
    benchmark: Benchmark | None
    timeout_s: int            # the whole track: build + checks + benchmark
    test_timeout_s: int       # one check
    allow: tuple[str, ...] = ()  # PyTorch (ATen) ops a submission may call (see grader.common.trust)
    hints: dict = field(default_factory=dict)  # check (test function) -> what to look at

    @property
    def id(self) -> str:      # "02_scale": the folder name, also the folder in a submission tree
        return self.dir.name


# Defaults a spec may override. fp16/bf16 bounds are a few units of the last place of the
# output dtype, since the reference is computed in float64 and then rounded once.
DEFAULT_TOLERANCE = {
    "float64": {"atol": 1e-10, "rtol": 1e-9},
    "float32": {"atol": 1e-5, "rtol": 1e-5},
    "float16": {"atol": 1e-3, "rtol": 2e-3},
    "bfloat16": {"atol": 8e-3, "rtol": 1.6e-2},
}


class _Fields:
    """Typed access to a TOML table that reports `file: dotted.field: problem`."""

    def __init__(self, path: Path, table: dict, prefix: str = ""):
        self.path, self.table, self.prefix = path, table, prefix

    def error(self, key: str, problem: str) -> SpecError:
        rel = self.path.relative_to(ROOT) if self.path.is_relative_to(ROOT) else self.path
        return SpecError(f"{rel}: {self.prefix}{key}: {problem}")

    def get(self, key, kind, default=..., check=None):
        if key not in self.table:
            if default is ...:
                raise self.error(key, "missing (required)")
            return default
        value = self.table[key]
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise self.error(key, f"expected {kind.__name__}, got {type(value).__name__} {value!r}")
        if check is not None:
            problem = check(value)
            if problem:
                raise self.error(key, problem)
        return value

    def strings(self, key, default=..., allowed=None):
        values = self.get(key, list, default)
        for v in values:
            if not isinstance(v, str):
                raise self.error(key, f"expected a list of strings, found {v!r}")
            if allowed is not None and v not in allowed:
                raise self.error(key, f"{v!r} is not one of {', '.join(allowed)}")
        return tuple(values)

    def sub(self, key, default=...) -> "_Fields":
        return _Fields(self.path, self.get(key, dict, default), f"{self.prefix}{key}.")

    def unknown(self, known):
        extra = sorted(set(self.table) - set(known))
        if extra:
            raise self.error(extra[0], f"unknown field (known: {', '.join(sorted(known))})")


def _track(f: _Fields, name: str, exercise_id: str) -> Track:
    f.unknown({"files", "sources", "extension", "python_module", "module", "ops_namespace",
               "entry_points", "cpu", "start", "allow", "arch", "cuda_flags", "headers",
               "own_kernels", "specializations", "shards", "shards_alone"})
    files = f.strings("files")
    if not files:
        raise f.error("files", "at least one file")
    sources = f.strings("sources", ())
    for s in sources:
        if s not in files:
            raise f.error("sources", f"{s!r} is not in {f.prefix}files")
        if not s.endswith((".cu", ".cpp")):
            raise f.error("sources", f"{s!r}: only .cu and .cpp files are built")
    module = f.get("module", str, None)
    if module is not None and module not in files:
        raise f.error("module", f"{module!r} is not in {f.prefix}files")
    namespace = f.get("ops_namespace", str, None)
    if module is None and namespace is None:
        raise f.error("module", "give a Python module or an ops_namespace for the entry points")
    identifier = lambda v: None if re.fullmatch(r"[A-Za-z_]\w*", v) else "not a Python identifier"
    extension = f.get("extension", str, f"{exercise_id}_{name}", identifier)
    if sources and re.fullmatch(r"[A-Za-z_]\w*", extension) is None:
        raise f.error("extension", "not a Python identifier")
    entry_points = f.strings("entry_points")
    if not entry_points:
        raise f.error("entry_points", "at least one entry point")
    return Track(name=name, files=files, sources=sources, extension=extension,
                 python_module=f.get("python_module", bool, False), module=module,
                 ops_namespace=namespace, entry_points=entry_points, cpu=f.get("cpu", bool, False),
                 start=f.get("start", str), allow=_ops_list(f), arch=f.get("arch", str, None),
                 cuda_flags=f.strings("cuda_flags", ()),
                 headers=f.strings("headers", (), allowed=("cutlass",)),
                 own_kernels=f.strings("own_kernels", ()),
                 specializations=f.get("specializations", int, None,
                                       lambda v: None if v > 0 else "must be > 0"),
                 shards=f.get("shards", int, 1, lambda v: None if 1 <= v <= 8 else "1 to 8"),
                 shards_alone=f.get("shards_alone", int, None,
                                    lambda v: None if 1 <= v <= 16 else "1 to 16"))


def _ops_list(f: _Fields) -> tuple[str, ...]:
    ops = f.strings("allow", ())
    for op in ops:
        if re.fullmatch(r"aten::\w+", op) is None:
            raise f.error("allow", f"{op!r}: name ATen ops as aten::name (e.g. aten::sum)")
    return ops


def _threshold(f: _Fields, baselines) -> Threshold:
    f.unknown({"metric", "baseline", "mode", "pass", "full"})
    metric = f.get("metric", str, check=lambda v: None if v in METRICS else f"one of {METRICS}")
    baseline = f.get("baseline", str, None)
    if metric == "speedup" and baseline not in baselines:
        raise f.error("baseline", f"a speedup needs one of the benchmark's baselines {baselines}")
    mode = f.get("mode", str, "forward", lambda v: None if v in MODES else f"one of {MODES}")
    pass_at = f.get("pass", float, check=lambda v: None if v > 0 else "must be > 0")
    full_at = f.get("full", float, check=lambda v: None if v >= pass_at else "must be >= pass")
    return Threshold(metric, baseline, mode, pass_at, full_at)


def _grad_args(f: _Fields, modes, default=...) -> tuple[int, ...]:
    grad_args = tuple(f.get("grad_args", list, [] if default is ... else list(default)))
    if "forward_backward" in modes and not grad_args:
        raise f.error("grad_args", "forward_backward needs the indices of the inputs that get "
                                   "gradients (e.g. [0, 1])")
    if not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in grad_args):
        raise f.error("grad_args", "a list of argument indices (integers >= 0)")
    return grad_args


def _ceiling(f: _Fields, default=...) -> str:
    return f.get("ceiling", str, "bandwidth" if default is ... else default,
                 lambda v: None if v in CEILINGS else f"one of {', '.join(CEILINGS)}")


def _extra(f: _Fields, tracks, b: Benchmark) -> Extra:
    f.unknown({"name", "call", "reference", "inputs", "model", "ceiling", "dtype", "case",
               "modes", "grad_args", "baselines", "wrap"})
    call = f.get("call", str, b.call)
    for track in tracks.values():
        if call not in track.entry_points:
            raise f.error("call", f"{call!r} is not an entry point of track {track.name!r}")
    modes = f.strings("modes", b.modes, MODES)
    for name in f.strings("baselines", ()):
        if name.startswith("compile:") and not name[len("compile:"):].isidentifier():
            raise f.error("baselines", f"{name!r}: compile:NAME names a reference.py function")
    return Extra(
        name=f.get("name", str), call=call, reference=f.get("reference", str, "reference"),
        inputs=f.get("inputs", str, b.inputs), model=f.get("model", str, b.model),
        ceiling=_ceiling(f, b.ceiling),
        dtype=f.get("dtype", str, b.dtype, lambda v: None if v in DTYPES else f"one of {DTYPES}"),
        case=f.get("case", dict, b.case), modes=modes,
        grad_args=_grad_args(f, modes, b.grad_args),
        baselines=f.strings("baselines", b.baselines), wrap=f.get("wrap", str, None))


def _benchmark(f: _Fields, tracks) -> Benchmark:
    f.unknown({"call", "inputs", "model", "ceiling", "dtype", "case", "sweep", "modes",
               "grad_args", "baselines", "peers", "compiled", "threshold", "extra"})
    call = f.get("call", str)
    for track in tracks.values():
        if call not in track.entry_points:
            raise f.error("call", f"{call!r} is not an entry point of track {track.name!r}")
    baselines = f.strings("baselines", ("eager", "compile"))
    modes = f.strings("modes", ("forward",), MODES)
    grad_args = _grad_args(f, modes)
    thresholds = f.get("threshold", list, [])
    b = Benchmark(
        call=call, inputs=f.get("inputs", str), model=f.get("model", str),
        ceiling=_ceiling(f),
        dtype=f.get("dtype", str, check=lambda v: None if v in DTYPES else f"one of {DTYPES}"),
        case=f.get("case", dict), sweep=tuple(f.get("sweep", list, [])),
        modes=modes, grad_args=grad_args, baselines=baselines,
        peers=f.strings("peers", ()),
        compiled=f.strings("compiled", ()),
        thresholds=tuple(_threshold(_Fields(f.path, t, f"{f.prefix}threshold[{i}]."), baselines)
                         for i, t in enumerate(thresholds)),
    )
    for name in b.compiled:
        if name not in b.baselines + b.peers:
            raise f.error("compiled", f"{name!r} is not one of the baselines or peers")
    extras = tuple(_extra(_Fields(f.path, e, f"{f.prefix}extra[{i}]."), tracks, b)
                   for i, e in enumerate(f.get("extra", list, [])))
    return replace(b, extras=extras)


def load_exercise(folder: Path) -> Exercise:
    path = folder / "exercise.toml"
    match = re.fullmatch(r"(\d\d)_([a-z0-9_]+)", folder.name)
    if match is None:
        raise SpecError(f"{folder}: exercise folders are named NN_name (e.g. 02_scale)")
    try:
        table = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise SpecError(f"{path}: missing (every exercise folder declares exercise.toml)") from None
    except tomllib.TOMLDecodeError as e:
        raise SpecError(f"{path}: not valid TOML: {e}") from None
    f = _Fields(path, table)
    f.unknown({"title", "summary", "dtypes", "tolerance", "points", "tracks", "benchmark",
               "timeout_s", "test_timeout_s", "allow", "hints"})
    tolerance = {k: dict(v) for k, v in DEFAULT_TOLERANCE.items()}
    tol = f.sub("tolerance", {})
    for dtype, bounds in tol.table.items():
        if dtype not in DTYPES:
            raise tol.error(dtype, f"not a dtype ({', '.join(DTYPES)})")
        b = tol.sub(dtype)
        b.unknown({"atol", "rtol"})
        tolerance[dtype] = {"atol": b.get("atol", float), "rtol": b.get("rtol", float)}
    points = f.sub("points")
    points.unknown({"correctness", "gradcheck", "performance"})
    pts = {k: points.get(k, int, 0, lambda v: None if v >= 0 else "must be >= 0")
           for k in ("correctness", "gradcheck", "performance")}
    tracks_f = f.sub("tracks")
    if not tracks_f.table:
        raise f.error("tracks", "at least one track")
    tracks = {name: _track(tracks_f.sub(name), name, folder.name) for name in tracks_f.table}
    bench = _benchmark(f.sub("benchmark"), tracks) if "benchmark" in table else None
    dtypes = f.strings("dtypes", allowed=DTYPES)
    if bench is not None and bench.dtype not in dtypes:
        raise f.error("benchmark.dtype", f"{bench.dtype!r} is not one of the exercise's dtypes")
    if pts["performance"] and (bench is None or not bench.thresholds):
        raise f.error("points.performance", "needs a [benchmark] with at least one threshold")
    return Exercise(
        number=match.group(1), name=match.group(2), dir=folder, title=f.get("title", str),
        summary=f.get("summary", str, ""), dtypes=dtypes,
        tolerance=tolerance, points=pts, tracks=tracks, benchmark=bench,
        timeout_s=f.get("timeout_s", int, 900), test_timeout_s=f.get("test_timeout_s", int, 120),
        allow=_ops_list(f), hints=_hints(f.sub("hints", {}), folder),
    )


def _hints(f: "_Fields", folder: Path) -> dict:
    """[hints]: check name (a test function in the exercise's test files) -> one line shown
    under that check's failure. A name that is no check is an error, so hints cannot rot."""
    checks = {m.group(1) for p in folder.glob("test_*.py")
              for m in re.finditer(r"^def (test_\w+)\(", p.read_text(), re.M)}
    for name in f.table:
        if name not in checks:
            raise f.error(name, f"no check of that name in {folder.name}/test_*.py")
    return {name: f.get(name, str) for name in f.table}


def discover(root: Path = EXERCISES, only: str | None = None) -> list[Exercise]:
    """Every exercise under `root`, by number; `only` picks one by number ('02') or folder."""
    folders = sorted(p for p in root.iterdir() if p.is_dir() and re.match(r"\d\d_", p.name))
    if only is not None:
        folders = [p for p in folders if p.name == only or p.name[:2] == only.zfill(2)]
        if not folders:
            known = ", ".join(p.name for p in sorted(root.iterdir()) if re.match(r"\d\d_", p.name))
            raise SpecError(f"no exercise {only!r} (known: {known})")
    return [load_exercise(p) for p in folders]


def known_bad(exercise: Exercise) -> list[KnownBad]:
    """The exercise's known-bad submissions (`wrong/*.toml`, grader.common.known_bad), by name;
    a bad declaration raises KnownBadError naming its file and field."""
    return [load_known_bad(p, exercise.tracks)
            for p in sorted((exercise.dir / "wrong").glob("*.toml"))]
