"""Known-bad submissions of exercise 04 (reduce_sum): each is caught, with the right reason.

Made from the solution by small text edits (conftest.variant), so they stay in step with it. The
kernels are CUDA: every variant here needs a GPU (marked `gpu`: skipped, not built, on a CPU
machine, where the track's CPU path would pass anyway).
"""
import pytest

from grader.discover import discover
from grader.grade import grade_track

EX04 = discover(only="04")[0]
EX, TRACK, KERNELS = "04_reduce_sum", "cuda", "reduce_sum_kernels.cu"
VALUE_CHECKS = ("test_sum_matches_reference", "test_rows_match_reference", "test_awkward_sizes",
                "test_misaligned_view", "test_all_positive_needs_float32_accumulators",
                "test_deterministic_over_ten_calls", "test_sum_past_int32_indexing",
                "test_rows_past_int32_indexing", "test_torch_compile_without_graph_breaks")

pytestmark = pytest.mark.gpu


@pytest.fixture(autouse=True)
def _fewer_examples(monkeypatch):
    monkeypatch.setenv("CI", "1")  # 8 derandomized hypothesis examples per property


def grade(tree):
    return grade_track(tree, EX04, EX04.tracks[TRACK])


def failed(result):
    """check name (without parameters) -> the failure messages of its failed instances."""
    out = {}
    for c in result.checks:
        if c.outcome == "failed":
            out.setdefault(c.name.split("[")[0], []).append(c.message)
    return out


def test_fp16_accumulation(variant):
    """Running sums rounded to the input's 16-bit type after every add, as `at::Half acc` does."""
    round16 = ("#include <algorithm>\n\n"
               "__device__ __forceinline__ float round16(const __half*, float v) {\n"
               "  return __half2float(__float2half_rn(v));\n}\n"
               "__device__ __forceinline__ float round16(const __nv_bfloat16*, float v) {\n"
               "  return __bfloat162float(__float2bfloat16_rn(v));\n}\n"
               "template <typename P, typename A>\n"
               "__device__ __forceinline__ A round16(const P*, A v) { return v; }\n")
    r = grade(variant(EX, TRACK, {KERNELS: [
        ("#include <algorithm>\n", round16),
        ("acc[u] += widen(v[u].v[k]);", "acc[u] = round16(x, acc[u] + widen(v[u].v[k]));"),
        ("acc[0] += widen(v.v[k]);", "acc[0] = round16(x, acc[0] + widen(v.v[k]));"),
    ]}))
    assert r.build.get("ok"), r.build
    f = failed(r)
    msgs = f.get("test_all_positive_needs_float32_accumulators", [])
    assert msgs, sorted(f)
    assert any("widen each element to float32" in m for m in msgs), msgs[0]
    # wrong, but the same wrong every time: never reported as non-deterministic
    assert not any("is not deterministic" in m for m in f.get("test_deterministic_over_ten_calls",
                                                               [])), f


def test_missing_syncthreads(variant):
    """The block reduction reads its neighbours' slots before they are written."""
    r = grade(variant(EX, TRACK, {KERNELS: [
        ("  __syncthreads();  // every thread's value is in smem before any thread reads another's\n",
         ""),
    ]}))
    assert r.build.get("ok"), r.build
    f = failed(r)
    caught = {name: m for name, m in f.items() if name in VALUE_CHECKS}
    assert caught, sorted(f)
    text = "\n".join(m for ms in caught.values() for m in ms)
    assert "sums are off" in text or "not deterministic" in text, text[:2000]


def test_atomic_add_is_not_deterministic(variant):
    """Every block atomicAdds its total into the result: right within rounding, but the bits
    follow the order in which blocks finish, which changes from call to call."""
    r = grade(variant(EX, TRACK, {KERNELS: [
        ("  typename Out<T>::type* dst = splits == 1 ? out : partials;  // one value per block\n",
         "  CUDA_CHECK(cudaMemsetAsync(out, 0, rows * sizeof(*out), stream));\n"
         "  typename Out<T>::type* dst = out;  // every block adds into out\n"),
        ("  if (threadIdx.x == 0) dst[blockIdx.x] = total;",
         "  if (threadIdx.x == 0) atomicAdd(&dst[blockIdx.x / splits], total);"),
        ("  if (splits > 1) {\n    finish_kernel", "  if (false) {\n    finish_kernel"),
    ]}))
    assert r.build.get("ok"), r.build
    f = failed(r)
    msgs = f.get("test_deterministic_over_ten_calls", [])
    assert msgs, sorted(f)
    assert all("is not deterministic" in m and "atomicAdd" in m for m in msgs), msgs[0]
    # the values themselves are right: only the bits move
    assert "test_sum_matches_reference" not in f and "test_rows_match_reference" not in f, sorted(f)


def test_grid_misses_the_tail(variant):
    """Whole tiles only: no block takes the part of a tile at the end of a row, so the blocks
    together stop short of its end (the chunked first version's form of it: chunks rounded down
    instead of up)."""
    r = grade(variant(EX, TRACK, {KERNELS: [
        ("  if (s == full % splits) {", "  if (false) {"),
    ]}))
    assert r.build.get("ok"), r.build
    f = failed(r)
    msgs = f.get("test_awkward_sizes", [])
    assert msgs, sorted(f)
    assert any("elements missed" in m for m in msgs), msgs[0]
