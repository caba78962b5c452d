"""Snapshot: where this machine has no Landlock, every file of the repository (and the measured
ceilings), taken before a judge runs and restored after it: what changed is restored and named,
and reported as tampering (grader.run.tracks).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from grader.common.paths import ROOT

SKIP_DIRS = {".git", ".venv", ".hypothesis", "__pycache__", ".whl", ".gl", "node_modules"}


@dataclass
class Snapshot:
    """Every file under `roots` (minus caches), with its bytes, taken before a track runs."""
    roots: list
    skip: set = field(default_factory=set)      # folders and files left out (caches)
    files: dict = field(default_factory=dict)   # path -> bytes

    @classmethod
    def take(cls, roots, *, skip: set = frozenset()) -> "Snapshot":
        snap = cls([Path(r) for r in roots], set(skip))
        for root in snap.roots:
            for path in _walk(root, skip):
                try:
                    snap.files[path] = path.read_bytes()
                except OSError:
                    pass
        return snap

    def restore(self) -> list[str]:
        """Undo every change since the snapshot; return what had changed (relative paths)."""
        changed = []
        now = set()
        for root in self.roots:
            now.update(_walk(root, self.skip))
        for path, data in self.files.items():
            try:
                same = path.read_bytes() == data
            except OSError:
                same = False
            if not same:
                changed.append(path)
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(data)
        for path in now - set(self.files):
            changed.append(path)
            try:
                path.unlink()
            except OSError:
                pass
        return [_rel(p) for p in sorted(set(changed))]


def _walk(root: Path, skip):
    if root.is_file():
        yield root
        return
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in SKIP_DIRS
                       and os.path.join(dirpath, d) not in skip]
        for name in filenames:
            p = Path(dirpath) / name
            if str(p) not in skip and not name.endswith(".pyc"):
                yield p


def _rel(p: Path) -> str:
    return str(p.relative_to(ROOT)) if p.is_relative_to(ROOT) else str(p)
