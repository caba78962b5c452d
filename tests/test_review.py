"""grader.judge.review: the judge's reading of a submission's sources. Honest code (every solution and
starter, and two public-style kernels) is never flagged; each rule, the attacks of issue 26 and
their disguised forms are, at the right file and line."""
import os
import py_compile
import textwrap
from pathlib import Path

import pytest

from grader.common.discover import discover
from grader.common.paths import ROOT
from grader.judge.review import Finding, review_track

TRACKS = [(tree, ex, track) for tree in ("solutions", "starter") for ex in discover()
          for track in ex.tracks.values() if (ROOT / tree / ex.id / track.name).is_dir()]
PUBLIC = Path(__file__).parent / "review_fixtures" / "public"


@pytest.mark.parametrize("tree,ex,track", TRACKS,
                         ids=[f"{t}-{e.id}-{k.name}" for t, e, k in TRACKS])
def test_honest_tracks_are_not_flagged(tree, ex, track):
    assert review_track(ROOT / tree / ex.id / track.name, list(track.files)) == []


@pytest.mark.parametrize("folder", ["06_rmsnorm/triton", "05_softmax/triton"])
def test_public_style_kernels_are_not_flagged(folder):
    assert review_track(PUBLIC / folder, []) == []


def test_every_tree_is_covered():
    assert len(TRACKS) >= 30  # both trees, all twelve exercises, every track


def review(tmp_path, source, name="sub.py"):
    (tmp_path / name).write_text(textwrap.dedent(source).lstrip("\n"))
    return review_track(tmp_path, [name])


def assert_flags(found, line, rule, seen):
    hits = [f for f in found if f.line == line and f.rule == rule]
    assert hits, f"no {rule} finding on line {line}: {[str(f) for f in found]}"
    assert any(seen in f.text for f in hits), [str(f) for f in hits]


