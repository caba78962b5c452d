"""NaN never passes a check's own comparison: every exercise's checks read from the source (ast).

Every ordering comparison (<, <=, >, >=) is false when either side is NaN. A check that fails
when `err > tol` is true therefore passes a NaN error; one that fails when `not err <= tol` is
true does not. This module finds the first kind in the conditions that decide a check's failure:

- `if C:` whose body fails (a `raise` or `pytest.fail(...)` in it): C must fail on NaN, so
  each comparison in it must sit under an odd number of negations (`not`, `~`,
  `torch.logical_not`), as in `not err <= tol`;
- `assert C`, and `if C: return` (or `continue`) followed by a failure in the same block: C must
  be false on NaN, so each comparison must sit under an even number of negations;
- a comparison inside `==`, `!=`, `in`, `is` of a deciding condition (`changed != [49]` where
  `changed = ((a - b) > 0)...`): NaN's effect there cannot be read from the source, so it is
  reported too.

A name in a deciding condition stands for what the same function assigned to it (`bad = err >
tol` then `if bad.any(): raise ...`), followed a few assignments deep. Calls and attributes keep
the polarity of their arguments (`bool(...)`, `.any()`, `.all()`, `.sum()`), which holds for the
monotone reductions checks use. grader.judge.check.within is the one helper these conditions go
through instead: `check.within(err, tol, what=..., why=...)`.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import ROOT

ORDERING = (ast.Lt, ast.LtE, ast.Gt, ast.GtE)
NEGATIONS = ("logical_not",)
DEPTH = 4  # assignments followed from a name


@dataclass(frozen=True)
class Finding:
    path: str
    line: int
    comparison: str
    why: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: `{self.comparison}`: {self.why}"


def _fails(stmts) -> bool:
    """Do these statements fail the check whenever they run: a `raise` or `pytest.fail(...)`
    among them (not inside a further `if`, loop or `try` of theirs, which decide on their own)?"""
    for s in stmts:
        if isinstance(s, ast.Raise):
            return True
        if isinstance(s, ast.Expr) and isinstance(s.value, ast.Call):
            f = s.value.func
            if isinstance(f, ast.Attribute) and f.attr == "fail" and \
                    isinstance(f.value, ast.Name) and f.value.id == "pytest":
                return True
    return False


def _walk(node):
    """ast.walk without descending into nested functions, classes or lambdas."""
    todo = [node]
    while todo:
        n = todo.pop()
        yield n
        for child in ast.iter_child_nodes(n):
            if not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef,
                                      ast.Lambda)):
                todo.append(child)


def _exits(stmts) -> bool:
    """A body that leaves the check without failing: it ends in return / continue."""
    return bool(stmts) and isinstance(stmts[-1], (ast.Return, ast.Continue)) and not _fails(stmts)


def _is_negation(node) -> bool:
    if isinstance(node, ast.UnaryOp):
        return isinstance(node.op, (ast.Not, ast.Invert))
    if isinstance(node, ast.Call):
        f = node.func
        name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
        return name in NEGATIONS
    return False


class _Scanner:
    def __init__(self, path: str, tree: ast.AST):
        self.path = path
        self.tree = tree
        self.findings: list[Finding] = []

    def run(self) -> list[Finding]:
        for fn in ast.walk(self.tree):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Module)):
                self._function(fn)
        return self.findings

    def _function(self, fn) -> None:
        assigned: dict[str, list[ast.expr]] = {}
        for n in _walk(fn):
            if isinstance(n, ast.Assign):
                for t in n.targets:
                    if isinstance(t, ast.Name):
                        assigned.setdefault(t.id, []).append(n.value)
            elif isinstance(n, (ast.AnnAssign, ast.AugAssign)) and isinstance(n.target, ast.Name) \
                    and n.value is not None:
                assigned.setdefault(n.target.id, []).append(n.value)
        for block in self._blocks(fn):
            for i, stmt in enumerate(block):
                if isinstance(stmt, ast.Assert):
                    self._condition(stmt.test, fail_when=False, assigned=assigned)
                elif isinstance(stmt, ast.If):
                    if _fails(stmt.body):
                        self._condition(stmt.test, fail_when=True, assigned=assigned)
                    elif stmt.orelse and _fails(stmt.orelse) or \
                            _exits(stmt.body) and _fails(block[i + 1:]):
                        self._condition(stmt.test, fail_when=False, assigned=assigned)

    def _blocks(self, fn):
        """Every statement list of the function (its body, its ifs', loops', trys' bodies)."""
        for n in _walk(fn):
            for field in ("body", "orelse", "finalbody"):
                stmts = getattr(n, field, None)
                if isinstance(stmts, list) and stmts and isinstance(stmts[0], ast.stmt):
                    yield stmts
            for h in getattr(n, "handlers", []) or []:
                yield h.body

    def _condition(self, test, *, fail_when: bool, assigned) -> None:
        """Report each comparison in `test` that NaN steers toward passing. `fail_when`: the
        value of `test` that fails the check."""
        self._visit(test, negated=False, fail_when=fail_when, assigned=assigned, depth=0,
                    opaque=False)

    def _visit(self, node, *, negated, fail_when, assigned, depth, opaque) -> None:
        if isinstance(node, ast.Compare):
            ordering = any(isinstance(op, ORDERING) for op in node.ops)
            if ordering:
                # NaN makes this comparison False; the condition is then `negated` (True if an
                # odd number of negations sit above it); it fails the check if that is fail_when
                if opaque:
                    self._report(node, "its result is compared again (==, !=, in): whether NaN "
                                       "fails the check cannot be told; hold the value to its "
                                       "bound with grader.judge.check.within")
                elif negated != fail_when:
                    self._report(node, "false when a side is NaN, and then the check passes: "
                                       "use grader.judge.check.within(value, bound, ...), which "
                                       "fails on NaN")
            inner_opaque = opaque or not ordering
            for child in [node.left, *node.comparators]:
                self._visit(child, negated=negated, fail_when=fail_when, assigned=assigned,
                            depth=depth, opaque=inner_opaque)
            return
        if isinstance(node, ast.Name) and depth < DEPTH:
            for value in assigned.get(node.id, []):
                self._visit(value, negated=negated, fail_when=fail_when, assigned=assigned,
                            depth=depth + 1, opaque=opaque)
            return
        if isinstance(node, (ast.Lambda, ast.FunctionDef)):
            return
        flip = _is_negation(node)
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.expr):
                self._visit(child, negated=negated != flip, fail_when=fail_when,
                            assigned=assigned, depth=depth, opaque=opaque)

    def _report(self, node, why: str) -> None:
        f = Finding(self.path, node.lineno, ast.unparse(node), why)
        if f not in self.findings:
            self.findings.append(f)


