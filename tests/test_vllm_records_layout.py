"""vLLM's named records in the exact layout it writes them, and layouts one edit away.

The content reader takes a record written byte for byte as vLLM writes it
(``{"token":"token_id:N","logprob":X,"bytes":null,"top_logprobs":[]}``) without the key-by-key
walk, and reads every other record the general way, from its first byte. These cases put
near misses of that layout at any record of a response (a key one byte off, whitespace, an
escape in the token string, a longer id, a duplicate key, a logprob that is -9999, null, NaN,
a string or an exponent, candidates, a record cut short at the end of the text...): the
compiled core must conclude what the reference concludes, on every SIMD path.
"""

from __future__ import annotations

import json
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from .conftest import PYTHON, _core
from .test_differential import EXAMPLES
from .test_differential import outcome as _outcome

pytestmark = pytest.mark.skipif(_core is None, reason="the compiled core is not built")


class _Case:
    def __init__(self, raw: bytes, top_k: int | None) -> None:
        self.raw, self.top_k, self.num_experts = raw, top_k, None


def _float(rng: random.Random) -> float:
    kind = rng.randrange(8)
    if kind == 0:
        return -rng.choice([0.5, 1.25, 2.0, 0.0, 1e-05, 3.5e-07, 12.75])
    if kind == 1:
        return -rng.expovariate(0.01)  # two or three integer digits
    return -rng.expovariate(1.25)  # 16-17 significant digits, now and then an exponent


def _record(token_id: int, lp: float) -> bytes:
    return b'{"token":"token_id:%d","logprob":%s,"bytes":null,"top_logprobs":[]}' % (
        token_id, repr(lp).encode())


# Edits of one record's bytes: (name, function of the record's bytes and the rng).
def _edit_key_byte(rec: bytes, rng: random.Random) -> bytes:
    keys = [b'"token"', b'"logprob"', b'"bytes"', b'"top_logprobs"']
    key = rng.choice(keys)
    at = rec.index(key) + 1 + rng.randrange(len(key) - 2)
    return rec[:at] + bytes([rec[at] ^ rng.choice([0x01, 0x20, 0x02])]) + rec[at + 1:]


def _edit_whitespace(rec: bytes, rng: random.Random) -> bytes:
    spots = [i for i, c in enumerate(rec) if c in b'{:,[]}'] + [len(rec)]
    at = rng.choice(spots)
    at = at + 1 if at < len(rec) and rng.random() < 0.5 else at
    return rec[:at] + rng.choice([b" ", b"\n", b"\t", b"\r\n  "]) + rec[at:]


def _edit_escape(rec: bytes, rng: random.Random) -> bytes:
    start = rec.index(b"token_id:")
    body_end = rec.index(b'"', start)
    at = rng.randrange(start, body_end)
    return rec[:at] + b"\\u%04x" % rec[at] + rec[at + 1:]


def _edit_logprob(rec: bytes, rng: random.Random) -> bytes:
    start = rec.index(b'"logprob":') + 10
    end = rec.index(b',"bytes"')
    value = rng.choice([b"-9999", b"-9999.0", b"null", b"NaN", b"-Infinity", b'"-0.5"', b"true",
                        b"-0", b"0", b"-0.0", b"1e-05", b"-1E+2", b"-01.5", b"-1.", b"-.5", b"--1",
                        b"-1.5e", b"-12345678901234567890.5", b"-0.1234567890123456789012",
                        b"[]", b"{}", b"-1.5.5", b"-"])
    return rec[:start] + value + rec[end:]


def _edit_token(rec: bytes, rng: random.Random) -> bytes:
    start = rec.index(b"token_id:") + 9
    end = rec.index(b'"', start)
    value = rng.choice([b"12345678", b"4294967295", b"4294967296", b"00042", b"0", b"", b"12a",
                        b"-1", b"1.5", b" 12", b"99999999999999999999"])
    return rec[:start] + value + rec[end:]


def _edit_duplicate(rec: bytes, rng: random.Random) -> bytes:
    extra = rng.choice([b',"logprob":-0.25', b',"token":"token_id:7"', b',"token_id":7', b',"id":7',
                        b',"bytes":[1,2]', b',"top_logprobs":[]', b',"other":{"a":[1]}'])
    return rec[:-1] + extra + b"}"


def _edit_candidates(rec: bytes, rng: random.Random) -> bytes:
    tail = rng.choice([b'"bytes":[116,111],"top_logprobs":[]}',
                       b'"bytes":null,"top_logprobs":[{"token":"token_id:5","logprob":-0.5,"bytes":null}]}',
                       b'"bytes":null,"top_logprobs":null}', b'"bytes":null}',
                       b'"bytes":null,"top_logprobs":[] }', b'"bytes":null,"top_logprobs":[1]}'])
    return rec[:rec.index(b'"bytes"')] + tail


