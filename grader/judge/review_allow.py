"""The review's allowlist: what an honest kernel file (a Python or Triton track, or the Python half
of a C++/CUDA track) imports and touches. Anything outside it is a finding (grader.judge.review).

Read from every file of solutions/ and starter/, Liger-Kernel's RMSNorm and softmax and the
Triton tutorials' kernels (fused softmax, layer norm, matmul, fused attention). A kernel file needs
PyTorch's tensors and registration, Triton, and a few pure modules of Python's own; it never needs
the machinery of the process it runs in (sys, gc, frames, threads, the import system). Each entry
says why it is here; keep it that short.
"""
from __future__ import annotations

import builtins
import re
import sys

PUBLIC = None  # any public name of the module that is not itself a module (a submodule is listed)

# module -> the names a kernel file may take from it (PUBLIC, or only these)
MODULES: dict[str, frozenset | None] = {
    "__future__": PUBLIC,           # `from __future__ import annotations`: a compiler directive
    # Python's own pure functions on numbers, callables and records
    "math": PUBLIC,                 # launch arithmetic: ceil, log2, sqrt of a scale
    "functools": PUBLIC,            # lru_cache of a compiled kernel, partial, wraps (06/08/10)
    "itertools": PUBLIC,            # products of autotuning configurations
    "operator": PUBLIC,             # mul, ge as functions (Liger)
    "typing": PUBLIC,               # annotations (Optional, Tuple: solutions, Liger)
    "dataclasses": PUBLIC,          # a record of launch parameters
    "struct": PUBLIC,               # the bits of a float constant (solution 10)
    "warnings": frozenset({"warn"}),  # telling the caller about a slow path
    # a cache of compiled kernels, a record, a context for the device (Liger), a choice of
    # algorithm: named, pure helpers, and nothing else of their modules
    "collections": frozenset({"namedtuple", "OrderedDict", "defaultdict", "deque", "Counter"}),
    "contextlib": frozenset({"contextmanager", "nullcontext"}),
    "enum": frozenset({"Enum", "IntEnum", "auto"}), "abc": frozenset({"ABC", "abstractmethod"}),
    # reading the environment (TRITON_INTERPRET; the fused-attention tutorial reads
    # PYTEST_VERSION) and joining paths; nothing else of os, and no write to os.environ
    "os": frozenset({"environ", "getenv", "path"}),
    "os.path": PUBLIC,
    # PyTorch: tensors, registration with the dispatcher, autograd, the device's properties;
    # what an op computes with PyTorch is judged at run time (the profiler), not here
    "torch": PUBLIC,
    "torch.nn": PUBLIC, "torch.nn.functional": PUBLIC, "torch.nn.init": PUBLIC,  # 03's nn.Module
    "torch.library": PUBLIC,        # triton_op, wrap_triton, register_fake, custom_op (06, 08)
    "torch.autograd": PUBLIC, "torch.autograd.function": PUBLIC,  # Function, once_differentiable
    "torch.cuda": PUBLIC,           # device capability and properties, the current stream
    "torch.xpu": PUBLIC,            # the same for Intel GPUs (Liger's RMSNorm asks both)
    "torch.amp": PUBLIC,            # custom_fwd/custom_bwd around an autograd.Function
    "torch.cuda.amp": PUBLIC,       # the same, by its older name
    "torch.version": PUBLIC,        # torch.version.hip / .cuda (the tutorials' is_hip)
    "torch.compiler": PUBLIC,       # is_compiling, disable
    "torch.testing": PUBLIC,        # assert_close in a learner's own test
    "torch.linalg": PUBLIC, "torch.special": PUBLIC, "torch.fft": PUBLIC,  # maths, like torch.*
    "torch.ops": PUBLIC,            # torch.ops.<the track's namespace>.<op>
    "torch.distributed": frozenset({"tensor"}),           # Liger's RMSNorm tells a DTensor
    "torch.distributed.tensor": frozenset({"DTensor"}),   # apart from a tensor
    # Triton: the language, the launcher's device queries, descriptors, autotuning
    "triton": PUBLIC,
    "triton.language": PUBLIC, "triton.language.math": PUBLIC,
    "triton.language.extra": PUBLIC, "triton.language.extra.libdevice": PUBLIC,
    "triton.language.extra.cuda": PUBLIC, "triton.language.extra.cuda.libdevice": PUBLIC,
    "triton.testing": PUBLIC,       # do_bench in a learner's own benchmark
    "triton.tools": frozenset({"tensor_descriptor"}),  # the fused-attention tutorial's TMA
    "triton.tools.tensor_descriptor": PUBLIC,           # descriptors (TensorDescriptor)
    "triton.runtime": frozenset({"driver"}),  # driver.active: the device, its properties and
    "triton.runtime.driver": PUBLIC,          # target (the tutorials' occupancy and is_hip)
    # Gluon, Triton's lower level, for a warp-specialized Hopper kernel (13's forward): its jit,
    # its language, Hopper's TMA, mbarriers and wgmma, the host's TMA descriptor; nothing else
    # of triton.experimental (its other modules, AMD's or Blackwell's, stay findings)
    "triton.experimental": frozenset({"gluon"}),
    "triton.experimental.gluon": frozenset({"jit", "language", "nvidia"}),  # @gluon.jit
    "triton.experimental.gluon.language": PUBLIC,  # gl: layouts, shared memory, warp_specialize
    "triton.experimental.gluon.language.nvidia": frozenset({"hopper"}),
    "triton.experimental.gluon.language.nvidia.hopper": frozenset({
        "mbarrier", "tma",                                   # the two modules below
        "warpgroup_mma", "warpgroup_mma_wait", "fence_async_shared"}),  # async wgmma, TMA's fence
    "triton.experimental.gluon.language.nvidia.hopper.mbarrier": PUBLIC,  # init, expect, arrive
    "triton.experimental.gluon.language.nvidia.hopper.tma": PUBLIC,       # copies, store_wait
    "triton.experimental.gluon.nvidia": frozenset({"hopper"}),
    "triton.experimental.gluon.nvidia.hopper": frozenset({"TensorDescriptor"}),  # host descriptors
    # TMA's reduce-add into global memory (13's one-pass backward at D 64): Gluon 3.6 builds it
    # but exports no wrapper, so a kernel file writes one, a builtin that asks the builder for it;
    # the decorator and the reduce's kind, and nothing else of Gluon's or the compiler's internals
    "triton.experimental.gluon.language._core": frozenset({"builtin"}),
    "triton._C": frozenset({"libtriton"}),
    "triton._C.libtriton": frozenset({"ir"}),
    "triton._C.libtriton.ir": frozenset({"DESCRIPTOR_REDUCE_KIND"}),
}
# a public kernel library installed beside the grader (requirements.txt; a peer in make bench):
# any of its modules but these (Liger's monkey-patching of Hugging Face models)
PACKAGES = {"liger_kernel": frozenset({"transformers"})}
ROOTS = {m.split(".")[0] for m in MODULES} | set(PACKAGES)

