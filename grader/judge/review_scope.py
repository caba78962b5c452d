"""The scopes and bindings of a Python file, for the review (grader.judge.review_flow): which
scope each name resolves to (as Python resolves it: class scopes hidden from their methods,
comprehensions, global/nonlocal, walrus), and every binding with the expression it binds from
(assignments and unpacking, loops, comprehensions, `with`, `match`, imports, parameters,
definitions, `except ... as`), with the calls, returns, yields, raises and stores into attributes
and containers that the values are solved from. Standard library only.
"""
from __future__ import annotations

import ast
from typing import NamedTuple

from grader.judge.review_paths import literal


class V(NamedTuple):
    path: str | None = None   # the foreign object it may be
    holds: str | None = None  # the foreign object a container of it may hold

    def __or__(self, other: "V") -> "V":
        return V(self.path or other.path, self.holds or other.holds)

    def element(self) -> "V":  # an item of it, or what iterating it gives
        return V(self.holds or (self.path and self.path + "[]"), self.holds)


NONE = V()
# the nodes _scan looks at (the rest it only walks through)
BINDERS = {getattr(ast, n) for n in (
    "FunctionDef AsyncFunctionDef Lambda ClassDef ListComp SetComp DictComp GeneratorExp Global "
    "Nonlocal Import ImportFrom Assign AnnAssign AugAssign For AsyncFor withitem NamedExpr "
    "ExceptHandler Delete Match Return Yield YieldFrom Call Raise TypeAlias").split()
    if hasattr(ast, n)}


class Scope:
    """One scope (module, class, function, lambda, comprehension) and what it binds."""

    def __init__(self, node, kind: str, parent: "Scope | None"):
        self.node, self.kind, self.parent = node, kind, parent
        self.bindings: dict[str, list] = {}   # name -> [(how, expression, scope of expression)]
        self.globals: set[str] = set()
        self.nonlocals: set[str] = set()

    def bind(self, name, how, expr=None, where=None):
        target = self
        if name in self.globals:
            while target.parent:
                target = target.parent
        elif name in self.nonlocals:
            s = self.parent
            while s is not None and (s.kind != "function" or name not in s.bindings):
                s = s.parent
            target = s or self.parent or self
        target.bindings.setdefault(name, []).append((how, expr, where))

    def resolve_scope(self, name) -> "Scope | None":
        """The scope whose binding `name` means here, as Python resolves it; None: a builtin."""
        if name in self.globals:
            top = self
            while top.parent:
                top = top.parent
            return top if name in top.bindings else None
        if name in self.bindings and name not in self.nonlocals:
            return self
        s = self.parent
        while s is not None:
            if s.kind != "class" or s.parent is None:
                if name in s.bindings and name not in s.globals:
                    return s
                if name in s.globals:
                    return s.resolve_scope(name)
            s = s.parent
        return None

