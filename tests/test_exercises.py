"""Every solution passes every check this machine can run; every starter builds and scores 0.

On a machine without a GPU, CUDA checks are reported as "needs a GPU" (never as passed); on a
GPU machine none may be left unrun.
"""
import pytest

from grader.common.discover import discover
from grader.run.grade import grade_track
from grader.common.paths import ROOT
from grader.common.settings import from_environment
from grader.run.score import score

from conftest import HAS_GPU

TRACKS = [pytest.param(ex, t, id=f"{ex.id}-{t.name}") for ex in discover() for t in ex.tracks.values()]


@pytest.mark.parametrize("ex, track", TRACKS)
def test_solution_passes(ex, track):
    r = grade_track(ROOT / "solutions", ex, track)
    assert r.build.get("ok"), r.build.get("message")
    assert not r.ended, f"{r.ended}\n{r.log_tail}"
    bad = [f"{c.name}: {c.outcome}: {c.message[:1500]}" for c in r.checks
           if c.outcome not in ("passed", "needs a GPU")]
    assert not bad, "\n\n".join(bad)
    gpu_only = not HAS_GPU and all(c.outcome == "needs a GPU" for c in r.checks)
    assert r.count("correctness", "passed") > 0 or gpu_only, "no check could run here"
    if not track.sources:  # a Triton track: its checks compile no more than the exercise says
        made = (r.times.get("compiles") or {}).get("specializations")
        assert track.specializations is not None, f"{ex.id}: declare `specializations`"
        assert made is not None and made <= track.specializations, (
            f"the checks compiled {made} Triton specializations, the exercise declares at most "
            f"{track.specializations}: {r.times.get('compiles')}")
    if HAS_GPU:
        assert not [c.name for c in r.checks if c.outcome == "needs a GPU"]
    elif track.sources:
        # the CUDA kernels did not run here: their checks say so, and are not passed
        assert r.count("correctness", "needs a GPU") > 0


@pytest.mark.parametrize("ex, track", TRACKS)
def test_starter_builds_and_scores_zero(ex, track):
    # built and run in full, not answered from its unchanged files (grader.common.pristine)
    r = grade_track(ROOT / "starter", ex, track,
                    settings=from_environment().replace(build_starters=True))
    assert r.build.get("ok"), r.build.get("message")
    assert not r.ended, f"{r.ended}\n{r.log_tail}"
    # a track without a CPU path has nothing to run on a machine without a GPU: it builds, and
    # every check says so
    gpu_only = not HAS_GPU and all(c.outcome == "needs a GPU" for c in r.checks)
    assert r.not_implemented or gpu_only, [(c.name, c.outcome, c.message[:300]) for c in r.checks]
    assert score(ex, r).total == 0