# names of allowed modules that an honest kernel never needs, and what they do
DENIED = {
    "torch": {"load": "dynamic-code", "save": "file-write",    # pickle in, pickle out
              "from_file": "file-write"},                       # a file mapped as a tensor
    "torch.ops": {"import_module": "modules"},                 # imports any module by name
    "torch.cuda": {**dict.fromkeys(
        ("cudart", "caching_allocator_alloc", "caching_allocator_delete",
         "change_current_allocator", "CUDAPluggableAllocator", "set_per_process_memory_fraction",
         "MemPool", "use_mem_pool", "set_sync_debug_mode"), "intercept"),
        **dict.fromkeys(("graph", "CUDAGraph", "make_graphed_callables"), "graph"),  # replays
        # work on a stream of its own, past the one the judge times and synchronizes
        **dict.fromkeys(("Stream", "stream", "set_stream", "ExternalStream"), "stream")},
    "torch.library": {"register_torch_dispatch": "intercept"},
    "triton.runtime.driver": {"set_active": "intercept", "reset_active": "intercept"},
    "triton.testing": {"set_gpu_clock": "threads", "nvsmi": "threads"},  # run nvidia-smi
    "typing": {"get_type_hints": "dynamic-code", "ForwardRef": "dynamic-code"},  # they eval
}
# public attributes of allowed modules that hold a module (not a submodule of theirs, not a
# standard module): read from the installed torch and triton, checked by the tests
MODULE_ALIASES = {
    "torch": {"classes", "cpp", "typing_extensions", "windows"},
    "torch.cuda": {"pynvml"},  # NVML's binding, where nvidia-ml-py is installed (the GPU hosts)
    "torch.nn.functional": {"grad", "np"}, "torch.autograd.function": {"hooks"},
    "triton.language.math": {"core"}, "triton.language.extra": {"module"},
    "triton.language.extra.cuda.libdevice": {"core"}, "triton.testing": {"runtime", "tl"},
    "typing": {"stdlib_re"},
    "triton.experimental.gluon.language.nvidia.hopper.tma": {"ttgl"},  # 3.8: gl._core
}
# the public submodules of the allowed packages (torch 2.14, triton 3.8), so that a submodule
# outside the allowlist (torch.jit, torch.utils, triton.knobs) is known for one even where the
# package's folder cannot be listed; the installed package's folder adds newer ones
SUBMODULES = {m: frozenset(names.split()) for m, names in {
    "torch": "accelerator amp ao autograd backends bin compiler contrib cpu csrc cuda distributed "
             "distributions export fft func functional futures fx hub include jit lib library "
             "linalg masked monitor mps mtia multiprocessing nativert nested nn numa onnx optim "
             "overrides package profiler quantization quasirandom random return_types "
             "serialization share signal sparse special storage testing torch_version types "
             "utils version xpu",
    "torch.nn": "attention backends common_types cpp functional grad init intrinsic modules "
                "parallel parameter qat quantizable quantized utils",
    "torch.autograd": "anomaly_mode forward_ad function functional grad_mode gradcheck graph "
                      "profiler profiler_legacy profiler_util variable",
    "torch.cuda": "amp comm gds graph_annotations graphs green_contexts jiterator memory nccl nvtx "
                  "profiler random sparse streams tunable",
    "torch.xpu": "graphs memory random streams", "torch.amp": "autocast_mode grad_scaler",
    "torch.cuda.amp": "autocast_mode common grad_scaler", "torch.compiler": "config",
    "triton": "backends compiler errors experimental instrumentation knobs language plugins "
              "profiler runtime testing tools",
    "triton.language": "core extra math random semantic standard target_info",
    "triton.language.extra": "cuda hip libdevice",
    "triton.language.extra.cuda": "gdc libdevice utils",
    "triton.experimental.gluon.language": "amd extra nvidia",
}.items()}
# public names of allowed modules that are functions although a module has the same name
NOT_MODULES = {"torch": {"chunk", "select", "trace"}, "torch.autograd": {"gradcheck", "variable"}}
STDLIB = frozenset(sys.stdlib_module_names) | {"__main__", "builtins"}

