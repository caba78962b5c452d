"""Settings: how one grade runs, as one typed value that crosses into every child process.

The parent (grader.run.grade) makes a `Settings`; every process it starts, and every process those
start (the judge, the submission's process, the early rebuild), reads the same value from one
environment variable, GRADER_SETTINGS, as JSON (`Settings.env()` / `current()`). The grader reads
one other variable, GRADER_CACHE (grader.common.paths: where its caches live). Nothing else crosses.
"""
from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass
from functools import cache

VARIABLE = "GRADER_SETTINGS"


@dataclass(frozen=True)
class Settings:
    quick: bool = False            # make ... QUICK=1: few examples, the baselines' cached times
    build: str = "jit"             # jit (cpp_extension.load) or aot (a setup.py build, loaded)
    sanitize: str | None = None    # a compute-sanitizer tool: memcheck, racecheck, ...
    small: bool = False            # small shapes only (the sanitizer runs 10-100x slower)
    check_timeout: int | None = None  # one check's limit in seconds (default: the exercise's)
    track_timeout: int | None = None  # one judge's limit in seconds (default: the exercise's)
    repro: str | None = None       # CHECK@BLOB: run one failing example again, alone
    select: str | None = None      # a pytest -k expression (the project's own tests)
    check_threads: int | None = None  # torch CPU threads of each checking process
    niced: bool = False            # a checking process steps aside for the builds beside it
    #                                (grader.common.processes.step_aside)
    keep_logs: str | None = None   # a folder: keep every judge's log and events there
    run_cache: str | None = None   # a folder of this run's baseline timings (shared by tracks)
    bench_repeats: int = 2         # make bench: times the graded case is measured
    first: tuple[str, ...] = ()    # checks run before the others (the watch loop: those that
    #                                failed last time), by name as the scorecard shows them
    shard: tuple[int, int] | None = None  # (i, n): this judge runs the i-th of n shares of the
    #                                       track's checks (grader.run.grade: long tracks on a GPU)
    examples: str | None = None    # hypothesis' examples: None chooses by the machine and QUICK;
    #                                "fixed" (the project's own tests): 6, the same every run
    build_starters: bool = False   # grade a track that is the starter as shipped in full (the
    #                                project's own tests: every starter builds and says "not
    #                                implemented yet"); else it is "not started" at once
    #                                (grader.common.pristine)
    keep: int = 0                  # seconds a grade's processes are kept ready for the next
    #                                command (grader.run.keeper; make grade, make exercise-NN)
    signals: str = "auto"          # the submission's signal fence (grader.submission.sandbox): auto is
    #                                Landlock's scope where the kernel has it, else a seccomp
    #                                filter; seccomp: the filter even there (tests the fallback)

    def check_limit(self, exercise) -> int:
        """One check's time limit in seconds: the settings' or the exercise's."""
        return int(self.check_timeout or exercise.test_timeout_s)

    def replace(self, **changes) -> "Settings":
        return dataclasses.replace(self, **changes)

    def env(self) -> dict:
        """The environment entry a child process reads this from."""
        return {VARIABLE: json.dumps(dataclasses.asdict(self))}

    @classmethod
    def from_json(cls, text: str) -> "Settings":
        known = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in json.loads(text).items() if k in known}
        for name in ("first", "shard"):  # JSON has lists; the settings stay hashable
            if values.get(name) is not None:
                values[name] = tuple(values[name])
        return cls(**values)


def from_environment() -> Settings:
    """The settings this process's environment carries, or the defaults."""
    text = os.environ.get(VARIABLE)
    return Settings.from_json(text) if text else Settings()


@cache
def current() -> Settings:
    """This process's settings: what its parent passed (read once)."""
    return from_environment()


def adopt(settings: Settings) -> None:
    """Make `settings` this process's own (and its children's, through the environment)."""
    os.environ.update(settings.env())
    current.cache_clear()
