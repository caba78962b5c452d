"""Import one Python file as a module, with a learner-readable error (file:line) on failure.

Used for a submission's track module (grader.loader) and an exercise's reference.py
(grader.reference); it imports no other grader module.
"""
from __future__ import annotations

import importlib.util
import sys
import traceback
from pathlib import Path


class LoadError(RuntimeError):
    """The submission could not be imported, or lacks an entry point; written for the learner."""


def import_file(path: Path, name: str):
    """Import one file as module `name`; a failure is a LoadError naming the file and line."""
    sys.dont_write_bytecode = True  # leave no __pycache__ in the learner's tree
    sys.path.insert(0, str(path.parent))  # sibling imports of the track folder work
    spec = importlib.util.spec_from_file_location(name, path)
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
