"""Review aid (2026-11-30), CPU only: a transcription of gluon_bwd's control flow (producer + two
consumer warpgroups per CTA, the 4-stage ring, ready/empty mbarriers with counts, expect-tx
bytes and parities, the causal skips) run under random interleavings with TMA copies landing at
random later times, and the tiles' math in float64 numpy. Checks:
  - no deadlock (every agent finishes), no mbarrier tx-count underflow, every phase completes
    with exactly the arrivals/bytes the init count and the expect asked for;
  - a consumer only reads a stage that holds the tile it expects, fully landed, and the producer
    never overwrites a stage a consumer is still reading (between its ready-wait and its
    empty-arrive);
  - dq, dk, dv equal float64 math (relative error ~1e-13).
It tests the index/trip-count/parity logic as transcribed, not the Gluon compiler.

    .venv/bin/python .whl/g38b/sim_schedule.py
"""
import random

import numpy as np

BLK, STAGES = 64, 4
TILE = BLK * 64 * 2          # bytes of a [64, 64] bf16 tile
ROW = BLK * 4                # bytes of a [64] fp32 chunk


class Bar:
    def __init__(self, name, count):
        self.name, self.count = name, count
        self.pending, self.tx, self.phase = count, 0, 0

    def _check(self):
        assert self.tx >= 0, f"{self.name}: tx underflow"
        assert self.pending >= 0, f"{self.name}: too many arrivals in phase {self.phase}"
        if self.pending == 0 and self.tx == 0:
            self.phase += 1
            self.pending = self.count

    def arrive(self):
        self.pending -= 1
        self._check()

    def expect(self, nbytes):    # mbarrier.arrive.expect_tx: an arrival plus bytes
        self.tx += nbytes
        self.pending -= 1
        self._check()

    def complete_tx(self, nbytes):
        self.tx -= nbytes
        self._check()

    def done(self, parity):      # try_wait.parity: the phase of this parity has completed
        return (self.phase & 1) != parity


class CTA:
    """Runs agents (generators yielding ('wait', bar, parity) or None) and pending copies."""

    def __init__(self, rng):
        self.rng = rng
        self.copies = []         # (bar, nbytes, landing callback)
        self.reading = {}        # stage -> set of consumer ids reading it

    def copy(self, bar, nbytes, land):
        self.copies.append((bar, nbytes, land))

    def run(self, agents):
        state = {i: None for i in range(len(agents))}   # blocked-on condition
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
                    if w is None:
                        continue
                    if w[0].done(w[1]) and self.rng.random() < 0.5:
                        continue
                    state[idx] = w
                    break
            except StopIteration:
                alive.discard(idx)


def exp2(x):
    return np.exp2(x)


# ---------------------------------------------------------------------------------------------
# dK/dV kernel (transcribed from _dkdv_kernel / _dkdv_producer / _dkdv_consumer / _dkdv_step)
# ---------------------------------------------------------------------------------------------

