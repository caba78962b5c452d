"""Errors every room raises and every room may catch: one class each, defined once.

- `Mismatch`: a check failed; its message is written for the learner (grader.judge.check raises
  it, and so does the submission's process for opcheck and torch.compile, grader.submission.loader:
  it crosses back to the judge by its name).
- `SpecError` (grader.common.discover), `LoadError` (grader.common.pyfile) and `BuildError`
  (grader.submission.build_errors) stay beside the code that raises them.
"""
from __future__ import annotations


class Mismatch(AssertionError):
    """A check failed; the message is written for the learner."""
