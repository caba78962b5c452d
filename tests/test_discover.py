"""Discover: every real spec loads; a bad spec is one clear error naming the file and field."""
import pytest

from grader.common.discover import SpecError, discover, load_exercise

GOOD = """
title = "t"
dtypes = ["float32"]
points = { correctness = 1 }
[tracks.triton]
files = ["k.py"]
module = "k.py"
entry_points = ["f"]
start = "open k.py"
"""


def test_every_exercise_spec_loads():
    exercises = discover()
    assert [e.number for e in exercises] == sorted(e.number for e in exercises)
    for ex in exercises:
        assert ex.tracks and ex.title
        assert (ex.dir / "reference.py").is_file(), ex.id
        assert (ex.dir / "README.md").is_file(), ex.id
        assert list(ex.dir.glob("test_*.py")), f"{ex.id} has no checks"


def _write(tmp_path, text, name="09_thing"):
    folder = tmp_path / name
    folder.mkdir()
    (folder / "exercise.toml").write_text(text)
    return folder


def test_minimal_spec(tmp_path):
    ex = load_exercise(_write(tmp_path, GOOD))
    assert ex.number == "09" and ex.name == "thing" and ex.tracks["triton"].entry_points == ("f",)


@pytest.mark.parametrize("edit, field", [
    (("title = \"t\"", ""), "title: missing"),
    (("dtypes = [\"float32\"]", "dtypes = [\"float8\"]"), "dtypes: 'float8' is not one of"),
    (("correctness = 1", "correctness = -1"), "points.correctness: must be >= 0"),
    (("entry_points = [\"f\"]", "entry_points = []"), "tracks.triton.entry_points: at least one"),
    (("module = \"k.py\"", "module = \"other.py\""), "tracks.triton.module: 'other.py' is not in"),
    (("files = [\"k.py\"]", "files = [\"k.py\"]\nsources = [\"k.cu\"]"),
     "tracks.triton.sources: 'k.cu' is not in tracks.triton.files"),
    (("start = \"open k.py\"", "start = 3"), "tracks.triton.start: expected str, got int"),
    (("title = \"t\"", "title = \"t\"\ntitel = \"typo\""), "titel: unknown field"),
    (("correctness = 1", "correctness = 1, performance = 2"),
     "points.performance: needs a [benchmark]"),
])
def test_bad_spec_names_file_and_field(tmp_path, edit, field):
    folder = _write(tmp_path, GOOD.replace(*edit))
    with pytest.raises(SpecError) as e:
        load_exercise(folder)
    assert str(e.value).startswith(str(folder / "exercise.toml")), e.value
    assert field in str(e.value), e.value


def test_bad_benchmark_fields(tmp_path):
    text = GOOD + """
[benchmark]
call = "g"
inputs = "i"
model = "m"
dtype = "float32"
case = { n = 1 }
"""
    with pytest.raises(SpecError, match=r"benchmark\.call: 'g' is not an entry point"):
        load_exercise(_write(tmp_path, text))
    text = text.replace('call = "g"', 'call = "f"\nmodes = ["forward_backward"]')
    with pytest.raises(SpecError, match=r"benchmark\.grad_args: forward_backward needs"):
        load_exercise(_write(tmp_path, text, "10_other"))


def test_invalid_toml_and_missing_file(tmp_path):
    with pytest.raises(SpecError, match="not valid TOML"):
        load_exercise(_write(tmp_path, "title = "))
    (tmp_path / "11_empty").mkdir()
    with pytest.raises(SpecError, match="missing"):
        load_exercise(tmp_path / "11_empty")


def test_pick_one_exercise_by_number():
    assert [e.id for e in discover(only="1")] == ["01_vector_add"]
    with pytest.raises(SpecError, match="no exercise '99'"):
        discover(only="99")
