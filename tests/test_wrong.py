"""Known-bad submissions, declared beside their exercise: each is caught, with the right reason.

Every `exercises/NN_name/wrong/<name>.toml` is one bad submission: the solution with a few text
edits, the checks that should catch it, and what must happen. This module builds each one from
today's solution (conftest.make_variant), grades it through the grader's one path
(grader.run.grade.grade_track) and compares the result with the file's `expect`.

    why = "one line: what the bad submission does"
    track = "triton"
    select = "test_large_magnitudes"   # optional: a pytest -k expression of the checks to run
    gpu = false                        # true: it is only caught on a GPU (skipped elsewhere)
    bench = false                      # true: the timing must run (performance problems)
    [edits]                            # file of the track -> [[old, new], ...]; each old occurs
    "softmax.py" = [["e = tl.exp(x - m)", "e = tl.exp(x)"]]
    [expect]
    failed = { "test_large_magnitudes" = ["exp overflowed"] }

`expect` (at least one entry):
    failed = {check = spec}        the check failed; its failure messages meet `spec`
    crashed = {check = spec}       the check crashed (the submission's process died in it)
    if_failed = {check = spec}     where the check failed, its messages meet `spec` (it need not)
    caught = {checks = [...], messages = [needle, ...]}
                                   at least one of these checks failed; their failure messages,
                                   together, hold every needle
    not_failed = [check, ...]      none of its instances failed or crashed
    passed = [check, ...]          it ran, and every instance of it passed
    build_failed = [needle, ...]   the build failed, with these in its message
    tampering = [needle, ...]      the grader saw the submission change or write these paths
    performance_problem = [needle, ...]  the timing found a problem (`bench = true`)

A check is named as the grade reports it: "test_x" means every instance of test_x,
"test_x[cpu-torch.float32]" one instance, "test_x[cuda" the instances whose id starts so.
"{device}" stands for the device a Triton track's checks run on here ("cuda" or "cpu").
A spec is a list of needles every failed instance's message must hold, or a table:
{each = [...], any = [...], lacks = [...]}: `each` as the list, `any`: some failed instance holds
all of these, `lacks`: no failed instance's message contains any of these. A needle is a
substring; "^text" means the message starts with text; a list of needles means any one of them.
Unless `build_failed` is expected, the build must succeed.

Every variant runs with CI=1 (the grader's "grader-ci" Hypothesis profile: the same examples
every run, as in CI), so a red result is a real change and never noise.
"""
from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from conftest import HAS_GPU, ROOT, make_variant
from grader.common.discover import discover
from grader.run.grade import grade_track
from grader.run.launch import child_env
from grader.run.results import Check, TrackResult

DECLARED = sorted((ROOT / "exercises").glob("*/wrong/*.toml"))
EXERCISES = {ex.id: ex for ex in discover()}
DEVICE = "cuda" if HAS_GPU else "cpu"

FIELDS = {"why": str, "track": str, "select": str, "gpu": bool, "bench": bool, "edits": dict,
          "expect": dict}
REQUIRED = ("why", "track", "edits", "expect")
SPEC_KEYS = ("each", "any", "lacks")
EXPECT = {"failed", "crashed", "if_failed", "caught", "not_failed", "passed", "build_failed",
          "tampering", "performance_problem"}