def dkdv_cta(pid, X, BH, S, causal, qk_scale, scale, rng, dk_out, dv_out):
    Q, K, V, DO, LSE, DL = X
    n_kb = S // (2 * BLK)
    if causal:
        hz, blk = pid % BH, pid // BH
    else:
        hz, blk = pid // n_kb, pid % n_kb
    start_n = blk * 2 * BLK
    kv_row = hz * S + start_n
    q_lo = start_n if causal else 0
    n_it = (S - q_lo) // BLK
    q_row0 = hz * S + q_lo

    cta = CTA(rng)
    kv_bar = Bar("kv_bar", 1)
    ready = [Bar(f"ready{i}", 1) for i in range(STAGES)]
    empty = [Bar(f"empty{i}", 2) for i in range(STAGES)]
    stage = [None] * STAGES          # (row, landed parts) of each stage
    kvs = {}

    def producer():
        kv_bar.expect(4 * TILE)
        for w in range(2):
            r = kv_row + w * BLK
            cta.copy(kv_bar, TILE, lambda r=r, w=w: kvs.__setitem__(("k", w), K[r:r + BLK].copy()))
            cta.copy(kv_bar, TILE, lambda r=r, w=w: kvs.__setitem__(("v", w), V[r:r + BLK].copy()))
        for i in range(n_it):
            s = i % STAGES
            yield (empty[s], ((i // STAGES) & 1) ^ 1)
            assert not cta.reading.get(s), f"producer overwrites stage {s} while read"
            ready[s].expect(2 * TILE + 2 * ROW)
            row = q_row0 + i * BLK
            stage[s] = {"row": row}
            for name, src, nb in (("q", Q, TILE), ("do", DO, TILE), ("lse", LSE, ROW), ("dl", DL, ROW)):
                cta.copy(ready[s], nb, lambda s=s, name=name, src=src, row=row:
                         stage[s].__setitem__(name, src[row:row + BLK].copy()))
            yield None

    def step(wg, i, kop, vop, dk, dv, mask):
        s = i % STAGES
        yield (ready[s], (i // STAGES) & 1)
        cta.reading.setdefault(s, set()).add(wg)
        st_ = stage[s]
        assert st_["row"] == q_row0 + i * BLK and all(k in st_ for k in ("q", "do", "lse", "dl")), \
            f"dkdv WG{wg} step {i}: stage {s} holds row {st_['row']}, parts {list(st_)}"
        q, do, lse, dl = st_["q"], st_["do"], st_["lse"], st_["dl"]
        yield None
        st = kop @ q.T
        pt = exp2(st * qk_scale - lse[None, :])
        if mask:
            r = np.arange(BLK)[:, None]
            c = np.arange(BLK)[None, :]
            pt = np.where(c >= r, pt, 0.0)
        dpt = vop @ do.T
        dv += pt @ do
        dst = pt * (dpt - dl[None, :])
        dk += dst @ q
        cta.reading[s].discard(wg)
        empty[s].arrive()

    def consumer(wg):
        yield (kv_bar, 0)
        kop, vop = kvs[("k", wg)], kvs[("v", wg)]
        dk = np.zeros((BLK, 64))
        dv = np.zeros((BLK, 64))
        if causal:
            if wg == 1:
                yield (ready[0], 0)
                empty[0].arrive()
            yield from step(wg, wg, kop, vop, dk, dv, True)
            i0 = wg + 1
        else:
            i0 = 0
        for i in range(i0, n_it):
            yield from step(wg, i, kop, vop, dk, dv, False)
        r = kv_row + wg * BLK
        dk_out[r:r + BLK] = dk * scale
        dv_out[r:r + BLK] = dv

    cta.run([consumer(0), consumer(1), producer()])
    for b in [kv_bar] + ready + empty:
        assert b.pending == b.count and b.tx == 0, f"{b.name} left mid-phase"


# ---------------------------------------------------------------------------------------------
# dQ kernel (transcribed from _dq_kernel / _dq_producer / _dq_consumer / _dq_step)
# ---------------------------------------------------------------------------------------------

def dq_cta(pid, X, BH, S, causal, qk_scale, scale, rng, dq_out):
    Q, K, V, DO, LSE, DL = X
    n_qb = S // (2 * BLK)
    if causal:
        hz, blk = pid % BH, n_qb - 1 - pid // BH
    else:
        hz, blk = pid // n_qb, pid % n_qb
    start_m = blk * 2 * BLK
    q_row = hz * S + start_m
    kv_row0 = hz * S
    n_kv = start_m // BLK + 2 if causal else S // BLK

    cta = CTA(rng)
    qdo_bar = Bar("qdo_bar", 1)
    ready = [Bar(f"ready{i}", 1) for i in range(STAGES)]
    empty = [Bar(f"empty{i}", 2) for i in range(STAGES)]
    stage = [None] * STAGES
    qds = {}

    def producer():
        qdo_bar.expect(4 * TILE)
        for w in range(2):
            r = q_row + w * BLK
            cta.copy(qdo_bar, TILE, lambda r=r, w=w: qds.__setitem__(("q", w), Q[r:r + BLK].copy()))
            cta.copy(qdo_bar, TILE, lambda r=r, w=w: qds.__setitem__(("do", w), DO[r:r + BLK].copy()))
        for j in range(n_kv):
            s = j % STAGES
            yield (empty[s], ((j // STAGES) & 1) ^ 1)
            assert not cta.reading.get(s), f"producer overwrites stage {s} while read"
            ready[s].expect(2 * TILE)
            row = kv_row0 + j * BLK
            stage[s] = {"row": row}
            for name, src in (("k", K), ("v", V)):
                cta.copy(ready[s], TILE, lambda s=s, name=name, src=src, row=row:
                         stage[s].__setitem__(name, src[row:row + BLK].copy()))
            yield None

    def step(wg, j, qop, doop, lse, delta, dq, mask):
        s = j % STAGES
        yield (ready[s], (j // STAGES) & 1)
        cta.reading.setdefault(s, set()).add(wg)
        st_ = stage[s]
        assert st_["row"] == kv_row0 + j * BLK and "k" in st_ and "v" in st_, \
            f"dq WG{wg} step {j}: stage {s} holds row {st_['row']}, parts {list(st_)}"
        k, v = st_["k"], st_["v"]
        yield None
        sc = qop @ k.T
        p = exp2(sc * qk_scale - lse[:, None])
        if mask:
            r = np.arange(BLK)[:, None]
            c = np.arange(BLK)[None, :]
            p = np.where(c <= r, p, 0.0)
        dp = doop @ v.T
        ds = p * (dp - delta[:, None])
        dq += ds @ k
        cta.reading[s].discard(wg)
        empty[s].arrive()

    def consumer(wg):
        rows = slice(q_row + wg * BLK, q_row + wg * BLK + BLK)
        lse, delta = LSE[rows], DL[rows]
        yield (qdo_bar, 0)
        qop, doop = qds[("q", wg)], qds[("do", wg)]
        dq = np.zeros((BLK, 64))
        n_full = start_m // BLK + wg if causal else n_kv
        for j in range(n_full):
            yield from step(wg, j, qop, doop, lse, delta, dq, False)
        if causal:
            yield from step(wg, n_full, qop, doop, lse, delta, dq, True)
            if wg == 0:
                sk = n_full + 1
                yield (ready[sk % STAGES], (sk // STAGES) & 1)
                empty[sk % STAGES].arrive()
        dq_out[rows] = dq * scale

    cta.run([consumer(0), consumer(1), producer()])
    for b in [qdo_bar] + ready + empty:
        assert b.pending == b.count and b.tx == 0, f"{b.name} left mid-phase"


# ---------------------------------------------------------------------------------------------

def reference(q, k, v, do, causal, scale):
    s = np.einsum("bhid,bhjd->bhij", q, k) * scale
    S = q.shape[2]
    if causal:
        s = np.where(np.tril(np.ones((S, S), bool)), s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    o = p @ v
    dv = np.swapaxes(p, -1, -2) @ do
    dp = do @ np.swapaxes(v, -1, -2)
    ds = p * (dp - (do * o).sum(-1, keepdims=True))
    return scale * ds @ k, scale * np.swapaxes(ds, -1, -2) @ q, dv, o, s


def check(B, H, S, causal, seed):
    rng = random.Random(seed)
    g = np.random.default_rng(seed)
    q, k, v, do = (g.standard_normal((B, H, S, 64)) for _ in range(4))
    scale = 1 / 8
    qk_scale = scale * np.log2(np.e)
    rdq, rdk, rdv, o, s = reference(q, k, v, do, causal, scale)
    # lse2 in base 2 over the scaled scores, as the solution's forward stores it
    lse2 = np.log2(np.exp2(np.where(np.isfinite(s), s / scale * qk_scale, -np.inf)).sum(-1))
    delta = (do * o).sum(-1)
    flat = lambda t: t.reshape(B * H * S, *t.shape[3:])  # noqa: E731
    X = (flat(q), flat(k), flat(v), flat(do), flat(lse2), flat(delta))
    dq, dk, dv = (np.full((B * H * S, 64), np.nan) for _ in range(3))
    grid = B * H * (S // (2 * BLK))
    for pid in range(grid):
        dkdv_cta(pid, X, B * H, S, causal, qk_scale, scale, rng, dk, dv)
        dq_cta(pid, X, B * H, S, causal, qk_scale, scale, rng, dq)
    errs = [np.linalg.norm(a - flat(r)) / np.linalg.norm(r)
            for a, r in ((dq, rdq), (dk, rdk), (dv, rdv))]
    ok = all(np.isfinite(e) and e < 1e-10 for e in errs)
    print(f"B {B} H {H} S {S} causal {causal} seed {seed}: rel err dq {errs[0]:.1e} dk {errs[1]:.1e} "
          f"dv {errs[2]:.1e} {'OK' if ok else 'FAIL'}")
    return ok


if __name__ == "__main__":
    ok = True
    for seed in range(3):
        for (B, H, S) in ((1, 1, 128), (1, 2, 256), (2, 3, 640), (1, 2, 1024)):
            for causal in (True, False):
                ok &= check(B, H, S, causal, seed)
    print("ALL OK" if ok else "FAILURES")
