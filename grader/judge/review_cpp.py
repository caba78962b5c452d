"""The review of a C++/CUDA file (grader.judge.review): regular expressions over the source with
its comments and string literals blanked (a name in a comment or a message does nothing), and a
few over the string literals themselves (adjacent literals joined, as the compiler joins them).

An honest kernel computes with its own code and ATen's public, dispatched ops (which the profiler
sees); it never calls ATen's implementations or a vendor library directly, never loads or patches
native code, runs Python, threads, processes or signals, and never hooks the profiler.
`review_cpp(data)` returns (line, rule, detail) triples.
"""
from __future__ import annotations

import bisect
import re

# comments | raw, plain and char literals; an unterminated comment or raw string runs to the end
# of the file (as the compiler reads it), which also keeps the scan linear on one that never ends
TOKENS = re.compile(r"""(//[^\n]*|/\*.*?(?:\*/|\Z))|(R"([^()\\\s]{0,16})\(.*?(?:\)\3"|\Z)|"""
                    r""""(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*')""", re.S)
CALL = r"(?<![\w.>:])(?:std\s*::\s*|::\s*)?(?:{})\s*\("
DEFINE = r"^[ \t]*#[ \t]*define[ \t]+\w+(?:\([^)\n]*\))?[ \t]+(?:{})\b"
PROCESS = ("system|popen|fork|vfork|clone|clone3|execl|execlp|execle|execv|execvp|execvpe|execve|"
           "fexecve|execveat|posix_spawnp?")
SIGNAL = "kill|killpg|tgkill|tkill|signal|sigaction|sigqueue|raise|abort|pthread_kill"
FILES = ("fopen|freopen|fdopen|open|openat|creat|unlink|unlinkat|rename|truncate|setenv|putenv|"
         "unsetenv|"
         "ftruncate|process_vm_readv|process_vm_writev|ptrace")
AT_CUDA_UTILS = ("philox|detail|getCurrent\\w*|getDevice\\w*|device_count|current_device|"
                 "set_device|is_available|device_synchronize|stream_synchronize|warning_state")
LIBS = "cublas|cudnn|cusparse|cufft|cusolver|cutensor|nccl"
# CUDA runtime and driver entry points a file could define to stand in for the real ones
API = (r"(?:cuda|cu)(?:Event|Launch|Stream|Device|Malloc|Free|Memcpy|Memset|Graph|Func|Module|"
       r"Ctx)\w*")
