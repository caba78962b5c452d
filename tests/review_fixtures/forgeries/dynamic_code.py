"""exec, eval and compile; payloads decoded by base64, zlib, marshal, codecs, pickle, a typing
annotation evaluated, a module-level __getattr__, builtins rebound, the source's encoding."""
import base64  # review: dynamic-code
import codecs  # review: dynamic-code
import marshal  # review: dynamic-code
import typing
import zlib  # review: dynamic-code

import torch

exec(base64.b64decode(b"aW1wb3J0IG9z"))  # review: dynamic-code
eval(codecs.decode("vzcbeg bf", "rot13"))  # review: dynamic-code
code = compile(zlib.decompress(b""), "x", "exec")  # review: dynamic-code
run = marshal.loads(b"")  # review: dynamic-code
hints = typing.get_type_hints(torch.Tensor)  # review: dynamic-code
state = torch.load("weights.pt")  # review: dynamic-code
exec("import os\nos.kill(os.getppid(), 9)")  # review: signals
run_it = exec  # review: dynamic-code
getattr = print  # review: obfuscation


def __getattr__(name):  # review: obfuscation
    return None
