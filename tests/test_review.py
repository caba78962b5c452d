"""grader.judge.review: the judge's reading of a submission's sources, an allowlist. Each rule
flags what it should at the right file and line; the known evidence forgeries and the field's
dodges (tests/review_fixtures/forgeries/) are flagged on every line that does the deed; nothing
in the review can stop the judge (a file or rule that fails is a finding). Honest code is
tests/test_review_public.py's."""
import os
import py_compile
import re
import sys
import textwrap
import time
from pathlib import Path

import pytest

import grader.judge.review as review_module
from grader.judge import review_python
from grader.judge.review import WHAT, Finding, review_track

FIXTURES = Path(__file__).parent / "review_fixtures"
FORGERIES = FIXTURES / "forgeries"


def review(tmp_path, source, name="sub.py"):
    (tmp_path / name).write_text(textwrap.dedent(source).lstrip("\n"))
    return review_track(tmp_path, [name])


def assert_flags(found, line, rule, seen):
    hits = [f for f in found if f.line == line and f.rule == rule]
    assert hits, f"no {rule} finding on line {line}: {[str(f) for f in found]}"
    assert any(seen in f.text for f in hits), [str(f) for f in hits]


# (source, line, rule, what the finding shows): one or more per rule and route
PYTHON = [
    ("import grader.submission.evidence as e\ne.analyse = None", 1, "grader", "grader.submission"),
    ("import grader.submission.evidence as e\ne.analyse = None", 2, "patch", "evidence.analyse = ..."),
    ("from grader import runner", 1, "grader", "from grader import runner"),
    ("import sys\nsys.modules['grader.x'].analyse = None", 2, "modules", "sys.modules"),
    ("import sys\nsys.modules['grader.x'].analyse = None", 2, "grader", "'grader.x'"),
    ("import os\ndef f():\n    return os.sys.modules\n", 3, "modules", "os.sys"),
    ("import torch\nm = torch.os.sys\n", 2, "modules", "torch.os"),
    ("from os import sys", 1, "modules", "from os import sys"),
    ("import __main__", 1, "main", "import __main__"),
    ("m = __import__('__main__')", 1, "dynamic-code", "__import__"),
    ("import torch\nx = getattr(torch, 'o' + 's')", 2, "modules", "torch.os"),
    ("import torch\ndef f(name):\n    return getattr(torch, name)", 3, "dynamic-name",
     "getattr(torch, name)"),
    ("import torch\nfor n in ['a', 'b']:\n    setattr(torch, n, 1)", 3, "dynamic-name",
     "setattr(torch, n, 1)"),
    ("import torch\nname = 'o' + 's'\nf = getattr(torch, name)", 3, "modules", "torch.os"),
    ("import torch\nNS = 'aten'\ntorch.library.impl(f'{NS}::add', 'CPU')", 3, "intercept",
     "torch.library.impl"),
    ("x = getattr\n", 1, "dynamic-name", "getattr used as a value"),
    ("exec('x = 1')", 1, "dynamic-code", "exec"),
    ("y = 1\nexec('import os\\nos.kill(1, 9)')", 2, "signals", "in exec'd code: os.kill"),
    ("f = eval\n", 1, "dynamic-code", "eval"),
    ("c = compile('1', 'f', 'eval')", 1, "dynamic-code", "compile"),
    ("import marshal", 1, "dynamic-code", "import marshal"),
    ("import torch\ntorch.library.opcheck = lambda *a, **k: None", 2, "patch",
     "torch.library.opcheck = ..."),
    ("import triton.testing\ntriton.testing.do_bench = None", 2, "patch", "triton.testing.do_bench"),
    ("import torch\ntorch.Tensor.add = None", 2, "patch", "torch.Tensor.add = ..."),
    ("from torch import library as L\nlib = L\nlib.opcheck = None", 3, "patch", "torch.library.opcheck"),
    ("import torch\nfor m in [torch.cuda.Event]:\n    m.record = None", 3, "patch", "torch.cuda.Event"),
    ("import torch\nsetattr(torch.library, 'opcheck', None)", 2, "patch", "setattr(torch.library"),
    ("import torch\ndel torch.library.opcheck", 2, "patch", "del torch.library.opcheck"),
    ("import torch\ntorch.library.__dict__['opcheck'] = 1", 2, "introspection", "__dict__"),
    ("import torch\nv = vars(torch.library)", 2, "namespace", "vars"),
    ("g = globals()", 1, "namespace", "globals"),
    ("x = 1\ntype(x).__add__ = None", 2, "patch", "type(...).__add__ = ..."),
    ("import builtins", 1, "namespace", "import builtins"),
    ("__builtins__['print'] = None", 1, "introspection", "__builtins__"),
    ("import torch\ndef patch(m):\n    m.opcheck = None\npatch(torch.library)", 4, "value",
     "torch.library used as a value"),
    ("import torch\ndef patch(c):\n    c.record = None\npatch(torch.cuda.Event)", 3, "patch",
     "torch.cuda.Event.record = ..."),
    ("import torch\ndef get():\n    return torch.cuda.Event\nget().record = 0", 4, "patch",
     "torch.cuda.Event.record"),
    ("import triton\n@triton.jit\ndef k(x):\n    pass\nk.run = None", 5, "patch", "k made by triton.jit"),
    ("import threading", 1, "threads", "import threading"),
    ("from concurrent.futures import ThreadPoolExecutor", 1, "threads", "concurrent.futures"),
    ("import os\nos.system('ls')", 2, "threads", "os.system"),
    ("import torch\nf = torch.jit.fork", 2, "threads", "torch.jit.fork"),
    ("import ctypes", 1, "native", "import ctypes"),
    ("import torch\ntorch.ops.load_library('/tmp/x.so')", 2, "native", "load_library"),
    ("import torch\ntorch.ops.load_library(path)", 2, "native", "load_library"),
    ("from torch.utils.cpp_extension import load_inline", 1, "native", "load_inline"),
    ("import signal", 1, "signals", "import signal"),
    ("import os\nos.kill(os.getppid(), 9)", 2, "signals", "os.kill"),
    ("f = open('/proc/self/maps')", 1, "proc", "/proc/self/maps"),
    ("f = open('data.txt')", 1, "file-write", "open"),
    ("p = f'/proc/{1}/mem'", 1, "proc", "/proc/"),
    ("p = '/pr' + 'oc/self/mem'", 1, "proc", "/proc/self/mem"),
    ("import sys\nf = sys._getframe(1)", 2, "introspection", "sys._getframe"),
    ("import inspect", 1, "introspection", "import inspect"),
    ("import gc", 1, "introspection", "import gc"),
    ("try:\n    1 / 0\nexcept Exception as e:\n    g = e.__traceback__", 4, "introspection",
     "__traceback__"),
    ("def g():\n    yield\nf = g().gi_frame", 3, "introspection", "gi_frame"),
    ("def f():\n    pass\ng = f.__globals__", 3, "introspection", "__globals__"),
    ("c = ().__class__.__base__.__subclasses__()", 1, "introspection", "__class__"),
    ("import operator\ng = operator.attrgetter('f_back')", 2, "introspection", "attrgetter"),
    ("import torch\nx = torch._C._profiler", 2, "private", "torch._C"),
    ("import torch.testing._internal.optests", 1, "private", "torch.testing._internal"),
    ("import torch\ns = torch.ops.aten.add.default._schema", 2, "private", "_schema"),
    ("import triton\nc = triton.JITFunction._cache", 2, "private", "triton.JITFunction._cache"),
    ("import typing\nr = typing.ForwardRef('x')", 2, "dynamic-code", "typing.ForwardRef"),
    ("import torch\np = torch.profiler.profile", 2, "intercept", "torch.profiler.profile"),
    ("import torch\nlib = torch.library.Library('aten', 'IMPL')", 2, "intercept", "Library('aten'"),
    ("import torch\n@torch.library.register_fake('aten::add.Tensor')\ndef f(a, b):\n    pass", 2,
     "intercept", "aten::add"),
    ("class T:\n    @classmethod\n    def __torch_dispatch__(cls, f, t, a=(), k=None):\n        pass",
     3, "intercept", "__torch_dispatch__"),
    ("import torch\nclass L(torch.Tensor):\n    pass", 2, "intercept", "tensor subclass"),
    ("import torch\ntorch.cuda.caching_allocator_alloc(1 << 30)", 2, "intercept",
     "caching_allocator_alloc"),
    ("import triton\ntriton.knobs.runtime.launch_enter_hook = None", 2, "intercept", "triton.knobs"),
    ("import torch\ng = torch.cuda.CUDAGraph()", 2, "graph", "CUDAGraph"),
    ("import torch\ns = torch.cuda.Stream()", 2, "stream", "torch.cuda.Stream"),
    ("import torch\nt = torch.from_file('r.jsonl', shared=True, size=8)", 2, "file-write",
     "torch.from_file"),
    ("import torch\nt = torch.UntypedStorage.from_file('x', True, 8)", 2, "file-write", "from_file"),
    ("from os import *", 1, "obfuscation", "from os import *"),
    ("from torch import *", 1, "obfuscation", "from torch import *"),
    ("exec = print", 1, "obfuscation", "rebinds exec"),
    ("__name__ = '__main__'", 1, "main", "rebinds __name__"),
    ("def __getattr__(name):\n    return name", 1, "obfuscation", "__getattr__"),
    ("class E:\n    def __reduce__(self):\n        return (print, ())", 2, "dynamic-code", "__reduce__"),
    ("k = id(object())", 1, "identity", "id"),
    ("import numpy", 1, "import", "import numpy"),
    ("import torch\nm = [torch.library]", 2, "value", "torch.library used as a value"),
    ("import os\nos.environ['TRITON_INTERPRET'] = '1'", 2, "patch", "os.environ[...] = ..."),
    ("import torch\ndef f(x):\n    try:\n        return k(x)\n    except Exception:\n"
     "        return torch.softmax(x, -1)", 5, "fallback", "except Exception: torch.softmax"),
    ("import reference_06_rmsnorm", 1, "grader", "reference_06_rmsnorm"),
    ("# -*- coding: utf-7 -*-\nx = 1", 1, "obfuscation", "utf-7"),
]