class Declaration:
    """One wrong/*.toml, its fields checked: an unknown or mistyped field names the file."""

    def __init__(self, path: Path):
        self.path = path
        self.exercise = path.parent.parent.name
        self.name = path.stem
        where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
        try:
            data = tomllib.loads(path.read_text())
        except tomllib.TOMLDecodeError as e:
            raise ValueError(f"{where}: not valid TOML: {e}") from None

        def bad(problem):
            return ValueError(f"{where}: {problem}")
        unknown = sorted(set(data) - set(FIELDS))
        if unknown:
            raise bad(f"unknown field(s) {unknown}; known: {sorted(FIELDS)}")
        for key in REQUIRED:
            if key not in data:
                raise bad(f"missing field {key!r}")
        for key, value in data.items():
            if not isinstance(value, FIELDS[key]):
                raise bad(f"{key} must be a {FIELDS[key].__name__}, not {value!r}")
        ex = EXERCISES.get(self.exercise)
        if ex is None:
            raise bad(f"{self.exercise} is not an exercise")
        if data["track"] not in ex.tracks:
            raise bad(f"no track {data['track']!r} in {self.exercise} (tracks: {list(ex.tracks)})")
        for file, pairs in data["edits"].items():
            if not (isinstance(pairs, list) and pairs and all(
                    isinstance(p, list) and len(p) == 2 and all(isinstance(s, str) for s in p)
                    for p in pairs)):
                raise bad(f"edits.{file!r} must be a list of [old, new] string pairs")
        expect = data["expect"]
        if not expect:
            raise bad("expect is empty: say what must happen")
        unknown = sorted(set(expect) - EXPECT)
        if unknown:
            raise bad(f"unknown expect field(s) {unknown}; known: {sorted(EXPECT)}")
        for key in ("failed", "crashed", "if_failed"):
            for check, spec in expect.get(key, {}).items():
                _check_spec(spec, lambda p: bad(f"expect.{key}.{check!r}: {p}"))
        if "caught" in expect:
            c = expect["caught"]
            if set(c) != {"checks", "messages"} or not c["checks"]:
                raise bad("expect.caught is {checks = [...], messages = [...]}")
            _check_needles(c["messages"], lambda p: bad(f"expect.caught.messages: {p}"))
        for key in ("not_failed", "passed"):
            if not all(isinstance(s, str) for s in expect.get(key, [])):
                raise bad(f"expect.{key} is a list of check names")
        for key in ("build_failed", "tampering", "performance_problem"):
            if key in expect:
                _check_needles(expect[key], lambda p: bad(f"expect.{key}: {p}"))
        if "performance_problem" in expect and not data.get("bench"):
            raise bad("expect.performance_problem needs bench = true (the timing finds it)")
        self.why, self.track = data["why"], data["track"]
        self.select, self.edits = data.get("select"), data["edits"]
        self.gpu, self.bench = data.get("gpu", False), data.get("bench", False)
        self.expect = expect

    def build(self, tmp: Path) -> Path:
        return make_variant(tmp, self.exercise, self.track, self.edits)


def _check_needles(needles, bad):
    if not isinstance(needles, list) or not all(
            isinstance(n, str) or (isinstance(n, list) and n and all(isinstance(s, str) for s in n))
            for n in needles):
        raise bad("a list of needles (a string, or a list of strings: any one of them)")


def _check_spec(spec, bad):
    if isinstance(spec, dict):
        unknown = sorted(set(spec) - set(SPEC_KEYS))
        if unknown:
            raise bad(f"unknown spec field(s) {unknown}; known: {list(SPEC_KEYS)}")
        for needles in spec.values():
            _check_needles(needles, bad)
    else:
        _check_needles(spec, bad)


# --- comparing a grade with what was expected --------------------------------------------------

def _names(name: str, key: str, device: str = DEVICE) -> bool:
    """Whether `key` (a check, one instance, or an id's start) names the check `name`."""
    key = key.replace("{device}", device)
    return name == key or name.startswith(key + "[") or ("[" in key and name.startswith(key))


def _instances(result, key: str) -> list:
    return [c for c in result.checks if _names(c.name, key)]


def _keys(expect: dict) -> list[str]:
    """Every check an expectation names."""
    return [*expect.get("failed", {}), *expect.get("crashed", {}), *expect.get("if_failed", {}),
            *expect.get("not_failed", []), *expect.get("passed", []),
            *expect.get("caught", {}).get("checks", [])]


def _holds(message: str, needle) -> bool:
    options = needle if isinstance(needle, list) else [needle]
    return any(message.startswith(n[1:]) if n.startswith("^") else n in message for n in options)


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