# (source, line, rule, text the finding shows): each rule, the table of issue 26, disguises
PYTHON = [
    ("import grader.runner as r\nr.analyse = lambda *a: {}", 1, "grader", "grader.runner"),
    ("import grader.runner as r\nr.analyse = lambda *a: {}", 2, "patch", "grader.runner.analyse = ..."),
    ("from grader import runner", 1, "grader", "grader.runner"),
    ("import sys\nsys.modules['grader.runner'].analyse = None", 2, "modules", "sys.modules"),
    ("import sys\nsys.modules['grader.runner'].analyse = None", 2, "grader", "'grader.runner'"),
    ("import sys\nsys.modules['x'] = None", 2, "patch", "sys.modules[...] = ..."),
    ("from sys import modules", 1, "modules", "sys.modules"),
    ("import __main__", 1, "main", "__main__"),
    ("m = __import__('__main__')", 1, "main", "__main__"),
    ("x = getattr(__import__('gr' + 'ader'), 'runner')", 1, "grader", "grader"),
    ("x = __import__(''.join(['gr', 'ader']))", 1, "grader", "grader"),
    ("import importlib\nname = 'x'\nm = importlib.import_module(name)", 3, "dynamic-code",
     "importlib.import_module(name)"),
    ("import base64\nexec(base64.b64decode(b'cHJpbnQoMSk='))", 2, "dynamic-code", "exec(base64"),
    ("y = 1\nexec('import os\\nos.kill(1, 9)')", 3, "signals", "os.kill"),
    ("f = eval\n", 1, "dynamic-code", "eval used as a value"),
    ("import torch\ntorch.library.opcheck = lambda *a, **k: None", 2, "patch",
     "torch.library.opcheck = ..."),
    ("import triton.testing\ntriton.testing.do_bench = None", 2, "patch", "triton.testing.do_bench"),
    ("import torch\ntorch.Tensor.add = None", 2, "patch", "torch.Tensor.add = ..."),
    ("from torch import library as L\nlib = L\nlib.opcheck = None", 3, "patch", "torch.library.opcheck"),
    ("import torch\nfor m in [torch.library]:\n    m.opcheck = None", 3, "patch", "torch.library"),
    ("import torch\nsetattr(torch.library, 'opcheck', None)", 2, "patch", "setattr(torch.library"),
    ("import torch\ndel torch.library.opcheck", 2, "patch", "del torch.library.opcheck"),
    ("import torch\nvars(torch.library)['opcheck'] = None", 2, "patch", "torch.library.__dict__[...]"),
    ("import torch\nvars(torch.library)['opcheck'] = None", 2, "namespace", "vars(torch.library)"),
    ("import torch\ntorch.library.__dict__['opcheck'] = 1", 2, "namespace", "torch.library.__dict__"),
    ("import torch\nobject.__setattr__(torch.library, 'opcheck', 1)", 2, "patch", "__setattr__"),
    ("x = 1\ntype(x).__add__ = None", 2, "patch", "type(...).__add__ = ..."),
    ("import builtins\nbuiltins.print = None", 2, "patch", "builtins.print = ..."),
    ("__builtins__['print'] = None", 1, "introspection", "__builtins__"),
    ("import torch\ndef patch(m):\n    m.opcheck = None\npatch(torch.library)", 4, "patch",
     "sets attributes of torch.library"),
    ("import torch\n(lambda m: setattr(m, 'opcheck', 0))(torch.library)", 2, "patch", "torch.library"),
    ("import torch\nname = 'x'\nf = getattr(torch, name)", 3, "dynamic-name", "getattr(torch, name)"),
    ("import threading\nt = threading.Thread(target=print)", 1, "threads", "threading"),
    ("import threading\nt = threading.Thread(target=print)", 2, "threads", "threading.Thread"),
    ("from concurrent.futures import ThreadPoolExecutor", 1, "threads", "concurrent.futures"),
    ("import _thread", 1, "threads", "_thread"),
    ("import subprocess", 1, "threads", "subprocess"),
    ("import os\nos.system('ls')", 2, "threads", "os.system"),
    ("import os\nos.execv('/bin/sh', [])", 2, "threads", "os.execv"),
    ("from os import fork", 1, "threads", "os.fork"),
    ("import torch.multiprocessing as mp", 1, "threads", "torch.multiprocessing"),
    ("import asyncio\nasyncio.create_subprocess_exec('ls')", 2, "threads",
     "asyncio.create_subprocess_exec"),
    ("import ctypes", 1, "native", "ctypes"),
    ("import torch\ntorch.ops.load_library('/tmp/x.so')", 2, "native", "load_library"),
    ("import torch\ntorch.ops.load_library(path)", 2, "native", "load_library"),
    ("from torch.utils.cpp_extension import load_inline", 1, "native", "load_inline"),
    ("import signal", 1, "signals", "signal"),
    ("import os\nos.kill(os.getppid(), 9)", 2, "signals", "os.kill"),
    ("import os\nos.abort()", 2, "signals", "os.abort"),
    ("f = open('/proc/self/maps')", 1, "proc", "/proc/self/maps"),
    ("p = f'/proc/{1}/mem'", 1, "proc", "/proc/"),
    ("p = '/pr' + 'oc/self/mem'", 1, "proc", "/proc/self/mem"),
    ("import sys\nf = sys._getframe(1).f_globals", 2, "introspection", "sys._getframe"),
    ("import sys\nf = sys._getframe(1)\ng = f.f_globals", 3, "introspection", "f.f_globals"),
    ("import inspect\nf = inspect.currentframe()", 2, "introspection", "inspect.currentframe"),
    ("import gc\nobjs = gc.get_objects()", 2, "introspection", "gc.get_objects"),
    ("import sys\nsys.settrace(None)", 2, "introspection", "sys.settrace"),
    ("import sys\nsys.addaudithook(print)", 2, "introspection", "sys.addaudithook"),
    ("try:\n    1 / 0\nexcept Exception as e:\n    g = e.__traceback__.tb_frame.f_back", 4,
     "introspection", "tb_frame"),
    ("import operator\ng = operator.attrgetter('f_back')", 2, "introspection", "'f_back'"),
    ("def f():\n    pass\ng = f.__globals__", 3, "introspection", "__globals__"),
    ("open('out.txt', 'w').write('x')", 1, "file-write", "open('out.txt', 'w')"),
    ("import shutil\nshutil.rmtree('x')", 2, "file-write", "shutil.rmtree"),
    ("import torch\nlib = torch.library.Library('aten', 'IMPL')", 2, "intercept", "Library('aten'"),
    ("import torch\n@torch.library.register_fake('aten::add.Tensor')\ndef f(a, b):\n    pass", 2,
     "intercept", "aten::add"),
    ("class T:\n    @classmethod\n    def __torch_dispatch__(cls, f, t, a=(), k=None):\n        pass", 3,
     "intercept", "__torch_dispatch__"),
    ("import torch\ntorch.cuda.caching_allocator_alloc(1 << 30)", 2, "intercept",
     "caching_allocator_alloc"),
    ("from os import *", 1, "threads", "from os import *"),
]


