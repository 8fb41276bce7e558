"""``parse_batch``, bodies straight into a Batch, against ``collate(parse_many(...))`` on both
implementations and every SIMD path: the same arrays, the same skipped bodies and the same
errors (messages and body indexes), on plain, changed and malformed bodies; no reference
left behind; no crash when another thread rewrites a bytearray body."""

from __future__ import annotations

import gc
import sys
import tracemalloc
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tokenwire
from tokenwire import MalformedResponseError, samples
from tokenwire.read import _facade, _select

from .conftest import PYTHON, _core
from .test_batch import IMPLEMENTATIONS
from .test_plain_path import plain_cases

EXAMPLES = 60
# Every field collate fills that parse_batch must fill alike.
_SCALARS = ("format", "top_k", "pad_id", "finish_reason")


@pytest.fixture(params=IMPLEMENTATIONS)
def batch_impl(request, monkeypatch):
    monkeypatch.setattr(_select, "impl", request.param)
    monkeypatch.setattr(_select, "kernels", request.param)
    return request.param


def _paths(impl: Any) -> list[Any]:
    """A context per SIMD path of ``impl`` (one for the reference)."""
    if impl is PYTHON:
        return [_Nothing()]
    return [impl.simd_path_forced(path) for path in impl.simd_paths()]


class _Nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> None:
        return None


def _outcome(call: Any) -> Any:
    try:
        return call()
    except (MalformedResponseError, ValueError, TypeError) as exc:  # a width too narrow among them
        return exc


def assert_same_batch(got: Any, want: Any) -> None:
    if isinstance(want, BaseException):
        assert type(got) is type(want) and str(got) == str(want), (got, want)
        assert getattr(got, "body_index", None) == getattr(want, "body_index", None)
        return
    assert not isinstance(got, BaseException), got
    g, w = got.arrays(), want.arrays()
    assert sorted(g) == sorted(w)
    for name, array in w.items():
        assert g[name].dtype == array.dtype and g[name].shape == array.shape, name
        assert g[name].flags.c_contiguous, name
        np.testing.assert_array_equal(g[name], array, err_msg=name)
    for name in _SCALARS:
        assert getattr(got, name) == getattr(want, name), name
    assert [str(e) for e in got.errors] == [str(e) for e in want.errors]
    assert [e.body_index for e in got.errors] == [e.body_index for e in want.errors] == want.skipped.tolist()


def _both(raws: list[Any], **options: Any) -> tuple[Any, Any]:
    """parse_batch's outcome and collate(parse_many)'s, for the same bodies and options."""
    collate_options = {k: options.pop(k) for k in ("width", "pad_id", "prompt_width", "out") if k in options}
    errors = options.get("errors", "raise")

    def reference() -> Any:
        items = tokenwire.parse_many(raws, **options)
        return tokenwire.collate(items, **collate_options)

    got = _outcome(lambda: tokenwire.parse_batch(raws, **options, **collate_options))
    want = _outcome(reference)
    if errors == "collect" and not isinstance(want, BaseException):  # collate keeps the errors it skips
        collected = [x for x in tokenwire.parse_many(raws, **options) if isinstance(x, BaseException)]
        assert [str(e) for e in want.errors] == [str(x) for x in collected]
    return got, want


@st.composite
def batches(draw) -> list[Any]:
    """Bodies of plain responses (valid, changed to need the rules, malformed), now and then a
    malformed JSON text or a body of heads."""
    raws = [draw(plain_cases())[0].raw for _ in range(draw(st.integers(0, 5)))]
    for _ in range(draw(st.integers(0, 1))):
        raws.insert(draw(st.integers(0, len(raws))), draw(st.sampled_from([b"{}", b"[", b'{"choices":[]}', b"null"])))
    return raws


@settings(max_examples=EXAMPLES, deadline=None)
@given(raws=batches(), errors=st.sampled_from(["collect", "raise"]), threads=st.sampled_from([1, 2]),
       pad_id=st.sampled_from([0, -1]), width=st.sampled_from([None, 0, 5000]))
def test_parse_batch_is_collate_of_parse_many(batch_impl, raws, errors, threads, pad_id, width):
    for forced in _paths(batch_impl):
        with forced:
            got, want = _both(raws, errors=errors, threads=threads, pad_id=pad_id, width=width)
            assert_same_batch(got, want)


