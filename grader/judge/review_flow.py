"""What a Python file's names hold, for the review (grader.judge.review_python): scopes as Python
resolves them, and for every binding what it may hold of what the file did not make.

A value is a `V(path, holds)`: `path` is the dotted name of the foreign object it may be (a module,
`torch.library.opcheck`, `type(...)`, `<k made by triton.jit>`), `holds` the one a container of it
may hold. Bindings are followed through assignments, unpacking, loops, comprehensions, `with`,
walrus, `match`, calls of the file's own functions (their parameters take what any call passes,
their calls what they return), containers and attributes of its own objects. Flow-insensitive: a
name may hold what any of its bindings gives it. Standard library only.
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
SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef, ast.ListComp,
          ast.SetComp, ast.DictComp, ast.GeneratorExp)
# builtins that return an item of what they are given, and those that return a container of it
ITEM = {"next", "min", "max", "sum", "functools.reduce", "typing.cast"}
CONTAINER = {"list", "tuple", "set", "frozenset", "dict", "sorted", "reversed", "iter", "zip",
             "enumerate", "filter", "map"}
# the nodes _scan looks at (the rest it only walks through)
BINDERS = {getattr(ast, n) for n in (
    "FunctionDef AsyncFunctionDef Lambda ClassDef ListComp SetComp DictComp GeneratorExp Global "
    "Nonlocal Import ImportFrom Assign AnnAssign AugAssign For AsyncFor withitem NamedExpr "
    "ExceptHandler Delete Match Return Yield YieldFrom Call Raise TypeAlias").split()
    if hasattr(ast, n)}
# functions of allowed modules that return a callable holding what they are given
WRAPPERS = {"functools.partial", "functools.partialmethod", "functools.lru_cache", "functools.cache"}


def _dotted(node) -> bool:
    """Whether a callee is a plain dotted name (torch.cuda.Event), not an expression's value."""
    while isinstance(node, ast.Attribute):
        node = node.value
    return isinstance(node, ast.Name)


class Scope:
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