@pytest.mark.parametrize("source,line,rule,seen", PYTHON, ids=[f"{r}-{i}" for i, (_, _, r, _)
                                                                in enumerate(PYTHON)])
def test_python_rules(tmp_path, source, line, rule, seen):
    assert_flags(review(tmp_path, source), line, rule, seen)


def test_a_finding_reads_file_line_text(tmp_path):
    found = review(tmp_path, "import torch\n\ntorch.library.opcheck = None\n", "rmsnorm.py")
    assert found == [Finding("rmsnorm.py", 3, "patch", "sets an attribute of a module it did not "
                                                      "define (torch.library.opcheck = ...)")]
    assert str(found[0]) == ("rmsnorm.py:3: sets an attribute of a module it did not define "
                             "(torch.library.opcheck = ...)")


def test_comments_docstrings_and_honest_lookalikes_are_not_flagged(tmp_path):
    source = '''
        """Docstring: import grader, sys.modules, /proc/self/maps, threading, os.kill."""
        # import grader; torch.library.opcheck = None; os.system("x"); ctypes; /proc/
        import os
        import sys
        import torch
        import triton
        import triton.language as tl
        from torch.library import triton_op, wrap_triton

        DTYPES = {torch.float32: tl.float32}
        DTYPES[torch.float16] = tl.float16      # an own dict holding foreign values
        os.environ["TRITON_INTERPRET"] = "1"
        sys.path.insert(0, os.path.dirname(__file__))
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
        ok = hasattr(torch.ops.ex06_cuda, "rmsnorm_fwd")
        text = open(__file__).read()
        if __name__ == "__main__":
            print(triton.cdiv(10, 3))
    '''
    assert review(tmp_path, source) == []


# --- C++ / CUDA ------------------------------------------------------------------------------

CPP = [
    ("at::Tensor f(at::Tensor x) { return at::native::add(x, x); }", 1, "aten-internal", "at::native"),
    ("using namespace at;\nTensor f(Tensor x) { return native::mul(x, x); }", 2, "aten-internal",
     "native::mul"),
    ("auto y = at::cpu::add(x, x);", 1, "aten-internal", "at::cpu::add"),
    ("auto y = at::cuda::mm(a, b);", 1, "aten-internal", "at::cuda::mm"),
    ("at::cuda::blas::gemm<float>(a, b);", 1, "aten-internal", "at::cuda::blas"),
    ("auto y = at::_ops::add_Tensor::call(x, x, 1);", 1, "aten-internal", "at::_ops"),
    ("#include <ATen/native/cuda/Loops.cuh>", 1, "aten-internal", "ATen/native/cuda/Loops.cuh"),
    ("#include <ATen/ops/add_native.h>", 1, "aten-internal", "add_native.h"),
    ("cublasSgemm(handle, a, b);", 1, "library", "cublasSgemm"),
    ("#include <cublasLt.h>", 1, "library", "cublasLt.h"),
    ("cudnnCreate(&h);", 1, "library", "cudnnCreate"),
    ("curandCreateGenerator(&g, 0);", 1, "library", "curandCreateGenerator"),
    ("cub::DeviceReduce::Sum(t, n, x, y, n);", 1, "library", "cub::DeviceReduce"),
    ("void* h = dlopen(\"libx.so\", 1);", 1, "native", "dlopen"),
    ("PyRun_SimpleString(\"import grader\");", 1, "python", "PyRun_SimpleString"),
    ("py::module_::import(\"grader.runner\");", 1, "python", "py::module_::import"),
    ("torch::jit::load(\"m.pt\");", 1, "python", "torch::jit"),
    ("int r = system(\"ls\");", 1, "threads", "system(\"ls\")"),
    ("pid_t p = fork();", 1, "threads", "fork()"),
    ("std::thread t([] {});", 1, "threads", "std::thread"),
    ("pthread_create(&t, 0, f, 0);", 1, "threads", "pthread_create"),
    ("kill(getppid(), 9);", 1, "signals", "kill(getppid(), 9)"),
    ("std::raise(SIGTERM);", 1, "signals", "std::raise"),
    ("#define K kill\nK(1, 9);", 1, "signals", "#define K kill"),
    ("#include <csignal>", 1, "signals", "csignal"),
    ("FILE* f = fopen(\"/proc/self/maps\", \"r\");", 1, "proc", "/proc/self/maps"),
    ("TORCH_LIBRARY_IMPL(aten, CUDA, m) { m.impl(\"add.Tensor\", f); }", 1, "intercept", "aten"),
    ("at::RecordFunctionGuard guard(false);", 1, "intercept", "RecordFunctionGuard"),
    ("__attribute__((constructor)) static void init() {}", 1, "intercept", "constructor"),
    ("#define CAT(a, b) a##b\nCAT(at::nat, ive)::add(x, x);", 1, "obfuscation", "##"),
    ("auto y = at::nat\\\nive::add(x, x);", 1, "obfuscation", "at::nat"),
]