@settings(max_examples=EXAMPLES // 3, deadline=None)
@given(raws=batches())
def test_the_core_batch_is_the_reference_batch(raws):
    """The compiled core's direct path against the reference's collate of its own parses."""
    if _core is None:
        pytest.skip("no compiled core")
    want = {}
    saved = _select.impl, _select.kernels
    try:
        _select.impl = _select.kernels = PYTHON
        want = _outcome(lambda: tokenwire.collate(tokenwire.parse_many(raws, errors="collect", threads=1)))
        _select.impl = _select.kernels = _core
        for path in _core.simd_paths():
            with _core.simd_path_forced(path):
                got = _outcome(lambda: tokenwire.parse_batch(raws, errors="collect", threads=1))
                assert_same_batch(got, want)
    finally:
        _select.impl, _select.kernels = saved


def test_the_direct_path_takes_plain_bodies():
    """Plain bodies are written from their scans: no GenerateResponse is made."""
    if _core is None:
        pytest.skip("no compiled core")
    raws = samples.WORKLOADS["packed_128"].responses(3) + samples.WORKLOADS["compact_sampled_8k"].responses(1)
    for raw in raws:
        assert _core._direct_generate(raw) is not None
    made = []
    original = _core.parse_generate_response

    def counting(*args: Any, **kwargs: Any) -> Any:
        made.append(1)
        return original(*args, **kwargs)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(_facade, "parse_generate_response", counting)
        batch = tokenwire.parse_batch(raws, threads=1)
        assert made == []
        tokenwire.parse_batch(raws + [b"{}"], threads=1, errors="collect")
        assert made == [1]  # the malformed body, by the rules
    want = tokenwire.collate(tokenwire.parse_many(raws, threads=1))
    assert_same_batch(batch, want)
    assert batch.completion_ids.shape == (4, max(len(c.completion_ids) for r in tokenwire.parse_many(raws)
                                                 for c in r.choices))


def test_mixed_batches_and_options_are_collated(batch_impl):
    """Bodies with heads, masks or routing, other formats and options: collate of parse_many."""
    raws = [samples.WORKLOADS["packed_128"].responses(1)[0], samples.sample("multi_choice"),
            samples.moe_response(64, 16, seed=2), b"{}"]
    for options in ({}, {"top_k": 3}, {"require_sampling_mask": True}, {"prompt_tokens": 64},
                    {"num_experts": 256}, {"teacher_logits": True}):
        got, want = _both(raws, errors="collect", **options)
        assert_same_batch(got, want)
    sglang = b'{"output_ids":[5,6],"meta_info":{"output_token_logprobs":[[-0.1,5,null],[-0.2,6,null]]}}'
    got, want = _both([sglang, sglang], format="sglang", check_usage=False)
    assert_same_batch(got, want)


def test_a_body_for_the_rules_among_plain_ones(batch_impl):
    """A valid body the plain path hands to the rules (native records) among plain ones: the
    plain ones become responses and the batch is collated."""
    native = b'{"choices":[{"token_ids":[5,6],"logprobs":{"sampled":[-0.5,-1.0]}}],"prompt_token_ids":[1,2,3]}'
    raws = samples.WORKLOADS["packed_128"].responses(2)
    for batch in ([native, *raws], [*raws, native, b"{}"]):
        got, want = _both(batch, errors="collect", threads=1)
        assert_same_batch(got, want)


def test_widths_and_out(batch_impl):
    raws = samples.WORKLOADS["packed_128"].responses(4)
    with pytest.raises(ValueError, match="more than width=10"):
        tokenwire.parse_batch(raws, width=10)
    with pytest.raises(ValueError, match="more than prompt_width=3"):
        tokenwire.parse_batch(raws, prompt_width=3)
    with pytest.raises(TypeError, match="pad_id"):
        tokenwire.parse_batch(raws, pad_id=1.5)
    with pytest.raises(TypeError, match="out must be a Batch"):
        tokenwire.parse_batch(raws, out=3)
    with pytest.raises(TypeError, match="unknown option"):
        tokenwire.parse_batch(raws, nope=1)
    first = tokenwire.parse_batch(raws, width=200, prompt_width=80)
    ids = first.completion_ids
    again = tokenwire.parse_batch(raws[::-1], width=200, prompt_width=80, out=first)
    want = tokenwire.collate(tokenwire.parse_many(raws[::-1]), width=200, prompt_width=80)
    assert_same_batch(again, want)
    assert again.completion_ids is ids  # written again in place


def test_the_longest_body_malformed_leaves_the_width_of_the_rest():
    """A body refused at its rows (ids past the largest token id) after the widths were taken
    from it: the batch's width is the longest of the others, as collate's is."""
    raws = samples.WORKLOADS["packed_128"].responses(3)
    longest = max(raws, key=len)
    bad = longest.replace(b'"token_ids":[', b'"token_ids":[4294967296,', 1)
    raws = [bad if r is longest else r for r in raws]
    for impl in [PYTHON] + ([_core] if _core is not None else []):
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(_select, "impl", impl)
            mp.setattr(_select, "kernels", impl)
            got, want = _both(raws, errors="collect", width=None)
            assert_same_batch(got, want)
            assert got.skipped.tolist() == [raws.index(bad)]
            got, want = _both(raws, errors="raise")
            assert_same_batch(got, want)


def test_no_reference_or_memory_left_behind():
    raws = samples.WORKLOADS["packed_128"].responses(8) + [b"{}", b"[1"]
    compact = samples.WORKLOADS["compact_sampled_8k"].responses(1)
    for _ in range(3):
        tokenwire.parse_batch(raws + compact, errors="collect")  # warm: caches, interned strings
    gc.collect()  # the warm-up's errors: their tracebacks hold the frames
    counts = [sys.getrefcount(r) for r in raws]
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for _ in range(30):
            batch = tokenwire.parse_batch(raws + compact, errors="collect")
            del batch
        gc.collect()
        after = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert after - before < 64 * 1024
    assert [sys.getrefcount(r) for r in raws] == counts


# The members the plain path reads of a body, as a server may write them (tw_plain_walk reads
# them from the stripped copy, or hands the copy to the JSON reader): each choice's
# finish_reason, the packed dtype and shape, the compact format and num_top_logprobs, the keys
# that send a body to the rules, repeated and escaped keys.
_FINISHES = ['"stop"', '"length"', '"ab\\u00e9"', '"\u00e9t\u00e9"', "null", "1", '{"a":1}', "[]", '""']
_SHAPES = [None, "[{n}]", "[{n}.0]", "[ {n} ]", "null", "[]", "[{n},1]", '"{n}"', "[-1]", "[1e2]",
           "[123456789012345678901]", "[{m}]"]
_DTYPES = ['"float32"', '"float\\u00332"', '"float16"', "null", "4", '"float32","dtype":"float32"']
_EXTRA = ["", ',"logprobs":null', ',"logprobs":{}', ',"routed_experts":null', ',"payload":1', ',"x":{"y":[1,{"z":"}"}]}',
          ',"finish_reason":"stop"', ',"completion_logprobs":null', ',"\\u0066inish_reason":"x"', ',"weight_versions":[]']
_ROOT_EXTRA = ["", ',"prompt_token_id_logprobs":null', ',"prompt_token_id_logprobs":[1]', ',"prompt_token_ids":null',
               ',"usage":{"a":[1,2,{"b":null}]}', ',"choices":[]', ',"request_id":"r\\"1"']


@st.composite
def walked_bodies(draw) -> bytes:
    """A plain packed (or compact) body with its small members written in any of the forms above
    (each member in its usual form half of the time)."""

    def usual_or(usual: Any, forms: list[Any]) -> Any:
        return usual if draw(st.booleans()) else draw(st.sampled_from(forms))

    n = draw(st.integers(0, 4))
    ids = draw(st.lists(st.integers(0, 200000), min_size=n, max_size=n))
    values = np.array(draw(st.lists(st.sampled_from([-0.5, -1.25, 0.0, -3.0]), min_size=n, max_size=n)), dtype="<f4")
    import base64

    choices = []
    for _ in range(draw(st.sampled_from([1, 1, 1, 2, 2, 9]))):  # past the walk's 8 on the stack
        if draw(st.booleans()):
            shape = usual_or(None, _SHAPES)
            member = '"completion_logprobs":{"data":"%s","dtype":%s%s}' % (
                base64.b64encode(values.tobytes()).decode(), usual_or(_DTYPES[0], _DTYPES),
                "" if shape is None else ',"shape":' + shape.format(n=n, m=n + 1))
        else:
            rows = np.array(ids, dtype="<u4").tobytes() + values.tobytes()
            top = usual_or("-1", ["-1", "0", "-2", "1.0", "20", '"1"', "null"])
            fmt = usual_or('"u32-f32-le-v1"', ['"u32-f32-le-v2"', "null", '"u32-f32-le-\\u00761"'])
            member = ('"compact_logprobs":{"format":%s,"num_top_logprobs":%s,"offsets":[%s],"data":"%s"}' % (
                fmt, top, ",".join(map(str, range(n + 1))), base64.b64encode(rows).decode()))
        finish = usual_or('"stop"', [None, *_FINISHES])
        parts = [f'"token_ids":[{",".join(map(str, ids))}]', member]
        if finish is not None:
            parts.append(f'"finish_reason":{finish}')
        parts = draw(st.permutations(parts))
        choices.append("{" + ",".join(parts) + usual_or("", _EXTRA) + "}")
    body = '{"choices":[%s],"prompt_token_ids":[1,2]%s}' % (",".join(choices), usual_or("", _ROOT_EXTRA))
    return body.encode()


@settings(max_examples=EXAMPLES * 2, deadline=None)
@given(raws=st.lists(walked_bodies(), min_size=1, max_size=3))
def test_the_walked_members_are_the_json_readers(batch_impl, raws):
    """However the small members are written, parse_batch is collate(parse_many): the walk of
    the stripped copy reads what the JSON reader would, or hands the copy to it."""
    got, want = _both(raws, errors="collect", threads=1)
    assert_same_batch(got, want)
    if _core is not None and batch_impl is _core:
        for raw in raws:
            response = _outcome(lambda: tokenwire.parse_generate_response(raw))
            for path in _paths(_core):  # the walk's skips on every code path
                with path:
                    direct = _core._direct_generate(raw)
                if direct is not None:  # taken: the rules' response agrees on what the batch keeps
                    assert not isinstance(response, BaseException), response
                    assert [c.finish_reason for c in response.choices] == direct.finish_reasons


def test_the_bodies_the_loop_leaves_are_read_one_by_one():
    """The core's loop without the GIL (_DirectPart) leaves a body it does not read (a
    bytearray, a member the walk does not read) to _direct_generate: the batch is still
    collate(parse_many)'s, its rows in body order, on any number of threads, no response made."""
    if _core is None:
        pytest.skip("no compiled core")
    raws = samples.WORKLOADS["packed_128"].responses(4) + samples.WORKLOADS["compact_sampled_8k"].responses(1)
    escaped = raws[1].replace(b'"finish_reason"', b'"finish_\\u0072eason"', 1)  # read by the JSON reader
    bodies = [raws[0], escaped, bytearray(raws[2]), raws[3], raws[4], b"{}"]
    part = _core._DirectPart()
    part.read(bodies, 0, len(bodies))
    assert part.doubted == [1, 2, 5]
    for start, stop in ((0, len(bodies) + 1), (-1, 2), (3, 2)):
        with pytest.raises(ValueError):
            _core._DirectPart().read(bodies, start, stop)
    with pytest.raises(ValueError, match="once"):  # a second read could move arenas rows point into
        part.read(bodies, 0, 1)
    made = []
    original = _core.parse_generate_response

    def counting(*args: Any, **kwargs: Any) -> Any:
        made.append(1)
        return original(*args, **kwargs)

    want = tokenwire.collate(tokenwire.parse_many([bytes(b) for b in bodies], threads=1, errors="collect"))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(_facade, "parse_generate_response", counting)
        for threads in (1, 2, 4):
            for forced in _paths(_core):
                with forced:
                    assert_same_batch(tokenwire.parse_batch(bodies, threads=threads, errors="collect"), want)
    assert len(made) == 3 * len(_paths(_core))  # b"{}" alone, by the rules


def test_a_bytearray_rewritten_meanwhile_does_not_crash():
    """Another thread rewriting the bodies' bytearrays while they are read: each body is read
    from one snapshot, so the batch is made or a body refused, never a crash."""
    import threading

    raws = samples.WORKLOADS["packed_128"].responses(4) + samples.WORKLOADS["compact_sampled_8k"].responses(1)
    bodies = [bytearray(r) for r in raws]
    other = [r.translate(bytes.maketrans(b"0123456789,", b"9876543210 ")) for r in raws]
    stop = threading.Event()

    def rewrite() -> None:
        flip = 0
        while not stop.is_set():
            flip ^= 1
            for body, a, b in zip(bodies, raws, other):
                body[:] = a if flip else b

    worker = threading.Thread(target=rewrite, daemon=True)
    worker.start()
    try:
        for threads in (1, 2, 1, 2):
            got = _outcome(lambda: tokenwire.parse_batch(bodies, threads=threads, errors="collect"))
            assert isinstance(got, (tokenwire.Batch, MalformedResponseError, ValueError)), got
    finally:
        stop.set()
        worker.join()
