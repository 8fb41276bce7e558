"""Differential check of csrc/json/tw_scan.c against orjson.

Builds the scanner (tw_scan.c, tw_scan_values.c) into a shared library in /tmp, loads it with ctypes, and for
thousands of generated documents (random response-like JSON written with random
whitespace, escapes, duplicate keys and decoys; tricky numbers and strings; nesting
around orjson's depth limit; random mutations and truncations of those and of
sample-like responses) asserts that:

  * every code path (scalar, AVX2, AVX-512) gives the same result;
  * tw_scan accepts exactly when orjson.loads accepts;
  * on accepted documents every recorded value is right: present/type, the span
    text parses back to the value at that path, count/all_int/has_escape/ascii;
  * orjson.loads(stripped copy) equals orjson.loads(original) with the blanked
    values replaced by "" / [].

Usage:
  python3 tests/c/check_scan.py [--rounds N] [--seed S] [--sanitize]

--sanitize builds with -fsanitize=address,undefined and re-runs itself with
the ASan runtime preloaded (leak detection off: CPython's own allocations).
"""

from __future__ import annotations

import argparse
import ctypes as C
import random
import sys
import time
from pathlib import Path

import clib
import orjson
from scan_gen import NUMBERS, Gen, full_samples, mutate, sample_like
from tw_fields import BLANK_ARRAY, BLANK_STRING, FIELD_ID, FIELDS, NFIELDS, NROOT, ROOT_FIELDS

ROOT = clib.ROOT
OUT = Path("/tmp/tw_scan_check")
sys.setrecursionlimit(50_000)

# ---------------------------------------------------------------------------
# The library
# ---------------------------------------------------------------------------


class TwValue(C.Structure):
    _fields_ = [
        ("present", C.c_uint8),
        ("type", C.c_uint8),
        ("has_escape", C.c_uint8),
        ("ascii", C.c_uint8),
        ("all_int", C.c_uint8),
        ("read", C.c_uint8),
        ("blob", C.c_uint16),
        ("start", C.c_size_t),
        ("end", C.c_size_t),
        ("count", C.c_size_t),
        ("read_at", C.c_size_t),
    ]



class TwChoice(C.Structure):
    _fields_ = [("is_object", C.c_uint8), ("f", TwValue * NFIELDS)]


class TwSpan(C.Structure):
    _fields_ = [("start", C.c_size_t), ("end", C.c_size_t)]


class TwDoc(C.Structure):
    _fields_ = [
        ("path", C.c_int),
        ("max_depth", C.c_size_t),
        ("decode", C.c_int),
        ("openai", C.c_int),
        ("sglang", C.c_int),
        ("b64_path", C.c_int),
        ("blank_fields", C.c_uint64),
        ("content_reader", C.c_void_p),
        ("top_is_object", C.c_uint8),
        ("prompt_token_ids", TwValue),  # root[0]
        ("choices", TwValue),  # root[1]
        ("root_more", TwValue * (NROOT - 2)),  # the other root records, root[2:]
        ("choice", C.POINTER(TwChoice)),
        ("nchoices", C.c_size_t),
        ("blank", C.POINTER(TwSpan)),
        ("nblank", C.c_size_t),
        ("blank_bytes", C.c_size_t),
        ("err_pos", C.c_size_t),
        ("err_msg", C.c_char_p),
        ("blobs", C.c_void_p),
        ("nblobs", C.c_size_t),
        ("uints", C.c_void_p),
        ("nuints", C.c_size_t),
        ("entries", C.c_void_p),
        ("nentries", C.c_size_t),
        ("cand_ids", C.c_void_p),
        ("cand_lps", C.c_void_p),
        ("cands_cap", C.c_size_t),
        ("choice_cap", C.c_size_t),
        ("blank_cap", C.c_size_t),
        ("stack_cap", C.c_size_t),
        ("blobs_cap", C.c_size_t),
        ("uints_cap", C.c_size_t),
        ("entries_cap", C.c_size_t),
        ("stack", C.c_void_p),
    ]


