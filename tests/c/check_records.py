"""Differential check of the record readers (csrc/wire/tw_records.c, tw_number.c) against the
pure-Python reference, on every path this CPU has (TW_PATH_*, tw_cpu.h).

Builds the scanner, the record readers and tw_number.c (and a small C shim) into a shared library in /tmp,
loads it with ctypes, and checks:

  * the 128-bit power-of-five table (csrc/codecs/tw_pow5_table.h, as its generator
    csrc/gen_pow5_table.py writes it) and the exponent formula of tw_number.c
    against exact integer arithmetic;
  * tw_number_parse against float() on random decimal literals: 1-25 digits,
    17 significant digits, exponents up to +-350, subnormals, -0.0, integers
    without a fraction, long digit strings (up to 1200 digits), values at, just
    below and just above halfway points between doubles, exact float32 values;
  * for thousands of generated logprobs.content arrays (valid ones and ones
    mutated per rule: non-object entries, token/token_id forms and escapes,
    duplicate keys, key orders, non-number and sentinel logprobs, missing/empty
    top_logprobs, bad candidates, duplicate candidate ids, long entries,
    decoy keys in nested values), written with random whitespace, escapes and
    number spellings: tw_scan + tw_rec_parse give the same first failing
    entry and rule, the same sampled values, candidates and entry logprobs
    (bit for bit) as the reference's parse_native_logprobs and the per-entry
    part of parse_native_heads on json.loads of the same bytes;
    tw_rec_count gives the room needed; fixed-capacity mode agrees with
    grow mode;
  * tw_blank_field(logprobs.content): orjson.loads of the stripped copy equals
    the document with content replaced by [].

Usage:
  python3 tests/c/check_records.py [--rounds N] [--numbers N] [--seed S] [--sanitize]
                                  [--portable]

--sanitize builds with -fsanitize=address,undefined and re-runs itself with the
ASan runtime preloaded (leak detection off: CPython's own allocations);
--portable builds without SIMD (-DTW_NO_SIMD).
"""

from __future__ import annotations

import argparse
import ctypes as C
import json
import math
import os
import random
import re
import struct
import sys
import time
from decimal import Decimal, getcontext
from pathlib import Path

import clib
import numpy as np
import orjson

ROOT = clib.ROOT
sys.path.insert(0, str(ROOT / "src"))
os.environ.setdefault("TOKENWIRE_NO_EXTENSIONS", "1")  # only the reference is needed

from tokenwire.extract.python import LazyEvidence  # noqa: E402
from tokenwire.kernels import python as K  # noqa: E402
from tokenwire.rules import generate as R  # noqa: E402

sys.path.insert(0, str(ROOT / "csrc"))
import gen_pow5_table  # noqa: E402
from gen_pow5_table import QMAX, QMIN, pow5_entry  # noqa: E402
from tokenwire.base._errors import MalformedResponseError  # noqa: E402
from records_gen import Gen, Obj, Writer, exact_decimal, random_double, room_needed, spell  # noqa: E402

OUT = Path("/tmp/tw_rec_check")
getcontext().prec = 2000

(
    OK, ENTRY_NOT_OBJECT, TOKEN_MISMATCH, NOT_A_NUMBER, NOT_FINITE, NO_EVIDENCE,
    MISSING_TOP, TOP_NOT_OBJECT, TOP_NO_ID, TOP_NOT_FINITE, TOP_POSITIVE, TOP_DUPLICATE,
    SAMPLED_NOT_A_NUMBER, NOMEM, BAD_ARG,
) = range(15)

