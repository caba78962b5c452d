"""Known-bad submissions, declared beside their exercise: each is caught, with the right reason.

Every `exercises/NN_name/wrong/<name>.toml` is one bad submission, a wrong answer or a cheat:
the solution with a few changes, the settings its grade needs, and what must happen (the
schema: grader/common/known_bad.py). This module builds each one from today's solution
(conftest.make_variant), grades it through the grader's one path
(grader.run.grade.grade_track) and compares the result with the file's `expect`.

Every grade here takes hypothesis' "fixed" examples (Settings.examples: the same 6 every run),
so a red result is a real change and never noise.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from conftest import HAS_GPU, ROOT, make_variant, signal_fence
from grader.common.discover import discover, known_bad
from grader.common.known_bad import KnownBad, KnownBadError, load
from grader.common.paths import CACHE
from grader.run.grade import grade_track
from grader.run.launch import child_env
from grader.run.results import Check, TrackResult
from grader.run.score import Score, score
from grader.run.snapshot import Snapshot

EXERCISES = {ex.id: ex for ex in discover()}
DECLARED = sorted((ROOT / "exercises").glob("*/wrong/*.toml"))
DEVICE = "cuda" if HAS_GPU else "cpu"


def declaration(path: Path) -> KnownBad:
    return load(path, EXERCISES[path.parent.parent.name].tracks)


def build(kb: KnownBad, tree: Path) -> Path:
    return make_variant(tree, kb.exercise, kb.track, kb.edits, kb.files)


# --- comparing a grade with what was expected --------------------------------------------------

def _names(name: str, key: str, device: str = DEVICE) -> bool:
    """Whether `key` (a check, one instance, or an id's start) names the check `name`."""
    key = key.replace("{device}", device)
    return name == key or name.startswith(key + "[") or ("[" in key and name.startswith(key))


def _instances(result, key: str) -> list:
    return [c for c in result.checks if _names(c.name, key)]


def _holds(message: str, needle) -> bool:
    options = needle if isinstance(needle, list) else [needle]
    return any(message.startswith(n[1:]) if n.startswith("^") else n in message for n in options)


def _said(what: str, text: str, needles) -> list[str]:
    """`what` happened (text is what it said) and says every needle."""
    if not text:
        return [f"{what}: nothing (it should have happened)"]
    return [f"{what} lacks {n!r}: {text[-600:]!r}" for n in needles if not _holds(text, n)]


def _spec_problems(key: str, failed: list, spec) -> list[str]:
    spec = spec if isinstance(spec, dict) else {"each": spec}
    out = []
    for c in failed:
        missing = [n for n in spec.get("each", []) if not _holds(c.message, n)]
        if missing:
            out.append(f"{c.name}: the message lacks {missing}")
        present = [n for n in spec.get("lacks", []) if _holds(c.message, n)]
        if present:
            out.append(f"{c.name}: the message holds {present}, which it must not")
    anyof = spec.get("any", [])
    if anyof and not any(all(_holds(c.message, n) for n in anyof) for c in failed):
        out.append(f"{key}: no failed instance's message holds all of {anyof}")
    return out


def _check_problems(e: dict, result) -> list[str]:
    """What differs in the checks' outcomes."""
    out = []
    for key, outcome in (("failed", "failed"), ("crashed", "crashed"), ("if_failed", "failed")):
        for check, spec in e.get(key, {}).items():
            runs = _instances(result, check)
            hit = [c for c in runs if c.outcome == outcome]
            if not hit:
                if key != "if_failed":
                    out.append(f"{check} did not {'crash' if outcome == 'crashed' else 'fail'}"
                               f" ({[(c.name, c.outcome) for c in runs] or 'no such check ran'})")
                continue
            if key == "crashed" and len(hit) < len([c for c in runs if c.outcome != "not run"]):
                out.append(f"{check}: not every instance that ran crashed "
                           f"({[(c.name, c.outcome) for c in runs]})")
            out += _spec_problems(check, hit, spec)
    if "caught" in e:
        hit = [c for k in e["caught"]["checks"] for c in _instances(result, k)
               if c.outcome == "failed"]
        if not hit:
            out.append(f"none of {e['caught']['checks']} failed")
        else:
            text = "\n".join(c.message for c in hit)
            out += [f"the failures of {e['caught']['checks']} lack {n!r}"
                    for n in e["caught"]["messages"] if not _holds(text, n)]
    for check in e.get("not_failed", []):
        bad = [c.name for c in _instances(result, check) if c.outcome in ("failed", "crashed")]
        if bad:
            out.append(f"{check} must not fail, and {bad} did")
    for check in e.get("passed", []):
        runs = _instances(result, check)
        if not runs or any(c.outcome != "passed" for c in runs):
            out.append(f"{check} must run and pass: {[(c.name, c.outcome) for c in runs]}")
    if "reported" in e:
        out += [f"{c.name} was reported, and is not one of {e['reported']}" for c in result.checks
                if not any(_names(c.name, k) for k in e["reported"])]
        out += [f"{k} was not reported" for k in e["reported"] if not _instances(result, k)]
    return out


def mismatches(e: dict, result, points: Score) -> list[str]:
    """What differs between a grade (and its score) and a declaration's `expect` (empty: as
    expected). repository_unchanged is compared by the test, around the grade."""
    built = bool(result.build.get("ok"))
    message = str(result.build.get("message") or "")
    out = []
    if "build_failed" in e:
        out += (["the build succeeded; it should have failed"] if built
                else _said("the build's message", message, e["build_failed"]))
    if "ended" in e:
        why = "\n".join(text for text in (message if not built else "", result.ended) if text)
        out += _said("how the track ended early", why, e["ended"])
    if not built and not {"build_failed", "ended"} & set(e):
        out.append(f"the build failed: {message[-2000:]}")
    if built:
        out += _check_problems(e, result)
    for key, what, text in (
            ("tampering", "the tampering reported", "\n".join(result.tampering)),
            ("needs_review", "the review's findings", "\n".join(result.review)),
            ("sandbox", "the sandbox's state line", str(result.build.get("sandbox") or "")),
            ("performance_problem", "the timing's problem",
             str((result.performance or {}).get("problem") or ""))):
        if key in e:
            out += _said(what, text, e[key])
    if "performance_problem" in e and points.credit:
        out.append(f"the track earned performance credit {points.credit} despite the problem")
    if e.get("score_zero") and points.total:
        out.append(f"the track scored {points.total} points; it should score 0 ({points})")
    return out


def _what_happened(result) -> str:
    return (f"outcomes: {[(c.name, c.outcome, c.message[:300]) for c in result.checks]}\n"
            f"build: {result.build}\nended: {result.ended!r}; tampering: {result.tampering}; "
            f"review: {result.review}; performance: {result.performance}\n"
            f"log tail:\n{result.log_tail}")


def _repository() -> dict:
    """Every file of the repository (outside the grader's caches) with its bytes."""
    return Snapshot.take([ROOT], skip={str(CACHE)}).files


# --- the tests ---------------------------------------------------------------------------------

def _lenient(path: Path) -> KnownBad | None:
    """The declaration, or None where it is bad: read so to make the tests' parameters, it must
    not stop the collection (test_declaration_is_valid says what is wrong with it)."""
    try:
        return declaration(path)
    except (KnownBadError, KeyError):
        return None


def _param(path: Path, graded: bool):
    """One declaration as a test parameter; graded, one caught only on a GPU is marked `gpu`,
    and `timed` too where its grade times it (conftest: it has the GPU to itself)."""
    kb = _lenient(path)
    gpu, bench = getattr(kb, "gpu", False), getattr(kb, "bench", False)
    marks = [pytest.mark.gpu] + ([pytest.mark.timed] if bench else []) if gpu and graded else []
    return pytest.param(path, id=f"{path.parent.parent.name}/{path.stem}", marks=marks)


@pytest.mark.parametrize("exercise", sorted(EXERCISES))
def test_every_exercise_has_known_bads(exercise):
    """Each exercise declares at least one known-bad, and every declaration of it parses (a bad
    field raises, naming the file and the field)."""
    assert known_bad(EXERCISES[exercise]), f"exercises/{exercise}/wrong/ declares no known-bad"


@pytest.mark.parametrize("path", [_param(p, graded=False) for p in DECLARED])
def test_declaration_is_valid(path, tmp_path):
    """Its fields are known and well typed, and its edits apply to today's solution (a GPU
    variant's too: nothing is graded here)."""
    build(declaration(path), tmp_path)


@pytest.mark.parametrize("exercise, track", sorted({(kb.exercise, kb.track) for p in DECLARED
                                                     if (kb := _lenient(p))}))
def test_declared_checks_exist(exercise, track):
    """Every check an expectation names is one the exercise has (on some device): a renamed
    check shows here, not only when the variant is graded (on a GPU, for some)."""
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "grader.judge.plugin", f"exercises/{exercise}",
         "--tree", "solutions", "--track", track, "--collect-only", "-q", "-p",
         "no:cacheprovider"],
        cwd=ROOT, env=child_env(), capture_output=True, text=True, timeout=300)
    names = [line.split("::", 1)[1] for line in out.stdout.splitlines() if "::" in line]
    assert names, out.stdout[-3000:] + out.stderr[-3000:]
    names.append("your kernels do the work")  # the grader's own check, beside the exercise's
    unknown = [f"{kb.name}: {key}" for kb in known_bad(EXERCISES[exercise]) if kb.track == track
               for key in kb.checks()
               if not any(_names(n, key, dev) for n in names for dev in ("cpu", "cuda"))]
    assert not unknown, f"checks {exercise} [{track}] does not have: {unknown}"


