"""Differential check of csrc/rules/tw_heads.c (and the files split from it) against the reference's
select_head.

Builds them into a shared library in /tmp, loads it with ctypes and compares, on
every code path (scalar, AVX2, AVX-512 where the CPU has them):

  * tw_select_heads with tokenwire.kernels.python.select_head over generated responses: the
    first invalid token and its reason, and every head before it (ids and value bits).
    Each response is re-run from the token after its first failure, so every generated
    head's decision is compared. Heads come from small id alphabets and value sets (ties
    everywhere, sentinels), dyadic probabilities (exact sums), realistic log-softmaxes,
    random supports, sampled logprobs at the isclose boundary, large heads, and heads
    whose exact fsum(exp) is put within a few ulps of 1.0001 and 1 -/+ 1e-4;
  * tw_compact_candidates with the reference's ``dict(list(dict(row).items())[:n])``;
  * tw_fsum_nonneg / tw_fsum_exp with math.fsum, including half-way cases.

Usage:
  python3 tests/c/check_heads.py [--heads N] [--seed S] [--sanitize]
  python3 tests/c/check_heads.py --dump-sample FILE   (the workload of test_heads --bench)

--sanitize builds with -fsanitize=address,undefined and re-runs itself with the ASan
runtime preloaded (leak detection off: CPython's own allocations).
"""

from __future__ import annotations

import argparse
import ctypes as C
import math
import random
import struct
import sys
import time
import types
from pathlib import Path

import clib
import numpy as np

ROOT = clib.ROOT
# The reference alone: a bare package object, so the compiled core (whatever state its
# build is in) is never imported.
_package = types.ModuleType("tokenwire")
_package.__path__ = [str(ROOT / "src" / "tokenwire")]
sys.modules.setdefault("tokenwire", _package)

from tokenwire.base._errors import MalformedResponseError  # noqa: E402
from tokenwire.kernels.python import select_head  # noqa: E402

OUT = Path("/tmp/tw_heads_check")
SENTINEL = -9999.0
REASONS = {
    "Sampler head and sampled-token logprob disagree": 1,
    "Missing sampling-support probabilities": 2,
    "Sampler probabilities must normalize over the recorded support": 3,
    "Invalid sampler head probability mass": 4,
    "Engine returned fewer top logprobs than requested": 5,
}
NAMES = {v: k for k, v in REASONS.items()} | {0: "ok", 6: "nomem"}
SHORT = {0: "ok", 1: "disagree", 2: "missing-support", 3: "normalize", 4: "mass", 5: "fewer"}
PATH_NAMES = {1: "scalar", 2: "avx2", 3: "avx512", 4: "neon"}


def build(sanitize: bool) -> Path:
    sources = [f"rules/{name}" for name in ("tw_heads.c", "tw_compact_candidates.c", "tw_compact_heads.c",
                                            "tw_sum.c", "tw_exp.c", "tw_rank.c", "tw_validate.c")]
    return clib.build(OUT, "twheads", sources, sanitize=sanitize)


P64 = C.POINTER(C.c_int64)
PD = C.POINTER(C.c_double)


def ptr(a: np.ndarray, typ, offset: int = 0):
    return C.cast(a.ctypes.data + offset * a.itemsize, typ)


