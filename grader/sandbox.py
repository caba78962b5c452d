"""Sandbox: what keeps a submission's process from changing the grader's world.

- `close_filesystem(roots)`: Linux Landlock makes every path but `roots` read-only for this
  process and its children, and (Landlock ABI 6+) scopes its signals: it cannot signal a process
  outside its own sandbox (the judge, the grader). Where the kernel has no Landlock at all, the
  parent snapshots the repository around each track instead (`Snapshot`).
- `Attempts`: an audit hook that records writes into the repository the submission tried (the
  sandbox refuses them; the record is what the judge reports as tampering).
- `Snapshot`: every file under some roots, restored and named if anything changed.

Nothing here imports torch or another grader module but grader.paths.
"""
from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass, field
from pathlib import Path

from grader.paths import ROOT

_SCOPE_SIGNAL = 1 << 1        # LANDLOCK_SCOPE_SIGNAL (ABI 6, Linux 6.12)


def landlock_abi() -> int:
    """The kernel's Landlock ABI version (0: none, or no `landlock` package)."""
    try:
        import landlock
        return int(landlock.landlock_abi_version())
    except Exception:
        return 0


def landlock_available() -> bool:
    """Can a process here make the file system read-only for itself?"""
    return landlock_abi() >= 1


def close_filesystem(roots: list[Path]) -> str:
    """Make everything but `roots` read-only for this process and its children, and scope its
    signals to its own sandbox. Returns how the sandbox stands, for the scorecard's build line.

    One Landlock layer does both: the `landlock` package's system calls, but the ruleset made
    with the ABI 6 attribute that also names the scopes (the package has none yet; 444 is
    landlock_create_ruleset on every Linux architecture). One layer, because every
    layer denies moving a file between folders unless it allows it beneath both (a second,
    signal-only layer broke Triton's cache, which renames into place)."""
    abi = landlock_abi()
    if abi < 1:
        return "no Landlock here: the repository is checked by hash; signals are not scoped"
    from landlock.plumbing import (PR_SET_NO_NEW_PRIVS, FSAccess, PathBeneathAttr, get_add_rule,
                                   get_prctl, get_restrict_self)
    write = (FSAccess.WRITE_FILE | FSAccess.REMOVE_DIR | FSAccess.REMOVE_FILE | FSAccess.MAKE_CHAR
             | FSAccess.MAKE_DIR | FSAccess.MAKE_REG | FSAccess.MAKE_SOCK | FSAccess.MAKE_FIFO
             | FSAccess.MAKE_BLOCK | FSAccess.MAKE_SYM)
    if abi >= 2:
        write |= FSAccess.REFER
    if abi >= 3:
        write |= FSAccess.TRUNCATE

    class Attr(ctypes.Structure):  # struct landlock_ruleset_attr (ABI 6: with `scoped`)
        _fields_ = [("handled_access_fs", ctypes.c_uint64),
                    ("handled_access_net", ctypes.c_uint64), ("scoped", ctypes.c_uint64)]
    attr = Attr(int(write), 0, _SCOPE_SIGNAL if abi >= 6 else 0)
    size = ctypes.sizeof(attr) if abi >= 6 else ctypes.sizeof(ctypes.c_uint64)
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.syscall(444, ctypes.byref(attr), ctypes.c_size_t(size), 0)  # create_ruleset
    if fd < 0:
        return f"Landlock ABI {abi}, but no ruleset (errno {ctypes.get_errno()}): not sandboxed"
    try:
        for root in roots:
            if root.exists():
                rfd = os.open(root, os.O_PATH)
                try:
                    get_add_rule()(fd, 1, ctypes.byref(PathBeneathAttr(write, rfd)), 0)
                finally:
                    os.close(rfd)
        get_prctl()(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
        get_restrict_self()(fd, 0)
    finally:
        os.close(fd)
    signals = ("signals scoped to the sandbox" if abi >= 6 else
               "signals not scoped (Landlock ABI < 6: the kernel is older than Linux 6.12)")
    return (f"Landlock ABI {abi}: the submission may write only its scratch folder and its "
            f"caches; {signals}")


class Attempts:
    """Writes into the repository that the submission tried (reported to the judge as tampering;
    the sandbox refuses them, and the judge's hash check catches any it could not refuse)."""

    def __init__(self, protected: list[Path], allowed: list[Path]):
        self.protected = [str(p) for p in protected]
        self.allowed = [str(p) for p in allowed]
        self.seen: list[str] = []

    def hook(self, event, args):
        if event == "open" and len(args) >= 2:
            path, mode = args[0], args[1]
            flags = args[2] if len(args) > 2 else 0
            writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
                isinstance(flags, int) and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC))
        elif event in ("os.remove", "os.rename", "os.rmdir", "os.truncate", "shutil.rmtree",
                       "os.replace", "os.chmod", "os.link", "os.symlink"):
            path, writing = args[0] if args else None, True
        else:
            return
        if not writing or not isinstance(path, (str, bytes, os.PathLike)):
            return
        try:
            p = os.path.abspath(os.fsdecode(path))
        except Exception:
            return
        if any(p.startswith(a) for a in self.allowed):
            return
        if any(p.startswith(r) for r in self.protected) and len(self.seen) < 20:
            self.seen.append(f"{event} {p}")


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