@pytest.mark.parametrize("path", [_param(p, graded=True) for p in DECLARED])
@pytest.mark.timeout(1800)
def test_known_bad_is_caught(path, tmp_path, configure, forker):
    kb = declaration(path)
    if kb.signals:  # it signals out of its sandbox: only where the fence it names stands
        signal_fence(kb.signals)
    configure(select=kb.select, check_timeout=kb.check_timeout, signals=kb.signals or "auto",
              examples="fixed")
    ex = EXERCISES[kb.exercise]
    before = _repository() if kb.expect.get("repository_unchanged") else None
    result = grade_track(build(kb, tmp_path / "tree"), ex, ex.tracks[kb.track], bench=kb.bench,
                         forker=forker)
    problems = mismatches(kb.expect, result, score(ex, result))
    if before is not None:
        after = _repository()
        changed = sorted(str(p.relative_to(ROOT)) for p in before.keys() | after.keys()
                         if before.get(p) != after.get(p))
        problems += [f"the grade changed the repository: {changed}"] if changed else []
    assert not problems, (f"{path.relative_to(ROOT)} ({kb.why}):\n  "
                          + "\n  ".join(problems) + "\n\n" + _what_happened(result))


# --- the comparison itself, on made-up grades (nothing is graded) ------------------------------

