"""Loader: the one loader of a submission's track, run in the submission's process.

`load_track(tree, exercise, track)` builds the track's C++/CUDA sources (if any), imports its
Python module (if any) and returns an `Impl` whose attributes are the declared entry points. The
checks never see it: they call grader.judge.proxy.RemoteImpl in the judge, whose every call crosses the
wire (grader.common.seam) to this `Impl`; so a learner's layout can change without touching a check.
"""
from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import torch

from grader.common.discover import Exercise, Track
from grader.common.errors import Mismatch
from grader.common.pyfile import LoadError, import_file
from grader.common.reference import load_reference
from grader.common.settings import current
from grader.submission.aot import load_aot
from grader.submission.build import Built, build
from grader.submission.build_errors import BuildError


class Impl(SimpleNamespace):
    """The entry points of one track, plus what the grader learnt while loading it.

    Besides the entry points (`impl.add(x, y)`), the checks may ask for:
      impl.op("ns::name")                   a registered op, callable
      impl.opcheck("ns::name", args, kw)    torch.library.opcheck of it; Mismatch if it fails
      impl.compiled(entry, *args, wrap=..)  torch.compile(fullgraph=True) of the entry point, or
                                            of reference.<wrap>(entry) (a model around it)
    all run where the submission runs.
    """

    def __repr__(self) -> str:  # short: hypothesis prints it in every failing example
        names = [k for k in vars(self) if not k.startswith("_")]
        return f"Impl({self._folder.parent.name}/{self._folder.name}: {', '.join(names)})"

    def op(self, qualname: str):
        ns, name = qualname.split("::")
        return getattr(getattr(torch.ops, ns), name)

    def opcheck(self, qualname: str, args: tuple, kwargs: dict | None = None,
                test_utils: tuple | None = None) -> None:
        op = self.op(qualname)
        overload = op.default if hasattr(op, "default") else op
        try:
            if test_utils:
                torch.library.opcheck(overload, tuple(args), dict(kwargs or {}),
                                      test_utils=tuple(test_utils))
            else:
                torch.library.opcheck(overload, tuple(args), dict(kwargs or {}))
        except Exception as e:  # opcheck raises OpCheckError and others: say which test failed
            raise Mismatch(f"torch.library.opcheck({qualname}) failed: {type(e).__name__}: "
                           f"{str(e)[:1500]}") from None

    def compiled(self, entry: str, *args, wrap: str | None = None):
        fn = getattr(self, entry)
        if wrap is not None:
            fn = getattr(self._reference, wrap)(fn)
        key = (entry, wrap)
        cache = self.__dict__.setdefault("_compiled", {})
        if key not in cache:
            cache[key] = torch.compile(fn, fullgraph=True)
        try:
            return cache[key](*args)
        except Exception as e:
            text = f"{type(e).__name__}: {str(e)[:1500]}"
            if "graph break" in text.lower() or "Unsupported" in type(e).__name__:
                raise Mismatch(f"torch.compile(fullgraph=True) hit a graph break: {text}. "
                               f"Register the op with the dispatcher (triton_op / "
                               f"TORCH_LIBRARY), give it a fake kernel, and call it through "
                               f"torch.ops") from None
            raise


_LOADED: dict[tuple, Impl] = {}


def load_track(tree: Path, exercise: Exercise, track: Track, early: Path | None = None) -> Impl:
    """The track, built and imported (once per process). `early`: the report of the early
    rebuild started for this process (grader.submission.early)."""
    key = (str(Path(tree).resolve()), exercise.id, track.name)
    if key not in _LOADED:
        _LOADED[key] = _load(Path(tree).resolve(), exercise, track, early)
    return _LOADED[key]


def _load(tree: Path, exercise: Exercise, track: Track, early: Path | None) -> Impl:
    folder = tree / exercise.id / track.name
    missing = [f for f in track.files if not (folder / f).is_file()]
    if missing:
        raise LoadError(f"missing file(s) in {folder}: {', '.join(missing)}")
    built: Built | None = _build(tree, exercise, track, early) if track.sources else None
    if built is not None and built.module is not None:
        # lets the track's Python file say `import <extension>` as after a setup.py install
        sys.modules[track.extension] = built.module
    module = None
    if track.module:
        module = import_file(folder / track.module, f"submission_{exercise.id}_{track.name}")
    entry = {}
    for name in track.entry_points:
        if module is not None:
            if not hasattr(module, name):
                raise LoadError(f"{track.module} does not define `{name}` (an entry point the "
                                f"checks call; see the exercise README)")
            entry[name] = getattr(module, name)
        else:
            namespace = getattr(torch.ops, track.ops_namespace)
            try:
                entry[name] = getattr(namespace, name)
            except (AttributeError, RuntimeError):
                raise LoadError(f"no operator {track.ops_namespace}::{name} is registered: "
                                f"check the TORCH_LIBRARY({track.ops_namespace}, m) block and "
                                f"its m.def(\"{name}(...) -> ...\")") from None
    return Impl(**entry, _built=built, _module=module, _folder=folder,
                _reference=load_reference(exercise))


def _build(tree: Path, exercise: Exercise, track: Track, early: Path | None) -> Built:
    """How C++/CUDA sources become a library (Settings.build): "jit" (torch.utils.cpp_extension
    .load, the default) or "aot" (a setup.py-style build loaded as a shipped binary)."""
    mode = current().build
    if mode == "jit":
        return build(tree, exercise, track, early)
    if mode == "aot":
        return load_aot(tree, exercise, track)
    raise BuildError(f"build mode {mode!r}: use jit or aot")
