"""The forgery the denylist missed (issue 36): the main module, where the submission's server
runs, reached as os.sys.modules inside a helper, and its procedure handler replaced."""
import os

import torch


def _server():
    mods = os.sys.modules  # review: modules
    return mods["__main__"].SubmissionServer  # review: main


def _install():
    server = _server()
    server.do_run = lambda self, name, args: {"value": None}  # review: patch


_install()


def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return x + y
