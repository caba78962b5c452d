"""What a dotted name reaches, for the review (grader.judge.review_python): a path rooted at an
import (`torch.library.opcheck`, `os.sys.modules`) is walked part by part against the allowlist
(grader.judge.review_allow); the first part outside it is the finding. Whether a part is a module
is read from the installed package's folder (nothing is imported) and the allowlist's tables.
Standard library only.
"""
from __future__ import annotations

import ast
import functools
import importlib.util
from pathlib import Path

from grader.judge import review_allow as allow


@functools.lru_cache(maxsize=None)
def _submodules(module: str) -> frozenset:
    """The submodule names of an installed package (its folder listed, nothing imported)."""
    top, *rest = module.split(".")
    try:
        spec = importlib.util.find_spec(top)
        where = list(spec.submodule_search_locations or ()) if spec else []
    except (ImportError, ValueError, AttributeError):
        return frozenset()
    names = set()
    for base in where:
        folder = Path(base).joinpath(*rest)
        if folder.is_dir():
            names |= {p.name.split(".")[0] for p in folder.iterdir()
                      if p.is_dir() or p.suffix in (".py", ".so", ".pyd")}
    return frozenset(n for n in names if n.isidentifier())


def _is_module_name(module: str, name: str) -> bool:
    if name in allow.NOT_MODULES.get(module, ()):
        return False
    return (name in allow.STDLIB or name in allow.GADGETS or name in _submodules(module)
            or name in allow.SUBMODULES.get(module, ()) or name in allow.MODULE_ALIASES.get(
                module, ()))


def _dunder(name: str) -> bool:
    return len(name) > 4 and name.startswith("__") and name.endswith("__")


def object_attr(name: str) -> tuple[str, str] | None:
    """What reading `name` of any object reaches, if it is outside what a kernel reads."""
    if _dunder(name) and name not in allow.DUNDERS:
        return ("introspection", name)
    if name in allow.FRAME_ATTRS:
        return ("introspection", name)
    if name in allow.GADGETS:
        return (allow.kind(name) or "modules", name)
    return None


@functools.lru_cache(maxsize=8192)
def judge_path(path: str):
    """For a dotted path rooted at an import: (problem, is_module), where problem is (index of
    the part at fault, rule, what) or None, is_module whether the path names a module."""
    parts = path.split(".")
    root = parts[0]
    if root not in allow.ROOTS:  # imported against the allowlist (flagged there)
        return (0, allow.kind(root) or "import", root), len(parts) == 1
    module, is_module = root, True
    for i, part in enumerate(parts[1:], 1):
        sub = f"{module}.{part}"
        if is_module:
            package = next((p for p in allow.PACKAGES if module == p or module.startswith(p + ".")),
                           None)
            if package and module == package and part in allow.PACKAGES[package]:
                return (i, allow.kind(sub) or "import", sub), True
            if sub in allow.MODULES or package and part in _submodules(module):
                module = sub
                continue
            if part in ("torch", "triton"):  # a module's own name for torch: torch.cuda.torch
                module = part
                continue
            names = allow.MODULES.get(module) if not package else allow.PUBLIC
            why = None
            if _dunder(part):
                why = None if part in allow.DUNDERS else ("introspection", sub)
            elif part.startswith("_") and not package:  # a kernel library's helpers are its own
                why = ("private", sub)
            elif part in allow.DENIED.get(module, {}):
                why = (allow.DENIED[module][part], sub)
            elif names is not allow.PUBLIC and part not in names or _is_module_name(module, part):
                why = (allow.kind(sub) or "import", sub)
            if why:
                return (i, *why), False
            is_module = False
        elif (found := object_attr(part)) is not None:
            return (i, found[0], ".".join(parts[:i + 1])), False
        elif part.startswith("_") and not _dunder(part) and not package:  # a library object's
            return (i, "private", ".".join(parts[:i + 1])), False          # internals
    return None, is_module


def rooted(path: str | None) -> bool:
    """A path that starts at an import (not an own object, a class or a decorator's product)."""
    return bool(path) and not path.startswith(("<", "type(", "own:", "own-def:"))


def module_value(path: str | None) -> bool:
    """A path naming a module that may not be passed around (a kernel library's modules and
    functions share names, and are not what the evidence rests on)."""
    return rooted(path) and path.split(".")[0] not in allow.PACKAGES and judge_path(path)[1]


def literal(node):
    """The value of a string literal, with concatenation, f-strings of literals and
    '...'.join([...]) folded; None when it is computed."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):  # bounded by the source
        a, b = literal(node.left), literal(node.right)  # (not `%`: "%0999999999d" % 1 is 1 GB)
        return a + b if isinstance(a, str) and isinstance(b, str) else None
    if isinstance(node, ast.JoinedStr):
        parts = [literal(v.value if isinstance(v, ast.FormattedValue) else v) for v in node.values]
        return "".join(parts) if all(isinstance(p, str) for p in parts) else None
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr == "join" and len(node.args) == 1
            and isinstance(node.args[0], (ast.List, ast.Tuple))):
        sep, parts = literal(node.func.value), [literal(e) for e in node.args[0].elts]
        if isinstance(sep, str) and all(isinstance(p, str) for p in parts):
            return sep.join(parts)
    return None
