"""The review of a Python file (grader.judge.review): an allowlist of what an honest kernel file
imports and touches (grader.judge.review_allow), applied to every import, name, attribute, store
and call, with what names hold followed by grader.judge.review_flow.

`review_python(data, own)` returns (line, rule, detail) triples; it never raises (a file it cannot
decode or parse, or a statement a rule fails on, is itself a finding: "was not reviewed").
"""
from __future__ import annotations

import ast
import builtins
import io
import re
import tokenize

from grader.judge import review_allow as allow
from grader.judge.review_flow import Flow
from grader.judge.review_paths import module_value, rooted, judge_path, literal, object_attr

BUILTIN_NAMES = frozenset(dir(builtins)) | {"__builtins__", "__loader__", "__spec__", "__path__",
                                            "__cached__"}
ENCODINGS = ("utf-8", "utf-8-sig", "ascii", "latin-1", "iso-8859-1")
# torch functions that allocate or describe, not compute (an except clause may call them)
ALLOCATE = {"empty", "empty_like", "empty_strided", "zeros", "zeros_like", "ones", "ones_like",
            "full", "full_like", "tensor", "as_tensor", "device", "dtype", "Size", "finfo",
            "iinfo", "is_tensor", "is_floating_point", "get_default_dtype", "manual_seed"}
QUIET = ("torch.cuda.", "torch.library.", "torch.version.", "torch.compiler.", "torch.testing.",
         "torch.autograd.")
COMPUTE_METHODS = frozenset(
    "softmax log_softmax sum mean exp log sqrt rsqrt pow matmul mm bmm addmm relu gelu silu "
    "sigmoid tanh norm var std amax amin cumsum mul div neg square abs reciprocal clamp "
    "masked_fill layer_norm rms_norm dropout baddbmm softplus maximum minimum".split())


