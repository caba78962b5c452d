"""Sandbox: what keeps a submission's process from changing the grader's world.

- `close_filesystem(roots)`: Linux Landlock makes every path but `roots` read-only for this
  process and its children, and fences its signals: it cannot signal a process outside its own
  sandbox (the judge, the grader). The fence is Landlock's signal scope (ABI 6+); where the
  kernel is older, a seccomp filter (`fence_signals`, libseccomp). With the signal scope comes
  the abstract Unix socket scope: no connect() to an abstract socket made outside the sandbox
  (the kept zygotes', grader.run.keeper).
- `Attempts`: an audit hook that records writes into the repository the submission tried (the
  sandbox refuses them; the record is what the judge reports as tampering).
Where the kernel has no Landlock at all, the grade process snapshots the repository instead
(grader.run.snapshot). Nothing here imports torch.
"""
from __future__ import annotations

import ctypes
import os
from pathlib import Path

from grader.common.machine import landlock_abi
from grader.common.settings import current

_SCOPE_SIGNAL = 1 << 1        # LANDLOCK_SCOPE_SIGNAL (ABI 6, Linux 6.12)
_SCOPE_ABSTRACT = 1 << 0      # LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET (ABI 6): no connect() to an
#                               abstract socket made outside the sandbox (grader.run.keeper's)


def close_filesystem(roots: list[Path], signals: str | None = None) -> str:
    """Make everything but `roots` read-only for this process and its children, and fence its
    signals (`signals`: "auto", Landlock's scope where the kernel has it, else the seccomp
    filter; "seccomp": the filter even there; default: the grade's settings). Returns how the
    sandbox stands, for the line under the scorecard: "...; signals: Landlock scope
    (...); abstract sockets: Landlock scope (...)" / "signals: seccomp filter" / "signals: none
    (why)".

    One Landlock layer does the file system and the scope: the `landlock` package's system
    calls, but the ruleset made with the ABI 6 attribute that also names the scopes (the package
    has none yet; 444 is landlock_create_ruleset on every Linux architecture). One layer,
    because every layer denies moving a file between folders unless it allows it beneath both
    (a second, signal-only layer broke Triton's cache, which renames into place)."""
    if signals is None:
        signals = current().signals
    if signals not in ("auto", "seccomp"):
        raise ValueError(f"signals = {signals!r}: auto or seccomp")
    abi = landlock_abi()
    scope = abi >= 6 and signals == "auto"
    files = _landlock(roots, abi, scope)
    if files is None:
        files = f"Landlock ABI {abi}: the submission may write only its scratch folder and its caches"
    else:
        scope = False
    if scope:
        return (f"{files}; signals: Landlock scope (it cannot signal the judge or the grader); "
                f"abstract sockets: Landlock scope (it cannot connect to the grader's)")
    why = ("forced by the settings, signals = seccomp" if signals == "seccomp" and abi >= 6 else
           f"Landlock ABI {abi} has no signal scope, Linux 6.12+" if abi else
           "no Landlock signal scope")
    refused = fence_signals()
    if refused is None:
        return (f"{files}; signals: seccomp filter ({why}): it cannot signal another process, "
                f"the judge and the grader included")
    return (f"{files}; signals: none ({why}; no seccomp filter: {refused}): a submission that "
            f"kills the grader ends the grade without a scorecard")


def _landlock(roots: list[Path], abi: int, scope: bool) -> str | None:
    """The Landlock layer (file system; and, with `scope`, signals). None when it is on, else
    what stands instead (the repository is then checked by hash: grader.run.tracks)."""
    if abi < 1:
        return "no Landlock here: the repository is checked by hash"
    # only where the kernel has Landlock (above): the package is absent on some machines
    from landlock.plumbing import (
        PR_SET_NO_NEW_PRIVS,
        FSAccess,
        PathBeneathAttr,
        get_add_rule,
        get_prctl,
        get_restrict_self,
    )
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
    attr = Attr(int(write), 0, _SCOPE_SIGNAL | _SCOPE_ABSTRACT if scope else 0)
    size = ctypes.sizeof(attr) if abi >= 6 else ctypes.sizeof(ctypes.c_uint64)
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.syscall(444, ctypes.byref(attr), ctypes.c_size_t(size), 0)  # create_ruleset
    if fd < 0:
        return (f"Landlock ABI {abi}, but no ruleset (errno {ctypes.get_errno()}): the "
                f"repository is checked by hash")
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
    return None