T_NONE, T_NULL, T_FALSE, T_TRUE, T_NUMBER, T_STRING, T_ARRAY, T_OBJECT = range(8)
PATH_IDS = {"scalar": 1, "avx2": 2, "avx512": 3, "neon": 4}  # TW_PATH_* (tw_cpu.h)
MASK_FIELD = FIELD_ID["SAMPLING_MASK"]


def build(sanitize: bool) -> Path:
    return clib.build(OUT, "twscan", ["json/tw_scan.c", "json/tw_scan_values.c", "codecs/tw_base64.c"], sanitize=sanitize)


class Scanner:
    def __init__(self, lib_path: Path):
        lib = clib.load(lib_path)
        lib.tw_doc_init.argtypes = [C.POINTER(TwDoc)]
        lib.tw_doc_free.argtypes = [C.POINTER(TwDoc)]
        lib.tw_scan.argtypes = [C.c_char_p, C.c_size_t, C.POINTER(TwDoc)]
        lib.tw_scan.restype = C.c_int
        lib.tw_stripped_size.argtypes = [C.POINTER(TwDoc), C.c_size_t]
        lib.tw_stripped_size.restype = C.c_size_t
        lib.tw_strip.argtypes = [C.c_char_p, C.c_size_t, C.POINTER(TwDoc), C.c_char_p]
        lib.tw_path_available.argtypes = [C.c_int]
        ints = [C.POINTER(TwValue), C.c_uint64, C.POINTER(C.c_int64), C.POINTER(C.c_size_t)]
        lib.tw_take_uints.argtypes = [C.POINTER(TwDoc), *ints]
        lib.tw_parse_uint_array.argtypes = [C.c_char_p, *ints, C.c_int]
        rows = [C.POINTER(TwValue), C.c_uint64, C.POINTER(C.c_int64), C.POINTER(C.c_int32), C.POINTER(C.c_size_t)]
        lib.tw_take_nested.argtypes = [C.POINTER(TwDoc), *rows]
        lib.tw_parse_nested_uint.argtypes = [C.c_char_p, *rows]
        lib.tw_nested_total.argtypes = [C.POINTER(TwDoc), C.POINTER(TwValue)]
        lib.tw_nested_total.restype = C.c_size_t
        lib.tw_nested_bound.argtypes = [C.c_char_p, C.POINTER(TwValue)]
        lib.tw_nested_bound.restype = C.c_size_t
        self.lib = lib
        self.read_arrays = self.read_lists = 0
        self.paths = [p for p in PATH_IDS if lib.tw_path_available(PATH_IDS[p])]
        self.doc = TwDoc()
        lib.tw_doc_init(C.byref(self.doc))

    def scan(self, data: bytes, path: str):
        """(rc, snapshot, stripped or None, err)."""
        d = self.doc
        d.path = PATH_IDS[path]
        # An exactly-sized buffer (no NUL terminator follows the data in it).
        buf = C.create_string_buffer(data, len(data)) if data else C.create_string_buffer(1)
        rc = self.lib.tw_scan(buf, len(data), C.byref(d))
        if rc != 0:
            return rc, None, None, (d.err_pos, d.err_msg)
        snap = {
            "top": d.top_is_object,
            "prompt": _val(d.prompt_token_ids),
            "choices": _val(d.choices),
            "root_more": [_val(v) for v in d.root_more],
            "choice": [
                (d.choice[i].is_object, [_val(d.choice[i].f[k]) for k in range(NFIELDS)])
                for i in range(d.nchoices)
            ],
            "blank": [(d.blank[i].start, d.blank[i].end) for i in range(d.nblank)],
        }
        values = [d.prompt_token_ids] + [d.choice[i].f[k] for i in range(d.nchoices) for k in range(NFIELDS)]
        for i, v in enumerate(values):
            if v.read and i and (i - 1) % NFIELDS == MASK_FIELD:
                # a sampling_mask list read during the scan: what tw_parse_nested_uint reads
                self.read_lists += 1
                for high in (2**31 - 1, 7):
                    assert self._rows(buf, v, high, True) == self._rows(buf, v, high, False), (high, data[:300])
            elif v.read:  # read during the scan: what tw_parse_uint_array reads, for any max
                self.read_arrays += 1
                for high in (2**63 - 1, 2**32 - 1, 7):
                    assert self._ints(buf, v, high, True) == self._ints(buf, v, high, False), (high, data[:300])
        n = self.lib.tw_stripped_size(C.byref(d), len(data))
        out = C.create_string_buffer(n + 1)
        self.lib.tw_strip(buf, len(data), C.byref(d), out)
        return rc, snap, out.raw[:n], None


    def _ints(self, buf, v, high: int, taken: bool):
        out = (C.c_int64 * max(v.count, 1))()
        err = C.c_size_t(0)
        if taken:
            rc = self.lib.tw_take_uints(C.byref(self.doc), C.byref(v), high, out, C.byref(err))
        else:
            rc = self.lib.tw_parse_uint_array(buf, C.byref(v), high, out, C.byref(err), 1)
        end = v.count if rc == 0 else err.value
        return rc, err.value if rc else None, list(out[:end])


    def _rows(self, buf, v, high: int, taken: bool):
        if taken:
            total = self.lib.tw_nested_total(C.byref(self.doc), C.byref(v))
        else:
            total = self.lib.tw_nested_bound(buf, C.byref(v))
        offsets = (C.c_int64 * (v.count + 1))()
        values = (C.c_int32 * max(total, 1))()
        err = C.c_size_t(0)
        if taken:
            rc = self.lib.tw_take_nested(C.byref(self.doc), C.byref(v), high, offsets, values, C.byref(err))
        else:
            rc = self.lib.tw_parse_nested_uint(buf, C.byref(v), high, offsets, values, C.byref(err))
        rows = v.count if rc == 0 else err.value
        return rc, err.value if rc else None, list(offsets[: rows + 1]), list(values[: offsets[rows]])


