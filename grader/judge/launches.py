"""Launches: the judge's side of the launch records, an evidence path a Python patch in the
submission's process cannot reach, and its cross-check with the profiler's report.

The records are made by the grader's C++ extension in the submission's process
(grader/submission/launches.cpp: CUPTI's launch callbacks, loaded before any submission code) and
written straight into a socket of this process's making, never through a Python object there.
Each record carries this grade's secret, which only the extension holds, and a sequence number:
a line written into the socket from Python is a forgery, a missing or injected one a gap. Each
observed call of the op is one window of launches: every kernel launched in it, its stream, the
grader's own marker kernel among them.

After each reply, `Records.after` takes the windows it brought and holds each against the
profiler's report of the same call (its `observed` kernels, made in that process, which a patch
there can rewrite): a kernel the records show that the report lacks, one it lists that was never
launched, or one moved to another stream, is TAMPERING, named. A call the profiler reported
without a window, or a window no call owns, is too. One disagreement is not settled at once:
a report that only lacks kernels the records show (every kernel it lists was launched) is what
the profiler itself does now and then, dropping activity records it judges outside its window
(PyTorch issue 192021; once in four scorecards of the solutions on an H200, 2026-12-01, three of
07's four elementwise kernels of one backward). Such a call is observed again (`pending`,
grader.judge.proxy): lacking kernels again is TAMPERING; a report that then agrees is the
profiler's, and its evidence is the one judged. Where the records cannot be had (no GPU, no
CUPTI, no compiler, a compute-sanitizer run) they say "unavailable: why", before any submission
code runs, and nothing is accused. What they cannot prove (the ATen ops, C code in the process):
the README's trust table.

Imported by grader.judge.spawn before torch: torch is imported only where a name is demangled.
"""
from __future__ import annotations

import hmac
import secrets
import select
import socket
import threading
from dataclasses import dataclass, field

from grader.judge.launches_build import built

REWRITTEN = "the profiler's report was rewritten: "
FORGED = "the launch records were forged: "
STOPPED = "the launch records stopped: "


@dataclass
class Launch:
    stream: str   # "s<CUPTI stream id>", or "-" (unknown)
    flags: str    # M: the grader's marker kernel; T: the name was cut
    name: str     # as the profiler names it; "?" unknown


@dataclass
class Window:
    number: int
    launches: list = field(default_factory=list)
    graphs: int = 0  # CUDA graph launches: their kernels are not seen one by one


def open_records(why_not: str | None = None):
    """(Records, the descriptor for the submission's process or None, the preamble's payload),
    for one submission's process. `why_not`: the caller knows there can be none."""
    so, why = (None, why_not) if why_not else built()
    if so is None:
        return Records(None, "", why), None, {"off": why}
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    secret = secrets.token_hex(16)
    ours.send(f"S {secret}".encode())  # read by the extension first thing, in C
    records = Records(ours, secret)
    return records, theirs.detach(), {"so": str(so)}