class _Review:
    def __init__(self, src: str, tree: ast.Module, own: dict, depth: int = 0, offset: int = 0):
        self.src, self.tree, self.own, self.depth, self.offset = src, tree, own, depth, offset
        self.found: list[tuple[int, str, str]] = []
        self.flow = Flow(tree, own, lambda p: rooted(p) and judge_path(p)[1])
        self.parent = self.flow.parent
        self.skip: set[int] = set()  # ids of constants not to read as code (docstrings, __main__)
        self.checks: dict = {}  # node type -> its check (an on_<Type> method), looked up once

    def run(self):
        for n in [self.tree] + [self.flow.scopes[k].node for k in self.flow.scopes]:
            body = getattr(n, "body", None)
            if isinstance(body, list) and body and isinstance(body[0], ast.Expr) and isinstance(
                    body[0].value, ast.Constant):
                self.skip.add(id(body[0].value))  # a docstring does nothing
        for stmt in self.tree.body:
            if self._main_block(stmt):
                continue  # never runs when the grader imports the file (unless __name__ is
                #           rebound, which is a finding of its own)
            try:
                self.visit(stmt)
            except Exception as e:  # noqa: BLE001 - a rule that fails is a finding, not a crash
                self.flag(stmt, "limits", f"a rule failed here: {type(e).__name__}: {e}"[:120])
        return self.found

    def _main_block(self, stmt) -> bool:
        t = getattr(stmt, "test", None)
        if not (isinstance(stmt, ast.If) and isinstance(t, ast.Compare) and len(t.ops) == 1
                and isinstance(t.ops[0], ast.Eq)):
            return False
        sides = {type(t.left).__name__: t.left, type(t.comparators[0]).__name__: t.comparators[0]}
        name, const = sides.get("Name"), sides.get("Constant")
        if name is not None and const is not None and name.id == "__name__" and \
                const.value == "__main__":
            self.skip.add(id(const))
            for n in stmt.orelse:
                self.visit(n)
            return True
        return False

    def flag(self, node, rule, detail):
        line = self.offset if self.depth else getattr(node, "lineno", 1)  # exec'd: exec's line
        self.found.append((line, rule, str(detail) if not self.depth else f"in exec'd code: "
                                                                           f"{detail}"))

    def seg(self, node) -> str:
        text = (ast.get_source_segment(self.src, node) or ast.unparse(node)).strip().splitlines()
        first = text[0] if text else "?"
        return first if len(first) <= 80 and len(text) <= 1 else first[:77] + "..."

    def scope(self, node):
        while id(node) not in self.flow.scope_of and id(node) in self.parent:
            node = self.parent[id(node)]
        return self.flow.scope_of.get(id(node), self.flow.module)

    def value(self, node):
        return self.flow.value(node, self.scope(node))

    def constant(self, node):
        """A string literal, or a name (in an f-string too) bound to one and nothing else:
        NS = "ex06"; custom_op(f"{NS}::op") and name = "float16"; getattr(torch, name) read as
        the strings they are; a name bound twice, or to anything else, is computed."""
        if isinstance(node, ast.Name):
            s = self.scope(node).resolve_scope(node.id)
            bound = s.bindings.get(node.id, ()) if s is not None else ()
            values = {literal(e) if how == "assign" else None for how, e, _ in bound}
            return values.pop() if len(values) == 1 and len(bound) == 1 else None
        if isinstance(node, ast.JoinedStr):
            parts = [self.constant(v.value) if isinstance(v, ast.FormattedValue) and
                     not v.format_spec and v.conversion == -1 else literal(v) for v in node.values]
            return "".join(parts) if all(isinstance(p, str) for p in parts) else None
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            a, b = self.constant(node.left), self.constant(node.right)
            return a + b if isinstance(a, str) and isinstance(b, str) else None
        return literal(node)

    # --- the walk ---------------------------------------------------------------------------
    def visit(self, node):
        kind = type(node)
        if kind not in self.checks:
            self.checks[kind] = getattr(self, "on_" + kind.__name__, None)
        check = self.checks[kind]
        if check is not None and check(node) is False:
            return
        for child in self.flow.children[id(node)]:
            self.visit(child)

    def on_Import(self, node):
        for a in node.names:
            top = a.name.split(".")[0]
            if top in self.own:
                self._own_name(node, a.name)
                continue
            parts = a.name.split(".")
            for i in range(1, len(parts) + 1):
                problem, _ = judge_path(".".join(parts[:i]))
                if problem:
                    self.flag(node, allow.kind(a.name) or problem[1], f"import {a.name}")
                    break

    def on_ImportFrom(self, node):
        if node.level or node.module is None or node.module.split(".")[0] in self.own:
            for a in node.names:
                self._own_name(node, node.module or a.name)
            return
        for a in node.names:
            full = node.module if a.name == "*" else f"{node.module}.{a.name}"
            if (problem := judge_path(full)[0]) is not None:
                self.flag(node, allow.kind(full) or problem[1], f"from {node.module} import "
                                                                 f"{a.name}")
            elif a.name == "*":
                self.flag(node, "obfuscation", f"from {node.module} import *")

    def _own_name(self, node, name):
        if allow.kind(name) == "grader":
            self.flag(node, "grader", f"import {name}: the grader's module of that name")

    def on_Name(self, node):
        scope = self.scope(node)
        if not isinstance(node.ctx, ast.Load):
            if node.id in allow.REBIND and not isinstance(node.ctx, ast.Del):
                self.flag(node, "main" if node.id == "__name__" else "obfuscation",
                          f"rebinds {node.id}")
            return
        if scope.resolve_scope(node.id) is None:
            return self._builtin(node)
        v = self.flow.value(node, scope)
        if module_value(v.path) and self._as_value(node):
            self.flag(node, "value", f"{v.path} used as a value")

    def _builtin(self, node):
        name = node.id
        if name in allow.BUILTINS:
            p = self.parent.get(id(node))
            if name in allow.AS_VALUE and not (isinstance(p, ast.Call) and p.func is node):
                self.flag(node, "dynamic-name", f"{name} used as a value")
        elif name in BUILTIN_NAMES and name not in allow.MODULE_GLOBALS:
            self.flag(node, allow.BUILTIN_RULES.get(name, "builtin"), name)

    def _as_value(self, node) -> bool:
        """Whether a module is used as a value: anything but the base of an attribute, an alias
        (x = module), or the first argument of getattr/hasattr/dir."""
        p = self.parent.get(id(node))
        if isinstance(p, ast.Attribute) and p.value is node:
            return False
        if isinstance(p, (ast.Assign, ast.AnnAssign)) and p.value is node and all(
                isinstance(t, ast.Name) for t in (p.targets if isinstance(p, ast.Assign)
                                                  else [p.target])):
            return False
        if isinstance(p, ast.Call) and p.args and p.args[0] is node and isinstance(
                p.func, ast.Name) and p.func.id in ("getattr", "hasattr", "dir"):
            return False
        return True

    def on_Attribute(self, node):
        base = self.value(node.value)
        self._attr(node, base, node.attr, store=not isinstance(node.ctx, ast.Load))
        if isinstance(node.ctx, ast.Load):
            v = self.value(node)
            if module_value(v.path) and self._as_value(node):
                self.flag(node, "value", f"{v.path} used as a value")

    def _attr(self, node, base, attr, store=False, setter=""):
        """Reading (or setting) `attr` of what `base` may be."""
        if rooted(base.path):
            full = f"{base.path}.{attr}"
            problem, _ = judge_path(full)
            last = full.count(".")
            if problem and (problem[0] == last or problem[0] == 0 and last == 1):
                chain = self._chain(node, full)  # the whole dotted name it is part of
                self.flag(node, allow.kind(chain) or problem[1], chain)
        elif (found := object_attr(attr)) is not None:
            self.flag(node, found[0], f"{self.seg(node)}" if not setter else setter)
        if store and base.path:
            what = base.path if not base.path.startswith(("own:", "own-def:")) else None
            if what:
                verb = "del " if isinstance(getattr(node, "ctx", None), ast.Del) else ""
                self.flag(node, "patch", setter or f"{verb}{what}.{attr}" + ("" if verb else
                                                                               " = ..."))

    def _chain(self, node, path: str) -> str:
        """The longest dotted name `node` begins (torch.utils for torch.utils._python_dispatch.x
        gives the whole name, to say what it reaches)."""
        p = self.parent.get(id(node))
        while isinstance(p, ast.Attribute) and p.value is node:
            path, node, p = f"{path}.{p.attr}", p, self.parent.get(id(p))
        return path

    def on_Subscript(self, node):
        if not isinstance(node.ctx, ast.Load):
            base = self.value(node.value)
            if base.path and not base.path.startswith(("own:", "own-def:")):
                self.flag(node, "patch", f"{base.path}[...] = ...")

    def on_Constant(self, node):
        if id(node) not in self.skip and isinstance(node.value, (str, bytes)):
            s = node.value if isinstance(node.value, str) else node.value.decode("latin-1")
            self._string(node, s)

    def on_BinOp(self, node):
        p = self.parent.get(id(node))
        if not isinstance(p, ast.BinOp) and isinstance(s := literal(node), str):
            self._string(node, s)  # a name built from pieces
        if isinstance(node.op, ast.MatMult):
            self._compute(node, "@")

    def on_JoinedStr(self, node):
        if isinstance(s := literal(node), str):
            self._string(node, s)

    def _string(self, node, s):
        if "/proc/" in s or s.rstrip("/").endswith("/proc"):
            self.flag(node, "proc", repr(s[:60]))
        if re.match(r"grader(\.|$)", s):
            self.flag(node, "grader", repr(s[:60]))
        if re.match(r"(?:aten|prims?|_)::", s):  # an op of PyTorch's own, for a registration
            self.flag(node, "intercept", repr(s[:60]))  # (Library.impl, m.impl) to take over
        if s == "__main__":
            self.flag(node, "main", repr(s))
        elif s in allow.FRAME_ATTRS or s in allow.REACHING:
            self.flag(node, "introspection", repr(s[:60]))

    def on_FunctionDef(self, node):
        if node.name in allow.DEFS:
            self.flag(node, allow.DEFS[node.name], f"def {node.name}")
        if node.name in ("__getattr__", "__dir__") and self.parent.get(id(node)) is self.tree:
            self.flag(node, "obfuscation", f"a module-level {node.name}: names made at run time")

    on_AsyncFunctionDef = on_FunctionDef

    def on_ClassDef(self, node):
        for b in node.bases:
            path = self.value(b).path or ""
            if path in ("torch.Tensor", "torch.nn.Parameter") or path.startswith("torch.Tensor."):
                self.flag(node, "intercept", f"class {node.name}({path}): a tensor subclass")

    def on_ExceptHandler(self, node):
        for stmt in node.body:
            for n in ast.walk(stmt):
                if isinstance(n, ast.Call):
                    self._fallback(node, n)

    def _fallback(self, handler, call):
        f = call.func
        path = self.value(f).path or ""
        compute = path.startswith(("torch.nn.functional.", "torch.linalg.", "torch.special.",
                                   "torch.fft.", "torch.ops.aten.")) or (
            path.startswith("torch.") and path.count(".") == 1 and path[6:] not in ALLOCATE)
        if not path and isinstance(f, ast.Attribute) and f.attr in COMPUTE_METHODS:
            compute = not rooted(self.value(f.value).path)
        if compute and not path.startswith(QUIET):
            caught = f" {ast.unparse(handler.type)}" if handler.type is not None else ""
            self.flag(handler, "fallback", f"except{caught}: {self.seg(call)}")

    def _compute(self, node, what):
        for p in self._ancestors(node):
            if isinstance(p, ast.ExceptHandler):
                return self.flag(p, "fallback", f"except ...: {self.seg(node)}")
            if isinstance(p, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
                return

    def _ancestors(self, node):
        while id(node) in self.parent:
            node = self.parent[id(node)]
            yield node

    def on_Call(self, node):
        f, args = node.func, node.args
        scope = self.scope(node)
        builtin = f.id if isinstance(f, ast.Name) and scope.resolve_scope(f.id) is None else None
        path = builtin or self.value(f).path or ""
        name = self.constant(args[1]) if len(args) > 1 else None
        if builtin in ("getattr", "setattr", "delattr") and len(args) >= 2:
            base = self.value(args[0])
            if not isinstance(name, str):
                self.flag(node, "dynamic-name", self.seg(node))
            else:
                self._attr(node, base, name, store=builtin != "getattr",
                           setter="" if builtin == "getattr" else self.seg(node))
        elif builtin in ("exec", "eval", "compile") and isinstance(c := literal(args[0]) if args
                                                                    else None, str):
            self._nested(c, self.offset if self.depth else node.lineno)
        elif path in ("operator.attrgetter", "operator.methodcaller"):
            for a in args[:1] if path.endswith("methodcaller") else args:
                if not isinstance(s := self.constant(a), str):
                    self.flag(node, "dynamic-name", self.seg(node))
                else:
                    for part in s.split("."):
                        if (found := object_attr(part)) is not None:
                            self.flag(node, found[0], self.seg(node))
        elif path in ("functools.update_wrapper", "operator.setitem", "operator.delitem",
                      "operator.iadd", "operator.ior", "operator.iconcat") and args and (
                base := self.value(args[0]).path) and not base.startswith(("own:", "own-def:")):
            self.flag(node, "patch", self.seg(node))  # changes its first argument
        elif isinstance(f, ast.Call) and (self.value(f.func).path or "") == "functools.wraps" and \
                args and self.value(args[0]).path:
            self.flag(node, "patch", self.seg(node))
        elif path in allow.LOADERS:
            first = self.constant(args[0]) if args else None
            if not isinstance(first, str) or first.startswith(("/", "~")) or ".." in first:
                self.flag(node, "native", self.seg(node))
        elif path in allow.REGISTRARS and args:
            first = self.constant(args[0])
            if not isinstance(first, str) or first.split("::")[0] in allow.TORCH_NAMESPACES:
                self.flag(node, "intercept", self.seg(node))
        if isinstance(f, ast.Attribute) and f.attr in allow.MUTATORS:
            base = self.value(f.value).path
            if base and not base.startswith(("own:", "own-def:")):
                self.flag(node, "patch", f"{base}.{f.attr}(...)")

    def _nested(self, code: str, line: int):
        if self.depth >= 2:
            return
        try:
            tree = ast.parse(code)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            return  # exec would fail the same way; exec itself is a finding
        self.found += _Review(code, tree, self.own, self.depth + 1, line).run()


def review_python(data: bytes, own: dict | None = None) -> list[tuple[int, str, str]]:
    """The findings in one Python file; `own` maps the track's module names (its files, its
    built extension) to what each imported at module level."""
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        src = data.decode(encoding)
    except (SyntaxError, LookupError, UnicodeDecodeError) as e:
        return [(1, "limits", f"cannot decode it: {e}"[:120])]
    try:
        tree = ast.parse(src)
    except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError) as e:
        line = getattr(e, "lineno", None) or 1
        return [(line, "limits", f"Python cannot parse it: {type(e).__name__}: "
                                 f"{getattr(e, 'msg', None) or e}"[:120])]
    found = [] if encoding in ENCODINGS else [(1, "obfuscation", f"source encoding {encoding}")]
    try:
        return found + _Review(src, tree, own or {}).run()
    except Exception as e:  # noqa: BLE001 - never stop the judge
        return found + [(1, "limits", f"the review failed on it: {type(e).__name__}: {e}"[:120])]


