"""Submission: the sandboxed process of one track (`python -m grader.submission`), and the builds
it uses.

What runs here: the file system closed to the repository (Landlock) and the signals fenced
before any submission code runs, the track built (JIT: cpp_extension + ninja; or loaded, AOT)
and imported, then the judge's requests served: calls of the op under the profiler, its
backward, opcheck, torch.compile, graph captures, the timing loop. What it reports is evidence
the judge weighs, never a verdict. Also here: the children a build needs (the early rebuild,
the bindings' precompiled header, an AOT build), each a process of its own.

What it may import: grader.common. Never grader.run, grader.judge nor grader.tools.
"""