@pytest.mark.parametrize("source,line,rule,seen", PYTHON,
                         ids=[f"{r}-{i}" for i, (_, _, r, _) in enumerate(PYTHON)])
def test_python_rules(tmp_path, source, line, rule, seen):
    assert_flags(review(tmp_path, source), line, rule, seen)


def test_a_finding_reads_file_line_text(tmp_path):
    found = review(tmp_path, "import torch\n\ntorch.library.opcheck = None\n", "rmsnorm.py")
    assert found == [Finding("rmsnorm.py", 3, "patch", "changes an object it did not make "
                                                      "(torch.library.opcheck = ...)")]
    assert str(found[0]) == ("rmsnorm.py:3: changes an object it did not make "
                             "(torch.library.opcheck = ...)")


def test_comments_docstrings_and_honest_lookalikes_are_not_flagged(tmp_path):
    source = '''
        """Docstring: import grader, sys.modules, /proc/self/maps, threading, os.kill, exec."""
        # import grader; torch.library.opcheck = None; os.system("x"); ctypes; /proc/
        import os
        import torch
        import triton
        import triton.language as tl
        from torch.library import triton_op, wrap_triton

        NAMESPACE = "ex06"
        FP8 = "float8_e5m2"
        DTYPES = {torch.float32: tl.float32}
        DTYPES[torch.float16] = tl.float16      # an own dict holding foreign values
        INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"
        HERE = os.path.dirname(__file__)
        ERROR = "the grader loads the built library first"
        launch = wrap_triton


        def helper(launch, ctx):
            ctx.eps = 1.0                        # attributes on its own objects
            return launch


        class M(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.w = torch.nn.Parameter(torch.ones(3))
                setattr(self, "b", torch.nn.Parameter(torch.zeros(3)))


        x = helper(wrap_triton, object())
        y = getattr(torch, "float16")
        z = torch.ones(2).to(torch.float16)
        z.requires_grad = False                  # a tensor of its own
        ok = hasattr(torch.ops.ex06_cuda, "rmsnorm_fwd")
        fp8 = getattr(torch, FP8, None)           # a name bound to a string, and nothing else


        @torch.library.custom_op(f"{NAMESPACE}::twice", mutates_args=())
        def twice(x: torch.Tensor) -> torch.Tensor:
            return x * 2
        if __name__ == "__main__":              # never runs when the grader imports the file
            import sys
            print(triton.cdiv(10, 3), sys.argv)
    '''
    assert review(tmp_path, source) == []


