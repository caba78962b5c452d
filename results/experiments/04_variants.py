"""Exercise 04 (reduce_sum), CUDA track: variants of the solution's kernels, built, checked and
timed side by side with torch.sum (eager) and the solution as committed (GPU; ~2-2.5 minutes on
a 16-core H200 machine: ~45-60 s of builds, 8 at a time, then one process that checks every
variant and times everything in 3 rounds; --budget, 175 s, drops rounds that would not fit).

    python3 results/experiments/04_variants.py --out DIR            # GPU: build, check, time
    python3 results/experiments/04_variants.py --only lastblock,interleave --rounds 5
    python3 results/experiments/04_variants.py --list               # variants and predictions
    python3 results/experiments/04_variants.py --build-only --jobs 2  # no GPU: every build
    python3 results/experiments/04_variants.py --nvcc               # no GPU: ptxas registers,
        # spills and the blocks per SM they allow, for the graded kernel of every variant
    python3 results/experiments/04_variants.py --cpu-smoke --only lastblock  # no GPU: this
        # script's checking/timing process on the ops' CPU path, small inputs (no kernel runs)
Also: --workdir DIR (build there and keep it: a rerun rebuilds only what changed), --keep,
--compile (torch.compile of both cases too, ~20-40 s more), --jobs N (builds at a time).

The question (the issue): reduce_sum of 2^28 float32 at least as fast as torch.sum (eager) and at
>= 92% of the grader's read ceiling, with the same bits on every call; reduce_sum_rows of
(32768, 8192) bf16 kept as fast as it is (level with torch.compile, 1.5x eager). On an H200 the
solution's flat sum took 257.8 us (93.6% of 4450 GB/s), torch.sum 255.5 us (94.4%).

What changes between variants (a text edit of a temporary copy of
solutions/04_reduce_sum/cuda, as in 09_cuda_variants.py):
  kLastBlock    0: the solution's two launches (partial_sums_kernel, then finish_kernel).
                1: ONE launch. Each block writes its partial, __threadfence(), takes a ticket
                   (atomicInc on its row's counter); the block that takes the row's last ticket
                   adds that row's partials in index order, with the same loop and the same
                   block tree as finish_kernel (so the same bits as the solution), and writes the
                   result. The counters live after the partials in the workspace the .cpp already
                   allocates per call (one more value per row) and are zeroed by a
                   cudaMemsetAsync on the call's stream (what PyTorch's own reduction does:
                   ATen/native/cuda/Reduce.cuh memsets its semaphores every call). Concurrent calls
                   on other streams get other workspaces from the caching allocator: no sharing.
                2: ONE launch, no memset: the counters live in a buffer per (device, stream),
                   cudaMalloc'ed and zeroed once (cudaMemsetAsync on that stream), and every call
                   leaves them at 0: atomicInc(&c, splits - 1) wraps to 0 when the row's last
                   block takes its ticket. Calls on one stream run in order, so they can share
                   their stream's counters; another stream has its own buffer. (Not safe for two
                   CUDA graphs captured on one stream and replayed at once: they share it.)
  kBlocksPerSm  4 (the solution), 5, 6, 8: the grid of the flat sum (528 / 660 / 792 / 1056
                blocks on 132 SMs). The graded kernel (float, 16-byte vectors, kUnrollDeep = 8)
                uses 44 registers a thread (ptxas, sm_90, allocated as 48): 5 blocks of 256
                threads fit an SM, so 6 or 8 run in more than one wave unless
                __launch_bounds__(256, N) on that kernel caps its registers ("_lb": 40 for 6
                with 64 B of spills, 32 for 8 with 76 B; the rows kernel keeps its own).
  kUnrollDeep   8 (the solution), 16: 16-byte loads in flight a thread on long chunks (56
                registers: 4 blocks still fit an SM).
  kInterleave   false (the solution): block s of a row streams one contiguous chunk; true: the
                row is cut into tiles of kUnroll * kThreads vectors and block s takes tiles s,
                s + splits, ... (all blocks sweep the array together, like the read probe; the
                graded case has 32768 tiles for 528 blocks: 32 blocks take 63, the rest 62).
                Another order of the adds (other bits than the solution's), still fixed.
The device code of "lastblock" (kLastBlock = 1) is the change proposed for the solution; the
proposal keeps the tickets in a tensor of their own instead of after the partials (host side
only).

Method. Every variant is its own tree with its own op namespace (ex04v_<name>) and C++ namespace,
built with the grader's build (grader.build.build) in a process of its own, --jobs at a time;
then ONE process loads every variant's library (torch.ops.load_library), measures the read
ceiling the way the grader does (grader.timing.CEILINGS["read_bandwidth"]: a Triton kernel
reading 1 GiB of fp32 and writing nothing), checks each variant, and times everything in
--rounds rounds (each round: the read ceiling, then torch.sum, the solution and every variant
in a rotated order) with grader.timing.time_fn, the grader's method (triton do_bench, L2
flushed, median). A variant that crashes the process (a CUDA fault poisons the context) is
marked and the rest run again in a fresh process.

Checks, per variant: values against a float64 sum within grader.testing.sum_bound (the bound of
exercises/04_reduce_sum/test_reduce_sum.py) for every dtype at awkward sizes (0, 1, primes, one
past a vector, 2^24 + 3, 16.7M), 0-d, misaligned views (base[1:]), rows that split (8 and 33 rows
of 2^20 + 3), all-positive 16-bit inputs, and both benchmark inputs; the same bits over 10 calls
(graded input, 2^24 + 3 fp32/bf16, (8, 2^20 + 3) fp32/bf16, the rows benchmark input); the same
bits when calls of different shapes follow one another without a sync (the counters must be back
at 0 after every call) and when 4 streams call at once. "=sol" says whether the graded sum has the
solution's bits (it must for a last-block variant of the same grid and depth: the same order).

Columns of the final table, printed last (medians over the rounds; "min-max": the spread of
the per-round medians): us, GB/s (reference.traffic bytes / time), "/read" (that over the read
ceiling measured in this process, median of the rounds), "x torch" (torch.sum's time over the
variant's: above 1 is faster), the same for the rows case against eager torch.sum (dim=-1);
"det" (the most distinct results in 10 calls of any input: 1), "=sol" and "check" (ok, or
FAIL n: the failures are in the log). --out DIR gets log.txt (everything, with the processes'
stderr), results.json (every timing, check and setting) and variants/ (each variant's kernels
file, and its .cpp where it changes).
"""
from __future__ import annotations