SHIM = r"""
#include <stdlib.h>
#include <string.h>
#include "json/tw_scan.h"
#include "wire/tw_records.h"
#include "base/tw_mem.h"

typedef struct {
    long long serr, scode, terr, tcode, ncand, total, rc, count_rc;
} chk_res;

/* Scan buf, take choices[0].logprobs.content and run tw_rec_parse.
   mode 0: grow mode; 1: fixed arrays sized by tw_rec_count.
   Returns 0, or -1 (scan failed), -2 (no content array / count != n). */
int chk_run(const char *buf, size_t len, const int64_t *ids, size_t n, int want_top,
            int mode, double *sampled, int64_t *coff, double *elps, int64_t *cids,
            double *clps, size_t ccap, chk_res *r, int path)
{
    tw_doc d;
    tw_rec_cands c;
    tw_rec_result res;
    const tw_value *v;
    size_t total = 0;
    int rc = 0;
    memset(r, 0, sizeof *r);
    memset(&c, 0, sizeof c);
    tw_doc_init(&d);
    d.path = path;
    if (tw_scan(buf, len, &d) != TW_OK) {
        tw_doc_free(&d);
        return -1;
    }
    if (d.nchoices < 1) {
        tw_doc_free(&d);
        return -2;
    }
    v = &d.choice[0].f[TW_F_LOGPROBS_CONTENT];
    if (!v->present || v->type != TW_T_ARRAY || v->count != n) {
        tw_doc_free(&d);
        return -2;
    }
    r->count_rc = tw_rec_count(buf, v, &total, path);
    r->total = (long long)total;
    if (mode == 1) {
        c.ids = (int64_t *)tw_mem_alloc((total ? total : 1) * sizeof(int64_t));
        c.lps = (double *)tw_mem_alloc((total ? total : 1) * sizeof(double));
        c.cap = total;
        c.grow = 0;
    } else {
        c.grow = 1;
    }
    r->rc = tw_rec_parse(buf, v, n, ids, want_top, sampled, coff, elps, &c, &res, path);
    r->serr = res.sampled_err;
    r->scode = res.sampled_code;
    r->terr = res.top_err;
    r->tcode = res.top_code;
    r->ncand = (long long)res.ncand;
    if (r->rc == 0 && want_top) {
        size_t k = res.ncand < ccap ? res.ncand : ccap;
        if (k) {
            memcpy(cids, c.ids, k * sizeof(int64_t));
            memcpy(clps, c.lps, k * sizeof(double));
        }
    }
    tw_mem_free(c.ids);
    tw_mem_free(c.lps);
    tw_doc_free(&d);
    return rc;
}

/* Scan, blank every recorded choice's logprobs.content `times` times, strip
   into out (capacity len).  Returns the stripped size, or -1 / -2. */
long long chk_strip(const char *buf, size_t len, char *out, int times)
{
    tw_doc d;
    size_t n;
    tw_doc_init(&d);
    if (tw_scan(buf, len, &d) != TW_OK) {
        tw_doc_free(&d);
        return -1;
    }
    for (int t = 0; t < times; t++)
        for (size_t i = 0; i < d.nchoices; i++)
            if (tw_blank_field(&d, i, TW_F_LOGPROBS_CONTENT) != TW_OK) {
                tw_doc_free(&d);
                return -1;
            }
    for (size_t i = 1; i < d.nblank; i++)
        if (d.blank[i - 1].end > d.blank[i].start) {
            tw_doc_free(&d);
            return -2;
        }
    n = tw_stripped_size(&d, len);
    tw_strip(buf, len, &d, out);
    tw_doc_free(&d);
    return (long long)n;
}
"""


class ChkRes(C.Structure):
    _fields_ = [(name, C.c_longlong) for name in
                ("serr", "scode", "terr", "tcode", "ncand", "total", "rc", "count_rc")]


def build(sanitize: bool, portable: bool = False) -> Path:
    OUT.mkdir(parents=True, exist_ok=True)
    shim = OUT / "shim.c"
    shim.write_text(SHIM)
    return clib.build(OUT, "twrecords", ["json/tw_scan.c", "json/tw_scan_values.c", "wire/tw_records.c",
                                                  "wire/tw_records_rows.c", "codecs/tw_number.c",
                                                  "codecs/tw_base64.c", shim],
                      sanitize=sanitize, portable=portable)


