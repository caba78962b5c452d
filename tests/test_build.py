"""Build: compiler output summarized to the first real errors; caching; trees kept apart."""
from pathlib import Path

import pytest

from grader.submission.build_errors import explain_load_error, summarize_compiler_output
from grader.common.discover import discover
from grader.common.paths import ROOT, build_dir, tree_tag

NVCC_OUTPUT = """Error building extension 'scale_ext':
[1/2] /usr/local/cuda/bin/nvcc --generate-dependencies-with-compile ... -c {tree}/02_scale/cuda/scale.cu -o scale.cuda.o
FAILED: scale.cuda.o
{tree}/02_scale/cuda/scale.cu(12): error: identifier "blockIdxx" is undefined
      int i = blockIdxx.x * blockDim.x + threadIdx.x;
              ^
{tree}/02_scale/cuda/scale.cu(12): error: identifier "blockIdxx" is undefined
/venv/torch/include/c10/util/TypeList.h(221): error: template instantiation failed
{tree}/02_scale/cuda/scale.cu(20): error: expected a ";"
4 errors detected in the compilation of "{tree}/02_scale/cuda/scale.cu".
ninja: build stopped: subcommand failed.
"""

GCC_OUTPUT = """FAILED: bias_relu.o
c++ -MMD -MF bias_relu.o.d ... -c {tree}/03/cuda/bias_relu.cpp -o bias_relu.o
In file included from /venv/torch/include/torch/extension.h:5:
{tree}/03/cuda/bias_relu.cpp:7:5: error: 'Tensr' was not declared in this scope; did you mean 'Tensor'?
    7 |     Tensr y;
{tree}/03/cuda/bias_relu.cpp:9:1: fatal error: missing.h: No such file or directory
"""


def _tree(tmp_path: Path) -> Path:
    src = tmp_path / "02_scale" / "cuda"
    src.mkdir(parents=True)
    lines = [f"// line {i}" for i in range(1, 31)]
    lines[11] = "    int i = blockIdxx.x * blockDim.x + threadIdx.x;"
    (src / "scale.cu").write_text("\n".join(lines) + "\n")
    return tmp_path


def test_nvcc_errors_learner_file_first_with_source_line(tmp_path):
    tree = _tree(tmp_path)
    text = summarize_compiler_output(NVCC_OUTPUT.format(tree=tree), tree)
    lines = text.splitlines()
    assert lines[0] == "3 compiler error(s); the first 3:"
    assert lines[1] == '  02_scale/cuda/scale.cu:12: error: identifier "blockIdxx" is undefined'
    assert "12 | int i = blockIdxx.x" in lines[2]
    assert lines[3].startswith("  02_scale/cuda/scale.cu:20: error: expected a")
    assert "TypeList.h" in lines[-1]           # library noise last, not first
    assert "ninja" not in text and "nvcc --generate" not in text


def test_gcc_errors(tmp_path):
    text = summarize_compiler_output(GCC_OUTPUT.format(tree=tmp_path), tmp_path)
    assert "03/cuda/bias_relu.cpp:7: error: 'Tensr' was not declared" in text
    assert "03/cuda/bias_relu.cpp:9: error: missing.h: No such file" in text


def test_no_recognizable_error_shows_the_tail(tmp_path):
    text = summarize_compiler_output("something odd\nlast words\n", tmp_path)
    assert "no compiler error line found" in text and "last words" in text


def test_link_and_load_errors_are_explained():
    text = summarize_compiler_output("foo.o: undefined reference to `launch_forward(int)'\n", Path("/"))
    assert text.startswith("link failed") and "launch_forward" in text
    msg = explain_load_error("/x/scale_ext.so: undefined symbol: _Z14launch_forwardi")
    assert "launch_forward(int)" in msg and "declared and called but never defined" in msg


def test_trees_build_apart():
    ex = discover(only="01")[0]
    track = ex.tracks["triton"]
    assert tree_tag(ROOT / "starter") == "starter" and tree_tag(ROOT / "solutions") == "solutions"
    other = tree_tag(Path("/tmp/someone/starter"))
    assert other.startswith("starter-") and other != "starter"
    dirs = {build_dir(ROOT / t, ex.id, track.name) for t in ("starter", "solutions")}
    assert len(dirs) == 2


_PCH_PROBE = r'''
import subprocess, sys
sys.path.insert(0, sys.argv[1])
from grader.submission import pch
from grader.submission.toolchain import toolchain_env
includes = toolchain_env()
plan = pch._pch_plan(includes)
if plan is None:
    print("not GCC"); sys.exit(0)
flags = pch.precompiled_header(includes)
src = sys.argv[2]
run = subprocess.run(plan[0] + flags + ["-H", "-fsyntax-only", src], capture_output=True,
                     text=True)
print("flags", " ".join(flags))
print("rc", run.returncode)
print("\n".join(l for l in run.stderr.splitlines() if l.startswith(("!", "x")) or "pch" in l))
'''


