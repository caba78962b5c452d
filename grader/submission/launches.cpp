// Launch records: every kernel launch of an observed call, recorded below Python and written
// straight to the judge. Built by the judge (grader/judge/launches_build.py), loaded by the
// submission's process before any submission code runs (grader/submission/launches.py says in
// what order, and why), read and judged by the judge (grader/judge/launches.py); what it proves
// and what it cannot: the README's trust table.
//   start(fd)   takes the judge's records socket (SOCK_SEQPACKET: a record a message) and the
//               per-grade secret queued on it, moves the socket to a high number (close-on-exec)
//               and closes the number Python knew. The secret stays in this library's memory;
//               every record carries it, so a line Python writes into the socket is a forgery.
//   attach(t)   subscribes to CUPTI's callback API in the libcupti torch loaded. CUPTI 13.0 takes
//               one subscriber per process, and torch's Kineto (before pytorch/kineto#1250) keeps
//               one from its first profiler session on, only to hear of new CUDA contexts. With
//               `t`, a refused subscription detaches CUPTI once (cuptiFinalize after a flush, as
//               Kineto's own TEARDOWN_CUPTI mode does) and subscribes again; Kineto's activity
//               tracing needs no subscriber and attaches again at its next session.
//   begin/end   a window per observed call; launch callbacks are on only inside it. Each
//               successful launch (runtime or driver API, any thread) is a record: its kernel's
//               name as the profiler names it, its stream's CUPTI id, M for the grader's marker.
// A record: "<secret> <seq> <kind> ...", seq counting from 1 (a lost or injected record is a
// gap). Kinds: A armed, R ready, U unavailable, B/E a window (E: its count), L a launch, G a
// graph launch (its kernels are not seen one by one), F CUPTI failing inside a window.
// Every CUPTI and system call's result is checked; a failure is said, never skipped.

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <cupti.h>
#include <cxxabi.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <sys/socket.h>
#include <unistd.h>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <type_traits>
#include <vector>