# builtins a kernel file uses; the rest of `builtins` (exec, eval, compile, __import__, globals,
# locals, vars, open, delattr, id, breakpoint, input, memoryview, ...) is a finding
BUILTINS = frozenset(
    "abs all any ascii bin bool bytearray bytes callable chr classmethod complex dict dir divmod "
    "enumerate filter float format frozenset getattr hasattr hash hex int isinstance issubclass "
    "iter len list map max min next object oct ord pow print property range repr reversed round "
    "set setattr slice sorted staticmethod str sum super tuple type zip aiter anext "
    "NotImplemented Ellipsis".split()) | frozenset(
    n for n, v in vars(builtins).items() if isinstance(v, type) and issubclass(v, BaseException))
MODULE_GLOBALS = frozenset({"__name__", "__file__", "__doc__", "__debug__", "__package__",
                            "__annotations__"})  # a module's own globals, harmless to read
AS_VALUE = frozenset({"getattr", "setattr", "hasattr"})  # checked where called, never passed on
# what a builtin outside the allowlist does (the rest: "builtin")
BUILTIN_RULES = {"exec": "dynamic-code", "eval": "dynamic-code", "compile": "dynamic-code",
                 "__import__": "dynamic-code", "__build_class__": "dynamic-code",
                 "globals": "namespace", "locals": "namespace", "vars": "namespace",
                 "open": "file-write", "breakpoint": "introspection", "delattr": "patch",
                 "__builtins__": "introspection", "__loader__": "modules", "__spec__": "modules",
                 "__path__": "modules", "__cached__": "modules", "id": "identity"}