class Records:
    """What the extension of one submission's process wrote, read as it comes (a thread: a call
    with many launches must not fill the socket and stall), and judged after each reply."""

    def __init__(self, sock: socket.socket | None, secret: str, why: str = ""):
        self.sock, self.secret = sock, secret
        self.state = "waiting" if sock is not None else "unavailable"
        self.reason = why
        self.findings: list[str] = []
        self.pending: list[str] = []  # the last reply's calls whose reports only lacked kernels
        self._told = 0            # findings already returned by `after`
        self.checked = 0          # calls cross-checked against the profiler's report
        self.replies = 0
        self._seq = 0
        self._raw: list[tuple[str, str]] = []   # (kind, rest), in order, not yet taken
        self._window: Window | None = None      # open
        self._done: list[Window] = []           # closed, not yet matched to a call
        self._last = 0                          # the last window's number
        self.last: Window | None = None         # the last window judged (for a reader's eyes)
        self._lock = threading.Lock()
        if sock is not None:
            sock.setblocking(False)
            threading.Thread(target=self._read, daemon=True, name="launch records").start()

    # reading ------------------------------------------------------------------------------

    def _read(self) -> None:
        while True:
            try:
                select.select([self.sock], [], [])
            except (OSError, ValueError):
                return
            with self._lock:
                if not self._drain():
                    return

    def _drain(self) -> bool:
        """Take what the socket holds; False once it is closed."""
        while True:
            try:
                data = self.sock.recv(1 << 16)
            except BlockingIOError:
                return True
            except OSError:
                return False
            if not data:
                return False
            self._take(data.decode("utf-8", "replace"))

    def _take(self, text: str) -> None:
        parts = text.split(" ", 3)
        if len(parts) < 3 or not hmac.compare_digest(parts[0], self.secret):
            self._found(FORGED + f"a record without this grade's secret arrived ({text[:80]!r})")
            return
        seq = int(parts[1]) if parts[1].isdigit() else -1
        if seq != self._seq + 1:
            self._found(FORGED + f"record {seq} came after record {self._seq}")
        self._seq = max(self._seq, seq)
        self._raw.append((parts[2], parts[3] if len(parts) > 3 else ""))

    def _found(self, why: str) -> None:
        if why not in self.findings:
            self.findings.append(why)

    # judging ------------------------------------------------------------------------------

    def after(self, op: str, payload: dict, reply: dict) -> list[str]:
        """The findings (TAMPERING) this reply brings to light; records read up to it. Every
        record of a call is written before its reply is sent, so the socket holds them now."""
        if self.sock is None:
            return []
        with self._lock:
            self.pending = []  # a reply's own: taken by the proxy right after it (take_pending)
            self._drain()
            for kind, rest in self._raw:
                self._step(kind, rest)
            self._raw.clear()
            self.replies += 1
            if self.replies == 1 and self.state in ("waiting", "armed"):
                # set up before any submission code ran: by the first reply it said one or other
                self.reason = ("the extension did not start (the submission's log says why)"
                               if self.state == "waiting" else "its set-up did not finish")
                self.state = "unavailable"
            if self.state == "ready":
                self._judge(op, payload, reply)
            self._done.clear()
            new, self._told = self.findings[self._told:], len(self.findings)
            return new

    def _step(self, kind: str, rest: str) -> None:
        if kind == "A":
            self.state = "armed" if self.state == "waiting" else self.state
        elif kind in ("R", "U") and self.state == "armed":
            self.state, self.reason = ("ready" if kind == "R" else "unavailable"), rest
        elif kind in ("R", "U"):
            self._found(FORGED + f"the extension said {kind} {rest[:60]!r} after its set-up")
        elif kind in ("B", "E", "L", "G", "F"):
            self._window_step(kind, rest)
        else:
            self._found(FORGED + f"a record of unknown kind {kind!r}")

    def _window_step(self, kind: str, rest: str) -> None:
        fields = rest.split(" ", 3)
        number = int(fields[0]) if fields[0].isdigit() else -1
        ready = self.state == "ready"
        if kind == "B":
            if ready and self._window is not None:
                self._found(STOPPED + f"window {number} opened inside window "
                                      f"{self._window.number}")
            if number != self._last + 1:
                self._found(FORGED + f"window {number} came after window {self._last}")
            self._last = number
            self._window = Window(number) if ready else None
            return
        if not ready:  # the set-up's own self-test, before the records were ready
            return
        w = self._window
        if w is None or w.number != number:
            self._found(STOPPED + f"a {kind} record for window {number}, which is not open")
        elif kind == "L" and len(fields) == 4:
            w.launches.append(Launch(fields[1], fields[2], fields[3]))
        elif kind == "G":
            w.graphs += 1
        elif kind == "F":
            self._found(STOPPED + f"CUPTI refused the grader's launch callbacks inside a call "
                                  f"({rest[len(fields[0]) + 1:][:200]}): something in the "
                                  f"process tore CUPTI down")
        elif kind == "E":
            count = int(fields[1]) if len(fields) > 1 and fields[1].isdigit() else -1
            if count != len(w.launches) + w.graphs:
                self._found(FORGED + f"window {number} counted {count} launches, its records "
                                     f"{len(w.launches) + w.graphs}")
            self._done.append(w)
            self._window = None

    def _judge(self, op: str, payload: dict, reply: dict) -> None:
        if not reply.get("ok"):
            return  # the call raised (mid-way, maybe): its windows prove nothing either way
        what = _what(op, payload)
        if self._window is not None:
            self._found(STOPPED + f"{what}: a window of launches was still open at its reply")
        seen = reply.get("observed")
        calls = [o for o in (seen if op == "twice" else [seen]) if isinstance(o, dict)] \
            if op in ("call", "twice", "backward") else []
        if len(calls) != len(self._done):
            self._found(STOPPED + f"{what}: the profiler reported {len(calls)} observed "
                                  f"call(s), the launch records hold {len(self._done)}")
            return
        for w, observed in zip(self._done, calls):
            why = compare(w, observed)
            self.last = w
            if why and only_lacks(w, observed):
                self.pending.append(REWRITTEN + f"{what}: {why}")
            elif why:
                self._found(REWRITTEN + f"{what}: {why}")
            self.checked += 1

    def take_pending(self) -> list[str]:
        """The last reply's lacks-only disagreements, taken (grader.judge.proxy observes the
        call again, then holds them as TAMPERING or lets them go)."""
        taken, self.pending = self.pending, []
        return taken

    def confirm(self, why: list[str]) -> list[str]:
        """Disagreements that stood a second look: findings from now on. Returns the new ones."""
        with self._lock:
            before = len(self.findings)
            for w in why:
                self._found(w)
            new = self.findings[before:]
            self._told = len(self.findings)
            return new

    def summary(self) -> str:
        how = self.state + (f" ({self.reason})" if self.reason else "")
        return (f"launch records: {how}; {self.checked} observed calls cross-checked with the "
                f"profiler's report; {len(self.findings)} disagreement(s)")