def _edit_truncate(rec: bytes, rng: random.Random) -> bytes:
    return rec[:rng.randrange(len(rec))]


EDITS = {
    "key_byte": _edit_key_byte,
    "whitespace": _edit_whitespace,
    "escape": _edit_escape,
    "logprob": _edit_logprob,
    "token": _edit_token,
    "duplicate": _edit_duplicate,
    "candidates": _edit_candidates,
    "truncate": _edit_truncate,
}


@st.composite
def vllm_bodies(draw):
    """A generate response of vLLM's named records, exactly as vLLM lays them out, with none,
    one or a few of its records edited; now and then cut short anywhere."""
    rng = random.Random(draw(st.integers(0, 2**32 - 1)))
    n = draw(st.integers(1, 12))
    ids = [rng.choice([rng.randrange(10), rng.randrange(150_000), rng.randrange(10**7)]) for _ in range(n)]
    records = [_record(i, _float(rng)) for i in ids]
    edits = draw(st.lists(st.tuples(st.integers(0, n - 1), st.sampled_from(sorted(EDITS))), max_size=3))
    edits = list(dict(edits).items())  # one edit a record
    for at, name in edits:
        if name == "truncate" and at != n - 1:
            continue  # cut short: only at the end of the text (below)
        records[at] = EDITS[name](records[at], rng)
    token_ids = list(ids)
    if draw(st.integers(0, 9)) == 0:
        token_ids[rng.randrange(n)] += 1  # a record naming another token
    content = b"[" + b",".join(records) + b"]"
    choice = b'{"index":0,"logprobs":{"content":%s},"finish_reason":"length","token_ids":%s}' % (
        content, json.dumps(token_ids, separators=(",", ":")).encode())
    tail = b'],"prompt_logprobs":null,"kv_transfer_params":null}'
    if draw(st.booleans()):
        tail = b"]}"  # the records near the end of the text
    raw = b'{"request_id":"gen-1","choices":[' + choice + tail
    if any(name == "truncate" for at, name in edits if at == n - 1):
        raw = raw[:raw.index(b',"finish_reason"') - 1]  # the text ends inside the last record
    elif draw(st.integers(0, 9)) == 0:
        raw = raw[:draw(st.integers(0, len(raw) - 1))]
    return _Case(raw, draw(st.sampled_from([None, None, 1])))


@settings(max_examples=EXAMPLES)
@given(vllm_bodies())
def test_vllm_layout_and_near_misses_match_reference(case):
    expected = _outcome(PYTHON, case)
    for path in _core.simd_paths():
        with _core.simd_path_forced(path):
            assert _outcome(_core, case) == expected, path


@pytest.mark.parametrize("name", sorted(EDITS))
def test_every_near_miss_at_every_record(name):
    """Each edit at each record of a response long enough that every record but the last
    few is read the fast way when it is not edited."""
    rng = random.Random(name)
    n = 24
    ids = [rng.randrange(150_000) for _ in range(n)]
    records = [_record(i, _float(rng)) for i in ids]
    tail = b']},"finish_reason":"length","token_ids":%s}],"prompt_logprobs":null}' % (
        json.dumps(ids, separators=(",", ":")).encode())
    accepted = 0
    for at in range(n):
        for _ in range(4):
            edited = list(records)
            edited[at] = EDITS[name](records[at], rng)
            raw = b'{"choices":[{"index":0,"logprobs":{"content":[' + b",".join(edited) + tail
            if name == "truncate":
                raw = raw[:raw.index(edited[at]) + len(edited[at])]
            case = _Case(raw, None)
            expected = _outcome(PYTHON, case)
            accepted += expected[0] == "ok"
            for path in _core.simd_paths():
                with _core.simd_path_forced(path):
                    assert _outcome(_core, case) == expected, (path, at, edited[at])
    if name in ("whitespace", "candidates", "duplicate", "logprob"):
        assert accepted  # some of these edits leave a valid response


def test_the_layout_is_read():
    """The unedited layout: ids and logprobs as written (float() of the repr)."""
    rng = random.Random(5)
    ids = [rng.randrange(150_000) for _ in range(300)]
    lps = [_float(rng) for _ in ids]
    raw = (b'{"choices":[{"index":0,"logprobs":{"content":[' + b",".join(map(_record, ids, lps))
           + b']},"finish_reason":"length","token_ids":%s}]}' % json.dumps(ids).encode())
    for path in _core.simd_paths():
        with _core.simd_path_forced(path):
            choice = _core.parse_generate_response(raw).choices[0]
            assert choice.completion_ids.tolist() == ids
            assert choice.completion_logprobs.tolist() == lps
