"""Review: read a track's source files before the submission runs, and flag, with file:line,
everything an honest kernel never needs.

The judge calls `review_track(folder, files)`; it reads files and never imports them. Python is
read with `ast` (comments and strings do not trigger it; names are followed through imports,
aliases, containers and `getattr` with a literal name), C++/CUDA with regular expressions over
the source with its comments and string literals blanked. Any finding marks the track "needs
review" beside the automatic checks, never instead of them.

What reading cannot do: follow every path data can take (a module object returned by a
function and patched by another). It catches the few-line patches and makes anything longer
look deliberate; what runs is checked at run time.
"""
from __future__ import annotations

import ast
import io
import os
import re
import tokenize
from dataclasses import dataclass
from pathlib import Path

PY = (".py",)
CPP = (".cpp", ".cc", ".cxx", ".cu", ".h", ".hh", ".hpp", ".cuh", ".inl")
BINARY = (".so", ".pyd", ".pyc", ".pyo", ".dylib", ".dll")  # code Python or the loader can run
MAX_BYTES, MAX_FILES, MAX_DEPTH, MAX_PER_FILE = 1_000_000, 100, 4, 40

WHAT = {
    "grader": "reaches the grader's own modules",
    "main": "reaches the __main__ module",
    "modules": "reaches Python's import system",
    "patch": "sets an attribute of a module it did not define",
    "namespace": "reaches into the namespace of a module it did not define",
    "dynamic-code": "runs or imports code built at run time",
    "dynamic-name": "reads an attribute whose name is computed at run time",
    "threads": "starts threads or processes",
    "native": "loads native code the review cannot read",
    "signals": "sends or handles signals",
    "proc": "reads /proc",
    "introspection": "inspects frames, the garbage collector or other code's internals",
    "file-write": "writes or removes files",
    "intercept": "hooks into PyTorch's dispatch, profiler or memory allocator",
    "aten-internal": "calls ATen's implementations directly, past the dispatcher the profiler sees",
    "library": "calls a vendor library instead of its own kernel",
    "python": "runs Python or TorchScript from C++",
    "obfuscation": "hides names from this review",
    "binary": "ships a compiled file the review cannot read",
    "link": "is a link leading outside the track folder (not read)",
    "limits": "was not reviewed",
}


@dataclass(frozen=True)
class Finding:
    file: str   # relative to the track folder
    line: int
    rule: str   # a key of WHAT
    text: str   # for an instructor: what was seen, e.g. "sets an attribute of ... (x.y = ...)"

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.text}"


# --- Python --------------------------------------------------------------------------------