import argparse
import concurrent.futures
import hashlib
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EX = "04_reduce_sum"
SRC = ROOT / "solutions" / EX / "cuda"
KERNELS, CPP = "reduce_sum_kernels.cu", "reduce_sum.cpp"
FLAT_CASE = {"n": 1 << 28}
ROWS_CASE = {"M": 32768, "N": 8192}

# name -> (what it is, the predicted effect, settings). None: the solution's files as committed
# (only the namespaces renamed). Settings: constants of the switchable copy (see PATCHES), and
# "min_blocks": N for __launch_bounds__(kThreads, N) on partial_sums_kernel.
VARIANTS = {
    "solution": ("the solution as committed: two launches, 4 blocks/SM, 8 loads deep",
                 "the baseline: ~258 us on an H200, 2.3 us behind torch.sum", None),
    "lastblock": ("ONE launch: the last block of a row finishes it; tickets in the workspace, "
                  "zeroed by a memset per call",
                  "-1.5 to -3 us (level with torch.sum): the finish launch (launch gap + a "
                  "one-block kernel, ~2-3 us) becomes a memset node before the kernel (~1 us, "
                  "hidden partly behind the launch) and one fence + atomic per block; same bits",
                  {"kLastBlock": 1}),
    "lastblock_once": ("ONE launch, tickets per (device, stream) zeroed once, left at 0 by the "
                       "last block (atomicInc wraps)",
                       "lastblock minus the memset: -0.5 to -1 us more; same bits",
                       {"kLastBlock": 2}),
    "bps5": ("kBlocksPerSm 5 (660 blocks): the most that fit an SM at 44 regs, one wave",
             "+/-1 us: each SM reads the same share (1/132) whatever its block count; 160 KB in "
             "flight per SM instead of 128, past what Little's law needs", {"kBlocksPerSm": 5}),
    "bps6": ("kBlocksPerSm 6 (792 blocks); 5 fit an SM at 44 regs: 132 blocks in a 2nd wave",
             "+/-2 us: the late blocks go to the SMs that finish first (some dynamic balance) "
             "but run at 1-2 blocks per SM", {"kBlocksPerSm": 6}),
    "bps6_lb": ("kBlocksPerSm 6 + __launch_bounds__(256, 6) on the graded kernel: <= 40 regs "
                "(ptxas: 64 B of spills), one wave",
                "0 to +3 us: spills to local memory (L1) in the loop; more threads buy nothing",
                {"kBlocksPerSm": 6, "min_blocks": 6}),
    "bps8": ("kBlocksPerSm 8 (1056 blocks); 5 fit an SM: 1.6 waves",
             "+/-2 us: like bps6, more blocks in later waves", {"kBlocksPerSm": 8}),
    "bps8_lb": ("kBlocksPerSm 8 + __launch_bounds__(256, 8) on the graded kernel: <= 32 regs "
                "(ptxas: 76 B of spills), one wave",
                "0 to +5 us: 32 regs cannot hold 8 float4 loads; spills and split load groups",
                {"kBlocksPerSm": 8, "min_blocks": 8}),
    "deep16": ("kUnrollDeep 16: 16 loads of 16 B in flight a thread on long chunks (56 regs: "
               "4 blocks/SM still fit)",
               "+/-1 us: twice the bytes in flight buys nothing past Little's law",
               {"kUnrollDeep": 16}),
    "interleave": ("blocks take tiles of 8 x 256 vectors in turn over the row, all sweeping the "
                   "array together (like the read probe) instead of one 2 MB chunk each",
                   "-3 to +1 us: only if 528 streams 2 MB apart cost DRAM locality (the "
                   "README's guess); other bits, still fixed", {"kInterleave": "true"}),
    "lastblock_bps5": ("lastblock + kBlocksPerSm 5", "lastblock's gain +/- bps5's",
                       {"kLastBlock": 1, "kBlocksPerSm": 5}),
    "lastblock_bps6_lb": ("lastblock + kBlocksPerSm 6 + __launch_bounds__(256, 6)",
                          "lastblock's gain +/- bps6_lb's",
                          {"kLastBlock": 1, "kBlocksPerSm": 6, "min_blocks": 6}),
    "lastblock_deep16": ("lastblock + kUnrollDeep 16", "lastblock's gain +/- deep16's",
                         {"kLastBlock": 1, "kUnrollDeep": 16}),
    "lastblock_interleave": ("lastblock + interleaved tiles", "lastblock's gain +/- interleave's",
                             {"kLastBlock": 1, "kInterleave": "true"}),
    "lastblock_once_interleave": ("lastblock_once + interleaved tiles",
                                  "both one-launch gains and interleave's",
                                  {"kLastBlock": 2, "kInterleave": "true"}),
}

# --- the switchable copy: anchored text edits of the solution's kernels file --------------------

SWITCHES = '''
// --- experiment switches (results/experiments/04_variants.py); the defaults are the solution ---
// kLastBlock 0: finish_kernel, a second launch. 1: one launch; the last block of a row to take a
// ticket adds the row's partials (finish_kernel's order); tickets after the partials in the
// .cpp's workspace, zeroed by a cudaMemsetAsync per call. 2: the same, tickets in a buffer per
// (device, stream) zeroed once; atomicInc wraps each back to 0 in the row's last block.
constexpr int kLastBlock = 0;
// kInterleave: block s of a row takes tiles s, s + splits, ... of kUnroll * kThreads vectors
// (all blocks sweep the row together) instead of one contiguous chunk.
constexpr bool kInterleave = false;
'''

STREAM_TICKETS = r'''
// kLastBlock == 2: one ticket per row (rows that split: fewer than num_sms * kBlocksPerSm) in a
// buffer per (device, stream), allocated and zeroed once. Every call leaves its tickets at 0
// (atomicInc wraps in the row's last block), so the next call on the stream, which runs after
// this one, finds zeros; calls on another stream, which may run at the same time, have their own.
unsigned int* stream_tickets(cudaStream_t stream) {
  static std::mutex mutex;
  static std::map<std::pair<int, cudaStream_t>, unsigned int*> buffers;
  int dev = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  const std::lock_guard<std::mutex> lock(mutex);
  unsigned int*& tickets = buffers[{dev, stream}];
  if (tickets == nullptr) {
    const size_t bytes = sizeof(unsigned int) * size_t(course::num_sms()) * kBlocksPerSm;
    // cudaMalloc is refused while a CUDA graph is being captured (global mode): relaxed for it
    cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
    unsigned int* p = nullptr;
    const cudaError_t err = cudaMalloc(&p, bytes);
    CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
    CUDA_CHECK(err);
    CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, stream));  // ordered before this call's kernel
    tickets = p;
  }
  return tickets;
}

'''

