"""Names the review would read, pasted together from pieces: concatenation, join, f-strings,
%-formatting (folded and judged), and names computed where they cannot be folded."""
import operator

import torch

a = getattr(torch, "o" + "s")  # review: modules
b = getattr(torch, "".join(["s", "y", "s"]))  # review: modules
c = getattr(torch, f"{'_'}C")  # review: private
d = getattr(torch.library, "%s" % "__dict__")  # review: introspection
e = getattr(torch, chr(111) + chr(115))  # review: dynamic-name
f = operator.attrgetter("__glo" + "bals__")  # review: introspection
g = operator.attrgetter(str(1))  # review: dynamic-name
h = getattr  # review: dynamic-name
setattr(torch.library, "op" + "check", None)  # review: patch
path = "/pr" + "oc/self/mem"  # review: proc