def _val(v: TwValue):
    return (v.present, v.type, v.has_escape, v.ascii, v.all_int, v.start, v.end, v.count)


# ---------------------------------------------------------------------------
# Expectations from orjson's parse
# ---------------------------------------------------------------------------

MISSING = object()


def _type_of(x) -> int:
    if x is None:
        return T_NULL
    if x is False:
        return T_FALSE
    if x is True:
        return T_TRUE
    if isinstance(x, (int, float)):
        return T_NUMBER
    if isinstance(x, str):
        return T_STRING
    if isinstance(x, list):
        return T_ARRAY
    return T_OBJECT


def _get(obj, keys):
    for k in keys:
        if not isinstance(obj, dict) or k not in obj:
            return MISSING
        obj = obj[k]
    return obj


def _int_elems(text: bytes) -> bool:
    """all_int from the literal text: every element an integer literal."""
    import json

    # stdlib json keeps integer literals as int of any size, fractions/exponents as float
    value = json.loads(text)
    return all(type(x) is int for x in value)


def check_value(what: str, raw: bytes, v, expected) -> None:
    present, typ, esc, asc, all_int, start, end, count = v
    if expected is MISSING:
        assert v == (0, 0, 0, 0, 0, 0, 0, 0), f"{what}: recorded but absent: {v}"
        return
    assert present == 1 and typ == _type_of(expected), f"{what}: type {typ} for {expected!r:.60}"
    assert 0 <= start <= end <= len(raw), f"{what}: span {start}:{end}"
    text = raw[start:end]
    if typ == T_STRING:
        assert raw[start - 1 : start] == b'"' and raw[end : end + 1] == b'"', f"{what}: quotes"
        assert orjson.loads(b'"' + text + b'"') == expected, f"{what}: string span"
        assert esc == (b"\\" in text) and asc == all(c < 0x80 for c in text), f"{what}: flags"
        assert all_int == 0 and count == 0, f"{what}: array fields on a string"
    else:
        assert orjson.loads(text) == expected, f"{what}: span text {text[:60]!r}"
        assert esc == 0 and asc == 0, f"{what}: string flags on a non-string"
        if typ == T_ARRAY:
            assert count == len(expected), f"{what}: count {count} != {len(expected)}"
            assert all_int == _int_elems(text), f"{what}: all_int {all_int}"
        else:
            assert all_int == 0 and count == 0, f"{what}: array fields on a non-array"