class Scan:
    """The scopes and bindings of one parsed file (grader.judge.review_flow.Flow adds values)."""

    def __init__(self, tree: ast.Module, own: dict[str, dict[str, str]], is_module):
        self.own = own                    # the track's module names -> their module-level aliases
        self.is_module = is_module        # dotted path -> whether it names a module
        self.scope_of: dict[int, Scope] = {}  # id(node) -> the scope it is evaluated in
        self.scopes: dict[int, Scope] = {}    # id(scope node) -> its scope
        self.parent: dict[int, ast.AST] = {}
        self.calls: list[tuple[ast.Call, Scope]] = []
        self.defs: dict[str, list] = {}       # function name -> [def nodes] (methods included)
        self.returns: dict[int, list] = {}    # id(def) -> [(expression, scope)]
        self.attr_stores: list = []           # (attribute name, how, expression, scope)
        self.item_stores: list = []           # (name, expression, its scope, the name's scope)
        self.raises: list = []                # (raised expression, scope)
        self.raised = NONE                    # what an exception caught anywhere may carry
        self.values: dict[tuple, V] = {}
        self.ret_values: dict[int, V] = {}
        self.attr_values: dict[str, V] = {}
        self.children: dict[int, list] = {}  # id(node) -> its child nodes, listed once
        stack = [tree]
        while stack:
            node = stack.pop()
            kids = []
            for field in node._fields:
                v = getattr(node, field, None)
                if isinstance(v, ast.AST):
                    if not isinstance(v, (ast.expr_context, ast.operator, ast.cmpop,
                                          ast.unaryop, ast.boolop)):  # shared singletons
                        kids.append(v)
                elif isinstance(v, list):
                    kids += [x for x in v if isinstance(x, ast.AST)]
            self.children[id(node)] = kids
            for child in kids:
                self.parent[id(child)] = node
            stack += kids
        self.module = Scope(tree, "module", None)
        self.scopes[id(tree)] = self.module
        self._scan(tree, self.module)

    # --- scopes and bindings ------------------------------------------------------------------
    def _scan(self, node, scope: Scope, fn=None):
        self.scope_of[id(node)] = scope
        if type(node) not in BINDERS:  # most nodes bind nothing: their children, at once
            for child in self.children[id(node)]:
                self._scan(child, scope, fn)
            return
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            return self._function(node, scope)
        if isinstance(node, ast.ClassDef):
            for n in node.decorator_list + node.bases + [k.value for k in node.keywords]:
                self._scan(n, scope, fn)
            scope.bind(node.name, "class" if not node.decorator_list else "made", node, scope)
            inner = self._new(node, "class", scope)
            for n in node.body:
                self._scan(n, inner, fn)
            return
        if isinstance(node, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            inner = self._new(node, "comprehension", scope)
            for i, g in enumerate(node.generators):
                self._scan(g.iter, scope if i == 0 else inner, fn)
                self._target(g.target, "iter", g.iter, scope if i == 0 else inner, inner)
                self._scan(g.target, inner, fn)
                for cond in g.ifs:
                    self._scan(cond, inner, fn)
            for n in ([node.key, node.value] if isinstance(node, ast.DictComp) else [node.elt]):
                self._scan(n, inner, fn)
            return
        if isinstance(node, (ast.Global, ast.Nonlocal)):
            (scope.globals if isinstance(node, ast.Global) else scope.nonlocals).update(node.names)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for a in node.names:
                if a.name != "*":
                    scope.bind(a.asname or a.name.split(".")[0], "import", node, a)
                elif isinstance(node, ast.ImportFrom) and node.module:  # from helper import *
                    own = node.module.rsplit(".", 1)[-1]
                    for name in self.own.get(own, {}) if (node.level or node.module.split(".")[
                            0] in self.own) else ():
                        scope.bind(name, "import", node, ast.alias(name=name))
        elif isinstance(node, ast.Assign):
            for t in node.targets:
                self._target(t, "assign", node.value, scope, scope)
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign)) and node.value is not None:
            self._target(node.target, "assign", node.value, scope, scope)
        elif isinstance(node, ast.AnnAssign):
            self._target(node.target, "none", None, scope, scope)
        elif isinstance(node, (ast.For, ast.AsyncFor)):
            self._target(node.target, "iter", node.iter, scope, scope)
        elif isinstance(node, ast.withitem) and node.optional_vars is not None:
            self._target(node.optional_vars, "with", node.context_expr, scope, scope)
        elif isinstance(node, ast.NamedExpr):
            s = scope
            while s.kind == "comprehension":
                s = s.parent
            self._target(node.target, "assign", node.value, scope, s)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            scope.bind(node.name, "raised")  # what any `raise` of the file carried
        elif isinstance(node, ast.Raise) and node.exc is not None:
            self.raises.append((node.exc, scope))
        elif isinstance(node, ast.Delete):
            for t in node.targets:
                self._target(t, "none", None, scope, scope)
        elif isinstance(node, ast.Match):
            for case in node.cases:
                for p in ast.walk(case.pattern):
                    name = getattr(p, "name", None) or getattr(p, "rest", None)
                    if isinstance(name, str):
                        scope.bind(name, "match", node.subject, scope)
        elif isinstance(node, ast.Return) and fn is not None and node.value is not None:
            self.returns.setdefault(id(fn), []).append((node.value, scope))
        elif isinstance(node, (ast.Yield, ast.YieldFrom)) and fn is not None and node.value:
            self.returns.setdefault(id(fn), []).append((node, scope))  # a generator holds it
        elif isinstance(node, ast.Call):
            self.calls.append((node, scope))
            if isinstance(node.func, ast.Name) and node.func.id == "setattr" and len(
                    node.args) == 3 and isinstance(name := literal(node.args[1]), str):
                self.attr_stores.append((name, "assign", node.args[2], scope))
            f = node.func  # xs.append(v), d.update(k=v): the container holds v
            if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.attr in (
                    "append", "extend", "insert", "add", "update", "setdefault", "__setitem__"):
                for arg in node.args + [k.value for k in node.keywords]:
                    self.item_stores.append((f.value.id, arg, scope, scope))
        elif type(node).__name__ == "TypeAlias":  # 3.12: type X = ...
            self._target(node.name, "none", None, scope, scope)
        for child in self.children[id(node)]:
            self._scan(child, scope, fn)

    def _new(self, node, kind, parent) -> Scope:
        s = Scope(node, kind, parent)
        self.scopes[id(node)] = s
        return s

    def _function(self, node, scope: Scope):
        a = node.args
        outer = a.defaults + [d for d in a.kw_defaults if d is not None]
        if not isinstance(node, ast.Lambda):
            outer += node.decorator_list + [x.annotation for x in self._params(a) if x.annotation]
            outer += [node.returns] if node.returns else []
            made = any(not self._plain_decorator(d, scope) for d in node.decorator_list)
            scope.bind(node.name, "made" if made else "def", node, scope)
            self.defs.setdefault(node.name, []).append(node)
        for n in outer:
            self._scan(n, scope)
        inner = self._new(node, "function", scope)
        for p in self._params(a):
            inner.bind(p.arg, "param", node, scope)
        for t in getattr(node, "type_params", ()):  # 3.12: def f[T](...)
            inner.bind(t.name, "none")
        if isinstance(node, ast.Lambda):
            self.returns.setdefault(id(node), []).append((node.body, inner))
            self._scan(node.body, inner, node)
        else:
            for n in node.body:
                self._scan(n, inner, node)

    @staticmethod
    def _params(a: ast.arguments):
        return a.posonlyargs + a.args + ([a.vararg] if a.vararg else []) + a.kwonlyargs + (
            [a.kwarg] if a.kwarg else [])

    @staticmethod
    def _plain_decorator(d, scope) -> bool:
        """staticmethod, classmethod, property and its setters leave the function the file's."""
        return (isinstance(d, ast.Name) and d.id in ("staticmethod", "classmethod", "property")
                or isinstance(d, ast.Attribute) and d.attr in ("setter", "getter", "deleter"))

    def _target(self, t, how, expr, expr_scope, scope):
        if isinstance(t, ast.Name):
            scope.bind(t.id, how, expr, expr_scope)
        elif isinstance(t, (ast.Tuple, ast.List)):
            pair = (isinstance(expr, (ast.Tuple, ast.List)) and len(expr.elts) == len(t.elts)
                    and how == "assign" and not any(isinstance(e, ast.Starred) for e in t.elts))
            for i, e in enumerate(t.elts):
                if pair:
                    self._target(e, how, expr.elts[i], expr_scope, scope)
                else:
                    self._target(e, "iter" if how in ("assign", "iter") else how, expr,
                                 expr_scope, scope)
        elif isinstance(t, ast.Starred):
            self._target(t.value, how, expr, expr_scope, scope)
        elif isinstance(t, ast.Attribute) and expr is not None:
            self.attr_stores.append((t.attr, how, expr, expr_scope))
        elif isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name) and expr is not None:
            self.item_stores.append((t.value.id, expr, expr_scope, scope))  # x[k] = v: x holds v