def _result(*checks, build_ok=True, **fields):
    return TrackResult("01_vector_add", "triton", "tree", build={"ok": build_ok, "message": "nvcc: "
                       "error: expected ';'", "sandbox": "signals: seccomp filter"},
                       checks=tuple(Check(n, "correctness", o, m) for n, o, m in checks),
                       **fields)


def _points(total=0.0, credit=None):
    return Score(total, 0.0, 0.0, 10, credit=credit)


def test_expectations_are_compared():
    r = _result((f"test_a[{DEVICE}-float32]", "failed", "y: 3 elements differ; exp overflowed"),
                ("test_a[cpu-bfloat16]", "failed", "y: NaN in rows"),
                ("test_b[cpu]", "passed", ""), ("test_c[cpu]", "crashed", "a segmentation fault"),
                ("test_ab[cpu]", "failed", "other"))
    m = lambda e, result=r, points=_points(): mismatches(e, result, points)
    assert not m({"failed": {"test_a": ["^y:"]}})
    assert m({"failed": {"test_a": ["exp overflowed"]}})  # each instance
    assert not m({"failed": {"test_a": {"any": ["exp overflowed", "^y: 3"]}}})
    assert not m({"failed": {"test_a[{device}-float32]": [["NaN", "overflowed"]]}})
    assert m({"failed": {"test_a": {"lacks": ["NaN"]}}})
    assert m({"failed": {"test_b": []}})                 # it passed
    assert m({"failed": {"test_missing": []}})           # it did not run
    assert not m({"if_failed": {"test_b": ["anything"]}})
    assert m({"if_failed": {"test_ab": ["anything"]}})
    assert not m({"caught": {"checks": ["test_b", "test_a"], "messages": ["NaN", "overflowed"]}})
    assert m({"caught": {"checks": ["test_b"], "messages": []}})
    assert not m({"not_failed": ["test_b", "test_a[cpu-float16]"], "passed": ["test_b"]})
    assert m({"not_failed": ["test_c"]})                 # a crash is no pass either
    assert m({"passed": ["test_a"]}) and m({"passed": ["test_x"]})
    assert not m({"reported": ["test_a", "test_b", "test_c", "test_ab"]})
    assert m({"reported": ["test_a", "test_b", "test_c"]})           # test_ab is reported too
    assert m({"reported": ["test_a", "test_b", "test_c", "test_ab", "test_x"]})  # no test_x
    assert not m({"crashed": {"test_c": {"each": ["segmentation"], "lacks": ["refused"]}}})
    assert m({"crashed": {"test_a": []}})
    assert m({"build_failed": ["expected ';'"]})        # it built
    assert m({"ended": []})                              # it built, and its judge finished
    assert not m({"sandbox": ["seccomp filter"]}) and m({"sandbox": ["Landlock scope"]})
    assert m({"score_zero": True}, points=_points(total=1.5))
    assert not m({"score_zero": True})
    bad = _result(build_ok=False)
    assert not m({"build_failed": ["expected ';'"]}, bad)
    assert not m({"ended": [["exited", "expected"]], "score_zero": True}, bad)
    assert m({"failed": {"test_a": []}}, bad)            # no build, nothing to check
    assert not m({"ended": ["the judge was killed"]}, _result(ended="the judge was killed"))
    r = _result(tampering=("grader/judge/check.py",), review=("a.py:3: threading",),
                performance={"problem": "the output changed"})
    assert not m({"tampering": ["grader/judge/check.py"], "needs_review": ["threading"],
                  "performance_problem": ["output changed"]}, r)
    assert m({"tampering": ["exercises/"]}, r) and m({"needs_review": ["ctypes"]}, r)
    assert m({"performance_problem": ["output changed"]}, r, _points(credit=0.5))
    for key in ("tampering", "needs_review", "performance_problem"):
        assert m({key: []})                              # it must have happened at all