# --- the signal fence where Landlock has no signal scope -----------------------------------------
#
# A seccomp filter, built by libseccomp (libseccomp.so.2, in every distribution: systemd needs
# it) through ctypes rather than a Python binding: the PyPI bindings are thin ctypes wrappers of
# the same library (pyseccomp: one release, 2021), and the GPU machines use a ready python3
# where nothing is installed; libseccomp is the kept part, and it writes the BPF (the
# architecture check, x32, 64-bit argument comparisons), which a hand-assembled program would
# have to get right alone. Every call that signals a process by number is refused (EPERM, the
# caller is not killed) unless the number is this process's own: kill, tkill, tgkill (a
# thread-group id), rt_sigqueueinfo, rt_tgsigqueueinfo; so 0, -1 and -pgid (groups, every
# process) are refused too. pidfd_send_signal is refused outright (a pidfd, or an open /proc/PID
# folder, names any process), as are F_SETOWN to another process and F_SETOWN_EX / FIOSETOWN /
# SIOCSPGRP (SIGIO and SIGURG to a chosen owner), ptrace and process_vm_writev (a traced judge
# can be killed or rewritten; Landlock confines them where it is on). Signal 0 (a probe that
# delivers nothing) stays allowed. Python's own signals (os.kill of itself, raise, pthread_kill
# of its threads: tgkill with its own thread-group id) and CUDA's and Triton's threads work as
# before. What it costs: the filter holds the number of the process that installed it, so its
# children (a build's compilers) can signal only that process, not even themselves, and it
# cannot kill a child (subprocess's timeout); none of the grader's children does either.

_ALLOW = 0x7FFF0000                                   # SCMP_ACT_ALLOW
_EPERM = 0x00050000 | 1                               # SCMP_ACT_ERRNO(EPERM)
_NE, _EQ, _MASKED_EQ = 1, 4, 7                        # enum scmp_compare
_ATTR_BADARCH, _ATTR_TSYNC = 2, 4                     # enum scmp_filter_attr
_F_SETOWN, _F_SETOWN_EX, _FIOSETOWN, _SIOCSPGRP = 8, 15, 0x8901, 0x8902


class _ArgCmp(ctypes.Structure):  # struct scmp_arg_cmp
    _fields_ = [("arg", ctypes.c_uint), ("op", ctypes.c_int), ("datum_a", ctypes.c_uint64),
                ("datum_b", ctypes.c_uint64)]


def _signal_rules(me: int) -> list[tuple[str, list[tuple[int, int, int, int]]]]:
    """(system call, [(argument, comparison, a, b), ...]): each is refused when all of its
    comparisons hold. A pid compared on all 64 bits: only this process's number exactly is let
    through (upper bits the kernel drops make any other value, refused)."""
    u32 = 0xFFFFFFFF  # a command the kernel reads as a 32-bit int: compare those bits only
    return [
        ("kill", [(0, _NE, me, 0), (1, _NE, 0, 0)]),
        ("tkill", [(0, _NE, me, 0), (1, _NE, 0, 0)]),
        ("tgkill", [(0, _NE, me, 0), (2, _NE, 0, 0)]),
        ("rt_sigqueueinfo", [(0, _NE, me, 0)]),
        ("rt_tgsigqueueinfo", [(0, _NE, me, 0)]),
        ("pidfd_send_signal", []),
        ("fcntl", [(1, _MASKED_EQ, u32, _F_SETOWN), (2, _NE, me, 0)]),
        ("fcntl", [(1, _MASKED_EQ, u32, _F_SETOWN_EX)]),
        ("ioctl", [(1, _MASKED_EQ, u32, _FIOSETOWN)]),
        ("ioctl", [(1, _MASKED_EQ, u32, _SIOCSPGRP)]),
        ("ptrace", []),
        ("process_vm_writev", []),
    ]


def fence_signals() -> str | None:
    """Install the seccomp filter above on this process (all its threads) and its future
    children. None when it is on; otherwise why not (nothing is installed then)."""
    try:
        lib = ctypes.CDLL("libseccomp.so.2", use_errno=True)
    except OSError:
        return "libseccomp.so.2 is not installed"
    lib.seccomp_init.restype = ctypes.c_void_p
    lib.seccomp_init.argtypes = [ctypes.c_uint32]
    lib.seccomp_release.argtypes = [ctypes.c_void_p]
    lib.seccomp_attr_set.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32]
    lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    lib.seccomp_rule_add_array.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int,
                                           ctypes.c_uint, ctypes.POINTER(_ArgCmp)]
    lib.seccomp_load.argtypes = [ctypes.c_void_p]
    ctx = lib.seccomp_init(_ALLOW)
    if not ctx:
        return "seccomp_init failed"
    try:
        # every thread at once (torch's are running already); a foreign ABI (int 0x80, x32)
        # gets EPERM for every call, as the refused calls do, instead of a killed thread
        for attr, value in ((_ATTR_TSYNC, 1), (_ATTR_BADARCH, _EPERM)):
            rc = lib.seccomp_attr_set(ctx, attr, value)
            if rc < 0:
                return f"libseccomp refused filter attribute {attr} ({os.strerror(-rc)})"
        for name, cmps in _signal_rules(os.getpid()):
            nr = lib.seccomp_syscall_resolve_name(name.encode())
            if nr < 0:
                return f"libseccomp does not know {name}"
            array = (_ArgCmp * max(len(cmps), 1))(*[_ArgCmp(*c) for c in cmps])
            rc = lib.seccomp_rule_add_array(ctx, _EPERM, nr, len(cmps), array)
            if rc < 0:
                return f"libseccomp refused the rule for {name} ({os.strerror(-rc)})"
        rc = lib.seccomp_load(ctx)
        if rc < 0:
            return f"the kernel refused the filter ({os.strerror(-rc)})"
    finally:
        lib.seccomp_release(ctx)
    return None


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