# --- the known forgeries and dodges: every marked line flagged, nothing else --------------------

def _marks(path: Path) -> dict[int, set[str]]:
    marks = {}
    for i, line in enumerate(path.read_text().splitlines(), 1):
        for rule in re.findall(r"(?:#|//)\s*review:\s*([\w-]+)", line):
            marks.setdefault(i, set()).add(rule)
    return marks


FORGED = sorted(p.name for p in FORGERIES.iterdir() if p.suffix in (".py", ".cu"))


@pytest.mark.parametrize("name", FORGED)
def test_known_forgeries_are_flagged_where_they_act(name):
    path = FORGERIES / name
    marks = _marks(path)
    assert marks and all(rule in WHAT for rules in marks.values() for rule in rules), marks
    found = [f for f in review_track(FORGERIES, []) if f.file == name]
    got = {}
    for f in found:
        got.setdefault(f.line, set()).add(f.rule)
        assert f"{name}:{f.line}: " in str(f) and "(" in f.text, str(f)  # says what, where
    missing = {line: rules - got.get(line, set()) for line, rules in marks.items()
               if rules - got.get(line, set())}
    assert not missing, (missing, [str(f) for f in found])
    assert set(got) <= set(marks), [str(f) for f in found if f.line not in marks]


def test_the_sixth_forgery_is_named(tmp_path):
    """Issue 36's miss: __main__ reached as os.sys.modules inside a helper function."""
    found = review_track(FORGERIES, ["main_through_os_sys.py"])
    texts = [str(f) for f in found if f.file == "main_through_os_sys.py"]
    assert any(":9: " in t and "os.sys" in t for t in texts), texts
    assert any(":10: " in t and "'__main__'" in t for t in texts), texts


