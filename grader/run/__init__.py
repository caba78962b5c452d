"""Run: the grade process. It discovers the exercises, starts a judge per track and phase (side
by side for the checks, one at a time on the GPU for the timings), follows their events for the
live display, scores every track from what the judges recorded and writes the scorecard,
results.json and JUnit XML. It never imports torch's heavy parts where there is no GPU, nor a
submission, nor a judge's modules.

What it may import: grader.common. Never grader.judge nor grader.submission (their processes
are started by command: `python -m grader.judge`, `python -m grader.submission.pch`, ...).
"""
