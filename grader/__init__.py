"""The grader, in rooms by process: the security model is the boundary between the processes, so
the folders are too.

    grader/cli.py     the command line (python -m grader ...): the top of the house
    grader/tools/     what is built on grading: a class (batch, slurm, the dashboard), make bench,
                      make watch, PROFILE=1; runs in the caller's process and starts grades
    grader/run/       the grade process: discover -> build -> check -> time -> score -> report,
                      its judges started and followed, its scorecard and result files
    grader/judge/     the judge process, one per track and phase: the exercise's checks and the
                      timing, computing every expectation; never imports the submission
    grader/submission/  the submission's process, sandboxed: builds and imports one track and
                      serves the judge's requests; reports evidence, never a verdict
    grader/common/    the vocabulary every process shares: paths, settings, the exercises'
                      specs, the events, the wire between judge and submission, the timing
                      helper, the ceilings and trust rules as data, errors

Arrows run one way: cli -> tools -> (run | judge | submission) -> common, and the three process
rooms never import each other. `.importlinter` states it, and `make test` checks it.
"""