def _what(op: str, payload: dict) -> str:
    target = payload.get("target")
    name = target[1] if isinstance(target, (list, tuple)) and len(target) > 1 else None
    return {"backward": "a backward", "twice": f"two calls of {name}()"}.get(
        op, f"a call of {name}()" if name else f"a {op} request")


# --- the cross-check ------------------------------------------------------------------------

def compare(window: Window, observed: dict) -> str | None:
    """Why the profiler's report of one call disagrees with its launch records, or None.

    Kernels are compared by name (the function's qualified name, without its template
    arguments and parameters: the profiler and CUPTI spell the rest alike, but a difference of
    spelling must never accuse anyone) and by stream, as "the caller's" (the grader's marker
    kernel's) or "another". A window with a CUDA graph launch only needs the report to hold the
    records' kernels: the graph's own kernels are not launched one by one."""
    marks = [l for l in window.launches if "M" in l.flags]
    if len(marks) != 1:
        return f"the grader's marker kernel was recorded {len(marks)} times (once expected)"
    if observed.get("stream") is None:
        return ("the report lacks the grader's own marker kernel, which the launch records "
                "show on the caller's stream")
    records, report = _keyed(window, marks[0], observed)
    left = list(report)
    # the most specific first: a known name and stream, then a known name, then an unknown name
    for key, mine in sorted(records, key=lambda r: (r[0] == "?", r[1] is None)):
        hit = next((i for i, (k, theirs) in enumerate(left)
                    if key in ("?", k) and mine in (None, theirs)), None)
        if hit is None:
            n = sum(1 for r in records if r[0] == key)
            m = sum(1 for r in report if r[0] == key)
            return (f"the launch records show {key} launched {n} time(s) ({_where(mine)}), "
                    f"the report lists it {m} time(s)")
        left.pop(hit)
    if left and not window.graphs:
        key, theirs = left[0]
        return (f"the report lists {key} ({_where(theirs)}), which the launch records show "
                f"was never launched")
    return None


def only_lacks(window: Window, observed: dict) -> bool:
    """Does the report of this call only lack kernels the records show (the marker there, and
    every kernel it lists matched by a launch): what the profiler's own dropped records look
    like, not a rename, an invention or a move, which a drop cannot make."""
    marks = [l for l in window.launches if "M" in l.flags]
    if observed.get("stream") is None or len(marks) != 1:
        return False
    records, report = _keyed(window, marks[0], observed)
    for key, theirs in sorted(report, key=lambda r: r[0] == "?"):
        hit = next((i for i, (k, mine) in enumerate(records)
                    if k in ("?", key) and mine in (None, theirs)), None)
        if hit is None:
            return False
        records.pop(hit)
    return bool(records)


def _keyed(window: Window, mark: Launch, observed: dict) -> tuple[list, list]:
    """(the records' kernels, the report's), each (its name's key, on the caller's stream:
    True, False, or None where a stream is unknown), the marker left out."""
    records = [(kernel_key(l.name), None if "-" in (l.stream, mark.stream)
                else l.stream == mark.stream) for l in window.launches if l is not mark]
    report = [(kernel_key(str(k[0])), k[1] == observed["stream"])
              for k in observed.get("kernels") or []]
    return records, report


def _where(on_caller: bool | None) -> str:
    return {True: "on the caller's stream", False: "on another stream"}.get(on_caller,
                                                                              "on its stream")


def kernel_key(name: str) -> str:
    """A kernel's qualified name without return type, template arguments or parameters:
    'void at::native::vectorized_elementwise_kernel<4, ...>(int, ...)' ->
    'at::native::vectorized_elementwise_kernel'; a Triton kernel's plain name as it is."""
    name = name.strip()
    if name.startswith("_Z"):  # a mangled name (the profiler keeps those past 8192 bytes)
        name = _demangle(name)
    name = name.replace("(anonymous namespace)", "{anonymous}")
    if name.startswith("void "):
        name = name[5:]
    cuts = [i for i in (name.find("<"), name.find("(")) if i > 0]
    return name[:min(cuts)].strip() if cuts else name


def _demangle(name: str) -> str:
    import torch  # only here: this module is imported before torch (grader.judge.spawn)
    try:
        return torch._C._demangle(name)
    except (AttributeError, RuntimeError):
        return name