namespace {
// --- CUPTI, as torch loaded it ------------------------------------------------------------
// Resolved with dlsym from the libcupti already in the process (torch's libtorch links it):
// a second copy of CUPTI in one process would be a second, conflicting instance.
struct Cupti {
  decltype(&cuptiSubscribe) subscribe = nullptr;
  decltype(&cuptiSubscribe_v2) subscribe_v2 = nullptr;  // optional: CUPTI >= 12.x names it
  decltype(&cuptiUnsubscribe) unsubscribe = nullptr;
  decltype(&cuptiEnableCallback) enable = nullptr;
  decltype(&cuptiGetCallbackName) callback_name = nullptr;
  decltype(&cuptiGetStreamIdEx) stream_id = nullptr;
  decltype(&cuptiFinalize) finalize = nullptr;
  decltype(&cuptiActivityFlushAll) flush = nullptr;
  decltype(&cuptiGetResultString) result_string = nullptr;
} cupti;

std::string said(CUptiResult r) {
  const char* s = nullptr;
  bool named = cupti.result_string && cupti.result_string(r, &s) == CUPTI_SUCCESS && s;
  return named ? std::string(s) : "CUPTI error " + std::to_string(static_cast<int>(r));
}

bool fail(std::string* why, const std::string& text) {
  *why = text;
  return false;
}

int find_cupti(dl_phdr_info* info, size_t, void* out) {
  const char* name = info->dlpi_name;
  if (name == nullptr || std::strstr(name, "/libcupti.so") == nullptr) return 0;
  *static_cast<std::string*>(out) = name;
  return 1;
}
// --- the channel ------------------------------------------------------------------------
int g_fd = -1;
char g_secret[65] = {0};
std::mutex g_mu;               // one record at a time: its seq and its place in the socket agree
unsigned long long g_seq = 0;  // under g_mu
int g_broken = 0;              // errno of the first failed send; nothing is written after it
bool g_open = false;           // a window is open (under g_mu)
std::atomic<unsigned> g_window{0};  // the current (or last) window's number (set under g_mu)
unsigned g_count = 0;          // launches recorded in it (under g_mu)
bool g_confirmed = false, g_attached = false, g_started = false;
CUpti_SubscriberHandle g_sub = nullptr;
std::string g_mode;

// Writes one record; the caller holds g_mu. A failed send (the socket closed or replaced by the
// submission, the judge gone) stops the records: the judge then sees calls without records.
void emit_locked(const char* kind, const std::string& rest) {
  if (g_fd < 0 || g_broken) return;
  std::string msg = std::string(g_secret) + " " + std::to_string(++g_seq) + " " + kind;
  if (!rest.empty()) msg += " " + rest;
  ssize_t n;
  do n = send(g_fd, msg.data(), msg.size(), MSG_NOSIGNAL);
  while (n < 0 && errno == EINTR);
  if (n != static_cast<ssize_t>(msg.size())) g_broken = n < 0 ? errno : EMSGSIZE;
}

void emit(const char* kind, const std::string& rest) {
  std::lock_guard<std::mutex> g(g_mu);
  emit_locked(kind, rest);
}
// --- which callbacks are launches -----------------------------------------------------------
// Where a launch's stream is: DRV_PLAIN cuLaunchKernel, cuLaunchCooperativeKernel (hStream);
// DRV_EX cuLaunchKernelEx (config->hStream); RT_PLAIN cudaLaunchKernel, __cudaLaunchKernel,
// cudaLaunchCooperativeKernel (stream); RT_EX cudaLaunchKernelExC (config->stream); *_GRAPH the
// graph launches; *_NO_STREAM none named (cuLaunch, cuLaunchGrid, the multi-device launches).
enum Shape : unsigned char {
  NOT_A_LAUNCH = 0, DRV_PLAIN, DRV_EX, DRV_GRID_ASYNC, DRV_NO_STREAM, RT_PLAIN, RT_EX,
  RT_NO_STREAM, DRV_GRAPH, RT_GRAPH,
};
constexpr int kMaxCbid = 4096;
unsigned char g_shape[2][kMaxCbid];  // [runtime?][cbid]
bool g_per_thread[2][kMaxCbid];      // a _ptsz variant: a NULL stream is the per-thread stream
std::vector<std::pair<CUpti_CallbackDomain, CUpti_CallbackId>> g_cbids;

// By the API function's name, as CUPTI names it, so that a launch function this file does not
// list (CUDA 13 added __cudaLaunchKernel, which <<<>>> compiles to) is still recorded.
Shape shape_of(bool runtime, const char* name) {
  const char* s = name;
  if (std::strstr(s, "Launch") == nullptr || std::strstr(s, "HostFunc") != nullptr)
    return NOT_A_LAUNCH;
  if (std::strstr(s, "GraphLaunch") != nullptr) return runtime ? RT_GRAPH : DRV_GRAPH;
  if (std::strstr(s, "MultiDevice") != nullptr) return runtime ? RT_NO_STREAM : DRV_NO_STREAM;
  if (std::strstr(s, "LaunchKernelEx") != nullptr) return runtime ? RT_EX : DRV_EX;
  if (std::strstr(s, "LaunchKernel") != nullptr || std::strstr(s, "LaunchCooperativeKernel"))
    return runtime ? RT_PLAIN : DRV_PLAIN;
  if (!runtime && std::strstr(s, "LaunchGridAsync") != nullptr) return DRV_GRID_ASYNC;
  if (!runtime && (std::strcmp(s, "cuLaunch") == 0 || std::strcmp(s, "cuLaunchGrid") == 0))
    return DRV_NO_STREAM;
  if (runtime && std::strncmp(s, "cudaLaunch_", 11) == 0) return RT_NO_STREAM;
  return NOT_A_LAUNCH;  // another API with "Launch" in its name: not a kernel launch
}

// The stream's CUPTI id ("s<id>", the id the profiler reports as the kernel's stream), or "-"
// where it cannot be known (the call's parameters name none, or CUPTI cannot resolve it).
std::string stream_of(Shape shape, bool per_thread, const void* params) {
  const void* stream;
  if (shape == DRV_PLAIN) {
    stream = static_cast<const cuLaunchKernel_params*>(params)->hStream;
  } else if (shape == DRV_EX) {
    const CUlaunchConfig* c = static_cast<const cuLaunchKernelEx_params*>(params)->config;
    if (c == nullptr) return "-";
    stream = c->hStream;
  } else if (shape == DRV_GRID_ASYNC) {
    stream = static_cast<const cuLaunchGridAsync_params*>(params)->hStream;
  } else if (shape == RT_PLAIN) {  // __cudaLaunchKernel's parameters are cudaLaunchKernel's
    stream = static_cast<const cudaLaunchKernel_v7000_params*>(params)->stream;
  } else if (shape == RT_EX) {
    const auto* c = static_cast<const cudaLaunchKernelExC_v11060_params*>(params)->config;
    if (c == nullptr) return "-";
    stream = c->stream;
  } else if (shape == DRV_GRAPH) {
    stream = static_cast<const cuGraphLaunch_params*>(params)->hStream;
  } else if (shape == RT_GRAPH) {
    stream = static_cast<const cudaGraphLaunch_v10000_params*>(params)->stream;
  } else {
    return "-";
  }
  uint32_t id = 0;
  if (cupti.stream_id(nullptr, (CUstream)stream, per_thread ? 1 : 0, &id) != CUPTI_SUCCESS)
    return "-";
  return "s" + std::to_string(id);
}

// As Kineto names a kernel (libkineto's demangle): demangled, unless longer than 8192 bytes or
// not a C++ name (Triton's kernels keep their plain names).
std::string kernel_name(const char* symbol) {
  if (symbol == nullptr || *symbol == 0) return "?";
  if (std::strlen(symbol) > 8192) return symbol;
  int status = 0;
  char* d = abi::__cxa_demangle(symbol, nullptr, nullptr, &status);
  if (status != 0 || d == nullptr) return symbol;
  std::string out(d);
  std::free(d);
  return out;
}

// Per thread: the runtime launch in progress (a runtime launch calls the driver underneath; the
// driver's callback, if CUPTI gives one, is kept for it rather than recorded twice), and the
// window whose marker this thread still owes.
struct Pending {
  unsigned window = 0;  // the window it began in (a launch cut in two by end() leaves a depth
  int depth = 0;        // that must not hide a later window's launches)
  bool have = false;
  std::string name, stream;
};
thread_local Pending t_rt;
thread_local unsigned t_marker = 0;

constexpr size_t kMaxName = 16000;  // a record is one message; longer names are cut (flag T)

void record_launch(bool graph, const std::string& stream, std::string name) {
  std::lock_guard<std::mutex> g(g_mu);
  if (!g_open) return;  // the window closed meanwhile (end() holds g_mu to close it)
  ++g_count;
  std::string rest = std::to_string(g_window) + " " + stream;
  if (graph) return emit_locked("G", rest);
  std::string flags = t_marker == g_window ? "M" : "";
  if (t_marker == g_window) t_marker = 0;
  if (name.size() > kMaxName) { name.resize(kMaxName); flags += "T"; }
  emit_locked("L", rest + " " + (flags.empty() ? "-" : flags) + " " + name);
}

void CUPTIAPI on_api(void*, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                     const void* data) {
  if ((domain != CUPTI_CB_DOMAIN_RUNTIME_API && domain != CUPTI_CB_DOMAIN_DRIVER_API) ||
      cbid >= static_cast<CUpti_CallbackId>(kMaxCbid))
    return;
  const bool runtime = domain == CUPTI_CB_DOMAIN_RUNTIME_API;
  const Shape shape = static_cast<Shape>(g_shape[runtime][cbid]);
  if (shape == NOT_A_LAUNCH) return;
  const auto* cb = static_cast<const CUpti_CallbackData*>(data);
  const bool graph = shape == DRV_GRAPH || shape == RT_GRAPH;
  if (runtime) {
    if (cb->callbackSite == CUPTI_API_ENTER) {
      if (t_rt.window != g_window) t_rt.depth = 0;
      t_rt.window = g_window;
      ++t_rt.depth;
      t_rt.have = false;
      return;
    }
    if (t_rt.depth > 0) --t_rt.depth;
    // recorded at the exit, and only if it launched: a refused launch runs nothing
    if (cb->functionReturnValue == nullptr ||
        *static_cast<const cudaError_t*>(cb->functionReturnValue) != cudaSuccess)
      return;
    std::string stream = stream_of(shape, g_per_thread[1][cbid], cb->functionParams);
    std::string name = cb->symbolName ? kernel_name(cb->symbolName)
                                      : (t_rt.have ? t_rt.name : std::string("?"));
    if (stream == "-" && t_rt.have) stream = t_rt.stream;
    t_rt.have = false;
    record_launch(graph, stream, name);
    return;
  }
  if (cb->callbackSite != CUPTI_API_EXIT) return;
  if (cb->functionReturnValue == nullptr ||
      *static_cast<const CUresult*>(cb->functionReturnValue) != CUDA_SUCCESS)
    return;
  std::string stream = stream_of(shape, g_per_thread[0][cbid], cb->functionParams);
  if (t_rt.depth > 0 && t_rt.window == g_window) {  // under a runtime launch: its exit records it
    t_rt = {t_rt.window, t_rt.depth, true, kernel_name(cb->symbolName), stream};
    return;
  }
  record_launch(graph, stream, kernel_name(cb->symbolName));
}

// Every callback id of both API domains whose function launches work on the GPU.
bool find_launch_callbacks(std::string* why) {
  std::memset(g_shape, 0, sizeof g_shape);
  std::memset(g_per_thread, 0, sizeof g_per_thread);
  g_cbids.clear();
  for (CUpti_CallbackDomain d : {CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_CB_DOMAIN_RUNTIME_API}) {
    const bool runtime = d == CUPTI_CB_DOMAIN_RUNTIME_API;
    for (int cbid = 1; cbid < kMaxCbid; ++cbid) {
      const char* name = nullptr;
      // ids past the last one (or retired ones) are refused: not launches
      if (cupti.callback_name(d, static_cast<CUpti_CallbackId>(cbid), &name) != CUPTI_SUCCESS ||
          name == nullptr || shape_of(runtime, name) == NOT_A_LAUNCH)
        continue;
      Shape s = shape_of(runtime, name);
      g_shape[runtime][cbid] = s;
      g_per_thread[runtime][cbid] = std::strstr(name, "_ptsz") != nullptr;
      g_cbids.emplace_back(d, static_cast<CUpti_CallbackId>(cbid));
    }
  }
  return !g_cbids.empty() || fail(why, "CUPTI named no launch callback");
}

std::string enable_launches(uint32_t on) {  // on or off; "" or why not
  for (auto& [d, cbid] : g_cbids) {
    CUptiResult r = cupti.enable(on, g_sub, d, cbid);
    if (r != CUPTI_SUCCESS)
      return std::string(on ? "enabling" : "disabling") + " launch callback " +
             std::to_string(cbid) + " failed: " + said(r);
  }
  return "";
}

bool load_cupti(std::string* why) {
  std::string path;
  dl_iterate_phdr(find_cupti, &path);
  if (path.empty()) return fail(why, "torch has not loaded CUPTI (libcupti.so) here");
  void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_NOLOAD);  // held: CUPTI stays loaded
  const char* error = lib == nullptr ? dlerror() : nullptr;
  if (lib == nullptr) return fail(why, "dlopen " + path + ": " + (error ? error : "failed"));
  auto get = [&](const char* name, auto& out, bool required) {  // every one checked below
    out = reinterpret_cast<std::remove_reference_t<decltype(out)>>(dlsym(lib, name));
    if (out == nullptr && required && why->empty()) *why = std::string("libcupti has no ") + name;
  };
  get("cuptiSubscribe", cupti.subscribe, true);
  get("cuptiSubscribe_v2", cupti.subscribe_v2, false);
  get("cuptiUnsubscribe", cupti.unsubscribe, true);
  get("cuptiEnableCallback", cupti.enable, true);
  get("cuptiGetCallbackName", cupti.callback_name, true);
  get("cuptiGetStreamIdEx", cupti.stream_id, true);
  get("cuptiFinalize", cupti.finalize, true);
  get("cuptiActivityFlushAll", cupti.flush, true);
  get("cuptiGetResultString", cupti.result_string, true);
  return why->empty();
}

