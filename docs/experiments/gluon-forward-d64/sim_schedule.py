"""Review aid, CPU only: a transcription of gluon_fwd64's control flow (the producer warp and the
two consumer warpgroups of a CTA, the K/V ring with its ready/empty mbarriers, counts, expect-tx
bytes and parities, AHEAD and plain step orders, the causal loop bounds) run under random
interleavings, TMA copies landing at random later times, wgmmas reading their shared-memory
operands from issue to retire. The tiles' math is modelled per element (S from one float64
product rounded to fp32; P·V added to the fp32 accumulator from float64), in the kernel's
order of operations. Checks:
  - no deadlock; every mbarrier phase completes with exactly the arrivals and bytes expected
    (no tx underflow, no surplus arrival);
  - a wgmma only reads a stage holding the block it expects, fully landed, from its issue to its
    retire; the producer never issues a copy into a stage a wgmma may still read or that a
    consumer has not released;
  - o and lse2 are BIT-identical to a transcription of the Triton _fwd_kernel's sequence (128-row
    programs, unmasked blocks to mid, masked blocks mid..end, the same per-element model), and
    close to float64 softmax attention.
It tests the index, trip-count, parity and masking logic as transcribed, not Gluon's compiler.
--bugs: seeded bugs the checks must catch.

    .venv/bin/python .whl/g38d/sim_schedule.py [--bugs]
"""
import random
import sys

import torch

BLOCK_M, WG_M, BLOCK_N, D = 128, 64, 64, 64
TILE = BLOCK_N * D * 2                # bytes of a [64, 64] bf16 tile
F32 = torch.float32
BUG = None                            # --bugs sets this


class Bar:
    def __init__(self, name, count):
        self.name, self.count = name, count
        self.pending, self.tx, self.phase = count, 0, 0

    def _check(self):
        assert self.tx >= 0, f"{self.name}: tx underflow"
        assert self.pending >= 0, f"{self.name}: surplus arrival in phase {self.phase}"
        if self.pending == 0 and self.tx == 0:
            self.phase += 1
            self.pending = self.count

    def arrive(self):
        self.pending -= 1
        self._check()

    def expect(self, nbytes):        # mbarrier.arrive.expect_tx: bytes, then an arrival
        self.tx += nbytes
        self.pending -= 1
        self._check()

    def complete_tx(self, nbytes):
        self.tx -= nbytes
        self._check()

    def done(self, parity):          # try_wait.parity: the phase of that parity has completed
        return (self.phase & 1) != parity


class CTA:
    """Agents are generators yielding ('wait', bar, parity) or None; copies land at random."""

    def __init__(self, rng):
        self.rng = rng
        self.copies = []

    def copy(self, bar, nbytes, land):
        self.copies.append((bar, nbytes, land))

    def run(self, agents):
        state = {i: None for i in range(len(agents))}
        alive = set(range(len(agents)))
        while alive or self.copies:
            runnable = [i for i in alive if state[i] is None or state[i][0].done(state[i][1])]
            choices = [("a", i) for i in runnable] + [("c", j) for j in range(len(self.copies))]
            if not choices:
                raise RuntimeError("DEADLOCK: " + ", ".join(
                    f"agent {i} waits {state[i][0].name} parity {state[i][1]} (phase "
                    f"{state[i][0].phase}, pending {state[i][0].pending}, tx {state[i][0].tx})"
                    for i in alive))
            kind, idx = self.rng.choice(choices)
            if kind == "c":
                bar, nbytes, land = self.copies.pop(idx)
                land()
                bar.complete_tx(nbytes)
                continue
            state[idx] = None
            try:
                while True:
                    w = next(agents[idx])
                    if w is not None:
                        w = w[1:]             # ('wait', bar, parity) -> (bar, parity)
                    if w is None:
                        if self.rng.random() < 0.3:
                            break             # let someone else run
                        continue
                    if w[0].done(w[1]) and self.rng.random() < 0.5:
                        continue
                    state[idx] = w
                    break
            except StopIteration:
                alive.discard(idx)


# --- the per-element math model (the same functions for both transcriptions) -----------------

def f32(x):
    return torch.tensor(x, dtype=F32) if not isinstance(x, torch.Tensor) else x.to(F32)


def scores(q, k):                    # S = Q·Kᵀ: an fp32 wgmma result, per element
    return (q.double() @ k.double().T).to(F32)