# --- C++ / CUDA ------------------------------------------------------------------------------

CPP = [
    ("at::Tensor f(at::Tensor x) { return at::native::add(x, x); }", 1, "aten-internal", "at::native"),
    ("using namespace at;\nTensor f(Tensor x) { return native::mul(x, x); }", 2, "aten-internal",
     "native::mul"),
    ("auto y = at::cpu::add(x, x);", 1, "aten-internal", "at::cpu::add"),
    ("auto y = at::cuda::mm(a, b);", 1, "aten-internal", "at::cuda::mm"),
    ("at::cuda::blas::gemm<float>(a, b);", 1, "aten-internal", "at::cuda::blas"),
    ("auto y = at::_ops::add_Tensor::call(x, x, 1);", 1, "aten-internal", "at::_ops"),
    ("auto op = c10::Dispatcher::singleton();", 1, "aten-internal", "Dispatcher"),
    ("#include <ATen/native/cuda/Loops.cuh>", 1, "aten-internal", "ATen/native/cuda/Loops.cuh"),
    ("#include <ATen/ops/add_native.h>", 1, "aten-internal", "add_native.h"),
    ("cublasSgemm(handle, a, b);", 1, "library", "cublasSgemm"),
    ("#include <cublasLt.h>", 1, "library", "cublasLt.h"),
    ("cudnnCreate(&h);", 1, "library", "cudnnCreate"),
    ("curandCreateGenerator(&g, 0);", 1, "library", "curandCreateGenerator"),
    ("cub::DeviceReduce::Sum(t, n, x, y, n);", 1, "library", "cub::DeviceReduce"),
    ('const char* s = "cublas" "Sgemm";', 1, "library", "cublasSgemm"),
    ('void* h = dlopen("libx.so", 1);', 1, "native", "dlopen"),
    ("mprotect(p, 4096, PROT_READ | PROT_WRITE | PROT_EXEC);", 1, "native", "mprotect"),
    ("cuGetProcAddress(\"cuLaunchKernel\", &f, 12000, 0, nullptr);", 1, "native", "cuGetProcAddress"),
    ('asm volatile("syscall");', 1, "native", "syscall"),
    ('PyRun_SimpleString("import grader");', 1, "python", "PyRun_SimpleString"),
    ('py::module_::import("grader.runner");', 1, "python", "py::module_::import"),
    ('obj.attr("__code__");', 1, "python", "attr("),
    ('torch::jit::load("m.pt");', 1, "python", "torch::jit"),
    ('int r = system("ls");', 1, "threads", 'system("ls")'),
    ("pid_t p = fork();", 1, "threads", "fork()"),
    ('execve("/bin/sh", a, e);', 1, "threads", "execve"),
    ("std::thread t([] {});", 1, "threads", "std::thread"),
    ("pthread_create(&t, 0, f, 0);", 1, "threads", "pthread_create"),
    ("kill(getppid(), 9);", 1, "signals", "kill(getppid(), 9)"),
    ("std::raise(SIGTERM);", 1, "signals", "std::raise"),
    ("#define K kill\nK(1, 9);", 1, "signals", "#define K kill"),
    ("#include <csignal>", 1, "signals", "csignal"),
    ('FILE* f = fopen("/proc/self/maps", "r");', 1, "proc", "/proc/self/maps"),
    ('FILE* f = fopen("out.txt", "w");', 1, "file-write", "fopen"),
    ("TORCH_LIBRARY_IMPL(aten, CUDA, m) { m.impl(\"add.Tensor\", f); }", 1, "intercept", "aten"),
    ("TORCH_LIBRARY_IMPL(_, CUDA, m) { m.fallback(f); }", 1, "intercept", "fallback"),
    ("at::RecordFunctionGuard guard(false);", 1, "intercept", "RecordFunctionGuard"),
    ("__attribute__((constructor)) static void init() {}", 1, "intercept", "constructor"),
    ('__attribute__((section(".init_array"))) static void* p = 0;', 1, "intercept", "section"),
    ("cuptiSubscribe(&s, cb, 0);", 1, "intercept", "cuptiSubscribe"),
    ("cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t a, cudaEvent_t b) {", 1,
     "intercept", "cudaEventElapsedTime"),
    ("cudaGraphLaunch(g, s);", 1, "graph", "cudaGraphLaunch"),
    ("#define CAT(a, b) a##b\nCAT(at::nat, ive)::add(x, x);", 1, "obfuscation", "##"),
    ("auto y = at::nat\\\nive::add(x, x);", 1, "obfuscation", "at::nat"),
    ("#define H <ATen/core/Tensor.h>\n#include H", 2, "obfuscation", "#include H"),
    ('#include "../../../grader/x.h"', 1, "link", "../../../grader/x.h"),
    ('const char* n = "at" "en::add";', 1, "intercept", "aten::add"),
    ("%:define K kill", 1, "obfuscation", "%:define"),
    ("auto f = \\u0063ublasSgemm;", 1, "obfuscation", "u0063"),
    ('void* h = __libc_dlopen_mode("x", 1);', 1, "native", "__libc_dlopen_mode"),
    ("extern void* _GLOBAL_OFFSET_TABLE_[];", 1, "native", "_GLOBAL_OFFSET_TABLE_"),
    ("void* r = __builtin_return_address(0);", 1, "introspection", "__builtin_return_address"),
    ('asm volatile("movq %%rsp, %0" : "=r"(sp));', 1, "native", "%rsp"),
    ('setenv("CUDA_LAUNCH_BLOCKING", "1", 1);', 1, "file-write", "setenv"),
    ("cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);", 1, "stream", "cudaStreamCreate"),
    ("auto s = at::cuda::getStreamFromPool();", 1, "stream", "getStreamFromPool"),
]