def mismatches(decl_expect: dict, result) -> list[str]:
    """What differs between a grade and the declaration's `expect` (empty: as expected)."""
    e, out = decl_expect, []
    if "build_failed" in e:
        if result.build.get("ok"):
            out.append("the build succeeded; it should have failed")
        else:
            msg = result.build.get("message", "") or ""
            out += [f"the build message lacks {n!r}" for n in e["build_failed"]
                    if not _holds(msg, n)]
        return out
    if not result.build.get("ok"):
        return [f"the build failed: {str(result.build.get('message', ''))[-2000:]}"]
    for key, outcome in (("failed", "failed"), ("crashed", "crashed"), ("if_failed", "failed")):
        for check, spec in e.get(key, {}).items():
            runs = _instances(result, check)
            hit = [c for c in runs if c.outcome == outcome]
            if not hit:
                if key == "if_failed":
                    continue
                out.append(f"{check} did not {outcome[:-2] if outcome == 'crashed' else 'fail'}"
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
    if "tampering" in e:
        seen = "\n".join(result.tampering)
        out += [f"no tampering with {n!r} was reported" for n in e["tampering"]
                if not _holds(seen, n)]
    if "performance_problem" in e:
        problem = (result.performance or {}).get("problem") or ""
        out += [f"the timing's problem ({problem!r}) lacks {n!r}"
                for n in e["performance_problem"] if not _holds(problem, n)]
    return out


def _what_happened(result) -> str:
    return (f"outcomes: {[(c.name, c.outcome, c.message[:300]) for c in result.checks]}\n"
            f"build: {result.build}\nended: {result.ended!r}; tampering: {result.tampering}; "
            f"performance: {result.performance}\nlog tail:\n{result.log_tail}")


# --- the tests ---------------------------------------------------------------------------------

def _raw(path: Path) -> dict:
    """The file's fields, unchecked (test_declaration_is_valid checks them): {} if unreadable."""
    try:
        return tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError:
        return {}


def _param(path: Path, graded: bool):
    """One declaration as a test parameter; graded, one that needs a GPU is marked `gpu`."""
    gpu = _raw(path).get("gpu", False) is True
    return pytest.param(path, id=f"{path.parent.parent.name}/{path.stem}",
                        marks=[pytest.mark.gpu] if gpu and graded else [])


def test_there_are_declarations():
    assert DECLARED, "no exercises/*/wrong/*.toml found"


@pytest.mark.parametrize("path", [_param(p, graded=False) for p in DECLARED])
def test_declaration_is_valid(path, tmp_path):
    """Its fields are known and well typed, and its edits apply to today's solution (a GPU
    variant's too: nothing is graded here)."""
    decl = Declaration(path)
    decl.build(tmp_path)


@pytest.mark.parametrize("exercise, track", sorted({(p.parent.parent.name, str(_raw(p).get("track")))
                                                     for p in DECLARED}))
def test_declared_checks_exist(exercise, track):
    """Every check an expectation names is one the exercise has (on some device): a renamed
    check shows here, not only when the variant is graded (on a GPU, for some)."""
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "grader.judge.plugin", f"exercises/{exercise}", "--tree",
         "solutions", "--track", track, "--collect-only", "-q", "-p", "no:cacheprovider"],
        cwd=ROOT, env=child_env(), capture_output=True, text=True, timeout=300)
    names = [line.split("::", 1)[1] for line in out.stdout.splitlines() if "::" in line]
    assert names, out.stdout[-3000:] + out.stderr[-3000:]
    names.append("your kernels do the work")  # the grader's own check, beside the exercise's
    unknown = [f"{p.name}: {key}" for p in DECLARED if p.parent.parent.name == exercise
               if _raw(p).get("track") == track for decl in [Declaration(p)] for key in _keys(decl.expect)
               if not any(_names(n, key, dev) for n in names for dev in ("cpu", "cuda"))]
    assert not unknown, f"checks {exercise} [{track}] does not have: {unknown}"


@pytest.mark.parametrize("path", [_param(p, graded=True) for p in DECLARED])
@pytest.mark.timeout(1800)
def test_known_bad_is_caught(path, tmp_path, configure, monkeypatch):
    decl = Declaration(path)
    monkeypatch.setenv("CI", "1")  # the same Hypothesis examples every run (grader-ci)
    configure(select=decl.select)
    ex = EXERCISES[decl.exercise]
    result = grade_track(decl.build(tmp_path / "tree"), ex, ex.tracks[decl.track],
                         bench=decl.bench)
    problems = mismatches(decl.expect, result)
    assert not problems, (f"{path.relative_to(ROOT)} ({decl.why}):\n  "
                          + "\n  ".join(problems) + "\n\n" + _what_happened(result))