CPP_CODE = (  # (rule, substrings of which one must be present, then the regex that decides)
    ("aten-internal", ("native", "_ops", "redispatch", "composite"),
     r"\b(?:native|_ops|redispatch|compositeexplicitautograd\w*|compositeimplicitautograd)\b"),
    ("aten-internal", ("cpu",), r"\bat\s*::\s*cpu\s*::"),
    ("aten-internal", ("cuda",),  # at::cuda::<snake_case op> is a structured kernel, not a helper
     rf"\bat\s*::\s*cuda\s*::\s*(?!(?:{AT_CUDA_UTILS})\b)[a-z_][a-z0-9_]*\b"),
    ("aten-internal", ("Dispatcher", "callBoxed", "OperatorHandle"),  # an op called by its name
     r"\b(?:Dispatcher|callBoxed|OperatorHandle|findSchema\w*)\b"),
    ("library", tuple(LIBS.split("|")), rf"\b(?:{LIBS})\w*"),
    ("library", ("curand", "cub", "thrust"),  # curand's host API; the device API is honest
     r"\bcurand(?:Create|Generate|Set|Destroy|Generator)\w*|"
     r"\bcub\s*::\s*Device\w+|\bthrust\s*::\s*(?!complex\b|pair\b|tuple\b)\w+\s*\("),
    ("native", ("dl", "syscall", "nvrtc", "Load", "ProcAddress", "EntryPoint", "prot", "PROT",
                "_GLOBAL_OFFSET_TABLE_"),
     r"\b\w*?(?:dlopen|dlsym|dlmopen|dlvsym|dlinfo|dladdr|dl_open|dl_sym)\w*|"
     r"\b(?:dl_iterate_phdr|syscall|nvrtc\w+|_GLOBAL_OFFSET_TABLE_|"
     r"cuModuleLoad\w*|cuLibraryLoad\w*|cudaLibraryLoad\w*|cuGetProcAddress\w*|"
     r"cudaGetDriverEntryPoint\w*|mprotect|pkey_mprotect|PROT_EXEC|PROT_WRITE)\b"),
    ("python", ("Py",), r"\bPy(?:[A-Z][A-Za-z]*)?_[A-Z]\w*\s*\("),
    ("python", ("exec", "eval", "globals", "import", "jit", "attr"),
     r"\b(?:py|pybind11)\s*::\s*(?:exec|eval|eval_file|globals|getattr|setattr|hasattr|delattr|"
     r"module_?\s*::\s*import)\b|\btorch\s*::\s*jit\b|\.\s*attr\s*\("),
    ("threads", ("std",), r"\bstd\s*::\s*(?:thread|jthread|async)\b"),
    ("threads", ("pthread_create", "system", "popen", "fork", "exec", "posix_spawn", "clone"),
     rf"\bpthread_create\b|{CALL.format(PROCESS)}|{DEFINE.format(PROCESS)}"),
    ("signals", tuple(SIGNAL.split("|")), rf"{CALL.format(SIGNAL)}|{DEFINE.format(SIGNAL)}"),
    ("file-write", ("open", "creat", "unlink", "rename", "trunc", "process_vm", "ptrace", "env",
                    "fstream"),
     rf"{CALL.format(FILES)}|{DEFINE.format(FILES)}|\bstd\s*::\s*(?:i|o)?fstream\b"),
    ("intercept", ("TORCH_LIBRARY",),  # registering into PyTorch's own namespaces
     r"TORCH_LIBRARY(?:_IMPL|_FRAGMENT)?\s*\(\s*(?:aten|prims?|_)\s*,"),
    ("intercept", ("RecordFunction", "Callback", "rofiler", "constructor", "destructor",
                   "globalContext", "fallback", "Guard", "tls", "Debug", "cupti", "nvml"),
     r"\b(?:RecordFunctionGuard|DisableRecordFunctionGuard|enableRecordFunction|addGlobalCallback|"
     r"addThreadLocalCallback|removeCallback|clear\w*Callbacks|\w*[eE]nableProfiler\w*|"
     r"disableProfiler\w*|RecordFunctionTLS|ThreadLocalStateGuard|ThreadLocalDebugInfo|"
     r"ExcludeDispatchKeyGuard|IncludeDispatchKeyGuard|tls_set_dispatch_key_\w+|cupti\w*|"
     r"nvml\w*)\b|\b(?:gnu\s*::\s*)?(?:constructor|destructor)\b(?=\s*[\])])|"
     r"\bglobalContext\s*\(\s*\)\s*\.\s*set\w+|\.\s*fallback\s*\("),
    ("intercept", ("attribute", "gnu"),  # symbols placed, aliased or run at load time
     r"__attribute__\s*\(\(\s*(?:weak|alias|ifunc|section|constructor|destructor|init_priority)|"
     r"\[\[\s*gnu\s*::\s*(?:weak|alias|ifunc|section|constructor|destructor)"),
    ("intercept", ("cu",),  # a definition of the runtime's own entry point shadows it
     rf"\b{API}\s*\([^;{{)]*\)\s*(?:noexcept\s*)?\{{"),
    ("stream", ("StreamCreate", "FromPool", "cuStreamCreate"),  # a stream of its own
     r"\b(?:cudaStreamCreate\w*|cuStreamCreate\w*|getStreamFromPool|getStreamFromExternal)\b"),
    ("graph", ("Graph", "Capture"), r"\b(?:cudaGraph\w*|cuGraph\w*|cudaStreamBeginCapture\w*|"
                                    r"cudaStreamEndCapture|cuStreamBeginCapture\w*|CUDAGraph)\b"),
    ("introspection", ("__builtin_",), r"\b__builtin_(?:return|frame|extract_return)_addr\w*"),
    # token pasting (## or its digraph %:%:, and %: for #), a name split by a backslash-newline,
    # and a name spelt in universal character names (\u0063ublas) can spell any name above
    ("obfuscation", ("##", "%:", "\\\n", "\\\r", "\\u", "\\U"),
     r"##|%:|\w\\\r?\n|\\u[0-9A-Fa-f]{4}|\\U[0-9A-Fa-f]{8}"),
)
CPP_INCLUDES = (
    ("aten-internal", r"^ATen/native/|^ATen/(?:CPU|CUDA|Meta|Native|Redispatch|CompositeExplicit"
                      r"Autograd\w*|CompositeImplicitAutograd)Functions\.h$|"
                      r"^ATen/ops/\w+_(?:native|\w+_dispatch|ops)\.h$|^ATen/cuda/CUDABlas|"
                      r"^ATen/core/dispatch/"),
    ("library", rf"^(?:{LIBS}|curand\.h|cub/device/|thrust/)"),
    ("native", r"^(?:dlfcn\.h|nvrtc|link\.h$|elf\.h$|sys/mman\.h$|sys/ptrace\.h$)"),
    ("python", r"^(?:Python\.h|pybind11/(?:embed|eval)\.h|torch/script\.h|torch/csrc/jit/)"),
    ("threads", r"^(?:thread|future|pthread\.h|spawn\.h|sys/wait\.h)$"),
    ("signals", r"^(?:csignal|signal\.h)$"),
    ("intercept", r"^(?:ATen/record_function\.h|torch/csrc/(?:autograd/)?profiler|cupti|nvml)"),
    ("link", r"(?:^|/)\.\.(?:/|$)|^/"),  # a header from outside the track folder: not reviewed
)
STRINGS = (  # what a string literal (adjacent ones joined) must not name
    ("proc", r"/proc(?:/|$)"),
    ("intercept", r"^(?:aten|prims?)(?:::.*)?$"),
    ("library", rf"\b(?:{LIBS}|curand)[A-Z_]\w*|\blib(?:{LIBS}|curand)\b"),
    # host assembly: a system call, or x86 registers (PTX's are %r1, %rd1, %f1, ...)
    ("native", r"\bsyscall\b|\bint\s+\$?0x80\b|\bsysenter\b|"
               r"%%?(?:r[a-d]x|r[sd]i|rsp|rbp|rip|e[a-d]x|[re]flags)\b"),
    ("python", r"^(?:__\w+__|grader(?:\..*)?|sys|os|gc|builtins|inspect|importlib|ctypes|"
               r"f_back|f_globals|modules)$"),
)


