"""Common: the vocabulary every process of the grader shares.

What runs here: nothing of its own; every process imports it. Paths and settings, the
exercises' specs (discover) and their known-bad submissions, the typed events a judge writes and
the grade process reads, the wire between the judge and the submission's process (seam), the
one timing helper, the ceilings and the trust rules as data, errors, how processes are started,
forked and described. What it may import: the standard library, torch and Triton (seam, timing,
poison: only the processes that run kernels import those), and itself; never another room.
"""