def expected_choices(doc):
    """The choice elements that get records (see tw_scan.h, "Choice records")."""
    out = []
    for el in doc:
        out.append(el)
        if not isinstance(el, dict) or not isinstance(el.get("token_ids", MISSING), list):
            break
    return out


def blank_expected(doc, nrec: int):
    """orjson.loads(original) with the blanked values replaced."""
    if not isinstance(doc, dict):
        return doc
    if isinstance(doc.get("prompt_token_ids"), list):
        doc["prompt_token_ids"] = []
    choices = doc.get("choices")
    if not isinstance(choices, list):
        return doc
    for ch in choices[:nrec]:
        for paths, kind, blanked in ((BLANK_STRING, str, ""), (BLANK_ARRAY, list, [])):
            for keys in paths:
                holder = ch
                for key in keys[:-1]:
                    holder = holder.get(key) if isinstance(holder, dict) else None
                if isinstance(holder, dict) and isinstance(holder.get(keys[-1]), kind):
                    holder[keys[-1]] = type(blanked)()
    return doc


def verify_records(raw: bytes, snap, stripped: bytes) -> None:
    doc = orjson.loads(raw)
    if not isinstance(doc, dict):
        assert snap["top"] == 0 and not snap["choice"] and not snap["blank"], "non-object root"
        assert snap["prompt"][0] == 0 and snap["choices"][0] == 0
        assert all(v[0] == 0 for v in snap["root_more"])
        assert stripped == raw
        return
    assert snap["top"] == 1
    check_value("prompt_token_ids", raw, snap["prompt"], doc.get("prompt_token_ids", MISSING))
    check_value("choices", raw, snap["choices"], doc.get("choices", MISSING))
    for (name, keys), v in zip(ROOT_FIELDS[2:], snap["root_more"]):
        check_value(".".join(keys), raw, v, doc.get(keys[0], MISSING))
    choices = doc.get("choices")
    rec = expected_choices(choices) if isinstance(choices, list) else []
    assert len(snap["choice"]) == len(rec), f"nchoices {len(snap['choice'])} != {len(rec)}"
    for i, (el, (is_obj, fields)) in enumerate(zip(rec, snap["choice"])):
        assert is_obj == isinstance(el, dict), f"choice {i} is_object"
        for k, (_, scope, keys) in enumerate(FIELDS):
            # the scanner records every choice path in any document (never an item's)
            exp = _get(el, keys) if isinstance(el, dict) and scope == "choice" else MISSING
            check_value(f"choices[{i}].{'.'.join(keys)}", raw, fields[k], exp)
    spans = snap["blank"]
    assert all(a < b for a, b in spans) and all(
        spans[i][1] <= spans[i + 1][0] for i in range(len(spans) - 1)
    ), "blank spans sorted and disjoint"
    want = blank_expected(orjson.loads(raw), len(rec))
    got = orjson.loads(stripped)
    assert got == want, "stripped document differs"


# ---------------------------------------------------------------------------
# Driver
# ---------------------------------------------------------------------------


class Stats:
    def __init__(self):
        self.total = self.accepted = self.rejected = 0
        self.kinds: dict[str, list[int]] = {}


def c_corpus() -> list[tuple[bool, bytes]]:
    """The V(...)/I(...) snippets of test_scan.c: their expectations must be orjson's."""
    import re

    src = (ROOT / "tests" / "c" / "test_scan.c").read_text()
    body = src[src.index("static const snippet CORPUS[]") :]
    body = body[: body.index("};")]
    out = []
    for m in re.finditer(r'\b([VI])\(((?:\s*"(?:[^"\\]|\\.)*")+)\s*\)', body):
        raw = b"".join(_c_unescape(lit) for lit in re.findall(r'"((?:[^"\\]|\\.)*)"', m.group(2)))
        out.append((m.group(1) == "V", raw))
    return out


def _c_unescape(lit: str) -> bytes:
    out, i = bytearray(), 0
    simple = {"n": 10, "t": 9, "r": 13, '"': 34, "\\": 92, "'": 39, "0": 0}
    while i < len(lit):
        ch = lit[i]
        if ch != "\\":
            out += ch.encode()
            i += 1
        elif lit[i + 1] == "x":
            j = i + 2
            while j < len(lit) and lit[j] in "0123456789abcdefABCDEF":
                j += 1
            out.append(int(lit[i + 2 : j], 16))
            i = j
        else:
            out.append(simple[lit[i + 1]])
            i += 2
    return bytes(out)