# builtins whose rebinding by assignment would hide them from this review
REBIND = frozenset({"exec", "eval", "__import__", "globals", "locals", "vars", "getattr",
                    "setattr", "delattr", "hasattr", "open", "breakpoint", "type", "super",
                    "__name__", "__builtins__"})

# dunder attributes a kernel reads: super().__init__(), type(x).__name__ in a message, a
# library's __version__ (feature detection); every other dunder (__code__, __globals__,
# __closure__, __dict__, __class__, __subclasses__, __module__, __self__, __wrapped__, ...)
# reaches into functions, frames, classes or modules
DUNDERS = frozenset({"__init__", "__new__", "__name__", "__qualname__", "__doc__", "__version__",
                     "__all__"})
# dunder names that, as a string (for getattr, attrgetter, a namespace's keys), reach the same
REACHING = frozenset({
    "__code__", "__globals__", "__builtins__", "__dict__", "__class__", "__subclasses__",
    "__closure__", "__defaults__", "__kwdefaults__", "__module__", "__self__", "__func__",
    "__wrapped__", "__mro__", "__bases__", "__base__", "__getattribute__", "__setattr__",
    "__delattr__", "__reduce__", "__reduce_ex__", "__traceback__", "__import__", "__loader__",
    "__spec__", "__path__", "__getattr__"})
# attributes of frames, tracebacks, generators, coroutines, cells and code objects
FRAME_ATTRS = frozenset({
    "f_back", "f_globals", "f_locals", "f_builtins", "f_code", "f_trace", "tb_frame", "tb_next",
    "gi_frame", "gi_code", "cr_frame", "cr_code", "ag_frame", "ag_code", "cell_contents",
    "co_code", "co_consts", "co_names", "func_globals", "func_code"})
# module names that, as an attribute of anything, reach the process's machinery
GADGETS = frozenset({
    "os", "sys", "gc", "inspect", "ctypes", "_ctypes", "builtins", "importlib", "threading",
    "_thread", "multiprocessing", "subprocess", "signal", "_signal", "marshal", "pickle",
    "_pickle", "dill", "cloudpickle", "copyreg", "types", "traceback", "runpy", "pkgutil",
    "zipimport", "posix", "_posixsubprocess", "socket", "faulthandler", "atexit", "resource",
    "mmap", "fcntl", "pty", "shutil", "io", "_io", "codecs", "base64", "zlib", "lzma", "bz2",
    "gzip", "binascii", "weakref", "dis", "sysconfig", "site", "tracemalloc", "cffi", "_imp",
    "asyncio", "concurrent", "grader", "__main__", "profiler", "knobs", "_C", "py_impl",
    "py_kernels", "load_binary", "from_file"})
# methods that change the object they are called on (flagged on a foreign object)
MUTATORS = frozenset({"update", "setdefault", "pop", "popitem", "clear", "append", "extend",
                      "insert", "remove", "discard", "__setitem__", "__delitem__", "putenv"})