class Lib:
    def __init__(self, path: Path):
        lib = clib.load(path)
        lib.tw_select_heads.restype = C.c_ssize_t
        lib.tw_select_heads.argtypes = [
            C.c_size_t, P64, P64, PD, P64, PD, C.c_int64, P64, C.POINTER(C.c_int32),
            P64, P64, PD, C.POINTER(C.c_int), C.c_int,
        ]
        lib.tw_compact_candidates.restype = C.c_int
        lib.tw_compact_candidates.argtypes = [
            C.c_size_t, P64, C.POINTER(C.c_uint32), C.POINTER(C.c_float), C.c_int64,
            P64, P64, PD, C.c_int,
        ]
        lib.tw_fsum_exp.restype = C.c_double
        lib.tw_fsum_exp.argtypes = [PD, C.c_size_t]
        lib.tw_fsum_nonneg.restype = C.c_double
        lib.tw_fsum_nonneg.argtypes = [PD, C.c_size_t]
        lib.tw_path_available.restype = C.c_int
        lib.tw_path_available.argtypes = [C.c_int]
        self.lib = lib
        # TW_PATH_SCALAR, TW_PATH_AVX2, TW_PATH_AVX512 (tw_cpu.h) where this CPU has them
        self.paths = [p for p in (1, 2, 3, 4) if lib.tw_path_available(p)]

    def fsum_nonneg(self, xs: list[float]) -> float:
        a = np.array(xs, dtype=np.float64)
        return self.lib.tw_fsum_nonneg(ptr(a, PD), len(a))

    def fsum_exp(self, xs: list[float]) -> float:
        a = np.array(xs, dtype=np.float64)
        return self.lib.tw_fsum_exp(ptr(a, PD), len(a))


class Response:
    """Tokens in the C layout; run(start, path) selects heads from token `start` on."""

    def __init__(self, tokens: list, k: int, with_support: bool):
        self.tokens, self.k, self.with_support = tokens, k, with_support
        n = len(tokens)
        lens = [len(t[0]) for t in tokens]
        self.coff = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(lens, out=self.coff[1:])
        total = int(self.coff[-1])
        self.ids = np.array([i for t in tokens for i in t[0]], dtype=np.int64).reshape(total)
        self.lps = np.array([v for t in tokens for v in t[1]], dtype=np.float64).reshape(total)
        self.sids = np.array([t[2] for t in tokens], dtype=np.int64)
        self.slps = np.array([t[3] for t in tokens], dtype=np.float64)
        if with_support:
            slens = [len(t[4]) for t in tokens]
            self.soff = np.zeros(n + 1, dtype=np.int64)
            np.cumsum(slens, out=self.soff[1:])
            self.sup = np.array([s for t in tokens for s in t[4]], dtype=np.int32)
            self.sup = self.sup.reshape(int(self.soff[-1]))
        cap = max(total, 1)
        self.out_off = np.zeros(n + 1, dtype=np.int64)
        self.out_ids = np.zeros(cap, dtype=np.int64)
        self.out_lps = np.zeros(cap, dtype=np.float64)

    def run(self, lib: Lib, start: int, path: int):
        n = len(self.tokens) - start
        code = C.c_int(-7)
        soff = ptr(self.soff, P64, start) if self.with_support else None
        sup = ptr(self.sup, C.POINTER(C.c_int32)) if self.with_support else None
        failed = lib.lib.tw_select_heads(
            n, ptr(self.coff, P64, start), ptr(self.ids, P64), ptr(self.lps, PD),
            ptr(self.sids, P64, start), ptr(self.slps, PD, start), self.k, soff, sup,
            ptr(self.out_off, P64), ptr(self.out_ids, P64), ptr(self.out_lps, PD),
            C.byref(code), path,
        )
        upto = n if failed < 0 else failed
        oo = self.out_off[: upto + 1].tolist()
        ids, lps = self.out_ids[: oo[-1]].tolist(), self.out_lps[: oo[-1]].tolist()
        heads = [(ids[oo[t]:oo[t + 1]], lps[oo[t]:oo[t + 1]]) for t in range(upto)]
        return (start + failed if failed >= 0 else -1), code.value, heads


def reference(token, k: int, with_support: bool):
    ids, vals, sid, slp, support, _ = token
    try:
        # An empty support row is an absent kept set: the rule without a support.
        got = select_head(dict(zip(ids, vals)), sid, slp, k, support if with_support and support else None)
    except MalformedResponseError as exc:
        return REASONS[exc.reason], None
    return 0, got


def bits(values: list[float]) -> list[bytes]:
    return [struct.pack("<d", v) for v in values]


# ---------------------------------------------------------------------------
# Generators
# ---------------------------------------------------------------------------