INTERLEAVED = r'''  if constexpr (kInterleave) {
    // the row in tiles of kUnroll * kThreads vectors: block s of the row takes tiles s,
    // s + splits, ... (all blocks sweep the row together); the partial tile at the end goes to
    // the block whose turn it would be, one vector at a time
    constexpr int64_t kTile = int64_t(kUnroll) * kThreads;
    const int64_t s = blockIdx.x % splits, full = nvec / kTile;
    for (int64_t t = s; t < full; t += splits) {
      const V* q = pv + t * kTile + threadIdx.x;
      V v[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) v[u] = q[u * kThreads];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
#pragma unroll
        for (int k = 0; k < kVec; ++k) acc[u] += widen(v[u].v[k]);
      }
    }
    if (s == full % splits)
      for (int64_t i = full * kTile + threadIdx.x; i < nvec; i += kThreads) {
        const V v = pv[i];
#pragma unroll
        for (int k = 0; k < kVec; ++k) acc[0] += widen(v.v[k]);
      }
  } else {  // the solution's contiguous chunk
'''

LAST_BLOCK_TAIL = r'''  const A total = block_reduce_sum(acc[0], smem);
  if (kLastBlock == 0 || splits == 1) {
    if (threadIdx.x == 0) dst[blockIdx.x] = total;
    return;
  }
  // One launch: the partial, then a ticket. The block that takes its row's last ticket has every
  // partial of the row visible (each block fenced before its ticket) and adds them in index
  // order, as finish_kernel does: the same order whichever block arrives last, the same bits.
  __shared__ bool last;
  if (threadIdx.x == 0) {
    dst[blockIdx.x] = total;
    __threadfence();  // this partial is visible device-wide before the ticket says so
    const unsigned int ticket = atomicInc(&tickets[row], unsigned(splits - 1));  // wraps to 0
    last = ticket == unsigned(splits - 1);
    if (last) __threadfence();  // and the others' partials are seen after their tickets
  }
  __syncthreads();  // also: block_reduce_sum's last reads of smem are done
  if (!last) return;
  const A* q = dst + row * splits;
  A s = A(0);
  for (int k = threadIdx.x; k < splits; k += kThreads) s += __ldcg(q + k);  // from L2
  s = block_reduce_sum(s, smem);
  if (threadIdx.x == 0) out[row] = s;
}
'''

LAUNCH_TICKETS = (
    "  typename Out<T>::type* dst = splits == 1 ? out : partials;  // one value per block\n"
) + r'''  unsigned int* tickets = nullptr;  // one-launch finish: a counter per row, 0 at launch
  if (kLastBlock == 1 && splits > 1) {
    // the .cpp allocates rows more values after the partials: the tickets, zeroed every call
    tickets = reinterpret_cast<unsigned int*>(partials + rows * splits);
    CUDA_CHECK(cudaMemsetAsync(tickets, 0, sizeof(unsigned int) * size_t(rows), stream));
  } else if (kLastBlock == 2 && splits > 1) {
    tickets = stream_tickets(stream);
  }
'''

# (old, new, count): every `old` must occur exactly `count` times in the solution's file
PATCHES = [
    ("#include <algorithm>\n",
     "#include <algorithm>\n#include <map>\n#include <mutex>\n#include <utility>\n", 1),
    ("constexpr int kBlocksPerSm = 4;   "
     "// 1024 threads per SM: enough loads in flight (see above)\n",
     "constexpr int kBlocksPerSm = 4;   "
     "// 1024 threads per SM: enough loads in flight (see above)\n" + SWITCHES, 1),
    ("                    typename Out<T>::type* __restrict__ dst) {\n",
     "                    typename Out<T>::type* __restrict__ dst, typename Out<T>::type* out,\n"
     "                    unsigned int* __restrict__ tickets) {\n", 1),
    ("  const int64_t begin = (blockIdx.x % splits) * chunk;",
     "  const int64_t begin = kInterleave ? 0 : (blockIdx.x % splits) * chunk;", 1),
    ("  const int64_t end = begin + chunk < cols ? begin + chunk : cols;\n",
     "  const int64_t end = kInterleave ? cols : "
     "(begin + chunk < cols ? begin + chunk : cols);\n", 1),
    ("  int64_t i = threadIdx.x;\n", INTERLEAVED + "  int64_t i = threadIdx.x;\n", 1),
    ("    for (int k = 0; k < kVec; ++k) acc[0] += widen(v.v[k]);\n  }\n",
     "    for (int k = 0; k < kVec; ++k) acc[0] += widen(v.v[k]);\n  }\n  }  // kInterleave\n",
     1),
    ("  for (int64_t j = nvec * kVec + threadIdx.x; j < len; j += kThreads) "
     "acc[0] += widen(p[j]);\n",
     "  if (!kInterleave || blockIdx.x % splits == splits - 1)  "
     "// kInterleave: one block, the last\n"
     "    for (int64_t j = nvec * kVec + threadIdx.x; j < len; j += kThreads) "
     "acc[0] += widen(p[j]);\n", 1),
    ("  const A total = block_reduce_sum(acc[0], smem);\n"
     "  if (threadIdx.x == 0) dst[blockIdx.x] = total;\n}\n", LAST_BLOCK_TAIL, 1),
    ("template <typename T>\nbool vector_path",
     STREAM_TICKETS + "template <typename T>\nbool vector_path", 1),
    ("  typename Out<T>::type* dst = splits == 1 ? out : partials;  // one value per block\n",
     LAUNCH_TICKETS, 1),
    ("(x, cols, chunk, splits, dst);", "(x, cols, chunk, splits, dst, out, tickets);", 3),
    ("  if (splits > 1) {\n    finish_kernel",
     "  if (kLastBlock == 0 && splits > 1) {\n    finish_kernel", 1),
]

# kLastBlock == 1: the workspace holds one ticket per row after the partials
CPP_TICKETS = ("at::empty({splits > 1 ? rows * splits : 0}, out.options());",
               "at::empty({splits > 1 ? rows * (splits + 1) : 0}, out.options());  // + tickets")