@pytest.mark.parametrize("source,line,rule,seen", CPP, ids=[f"{r}-{i}" for i, (_, _, r, _)
                                                             in enumerate(CPP)])
def test_cpp_rules(tmp_path, source, line, rule, seen):
    assert_flags(review(tmp_path, source + "\n", "op.cu"), line, rule, seen)


def test_cpp_comments_and_strings_are_not_flagged(tmp_path):
    source = r'''
        // at::native::add(x, x); cublasSgemm(); system("ls"); kill(1, 9); dlopen
        /* std::thread t; at::cpu::add(x, x);
           PyRun_SimpleString("x"); */
        #include <ATen/core/Tensor.h>
        #include <c10/cuda/CUDAGuard.h>
        #include "common.cuh"
        const char* msg = "call at::native::add or system(\"ls\") or kill(1, 9)";
        at::Tensor f(const at::Tensor& x) {
          const c10::cuda::CUDAGuard guard(x.device());
          auto stream = at::cuda::getCurrentCUDAStream();
          TORCH_CHECK(x.is_cuda(), "x must be a CUDA tensor");
          return at::empty_like(x);
        }
        TORCH_LIBRARY_IMPL(ex02, CUDA, m) { m.impl("scale", &f); }
    '''
    assert review(tmp_path, textwrap.dedent(source), "op.cpp") == []


# --- the folder ------------------------------------------------------------------------------

def test_undeclared_helpers_and_subfolders_are_read(tmp_path):
    (tmp_path / "sub.py").write_text("import torch\n")
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "helper.py").write_text("x = 1\nimport threading\n")
    (tmp_path / "pkg" / "k.cuh").write_text("void f() { fork(); }\n")
    found = review_track(tmp_path, ["sub.py"])
    assert [str(f) for f in found] == [
        "pkg/helper.py:2: starts threads or processes (threading)",
        "pkg/k.cuh:1: starts threads or processes (void f() { fork(); })"]


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


def test_unusual_source_encodings_are_flagged(tmp_path):
    (tmp_path / "op.py").write_bytes(b"# -*- coding: utf-7 -*-\nx = 1\n")
    assert [f.rule for f in review_track(tmp_path, ["op.py"])] == ["obfuscation"]


def test_oversized_files_are_reported_not_read(tmp_path):
    (tmp_path / "big.py").write_text("x = 1\n" * 200_000)
    assert [(f.file, f.rule) for f in review_track(tmp_path, ["big.py"])] == [("big.py", "limits")]


def test_missing_declared_files_are_left_to_the_loader(tmp_path):
    assert review_track(tmp_path, ["absent.py"]) == []
