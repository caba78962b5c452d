"""CPU model of gluon_bwd128's schedule (adapted from .whl/g38b/sim_schedule.py), float64 numpy.

A transcription of the two kernels' control flow (a TMA producer warp + two consumer warpgroups
per CTA, the STAGES-deep ring, ready/empty mbarriers with arrival counts, expect-tx bytes and
parities, the causal skips, the DEFER pairs and their odd remainders) run under random
interleavings, with every TMA copy landing at a random later time, and each warpgroup's wgmmas
modelled as asynchronous groups (issued, retired in order by wait_group N). Checks:
  - no deadlock (every agent finishes), no tx-count underflow, no extra arrival in a phase,
    every barrier back at rest at the end (each phase got exactly its arrivals and bytes);
  - a consumer only reads a stage that holds the tile it expects, fully landed;
  - the producer never overwrites a stage between a consumer's ready-wait and its empty-arrive,
    and a consumer never arrives on a stage while one of its own wgmma groups that reads that
    stage is still in flight (the DEFER retire depths); the epilogue never overwrites the K/V
    (dQ: Q) buffer while a wgmma reading it is in flight;
  - a wgmma result (S, dP, the dK/dV/dQ accumulators) and a register operand are only used
    after the group that produces / reads it is retired;
  - dq, dk, dv equal float64 math (relative error ~1e-15).
It tests the index / trip-count / parity / retire logic as transcribed, not the Gluon compiler.
`--bugs` runs seeded bugs and shows that each one is caught.

    /work/main/.venv/bin/python /work/main/.whl/g38c/sim_schedule.py [--bugs]
"""
import random
import sys

import numpy as np

BLK, D = 64, 128
TILE = BLK * D * 2           # bytes of a [64, 128] bf16 tile
ROW = BLK * 4                # bytes of a [64] fp32 chunk
BUG = set()                  # seeded bugs (see BUGS below)


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


class Tok:
    def __init__(self, value, reads):
        self.value, self.reads, self.retired = value, set(reads), False


class WGMMA:
    """One warpgroup's async wgmma groups: issue appends a group, wait(n) retires all but the
    newest n (in order, as wgmma.wait_group does)."""

    def __init__(self, name):
        self.name, self.groups = name, []

    def issue(self, value, reads):
        t = Tok(value, reads)
        self.groups.append(t)
        return t

    def wait(self, n):
        while len(self.groups) > n:
            self.groups.pop(0).retired = True

    def val(self, t):
        assert t.retired, f"{self.name}: a wgmma result used before its group is retired"
        return t.value

    def free(self, what):
        assert not any(what in g.reads for g in self.groups), \
            f"{self.name}: {what} released / overwritten while a wgmma reading it is in flight"


class CTA:
    """Runs agents (generators yielding ('wait', bar, parity) or None) and pending copies."""

    def __init__(self, rng):
        self.rng = rng
        self.copies = []         # (bar, nbytes, landing callback)
        self.reading = {}        # stage -> set of consumer ids holding it

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


exp2 = np.exp2


# ---------------------------------------------------------------------------------------------
# dK/dV kernel (transcribed from _dkdv_kernel / _dkdv_producer / _dkdv_consumer / _dkdv_issue_s
# / _dkdv_issue_dp / _dkdv_rest / _dkdv_step / _dkdv_pair)
# ---------------------------------------------------------------------------------------------