# A dotted name matches a pattern (fnmatch) or lies below it ("signal" covers signal.SIGKILL).
NAMES = (
    ("grader", ("grader",)),
    ("main", ("__main__",)),
    ("modules", ("sys.modules", "sys.meta_path", "sys.path_hooks", "sys.path_importer_cache",
                 "importlib.reload", "importlib.util.spec_from_file_location",
                 "importlib.util.module_from_spec", "importlib.machinery", "importlib._bootstrap*",
                 "runpy", "imp", "zipimport")),
    ("threads", ("threading", "_thread", "multiprocessing", "concurrent", "subprocess",
                 "_posixsubprocess", "pty", "posix", "os.fork*", "os.system", "os.popen",
                 "os.exec*", "os.spawn*", "os.posix_spawn*", "os.register_at_fork",
                 "asyncio.create_subprocess_*", "asyncio.subprocess", "asyncio.to_thread",
                 "torch.multiprocessing", "torch.jit.fork", "torch.jit._fork")),
    ("native", ("ctypes", "_ctypes", "cffi", "torch.utils.cpp_extension.load_inline")),
    ("signals", ("signal", "_signal", "os.kill", "os.killpg", "os.abort", "os.pidfd_open")),
    ("introspection", ("sys._getframe", "sys._current_frames", "sys._current_exceptions",
                       "sys.settrace", "sys.setprofile", "sys.addaudithook", "sys.monitoring",
                       "sys.call_tracing", "inspect.currentframe", "inspect.stack",
                       "inspect.trace", "inspect.getouterframes", "inspect.getinnerframes",
                       "gc.get_objects", "gc.get_referrers", "gc.get_referents", "gc.callbacks",
                       "traceback.walk_stack", "traceback.walk_tb")),
    ("dynamic-code", ("marshal", "pickle.load*", "dill", "types.CodeType", "codeop")),
    ("intercept", ("torch.utils._python_dispatch", "torch.overrides.TorchFunctionMode",
                   "torch._C._autograd", "torch._C._profiler", "torch.autograd._*profiler*",
                   "torch.cuda.cudart", "torch.cuda.profiler",
                   "torch.library.register_torch_dispatch",
                   "torch.nn.modules.module.register_module_*",
                   "torch.autograd.graph.saved_tensors_hooks", "torch.autograd.graph.save_on_cpu",
                   "torch.cuda.*CUDAPluggableAllocator", "torch.cuda.*change_current_allocator",
                   "torch.cuda.*caching_allocator_alloc",
                   "torch.cuda.*set_per_process_memory_fraction",
                   "torch.cuda.memory._*")),
    ("file-write", ("os.open", "os.remove", "os.unlink", "os.rename", "os.replace", "os.rmdir",
                    "os.removedirs", "os.truncate", "os.chmod", "os.symlink", "os.link", "shutil")),
)
ATTRS = {  # attribute names (and strings naming them) only introspection needs
    "f_back", "f_globals", "f_locals", "f_builtins", "tb_frame", "gi_frame", "cr_frame",
    "ag_frame", "__globals__", "__closure__", "cell_contents", "__subclasses__", "__builtins__"}
CODE_RUNNERS = {"exec", "eval", "compile"}
IMPORTERS = {"__import__", "importlib.import_module", "importlib.__import__"}
AS_VALUE = CODE_RUNNERS | {"__import__", "setattr", "delattr"}  # never passed around honestly
OPENERS = {"open", "io.open", "codecs.open", "os.fdopen"}
LOADERS = {"torch.ops.load_library", "torch.classes.load_library"}
REGISTRARS = {f"torch.library.{n}" for n in (
    "Library", "impl", "register_kernel", "register_fake", "register_autograd", "define",
    "custom_op", "triton_op", "register_vmap", "_scoped_library")}
TORCH_NAMESPACES = {"aten", "prim", "prims", "_", "profiler", "inductor"}
OWN = {"self", "cls", "ctx"}
SETTERS = ("setattr", "delattr", "vars")
BINDERS = (ast.Assign, ast.AnnAssign, ast.NamedExpr, ast.For, ast.AsyncFor, ast.comprehension,
           ast.withitem, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)


def _pattern(patterns) -> re.Pattern:
    """One regex for a rule's patterns: each matches itself, `*` anything, and what lies below."""
    return re.compile("|".join(re.escape(p).replace(r"\*", ".*") + r"(?:\..*)?" for p in patterns))


RULES = [(rule, _pattern(patterns)) for rule, patterns in NAMES]
ROOTS = {p.split(".")[0] for _, patterns in NAMES for p in patterns}