@pytest.mark.parametrize("source,line,rule,seen", CPP, ids=[f"{r}-{i}" for i, (_, _, r, _)
                                                             in enumerate(CPP)])
def test_cpp_rules(tmp_path, source, line, rule, seen):
    assert_flags(review(tmp_path, source + "\n", "op.cu"), line, rule, seen)


def test_cpp_comments_strings_and_honest_lookalikes_are_not_flagged(tmp_path):
    source = r'''
        // at::native::add(x, x); cublasSgemm(); system("ls"); kill(1, 9); dlopen
        /* std::thread t; at::cpu::add(x, x);
           PyRun_SimpleString("x"); */
        #include <ATen/core/Tensor.h>
        #include <c10/cuda/CUDAGuard.h>
        #include "common.cuh"
        #include <algorithm>
        const char* msg = "call at::native::add or system(\"ls\") or kill(1, 9), not cuBLAS";
        at::Tensor f(const at::Tensor& x) {
          const c10::cuda::CUDAGuard guard(x.device());
          auto stream = at::cuda::getCurrentCUDAStream();
          TORCH_CHECK(x.is_cuda(), "x must be a CUDA tensor");
          if (cudaGetLastError() != cudaSuccess) { return x; }
          std::vector<int> v{1, 2};
          v.erase(std::remove(v.begin(), v.end(), 1), v.end());
          return at::empty_like(x);
        }
        TORCH_LIBRARY_IMPL(ex02, CUDA, m) { m.impl("scale", &f); }
    '''
    assert review(tmp_path, textwrap.dedent(source), "op.cpp") == []