class Lib:
    def __init__(self, path: Path):
        lib = clib.load(path)
        lib.tw_number_parse.restype = C.c_size_t
        lib.tw_number_parse.argtypes = [C.c_char_p, C.c_size_t, C.POINTER(C.c_double), C.c_int]
        lib.tw_path_available.restype = C.c_int
        lib.tw_path_available.argtypes = [C.c_int]
        lib.tw_path_name.restype = C.c_char_p
        lib.tw_path_name.argtypes = [C.c_int]
        # TW_PATH_SCALAR, AVX2, AVX512, NEON (tw_cpu.h) where this CPU has them
        self.paths = [p for p in (1, 2, 3, 4) if lib.tw_path_available(p)]
        self.path = self.paths[-1]  # the path number() and run() take
        lib.chk_run.restype = C.c_int
        P = np.ctypeslib.ndpointer
        lib.chk_run.argtypes = [
            C.c_char_p, C.c_size_t, P(np.int64, flags="C"), C.c_size_t, C.c_int, C.c_int,
            P(np.float64, flags="C"), P(np.int64, flags="C"), P(np.float64, flags="C"),
            P(np.int64, flags="C"), P(np.float64, flags="C"), C.c_size_t, C.POINTER(ChkRes),
            C.c_int,
        ]
        lib.chk_strip.restype = C.c_longlong
        lib.chk_strip.argtypes = [C.c_char_p, C.c_size_t, C.c_char_p, C.c_int]
        self.lib = lib

    def number(self, text: str, pad: str = "") -> tuple[int, float]:
        b = (text + pad).encode()
        out = C.c_double()
        n = self.lib.tw_number_parse(b, len(b), C.byref(out), self.path)
        return n, out.value

    def run(self, raw: bytes, ids: list[int], want_top: bool, mode: int, ccap: int):
        n = len(ids)
        ids_a = np.array(ids, dtype=np.int64) if n else np.zeros(1, dtype=np.int64)
        sampled = np.full(max(n, 1), np.nan)
        coff = np.full(n + 1, -7, dtype=np.int64)
        elps = np.full(max(n, 1), np.nan)
        cids = np.zeros(max(ccap, 1), dtype=np.int64)
        clps = np.zeros(max(ccap, 1))
        res = ChkRes()
        rc = self.lib.chk_run(raw, len(raw), ids_a, n, int(want_top), mode, sampled, coff, elps,
                              cids, clps, ccap, C.byref(res), self.path)
        return rc, res, sampled[:n], coff, elps[:n], cids, clps

    def strip(self, raw: bytes, times: int) -> bytes | None:
        out = C.create_string_buffer(len(raw) + 1)
        n = self.lib.chk_strip(raw, len(raw), out, times)
        if n < 0:
            return None
        return out.raw[:n]


def bits(x: float) -> int:
    return struct.unpack("<Q", struct.pack("<d", x))[0]


# ---------------------------------------------------------------------------
# Table
# ---------------------------------------------------------------------------