def _lit(node):
    """The value of a literal, with string concatenation and ''.join([...]) folded."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        a, b = _lit(node.left), _lit(node.right)
        return a + b if isinstance(a, str) and isinstance(b, str) else None
    if isinstance(node, ast.JoinedStr):
        parts = [_lit(v) for v in node.values]
        return "".join(parts) if all(isinstance(p, str) for p in parts) else None
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr == "join" and isinstance(_lit(node.func.value), str)
            and len(node.args) == 1 and isinstance(node.args[0], (ast.List, ast.Tuple))):
        parts = [_lit(e) for e in node.args[0].elts]
        if all(isinstance(p, str) for p in parts):
            return _lit(node.func.value).join(parts)
    return None


def _dotted(node) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return base and f"{base}.{node.attr}"
    return None


def _root(node):
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return node


class _Python(ast.NodeVisitor):
    def __init__(self, src: str, depth: int = 0, offset: int = 0):
        self.src, self.depth, self.offset = src, depth, offset
        self.found: list[tuple[int, str, str]] = []
        self.aliases: dict[str, str] = {}  # local name or own dotted path -> what it holds;
        #                                    "x[]": a container holding x
        self.bound: set[str] = set()       # names the file binds: they shadow builtins
        self.sinks: dict = {}              # function name or id(lambda) -> (params, method, set)
        self.docstrings: set[int] = set()
        self.called: set[int] = set()

    def run(self, tree):
        self._collect(tree)
        self.visit(tree)
        return self.found

    def flag(self, node, rule, detail):
        self.found.append((getattr(node, "lineno", 1) + self.offset, rule, str(detail)))

    def seg(self, node) -> str:
        text = (ast.get_source_segment(self.src, node) or "").strip().splitlines() or ["?"]
        return text[0] if len(text[0]) <= 80 and len(text) == 1 else text[0][:77] + "..."

    # what a name or expression holds, as a dotted name of something the file did not define
    def qual(self, node) -> str | None:
        if isinstance(node, ast.Name):
            return self.aliases.get(node.id)
        if isinstance(node, ast.NamedExpr):
            return self.qual(node.value)
        if isinstance(node, ast.Attribute):
            if _dotted(node) in self.aliases:
                return self.aliases[_dotted(node)]
            if node.attr == "__class__":  # a class is shared by every instance: never own
                return f"{self.qual(node.value) or self.seg(node.value)}.__class__"
            base = self.qual(node.value)
            return f"{base}.{node.attr}" if base and not base.endswith("[]") else None
        if isinstance(node, ast.Subscript):
            base = self.qual(node.value)
            return base and (base[:-2] if base.endswith("[]") else base + "[...]")
        if isinstance(node, ast.Call):
            name, args = self.callee(node.func), node.args
            if name in IMPORTERS and args and isinstance(_lit(args[0]), str):
                return _lit(args[0])
            if name == "getattr" and len(args) >= 2 and isinstance(_lit(args[1]), str):
                base = self.qual(args[0])
                return base and f"{base}.{_lit(args[1])}"
            if name == "type" and len(args) == 1:
                return "type(...)"
            if name == "vars" and args:
                base = self.qual(args[0])
                return base and f"{base}.__dict__"
        return None

    def held(self, node) -> str | None:
        """qual(), or "x[]" for a list/tuple/set/dict literal holding a foreign x."""
        q = self.qual(node)
        if q or not isinstance(node, (ast.List, ast.Tuple, ast.Set, ast.Dict)):
            return q
        for e in node.values if isinstance(node, ast.Dict) else node.elts:
            if q := self.held(e):
                return q if q.endswith("[]") else q + "[]"
        return None

    def callee(self, func) -> str | None:
        if isinstance(func, ast.Name) and func.id not in self.aliases:
            return None if func.id in self.bound else func.id  # a builtin
        name = self.qual(func)
        return name[len("builtins."):] if name and name.startswith("builtins.") else name

    def _collect(self, tree):
        nodes = list(ast.walk(tree))
        for n in nodes:
            if isinstance(n, ast.Import):
                for a in n.names:  # `import a.b` binds a; `import a.b as c` binds c to a.b
                    top = a.name.split(".")[0]
                    self.aliases[a.asname or top] = a.name if a.asname else top
            elif isinstance(n, ast.ImportFrom) and n.level == 0 and n.module:
                for a in n.names:
                    self.aliases[a.asname or a.name] = f"{n.module}.{a.name}"
            elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                self.bound.add(n.name)
            elif isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
                self.bound.add(n.id)
            elif isinstance(n, ast.arg):
                self.bound.add(n.arg)
            elif isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant):
                self.docstrings.add(id(n.value))  # a bare string does nothing
        binders = [n for n in nodes if isinstance(n, BINDERS)]
        for _ in range(3):  # aliases of aliases, in any order
            before = len(self.aliases)
            for n in binders:
                if isinstance(n, ast.Assign):
                    for t in n.targets:
                        self._bind(t, n.value)
                elif isinstance(n, (ast.AnnAssign, ast.NamedExpr)) and n.value:
                    self._bind(n.target, n.value)
                elif isinstance(n, (ast.For, ast.AsyncFor, ast.comprehension)):
                    self._bind(n.target, n.iter, element=True)
                elif isinstance(n, ast.withitem) and n.optional_vars:
                    self._bind(n.optional_vars, n.context_expr)
                elif isinstance(n, ast.ClassDef):
                    for s in n.body:
                        for t in s.targets if isinstance(s, ast.Assign) else ():
                            if isinstance(t, ast.Name) and (q := self.held(s.value)):
                                self.aliases.setdefault(f"{n.name}.{t.id}", q)
                else:  # a function's defaults
                    a = n.args
                    params = a.posonlyargs + a.args
                    for p, d in zip(params[len(params) - len(a.defaults):], a.defaults):
                        self._bind(ast.Name(p.arg, ast.Store()), d)
                    for p, d in zip(a.kwonlyargs, a.kw_defaults):
                        if d is not None:
                            self._bind(ast.Name(p.arg, ast.Store()), d)
            if len(self.aliases) == before:
                break
        for n in nodes:  # functions that set attributes on a parameter
            if isinstance(n, ast.ClassDef):
                for f in n.body:
                    if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        static = any(_dotted(d) == "staticmethod" for d in f.decorator_list)
                        self._sink(f, f.name, method=not static)
        for n in nodes:
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name not in self.sinks:
                self._sink(n, n.name, method=False)
            elif isinstance(n, ast.Lambda):
                self._sink(n, id(n), method=False)

    def _bind(self, target, value, element=False):
        if isinstance(target, (ast.Tuple, ast.List)):
            same = isinstance(value, (ast.Tuple, ast.List)) and len(value.elts) == len(target.elts)
            for i, t in enumerate(target.elts):
                self._bind(t, value.elts[i] if same else value, element or not same)
            return
        key, q = _dotted(target), self.held(value)
        if key and q and key not in self.aliases:
            self.aliases[key] = (q[:-2] if q.endswith("[]") else q + "[...]") if element else q

    def _sink(self, f, key, method):
        a = f.args
        params = [p.arg for p in a.posonlyargs + a.args + a.kwonlyargs]
        hit = set()
        for n in ast.walk(f):
            if isinstance(n, (ast.Attribute, ast.Subscript)) and not isinstance(n.ctx, ast.Load):
                root = _root(n)
            elif isinstance(n, ast.Call) and n.args and self.callee(n.func) in SETTERS:
                root = _root(n.args[0])
            else:
                continue
            if isinstance(root, ast.Name) and root.id in params:
                hit.add(root.id)
        self.sinks[key] = (params, method, hit)

    # --- the checks --------------------------------------------------------------------------
    def check_name(self, node, name) -> bool:
        if name.split(".", 1)[0] not in ROOTS:
            return False
        for rule, pattern in RULES:
            if pattern.fullmatch(name):
                self.flag(node, rule, name)
                return True
        return False

    def check_string(self, node, s):
        if "/proc/" in s or s.rstrip("/").endswith("/proc"):
            self.flag(node, "proc", repr(s[:60]))
        if re.match(r"grader(\.|$)", s):
            self.flag(node, "grader", repr(s))
        if s in ATTRS:
            self.flag(node, "introspection", repr(s))

    def visit_Import(self, node):
        for a in node.names:
            self.check_name(node, a.name)

    def visit_ImportFrom(self, node):
        if node.level or not node.module:
            return
        for a in node.names:
            if a.name == "*":  # every name of the module, the flagged ones among them
                hidden = [r for r, ps in NAMES if any(p.startswith(node.module + ".") for p in ps)]
                if hidden:
                    self.flag(node, hidden[0], f"from {node.module} import *")
                else:
                    self.check_name(node, node.module)
            else:
                self.check_name(node, f"{node.module}.{a.name}")

    def visit_Name(self, node):
        q = self.aliases.get(node.id)
        if q:
            self.check_name(node, q.rstrip("[]."))
        elif node.id == "__builtins__":
            self.flag(node, "introspection", node.id)
        elif node.id in AS_VALUE and node.id not in self.bound and id(node) not in self.called:
            self.flag(node, "dynamic-code" if node.id not in ("setattr", "delattr") else "patch",
                      f"{node.id} used as a value")

    def visit_Attribute(self, node):
        if isinstance(node.ctx, (ast.Store, ast.Del)):
            base = self.qual(node.value)
            if base and not base.endswith("[]"):
                self.flag(node, "patch", f"del {base}.{node.attr}" if isinstance(node.ctx, ast.Del)
                          else f"{base}.{node.attr} = ...")
        elif (q := self.qual(node)) and self.check_name(node, q):
            return
        base = self.qual(node.value)
        if node.attr in ATTRS:
            self.flag(node, "introspection", self.seg(node))
        elif node.attr in ("dlopen", "dlsym"):
            self.flag(node, "native", self.seg(node))
        elif node.attr == "__dict__" and base:
            self.flag(node, "namespace", f"{base}.__dict__")
        elif node.attr in ("__setattr__", "__delattr__") and (
                base or _dotted(node.value) in ("object", "type")):
            self.flag(node, "patch", self.seg(node))
        elif node.attr in ("write_text", "write_bytes"):
            self.flag(node, "file-write", self.seg(node))
        elif node.attr == "run_in_executor":
            self.flag(node, "threads", self.seg(node))
        self.generic_visit(node)

    def visit_Subscript(self, node):
        if isinstance(node.ctx, (ast.Store, ast.Del)):
            base = self.qual(node.value)
            if base and not base.endswith("[]") and not base.startswith("os.environ"):
                self.flag(node, "patch", f"{base}[...] = ...")
        self.generic_visit(node)

    def visit_Constant(self, node):
        if isinstance(node.value, (str, bytes)) and id(node) not in self.docstrings:
            self.check_string(node, node.value if isinstance(node.value, str)
                              else node.value.decode("latin-1"))

    def visit_BinOp(self, node):
        if isinstance(s := _lit(node), str):
            self.check_string(node, s)
        self.generic_visit(node)

    def visit_FunctionDef(self, node):
        if node.name in ("__torch_function__", "__torch_dispatch__"):
            self.flag(node, "intercept", f"def {node.name}")
        self.generic_visit(node)

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Call(self, node):
        name, args = self.callee(node.func), node.args
        first = _lit(args[0]) if args else None
        if isinstance(node.func, ast.Name) and name == node.func.id:
            self.called.add(id(node.func))
        if name in CODE_RUNNERS:
            if isinstance(first, str) and self.depth < 3:
                self._nested(first, node.lineno - 1)
            else:
                self.flag(node, "dynamic-code", self.seg(node))
        elif name in IMPORTERS and not isinstance(first, str):
            self.flag(node, "dynamic-code", self.seg(node))
        elif name in ("getattr", "hasattr") and len(args) >= 2:
            if not isinstance(_lit(args[1]), str) and self.qual(args[0]):
                self.flag(node, "dynamic-name", self.seg(node))
        elif name in ("setattr", "delattr") and args:
            obj = args[0]
            computed = len(args) > 1 and not isinstance(_lit(args[1]), str)
            if (self.qual(obj) or not isinstance(_root(obj), ast.Name)
                    or computed and _dotted(obj) not in OWN):
                self.flag(node, "patch", self.seg(node))
        elif name == "vars" and args and self.qual(args[0]):
            self.flag(node, "namespace", self.seg(node))
        elif name in OPENERS:
            mode = _lit(args[1]) if len(args) > 1 else next(
                (_lit(k.value) for k in node.keywords if k.arg == "mode"), "r")
            if not isinstance(mode, str) or set(mode) & set("wax+"):
                self.flag(node, "file-write", self.seg(node))
        elif name in LOADERS:
            if not isinstance(first, str) or first.startswith(("/", "~")) or ".." in first:
                self.flag(node, "native", self.seg(node))
        elif name in REGISTRARS and args:
            if not isinstance(first, str) or first.split("::")[0] in TORCH_NAMESPACES:
                self.flag(node, "intercept", self.seg(node))
        self._check_sink(node)
        if (q := self.qual(node)) and q != "type(...)":
            self.check_name(node, q)
        self.generic_visit(node)

    def _check_sink(self, node):
        f = node.func
        key = id(f) if isinstance(f, ast.Lambda) else (
            f.id if isinstance(f, ast.Name) and f.id not in self.aliases else
            f.attr if isinstance(f, ast.Attribute) and not self.qual(f.value) else None)
        if key not in self.sinks:
            return
        params, method, hit = self.sinks[key]
        shift = 1 if method and isinstance(f, ast.Attribute) else 0
        given = {params[i + shift]: a for i, a in enumerate(node.args) if i + shift < len(params)}
        given.update({k.arg: k.value for k in node.keywords if k.arg})
        for p in hit:
            if p in given and (q := self.held(given[p])):
                self.flag(node, "patch", f"{self.seg(node)}: sets attributes of {q.rstrip('[]')}")

    def _nested(self, code: str, offset: int):
        try:
            tree = ast.parse(code)
        except (SyntaxError, ValueError):
            return  # exec would fail the same way
        inner = _Python(code, self.depth + 1, self.offset + offset)
        inner.aliases.update(self.aliases)
        self.found += inner.run(tree)


def _review_python(data: bytes) -> list[tuple[int, str, str]]:
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        src = data.decode(encoding, errors="replace")
        tree = ast.parse(src)
    except (SyntaxError, ValueError, LookupError):
        return []  # cannot be imported either
    found = _Python(src).run(tree)
    if encoding not in ("utf-8", "utf-8-sig", "ascii", "latin-1", "iso-8859-1"):
        found.append((1, "obfuscation", f"source encoding {encoding}"))
    return found


# --- C++ / CUDA ----------------------------------------------------------------------------

TOKENS = re.compile(r"""(//[^\n]*|/\*.*?\*/)|(R"([^()\\\s]{0,16})\(.*?\)\3"|"(?:\\.|[^"\\\n])*"|"""
                    r"""'(?:\\.|[^'\\\n])*')""", re.S)  # comments | raw, plain and char literals