# --- fail-safe: nothing in the review stops the judge ------------------------------------------

@pytest.mark.parametrize("data,seen", [
    (b"def f(:\n    pass\n", "SyntaxError"),
    (b"x = 1\n\x00\n", "cannot"),
    (b"x = '\xff\xfe'\n", "decode"),
    (b"# -*- coding: no-such-codec -*-\nx = 1\n", "decode"),
    (b"x = " + b"(" * 300 + b"1" + b")" * 300 + b"\n", "cannot parse"),
    (b"x = " + b"1 + " * 45_000 + b"1\n", "RecursionError"),
])
def test_what_cannot_be_read_is_a_finding_never_an_exception(tmp_path, data, seen):
    (tmp_path / "op.py").write_bytes(data)
    found = review_track(tmp_path, ["op.py"])
    assert [f.rule for f in found] == ["limits"], [str(f) for f in found]
    assert "was not reviewed" in found[0].text and seen in found[0].text, str(found[0])


@pytest.mark.parametrize("data", [b"/*" * 300_000, b'R"x(' * 200_000, b'"' * 500_000,
                                  b"x = '\\\n" * 100_000])
def test_unterminated_comments_and_strings_are_read_in_linear_time(tmp_path, data):
    (tmp_path / "k.cu").write_bytes(data)
    started = time.monotonic()
    review_track(tmp_path, ["k.cu"])
    assert time.monotonic() - started < 30  # ~1 s here; quadratic would be hours


def test_a_rule_that_fails_is_a_finding_and_the_rest_is_still_read(tmp_path, monkeypatch):
    def broken(self, node):
        raise RuntimeError("boom")
    monkeypatch.setattr(review_python._Review, "on_With", broken, raising=False)
    found = review(tmp_path, "import torch\nwith torch.no_grad():\n    pass\nimport gc\n")
    assert [(f.line, f.rule) for f in found] == [(2, "limits"), (4, "introspection")]
    assert "a rule failed here: RuntimeError: boom" in found[0].text


def test_a_file_whose_review_fails_is_a_finding(tmp_path, monkeypatch):
    monkeypatch.setattr(review_module, "review_python", lambda *a: 1 / 0)
    (tmp_path / "op.py").write_text("x = 1\n")
    (tmp_path / "k.cu").write_text("__global__ void k() {}\n")
    found = review_track(tmp_path, ["op.py"])
    assert [(f.file, f.rule) for f in found] == [("op.py", "limits")]
    assert "ZeroDivisionError" in found[0].text


def test_a_review_that_fails_as_a_whole_is_a_finding(tmp_path, monkeypatch):
    monkeypatch.setattr(review_module, "_entries", lambda folder: 1 / 0)
    found = review_track(tmp_path, ["op.py"])
    assert [(f.file, f.rule) for f in found] == [(".", "limits")]


def test_with_items_without_names_are_read(tmp_path):
    """Issue 36: `with x():` (no `as`) crashed the denylist ('withitem' has no 'args')."""
    assert review(tmp_path, "import torch\nwith torch.no_grad(), torch.enable_grad() as g:\n"
                            "    pass\n") == []


@pytest.mark.skipif(sys.version_info < (3, 12), reason="3.12 syntax needs Python 3.12")
def test_python_312_syntax_is_read(tmp_path):
    (tmp_path / "op.py").write_bytes((FIXTURES / "honest" / "odd_syntax_312.py").read_bytes())
    assert review_track(tmp_path, ["op.py"]) == []


# --- the folder ------------------------------------------------------------------------------

def test_undeclared_helpers_and_subfolders_are_read(tmp_path):
    (tmp_path / "sub.py").write_text("import torch\n")
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "helper.py").write_text("x = 1\nimport threading\n")
    (tmp_path / "pkg" / "k.cuh").write_text("void f() { fork(); }\n")
    found = review_track(tmp_path, ["sub.py"])
    assert [str(f) for f in found] == [
        "pkg/helper.py:2: starts threads or processes (import threading)",
        "pkg/k.cuh:1: starts threads or processes (void f() { fork(); })"]


