"""Patching opcheck's internals under the watched entry point: PyTorch's private test utilities
and custom-op internals, reached by import, attribute, and a name built at run time."""
import torch
import torch.testing._internal.optests.generate_tests as gt  # review: private
from torch._library import custom_ops  # review: private

gt.opcheck = lambda *a, **k: {}  # review: patch
custom_ops.CustomOpDef._opcheck = None  # review: patch
internals = torch.testing._internal  # review: private
name = "_" + "internal"
hidden = getattr(torch.testing, name)  # review: private
where = getattr(torch.testing, internals.__name__)  # review: dynamic-name
torch.testing.assert_close = lambda *a, **k: None  # review: patch