CUptiResult subscribe(std::string* holder) {
  if (cupti.subscribe_v2 != nullptr) {
    char old[CUPTI_OLD_SUBSCRIBER_NAME_MIN_LEN + 1] = {0};
    CUpti_SubscriberParams p{};
    p.structSize = CUpti_SubscriberParams_STRUCT_SIZE;
    p.subscriberName = "grader launch records";
    p.oldSubscriberName = old;
    p.oldSubscriberSize = sizeof old - 1;
    CUptiResult r = cupti.subscribe_v2(&g_sub, on_api, nullptr, &p);
    *holder = old;
    return r;
  }
  return cupti.subscribe(&g_sub, on_api, nullptr);
}
// --- what Python calls --------------------------------------------------------------------
PyObject* py_start(PyObject*, PyObject* args) {
  int fd;
  if (!PyArg_ParseTuple(args, "i", &fd)) return nullptr;
  if (g_started) return PyErr_Format(PyExc_RuntimeError, "the records were started already");
  g_started = true;
  char buf[256];
  ssize_t n;
  do n = recv(fd, buf, sizeof buf - 1, MSG_DONTWAIT);
  while (n < 0 && errno == EINTR);
  if (n < 0) return PyErr_SetFromErrno(PyExc_OSError);
  buf[n] = 0;
  // "S <32 hex digits>": the judge queued it before this process started
  if (n != 34 || buf[0] != 'S' || buf[1] != ' ' ||
      std::strspn(buf + 2, "0123456789abcdef") != 32)
    return PyErr_Format(PyExc_RuntimeError, "the records socket did not hold the secret");
  std::memcpy(g_secret, buf + 2, 32);
  int high = fcntl(fd, F_DUPFD_CLOEXEC, 700);
  if (high < 0) return PyErr_SetFromErrno(PyExc_OSError);
  g_fd = high;  // kept even if the close below fails: the records go on through `high`
  if (close(fd) != 0) return PyErr_SetFromErrno(PyExc_OSError);
  emit("A", std::to_string(getpid()));
  Py_RETURN_NONE;
}