# methods a class may define that change how others see it, its instances, or pickling
DEFS = {"__torch_function__": "intercept", "__torch_dispatch__": "intercept",
        "__reduce__": "dynamic-code", "__reduce_ex__": "dynamic-code",
        "__setstate__": "dynamic-code", "__del__": "threads", "__getattribute__": "patch",
        "__instancecheck__": "patch", "__subclasscheck__": "patch", "__init_subclass__": "patch",
        "__set_name__": "patch"}
LOADERS = {"torch.ops.load_library", "torch.classes.load_library"}
REGISTRARS = {f"torch.library.{n}" for n in (
    "Library", "impl", "register_kernel", "register_fake", "register_autograd", "define",
    "custom_op", "triton_op", "register_vmap", "impl_abstract", "fallthrough_kernel")}
TORCH_NAMESPACES = {"aten", "prim", "prims", "_", "profiler", "inductor", "quantized"}

# what a module outside the allowlist is for, by its dotted name (first match; else "import")
KINDS = (
    ("grader", ("grader",)),
    ("main", ("__main__",)),
    ("modules", ("sys", "os", "importlib", "runpy", "pkgutil", "zipimport", "imp", "_imp", "site",
                 "sysconfig", "torch.ops.import_module")),
    ("namespace", ("builtins", "__builtins__")),
    ("threads", ("threading", "_thread", "multiprocessing", "concurrent", "subprocess",
                 "_posixsubprocess", "pty", "asyncio", "sched", "torch.multiprocessing",
                 "torch.jit", "torch.futures", "os.fork", "os.system", "os.popen", "os.exec",
                 "os.spawn", "os.posix_spawn", "os.register_at_fork")),
    ("native", ("ctypes", "_ctypes", "cffi", "torch.utils.cpp_extension", "load_binary")),
    ("signals", ("signal", "_signal", "os.kill", "os.killpg", "os.abort", "os.pidfd_open")),
    ("introspection", ("gc", "inspect", "traceback", "dis", "tracemalloc", "faulthandler",
                       "types", "weakref", "sys._getframe", "sys.settrace", "sys.setprofile")),
    ("dynamic-code", ("marshal", "pickle", "_pickle", "dill", "cloudpickle", "copyreg", "base64",
                      "binascii", "zlib", "lzma", "bz2", "gzip", "codecs", "code", "codeop",
                      "torch.load", "typing.get_type_hints")),
    ("file-write", ("shutil", "tempfile", "pathlib", "io", "_io", "mmap", "fcntl", "from_file",
                    "os.open",
                    "os.remove", "os.unlink", "os.rename", "os.replace", "os.write", "os.truncate",
                    "os.chmod", "os.symlink", "os.link", "os.mkdir", "os.makedirs", "torch.save")),
    ("intercept", ("torch.profiler", "torch.autograd.profiler", "torch.autograd.profiler_util",
                   "torch.autograd.graph", "torch.overrides", "torch.utils._python_dispatch",
                   "torch.cuda.memory", "torch.cuda.graphs", "torch.cuda.profiler",
                   "torch.nn.modules", "triton.knobs",
                   "triton.runtime", "triton.compiler", "triton.profiler", "profiler", "knobs",
                   "py_impl", "py_kernels")),
)


def kind(path: str) -> str | None:
    """The rule of a module or name outside the allowlist: by its last part where that is a
    module (torch.os is os), else by the longest entry of KINDS it lies under."""
    last = path.rsplit(".", 1)[-1]
    if last in GADGETS:
        path = last
    if re.match(r"(reference|submission)_\w+(\.|$)", path):  # what the grader imported
        return "grader"
    best, rule = -1, None
    for r, prefixes in KINDS:
        for p in prefixes:
            if (path == p or path.startswith(p + ".") or p.startswith("os.") and
                    path.startswith(p)) and len(p) > best:
                best, rule = len(p), r
    return rule