CALL = r"(?<![\w.>:])(?:std\s*::\s*|::\s*)?(?:{})\s*\("
DEFINE = r"^[ \t]*#[ \t]*define[ \t]+\w+(?:\([^)\n]*\))?[ \t]+(?:{})\b"
PROCESS = "system|popen|fork|vfork|execl|execlp|execle|execv|execvp|execvpe|posix_spawnp?"
SIGNAL = "kill|killpg|tgkill|tkill|signal|sigaction|sigqueue|raise|abort|pthread_kill"
AT_CUDA_UTILS = ("philox|detail|getCurrent\\w*|getDevice\\w*|device_count|current_device|"
                 "set_device|"
                 "is_available|device_synchronize|stream_synchronize|warning_state")
CPP_CODE = (  # (rule, substrings of which one must be present, then the regex that decides)
    ("aten-internal", ("native", "_ops", "redispatch", "composite"),
     r"\b(?:native|_ops|redispatch|compositeexplicitautograd\w*|compositeimplicitautograd)\b"),
    ("aten-internal", ("cpu",), r"\bat\s*::\s*cpu\s*::"),
    ("aten-internal", ("cuda",),  # at::cuda::<snake_case op> is a structured kernel, not a helper
     rf"\bat\s*::\s*cuda\s*::\s*(?!(?:{AT_CUDA_UTILS})\b)[a-z_][a-z0-9_]*\b"),
    ("library", ("cublas", "cudnn", "cusparse", "cufft", "cusolver", "cutensor", "nccl"),
     r"\b(?:cublas|cudnn|cusparse|cufft|cusolver|cutensor|nccl)\w*"),
    ("library", ("curand", "cub", "thrust"),  # curand's host API; the device API is honest
     r"\bcurand(?:Create|Generate|Set|Destroy|Generator)\w*|"
     r"\bcub\s*::\s*Device\w+|\bthrust\s*::\s*(?!complex\b|pair\b|tuple\b)\w+\s*\("),
    ("native", ("dl", "syscall", "nvrtc", "ModuleLoad", "LibraryLoad"),
     r"\b(?:dlopen|dlsym|dlmopen|dlvsym|syscall|nvrtc\w+|cuModuleLoad\w*|cuLibraryLoad\w*|"
     r"cudaLibraryLoad\w*)\b"),
    ("python", ("Py",), r"\bPy(?:[A-Z][A-Za-z]*)?_[A-Z]\w*\s*\("),
    ("python", ("exec", "eval", "globals", "import", "jit"), r"\b(?:py|pybind11)\s*::\s*(?:exec|"
     r"eval|eval_file|globals|module_?\s*::\s*import)\b|\btorch\s*::\s*jit\b"),
    ("threads", ("std",), r"\bstd\s*::\s*(?:thread|jthread|async)\b"),
    ("threads", ("pthread_create", "system", "popen", "fork", "exec", "posix_spawn"),
     rf"\bpthread_create\b|{CALL.format(PROCESS)}|{DEFINE.format(PROCESS)}"),
    ("signals", tuple(SIGNAL.split("|")), rf"{CALL.format(SIGNAL)}|{DEFINE.format(SIGNAL)}"),
    ("intercept", ("TORCH_LIBRARY",),  # registering into PyTorch's own namespaces
     r"TORCH_LIBRARY(?:_IMPL|_FRAGMENT)?\s*\(\s*(?:aten|prims?|_)\s*,"),
    ("intercept", ("RecordFunction", "Callback", "rofiler", "constructor", "globalContext"),
     r"\b(?:RecordFunctionGuard|DisableRecordFunctionGuard|enableRecordFunction|addGlobalCallback|"
     r"addThreadLocalCallback|removeCallback|clear\w*Callbacks|\w*[eE]nableProfiler\w*|"
     r"disableProfiler\w*)\b|__attribute__\s*\(\(\s*constructor|\bgnu\s*::\s*constructor\b|"
     r"\bglobalContext\s*\(\s*\)\s*\.\s*set\w+"),
    # token pasting, and a name split by a backslash-newline, can spell any name above
    ("obfuscation", ("##", "\\\n", "\\\r"), r"##|\w\\\r?\n"),
)
CPP_INCLUDES = (
    ("aten-internal", r"^ATen/native/|^ATen/(?:CPU|CUDA|Meta|Native|Redispatch|CompositeExplicit"
                      r"Autograd\w*|CompositeImplicitAutograd)Functions\.h$|"
                      r"^ATen/ops/\w+_(?:native|\w+_dispatch|ops)\.h$|^ATen/cuda/CUDABlas"),
    ("library", r"^(?:cublas|cudnn|cusparse|cufft|cusolver|cutensor|nccl|curand\.h|cub/device/|"
                r"thrust/)"),
    ("native", r"^(?:dlfcn\.h|nvrtc)"),
    ("python", r"^(?:Python\.h|pybind11/(?:embed|eval)\.h|torch/script\.h|torch/csrc/jit/)"),
    ("threads", r"^(?:thread|future|pthread\.h|spawn\.h|sys/wait\.h)$"),
    ("signals", r"^(?:csignal|signal\.h)$"),
    ("intercept", r"^(?:ATen/record_function\.h|torch/csrc/(?:autograd/)?profiler)"),
)