def check_table() -> None:
    src = (ROOT / "csrc" / "codecs" / "tw_pow5_table.h").read_text()
    assert src == gen_pow5_table.render(), "csrc/codecs/tw_pow5_table.h differs from its generator's output"
    rows = re.findall(r"\{0x([0-9a-f]{16})u, 0x([0-9a-f]{16})u\}, /\* (-?\d+) \*/", src)
    assert len(rows) == QMAX - QMIN + 1, f"table has {len(rows)} rows"
    for hi, lo, q in rows:
        q = int(q)
        t = pow5_entry(q)
        assert (1 << 127) <= t < (1 << 128)
        assert (int(hi, 16) << 64 | int(lo, 16)) == t, f"T({q})"
        fl = (5 ** q).bit_length() - 1 if q >= 0 else -((5 ** -q).bit_length())
        assert ((q * 152170 + (1000 << 16)) >> 16) - 1000 == fl, f"floor(q log2 5) at {q}"
        # T(q) * 2^s(q) brackets 5^q (exact integer check, scaled to avoid fractions)
        s = fl - 127
        if q >= 0:
            lhs, rhs = t, 5 ** q  # compare t * 2^s with 5^q
            scaled_t, scaled_t1, target = (lhs << max(s, 0)), ((lhs + 1) << max(s, 0)), rhs << max(-s, 0)
        else:
            scaled_t, scaled_t1, target = t * 5 ** -q, (t + 1) * 5 ** -q, 1 << -s
        assert scaled_t <= target < scaled_t1, f"bracket at {q}"
    print(f"table: {len(rows)} powers of five and the exponent formula verified")


# ---------------------------------------------------------------------------
# Numbers
# ---------------------------------------------------------------------------


def number_cases(rng: random.Random, count: int):
    """Random literals: (text, expected float)."""
    for _ in range(count):
        k = rng.random()
        if k < 0.25:
            x = random_double(rng)
            text = repr(x) if rng.random() < 0.5 else spell(rng, Decimal(repr(x)))
        elif k < 0.45:
            # halfway between neighbours, exact, or nudged by a tiny amount
            x = abs(random_double(rng))
            y = math.nextafter(x, math.inf)
            if not math.isfinite(y):
                continue
            mid = (Decimal(x) + Decimal(y)) / 2
            nudge = rng.choice([0, 0, 1, -1])
            if nudge:
                mid += Decimal(nudge) * Decimal(10) ** (mid.adjusted() - rng.randint(17, 800))
            if rng.random() < 0.5:
                mid = -mid
            text = spell(rng, mid)
        elif k < 0.55:
            # truncated / rounded forms of the exact value of a double
            x = random_double(rng)
            s = format(Decimal(x), "e")
            mant, ex = s.split("e")
            keep = rng.choice([15, 16, 17, 18, 19, 20, 21, 25, 40])
            mant = mant[: keep + 2] if mant.startswith("-") else mant[: keep + 1]
            text = spell(rng, Decimal(mant + "e" + ex))
        elif k < 0.7:
            # random digit strings
            nd = rng.choice([1, 2, 5, 15, 16, 17, 18, 19, 20, 22, 30, 60, 200, 800, 1200])
            digits = "".join(rng.choice("0123456789") for _ in range(nd))
            exp = rng.randint(-360 - nd, 320 - nd)
            dec = Decimal((rng.randrange(2), tuple(map(int, digits)), exp))
            text = spell(rng, dec)
        elif k < 0.8:
            # integers without fraction, up to 300 digits
            nd = rng.choice([1, 3, 15, 16, 17, 19, 20, 21, 40, 100, 300])
            v = rng.randrange(10 ** (nd - 1), 10 ** nd) if nd > 1 else rng.randrange(10)
            if rng.random() < 0.3:
                v = rng.choice([2 ** 53 + 1, 2 ** 63, 2 ** 64 - 1, 2 ** 64 + 1, 2 ** 1023 + 2 ** 970,
                                9999, 10 ** 22, 10 ** 23])
            text = ("-" if rng.random() < 0.5 else "") + str(v)
        elif k < 0.9:
            # extremes: underflow, near DBL_MAX, -0
            text = rng.choice([
                "-0", "-0.0", "0", "0.0", "-0e0", "0E-5", "-0.000e+99", "1e-400", "-1e-400",
                "2.4703282292062327e-324", "2.4703282292062328e-324", "4.9406564584124654e-324",
                "2.2250738585072011e-308", "2.2250738585072014e-308", "1.7976931348623157e308",
                "1.7976931348623158e308", "-9999.0", "-9999", "1e-999999999999",
                "0." + "0" * 400 + "1e300", "123456789e-9999999", "1e-6", "0.000001", "1E-6",
                "9007199254740993", "9007199254740992.5", "4503599627370496.5",
            ])
        else:
            # exact float32 values and short decimals that are doubles
            v = float(np.float32(rng.uniform(-20, 0)))
            text = exact_decimal(v) if rng.random() < 0.5 else repr(v)
        try:
            ref = float(json.loads(text))
        except (ValueError, OverflowError):
            continue
        if not math.isfinite(ref):
            continue
        yield text, ref