class Flow:
    """Scopes, bindings and values of one parsed file."""

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
        self._solve()

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

    # --- values -----------------------------------------------------------------------------
    def _solve(self):
        self.callsites: dict[int, list] = {}  # id(own function) -> the calls that may call it
        for call, scope in self.calls:
            for d in self._callees(call.func, scope):
                self.callsites.setdefault(id(d), []).append((call, scope))
        for _ in range(8):  # aliases of aliases, calls of calls: a fixpoint, bounded
            before = (dict(self.values), dict(self.ret_values), dict(self.attr_values))
            for s in self.scopes.values():
                for name, bs in s.bindings.items():
                    v = NONE
                    for how, expr, where in bs:
                        v = v | self._binding(how, expr, where, name, s)
                    self.values[(id(s), name)] = v
            for name, expr, where, scope in self.item_stores:
                s = scope.resolve_scope(name)
                if s is not None:
                    v = self.value(expr, where)
                    key = (id(s), name)
                    self.values[key] = self.values.get(key, NONE) | V(None, v.path or v.holds)
            for key, rets in self.returns.items():
                v = NONE
                for expr, where in rets:
                    if isinstance(expr, (ast.Yield, ast.YieldFrom)):
                        r = self.value(expr.value, where)
                        r = r.element() if isinstance(expr, ast.YieldFrom) else r
                        v = v | V(None, r.path or r.holds)
                    else:
                        v = v | self.value(expr, where)
                self.ret_values[key] = v
            raised = NONE
            for expr, where in self.raises:
                for e in (expr.args + [k.value for k in expr.keywords]
                          if isinstance(expr, ast.Call) else [expr]):
                    raised = raised | self.value(e, where)
            self.raised = V(None, raised.path or raised.holds)
            for attr, how, expr, where in self.attr_stores:
                v = self.value(expr, where)
                self.attr_values[attr] = self.attr_values.get(attr, NONE) | (
                    v.element() if how == "iter" else v)
            for s in self.scopes.values():  # a class's attributes are its instances' too
                if s.kind == "class":
                    for name in s.bindings:
                        self.attr_values[name] = self.attr_values.get(name, NONE) | self.values[
                            (id(s), name)]
            if (dict(self.values), dict(self.ret_values), dict(self.attr_values)) == before:
                break

    def _binding(self, how, expr, where, name, scope) -> V:
        if how == "import":
            return V(self._import_path(expr, where))
        if how == "made":  # what a decorator of another module's returned: not the file's own
            for deco in expr.decorator_list:
                d = deco.func if isinstance(deco, ast.Call) else deco
                if self.value(d, where).path:
                    return V(f"<{name} made by {ast.unparse(d)[:40]}>")
            return NONE
        if how == "param":
            return self._param(expr, where, name)
        if how == "def":  # a function holds what it returns (f = get; f().x)
            r = self.ret_values.get(id(expr), NONE)
            return V(None, r.path or r.holds)
        if how == "raised":
            return self.raised
        if how in ("class", "none") or expr is None:
            return NONE
        v = self.value(expr, where)
        if how == "iter":  # what iterating gives, through the file's own __iter__ and __next__
            return v.element() | self._rets("__next__") | self._rets("__getitem__") | self._rets(
                "__iter__").element()
        if how == "with":
            return v | self._rets("__enter__") | self._rets("__aenter__")
        if how == "match":
            return v | v.element()
        return v

    def _import_path(self, node, alias) -> str | None:
        """What an import binds: a dotted path, or own:<name> for a module of the track (its
        files, its built extension), whose attributes are what that module imported."""
        if isinstance(node, ast.Import):
            path = alias.name if alias.asname else alias.name.split(".")[0]
            own = alias.name.split(".")[0] in self.own
            return f"own:{path.rsplit('.', 1)[-1]}" if own else path
        if node.level or node.module is None or node.module.split(".")[0] in self.own:
            if node.module is None:
                return f"own:{alias.name}"  # from . import helper
            last = node.module.rsplit(".", 1)[-1]
            return self._own(last, alias.name)
        return f"{node.module}.{alias.name}"

    def _own(self, module: str, name: str) -> str | None:
        """What `name` of the track's module `module` is, as a path a value may hold."""
        alias = self.own.get(module, {}).get(name)
        if alias is None:
            return f"own:{name}" if name in self.own else None  # a module of a package
        if alias == "own-def":
            return f"own-def:{module}.{name}"  # what calling it returns is not followed
        return None if alias == "own-class" else alias

    def _param(self, fn, where, name) -> V:
        a = fn.args
        params = [p.arg for p in a.posonlyargs + a.args]
        v = NONE
        defaults = dict(zip(params[len(params) - len(a.defaults):], a.defaults))
        defaults.update({p.arg: d for p, d in zip(a.kwonlyargs, a.kw_defaults) if d is not None})
        if name in defaults:
            v = v | self.value(defaults[name], where)
        for call, scope in self.callsites.get(id(fn), ()):
            shift = 1 if params and params[0] in ("self", "cls") and (
                isinstance(call.func, ast.Attribute) or getattr(fn, "name", "") == "__init__") else 0
            given = []
            for i, arg in enumerate(call.args):
                if isinstance(arg, ast.Starred):
                    given += [(p, arg.value) for p in params[i + shift:] + [name]]
                elif i + shift < len(params):
                    given.append((params[i + shift], arg))
                elif a.vararg:
                    given.append((a.vararg.arg, arg))
            kwarg = getattr(a.kwarg, "arg", None)
            names = set(params) | {p.arg for p in a.kwonlyargs}
            for k in call.keywords:  # f(e=v) into **k, f(**d) into every parameter
                given += [(k.arg if k.arg in names or not kwarg else kwarg, k.value)] if k.arg \
                    else [(name, k.value)]
            for p, arg in given:
                if p == name:
                    av = self.value(arg, scope)
                    v = v | (V(None, av.path or av.holds) if name in (
                        getattr(a.vararg, "arg", None), getattr(a.kwarg, "arg", None)) else av)
        return v

    def _rets(self, name: str) -> V:
        """What the file's own functions of that name return (a protocol's __enter__, ...)."""
        v = NONE
        for d in self.defs.get(name, ()):
            v = v | self.ret_values.get(id(d), NONE)
        return v

    def _callees(self, func, scope) -> list:
        """The file's own functions a call may call (by name, a method by its name, a lambda, a
        class's __init__)."""
        if isinstance(func, ast.Lambda):
            return [func]
        if isinstance(func, ast.Name):
            s = scope.resolve_scope(func.id)
            if s is None:
                return []
            out = []
            for how, e, _ in s.bindings.get(func.id, ()):
                if how in ("def", "made") or how == "assign" and isinstance(e, ast.Lambda):
                    out.append(e)
                elif how == "class":
                    out += [d for d in e.body if isinstance(d, ast.FunctionDef)
                            and d.name == "__init__"]
            return out
        if isinstance(func, ast.Attribute):
            return self.defs.get(func.attr, [])
        return []

    def value(self, node, scope: Scope) -> V:
        """What an expression may be or hold of what the file did not make."""
        if isinstance(node, ast.Name):
            s = scope.resolve_scope(node.id)
            return self.values.get((id(s), node.id), NONE) if s is not None else NONE
        if isinstance(node, ast.Attribute):
            return self.attribute(self.value(node.value, scope), node.attr)
        if isinstance(node, ast.Subscript):
            return self.value(node.value, scope).element() | self._rets("__getitem__")
        if isinstance(node, ast.Lambda):  # a function holds what it returns
            r = self.ret_values.get(id(node), NONE)
            return V(None, r.path or r.holds)
        if isinstance(node, ast.Call):
            return self._call(node, scope)
        if isinstance(node, (ast.List, ast.Tuple, ast.Set, ast.Dict)):
            v = NONE
            for e in node.values if isinstance(node, ast.Dict) else node.elts:
                if e is not None:
                    ev = self.value(e, scope)
                    v = v | V(None, ev.path or ev.holds)
            return v
        if isinstance(node, (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)):
            inner = self.scopes.get(id(node), scope)
            ev = self.value(node.value if isinstance(node, ast.DictComp) else node.elt, inner)
            return V(None, ev.path or ev.holds)
        if isinstance(node, ast.IfExp):
            return self.value(node.body, scope) | self.value(node.orelse, scope)
        if isinstance(node, ast.BoolOp):
            v = NONE
            for e in node.values:
                v = v | self.value(e, scope)
            return v
        if isinstance(node, (ast.NamedExpr, ast.Starred, ast.Await)):
            return self.value(node.value, scope)
        return NONE

    def attribute(self, base: V, attr: str) -> V:
        if base.path:
            if base.path.startswith("own:"):  # a module of the track: what it imported as attr
                return V(self._own(base.path[4:], attr))
            if base.path.startswith("own-def:"):
                return NONE
            return V(f"{base.path}.{attr}")
        own = self.attr_values.get(attr, NONE) | self._rets(attr) | self._rets("__getattr__")
        if base.holds:
            return V(None, base.holds) | own
        # an attribute of the file's own objects: what was stored there, a property's value, what
        # its own __getattr__ returns
        return own

    def _call(self, node: ast.Call, scope) -> V:
        f = node.func
        args = list(node.args) + [k.value for k in node.keywords]
        builtin = f.id if isinstance(f, ast.Name) and scope.resolve_scope(f.id) is None else None
        fv = NONE if builtin else self.value(f, scope)
        name = builtin or fv.path
        if name == "type" and len(node.args) == 1:
            return V("type(...)")  # a class, shared by every instance
        if name in ("__import__", "importlib.import_module") and node.args and isinstance(
                mod := literal(node.args[0]), str):
            return V(mod if name != "__import__" or "." not in mod else mod.split(".")[0])
        if name == "getattr" and len(node.args) >= 2:
            attr = literal(node.args[1])
            base = self.value(node.args[0], scope)
            v = self.attribute(base, attr) if isinstance(attr, str) else V(base.path, base.path)
            return v | (self.value(node.args[2], scope) if len(node.args) > 2 else NONE)
        given = NONE
        for a in args:
            given = given | self.value(a, scope)
        if name in ITEM:
            return given.element() | given
        if name in CONTAINER:
            return V(None, given.path or given.holds)
        if builtin:
            return NONE
        own = self._callees(f, scope)
        if own:
            v = NONE
            for d in own:
                v = v | self.ret_values.get(id(d), NONE)
            return v | given
        if fv.path and fv.path.startswith("own-def:"):  # another file's function: what it returns
            return V(f"<what {fv.path[8:]}() returns>")  # is not followed; nothing may patch it
        if fv.path and fv.path.startswith("own:"):
            return given
        if fv.path in WRAPPERS:  # functools.partial(f, x): a callable holding what f returns
            return V(None, given.path or given.holds)
        if fv.path and not fv.path.startswith("<") and _dotted(f):
            base = fv.path.rsplit(".", 1)[0]
            if self.is_module(base) or "." not in fv.path:
                return NONE  # a library's function or class, called by its name: a new object
            return V(None, fv.path + "()")  # a method of a foreign object: what it may hold
        if fv.path and not fv.path.startswith("<"):  # a callable taken out of a container or a
            return V(fv.path, fv.path)                # call: it may be what it returns
        if fv.path:  # what a decorator made (a launch, a warmed-up kernel): what it may hold
            return V(None, fv.path)
        if fv.holds:  # a function held by a container, returning what it holds
            return V(fv.holds, fv.holds)
        if isinstance(f, ast.Attribute):  # a method of a tensor or other local: it may hold
            return V(None, given.path or given.holds)  # what it is given (x.to(torch.float16))
        # an unknown callable (a parameter, a call's result): may return what it is given, or
        # what the file's own __call__ returns
        return V(given.path or given.holds, given.holds) | self._rets("__call__")