SMALL_VALUES = [0.0, -0.0, -0.25, -0.5, -1.0, -2.0, -3.0, -9999.0, math.log(0.5), math.log(0.25),
                math.log(0.125), -1e-300, 5e-324, 1e-6, -1e-5, -20.0, -700.0, -701.0, -745.5]


def dyadic_partition(rng: random.Random, pieces: int) -> list[float]:
    parts = [1.0]
    while len(parts) < pieces:
        i = rng.randrange(len(parts))
        if parts[i] < 2.0**-30:
            break
        half = parts.pop(i) / 2
        parts += [half, half]
    return parts


def near_values(rng: random.Random, count: int, target: float) -> list[float]:
    """count logprobs whose exp()s sum, exactly, to within a few ulps of target."""
    first = []
    if count > 1:
        weights = [rng.random() ** rng.choice((1, 3, 8)) for _ in range(count)]
        scale = target * rng.uniform(0.3, 0.999) / sum(weights)
        first = [math.log(w * scale) if w * scale > 0 else -800.0 for w in weights[:-1]]
    rest = target - math.fsum(math.exp(p) for p in first)
    last = math.log(rest) if rest > 0 else -30.0
    for _ in range(rng.randint(-6, 6) if rng.random() < 0.9 else rng.randint(-200, 200)):
        last = math.nextafter(last, math.inf)
    for _ in range(rng.randint(0, 6)):
        last = math.nextafter(last, -math.inf)
    values = first + [last]
    rng.shuffle(values)
    return values


def realistic(rng: random.Random, m: int, f32: bool) -> list[float]:
    width = m + rng.choice((0, 1, 5, 30, 200))
    scale = rng.uniform(0.5, 8.0)
    logits = [rng.gauss(0, 1) * scale for _ in range(width)]
    top = max(logits)
    z = math.log(math.fsum(math.exp(x - top) for x in logits))
    lp = sorted((x - top - z for x in logits), reverse=True)[:m]
    if f32:
        lp = [float(np.float32(v)) for v in lp]
    return lp


def distinct_ids(rng: random.Random, m: int, mode: str) -> list[int]:
    if mode == "tiny":
        return rng.sample(range(m + rng.randint(0, 3)), m)
    if mode == "wide":
        return rng.sample(range(2**31 - 1), m) if m < 1000 else rng.sample(range(10**7), m)
    return rng.sample(range(max(2 * m, 64)), m)