def module_aliases(data: bytes) -> dict[str, str]:
    """What a module of the track binds at its top level that another file may reach through it
    (helper.torch, helper.lib, helper.kernel, helper.get()): name -> a dotted path it imported or
    aliased, "own-def"/"own-class" for its functions and classes, "<k made by ...>" for a
    decorated one; {} if unreadable (the file's own review says why)."""
    try:
        tree = ast.parse(data)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return {}
    out = {}
    for n in tree.body:
        if isinstance(n, ast.Import):
            for a in n.names:
                out[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
        elif isinstance(n, ast.ImportFrom) and n.module and not n.level:
            for a in n.names:
                out[a.asname or a.name] = f"{n.module}.{a.name}"
        elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            plain = all(Flow._plain_decorator(d, None) for d in n.decorator_list)
            out[n.name] = (("own-class" if isinstance(n, ast.ClassDef) else "own-def") if plain
                           else f"<{n.name} made by a decorator>")
        elif isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(
                n.targets[0], ast.Name):
            root, dotted = n.value, []
            while isinstance(root, ast.Attribute):
                dotted.insert(0, root.attr)
                root = root.value
            if isinstance(root, ast.Name) and root.id in out and "own" not in out[root.id]:
                out[n.targets[0].id] = ".".join([out[root.id], *dotted])
    return out
