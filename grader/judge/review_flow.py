"""What a Python file's names hold, for the review (grader.judge.review_python): for every
binding (grader.judge.review_scope) what it may hold of what the file did not make.

A value is a `V(path, holds)`: `path` is the dotted name of the foreign object it may be (a module,
`torch.library.opcheck`, `type(...)`, `<k made by triton.jit>`), `holds` the one a container of it
may hold. Bindings are followed through assignments, unpacking, loops, comprehensions, `with`,
walrus, `match`, calls of the file's own functions (their parameters take what any call passes,
their calls what they return), containers and attributes of its own objects. Flow-insensitive: a
name may hold what any of its bindings gives it. Standard library only.
"""
from __future__ import annotations

import ast

from grader.judge.review_paths import literal
from grader.judge.review_scope import NONE, Scan, Scope, V

# builtins that return an item of what they are given, and those that return a container of it
ITEM = {"next", "min", "max", "sum", "functools.reduce", "typing.cast"}
CONTAINER = {"list", "tuple", "set", "frozenset", "dict", "sorted", "reversed", "iter", "zip",
             "enumerate", "filter", "map"}
# functions of allowed modules that return a callable holding what they are given
WRAPPERS = {"functools.partial", "functools.partialmethod", "functools.lru_cache",
            "functools.cache"}


def _dotted(node) -> bool:
    """Whether a callee is a plain dotted name (torch.cuda.Event), not an expression's value."""
    while isinstance(node, ast.Attribute):
        node = node.value
    return isinstance(node, ast.Name)


class Flow(Scan):
    """Scopes, bindings and values of one parsed file."""

    def __init__(self, tree: ast.Module, own: dict[str, dict[str, str]], is_module):
        super().__init__(tree, own, is_module)
        self._solve()
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
            method = isinstance(call.func, ast.Attribute) or getattr(fn, "name", "") == "__init__"
            shift = 1 if params and params[0] in ("self", "cls") and method else 0
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
