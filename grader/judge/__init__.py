"""Judge: the trusted process of one track's checks or timing (`python -m grader.judge`).

What runs here: pytest with the exercise's checks and the grader's plugin, the float64
references, every comparison, the review of the sources, the timing's validation on the judge's
own clock, the baselines. The submission runs in a process of its own; every call of its op
crosses the wire (grader.common.seam) and only data comes back.

What it may import: grader.common. Never grader.run, grader.submission nor grader.tools. The
exercises' checks import grader.judge.check, .testing, .gradcheck and .strategies.
"""