# --- the comparison itself, on made-up grades (nothing is graded) ------------------------------

def _result(*checks, build_ok=True, **fields):
    return TrackResult("01_vector_add", "triton", "tree", build={"ok": build_ok, "message": "nvcc: "
                       "error: expected ';'"}, checks=[Check(n, "correctness", o, m)
                                                      for n, o, m in checks], **fields)


def test_expectations_are_compared():
    r = _result((f"test_a[{DEVICE}-float32]", "failed", "y: 3 elements differ; exp overflowed"),
                ("test_a[cpu-bfloat16]", "failed", "y: NaN in rows"),
                ("test_b[cpu]", "passed", ""), ("test_c[cpu]", "crashed", "a segmentation fault"),
                ("test_ab[cpu]", "failed", "other"))
    assert not mismatches({"failed": {"test_a": ["^y:"]}}, r)
    assert mismatches({"failed": {"test_a": ["exp overflowed"]}}, r)  # each instance
    assert not mismatches({"failed": {"test_a": {"any": ["exp overflowed", "^y: 3"]}}}, r)
    assert not mismatches({"failed": {"test_a[{device}-float32]": [["NaN", "overflowed"]]}}, r)
    assert mismatches({"failed": {"test_a": {"lacks": ["NaN"]}}}, r)
    assert mismatches({"failed": {"test_b": []}}, r)                 # it passed
    assert mismatches({"failed": {"test_missing": []}}, r)           # it did not run
    assert not mismatches({"if_failed": {"test_b": ["anything"]}}, r)
    assert mismatches({"if_failed": {"test_ab": ["anything"]}}, r)
    assert not mismatches({"caught": {"checks": ["test_b", "test_a"], "messages": ["NaN",
                                                                                  "overflowed"]}}, r)
    assert mismatches({"caught": {"checks": ["test_b"], "messages": []}}, r)
    assert not mismatches({"not_failed": ["test_b", "test_a[cpu-float16]"], "passed": ["test_b"]},
                          r)
    assert mismatches({"not_failed": ["test_c"]}, r)                 # a crash is no pass either
    assert mismatches({"passed": ["test_a"]}, r) and mismatches({"passed": ["test_x"]}, r)
    assert not mismatches({"crashed": {"test_c": {"each": ["segmentation"], "lacks": ["refused"]}}}, r)
    assert mismatches({"crashed": {"test_a": []}}, r)
    assert mismatches({"build_failed": ["expected ';'"]}, r)        # it built
    bad = _result(build_ok=False)
    assert not mismatches({"build_failed": ["expected ';'"]}, bad)
    assert mismatches({"failed": {"test_a": []}}, bad)               # no build, nothing to check
    r = _result(tampering=["grader/judge/check.py"], performance={"problem": "the output changed"})
    assert not mismatches({"tampering": ["grader/judge/check.py"],
                           "performance_problem": ["output changed"]}, r)
    assert mismatches({"tampering": ["exercises/"]}, r)


@pytest.mark.parametrize("text, problem", [
    ('why = "w"\ntrack = "triton"\nedit = {}\n', "unknown field(s) ['edit']"),
    ('why = "w"\ntrack = "cuda"\n[edits]\n"f" = [["a", "b"]]\n[expect]\nnot_failed = []\n',
     "no track 'cuda'"),
    ('why = "w"\ntrack = "triton"\n[edits]\n"f" = [["a"]]\n[expect]\nnot_failed = []\n',
     "[old, new] string pairs"),
    ('why = "w"\ntrack = "triton"\n[edits]\n"f" = [["a", "b"]]\n[expect]\nfails = {}\n',
     "unknown expect field(s) ['fails']"),
    ('why = "w"\ntrack = "triton"\n[edits]\n"f" = [["a", "b"]]\n'
     '[expect.failed]\ntest_a = { each = [], some = [] }\n', "unknown spec field(s) ['some']"),
])
def test_a_wrong_declaration_names_its_file(tmp_path, text, problem):
    path = tmp_path / "01_vector_add" / "wrong" / "bad.toml"
    path.parent.mkdir(parents=True)
    path.write_text(text)
    with pytest.raises(ValueError) as e:
        Declaration(path)
    assert str(path) in str(e.value) and problem in str(e.value), e.value