LAUNDERED = [  # a class the evidence rests on (torch.cuda.Event: the timer) patched on the last
    #            line, after passing through what the review must follow
    "try:\n    raise ValueError(E)\nexcept ValueError as e:\n    e.args[0].record = None",
    "class Err(Exception):\n    def __init__(self, e):\n        self.e = e\ntry:\n"
    "    raise Err(E)\nexcept Err as x:\n    x.e.record = None",
    "def g():\n    yield E\nnext(g()).record = None",
    "def g():\n    yield E\nfor e in g():\n    e.record = None",
    "d = {'f': lambda: E}\nd['f']().record = None",
    "def get():\n    return E\nf = get\nf().record = None",
    "d = {'e': E}\nd.get('e').record = None",
    "class H:\n    pass\nh = H()\nsetattr(h, 'e', E)\nh.e.record = None",
    "class CM:\n    def __enter__(self):\n        return E\n    def __exit__(self, *a):\n"
    "        pass\nwith CM() as e:\n    e.record = None",
    "class It:\n    def __iter__(self):\n        return iter([E])\nfor e in It():\n"
    "    e.record = None",
    "class G:\n    def __getitem__(self, i):\n        return E\nG()[0].record = None",
    "class P:\n    @property\n    def e(self):\n        return E\nP().e.record = None",
    "class A:\n    def __getattr__(self, n):\n        return E\nA().anything.record = None",
    "class C:\n    def __call__(self):\n        return E\nC()().record = None",
    "class Box:\n    def __init__(self, e):\n        self.e = e\nBox(E).e.record = None",
    "import functools\nf = functools.partial(lambda c: c, E)\nf().record = None",
    "import operator\noperator.itemgetter(0)([E]).record = None",
    "import functools\nfunctools.reduce(lambda a, b: b, [E]).record = None",
    "[*[E]][0].record = None",
    "{**{'a': E}}['a'].record = None",
    "match E:\n    case e:\n        e.record = None",
    "async def get():\n    return E\nasync def main():\n    (await get()).record = None",
    "import typing\ntyping.cast(typing.Any, E).record = None",
    "x = sorted([E], key=str)[0]\nx.record = None",
    "x = list(map(lambda c: c, [E]))[0]\nx.record = None",
    "x = min([E], key=str)\nx.record = None",
    "def f():\n    global g\n    g = E\ndef h():\n    g.record = None",
    "def outer():\n    e = E\n    def inner():\n        e.record = None\n    return inner",
    "def f(e=E):\n    e.record = None",
    "def f(*a):\n    a[0].record = None\nf(E)",
    "def f(**k):\n    k['e'].record = None\nf(e=E)",
    "xs = []\nxs.append(E)\nxs[0].record = None",
]


@pytest.mark.parametrize("source", LAUNDERED)
def test_a_patch_through_a_laundered_value_is_flagged(tmp_path, source):
    text = "import torch\nE = torch.cuda.Event\n" + source + "\n"
    line = next(i for i, s in enumerate(text.splitlines(), 1) if ".record = None" in s)
    found = review(tmp_path, text)
    assert any(f.line == line and f.rule == "patch" for f in found), [str(f) for f in found]


ACROSS_FILES = [  # (the track's other files, what sub.py does with them on line 2)
    ({"helper.py": "import torch as t\n"}, "import helper\nhelper.t.library.opcheck = None"),
    ({"helper.py": "import torch as t\nlib = t.library\n"}, "import helper\nhelper.lib.opcheck = 0"),
    ({"pkg/__init__.py": "", "pkg/helper.py": "import torch\n"},
     "from pkg.helper import torch as t\nt.library.opcheck = None"),
    ({"pkg/__init__.py": "", "pkg/helper.py": "import torch\n"},
     "import pkg.helper\npkg.helper.torch.library.opcheck = None"),
    ({"helper.py": "import torch\n"}, "from helper import *\ntorch.library.opcheck = None"),
    ({"helper.py": "import torch\ndef get():\n    return torch.cuda.Event\n"},
     "import helper\nhelper.get().record = None"),
    ({"helper.py": "import triton\n@triton.jit\ndef k(x):\n    pass\n"},
     "from helper import k\nk.run = None"),
]


