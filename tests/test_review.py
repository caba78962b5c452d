"""grader.judge.review: the judge's reading of a submission's sources, an allowlist. Each rule
flags what it should at the right file and line; the known evidence forgeries and the field's
dodges (tests/review_fixtures/forgeries/) are flagged on every line that does the deed; nothing
in the review can stop the judge (a file or rule that fails is a finding). Honest code is
tests/test_review_public.py's."""
import importlib.util
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
_spec = importlib.util.spec_from_file_location("review_cases", FIXTURES / "cases.py")
CASES = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(CASES)
PYTHON, CPP, LAUNDERED, ACROSS_FILES = CASES.PYTHON, CASES.CPP, CASES.LAUNDERED, CASES.ACROSS_FILES


def review(tmp_path, source, name="sub.py"):
    (tmp_path / name).write_text(textwrap.dedent(source).lstrip("\n"))
    return review_track(tmp_path, [name])


def assert_flags(found, line, rule, seen):
    hits = [f for f in found if f.line == line and f.rule == rule]
    assert hits, f"no {rule} finding on line {line}: {[str(f) for f in found]}"
    assert any(seen in f.text for f in hits), [str(f) for f in hits]


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


def test_gluon_for_a_hopper_kernel_and_nothing_else_of_triton_experimental(tmp_path):
    """Gluon's jit, language, Hopper's TMA, mbarriers and wgmma and the host's descriptor pass
    (13's forward: a warp-specialized Hopper kernel); the rest of triton.experimental (another
    module of it, Gluon's other names, AMD's and Blackwell's modules) are still findings."""
    honest = '''
        import triton
        from triton.experimental import gluon
        from triton.experimental.gluon import language as gl
        from triton.experimental.gluon.language.nvidia.hopper import (
            fence_async_shared, mbarrier, tma, warpgroup_mma, warpgroup_mma_wait)
        from triton.experimental.gluon.nvidia.hopper import TensorDescriptor


        @gluon.jit
        def kernel(desc, X: gl.constexpr):
            smem = gl.allocate_shared_memory(desc.dtype, desc.block_type.shape, desc.layout)
            bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
            mbarrier.init(bar, count=1)
            fence_async_shared()
            mbarrier.expect(bar, desc.block_type.nbytes)
            tma.async_copy_global_to_shared(desc, [0, 0], bar, smem)
            mbarrier.wait(bar, 0)
            acc = warpgroup_mma(smem, smem.permute((1, 0)), gl.zeros([X, X], gl.float32),
                                is_async=True)
            acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
            tma.async_copy_shared_to_global(desc, [0, 0], smem)
            tma.store_wait(pendings=0)


        def launch(x):
            layout = gl.NVMMASharedLayout.get_default_for([64, 64], gl.bfloat16)
            kernel[(1,)](TensorDescriptor.from_tensor(x, [64, 64], layout), X=64)
    '''
    assert review(tmp_path, honest) == []
    found = review(tmp_path, """
        from triton.experimental import gsan
        from triton.experimental.gluon import constexpr_function
        from triton.experimental.gluon.language.nvidia import blackwell
        from triton.experimental.gluon.language.nvidia.hopper import async_copy
        from triton.experimental.gluon.nvidia.blackwell import TensorDescriptor
        import triton.experimental.gluon.language as gl
        x = gl.amd.cdna3
    """)
    seen = {1: "import gsan", 2: "import constexpr_function", 3: "import blackwell",
            4: "hopper import async_copy", 5: "gluon.nvidia.blackwell import",
            7: "gluon.language.amd"}  # line 6: gl, allowed; its AMD half is not (line 7)
    for line, what in seen.items():
        assert_flags(found, line, "import", what)
    assert {f.line for f in found} == set(seen), [str(f) for f in found]


def test_gluon_tma_reduce_builtin_and_no_other_compiler_internal(tmp_path):
    """13's one-pass backward writes the TMA reduce-add that Gluon 3.6 builds but does not wrap:
    the builtin decorator, the builder's call and the reduce's kind pass; any other name of the
    compiler's internals (the IR's parser and context, the backends' bindings, Gluon's other
    internals) is still a finding."""
    honest = '''
        from triton.experimental.gluon.language._core import builtin
        from triton._C.libtriton import ir


        @builtin
        def reduce_add(tensor_desc, coord, src, _semantic=None):
            coord = _semantic._convert_to_ir_values(coord, require_i64=False)
            _semantic.builder.create_async_tma_reduce(ir.DESCRIPTOR_REDUCE_KIND.ADD,
                                                      tensor_desc.handle, coord, src.handle)
    '''
    assert review(tmp_path, honest) == []
    found = review(tmp_path, """
        from triton._C.libtriton import nvidia
        from triton._C.libtriton.ir import parse_mlir_module
        from triton.experimental.gluon.language._core import tensor
        from triton._C import libproton
        from triton._C.libtriton import ir
        m = ir.context()
    """)
    seen = {1: "nvidia", 2: "parse_mlir_module", 3: "_core import tensor", 4: "libproton",
            6: "ir.context"}
    for line, what in seen.items():
        assert_flags(found, line, "import", what)
    assert {f.line for f in found} == set(seen), [str(f) for f in found]


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


@pytest.mark.parametrize("source", LAUNDERED)
def test_a_patch_through_a_laundered_value_is_flagged(tmp_path, source):
    text = "import torch\nE = torch.cuda.Event\n" + source + "\n"
    line = next(i for i, s in enumerate(text.splitlines(), 1) if ".record = None" in s)
    found = review(tmp_path, text)
    assert any(f.line == line and f.rule == "patch" for f in found), [str(f) for f in found]


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
