"""`make exercise-NN PROFILE=1` (grader.tools.profile): ncu's raw CSV read into the per-kernel lines a
learner gets, the one-line readings, and the message where ncu is not installed. The ncu run
itself needs a GPU (tests marked gpu)."""
import subprocess
import sys

import pytest

from conftest import ROOT
from grader.tools.profile import find_ncu, parse_csv, read_kernel, reading, report

COLUMNS = ["ID", "Kernel Name", "gpu__time_duration.sum",
           "dram__throughput.avg.pct_of_peak_sustained_elapsed",
           "sm__throughput.avg.pct_of_peak_sustained_elapsed",
           "sm__warps_active.avg.pct_of_peak_sustained_active",
           "sm__maximum_warps_per_active_cycle_pct", "launch__registers_per_thread",
           "launch__block_size", "launch__shared_mem_per_block_static",
           "launch__shared_mem_per_block_dynamic", "launch__occupancy_limit_registers",
           "launch__occupancy_limit_shared_mem", "launch__occupancy_limit_warps",
           "launch__occupancy_limit_blocks",
           "smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio",
           "smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio",
           "smsp__average_warps_issue_stalled_selected_per_issue_active.ratio"]


def _csv(*rows):
    line = lambda cells: ",".join(f'"{c}"' for c in cells)  # noqa: E731
    units = ["", "", "nsecond", "%", "%", "%", "%", "register/thread", "", "byte/block",
             "byte/block", "block", "block", "block", "block", "", "", ""]
    return "\n".join(["==PROF== Connected to process 1", line(COLUMNS), line(units)] +
                     [line(r) for r in rows] + ["==PROF== Disconnected"])


def test_a_streaming_kernel_and_a_register_limited_one():
    text = _csv(["0", "add_kernel", "731,000", "91.2", "20.1", "88.0", "100", "16", "1024", "0",
                 "0", "4", "8", "2", "32", "9.5", "0", "1.0"],
                ["1", "matmul_kernel", "4,100,000", "12.0", "31.0", "24.6", "25", "168", "256",
                 "0", "32768", "1", "3", "8", "32", "2.0", "6.5", "1.0"])
    k = [read_kernel(r) for r in parse_csv(text)]
    assert [x["name"] for x in k] == ["add_kernel", "matmul_kernel"]
    assert k[0]["us"] == pytest.approx(731.0) and k[1]["us"] == pytest.approx(4100.0)
    assert reading(k[0]) == "memory-bound at 91% of DRAM peak: little left"
    assert reading(k[1]) == ("latency-bound: occupancy 25%, limited by 168 registers per "
                             "thread; warps mostly wait on barrier")
    text = report(k)
    assert "duration 731.0 us; DRAM throughput 91.2% of peak; SM throughput 20.1% of peak" in text
    assert "occupancy 88.0% achieved of 100.0% theoretical\n" in text  # nothing limits it
    assert "24.6% achieved of 25.0% theoretical, limited by 168 registers per thread" in text
    assert "top warp stalls: barrier (__syncthreads / tl.debug_barrier) 6.5, long scoreboard" \
        in text and "selected" not in text.split("[1]")[1].replace("not selected", "")


@pytest.mark.skipif(find_ncu() is not None, reason="ncu is installed here")
def test_without_ncu_it_says_so():
    p = subprocess.run([sys.executable, "-m", "grader.tools.profile", "--exercise", "01", "--impl",
                        "solutions"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert p.returncode == 1 and "ncu is not installed here" in p.stdout, p.stdout + p.stderr