def _toml(top: str = "", expect: str = "score_zero = true\n") -> str:
    """A declaration of 01's triton track, its top-level fields and expect given."""
    return (f'why = "w"\ntrack = "triton"\n{top}[edits]\n"f.py" = [["a", "b"]]\n'
            f'[expect]\n{expect}')


@pytest.mark.parametrize("text, problem", [
    ('why = "w"\ntrack = "triton"\nedit = {}\n', "edit: unknown field"),
    ('why = "w"\ntrack = "triton"\n[expect]\nscore_zero = true\n', "edits: say what differs"),
    (_toml().replace('"triton"', '"cuda"'), "track: 'cuda' is not a track"),
    (_toml().replace('["a", "b"]', '["a"]'), "edits.f.py: a list of [old, new] string pairs"),
    (_toml().replace('[edits]\n"f.py" = [["a", "b"]]', '[files]\n"../f.py" = "x"'),
     "files.../f.py: a path inside the track's folder"),
    (_toml(expect="fails = {}\n"), "expect.fails: unknown expectation"),
    (_toml(expect="failed = { test_a = { each = [], some = [] } }\n"),
     "expect.failed.test_a: unknown spec field 'some'"),
    (_toml(expect="score_zero = false\n"), "expect.score_zero: write it as `true`"),
    (_toml(expect='tampering = "a"\n'), "expect.tampering: a list of needles"),
    (_toml('gpu = "yes"\n'), "gpu: expected bool"),
    (_toml("check_timeout = 0\n"), "check_timeout: seconds, > 0"),
    (_toml('signals = "none"\n'), "signals: one of auto, seccomp"),
    (_toml("bench = true\n"), "bench: the timing runs only on a GPU"),
    (_toml("gpu = true\n", 'performance_problem = ["x"]\n'),
     "expect.performance_problem: the timing finds it: needs bench = true"),
])
def test_a_wrong_declaration_names_its_file(tmp_path, text, problem):
    path = tmp_path / "01_vector_add" / "wrong" / "bad.toml"
    path.parent.mkdir(parents=True)
    path.write_text(text)
    with pytest.raises(KnownBadError) as e:
        load(path, EXERCISES["01_vector_add"].tracks)
    assert str(path) in str(e.value) and problem in str(e.value), e.value