def replace_exactly(text: str, old: str, new: str, count: int, what: str) -> str:
    found = text.count(old)
    assert found == count, f"{what}: {found} occurrences of {old[:70]!r}, expected {count}"
    return text.replace(old, new)


def set_constants(text: str, values: dict) -> str:
    """`constexpr <type> <name> = <value>;` -> the new value, each name exactly once."""
    for name, value in values.items():
        pattern = re.compile(rf"^(constexpr \w+ {name} = )[^;]+;", re.M)
        text, n = pattern.subn(rf"\g<1>{value};", text)
        assert n == 1, f"{name}: {n} definitions in {KERNELS}"
    return text


def namespaces(name: str) -> tuple[str, str]:
    """(op namespace, C++ namespace) of a variant: each its own, so all load into one process."""
    tag = re.sub(r"\W", "_", name)
    return f"ex04v_{tag}", f"ex04v_{tag}"


def variant_sources(name: str) -> dict:
    """The variant's files that differ from the solution's: {file name: text}."""
    settings = VARIANTS[name][2]
    ops_ns, cxx_ns = namespaces(name)
    files = {}
    for f in (KERNELS, CPP, "reduce_sum.h"):
        text = (SRC / f).read_text()
        text = re.sub(r"\bex04\b", cxx_ns, text)       # namespace ex04 / ex04::
        text = text.replace("ex04_cuda", ops_ns)        # TORCH_LIBRARY(ex04_cuda, ...)
        files[f] = text
    if settings is not None:
        text = files[KERNELS]
        for old, new, count in PATCHES:
            text = replace_exactly(text, old, new, count, KERNELS)
        consts = {k: v for k, v in settings.items() if k != "min_blocks"}
        text = set_constants(text, consts)
        if settings.get("min_blocks"):
            text = replace_exactly(
                text, "__global__ void __launch_bounds__(kThreads)\npartial_sums_kernel(",
                # the long-chunk (graded) instantiation only; 0 leaves the others as without a
                # minimum (1 would not: ptxas then gives the rows kernel 64 registers, not 32)
                f"__global__ void __launch_bounds__(kThreads, kUnroll == kUnrollDeep ? "
                f"{settings['min_blocks']} : 0)\npartial_sums_kernel(", 1, KERNELS)
        files[KERNELS] = text
        if settings.get("kLastBlock") == 1:
            files[CPP] = replace_exactly(files[CPP], *CPP_TICKETS, 1, CPP)
    return files


def make_tree(name: str, base: Path) -> Path:
    """A copy of the solution's CUDA track as the variant: the tree's path."""
    tree = base / name
    dst = tree / EX / "cuda"
    dst.mkdir(parents=True, exist_ok=True)
    files = {f.name: f.read_text() for f in SRC.iterdir() if f.is_file()}
    files.update(variant_sources(name))
    for f, text in files.items():  # unchanged files keep their times: ninja rebuilds nothing
        path = dst / f
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
    return tree


# --- logging -----------------------------------------------------------------------------------

T0 = time.perf_counter()


class Log:
    def __init__(self, out: Path | None):
        self.file = open(out / "log.txt", "w") if out else None

    def __call__(self, msg: str = "", *, quiet: bool = False, stamp: bool = True):
        line = f"[{time.perf_counter() - T0:6.1f}s] {msg}" if stamp and msg else msg
        if not quiet:
            print(line, flush=True)
        if self.file:
            self.file.write(line + "\n")
            self.file.flush()


# --- without a GPU: ptxas registers ------------------------------------------------------------

def blocks_per_sm(regs: int, threads: int = 256, smem: int = 1024) -> int:
    """Blocks of `threads` an H100/H200 SM holds at `regs` registers a thread (64K registers,
    allocated per warp in units of 256; 64 warps, 32 blocks, 228 KB of shared memory)."""
    per_warp = -(-regs * 32 // 256) * 256
    warps = threads // 32
    by_regs = (65536 // per_warp) // warps
    return min(by_regs, 64 // warps, 32, (228 * 1024) // (smem + 1024))


def nvcc_report(names, base: Path, log: Log, jobs: int):
    """nvcc -c of each variant's .cu as grader/build.py compiles it (-O3 -lineinfo, sm_90,
    common.cuh on the include path) with -Xptxas -v: registers, spills and the blocks per SM
    they allow, for the graded kernel (float, 16-byte vectors, kUnrollDeep) and the rows one
    (bf16, 16-byte vectors, kUnroll = 4)."""
    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"

    def one(name):
        tree = make_tree(name, base)
        src = tree / EX / "cuda" / KERNELS
        out = subprocess.run([nvcc, "-O3", "-lineinfo", "-std=c++17", "-arch=sm_90", "-Xptxas",
                              "-v", "-I", str(ROOT / "include"), "-c", str(src), "-o",
                              str(tree / "k.o")], capture_output=True, text=True)
        return name, out

    settings_of = lambda n: VARIANTS[n][2] or {}
    with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
        for name, out in pool.map(one, names):
            if out.returncode:
                log(f"{name}: nvcc failed\n{out.stderr[-2000:]}")
                continue
            deep = int(settings_of(name).get("kUnrollDeep", 8))
            want = int(settings_of(name).get("kBlocksPerSm", 4))
            found, current, spill = {}, None, 0
            for line in out.stderr.splitlines():
                m = re.search(r"Compiling entry function '(\S+)'", line)
                if m:
                    current, spill = m.group(1), 0
                m = re.search(r"(\d+) bytes spill stores", line)
                if m:
                    spill = int(m.group(1))
                m = re.search(r"Used (\d+) registers", line)
                if m and current:
                    found[current] = (int(m.group(1)), spill)
            parts = []
            for label, pat in (("graded f32<4,%d>" % deep, rf"partial_sums_kernelIfLi4ELi{deep}E"),
                               ("rows bf16<8,4>", r"partial_sums_kernelI13__nv_bfloat16Li8ELi4E")):
                hit = [v for k, v in found.items() if re.search(pat, k)]
                if hit:
                    regs, sp = hit[0]
                    parts.append(f"{label}: {regs} regs{f', spills {sp} B' if sp else ''}, "
                                 f"{blocks_per_sm(regs)} blocks/SM fit")
            log(f"{name:26s} kBlocksPerSm {want}; " + "; ".join(parts), stamp=False)


# --- builds --------------------------------------------------------------------------------------

def child_build(tree: Path):
    sys.path.insert(0, str(ROOT))
    from grader.build import build
    from grader.discover import discover
    ex = discover(only="04")[0]
    built = build(tree, ex, ex.tracks["cuda"])
    print(json.dumps({"so": str(built.path), "built_s": round(built.seconds, 1)}), flush=True)


def child_env(base: Path) -> dict:
    # the builds of the temporary trees go under `base` (removed at the end), not .cache/
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]), "GRADER_CACHE": str(base / "cache")}