def dkdv_cta(pid, X, BH, S, causal, qk_scale, scale, rng, dk_out, dv_out, cfg):
    Q, K, V, DO, LSE, DL = X
    STAGES, OVERLAP, DEFER = cfg["DKDV_STAGES"], cfg["DKDV_OVERLAP"], cfg["DKDV_DEFER"]
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
    stage = [None] * STAGES          # {"row", parts} of each stage

    def landed(i):
        # an arrival on empty[s] counts for the stage's current phase: it must be occupant i's,
        # so occupant i must have been loaded and landed (its ready phase completed) first
        assert ready[i % STAGES].phase > i // STAGES, \
            f"release of block {i} (stage {i % STAGES}) before it has landed"
    kvs = {}
    nbytes = 2 * TILE + 2 * ROW - (ROW if "short_expect" in BUG else 0)

    def producer():
        kv_bar.expect(4 * TILE)
        for w in range(2):
            r = kv_row + w * BLK
            cta.copy(kv_bar, TILE, lambda r=r, w=w: kvs.__setitem__(("k", w), K[r:r + BLK].copy()))
            cta.copy(kv_bar, TILE, lambda r=r, w=w: kvs.__setitem__(("v", w), V[r:r + BLK].copy()))
        for i in range(n_it):
            s = i % STAGES
            par = ((i // STAGES) & 1) ^ (0 if "no_xor" in BUG else 1)
            yield (empty[s], par)
            assert not cta.reading.get(s), f"producer overwrites stage {s} while it is read"
            ready[s].expect(nbytes)
            row = q_row0 + i * BLK
            stage[s] = {"row": row}
            for name, src, nb in (("q", Q, TILE), ("do", DO, TILE), ("lse", LSE, ROW),
                                  ("dl", DL, ROW)):
                cta.copy(ready[s], nb, lambda s=s, name=name, src=src, row=row:
                         stage[s].__setitem__(name, src[row:row + BLK].copy()))
            yield None

    def hold(wg, i):
        s = i % STAGES
        cta.reading.setdefault(s, set()).add(wg)
        st_ = stage[s]
        assert st_["row"] == q_row0 + i * BLK and all(k in st_ for k in ("q", "do", "lse", "dl")), \
            f"dkdv WG{wg} block {i}: stage {s} holds row {st_['row']}, parts {list(st_)}"
        return st_

    def release(wg, mm, i):
        s = i % STAGES
        mm.free(("stage", s))
        landed(i)
        cta.reading[s].discard(wg)
        empty[s].arrive()

    def issue_s(wg, mm, i, ka):
        s = i % STAGES
        yield (ready[s], (i // STAGES) & 1)
        st_ = hold(wg, i)
        return mm.issue(ka @ st_["q"].T, [("stage", s), ("kbuf", wg)])

    def issue_dp(wg, mm, i, vb):
        s = i % STAGES
        return mm.issue(vb @ stage[s]["do"].T, [("stage", s), ("vbuf", wg)])

    def rest(mm, i, st_tok, dpt_tok, dk, dv, mask):
        s = i % STAGES
        st_ = stage[s]
        mm.wait(1)                                      # Sᵀ_i done, dPᵀ_i may run
        pt = exp2(mm.val(st_tok) * qk_scale - st_["lse"][None, :])
        if mask:
            r = np.arange(BLK)[:, None]
            c = np.arange(BLK)[None, :]
            pt = np.where((c > r) if "mask_gt" in BUG else (c >= r), pt, 0.0)
        if OVERLAP:
            dv_tok = mm.issue(mm.val(dv) + pt @ st_["do"], [("stage", s)])
            mm.wait(1)                                  # dPᵀ_i done, dV_i may run
            dst = pt * (mm.val(dpt_tok) - st_["dl"][None, :])
            dk_tok = mm.issue(mm.val(dk) + dst @ st_["q"], [("stage", s)])
        else:
            mm.wait(0)
            dst = pt * (mm.val(dpt_tok) - st_["dl"][None, :])
            dv_tok = mm.issue(mm.val(dv) + pt @ st_["do"], [("stage", s)])
            dk_tok = mm.issue(mm.val(dk) + dst @ st_["q"], [("stage", s)])
        return dv_tok, dk_tok

    def step(wg, mm, i, ka, vb, dk, dv, mask):
        st_tok = yield from issue_s(wg, mm, i, ka)
        dpt_tok = issue_dp(wg, mm, i, vb)
        dv, dk = rest(mm, i, st_tok, dpt_tok, dk, dv, mask)
        mm.wait(0)
        release(wg, mm, i)
        return dk, dv

    def pair(wg, mm, i, ka, vb, dk, dv):
        st_tok = yield from issue_s(wg, mm, i, ka)
        dpt_tok = issue_dp(wg, mm, i, vb)
        dv, dk = rest(mm, i, st_tok, dpt_tok, dk, dv, False)
        st_tok = yield from issue_s(wg, mm, i + 1, ka)
        mm.wait(2 if "defer_wait2" in BUG else 1)        # retires dV_i, dK_i
        release(wg, mm, i)
        dpt_tok = issue_dp(wg, mm, i + 1, vb)
        dv, dk = rest(mm, i + 1, st_tok, dpt_tok, dk, dv, False)
        mm.wait(0)
        release(wg, mm, i + 1)
        return dk, dv

    def consumer(wg):
        mm = WGMMA(f"dkdv WG{wg}")
        yield (kv_bar, 0)
        ka, vb = kvs[("k", wg)], kvs[("v", wg)]
        dk = mm.issue(np.zeros((BLK, D)), [])      # the zero accumulators, "retired"
        dv = mm.issue(np.zeros((BLK, D)), [])
        mm.wait(0)
        if causal:
            if wg == 1 and "no_skip" not in BUG:
                yield (ready[0], 0)
                landed(0)
                empty[0].arrive()
            dk, dv = yield from step(wg, mm, wg, ka, vb, dk, dv, True)
            i0 = wg + 1
        else:
            i0 = 0
        if DEFER:
            for i in range(i0, n_it - 1, 2):
                dk, dv = yield from pair(wg, mm, i, ka, vb, dk, dv)
            if (n_it - i0) % 2 == 1 and "no_remainder" not in BUG:
                dk, dv = yield from step(wg, mm, n_it - 1, ka, vb, dk, dv, False)
        else:
            for i in range(i0, n_it):
                dk, dv = yield from step(wg, mm, i, ka, vb, dk, dv, False)
        mm.free(("kbuf", wg))                      # the epilogue overwrites the K, V halves
        mm.free(("vbuf", wg))
        r = kv_row + wg * BLK
        dk_out[r:r + BLK] = mm.val(dk) * scale
        dv_out[r:r + BLK] = mm.val(dv)

    cta.run([consumer(0), consumer(1), producer()])
    for b in [kv_bar] + ready + empty:
        assert b.pending == b.count and b.tx == 0, f"{b.name} left mid-phase"


# ---------------------------------------------------------------------------------------------
# dQ kernel (transcribed from _dq_kernel / _dq_producer / _dq_consumer / _dq_issue / _dq_rest /
# _dq_step / _dq_pair)
# ---------------------------------------------------------------------------------------------

def dq_cta(pid, X, BH, S, causal, qk_scale, scale, rng, dq_out, cfg):
    Q, K, V, DO, LSE, DL = X
    STAGES, DEFER = cfg["DQ_STAGES"], cfg["DQ_DEFER"]
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

    def landed(i):
        # an arrival on empty[s] counts for the stage's current phase: it must be occupant i's,
        # so occupant i must have been loaded and landed (its ready phase completed) first
        assert ready[i % STAGES].phase > i // STAGES, \
            f"release of block {i} (stage {i % STAGES}) before it has landed"

    def producer():
        qdo_bar.expect(4 * TILE)
        for w in range(2):
            r = q_row + w * BLK
            cta.copy(qdo_bar, TILE, lambda r=r, w=w: qds.__setitem__(("q", w), Q[r:r + BLK].copy()))
            cta.copy(qdo_bar, TILE, lambda r=r, w=w: qds.__setitem__(("do", w), DO[r:r + BLK].copy()))
        for j in range(n_kv):
            s = j % STAGES
            yield (empty[s], ((j // STAGES) & 1) ^ 1)
            assert not cta.reading.get(s), f"producer overwrites stage {s} while it is read"
            ready[s].expect(2 * TILE)
            row = kv_row0 + j * BLK
            stage[s] = {"row": row}
            for name, src in (("k", K), ("v", V)):
                cta.copy(ready[s], TILE, lambda s=s, name=name, src=src, row=row:
                         stage[s].__setitem__(name, src[row:row + BLK].copy()))
            yield None

    def issue(wg, mm, j, qop, doa):
        s = j % STAGES
        yield (ready[s], (j // STAGES) & 1)
        cta.reading.setdefault(s, set()).add(wg)
        st_ = stage[s]
        assert st_["row"] == kv_row0 + j * BLK and "k" in st_ and "v" in st_, \
            f"dq WG{wg} block {j}: stage {s} holds row {st_['row']}, parts {list(st_)}"
        s_tok = mm.issue(qop @ st_["k"].T, [("stage", s)])
        dp_tok = mm.issue(doa @ st_["v"].T, [("stage", s), ("dobuf", wg)])
        return s_tok, dp_tok

    def rest(mm, j, s_tok, dp_tok, lse, delta, dq, mask):
        s = j % STAGES
        mm.wait(1)                                      # S_j done, dP_j may run
        p = exp2(mm.val(s_tok) * qk_scale - lse[:, None])
        if mask:
            r = np.arange(BLK)[:, None]
            c = np.arange(BLK)[None, :]
            p = np.where(c <= r, p, 0.0)
        mm.wait(1 if "dp_wait1" in BUG else 0)
        ds = p * (mm.val(dp_tok) - delta[:, None])
        return mm.issue(mm.val(dq) + ds @ stage[s]["k"], [("stage", s)])

    def release(wg, mm, j):
        s = j % STAGES
        mm.free(("stage", s))
        landed(j)
        cta.reading[s].discard(wg)
        empty[s].arrive()

    def step(wg, mm, j, qop, doa, lse, delta, dq, mask):
        s_tok, dp_tok = yield from issue(wg, mm, j, qop, doa)
        dq = rest(mm, j, s_tok, dp_tok, lse, delta, dq, mask)
        mm.wait(0)
        release(wg, mm, j)
        return dq

    def pair(wg, mm, j, qop, doa, lse, delta, dq):
        s_tok, dp_tok = yield from issue(wg, mm, j, qop, doa)
        dq = rest(mm, j, s_tok, dp_tok, lse, delta, dq, False)
        s_tok, dp_tok = yield from issue(wg, mm, j + 1, qop, doa)
        mm.wait(2)                                      # retires dQ_j
        first, second = (j + 1, j) if "dq_arrive_early" in BUG else (j, j + 1)
        release(wg, mm, first)
        dq = rest(mm, j + 1, s_tok, dp_tok, lse, delta, dq, False)
        mm.wait(0)
        release(wg, mm, second)
        return dq

    def consumer(wg):
        mm = WGMMA(f"dq WG{wg}")
        rows = slice(q_row + wg * BLK, q_row + wg * BLK + BLK)
        lse, delta = LSE[rows], DL[rows]
        yield (qdo_bar, 0)
        qop, doa = qds[("q", wg)], qds[("do", wg)]
        dq = mm.issue(np.zeros((BLK, D)), [])
        mm.wait(0)
        n_full = start_m // BLK + wg if causal else n_kv
        if DEFER:
            for j in range(0, n_full - 1, 2):
                dq = yield from pair(wg, mm, j, qop, doa, lse, delta, dq)
            if n_full % 2 == 1:
                dq = yield from step(wg, mm, n_full - 1, qop, doa, lse, delta, dq, False)
        else:
            for j in range(n_full):
                dq = yield from step(wg, mm, j, qop, doa, lse, delta, dq, False)
        if causal:
            dq = yield from step(wg, mm, n_full, qop, doa, lse, delta, dq, True)
            if wg == 0:
                sk = n_full + 1
                if "skip_before_wait" not in BUG:
                    yield (ready[sk % STAGES], (sk // STAGES) & 1)
                landed(sk)
                empty[sk % STAGES].arrive()
        mm.free(("qbuf", wg))                       # the epilogue overwrites the Q half
        dq_out[rows] = mm.val(dq) * scale

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


DEFAULT = dict(DKDV_STAGES=4, DKDV_OVERLAP=True, DKDV_DEFER=False,
               DQ_STAGES=4, DQ_DEFER=False)


def check(B, H, S, causal, seed, cfg, quiet=False):
    rng = random.Random(seed)
    g = np.random.default_rng(seed)
    q, k, v, do = (g.standard_normal((B, H, S, D)) for _ in range(4))
    scale = 1 / np.sqrt(D)
    qk_scale = scale * np.log2(np.e)
    rdq, rdk, rdv, o, s = reference(q, k, v, do, causal, scale)
    # lse2 in base 2 over the scaled scores, as the solution's forward stores it
    lse2 = np.log2(np.exp2(np.where(np.isfinite(s), s / scale * qk_scale, -np.inf)).sum(-1))
    delta = (do * o).sum(-1)
    flat = lambda t: t.reshape(B * H * S, *t.shape[3:])  # noqa: E731
    X = (flat(q), flat(k), flat(v), flat(do), flat(lse2), flat(delta))
    dq, dk, dv = (np.full((B * H * S, D), np.nan) for _ in range(3))
    grid = B * H * (S // (2 * BLK))
    for pid in range(grid):
        dkdv_cta(pid, X, B * H, S, causal, qk_scale, scale, rng, dk, dv, cfg)
        dq_cta(pid, X, B * H, S, causal, qk_scale, scale, rng, dq, cfg)
    errs = [np.linalg.norm(a - flat(r)) / np.linalg.norm(r)
            for a, r in ((dq, rdq), (dk, rdk), (dv, rdv))]
    ok = all(np.isfinite(e) and e < 1e-10 for e in errs)
    if not quiet:
        print(f"B {B} H {H} S {S} {'causal' if causal else 'non-causal'} seed {seed} "
              f"{cfg_name(cfg)}: rel err dq {errs[0]:.1e} dk {errs[1]:.1e} dv {errs[2]:.1e} "
              f"{'OK' if ok else 'FAIL'}")
    return ok, errs


def cfg_name(cfg):
    return "/".join(f"{k.lower()}={int(v)}" for k, v in cfg.items() if DEFAULT[k] != v) or "default"


CONFIGS = [DEFAULT,
           dict(DEFAULT, DKDV_DEFER=True, DQ_DEFER=True),
           dict(DEFAULT, DKDV_OVERLAP=False, DKDV_DEFER=True, DQ_DEFER=True),
           dict(DEFAULT, DKDV_OVERLAP=False),
           dict(DEFAULT, DKDV_STAGES=3, DQ_STAGES=3, DKDV_DEFER=True, DQ_DEFER=True),
           dict(DEFAULT, DKDV_STAGES=2, DQ_STAGES=2, DKDV_DEFER=True, DQ_DEFER=True)]

# seeded bugs: (name, what it does, the config and shape that exercise it)
BUGS = [
    ("defer_wait2", "dK/dV pair retires with wait_group 2 instead of 1 (dV_i, dK_i still "
     "in flight when stage i is released)", dict(DEFAULT, DKDV_DEFER=True), (1, 1, 256, False)),
    ("no_xor", "producer's first empty-wait without the ^1 (waits for a phase that never "
     "completes)", DEFAULT, (1, 1, 256, False)),
    ("short_expect", "dK/dV ready expects 256 bytes too few", DEFAULT, (1, 1, 256, False)),
    ("no_remainder", "DEFER without the odd remainder step (causal WG0 has an odd count)",
     dict(DEFAULT, DKDV_DEFER=True), (1, 1, 256, True)),
    ("no_skip", "causal dK/dV WG1 does not release the skipped first block",
     DEFAULT, (1, 1, 256, True)),
    ("skip_before_wait", "causal dQ WG0 releases the skipped block before it has landed",
     DEFAULT, (1, 2, 512, True)),
    ("mask_gt", "diagonal mask c > r instead of c >= r", DEFAULT, (1, 1, 256, True)),
    ("dp_wait1", "dQ kernel waits for dP with wait_group 1 (dP used while in flight)",
     DEFAULT, (1, 1, 128, False)),
    ("dq_arrive_early", "dQ pair releases stage j+1 instead of j after the wait_group 2",
     dict(DEFAULT, DQ_DEFER=True), (1, 1, 256, False)),
]


def run_bugs():
    caught_all = True
    for name, what, cfg, (B, H, S, causal) in BUGS:
        BUG.clear()
        BUG.add(name)
        results = []
        for seed in range(4):
            try:
                ok, errs = check(B, H, S, causal, seed, cfg, quiet=True)
                results.append("numbers OK (not caught)" if ok else
                               f"WRONG NUMBERS (rel err dq {errs[0]:.1e} dk {errs[1]:.1e} "
                               f"dv {errs[2]:.1e})")
            except (AssertionError, RuntimeError) as e:
                results.append(f"{type(e).__name__}: {str(e)[:150]}")
        caught = all(not r.startswith("numbers OK") for r in results)
        caught_all &= caught
        print(f"bug {name}: {what}\n    -> {'CAUGHT' if caught else 'NOT CAUGHT'} in "
              f"{sum(not r.startswith('numbers OK') for r in results)}/4 seeds; first: {results[0]}")
    BUG.clear()
    print("ALL SEEDED BUGS CAUGHT" if caught_all else "SOME SEEDED BUGS NOT CAUGHT")
    return caught_all


if __name__ == "__main__":
    if "--bugs" in sys.argv:
        sys.exit(0 if run_bugs() else 1)
    ok = True
    for cfg in CONFIGS:
        for seed in range(2):
            for (B, H, S) in ((1, 1, 128), (1, 2, 256), (2, 1, 640), (1, 1, 1024)):
                for causal in (False, True):
                    ok &= check(B, H, S, causal, seed, cfg)[0]
    print("ALL OK" if ok else "FAILURES")