def softmax_block(s, m_i, l_i, qk_scale, rows, cols, mask):
    """_fwd_inner's block, in its order: where (before the exp2), max then multiply, maximum,
    p = ex2(fma(s, qk_scale, -m_new)), alpha = ex2(m - m_new), l = fma(l, alpha, rowsum(p))."""
    if mask:
        s = torch.where(rows[:, None] >= cols[None, :], s, f32(-1.0e30))
    m_new = torch.maximum(m_i, s.max(dim=1).values * qk_scale)
    p = torch.exp2((s.double() * qk_scale.double() - m_new.double()[:, None]).to(F32))
    alpha = torch.exp2(m_i - m_new)
    l_i = (l_i.double() * alpha.double() + p.double().sum(dim=1).to(F32).double()).to(F32)
    return p, m_new, l_i, alpha


def pv(acc, p, v):                   # acc + bf16(p)·V: an fp32 wgmma accumulation, per element
    return (acc.double() + p.to(torch.bfloat16).double() @ v.double()).to(F32)


def epilogue(acc, m_i, l_i):
    return (acc / l_i[:, None]).to(torch.bfloat16), m_i + torch.log2(l_i)


# --- the Triton kernel's sequence (_fwd_kernel, CONFIGS[64]: BLOCK_M 128, BLOCK_N 64) -----------

