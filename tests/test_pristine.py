"""A track that is the starter as shipped is "not started" at once: no build, no judge
(grader.common.pristine); one changed byte grades it in full; the record is up to date."""
import shutil

from grader.common.discover import discover
from grader.common.paths import ROOT, build_dir
from grader.common.pristine import MANIFEST, manifest_text, unchanged_starter
from grader.common.settings import from_environment
from grader.run.grade import grade_track
from grader.run.report import feedback
from grader.run.score import score

EX01, EX02 = discover(only="01")[0], discover(only="02")[0]


def test_the_record_is_the_starter_as_it_is():
    assert manifest_text(discover()) == MANIFEST.read_text(), (
        "a starter changed: python -m grader.common.pristine --write")


def test_an_unchanged_starter_is_answered_without_a_build(tmp_path):
    shutil.copytree(ROOT / "starter" / EX02.id, tmp_path / EX02.id)
    track = EX02.tracks["cuda"]
    assert unchanged_starter(tmp_path, EX02, track)
    r = grade_track(tmp_path, EX02, track)
    assert r.build == {**r.build, "ok": True, "stage": "starter"}
    assert not build_dir(tmp_path, EX02.id, "cuda").exists()  # nothing was built
    assert r.not_implemented and score(EX02, r).total == 0
    said = feedback(EX02, r, score(EX02, r))
    assert "not implemented yet (the starter as shipped" in said and "Start here:" in said


def test_one_changed_byte_grades_the_track_in_full(tmp_path):
    shutil.copytree(ROOT / "starter" / EX01.id, tmp_path / EX01.id)
    track = EX01.tracks["triton"]
    path = tmp_path / EX01.id / "triton" / track.files[0]
    path.write_text(path.read_text() + "# begun\n")
    assert not unchanged_starter(tmp_path, EX01, track)
    r = grade_track(tmp_path, EX01, track)
    assert r.build.get("stage") == "import" and r.not_implemented  # its judge ran: a stub
    assert len(r.checks) > 1


def test_a_missing_file_is_not_the_starter(tmp_path):
    shutil.copytree(ROOT / "starter" / EX02.id, tmp_path / EX02.id)
    track = EX02.tracks["cuda"]
    (tmp_path / EX02.id / "cuda" / track.files[-1]).unlink()
    assert not unchanged_starter(tmp_path, EX02, track)
    assert not unchanged_starter(ROOT / "solutions", EX02, track)


def test_the_project_can_still_build_an_unchanged_starter(tmp_path):
    shutil.copytree(ROOT / "starter" / EX01.id, tmp_path / EX01.id)
    r = grade_track(tmp_path, EX01, EX01.tracks["triton"],
                    settings=from_environment().replace(build_starters=True))
    assert r.build.get("stage") == "import" and r.not_implemented and len(r.checks) > 1
