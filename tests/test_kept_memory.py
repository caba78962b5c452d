"""grader.judge.testing.kept_per_call, the rule of what a forward may keep for its backward (13's
score matrix, 10's mask), driven by a stand-in for the submission's process whose NVML figure
(`footprint`) grows by what each forward keeps: no GPU needed to see what the rule catches.

The rule counts the forbidden thing at the smallest element it could be stored in (one byte by
default), so an S x S matrix kept in uint8 is caught as surely as one in bf16, and the allowed
part (13: o and the statistics per row) stays allowed.
"""
import pytest

from grader.judge.check import Mismatch
from grader.judge.testing import kept_per_call

MIB = 2**20
# exercise 13's measurement: B 1, H 8, S 4096, D 64, bf16
B, H, S, D = 1, 8, 4096, 64
O_BYTES = B * H * S * D * 2
ROWS = B * H * S


class Process:
    """The submission's process as the judge sees it: its GPU memory, before and after."""

    def __init__(self, base: int, per_call: int):
        self.base, self.per_call, self.calls = base, per_call, 0

    def footprint(self):
        return self.base + self.calls * self.per_call

    def forward(self, i):
        self.calls += 1
        return i


def _kept(per_call, base=600 * MIB):
    p = Process(base, per_call)
    return kept_per_call(p, p.forward, forbidden_elements=B * H * S * S,
                         allowed=O_BYTES + 16 * ROWS, what="an S x S matrix kept per call",
                         fix="Save o and the log-sum-exp per row")


@pytest.mark.parametrize("kept", ["o", "o and an fp32 log-sum-exp per row",
                                  "o, the row max and the row sum in fp32"])
def test_what_the_backward_needs_is_allowed(kept):
    per_call = {"o": O_BYTES, "o and an fp32 log-sum-exp per row": O_BYTES + 4 * ROWS,
                "o, the row max and the row sum in fp32": O_BYTES + 8 * ROWS}[kept]
    assert len(_kept(per_call)) >= 8


@pytest.mark.parametrize("bytes_each, name", [(4, "float32"), (2, "bfloat16"), (1, "uint8")])
def test_a_score_matrix_is_caught_whatever_its_element_size(bytes_each, name):
    with pytest.raises(Mismatch) as e:
        _kept(O_BYTES + 4 * ROWS + bytes_each * B * H * S * S)
    assert "S x S matrix kept per call" in str(e.value) and "Save o" in str(e.value), e.value


def test_a_reserve_made_beforehand_cannot_hide_it():
    """A process that reserved 2 GiB first keeps a uint8 P per call in it until the reserve is
    full: K forwards are enough that half of them still need new memory."""
    reserve, p_bytes = 2048 * MIB, B * H * S * S

    class Reserving(Process):
        def footprint(self):
            kept = self.calls * (O_BYTES + p_bytes)
            return self.base + reserve + max(0, kept - reserve)
    p = Reserving(600 * MIB, 0)
    with pytest.raises(Mismatch):
        kept_per_call(p, p.forward, forbidden_elements=B * H * S * S, allowed=O_BYTES + 16 * ROWS,
                      what="an S x S matrix kept per call", fix="")


def test_a_mask_counts_at_one_bit_an_element():
    """10's rule: a mask of M x N elements, bit-packed (M N / 8 bytes), on top of y."""
    m = n = 4096
    allowed = m * n * 2 + 16 * m
    for per_call, caught in ((m * n * 2, False), (m * n * 2 + m * n // 8, True)):
        p = Process(600 * MIB, per_call)
        call = lambda: kept_per_call(p, p.forward, forbidden_elements=m * n, element_bits=1,
                                     allowed=allowed, what="a stored mask", fix="")
        if caught:
            with pytest.raises(Mismatch, match="a stored mask"):
                call()
        else:
            call()


def test_without_nvml_the_check_says_so():
    class NoFigure:
        def footprint(self):
            return None
    with pytest.raises(pytest.skip.Exception, match="NVML"):
        kept_per_call(NoFigure(), lambda i: i, forbidden_elements=1, allowed=0, what="", fix="")