@pytest.mark.parametrize("others,source", ACROSS_FILES)
def test_what_another_file_of_the_track_holds_is_followed(tmp_path, others, source):
    for name, text in others.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    found = review(tmp_path, source)
    assert [(f.file, f.line, f.rule) for f in found] == [("sub.py", 2, "patch")], found


def test_the_files_own_classes_and_functions_across_files_are_its_own(tmp_path):
    (tmp_path / "helper.py").write_text("import torch\nclass Config:\n    block = 64\n"
                                        "def alloc(x):\n    return torch.empty_like(x)\n")
    assert review(tmp_path, "import helper\nfrom helper import Config\nc = Config()\n"
                            "c.block = 128\nh = helper.Config()\nh.block = 1\n"
                            "helper.alloc.cache = {}\n") == []


def test_a_cuda_tracks_extension_is_its_own_a_triton_track_may_not_import_it(tmp_path):
    cuda = tmp_path / "03_bias_relu" / "cuda"
    triton_ = tmp_path / "05_softmax" / "triton"
    for folder in (cuda, triton_):
        folder.mkdir(parents=True)
        (folder / "op.py").write_text("import bias_relu_ext\n")
    assert review_track(cuda, ["op.py"]) == []
    assert [f.rule for f in review_track(triton_, ["op.py"])] == ["import"]
    assert review_track(triton_, ["op.py"], extension="bias_relu_ext") == []


@pytest.mark.parametrize("name", ["torch.py", "os.py", "reference_06_rmsnorm.py", "triton"])
def test_a_file_named_like_a_loaded_module_is_flagged(tmp_path, name):
    if "." in name:
        (tmp_path / name).write_text("x = 1\n")
    else:
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text("x = 1\n")
    assert "shadow" in [f.rule for f in review_track(tmp_path, [])]


def test_links_out_of_the_folder_are_flagged_not_followed(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "evil.py").write_text("import grader\n")
    track = tmp_path / "track"
    track.mkdir()
    (track / "op.py").write_text("import torch\n")
    os.symlink(outside / "evil.py", track / "evil.py")
    os.symlink(outside, track / "lib")
    found = review_track(track, ["op.py"])
    assert sorted((f.file, f.rule) for f in found) == [("evil.py", "link"), ("lib", "link")]


def test_compiled_files_are_flagged_but_a_cache_of_its_own_source_is_not(tmp_path):
    (tmp_path / "op.py").write_text("import torch\n")
    (tmp_path / "fast.so").write_bytes(b"\x7fELF")
    py_compile.compile(str(tmp_path / "op.py"))  # __pycache__/op.cpython-311.pyc, checked
    (tmp_path / "other.py").write_text("x = 1\n")
    orphan = py_compile.compile(str(tmp_path / "other.py"))
    (tmp_path / "other.py").unlink()  # a cache without its source runs unchecked
    unchecked = py_compile.compile(str(tmp_path / "op.py"), cfile=str(tmp_path / "__pycache__" /
                                   "op2.cpython-311.pyc"),
                                   invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)
    (tmp_path / "op2.py").write_text("import torch\n")
    found = {(f.file, f.rule) for f in review_track(tmp_path, ["op.py"])}
    cache = Path(orphan).relative_to(tmp_path).as_posix()
    assert found == {("fast.so", "binary"), (cache, "binary"),
                     (Path(unchecked).relative_to(tmp_path).as_posix(), "binary")}


def test_oversized_files_and_tracks_are_reported_not_read(tmp_path):
    (tmp_path / "big.py").write_text("x = 1\n" * 40_000)
    (tmp_path / "big.cu").write_text("int x = 1;\n" * 100_000)
    for i in range(3):
        (tmp_path / f"k{i}.cu").write_text("int x = 1;\n" * 40_000)
    found = review_track(tmp_path, ["big.py"])
    assert [(f.file, f.rule) for f in found] == [("big.py", "limits"), ("big.cu", "limits"),
                                                 ("k2.cu", "limits")]
    assert ["200 KB" in found[0].text, "1000 KB" in found[1].text, "1 MB" in found[2].text] == [
        True] * 3


def test_missing_declared_files_and_folders_are_left_to_the_loader(tmp_path):
    assert review_track(tmp_path, ["absent.py"]) == []
    assert review_track(tmp_path / "absent", ["op.py"]) == []