def triton_forward(q, k, v, causal, qk_scale):
    BH, S, _ = q.shape
    o = torch.empty(BH, S, D, dtype=torch.bfloat16)
    lse = torch.empty(BH, S, dtype=F32)
    for hz in range(BH):
        for start_m in range(S // BLOCK_M):
            rows = start_m * BLOCK_M + torch.arange(BLOCK_M)
            m_i = torch.full((BLOCK_M,), float("-inf"), dtype=F32)
            l_i = torch.zeros(BLOCK_M, dtype=F32)
            acc = torch.zeros(BLOCK_M, D, dtype=F32)
            if causal:
                mid, end = start_m * BLOCK_M, (start_m + 1) * BLOCK_M
            else:
                mid, end = (S // BLOCK_N) * BLOCK_N, S
            for lo, hi, masked in ((0, mid, False), (mid, end, True)):
                for start_n in range(lo, hi, BLOCK_N):
                    cols = start_n + torch.arange(BLOCK_N)
                    s = scores(q[hz, rows], k[hz, cols])
                    p, m_i, l_i, alpha = softmax_block(s, m_i, l_i, qk_scale, rows, cols,
                                                       masked and causal)
                    acc = pv(acc * alpha[:, None], p, v[hz, cols])
            o[hz, rows], lse[hz, rows] = epilogue(acc, m_i, l_i)
    return o, lse


# --- gluon_fwd64's CTA, transcribed -------------------------------------------------------------

def gluon_cta(pid, q, k, v, BH, S, causal, ahead, stages, qk_scale, rng, o_out, lse_out):
    n_qb = S // BLOCK_M
    if causal:
        hz, qb = pid % BH, n_qb - 1 - pid // BH
    else:
        hz, qb = pid // n_qb, pid % n_qb
    start_m = qb * BLOCK_M
    if causal:
        n_full, n_kv = start_m // BLOCK_N, (start_m + BLOCK_M) // BLOCK_N
    else:
        n_full = n_kv = S // BLOCK_N
    if BUG == "n_kv-1":
        n_kv -= 1
        n_full = min(n_full, n_kv)

    cta = CTA(rng)
    q_bar = [Bar(f"q_bar{w}", 1) for w in range(2)]
    ready = [Bar(f"ready{i}", 1) for i in range(stages)]
    empty = [Bar(f"empty{i}", 2) for i in range(stages)]
    k_st = [None] * stages            # the block a stage holds once landed (None: in flight)
    v_st = [None] * stages
    q_st = [None, None]
    readers = [set() for _ in range(stages)]   # in-flight wgmmas reading a stage
    released = [set() for _ in range(stages)]  # consumers that released the current occupant
    loaded = [None] * stages

    def producer():
        for w in range(2):
            q_bar[w].expect(TILE)
            q_st[w] = None

            def land(w=w):
                q_st[w] = w
            cta.copy(q_bar[w], TILE, land)
        for j in range(n_kv):
            s = j % stages
            par = ((j // stages) & 1) ^ 1
            if BUG == "no-xor":
                par = (j // stages) & 1
            yield ("wait", empty[s], par)
            if loaded[s] is not None:
                assert released[s] == {0, 1}, f"stage {s} refilled before both released it"
            assert not readers[s], f"stage {s} refilled while {readers[s]} read it"
            released[s] = set()
            loaded[s] = j
            ready[s].expect(2 * TILE if BUG != "short-expect" else TILE)
            k_st[s] = v_st[s] = None

            def land_k(s=s, j=j):
                assert not readers[s], f"stage {s} written while read"
                k_st[s] = j

            def land_v(s=s, j=j):
                assert not readers[s], f"stage {s} written while read"
                v_st[s] = j
            cta.copy(ready[s], TILE, land_k)
            cta.copy(ready[s], TILE, land_v)

    def consumer(wg):
        row0 = start_m + wg * WG_M
        rows = row0 + torch.arange(WG_M)
        qq = q[hz, rows]
        kk, vv = k[hz], v[hz]
        yield ("wait", q_bar[wg], 0)
        assert q_st[wg] == wg
        inflight = []                 # (stage, kind, block, result thunk)

        def issue_s(j):
            s = j % stages
            yield ("wait", ready[s], (j // stages) & 1)
            assert k_st[s] == j, f"WG{wg}: S_{j} reads stage {s} holding {k_st[s]}"
            readers[s].add((wg, "K", j))
            cols = j * BLOCK_N + torch.arange(BLOCK_N)
            inflight.append((s, "K", j, scores(qq, kk[cols])))

        def issue_pv(j, acc, p):
            s = j % stages
            assert v_st[s] == j, f"WG{wg}: P·V_{j} reads stage {s} holding {v_st[s]}"
            readers[s].add((wg, "V", j))
            cols = j * BLOCK_N + torch.arange(BLOCK_N)
            inflight.append((s, "V", j, (acc, p, vv[cols])))

        def wait(n):                  # wgmma.wait_group n: retire all but the last n, in order
            out = []
            while len(inflight) > n:
                s, kind, j, res = inflight.pop(0)
                assert (k_st if kind == "K" else v_st)[s] == j, "operand changed under a wgmma"
                readers[s].discard((wg, kind, j))
                out.append(pv(*res) if kind == "V" else res)
            return out

        def release(j):
            s = j % stages
            assert loaded[s] == j and wg not in released[s]
            released[s].add(wg)
            empty[s].arrive()

        m_i = torch.full((WG_M,), float("-inf"), dtype=F32)
        l_i = torch.zeros(WG_M, dtype=F32)
        o = torch.zeros(WG_M, D, dtype=F32)

        def cols_of(j):
            return j * BLOCK_N + torch.arange(BLOCK_N)

        yield from issue_s(0)
        if ahead:
            (s_cur,) = wait(0)
            yield None
            yield from issue_s(1)
            p_op, m_i, l_i, alpha = softmax_block(s_cur, m_i, l_i, qk_scale, rows, cols_of(0),
                                                  causal)
            yield None
            (s_cur,) = wait(0)
            o = o * alpha[:, None]
            n_plain = n_full if causal else n_kv - 1
            trips = [(j, False, False) for j in range(1, n_plain)]
            if causal:
                trips += [(j, True, False) for j in range(max(n_full, 1), n_kv - 1)]
            trips += [(n_kv - 1, causal, True)]
            for j, mask, last in trips:
                if not last:
                    yield from issue_s(j + 1)
                issue_pv(j - 1, o, p_op)
                yield None
                p_next, m_i, l_i, alpha = softmax_block(s_cur, m_i, l_i, qk_scale, rows,
                                                        cols_of(j), mask)
                yield None
                if last:
                    (o,) = wait(0)
                else:
                    s_cur, o = wait(0)
                if BUG != "no-release":
                    release(j - 1)
                o = o * alpha[:, None]
                p_op = p_next
        else:
            (s,) = wait(0)
            p_op, m_i, l_i, alpha = softmax_block(s, m_i, l_i, qk_scale, rows, cols_of(0),
                                                  causal)
            o = o * alpha[:, None]
            steps = [(j, False) for j in range(1, n_full)]
            if causal:
                steps += [(j, True) for j in range(max(n_full, 1), n_kv)]
            for j, mask in steps:
                yield from issue_s(j)
                issue_pv(j - 1, o, p_op)
                if BUG == "release-early":
                    release(j - 1)
                yield None
                (s,) = wait(1)
                p_next, m_i, l_i, alpha = softmax_block(s, m_i, l_i, qk_scale, rows,
                                                        cols_of(j), mask)
                yield None
                (o,) = wait(0)
                if BUG != "release-early":
                    release(j - 1)
                o = o * alpha[:, None]
                p_op = p_next
        issue_pv(n_kv - 1, o, p_op)
        yield None
        (o,) = wait(0)
        release(n_kv - 1)
        o_out[hz, rows], lse_out[hz, rows] = epilogue(o, m_i, l_i)

    cta.run([consumer(0), consumer(1), producer()])
    for s in range(stages):
        assert not readers[s]


def reference(q, k, v, causal, scale):
    s = (q.double() @ k.double().transpose(1, 2)) * scale
    if causal:
        S = q.shape[1]
        s = s.masked_fill(~torch.ones(S, S, dtype=torch.bool).tril(), float("-inf"))
    return torch.softmax(s, -1) @ v.double(), torch.logsumexp(s, -1) / torch.log(
        torch.tensor(2.0, dtype=torch.float64))


def run_case(BH, S, causal, ahead, stages, seed):
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(BH, S, D, generator=g).to(torch.bfloat16) for _ in range(3))
    scale = 1 / 8.0
    qk_scale = f32(scale * 1.4426950408889634)
    rng = random.Random(seed)
    o = torch.empty(BH, S, D, dtype=torch.bfloat16)
    lse = torch.empty(BH, S, dtype=F32)
    order = list(range(BH * (S // BLOCK_M)))
    for pid in order:
        gluon_cta(pid, q, k, v, BH, S, causal, ahead, stages, qk_scale, rng, o, lse)
    o_t, lse_t = triton_forward(q, k, v, causal, qk_scale)
    o_r, lse_r = reference(q, k, v, causal, scale)
    same_o = torch.equal(o.view(torch.int16), o_t.view(torch.int16))
    same_l = torch.equal(lse.view(torch.int32), lse_t.view(torch.int32))
    err = ((o.double() - o_r).norm() / o_r.norm()).item()
    errl = (lse.double() - lse_r).abs().max().item()
    ok = same_o and same_l and err < 1e-2 and errl < 1e-4
    return ok, f"o same bits {same_o}, lse2 same bits {same_l}, vs float64: o {err:.2e}, " \
               f"lse2 {errl:.1e}"


def main():
    global BUG
    if "--bugs" in sys.argv:
        for bug, ahead in (("no-xor", True), ("short-expect", True), ("no-release", True),
                           ("release-early", False), ("n_kv-1", True)):
            BUG = bug
            caught = []
            for seed in range(8):     # a race shows only under some interleavings
                try:
                    ok, msg = run_case(2, 384, True, ahead, 2 if bug == "release-early" else 3,
                                       seed)
                    if not ok:
                        caught.append(msg)
                except (AssertionError, RuntimeError) as e:
                    caught.append(f"{type(e).__name__}: {str(e)[:150]}")
            what = f"caught in {len(caught)} of 8 seeds: {caught[0]}" if caught else "NOT CAUGHT"
            print(f"bug {bug:14s}: {what}")
        BUG = None
        # the AHEAD order needs 3 stages: at 2, its S_{j+1} waits for a stage it holds itself
        try:
            ok, msg = run_case(1, 384, False, True, 2, 1)
            print(f"AHEAD with 2 stages: {'ran' if ok else msg}")
        except (AssertionError, RuntimeError) as e:
            print(f"AHEAD with 2 stages: {type(e).__name__}: {str(e)[:150]}")
        return
    all_ok = True
    for BH, S in ((1, 128), (2, 256), (3, 640), (1, 1024)):
        for causal in (True, False):
            for ahead, stages in ((True, 6), (True, 3), (False, 6), (False, 2)):
                for seed in (0, 1):
                    try:
                        ok, msg = run_case(BH, S, causal, ahead, stages, seed)
                    except (AssertionError, RuntimeError) as e:
                        ok, msg = False, f"{type(e).__name__}: {e}"
                    all_ok &= ok
                    print(f"BH {BH} S {S:5d} {'causal    ' if causal else 'not causal'} "
                          f"{'AHEAD' if ahead else 'plain'} stages {stages} seed {seed}: "
                          f"{'ok  ' if ok else 'FAIL'} {msg}", flush=True)
    print("ALL OK" if all_ok else "SOME FAILED")


if __name__ == "__main__":
    main()