def check_numbers(lib: Lib, rng: random.Random, count: int) -> None:
    t0 = time.time()
    n = 0
    pads = ["", ",", "]", "}", " ", ',"bytes":[1,2,3],"top_logprobs":[]}' + " " * 40]
    for text, ref in number_cases(rng, count):
        # unpadded (the portable code) and padded (room for the SIMD reads)
        for pad in ("", pads[-1] if rng.random() < 0.6 else rng.choice(pads)):
            used, got = lib.number(text, pad)
            assert used == len(text), f"{text[:80]!r}+{pad[:5]!r}: consumed {used}"
            assert bits(got) == bits(ref), f"{text[:200]!r}: {got!r} != {ref!r}"
        n += 1
    # invalid literals and prefixes
    for bad in ["", "-", "+1", ".5", "-.5", "x", "--1", "- 1"]:
        assert lib.number(bad)[0] == 0, bad
    for text, used in [("01", 1), ("1.5x", 3), ("1e5e5", 3), ("-0-", 2), ("1.0.0", 3),
                       ("1.5e", 3), ("1.5E+", 3), ("12.5.3", 4), ("7-", 1), ("7+", 1),
                       ("1.", 1), ("1e", 1), ("1e+", 1), ("-0.e1", 2)]:
        assert lib.number(text)[0] == used, text
        assert lib.number(text, " " * 60)[0] == used, text
    print(f"numbers: {n} literals equal to float() bit for bit ({time.time() - t0:.1f} s)")


# ---------------------------------------------------------------------------
# Reference
# ---------------------------------------------------------------------------

SAMPLED_CODES = [
    ("must be an object.", ENTRY_NOT_OBJECT),
    (".token must be 'token_id:", TOKEN_MISMATCH),
    (".logprob must be a number.", NOT_A_NUMBER),
    (".logprob must be finite.", NOT_FINITE),
    ("does not contain sampling evidence", NO_EVIDENCE),
]
TOP_CODES = [
    ("Missing requested top logprobs", MISSING_TOP),
    ("Top logprob must be an object", TOP_NOT_OBJECT),
    ("Top logprob must identify a nonnegative token id", TOP_NO_ID),
    ("Top logprob must be finite", TOP_NOT_FINITE),
    ("Top logprob cannot be positive", TOP_POSITIVE),
    ("Duplicate top logprob token id", TOP_DUPLICATE),
    (".logprob must be a number.", SAMPLED_NOT_A_NUMBER),
]


def code_of(reason: str, table) -> int:
    for text, code in table:
        if text in reason:
            return code
    raise AssertionError(f"unmapped reference message {reason!r}")


def _evidence(choice, ids, k=None):
    """The reference's evidence of ``choice``, its records read against ``ids``."""
    c = LazyEvidence(0, choice, k=k)
    c.token_ids = (np.array(ids, dtype=np.int64), len(ids), None)
    return c


def ref_sampled(choice, ids):
    c = _evidence(choice, ids)
    try:
        values, _ = R.parse_native_logprobs(choice, np.array(ids, dtype=np.int64), c)
        return -1, OK, values
    except MalformedResponseError as exc:
        assert exc.token is not None, exc
        content = choice["logprobs"]["content"]
        prefix = np.empty(exc.token)
        for i in range(exc.token):
            prefix[i] = content[i]["logprob"]
        return exc.token, code_of(exc.reason, SAMPLED_CODES), prefix