def orjson_accepts(data: bytes) -> bool:
    try:
        orjson.loads(data)
        return True
    except orjson.JSONDecodeError:
        return False


def check_one(sc: Scanner, data: bytes, kind: str, st: Stats) -> None:
    results = [sc.scan(data, p) for p in sc.paths]
    rc, snap, stripped, err = results[0]
    for p, other in zip(sc.paths[1:], results[1:]):
        assert other[:3] == results[0][:3] and other[3] == err, f"path {p} differs ({kind})"
    ok = orjson_accepts(data)
    st.total += 1
    st.kinds.setdefault(kind, [0, 0])[0] += 1
    st.kinds[kind][1] += ok
    if ok != (rc == 0):
        raise AssertionError(
            f"{kind}: orjson {'accepts' if ok else 'rejects'} but tw_scan rc={rc} {err}; "
            f"document {data[:300]!r}{'...' if len(data) > 300 else ''}"
        )
    if rc == 0:
        st.accepted += 1
        try:
            verify_records(data, snap, stripped)
        except AssertionError as exc:
            raise AssertionError(f"{kind}: {exc}; document {data[:400]!r}") from None
    else:
        st.rejected += 1


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=6000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--sanitize", action="store_true")
    ap.add_argument("--no-samples", action="store_true", help="skip the full-size samples")
    args = ap.parse_args()

    lib = build(args.sanitize)
    if args.sanitize and (status := clib.rerun_under_asan()) is not None:
        return status

    sc = Scanner(lib)
    rng = random.Random(args.seed)
    gen = Gen(rng)
    st = Stats()
    t0 = time.time()
    print(f"library {lib}; paths {sc.paths}; orjson {orjson.__version__}")

    corpus = c_corpus()
    for valid, data in corpus:
        assert orjson_accepts(data) == valid, f"test_scan.c corpus expectation wrong: {data!r}"
        check_one(sc, data, "c-corpus", st)
    print(f"  test_scan.c corpus: {len(corpus)} snippets, expectations match orjson")
    if not args.no_samples:
        for name, data in full_samples():
            check_one(sc, data, "sample", st)
            _, snap, stripped, _ = sc.scan(data, sc.paths[-1])
            print(
                f"  sample {name}: {len(data)} bytes, {len(snap['choice'])} choices, "
                f"{len(snap['blank'])} blanks, stripped {len(stripped)} bytes"
            )
    smalls = sample_like(rng)
    for data in smalls:
        check_one(sc, data, "sample-like", st)
    for data in rng.sample(smalls, 12):
        for cut in range(len(data)):  # every truncation
            check_one(sc, data[:cut], "truncation", st)
    for i in range(args.rounds):
        doc = gen.document().encode("utf-8", "surrogatepass")
        check_one(sc, doc, "generated", st)
        check_one(sc, mutate(rng, doc), "generated+mutation", st)
        check_one(sc, mutate(rng, rng.choice(smalls)), "sample-like+mutation", st)
        if i % 50 == 0:
            check_one(sc, gen.deep().encode(), "deep", st)
        if i % 10 == 0:
            check_one(sc, gen.number(0.5).encode(), "number", st)
            check_one(sc, gen.string(gen.text()).encode("utf-8", "surrogatepass"), "string", st)
    for lit in NUMBERS:
        for wrap in ("{}", "[{}]", '{{"a":{}}}', "{} ", "-{}"):
            check_one(sc, wrap.format(lit).encode(), "number", st)
    print(
        f"{st.total} documents checked in {time.time() - t0:.1f}s: "
        f"{st.accepted} accepted, {st.rejected} rejected; all agree with orjson; "
        f"{sc.read_arrays} id arrays read during the scan agree with tw_parse_uint_array, "
        f"{sc.read_lists} sampling_mask lists with tw_parse_nested_uint"
    )
    print(
        "  by kind (accepted/total): "
        + ", ".join(f"{k} {a}/{n}" for k, (n, a) in sorted(st.kinds.items()))
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
