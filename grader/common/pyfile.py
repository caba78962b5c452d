"""Import one Python file as a module, with a learner-readable error (file:line) on failure.

Used for a submission's track module (grader.submission.loader) and an exercise's reference.py
(grader.common.reference); it imports no other grader module.
"""
from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
import traceback
from pathlib import Path


class LoadError(RuntimeError):
    """The submission could not be imported, or lacks an entry point; written for the learner."""


class SourceOnlyLoader(importlib.machinery.SourceFileLoader):
    """Compiles a file from its source at every import: it reads no bytecode (a __pycache__
    shipped in a tree may hold a .pyc that does not match its source) and writes none (the
    learner's tree stays as it was)."""

    def path_stats(self, path):
        raise OSError("no bytecode for this file")  # SourceLoader.get_code: compile the source


def source_only_under(root: Path) -> None:
    """Every module imported from a folder under `root` (a track's sibling modules, its
    packages) loads through SourceOnlyLoader; everything else (the installed torch, triton, the
    grader) reads its own bytecode, as in any Python process. A process-wide bytecode prefix
    would do the first too, but would compile all of torch from source in every submission's
    process (2 s of CPU per track on the 2-core machine, where a CPU check takes 5)."""
    root = Path(root).resolve()
    m = importlib.machinery  # the default FileFinder's loaders, in its order, but the source's
    loaders = [(m.ExtensionFileLoader, m.EXTENSION_SUFFIXES), (SourceOnlyLoader, m.SOURCE_SUFFIXES),
               (m.SourcelessFileLoader, m.BYTECODE_SUFFIXES)]

    def hook(entry: str):
        if not Path(entry or ".").resolve().is_relative_to(root):
            raise ImportError("not under the submission's tree")  # the next hook's
        return importlib.machinery.FileFinder(entry, *loaders)
    sys.path_hooks.insert(0, hook)
    sys.path_importer_cache.clear()


def import_file(path: Path, name: str):
    """Import one file as module `name`; a failure is a LoadError naming the file and line."""
    sys.dont_write_bytecode = True  # leave no __pycache__ in the learner's tree
    sys.path.insert(0, str(path.parent))  # sibling imports of the track folder work
    spec = importlib.util.spec_from_file_location(name, path,
                                                  loader=SourceOnlyLoader(name, str(path)))
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as e:
        del sys.modules[name]
        frames = [f for f in traceback.extract_tb(e.__traceback__) if f.filename == str(path)]
        where = f"{path.name}:{frames[-1].lineno}: " if frames else ""
        if isinstance(e, SyntaxError) and e.filename == str(path):
            where = f"{path.name}:{e.lineno}: "
        raise LoadError(f"importing {path.name} failed: {where}{type(e).__name__}: {e}") from None
    return module