def scan_source(text: str, path: str = "<source>") -> list[Finding]:
    return _Scanner(path, ast.parse(text)).run()


def scan(path: Path, root: Path | None = None) -> list[Finding]:
    name = str(path.relative_to(root)) if root else str(path)
    return scan_source(path.read_text(), name)


# --- the exercises' checks ---------------------------------------------------------------------

CHECKS = sorted((ROOT / "exercises").glob("*/test_*.py"))


def test_there_are_checks_to_read():
    assert len(CHECKS) >= 13, CHECKS


@pytest.mark.parametrize("path", CHECKS, ids=lambda p: p.parent.name)
def test_no_check_lets_nan_through_its_own_comparison(path):
    """A comparison that decides a failure fails on NaN: the checks hold a number to its bound
    with grader.judge.check.within, never with a raw `err > tol`."""
    found = scan(path, ROOT)
    assert not found, "\n".join(map(str, found))


# --- the scanner itself: what it reports, and what it leaves -----------------------------------

UNSAFE = {
    "if raises": "def f(err, tol):\n    if err > tol:\n        raise Mismatch('x')\n",
    "reversed": "def f(err, tol):\n    if tol < err:\n        raise Mismatch('x')\n",
    "either side": "def f(a, b, tol):\n    if a > 0 and abs(a - b) >= tol:\n        raise Mismatch()\n",
    "tensor any": "def f(err, tol):\n    if bool((err > tol).any()):\n        raise Mismatch()\n",
    "through a name": ("def f(err, tol):\n    bad = err > tol\n    if bad.any():\n"
                       "        raise Mismatch()\n"),
    "negated assert": "def f(err, tol):\n    assert not err > tol\n",
    "pass branch": ("def f(err, tol):\n    if not err <= tol:\n        return\n"
                    "    raise Mismatch()\n"),
    "else raises": ("def f(err, tol):\n    if not (err <= tol):\n        pass\n    else:\n"
                    "        raise Mismatch()\n"),
    "compared again": ("def f(a, b):\n    changed = ((a - b).abs() > 0).nonzero().tolist()\n"
                       "    if changed != [49]:\n        raise Mismatch()\n"),
    "pytest.fail": "def f(err, tol):\n    if err > tol:\n        pytest.fail('x')\n",
}
SAFE = {
    "helper": "def f(err, tol):\n    check.within(err, tol, what='err')\n",
    "negated": "def f(err, tol):\n    if not err <= tol:\n        raise Mismatch()\n",
    "tensor all": ("def f(err, tol):\n    if not bool((err <= tol).all()):\n"
                   "        raise Mismatch()\n"),
    "invert": "def f(err, tol):\n    if bool((~(err <= tol)).any()):\n        raise Mismatch()\n",
    "assert": "def f(err, tol):\n    assert err <= tol, 'x'\n",
    "pass branch": ("def f(err, tol):\n    ok = err <= tol\n    if bool(ok.all()):\n"
                    "        return\n    raise Mismatch()\n"),
    "no failure": "def f(free):\n    if free < 2**30:\n        pytest.skip('small')\n",
    "a message only": ("def f(k):\n    if k > 0.5:\n        cause = 'off by k'\n"
                       "    return cause\n"),
}


@pytest.mark.parametrize("name", UNSAFE)
def test_the_scan_reports_a_comparison_that_nan_passes(name):
    assert scan_source(UNSAFE[name]), UNSAFE[name]


@pytest.mark.parametrize("name", SAFE)
def test_the_scan_leaves_what_nan_fails(name):
    assert not scan_source(SAFE[name]), (SAFE[name], scan_source(SAFE[name]))


def test_the_scan_reports_what_the_exercises_had(tmp_path):
    """Exercise 13's test_dq_sums_in_float32 as it was before grader.judge.check.within (its
    `if err > 6e-3:` passed a NaN dq): reported, with its line."""
    before = (
        "def test_dq_sums_in_float32(impl, ref, exercise, device):\n"
        "    for name, g, w in zip(NAMES, got, want):\n"
        "        err = ((g.double() - w).norm() / w.norm()).item()\n"
        "        if err > 6e-3:\n"
        "            raise Mismatch(f'{name}: normwise relative error {err:.3g}')\n")
    path = tmp_path / "test_x.py"
    path.write_text(before)
    found = scan(path, tmp_path)
    assert [(f.path, f.line, f.comparison) for f in found] == [("test_x.py", 4, "err > 0.006")]