def _review_cpp(data: bytes) -> list[tuple[int, str, str]]:
    text = data.decode("utf-8", errors="replace")
    # blanks keep every offset and line number
    blank = lambda m: "\n".join(" " * len(p) for p in m[0].split("\n"))  # noqa: E731
    no_comments = TOKENS.sub(lambda m: blank(m) if m[1] else m[0], text)
    strings = [(m.start(), m[0]) for m in TOKENS.finditer(no_comments)]
    code = TOKENS.sub(blank, no_comments)
    lines = text.splitlines()
    line_of = lambda pos: text.count("\n", 0, pos) + 1  # noqa: E731
    shown = lambda pos: lines[line_of(pos) - 1].strip()[:80] if lines else ""  # noqa: E731
    found = [(line_of(m.start()), rule, shown(m.start()))
             for rule, needs, pattern in CPP_CODE if any(n in code for n in needs)
             for m in re.finditer(pattern, code, re.M)]
    for m in re.finditer(r'^[ \t]*#[ \t]*include[ \t]*[<"]([^>"\n]+)[>"]', no_comments, re.M):
        found += [(line_of(m.start()), rule, f"#include {m[1]}")
                  for rule, pattern in CPP_INCLUDES if re.search(pattern, m[1].strip())]
    for pos, s in strings:
        if "/proc" in s:
            found.append((line_of(pos), "proc", s[:60]))
        if re.fullmatch(r'[uUL8R]*"(?:aten|prims?)(?:::.*)?"', s, re.S):
            found.append((line_of(pos), "intercept", shown(pos)))
    return found


