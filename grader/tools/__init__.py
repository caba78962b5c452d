"""Tools: what is built on grading, run by people: grade a class (batch, on a Slurm cluster,
its summary and dashboard), `make bench` (the sweep and its documents), `make watch-NN` (regrade
on every save), `PROFILE=1` (Nsight Compute per kernel).

What runs here: the caller's process (and, for PROFILE=1, its child under ncu). What it may
import: grader.run, grader.judge, grader.submission and grader.common; nothing imports it but
grader.cli.
"""
