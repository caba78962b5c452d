"""Pristine: which tracks of a submission tree are the starter as shipped, byte for byte.

A track whose every file (Track.files) has the SHA-256 that starter.sha256 records for it is
the starter, untouched: every entry point raises "not implemented yet", so its verdict is known
before anything runs. A grade answers it at once, "not started", without building it, starting
a judge or making the bindings' precompiled header (grader.run.grade). On the 2-core machine the
eight CUDA starters' builds were most of a fresh clone's first `make grade` (117-129 s,
docs/performance.md, "Grading time on the CPU"). An edit of any one of its files, even a
comment, grades the track in full; the project's own tests build every starter anyway
(Settings.build_starters).

starter.sha256 is `sha256sum` lines, paths relative to starter/. A starter edited here without
it fails tests/test_pristine.py, which says to run: python -m grader.common.pristine --write
"""
from __future__ import annotations

import argparse
import hashlib
from functools import cache
from pathlib import Path

from grader.common.discover import discover
from grader.common.paths import ROOT

MANIFEST = Path(__file__).with_name("starter.sha256")
STARTER = ROOT / "starter"


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _track_files(exercises) -> list[str]:
    """Every file a learner edits, relative to a tree's root, in order."""
    return sorted(f"{ex.id}/{t.name}/{f}" for ex in exercises for t in ex.tracks.values()
                  for f in t.files)


def manifest_text(exercises) -> str:
    """What starter.sha256 holds for the repository's starter/ now."""
    return "".join(f"{_digest(STARTER / rel)}  {rel}\n" for rel in _track_files(exercises)
                   if (STARTER / rel).is_file())


@cache  # read once per process: a grade asks for every track
def _recorded() -> dict[str, str]:
    try:
        lines = MANIFEST.read_text().splitlines()
    except OSError:
        return {}
    return {rel: digest for digest, _, rel in (line.partition("  ") for line in lines) if rel}


def unchanged_starter(tree: Path, exercise, track) -> bool:
    """Is the track in `tree` the starter as shipped (every file as recorded)?"""
    recorded = _recorded()
    folder = Path(tree) / exercise.id / track.name
    for name in track.files:
        want = recorded.get(f"{exercise.id}/{track.name}/{name}")
        path = folder / name
        if want is None or not path.is_file() or _digest(path) != want:
            return False
    return bool(track.files)


def main() -> None:
    p = argparse.ArgumentParser(description="starter.sha256: the starter's files as shipped")
    p.add_argument("--write", action="store_true", help="write it from starter/ (else: check)")
    a = p.parse_args()
    text = manifest_text(discover())
    if a.write:
        MANIFEST.write_text(text)
        print(f"wrote {MANIFEST.relative_to(ROOT)}: {len(text.splitlines())} files")
    elif text != (MANIFEST.read_text() if MANIFEST.is_file() else ""):
        raise SystemExit(f"{MANIFEST.relative_to(ROOT)} is out of date: "
                         "python -m grader.common.pristine --write")


if __name__ == "__main__":
    main()