PyObject* py_attach(PyObject*, PyObject* args) {
  int takeover;
  if (!PyArg_ParseTuple(args, "p", &takeover)) return nullptr;
  if (g_fd < 0 || g_attached || g_confirmed)
    return PyErr_Format(PyExc_RuntimeError, "attach: not now (start first, once)");
  g_attached = true;
  std::string why;
  if (!load_cupti(&why)) return PyErr_Format(PyExc_RuntimeError, "%s", why.c_str());
  std::string holder;
  CUptiResult r = subscribe(&holder);
  if (r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED && takeover) {
    // Kineto's idle subscriber (see the top): flush what the profiler has buffered (its last
    // session ended), detach CUPTI, subscribe afresh
    CUptiResult f = cupti.flush(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    if (f != CUPTI_SUCCESS && f != CUPTI_ERROR_NOT_INITIALIZED)
      return PyErr_Format(PyExc_RuntimeError, "cuptiActivityFlushAll: %s", said(f).c_str());
    f = cupti.finalize();
    if (f != CUPTI_SUCCESS)
      return PyErr_Format(PyExc_RuntimeError, "cuptiFinalize: %s", said(f).c_str());
    std::string ignored;
    r = subscribe(&ignored);
    g_mode = "took over CUPTI's subscriber from " +
             (holder.empty() ? std::string("torch's profiler") : holder);
  } else {
    g_mode = "subscribed to CUPTI";
  }
  if (r != CUPTI_SUCCESS) {
    g_sub = nullptr;
    return PyErr_Format(PyExc_RuntimeError, "cuptiSubscribe: %s%s%s", said(r).c_str(),
                        holder.empty() ? "" : ", held by ", holder.c_str());
  }
  if (!find_launch_callbacks(&why)) return PyErr_Format(PyExc_RuntimeError, "%s", why.c_str());
  return PyUnicode_FromString(g_mode.c_str());
}

PyObject* py_begin(PyObject*, PyObject*) {
  if (g_sub == nullptr) return PyErr_Format(PyExc_RuntimeError, "begin: not attached");
  unsigned w;
  {
    std::lock_guard<std::mutex> g(g_mu);
    w = ++g_window;
    g_count = 0;
    emit_locked("B", std::to_string(w));
    g_open = true;
  }
  t_marker = w;  // this thread's next launch is the grader's marker kernel
  std::string bad = enable_launches(1);
  if (!bad.empty()) emit("F", std::to_string(w) + " " + bad);
  return PyLong_FromUnsignedLong(w);
}

PyObject* py_end(PyObject*, PyObject*) {
  if (g_sub == nullptr) return PyErr_Format(PyExc_RuntimeError, "end: not attached");
  std::string bad = enable_launches(0);
  unsigned count;
  {
    std::lock_guard<std::mutex> g(g_mu);
    if (!bad.empty()) emit_locked("F", std::to_string(g_window) + " " + bad);
    g_open = false;
    count = g_count;
    emit_locked("E", std::to_string(g_window) + " " + std::to_string(count));
  }
  t_marker = 0;
  return PyLong_FromUnsignedLong(count);
}

// R (ready) or U (unavailable, why): said once, before any submission code runs.
PyObject* py_confirm(PyObject*, PyObject* args) {
  int ok;
  const char* text;
  if (!PyArg_ParseTuple(args, "ps", &ok, &text)) return nullptr;
  if (g_fd < 0 || g_confirmed) return PyErr_Format(PyExc_RuntimeError, "confirm: not now");
  g_confirmed = true;
  emit(ok ? "R" : "U", text);
  Py_RETURN_NONE;
}

// Gives CUPTI back (a failed self-test): unsubscribe, detach; refused once said ready.
PyObject* py_release(PyObject*, PyObject*) {
  if (g_confirmed || g_sub == nullptr)
    return PyErr_Format(PyExc_RuntimeError, "release: not now");
  CUptiResult r = cupti.unsubscribe(g_sub);
  g_sub = nullptr;
  if (r != CUPTI_SUCCESS)
    return PyErr_Format(PyExc_RuntimeError, "cuptiUnsubscribe: %s", said(r).c_str());
  r = cupti.finalize();
  if (r != CUPTI_SUCCESS)
    return PyErr_Format(PyExc_RuntimeError, "cuptiFinalize: %s", said(r).c_str());
  Py_RETURN_NONE;
}

PyMethodDef methods[] = {
    {"start", py_start, METH_VARARGS, "take the records socket and its secret"},
    {"attach", py_attach, METH_VARARGS, "subscribe to CUPTI's launch callbacks"},
    {"begin", py_begin, METH_NOARGS, "open a window: record launches"},
    {"end", py_end, METH_NOARGS, "close the window; its launch count"},
    {"confirm", py_confirm, METH_VARARGS, "say the records ready, or why not"},
    {"release", py_release, METH_NOARGS, "give CUPTI back"},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef module = {PyModuleDef_HEAD_INIT, "_grader_launches",
                      "The grader's launch records (grader/submission/launches.cpp).", -1,
                      methods, nullptr, nullptr, nullptr, nullptr};

}  // namespace

PyMODINIT_FUNC PyInit__grader_launches(void) { return PyModule_Create(&module); }
