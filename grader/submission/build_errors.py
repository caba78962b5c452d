"""Build errors: a failed build told as a learner needs it.

`summarize_compiler_output` cuts a compiler's output to the first real errors, with file, line and
the offending source line (learner files first), not the whole template backtrace;
`explain_load_error` turns a library that built but does not load into its likely cause.
"""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path


class BuildError(RuntimeError):
    """The sources did not compile or link; the message is written for the learner."""


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
    out += _include_notes(msg for _, _, msg in errors)
    return "\n".join(out)


# std names a `.cu` file may have used through common.cuh before it stopped including <string>
# and <stdexcept> (0.4-0.6 s of every kernel file's compile: nvcc parses the host side three
# times), and the header each needs now
_HEADERS = {"runtime_error": "stdexcept", "invalid_argument": "stdexcept",
            "logic_error": "stdexcept", "out_of_range": "stdexcept", "domain_error": "stdexcept",
            "string": "string", "to_string": "string"}
_NOT_IN_STD = re.compile(r"""namespace "std" has no member "(\w+)"|"""  # nvcc
                         r"""'(\w+)' is not a member of 'std'""")           # gcc


def _include_notes(messages) -> list[str]:
    """A missing std name's header, said once each."""
    wanted = {}
    for msg in messages:
        for m in _NOT_IN_STD.finditer(msg):
            name = m.group(1) or m.group(2)
            if name in _HEADERS:
                wanted.setdefault(_HEADERS[name], name)
    return [f"  note: std::{name} needs #include <{header}> in that file (common.cuh includes "
            f"only CUDA's headers and the light C++ ones: <cstdint>, <cstdio>, <cstring>, "
            f"<exception>, <initializer_list>, <type_traits>)"
            for header, name in sorted(wanted.items())]


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