def build_all(names, base: Path, log: Log, jobs: int) -> dict:
    """Every variant's tree, built `jobs` at a time, each in a process of its own (the build also
    loads the library): {name: (.so path or None, error)}."""
    trees = {n: make_tree(n, base) for n in names}
    cores = os.cpu_count() or 2
    env = {**child_env(base), "MAX_JOBS": os.environ.get("MAX_JOBS", str(max(1, cores // jobs)))}
    log(f"building {len(names)} variants, {jobs} at a time (MAX_JOBS={env['MAX_JOBS']} each)")

    def one(name):
        start = time.perf_counter()
        out = subprocess.run([sys.executable, __file__, "--child", "build", str(trees[name])],
                             capture_output=True, text=True, env=env, cwd=ROOT)
        lines = [l for l in out.stdout.splitlines() if l.startswith("{")]
        if out.returncode or not lines:
            err = (out.stderr or out.stdout)[-3000:]
            log(f"  {name}: BUILD FAILED ({time.perf_counter() - start:.0f} s)\n{err}")
            return name, None, err
        log(f"  built {name} ({time.perf_counter() - start:.0f} s)")
        return name, json.loads(lines[-1])["so"], None

    with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
        results = list(pool.map(one, names))
    ok = sum(so is not None for _, so, _ in results)
    log(f"built {ok} of {len(names)} variants")
    return {n: (so, err) for n, so, err in results}


# --- on the GPU: one process checks and times every variant ------------------------------------

def child_run(spec_file: Path):
    spec = json.loads(spec_file.read_text())
    sys.path.insert(0, str(ROOT))
    sys.path.insert(0, str(ROOT / "exercises" / EX))
    import torch
    import reference as ref
    from grader.testing import sum_bound

    # --cpu-smoke: the same process on the ops' CPU path with small inputs, to test this script
    # where there is no GPU (it says nothing about the kernels or their speed)
    smoke = spec.get("smoke", False)
    dev = "cpu" if smoke else "cuda"
    flat_case = {"n": 1 << 20} if smoke else FLAT_CASE
    rows_case = {"M": 64, "N": 8192} if smoke else ROWS_CASE
    if smoke:
        def time_fn(fn):
            fn()
            ts = []
            for _ in range(5):
                t0 = time.perf_counter()
                fn()
                ts.append((time.perf_counter() - t0) * 1e3)
            ts.sort()
            return {"ms": ts[2], "p20": ts[1], "p80": ts[3]}

        def read():
            return float("nan")

        sync = empty_cache = lambda: None
        device_name, triton_version, sms = "cpu (smoke test)", "-", 0
    else:
        import triton
        from grader.timing import CEILINGS, time_fn
        read = CEILINGS["read_bandwidth"].measure  # the grader's read ceiling, measured here
        sync, empty_cache = torch.cuda.synchronize, torch.cuda.empty_cache
        device_name, triton_version = torch.cuda.get_device_name(), triton.__version__
        sms = torch.cuda.get_device_properties(0).multi_processor_count

    def emit(**kw):
        print(json.dumps(kw), flush=True)

    ops = {}
    for v in spec["variants"]:
        torch.ops.load_library(v["so"])
        ns = getattr(torch.ops, v["ns"])
        ops[v["name"]] = (ns.reduce_sum, ns.reduce_sum_rows)
    g = torch.Generator(device=dev).manual_seed(0)
    x = ref.bench_inputs(flat_case, torch.float32, dev, g)[0]
    xr = ref.bench_inputs_rows(rows_case, torch.bfloat16, dev, g)[0]
    flat_bytes = ref.traffic(flat_case, torch.float32, "forward")["bytes"]
    rows_bytes = ref.traffic_rows(rows_case, torch.bfloat16, "forward")["bytes"]
    emit(event="device", device=device_name, torch=torch.__version__, triton=triton_version,
         sms=sms, flat_bytes=flat_bytes, rows_bytes=rows_bytes,
         flat_label=f"reduce_sum of {flat_case['n']} fp32",
         rows_label=f"reduce_sum_rows of ({rows_case['M']}, {rows_case['N']}) bf16")
    xd = x.double()
    flat_want, flat_abs = xd.sum(), xd.abs().sum()
    del xd
    xrd = xr.double()
    rows_want, rows_abs = xrd.sum(-1), xrd.abs().sum(-1)
    del xrd
    empty_cache()

    def bits(t):
        return t.detach().cpu().contiguous().numpy().tobytes()

    def randn(shape, seed, dtype):
        gen = torch.Generator(device=dev).manual_seed(seed)
        return torch.randn(shape, generator=gen, device=dev, dtype=torch.float32).to(dtype)

    def case(what, rows, x_in, want=None, abs_sum=None):
        """An input and its float64 sums, with the exercise's bound (grader.testing.sum_bound,
        as test_reduce_sum.py applies it), computed once for every variant."""
        acc = torch.float64 if x_in.dtype == torch.float64 else torch.float32
        if want is None:
            xd = x_in.double()
            want, abs_sum = (xd.sum(-1), xd.abs().sum(-1)) if rows else (xd.sum(), xd.abs().sum())
        n = x_in.shape[-1] if rows else x_in.numel()
        bound = torch.tensor([sum_bound(a, n, acc=acc) for a in abs_sum.reshape(-1).tolist()],
                             dtype=torch.float64)
        return {"what": what, "rows": rows, "x": x_in, "want": want.cpu(), "bound": bound,
                "acc": acc}

    def within(got, c, fails: list):
        if got.dtype != c["acc"]:
            fails.append(f"{c['what']}: dtype {got.dtype}, expected {c['acc']}")
            return
        if tuple(got.shape) != tuple(c["want"].shape):
            fails.append(f"{c['what']}: shape {tuple(got.shape)}, "
                         f"expected {tuple(c['want'].shape)}")
            return
        g, w = got.detach().double().reshape(-1).cpu(), c["want"].reshape(-1)
        err = (g - w).abs()
        bad = ~(err <= c["bound"])  # NaN is bad
        if bool(bad.any()):
            i = int(bad.nonzero()[0])
            fails.append(f"{c['what']}: {int(bad.sum())} of {err.numel()} off (first: element "
                         f"{i}: got {float(g[i]):.9g}, want {float(w[i]):.9g}, bound "
                         f"{float(c['bound'][i]):.3g})")

    cases = []  # the exercise's awkward inputs, for every dtype (GPU sizes)
    for dt in (torch.float32, torch.float16, torch.bfloat16, torch.float64):
        for i, n in enumerate([0, 1, 7, 8, 9, 4099, 65537, 1_000_003, (1 << 22) + 5, 16_777_259]):
            cases.append(case(f"reduce_sum({n}, {dt})", False, randn(n, 10 + i, dt)))
        cases.append(case(f"reduce_sum(0-d, {dt})", False, randn((), 9, dt)))
        cases.append(case(f"reduce_sum((0, 5), {dt})", False, randn((0, 5), 9, dt)))
        for i, shape in enumerate([(1, 1), (5, 1), (1, 65537), (3, 0), (0, 4), (129, 8),
                                   (7, 4099), (8, (1 << 20) + 3), (33, (1 << 20) + 3),
                                   (3, 5_000_011)]):
            cases.append(case(f"reduce_sum_rows({shape}, {dt})", True, randn(shape, 40 + i, dt)))
        for n in (65537, (1 << 22) + 1):  # misaligned views: base[1:]
            cases.append(case(f"reduce_sum(base[1:] of {n}, {dt})", False,
                              randn(n + 1, 5, dt)[1:]))
        cases.append(case(f"reduce_sum_rows(base[1:].view(7, 1000), {dt})", True,
                          randn(7 * 1000 + 1, 6, dt)[1:].view(7, 1000)))
    for dt in (torch.float16, torch.bfloat16):  # all positive: float32 accumulators needed
        for n in (4099, 65537, (1 << 20) + 7):
            cases.append(case(f"reduce_sum(1.7 x {n}, {dt})", False,
                              torch.full((n,), 1.7, dtype=dt, device=dev)))
        cases.append(case(f"reduce_sum_rows(1.7 x (33, 2^20 + 3), {dt})", True,
                          torch.full((33, (1 << 20) + 3), 1.7, dtype=dt, device=dev)))
    graded = case("reduce_sum(graded 2^28 fp32)", False, x, flat_want, flat_abs)
    bench_rows = case("reduce_sum_rows(bench (32768, 8192) bf16)", True, xr, rows_want, rows_abs)
    det_flat = [randn((1 << 24) + 3, 77, dt) for dt in (torch.float32, torch.bfloat16)]
    det_rows = [randn((8, (1 << 20) + 3), 77, dt) for dt in (torch.float32, torch.bfloat16)]
    seq_inputs = [randn((8, (1 << 20) + 3), 78, torch.float32), randn(4099, 79, torch.float32),
                  randn((1 << 24) + 3, 80, torch.bfloat16), randn((33, 65537), 81, torch.bfloat16)]

    def check(name) -> dict:
        rs, rr = ops[name]
        fails, det = [], []
        for c in cases:
            within((rr if c["rows"] else rs)(c["x"]), c, fails)
        first_flat = rs(x)
        within(first_flat, graded, fails)
        first_rows = rr(xr)
        within(first_rows, bench_rows, fails)
        # the same bits over 10 calls
        det_inputs = [("graded", rs, x), ("rows bench", rr, xr)]
        det_inputs += [(f"2^24+3 {t.dtype}", rs, t) for t in det_flat]
        det_inputs += [(f"(8, 2^20+3) {t.dtype}", rr, t) for t in det_rows]
        for what, f, xi in det_inputs:
            distinct = len({bits(f(xi)) for _ in range(10)})
            det.append(distinct)
            if distinct != 1:
                fails.append(f"{what}: {distinct} distinct results in 10 calls")
        # calls of different shapes back to back, no sync between: the tickets must be 0 again
        seq = [(rs, x), (rr, seq_inputs[0]), (rs, seq_inputs[1]), (rs, seq_inputs[2]),
               (rr, seq_inputs[3]), (rr, xr)]
        alone = []
        for f, xi in seq:
            alone.append(bits(f(xi)))
            sync()
        outs = [f(xi) for _ in range(3) for f, xi in seq]
        sync()
        if [bits(o) for o in outs] != alone * 3:
            fails.append("back-to-back calls of different shapes: other bits than alone")
        # 4 streams at once
        if smoke:
            return {"fails": fails, "det": max(det), "flat_bits": bits(first_flat).hex(),
                    "flat_value": float(first_flat)}
        streams = [torch.cuda.Stream() for _ in range(4)]
        cur = torch.cuda.current_stream()
        outs = []
        for _ in range(3):
            for k, s in enumerate(streams):
                s.wait_stream(cur)
                with torch.cuda.stream(s):
                    f, xi = seq[k]
                    outs.append((k, f(xi)))
        torch.cuda.synchronize()
        if any(bits(o) != alone[k] for k, o in outs):
            fails.append("4 streams at once: other bits than alone")
        return {"fails": fails, "det": max(det), "flat_bits": bits(first_flat).hex(),
                "flat_value": float(first_flat),
                "rows_sha1": hashlib.sha1(bits(first_rows)).hexdigest()[:16]}

    for name in spec["variants_to_check"]:
        emit(event="check_start", name=name)
        try:
            r = check(name)
        except RuntimeError as e:  # torch.AcceleratorError (a CUDA fault) is one too
            if "CUDA" in str(e):
                emit(event="check", name=name, fatal=True, fails=[f"CUDA error: {e}"[:300]], det=0)
                raise SystemExit(3)
            r = {"fails": [f"raised: {str(e)[:300]}"], "det": 0}
        emit(event="check", name=name, **r)
        empty_cache()

    eager, eager_rows = ref.reference, ref.reference_rows
    entries = [("torch.sum", eager, eager_rows)]
    if spec.get("compile"):
        entries.append(("torch.compile", torch.compile(eager, dynamic=False),
                        torch.compile(eager_rows, dynamic=False)))
    entries += [(v["name"], *ops[v["name"]]) for v in spec["variants"]]
    round_s = 0.0
    for rnd in range(spec["rounds"]):
        if rnd and time.time() + round_s > spec["deadline"]:  # --budget: no time for another
            emit(event="stop", round=rnd, round_s=round_s)
            break
        started = time.time()
        empty_cache()
        emit(event="ceiling", round=rnd, read_gbs=read())
        k = (rnd * 3) % len(entries)  # rotate: every entry meets other neighbours each round
        for name, f, fr in entries[k:] + entries[:k]:
            emit(event="time_start", name=name, round=rnd)
            t = time_fn(lambda: f(x))
            tr = time_fn(lambda: fr(xr))
            emit(event="time", name=name, round=rnd, flat_us=t["ms"] * 1e3,
                 flat_p20=t["p20"] * 1e3, flat_p80=t["p80"] * 1e3, rows_us=tr["ms"] * 1e3,
                 rows_p20=tr["p20"] * 1e3, rows_p80=tr["p80"] * 1e3,
                 flat_gbs=flat_bytes / (t["ms"] * 1e-3) / 1e9,
                 rows_gbs=rows_bytes / (tr["ms"] * 1e-3) / 1e9)
        round_s = time.time() - started
    emit(event="done")


def run_gpu(built: dict, base: Path, log: Log, rounds: int, compile_: bool,
            smoke: bool = False, budget: float = 175.0) -> tuple[dict, list]:
    """The checking and timing process; restarted without a variant that crashed it."""
    variants = [{"name": n, "so": so, "ns": namespaces(n)[0]} for n, (so, _) in built.items() if so]
    checks, times, meta, failed = {}, [], {}, {}
    for attempt in range(4):
        live = [v for v in variants if v["name"] not in failed]
        spec = {"variants": live, "rounds": rounds, "compile": compile_, "smoke": smoke,
                "deadline": time.time() + budget - (time.perf_counter() - T0),
                "variants_to_check": [v["name"] for v in live if v["name"] not in checks]}
        spec_file = base / f"spec{attempt}.json"
        spec_file.write_text(json.dumps(spec))
        stderr_file = base / f"child{attempt}.stderr"
        attempt_times, current = [], None
        with open(stderr_file, "w") as err:
            proc = subprocess.Popen([sys.executable, __file__, "--child", "run", str(spec_file)],
                                    stdout=subprocess.PIPE, stderr=err, text=True,
                                    env=child_env(base), cwd=ROOT)
            for line in proc.stdout:
                line = line.rstrip("\n")
                if not line.startswith("{"):
                    log(f"  | {line}", quiet=True)
                    continue
                ev = json.loads(line)
                kind = ev.pop("event")
                if kind == "device":
                    meta.update(ev)
                    log(f"device: {ev['device']} ({ev['sms']} SMs), torch {ev['torch']}, "
                        f"triton {ev['triton']}")
                elif kind == "check_start":
                    current = ev["name"]
                elif kind == "check":
                    current = None
                    checks[ev["name"]] = ev
                    status = "ok" if not ev["fails"] else f"FAIL ({len(ev['fails'])})"
                    log(f"checked {ev['name']}: {status}, distinct results in 10 calls: "
                        f"{ev['det']}" + (f", graded sum {ev['flat_value']:.9g}"
                                          if "flat_value" in ev else ""))
                    for fail in ev["fails"][:6]:
                        log(f"    {fail}")
                elif kind == "ceiling":
                    meta.setdefault("read", []).append(ev["read_gbs"])
                    log(f"round {ev['round'] + 1}/{rounds}: read ceiling {ev['read_gbs']:.0f} GB/s")
                elif kind == "stop":
                    log(f"stopping after {ev['round']} of {rounds} rounds: another (~"
                        f"{ev['round_s']:.0f} s) would pass --budget")
                elif kind == "time_start":
                    current = ev["name"]
                elif kind == "time":
                    current = None
                    attempt_times.append(ev)
                    log(f"  {ev['name']:26s} flat {ev['flat_us']:6.1f} us ({ev['flat_p20']:.1f}-"
                        f"{ev['flat_p80']:.1f})  rows {ev['rows_us']:6.1f} us "
                        f"({ev['rows_p20']:.1f}-{ev['rows_p80']:.1f})")
            rc = proc.wait()
        tail = stderr_file.read_text()
        log(tail, quiet=True, stamp=False)
        if rc == 0:
            times = attempt_times
            break
        log(f"the checking/timing process stopped (exit {rc}) during {current or '?'}:\n"
            f"{tail[-2000:]}")
        if current is None or current in failed or current == "torch.sum":
            break
        failed[current] = f"crashed the process (exit {rc}): see the log"
        log(f"running again without {current}")
    for name, why in failed.items():
        checks.setdefault(name, {"fails": [why], "det": 0})
        checks[name]["fails"].append(why) if why not in checks[name]["fails"] else None
    return {"checks": checks, "meta": meta, "failed": failed}, times


def table(result: dict, times: list, names: list, log: Log, build_failed=frozenset()) -> list:
    checks, meta = result["checks"], result["meta"]
    read = statistics.median(meta["read"]) if meta.get("read") else float("nan")
    by = {}
    for t in times:
        by.setdefault(t["name"], []).append(t)
    rows_out = []
    med = lambda ts, k: statistics.median(t[k] for t in ts)
    torch_flat = med(by["torch.sum"], "flat_us") if "torch.sum" in by else float("nan")
    torch_rows = med(by["torch.sum"], "rows_us") if "torch.sum" in by else float("nan")
    sol_bits = checks.get("solution", {}).get("flat_bits")
    flat_bytes, rows_bytes = meta.get("flat_bytes", 1), meta.get("rows_bytes", 1)
    order = ["torch.sum", "torch.compile"] + names
    for name in order:
        if name not in by:
            if name in names:
                why = ("build failed" if name in build_failed else
                       "; ".join(checks.get(name, {}).get("fails", []))[:80] or "not timed")
                rows_out.append({"name": name, "missing": True, "check": why})
            continue
        ts = by[name]
        f_us, r_us = med(ts, "flat_us"), med(ts, "rows_us")
        c = checks.get(name)
        rows_out.append({
            "name": name, "flat_us": f_us, "flat_min": min(t["flat_us"] for t in ts),
            "flat_max": max(t["flat_us"] for t in ts), "flat_gbs": flat_bytes / f_us / 1e3,
            "flat_read": flat_bytes / f_us / 1e3 / read, "x_torch": torch_flat / f_us,
            "rows_us": r_us, "rows_gbs": rows_bytes / r_us / 1e3,
            "rows_read": rows_bytes / r_us / 1e3 / read, "x_eager_rows": torch_rows / r_us,
            "det": c["det"] if c else None,
            "check": ("ok" if not c["fails"] else f"FAIL {len(c['fails'])}") if c else "-",
            "same_bits": (c.get("flat_bits") == sol_bits) if c and sol_bits and "flat_bits" in c
            else None,
        })
    log()
    log(f"{meta.get('flat_label', '?')} ({flat_bytes / 1e9:.3f} GB) and "
        f"{meta.get('rows_label', '?')} ({rows_bytes / 1e9:.3f} GB) on "
        f"{meta.get('device', '?')}; read ceiling {read:.0f} GB/s (median of "
        f"{len(meta.get('read', []))} rounds); medians over the rounds", stamp=False)
    head = (f"{'variant':26s} {'flat us':>7s} {'min-max':>11s} {'GB/s':>5s} {'/read':>6s} "
            f"{'x torch':>7s} | {'rows us':>7s} {'/read':>6s} {'x eager':>7s} | det =sol check")
    log(head, stamp=False)
    log("-" * len(head), stamp=False)
    for r in rows_out:
        if r.get("missing"):
            log(f"{r['name']:26s} {'-':>7s} (not timed: {r['check']})", stamp=False)
            continue
        same = {True: "yes", False: "no", None: "-"}[r["same_bits"]]
        det = "-" if r["det"] is None else str(r["det"])
        log(f"{r['name']:26s} {r['flat_us']:7.1f} {r['flat_min']:5.1f}-{r['flat_max']:5.1f} "
            f"{r['flat_gbs']:5.0f} {r['flat_read']:6.1%} {r['x_torch']:7.3f} | "
            f"{r['rows_us']:7.1f} {r['rows_read']:6.1%} {r['x_eager_rows']:7.3f} | "
            f"{det:>3s} {same:>4s} {r['check']}", stamp=False)
    return rows_out


def main():
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        if sys.argv[2] == "build":
            child_build(Path(sys.argv[3]))
        else:
            child_run(Path(sys.argv[3]))
        return
    p = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()),
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", help="comma-separated variant names (default: all; the solution is "
                                  "always added)")
    p.add_argument("--out", type=Path, help="folder for log.txt, results.json and the variants' "
                                            "kernels files")
    p.add_argument("--rounds", type=int, default=3, help="timing rounds (default 3)")
    p.add_argument("--budget", type=float, default=175.0,
                   help="seconds for the whole run: no timing round starts that would end past "
                        "it (the first always runs; default 175)")
    p.add_argument("--jobs", type=int, default=0,
                   help="builds at a time (default: half the cores, at least 1)")
    p.add_argument("--compile", action="store_true",
                   help="also time torch.compile of both cases (~20-40 s more)")
    p.add_argument("--build-only", action="store_true", help="only the builds (no GPU needed)")
    p.add_argument("--nvcc", action="store_true",
                   help="no GPU: ptxas registers and spills of every variant's graded kernel")
    p.add_argument("--keep", action="store_true", help="keep the temporary trees and builds")
    p.add_argument("--workdir", type=Path, help="build the trees under this folder and keep it "
                                                "(a second run rebuilds only what changed)")
    p.add_argument("--cpu-smoke", action="store_true",
                   help="no GPU: run the checking/timing process on the ops' CPU path with small "
                        "inputs (tests this script only: no kernel runs)")
    p.add_argument("--list", action="store_true", help="the variants and their predictions")
    a = p.parse_args()
    names = a.only.split(",") if a.only else list(VARIANTS)
    unknown = [n for n in names if n not in VARIANTS]
    if unknown:
        p.error(f"unknown variant(s) {unknown}; known: {', '.join(VARIANTS)}")
    if "solution" not in names:
        names.insert(0, "solution")
    if a.list:
        for n in names:
            print(f"{n:26s} {VARIANTS[n][0]}\n{'':26s} predicted: {VARIANTS[n][1]}")
        return
    cores = os.cpu_count() or 2
    jobs = a.jobs or max(1, cores // 2)
    if a.out:
        a.out.mkdir(parents=True, exist_ok=True)
        (a.out / "variants").mkdir(exist_ok=True)
        for n in names:  # the record: each variant's kernels file (and .cpp when it changes)
            files = variant_sources(n)
            (a.out / "variants" / f"{n}.cu").write_text(files[KERNELS])
            if (VARIANTS[n][2] or {}).get("kLastBlock") == 1:
                (a.out / "variants" / f"{n}.cpp").write_text(files[CPP])
    log = Log(a.out)
    log(f"04_variants: {len(names)} variants: {', '.join(names)}")
    for n in names:
        log(f"  {n:26s} {VARIANTS[n][0]}; predicted: {VARIANTS[n][1]}", quiet=True)
    if a.workdir:
        a.workdir.mkdir(parents=True, exist_ok=True)
        base, a.keep = a.workdir.resolve(), True
    else:
        base = Path(tempfile.mkdtemp(prefix="ex04-variants-"))
    log(f"working folder {base} ({'kept' if a.keep else 'removed at the end'})")
    try:
        if a.nvcc:
            nvcc_report(names, base, log, jobs)
            return
        built = build_all(names, base, log, jobs)
        if a.build_only:
            if any(so is None for so, _ in built.values()):
                sys.exit(1)
            return
        import torch  # only the GPU path needs it here
        if not torch.cuda.is_available() and not a.cpu_smoke:
            sys.exit("no GPU: use --build-only, --nvcc or --cpu-smoke here")
        result, times = run_gpu(built, base, log, a.rounds, a.compile, smoke=a.cpu_smoke,
                                budget=a.budget)
        log(f"done in {time.perf_counter() - T0:.0f} s" + (f"; log and results.json in {a.out}"
                                                         if a.out else ""))
        rows = table(result, times, names, log,
                     build_failed={n for n in names if built[n][0] is None})
        if a.out:
            (a.out / "results.json").write_text(json.dumps(
                {"table": rows, "times": times, "checks": result["checks"],
                 "meta": result["meta"], "failed": result["failed"],
                 "variants": {n: {"what": VARIANTS[n][0], "predicted": VARIANTS[n][1],
                                  "settings": VARIANTS[n][2]} for n in names}}, indent=1))
    finally:
        if not a.keep:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
