"""The main module (the grader's server) by every other route: import, __import__, importlib,
sys.modules by a chain, frames, the garbage collector, a module re-exported by an allowed one."""
import typing

import __main__  # review: main
import importlib  # review: modules
import sys  # review: modules

m1 = __import__("__m" + "ain__")  # review: dynamic-code
m2 = importlib.import_module(sys.argv[0])  # review: modules
m3 = sys.modules.get("__main__")  # review: main
m4 = typing.sys.modules  # review: modules
m5 = sys._getframe(1).f_globals  # review: introspection


def outermost():
    import inspect  # review: introspection
    return inspect.stack()[-1].frame  # review: introspection


def from_gc():
    import gc  # review: introspection
    return [o for o in gc.get_objects() if type(o).__name__ == "SubmissionServer"]  # review: introspection


__main__.SubmissionServer.do_run = None  # review: patch