def test_the_bindings_precompiled_header_is_made_and_read_by_gcc(tmp_path):
    """The PCH is made with the flags torch's own ninja writer gives a binding, so GCC reads it
    in place of the headers (`-H` marks a PCH it used with '!', one it refused with 'x'): a
    PCH made with other flags would be refused and every build would parse the headers again."""
    import subprocess
    import sys
    made = subprocess.run([sys.executable, "-m", "grader.submission.pch"], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert made.returncode == 0, made.stderr[-2000:]
    src = tmp_path / "binding.cpp"
    src.write_text("#include <ATen/core/Tensor.h>\n#include <torch/library.h>\n"
                   "at::Tensor twice(const at::Tensor& x) { return x; }\n")
    script = tmp_path / "probe.py"
    script.write_text(_PCH_PROBE)
    out = subprocess.run([sys.executable, str(script), str(ROOT), str(src)], capture_output=True,
                         text=True, timeout=300).stdout
    if out.startswith("not GCC"):
        pytest.skip("this compiler is not GCC: builds parse the headers (no PCH)")
    assert "flags -include" in out and "rc 0" in out, out
    used = [l for l in out.splitlines() if l.startswith("!")]
    assert used and used[0].endswith("course_pch.h.gch"), out


def test_a_build_waits_for_the_precompiled_header_being_made(tmp_path, monkeypatch):
    """A build that finds the PCH's lock held (the grade process's child making it) compiles
    its kernels meanwhile, waits and then uses it; with no lock held and no PCH it goes on
    without one at once; a pybind11 binding's build (wait=False) never waits."""
    import os
    from grader.submission import pch
    from grader.submission.toolchain import toolchain_env
    monkeypatch.setattr(pch, "PCH_DIR", tmp_path / "pch")
    monkeypatch.setattr(pch, "PCH_LOCK", tmp_path / "pch" / "building.lock")
    saved = dict(os.environ)
    try:
        toolchain_env()  # CUDA_HOME and the compiler, as a build sets them
        _waits(pch)
    finally:
        os.environ.clear()
        os.environ.update(saved)


def _waits(pch):
    import subprocess
    import sys
    import time
    plan = pch._pch_plan([])
    if plan is None:
        pytest.skip("this compiler is not GCC: builds parse the headers (no PCH)")
    gch = plan[1].with_name(plan[1].name + ".gch")
    pch.PCH_LOCK.parent.mkdir(parents=True)
    pch.PCH_LOCK.touch()
    began = time.monotonic()
    meanwhile = []
    assert pch.precompiled_header([], meanwhile=lambda: meanwhile.append(1)) == []
    assert time.monotonic() - began < 5 and not meanwhile
    maker = subprocess.Popen([sys.executable, "-c", (
        "import fcntl, os, sys, time\n"
        f"f = open({str(pch.PCH_LOCK)!r}, 'w'); fcntl.flock(f, fcntl.LOCK_EX)\n"
        "print('held', flush=True); time.sleep(1.5)\n"
        f"os.makedirs({str(gch.parent)!r}); open({str(gch)!r}, 'w').close()\n")],
        stdout=subprocess.PIPE, text=True)
    assert maker.stdout.readline().strip() == "held"
    began = time.monotonic()
    assert pch.precompiled_header([], meanwhile=lambda: meanwhile.append(1)) == \
        ["-include", str(plan[1])]
    assert time.monotonic() - began >= 1.0
    assert meanwhile == [1]  # the kernels compiled while it waited
    maker.wait(timeout=30)
    # a pybind11 binding never waits: the PCH when it is there, else none at once
    assert pch.precompiled_header([], wait=False) == ["-include", str(plan[1])]
    gch.unlink()
    holder = subprocess.Popen([sys.executable, "-c", (
        "import fcntl, time\n"
        f"f = open({str(pch.PCH_LOCK)!r}, 'w'); fcntl.flock(f, fcntl.LOCK_EX)\n"
        "print('held', flush=True); time.sleep(3)\n")], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    began = time.monotonic()
    assert pch.precompiled_header([], meanwhile=lambda: meanwhile.append(2), wait=False) == []
    assert time.monotonic() - began < 1.0 and meanwhile == [1]
    holder.kill()
    holder.wait(timeout=30)


def test_a_known_pch_is_said_at_once_without_torch(tmp_path):
    """The grade starts the PCH's child and waits for its first line: once the PCH was made
    for this toolchain, the child says "known" and exits without importing torch (~2 s of CPU
    for nothing); another toolchain, or the PCH gone, and it takes the lock ("held")."""
    import os
    import subprocess
    import sys
    gch = tmp_path / "pch" / "k" / "course_pch.h.gch"
    gch.parent.mkdir(parents=True)
    gch.touch()
    probe = ("import json, sys\n"
             "from grader.submission import pch\n"
             "if sys.argv[1] == 'record':\n"
             "    (pch.PCH_DIR / 'known.json').write_text(json.dumps({'toolchain': pch._toolchain(),"
             " 'made': sys.argv[2], 'failed': sys.argv[2] + '.failed'}))\n"
             "else:\n"
             "    print(pch._pch_known(), 'torch' in sys.modules)\n")
    env = {**os.environ, "GRADER_CACHE": str(tmp_path), "PYTHONPATH": str(ROOT)}
    run = lambda *a: subprocess.run([sys.executable, "-c", probe, *a], env=env, cwd=ROOT,
                                    capture_output=True, text=True, timeout=120).stdout.split()
    run("record", str(gch))
    assert run("ask") == ["True", "False"]  # known, and torch never imported to say so
    gch.unlink()
    assert run("ask") == ["False", "False"]
    env["CXX"] = "another-compiler"  # another toolchain
    gch.touch()
    assert run("ask") == ["False", "False"]


def test_a_std_name_common_cuh_no_longer_brings_names_its_header(tmp_path):
    """common.cuh stopped including <string> and <stdexcept> (a faster build of every kernel
    file): a learner's file that used std::runtime_error through it is told what to include."""
    out = (f'{tmp_path}/09/cuda/k.cu(52): error: namespace "std" has no member "runtime_error"\n'
           f'{tmp_path}/09/cuda/k.cu(60): error: namespace "std" has no member "runtime_error"\n'
           f"{tmp_path}/09/cuda/k.cu:61:7: error: 'to_string' is not a member of 'std'\n")
    text = summarize_compiler_output(out, tmp_path)
    assert "std::runtime_error needs #include <stdexcept>" in text
    assert "std::to_string needs #include <string>" in text
    assert text.count("needs #include <stdexcept>") == 1
    plain = summarize_compiler_output(NVCC_OUTPUT.format(tree=_tree(tmp_path)), tmp_path)
    assert "note:" not in plain


_COMMON_PROBE = r'''
#include "common.cuh"
extern "C" int probe(char* out, int n) {
  try {
    CUDA_CHECK(cudaErrorInvalidValue);
  } catch (const std::exception& e) {
    std::snprintf(out, n, "%s", e.what());
    return 1;
  }
  return 0;
}
'''


def _nvcc():
    import shutil

    from grader.submission.toolchain import _find_cuda_home
    home = _find_cuda_home()
    nvcc = home / "bin" / "nvcc" if home else shutil.which("nvcc")
    if not nvcc:
        pytest.skip("no nvcc on this machine")
    return str(nvcc)


def test_common_cuh_is_light_and_its_check_throws_a_std_exception(tmp_path):
    """CUDA_CHECK's error is a std::exception with the error, the call, the file and the line
    (PyTorch makes any std::exception a Python RuntimeError with that text). And the header
    brings no <string>: a file that uses std::string without including it does not compile (its
    parse cost every kernel file 0.4-0.6 s of each build)."""
    import ctypes
    import subprocess
    nvcc = _nvcc()
    flags = ["-std=c++20", "-I", str(ROOT / "include"), "--compiler-options", "-fPIC"]
    (tmp_path / "probe.cu").write_text(_COMMON_PROBE)
    made = subprocess.run([nvcc, *flags, "-shared", "-o", str(tmp_path / "probe.so"),
                           str(tmp_path / "probe.cu")], capture_output=True, text=True,
                          timeout=300)
    assert made.returncode == 0, made.stderr[-2000:]
    buf = ctypes.create_string_buffer(600)
    assert ctypes.CDLL(str(tmp_path / "probe.so")).probe(buf, 600) == 1
    msg = buf.value.decode()
    assert msg.startswith("CUDA error: invalid argument (cudaErrorInvalidValue at "), msg
    assert "probe.cu:5)" in msg, msg
    (tmp_path / "heavy.cu").write_text('#include "common.cuh"\nstd::string s;\n')
    heavy = subprocess.run([nvcc, *flags, "-c", "-o", str(tmp_path / "heavy.o"),
                            str(tmp_path / "heavy.cu")], capture_output=True, text=True,
                           timeout=300)
    assert heavy.returncode != 0 and "string" in heavy.stdout + heavy.stderr