def review_cpp(data: bytes) -> list[tuple[int, str, str]]:
    text = data.decode("utf-8", errors="replace")
    # blanks keep every offset and line number
    blank = lambda m: "\n".join(" " * len(p) for p in m[0].split("\n"))  # noqa: E731
    no_comments = TOKENS.sub(lambda m: blank(m) if m[1] else m[0], text)
    code = TOKENS.sub(blank, no_comments)
    lines = text.splitlines()
    starts = [0] + [m.end() for m in re.finditer("\n", text)]
    line_of = lambda pos: bisect.bisect_right(starts, pos)  # noqa: E731
    shown = lambda pos: lines[line_of(pos) - 1].strip()[:80] if lines else ""  # noqa: E731
    found = [(line_of(m.start()), rule, shown(m.start()))
             for rule, needs, pattern in CPP_CODE if any(n in code for n in needs)
             for m in re.finditer(pattern, code, re.M)]
    for m in re.finditer(r'^[ \t]*#[ \t]*include[ \t]*(?:[<"]([^>"\n]+)[>"]|([A-Za-z_]\w*))',
                         no_comments, re.M):
        if m[2]:  # #include MACRO: a header chosen by the preprocessor, out of this review's sight
            found.append((line_of(m.start()), "obfuscation", f"#include {m[2]}"))
            continue
        found += [(line_of(m.start()), rule, f"#include {m[1]}")
                  for rule, pattern in CPP_INCLUDES if re.search(pattern, m[1].strip())]
    for pos, s in _strings(no_comments, code):
        for rule, pattern in STRINGS:
            if re.search(pattern, s):
                found.append((line_of(pos), rule, repr(s[:60])))
    return found


def _strings(no_comments: str, code: str):
    """(offset, value) of each string literal, adjacent literals joined ("at" "en" is "aten")."""
    run, start, last_end = [], 0, -1
    for m in TOKENS.finditer(no_comments):
        if not m[2] or m[2].startswith("'"):
            continue
        body = m[2]
        value = body[body.find("(") + 1:body.rfind(")")] if body.startswith("R") else body[1:-1]
        if run and code[last_end:m.start()].strip() == "":
            run.append(value)
        else:
            if run:
                yield start, "".join(run)
            run, start = [value], m.start()
        last_end = m.end()
    if run:
        yield start, "".join(run)