def gen_token(rng: random.Random, k: int, with_support: bool):
    mode = rng.choices(
        ["ties", "dyadic", "real", "near", "mess", "large"], weights=[30, 15, 25, 15, 12, 1.5]
    )[0]
    support = None
    if mode == "ties":
        m = rng.randint(0, min(14, k + 4))
        pool = rng.sample(SMALL_VALUES, rng.randint(1, 5))
        vals = [rng.choice(pool) for _ in range(m)]
        ids = distinct_ids(rng, m, "tiny")
    elif mode == "dyadic":
        parts = dyadic_partition(rng, rng.randint(1, max(1, min(k, 12) if not with_support else 12)))
        vals = [math.log(p) for p in parts]
        if rng.random() < 0.3:  # an exact surplus or deficit
            j = rng.randrange(len(vals))
            vals[j] = math.log(parts[j] * rng.choice((1.0001, 0.9999, 1.00011, 1.5)))
        extra = rng.randint(0, 4)
        vals += [rng.choice((SENTINEL, -30.0, -40.0, math.log(2.0**-31))) for _ in range(extra)]
        ids = distinct_ids(rng, len(vals), rng.choice(("tiny", "mid")))
        if with_support:
            support = ids[: len(parts)]
    elif mode == "real":
        m = rng.randint(1, min(40, k + 4))
        vals = realistic(rng, m, rng.random() < 0.7)
        if with_support:
            s = rng.randint(1, m)
            kept = vals[:s]
            z = math.log(math.fsum(math.exp(v) for v in kept))
            vals = [v - z for v in kept] + [SENTINEL] * (m - s)
            if rng.random() < 0.5:
                vals = [float(np.float32(v)) for v in vals]
        ids = distinct_ids(rng, m, rng.choice(("mid", "wide")))
        if with_support:
            support = ids[:s]
        if rng.random() < 0.5:  # compact layout: the sampled token first
            j = rng.randrange(m)
            ids.insert(0, ids.pop(j))
            vals.insert(0, vals.pop(j))
    elif mode == "near":
        target = rng.choice((1.0001, 1.0 - 1e-4, 1.0 + 1e-4)) if with_support else 1.0001
        if rng.random() < 0.3:  # around the edge of the estimate's error band instead
            # (2^-16 and 2^-37 relative: the vector and scalar estimates' bands)
            target *= 1 + rng.choice((-1, 1)) * 2.0 ** -rng.choice(
                (13, 14, 15, 16, 17, 18, 20, 24, 30, 34, 36, 37, 38, 40, 45)
            )
        r = rng.randint(1, min(k, 24) if not with_support else 24)
        vals = near_values(rng, r, target)
        low = min(vals)
        pad = (k + 2 - r) if not with_support and k < 64 else rng.randint(0, 3)
        pad = max(pad, 0) + rng.randint(0, 2)
        if r == k or with_support:
            vals += [rng.choice((SENTINEL, low - 1.0, low - 50.0)) for _ in range(pad)]
        else:
            vals += [SENTINEL] * pad
        ids = distinct_ids(rng, len(vals), "mid")
        if with_support:
            support = ids[:r]
        order = list(range(len(vals)))
        rng.shuffle(order)
        ids = [ids[i] for i in order]
        vals = [vals[i] for i in order]
    elif mode == "mess":
        m = rng.randint(0, 30)
        vals = []
        for _ in range(m):
            c = rng.random()
            if c < 0.1:
                vals.append(SENTINEL)
            elif c < 0.2:
                vals.append(rng.choice(SMALL_VALUES + [1e-4, 0.5, 1.0, 1.5, 700.0, -math.inf, math.inf]))
            else:
                vals.append(-rng.expovariate(rng.choice((0.2, 1.0, 5.0))))
        ids = distinct_ids(rng, m, rng.choice(("tiny", "mid", "wide")))
    else:  # large: the heap paths and the sorted-support path
        m = rng.choice((rng.randint(40, 120), rng.randint(200, 600), 3000))
        if rng.random() < 0.5:
            vals = realistic(rng, m, True)
        else:
            vals = [-rng.choice((0.5, 1.0, 2.0, 4.0)) * rng.randint(1, 8) for _ in range(m)]
        if rng.random() < 0.3:
            for i in rng.sample(range(m), m // 5):
                vals[i] = SENTINEL
        ids = distinct_ids(rng, m, rng.choice(("mid", "wide")))
        order = list(range(m))
        if rng.random() < 0.7:
            rng.shuffle(order)
        ids = [ids[i] for i in order]
        vals = [vals[i] for i in order]
        if with_support:
            ranked = [i for i, v in zip(ids, vals) if v != SENTINEL]
            s = rng.randint(1, max(1, len(ranked)))
            support = rng.sample(ranked, min(s, len(ranked)))
            if rng.random() < 0.3 and ranked:  # exact normalization over a big support
                parts = dyadic_partition(rng, len(support))
                support = support[: len(parts)]
                pos = {i: j for j, i in enumerate(ids)}
                for sid, p in zip(support, parts):
                    vals[pos[sid]] = math.log(p)

    if with_support:
        ranked = [i for i, v in zip(ids, vals) if v != SENTINEL]
        if support is None:
            c = rng.random()
            if c < 0.6 and ranked:
                support = rng.sample(ranked, rng.randint(1, len(ranked)))
            elif c < 0.8:
                support = rng.sample(ids, rng.randint(0, len(ids))) if ids else []
            else:
                support = [rng.randrange(40) for _ in range(rng.randint(0, 6))]
        support = list(support)
        c = rng.random()
        if c < 0.05:
            support.append(rng.randrange(2**31 - 1))  # missing
        elif c < 0.08 and support:
            support.append(rng.choice(support))  # a repeat (deduplicated by set())
        elif c < 0.09:
            support.append(-rng.randrange(1, 5))
        elif c < 0.1 and len(support) > 64:
            support = support * 2
        support = [s for s in support if -(2**31) <= s < 2**31]
        rng.shuffle(support)

    # The sampled token and its logprob.
    if ids and rng.random() < 0.8:
        j = rng.randrange(len(ids))
        sid, v = ids[j], vals[j]
        c = rng.random()
        if c < 0.55 or not math.isfinite(v):
            slp = v
        elif c < 0.7:
            slp = float(np.float32(v))
        elif c < 0.8:
            d = rng.choice((1e-5, 1.0000001e-5, 0.9999999e-5, 2e-5))
            slp = v + rng.choice((-d, d))
        elif c < 0.9:
            rel = rng.choice((1e-6, 1.000001e-6, 0.999999e-6))
            slp = v * (1 + rng.choice((-rel, rel)))
            for _ in range(rng.randint(-2, 2)):
                slp = math.nextafter(slp, math.inf)
        elif c < 0.95:
            slp = math.nan
        else:
            slp = rng.choice((0.0, -1.0, SENTINEL, -math.inf, math.inf))
    else:
        sid = rng.randrange(2**32) if rng.random() < 0.5 else len(ids) + rng.randrange(3)
        while sid in ids:
            sid += 1
        slp = rng.choice((math.nan, -0.5, 0.0))
    if not with_support:
        support = []
    return ids, vals, sid, slp, support, mode


def gen_response(rng: random.Random):
    with_support = rng.random() < 0.4
    k = rng.choice((1, 1, 2, 3, 4, 5, 8, 20, 20, 22, rng.randint(1, 40), 10**6))
    n = rng.choice((1, 2, 5, 20, 60, 300))
    return [gen_token(rng, k, with_support) for _ in range(n)], k, with_support


# ---------------------------------------------------------------------------
# Checks
# ---------------------------------------------------------------------------


class Stats:
    def __init__(self):
        self.heads = 0
        self.codes = {c: 0 for c in NAMES}
        self.near = {c: 0 for c in NAMES}
        self.responses = 0


def check_response(lib: Lib, tokens, k, with_support, st: Stats):
    resp = Response(tokens, k, with_support)
    expect = [reference(t, k, with_support) for t in tokens]
    st.responses += 1
    start = 0
    while start < len(tokens):
        results = [resp.run(lib, start, p) for p in lib.paths]
        for p, res in zip(lib.paths[1:], results[1:]):
            if res != results[0]:
                raise AssertionError(f"path {PATH_NAMES[p]} differs from scalar at start {start}")
        failed, code, heads = results[0]
        want_fail = next((t for t in range(start, len(tokens)) if expect[t][0]), -1)
        if failed != want_fail or (failed >= 0 and code != expect[failed][0]):
            t = want_fail if want_fail >= 0 else failed
            raise AssertionError(
                f"decision: C says token {failed} {NAMES.get(code)}, reference says token "
                f"{want_fail} {NAMES[expect[want_fail][0]] if want_fail >= 0 else 'ok'}; k={k} "
                f"support={with_support}; token {t}: {tokens[t]!r}"
            )
        for i, (ids, vals) in enumerate(heads):
            t = start + i
            want_ids, want_vals = expect[t][1]
            if ids != want_ids or bits(vals) != bits(want_vals):
                raise AssertionError(f"head of token {t}: {ids}, {vals} != {want_ids}, {want_vals}")
        end = len(tokens) if failed < 0 else failed + 1
        for t in range(start, end):
            st.heads += 1
            st.codes[expect[t][0]] += 1
            if tokens[t][5] == "near":
                st.near[expect[t][0]] += 1
        if failed < 0:
            break
        start = failed + 1


def check_compact(lib: Lib, rng: random.Random, rows: int) -> int:
    checked = 0
    for _ in range(rows // 50):
        n = rng.randint(1, 50)
        row_ids, row_vals, offs = [], [], [0]
        for _ in range(n):
            length = rng.choice((0, 1, 2, rng.randint(0, 16), rng.randint(12, 33),
                                 rng.randint(30, 70), rng.randint(60, 300)))
            alphabet = rng.choice((2, 5, length + 1, 2 * length + 2, 2**32 - 1))
            values: dict[int, float] = {}
            for _ in range(length):
                i = rng.randrange(alphabet) if alphabet < 2**32 - 1 else rng.randrange(2**32)
                if i not in values:
                    values[i] = rng.choice((0.0, -0.5, float(np.float32(-rng.expovariate(1.0)))))
                v = values[i]
                if v == 0.0 and rng.random() < 0.5:
                    v = -v  # repeats may differ in the sign of a zero
                elif rng.random() < 0.01:
                    v = -3.0  # an unequal repeat (rejected before, still deterministic)
                row_ids.append(i)
                row_vals.append(v)
            offs.append(len(row_ids))
        num_top = rng.choice((-1, 0, 1, 2, 5, 20, 22, 31, 32, 33, 64, rng.randint(0, 80), 10**9))
        ids32 = np.array(row_ids, dtype=np.uint32).reshape(len(row_ids))
        vals32 = np.array(row_vals, dtype=np.float32).reshape(len(row_vals))
        roff = np.array(offs, dtype=np.int64)
        total = max(len(row_ids), 1)
        ref = []
        for t in range(n):
            items = list(zip(ids32[offs[t]:offs[t + 1]].tolist(), vals32[offs[t]:offs[t + 1]].tolist()))
            ref.append(list(dict(list(dict(items).items())[: max(num_top, 1)]).items()))
        for path in lib.paths:
            coff = np.full(n + 1, -1, dtype=np.int64)
            cids = np.zeros(total, dtype=np.int64)
            clps = np.zeros(total, dtype=np.float64)
            rc = lib.lib.tw_compact_candidates(
                n, ptr(roff, P64), ptr(ids32, C.POINTER(C.c_uint32)), ptr(vals32, C.POINTER(C.c_float)),
                num_top, ptr(coff, P64), ptr(cids, P64), ptr(clps, PD), path,
            )
            assert rc == 0
            co, ci, cl = coff.tolist(), cids.tolist(), clps.tolist()
            for t in range(n):
                got = list(zip(ci[co[t]:co[t + 1]], cl[co[t]:co[t + 1]]))
                if [i for i, _ in got] != [i for i, _ in ref[t]] or bits([v for _, v in got]) != bits(
                    [v for _, v in ref[t]]
                ):
                    raise AssertionError(f"compact path {PATH_NAMES[path]} row {t} num_top {num_top}: "
                                         f"{got} != {ref[t]}")
        checked += n
    return checked


def check_fsum(lib: Lib, rng: random.Random, cases: int) -> int:
    def one(xs):
        try:
            want = math.fsum(xs)
        except OverflowError:
            want = math.inf
        got = lib.fsum_nonneg(xs)
        if struct.pack("<d", got) != struct.pack("<d", want) and not (math.isnan(got) and math.isnan(want)):
            raise AssertionError(f"tw_fsum_nonneg({xs!r}) = {got!r}, math.fsum = {want!r}")

    for _ in range(cases):
        c = rng.random()
        if c < 0.3:  # half-way cases: x + half an ulp of x, plus maybe a sticky bit
            e = rng.randint(-1000, 1000)
            x = math.ldexp(rng.randint(2**52, 2**53 - 1), e - 52)
            xs = [x, math.ldexp(1.0, e - 53)]
            if rng.random() < 0.5:
                xs.append(math.ldexp(1.0, e - 53 - rng.randint(1, 60)))
            if rng.random() < 0.3:
                xs += [math.ldexp(1.0, e - 54)] * 2
            rng.shuffle(xs)
        elif c < 0.5:
            xs = [abs(rng.gauss(0, 1)) * 10.0 ** rng.randint(-320, 300) for _ in range(rng.randint(0, 40))]
        elif c < 0.6:
            xs = [rng.choice((5e-324, 1e-310, 2.2250738585072014e-308, 1.0, 2.0**-53, 1.7976931348623157e308))
                  for _ in range(rng.randint(0, 6))]
        elif c < 0.8:
            xs = [math.exp(p) for p in near_values(rng, rng.randint(1, 30), rng.choice((1.0001, 1 - 1e-4, 1 + 1e-4)))]
        else:
            xs = [math.ldexp(rng.randint(1, 2**53 - 1), rng.randint(-1074, -1000)) for _ in range(rng.randint(1, 50))]
        one(xs)
        if c >= 0.6 and c < 0.8:
            ps = [math.log(x) if x > 0 else -800.0 for x in xs]
            assert lib.fsum_exp(ps) == math.fsum(math.exp(p) for p in ps)
    one([math.inf, 1.0])
    one([math.nan, 1.0])
    assert math.isnan(lib.fsum_nonneg([-1.0]))
    return cases


def dump_sample(path: str) -> None:
    """The compact_8k_top20 sample's rows, as test_heads --bench reads them: int64 n,
    int64 num_top, int64 offsets[n + 1], u32 ids[], f32 values[], int64 sampled ids[n]."""
    import base64
    import json

    from tokenwire.samples import sample

    choice = json.loads(sample("compact_8k_top20"))["choices"][0]
    packed = choice["compact_logprobs"]
    offsets = np.array(packed["offsets"], dtype="<i8")
    raw = base64.b64decode(packed["data"])
    count = int(offsets[-1])
    with open(path, "wb") as f:
        f.write(np.array([len(offsets) - 1, packed["num_top_logprobs"]], dtype="<i8").tobytes())
        f.write(offsets.tobytes())
        f.write(raw[: count * 4])
        f.write(raw[count * 4 :])
        f.write(np.array(choice["token_ids"], dtype="<i8").tobytes())
    print(f"wrote {path}: {len(offsets) - 1} rows, {count} entries")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--heads", type=int, default=1_000_000, help="heads to compare (approximate)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--sanitize", action="store_true")
    ap.add_argument("--dump-sample", metavar="FILE", help="write the benchmark workload and exit")
    args = ap.parse_args()
    if args.dump_sample:
        dump_sample(args.dump_sample)
        return 0

    lib_path = build(args.sanitize)
    if args.sanitize and (status := clib.rerun_under_asan()) is not None:
        return status

    lib = Lib(lib_path)
    rng = random.Random(args.seed)
    print(f"library {lib_path}; paths {[PATH_NAMES[p] for p in lib.paths]}")
    t0 = time.time()
    fs = check_fsum(lib, rng, max(2000, args.heads // 50))
    print(f"  fsum: {fs} sums agree with math.fsum ({time.time() - t0:.1f}s)")
    t0 = time.time()
    rows = check_compact(lib, rng, max(2000, args.heads // 10))
    print(f"  compact candidates: {rows} rows agree ({time.time() - t0:.1f}s)")
    t0 = time.time()
    st = Stats()
    last = 0
    while st.heads < args.heads:
        tokens, k, with_support = gen_response(rng)
        check_response(lib, tokens, k, with_support, st)
        if st.heads - last >= 200_000:
            last = st.heads
            print(f"    {st.heads} heads ({time.time() - t0:.0f}s)", flush=True)
    print(
        f"  select_heads: {st.heads} heads in {st.responses} responses agree "
        f"({time.time() - t0:.1f}s); decisions: "
        + ", ".join(f"{SHORT[c]} {n}" for c, n in st.codes.items() if c in SHORT)
    )
    print(
        "  of which sums put within a few ulps (or at the estimate's error band) of a "
        "threshold: " + ", ".join(f"{SHORT[c]} {n}" for c, n in st.near.items() if c in SHORT)
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