# --- the track folder ----------------------------------------------------------------------

def _entries(folder: Path) -> list[str]:
    """Every file and link under `folder` (relative, sorted), links not followed, bounded."""
    out = []
    for root, dirs, names in os.walk(folder, followlinks=False):
        rel = Path(root).relative_to(folder)
        if len(rel.parts) >= MAX_DEPTH:
            dirs[:] = []
        links = [d for d in dirs if (Path(root) / d).is_symlink()]
        out += sorted((rel / n).as_posix() for n in names + links)
        dirs.sort()
        if len(out) > 10 * MAX_FILES:
            break
    return out


def _pyc_runs_unchecked(path: Path) -> bool:
    """A __pycache__ entry Python would run without matching it to its source: one without a
    source beside the cache folder, or an unchecked hash-based pyc (PEP 552)."""
    source = path.parent.parent / (path.name.split(".")[0] + ".py")
    with open(path, "rb") as f:
        flags = int.from_bytes(f.read(8)[4:8], "little")
    return not source.is_file() or (flags & 1 and not flags & 2)


def review_track(folder: Path, files: list[str]) -> list[Finding]:
    """Read every source of a track (its declared files, and any other Python, C++ or CUDA
    file under it) and return what an honest kernel never needs: the declared files first,
    each file's findings in line order."""
    folder = Path(folder)
    top = folder.resolve()
    found: list[Finding] = []
    names = list(dict.fromkeys([*files, *_entries(folder)]))
    read = 0
    for name in names:
        path = folder / name
        suffix = path.suffix.lower()
        if not (path.is_file() or path.is_symlink()):
            continue
        if not path.resolve().is_relative_to(top):
            found.append(Finding(name, 1, "link", WHAT["link"]))
            continue
        if suffix in BINARY and (suffix != ".pyc" or path.parent.name != "__pycache__"
                                 or _pyc_runs_unchecked(path)):
            found.append(Finding(name, 1, "binary", f"{WHAT['binary']} ({path.name})"))
            continue
        if suffix not in PY + CPP or not path.is_file():
            continue
        if read == MAX_FILES or path.stat().st_size > MAX_BYTES:
            why = "too many source files" if read == MAX_FILES else "larger than 1 MB"
            found.append(Finding(name, 1, "limits", f"{WHAT['limits']}: {why}"))
            continue
        read += 1
        data = path.read_bytes()
        raw = _review_python(data) if suffix in PY else _review_cpp(data)
        seen = set()
        for line, rule, detail in sorted(raw):
            if (line, rule) not in seen and len(seen) < MAX_PER_FILE:
                seen.add((line, rule))
                found.append(Finding(name, line, rule, f"{WHAT[rule]} ({detail})"))
    return found