def ref_top(choice, ids):
    """The reference's head candidates of each entry before the first failing one, with the
    entry's own logprob (what the heads are then selected from)."""
    c = _evidence(choice, ids, 20)
    heads = []

    def record(ids_, candidates, sampled_lps, k, supports, limit):
        bounds = candidates.offsets.tolist()
        for t in range(limit):
            a, b = bounds[t], bounds[t + 1]
            heads.append((list(zip(candidates.ids[a:b].tolist(), candidates.logprobs[a:b].tolist())),
                          float(sampled_lps[t])))
        return None, None, None

    saved = K.heads
    K.heads = record
    try:
        R.parse_native_heads(choice, np.array(ids, dtype=np.int64), 20, c)
        return -1, OK, heads
    except MalformedResponseError as exc:
        assert exc.token is not None, exc
        return exc.token, code_of(exc.reason, TOP_CODES), heads
    finally:
        K.heads = saved


def check_doc(lib: Lib, raw: bytes, ids, content, stats) -> None:
    doc = json.loads(raw)
    choice = doc["choices"][0]
    n = len(ids)
    s_err, s_code, s_values = ref_sampled(choice, ids)
    t_err, t_code, heads = ref_top(choice, ids)
    room = room_needed(content)
    for want_top in (False, True):
        for mode in (0, 1):
            rc, res, sampled, coff, elps, cids, clps = lib.run(raw, ids, want_top, mode, room)
            where = f"want_top={want_top} mode={mode}"
            assert rc == 0, f"chk_run {rc} {where}"
            assert res.rc == 0, f"tw_rec_parse returned {res.rc} {where}"
            assert res.count_rc == 0 and res.total == room, f"count {res.total} != {room}"
            assert (res.serr, res.scode) == (s_err, s_code), (
                f"sampled: C ({res.serr}, {res.scode}) ref ({s_err}, {s_code}) {where}")
            upto = n if s_err < 0 else s_err
            got = sampled[:upto].view(np.uint64)
            want = np.asarray(s_values[:upto], dtype=np.float64).view(np.uint64)
            if not np.array_equal(got, want):
                bad = int(np.flatnonzero(got != want)[0])
                raise AssertionError(f"sampled[{bad}] {sampled[bad]!r} != {s_values[bad]!r} {where}")
            if not want_top:
                assert (res.terr, res.tcode, res.ncand) == (-1, OK, 0)
                continue
            assert (res.terr, res.tcode) == (t_err, t_code), (
                f"top: C ({res.terr}, {res.tcode}) ref ({t_err}, {t_code}) {where}")
            done = n if t_err < 0 else t_err
            assert len(heads) == done
            assert coff[0] == 0 and res.ncand == coff[n]
            if t_err >= 0:
                assert np.all(coff[t_err:] == coff[t_err]), "coff after the error"
            for i, (head, lp) in enumerate(heads):
                a, b = int(coff[i]), int(coff[i + 1])
                assert [int(x) for x in cids[a:b]] == [h[0] for h in head], f"entry {i} ids {where}"
                assert [bits(x) for x in clps[a:b]] == [bits(float(h[1])) for h in head], (
                    f"entry {i} logprobs {where}")
                assert bits(elps[i]) == bits(lp), f"entry {i} own logprob {elps[i]} != {lp}"
    stats["docs"] += 1
    stats["entries"] += n
    stats["s_err"][s_code] = stats["s_err"].get(s_code, 0) + 1
    stats["t_err"][t_code] = stats["t_err"].get(t_code, 0) + 1


def check_strip(lib: Lib, raw: bytes, rng: random.Random) -> None:
    stripped = lib.strip(raw, rng.choice([1, 1, 2]))
    assert stripped is not None, "strip failed"
    want = orjson.loads(lib.strip(raw, 0))  # the default blanks only
    for ch in want.get("choices", []):
        if isinstance(ch, dict) and isinstance(ch.get("logprobs"), dict) and isinstance(
                ch["logprobs"].get("content"), list):
            ch["logprobs"]["content"] = []
    assert orjson.loads(stripped) == want, "stripped document differs"


def check_samples(lib: Lib) -> None:
    from tokenwire import samples

    for name in ("native_8k", "native_2k_top20"):
        raw = samples.sample(name)
        doc = json.loads(raw)
        ch = doc["choices"][0]
        content = [Obj(list(e.items())) for e in ch["logprobs"]["content"]]
        stats = {"docs": 0, "entries": 0, "s_err": {}, "t_err": {}}
        check_doc(lib, raw, ch["token_ids"], content, stats)
        check_strip(lib, raw, random.Random(0))
    print("samples: native_8k and native_2k_top20 agree with the reference")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=1500)
    ap.add_argument("--numbers", type=int, default=200000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--sanitize", action="store_true")
    ap.add_argument("--portable", action="store_true", help="build with -DTW_NO_SIMD")
    args = ap.parse_args()

    if args.sanitize:
        build(True, args.portable)  # compile errors show in the parent
        if (status := clib.rerun_under_asan()) is not None:
            return status
    lib = Lib(build(args.sanitize, args.portable))
    rng = random.Random(args.seed)
    check_table()
    print(f"paths: {[lib.lib.tw_path_name(p).decode() for p in lib.paths]}")
    for path in lib.paths:
        lib.path = path
        check_numbers(lib, rng, args.numbers // len(lib.paths))
        check_samples(lib)
    t0 = time.time()
    stats = {"docs": 0, "entries": 0, "s_err": {}, "t_err": {}}
    for r in range(args.rounds):
        lib.path = lib.paths[r % len(lib.paths)]
        gen = Gen(rng)
        want_top = rng.random() < 0.7
        tree, ids, content = gen.document(want_top)
        k = rng.random()
        if k < 0.15:
            # the plain json.dumps spellings (no duplicate keys)
            plain = json.loads(Writer(rng, 0).value(tree))
            raw = json.dumps(plain, ensure_ascii=rng.random() < 0.5,
                             indent=rng.choice([None, 1, "\t"]),
                             separators=rng.choice([None, (",", ":"), (", ", ": ")])).encode()
            content = [Obj(list(e.items())) if isinstance(e, dict) else e
                       for e in plain["choices"][0]["logprobs"]["content"]]
        else:
            raw = Writer(rng, rng.choice([0, 0, 1, 2])).value(tree).encode()
        try:
            check_doc(lib, raw, ids, content, stats)
            if r % 4 == 0:
                check_strip(lib, raw, rng)
        except AssertionError as exc:
            path = OUT / f"fail_{args.seed}_{r}.json"
            path.write_bytes(raw)
            print(f"round {r} ({lib.lib.tw_path_name(lib.path).decode()} path): {exc}\n"
                  f"  document saved to {path}", file=sys.stderr)
            return 1
    names = ["OK", "ENTRY_NOT_OBJECT", "TOKEN_MISMATCH", "NOT_A_NUMBER", "NOT_FINITE",
             "NO_EVIDENCE", "MISSING_TOP", "TOP_NOT_OBJECT", "TOP_NO_ID", "TOP_NOT_FINITE",
             "TOP_POSITIVE", "TOP_DUPLICATE", "SAMPLED_NOT_A_NUMBER"]
    fmt = lambda d: ", ".join(f"{names[k]} {v}" for k, v in sorted(d.items()))  # noqa: E731
    print(f"documents: {stats['docs']} ({stats['entries']} entries) agree with the reference "
          f"({time.time() - t0:.1f} s)")
    print(f"  sampled verdicts: {fmt(stats['s_err'])}")
    print(f"  candidate verdicts: {fmt(stats['t_err'])}")
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
