"""The writers: every encoder round-trips through the readers, refuses what they would refuse,
and whole responses serialize byte for byte as vLLM's endpoint serializes them."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import tokenwire
from tokenwire import Blob, MalformedResponseError, samples
from tokenwire.base import _json


@pytest.fixture
def writer(kernels, monkeypatch):
    """The writers on one implementation (they run the facade's implementation)."""
    monkeypatch.setattr(tokenwire, "b64encode", kernels.b64encode)
    return kernels


def stdlib(payload):
    def text(value):
        if isinstance(value, Blob):
            return str(value)
        raise TypeError(type(value).__name__)

    return json.dumps(payload, ensure_ascii=False, allow_nan=False, separators=(",", ":"), default=text).encode()


logprob_values = st.floats(min_value=-9998.0, max_value=0.0, allow_nan=False, width=32)


@given(st.lists(st.lists(st.tuples(st.integers(0, 2**32 - 1), logprob_values), min_size=1, max_size=40), max_size=12), st.integers(-1, 30))
def test_compact_round_trip(writer, rows, num_top):
    # Repeated ids within a row must agree: keep the first value of each id.
    rows = [[(i, dict(row)[i]) for i, _ in row] for row in rows]
    ids = [i for row in rows for i, _ in row]
    values = [p for row in rows for _, p in row]
    offsets = np.cumsum([0] + [len(row) for row in rows])
    field = tokenwire.encode_compact_logprobs(ids, values, offsets, num_top)
    choice = {"token_ids": [row[0][0] for row in rows], "compact_logprobs": field}
    raw = tokenwire.dumps_generate_response({"choices": [choice]})
    assert raw == stdlib({"choices": [choice]})
    parsed = writer.parse_generate_response(raw).choices[0]
    expected = [np.float32(dict(row)[row[0][0]]) for row in rows]
    assert parsed.completion_logprobs.tolist() == expected


@given(hnp.arrays(np.float32, st.integers(0, 300), elements=logprob_values) | hnp.arrays(np.float64, st.integers(0, 50), elements=st.floats(-9998.0, 5.0)))
def test_packed_round_trip(writer, values):
    field = tokenwire.encode_packed(values)
    choice = {"token_ids": [1] * len(values), "completion_logprobs": field}
    raw = tokenwire.dumps_generate_response({"choices": [choice]})
    got = writer.parse_generate_response(raw).choices[0].completion_logprobs
    assert got.dtype == values.dtype and np.array_equal(got, values)


@given(st.lists(st.lists(st.integers(0, 2**31 - 1), min_size=1, max_size=20, unique=True), max_size=20))
def test_sampling_mask_round_trip(writer, rows):
    ids = [i for row in rows for i in row]
    field = tokenwire.encode_sampling_mask(np.array(ids, np.int32), np.array([len(r) for r in rows], np.int32))
    choice = {"token_ids": [r[-1] for r in rows], "completion_logprobs": tokenwire.encode_packed(np.zeros(len(rows), np.float32)), "sampling_mask": field}
    raw = tokenwire.dumps_generate_response({"choices": [choice]})
    assert writer.parse_generate_response(raw).choices[0].sampling_mask.to_lists() == rows


@given(hnp.arrays(st.sampled_from([np.uint8, np.uint16, np.int16, np.int32]), hnp.array_shapes(min_dims=3, max_dims=3, min_side=0, max_side=9).filter(lambda s: s[1] and s[2]), elements=st.integers(0, 255)), st.none() | st.integers(0, 10**6))
def test_routed_experts_round_trip(writer, routing, start):
    field = tokenwire.encode_routed_experts(routing, start=start)
    choice = {"token_ids": [], "completion_logprobs": tokenwire.encode_packed(np.zeros(0, np.float32)), "routed_experts": field}
    raw = tokenwire.dumps_generate_response({"choices": [choice]})
    routed = writer.parse_generate_response(raw).choices[0].routed_experts
    assert routed.array.dtype == routing.dtype and np.array_equal(routed.array, routing) and routed.start == start


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=30,
)


@given(json_values, st.lists(st.binary(max_size=64), max_size=4))
def test_byte_identity_with_the_stdlib_serializer(writer, value, blobs):
    encoded = [Blob(tokenwire.b64encode(b), np.frombuffer(b, np.uint8)) for b in blobs]
    payload = {"x": value, "blobs": encoded, "nested": [{"data": b} for b in encoded]}
    assert tokenwire.dumps_generate_response(payload, check=False) == stdlib(payload)
    assert _json.loads(_json.dumps({"blobs": encoded}, default=tokenwire.json_default)) == {"blobs": [str(b) for b in encoded]}


def test_samples_rewritten_byte_for_byte(writer):
    """Every embedded sample, its packed fields rebuilt by the encoders from the decoded arrays."""
    for name, spec in samples.SAMPLES.items():
        document = json.loads(spec.raw)
        parsed = writer.parse_generate_response(spec.raw)
        for choice, got in zip(document["choices"], parsed.choices):
            if "completion_logprobs" in choice:
                choice["completion_logprobs"] = tokenwire.encode_packed(got.completion_logprobs)
            if "compact_logprobs" in choice:
                old = choice["compact_logprobs"]
                data = np.frombuffer(__import__("base64").b64decode(old["data"]), np.uint8)
                count = old["offsets"][-1]
                choice["compact_logprobs"] = tokenwire.encode_compact_logprobs(
                    data[: 4 * count].view("<u4"), data[4 * count :].view("<f4"), old["offsets"], old["num_top_logprobs"]
                )
            if isinstance(choice.get("sampling_mask"), dict):
                mask = got.sampling_mask
                choice["sampling_mask"] = tokenwire.encode_sampling_mask(mask.values, np.diff(mask.offsets).astype(np.int32))
            if isinstance(choice.get("routed_experts"), dict):
                choice["routed_experts"] = tokenwire.encode_routed_experts(got.routed_experts.array, start=got.routed_experts.start)
        assert tokenwire.dumps_generate_response(document) == spec.raw, name


def test_renderers_accepts_encoder_output(writer, renderers_client):
    ev = samples.evidence(40, 6, seed=3, support=True)
    row_ids = np.concatenate([ev.ids[:, None], ev.cand_ids], axis=1).reshape(-1)
    row_lps = np.concatenate([ev.logprobs[:, None], ev.cand_logprobs], axis=1).reshape(-1)
    counts = np.array([len(s) for s in ev.support], np.int32)
    choice = {
        "token_ids": ev.ids.tolist(),
        "compact_logprobs": tokenwire.encode_compact_logprobs(row_ids, row_lps, np.arange(0, 40 * 7 + 1, 7), 6),
        "completion_logprobs": tokenwire.encode_packed(ev.logprobs),
        "sampling_mask": tokenwire.encode_sampling_mask(np.concatenate([np.array(s, np.int32) for s in ev.support]), counts),
    }
    document = json.loads(tokenwire.dumps_generate_response({"choices": [choice]}))
    c = renderers_client.parse_generate_response(json.dumps(document).encode())["choices"][0]
    sampled, top_ids, _ = renderers_client._parse_compact_logprobs(c, c["token_ids"], 4)
    # A list of floats, or from renderers 0.1.13.dev17 a float32 array.
    assert np.asarray(sampled, np.float64).tolist() == ev.logprobs.astype(np.float64).tolist() and len(top_ids) == 40
    packed = renderers_client._parse_packed_completion_logprobs(c["completion_logprobs"], c["token_ids"])
    assert np.asarray(packed, np.float64).tolist() == np.asarray(sampled, np.float64).tolist()


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: tokenwire.encode_packed(np.array([-0.5, math.nan], np.float32)), "non-finite"),
        (lambda: tokenwire.encode_packed(np.array([-9999.0], np.float32)), "non-finite"),
        (lambda: tokenwire.encode_packed(np.array([1, -2], np.int32)), "Invalid packed sampling mask"),
        (lambda: tokenwire.encode_compact_logprobs([1, 2], [-0.1, 0.5], [0, 2], 1), "Invalid compact logprob values"),
        (lambda: tokenwire.encode_compact_logprobs([1, 1], [-0.1, -0.2], [0, 2], 1), "Repeated compact logprobs disagree"),
        (lambda: tokenwire.encode_compact_logprobs([1, 2], [-0.1, -0.2], [0, 2], 1, completion_ids=[3]), "Missing compact sampled"),
        (lambda: tokenwire.encode_compact_logprobs([1, 2], [-9999.0, -0.2], [0, 2], 1), "Missing compact sampled"),
        (lambda: tokenwire.encode_sampling_mask([1, 1], [2]), "Invalid recorded sampling support"),
        (lambda: tokenwire.encode_sampling_mask([1, 1], [2, 0]), "Invalid recorded sampling support"),
        (lambda: tokenwire.encode_sampling_mask([1, 2], [1, 1], completion_ids=[1, 3]), "Invalid recorded sampling support"),
        (lambda: tokenwire.encode_routed_experts(np.array([[[3, -1]]], np.int16)), "negative expert id"),
    ],
)
def test_encoders_refuse_what_readers_refuse(writer, call, match):
    with pytest.raises(MalformedResponseError, match=match):
        call()


@pytest.mark.parametrize(
    "call",
    [
        lambda: tokenwire.encode_packed(np.zeros(3, np.int64)),
        lambda: tokenwire.encode_packed(np.zeros((2, 2), np.float32)),
        lambda: tokenwire.encode_compact_logprobs([1.5], [-0.1], [0, 1], 0),
        lambda: tokenwire.encode_compact_logprobs([-1], [-0.1], [0, 1], 0),
        lambda: tokenwire.encode_compact_logprobs([1, 2], [-0.1], [0, 2], 0),
        lambda: tokenwire.encode_routed_experts(np.zeros((2, 2), np.float32)),
        lambda: tokenwire.encode_sampling_mask([-1], [1]),
        lambda: tokenwire.dumps_generate_response({"x": math.nan}),
        lambda: tokenwire.dumps_generate_response({"x": object()}),
    ],
)
def test_encoders_refuse_bad_arguments(writer, call):
    with pytest.raises((TypeError, ValueError)):
        call()


@pytest.mark.parametrize(
    "call, error, match",
    [
        # The arrays' structure is the writer's arguments: messages name them.
        (lambda: tokenwire.encode_compact_logprobs([1, 2], [-0.1, -0.2], [0, 2, 2], 1), ValueError, "offsets must start at 0, rise"),
        (lambda: tokenwire.encode_compact_logprobs([1, 2], [-0.1, -0.2], [0, 3], 1), ValueError, "end at 2, the number of ids"),
        (lambda: tokenwire.encode_compact_logprobs([1, 2], [-0.1, -0.2], [0, 2], -2), ValueError, "num_top_logprobs must be in"),
        (lambda: tokenwire.encode_compact_logprobs([1, 2], [-0.1, -0.2], [0, 2], 2.0), TypeError, "num_top_logprobs must be an int"),
        (lambda: tokenwire.encode_compact_logprobs([1, 2], [-0.1, -0.2], [0, 2], True), TypeError, "num_top_logprobs must be an int"),
        (lambda: tokenwire.encode_compact_logprobs([1, 2], [1j, 1j], [0, 2], 1), TypeError, "logprobs must hold real numbers"),
        (lambda: tokenwire.encode_compact_logprobs([1, 2], [-0.1, -0.2], [0, 2], 1, completion_ids=np.array([2**64 - 1], np.uint64)),
         ValueError, "completion_ids must hold integers in"),
        (lambda: tokenwire.encode_compact_logprobs([1, 2], [-0.1, -0.2], [0, 2], 1, completion_ids=[1, 2]), ValueError, "2 completion ids for 1 rows"),
        (lambda: tokenwire.encode_sampling_mask([1, 2], [1]), ValueError, "counts add up to 1 but there are 2 ids"),
        (lambda: tokenwire.encode_sampling_mask([2**40], [1]), ValueError, "ids must hold integers in"),
        (lambda: tokenwire.encode_sampling_mask([1], np.array([2**64 - 1], np.uint64)), ValueError, "counts must hold integers in"),
        (lambda: tokenwire.encode_sampling_mask([1], [1], completion_ids=np.array([2**64 - 1], np.uint64)), ValueError, "completion_ids"),
        (lambda: tokenwire.encode_routed_experts(np.zeros((2, 1, 1), np.uint8), start=-1), ValueError, "start must be in"),
        (lambda: tokenwire.encode_routed_experts(np.zeros((2, 1, 1), np.uint8), start=1.0), TypeError, "start must be an int"),
        (lambda: tokenwire.encode_routed_experts(np.uint8(3)), TypeError, "not a 0-D uint8"),
        (lambda: tokenwire.encode_routed_experts(np.zeros((2, 3), np.uint8)), TypeError, r"\(rows, layers, topk\) arrays"),
        (lambda: tokenwire.encode_routed_experts(np.zeros((2, 0, 3), np.uint8)), ValueError, "layers and topk in"),
        # float32 would turn it into vLLM's sentinel: refused, not read back as missing evidence.
        (lambda: tokenwire.encode_compact_logprobs([1, 2], [-9999.0001, -0.2], [0, 2], 1), ValueError, "becomes -9999.0 in float32"),
        (lambda: tokenwire.encode_compact_logprobs([1, 2], [-0.1, -9998.9996], [0, 2], 1), ValueError, r"logprobs\[1\]"),
    ],
)
def test_writer_arguments_are_checked_with_the_writers_words(writer, call, error, match):
    with pytest.raises(error, match=match) as info:
        call()
    assert not isinstance(info.value, MalformedResponseError)


def test_numpy_integers_are_ints(writer):
    field = tokenwire.encode_compact_logprobs(np.array([1, 2]), [-0.1, -0.2], np.array([0, 2]), np.int64(2))
    assert field["num_top_logprobs"] == 2 and type(field["num_top_logprobs"]) is int
    routed = tokenwire.encode_routed_experts(np.zeros((2, 1, 1), np.uint8), start=np.int64(3))
    assert routed["start"] == 3 and type(routed["start"]) is int
    assert tokenwire.encode_routed_experts(np.zeros((2, 1, 1), np.uint8), start=None)["start"] is None
    filtered = tokenwire.encode_compact_logprobs([1, 2], [-0.1, -9999.0], [0, 2], 1)  # the sentinel itself
    assert json.loads(tokenwire.dumps_generate_response(filtered, check=False))["num_top_logprobs"] == 1


def test_a_blob_is_canonical_base64_and_cannot_change(writer):
    for text in (b'"}, "x', b"QUJD=", "QUJ\u00e9", b"QUJ", b"QU JD"):
        with pytest.raises(ValueError, match="canonical base64"):
            Blob(text)
    with pytest.raises(ValueError, match="decodes to"):
        Blob(b"QUJD", np.frombuffer(b"ABD", np.uint8))
    blob = Blob("QUJD")
    assert blob.array.tobytes() == b"ABC" and blob == Blob(b"QUJD", np.frombuffer(b"ABC", np.uint8))
    with pytest.raises(AttributeError):
        blob.text = b'"'
    assert json.loads(tokenwire.dumps_generate_response({"data": blob}, check=False)) == {"data": "QUJD"}


def test_encoded_fields_go_through_json_dumps_orjson_and_starlette(writer):
    choice = {"index": 0, "token_ids": [1, 2],
              "compact_logprobs": tokenwire.encode_compact_logprobs([1, 2], [-0.1, -0.2], [0, 1, 2], 0),
              "sampling_mask": tokenwire.encode_sampling_mask([1, 2], [1, 1], completion_ids=[1, 2])}
    payload = {"request_id": "r", "choices": [choice]}
    raw = tokenwire.dumps_generate_response(payload)
    assert json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode() == raw
    assert _json.dumps(payload) == raw  # orjson where installed
    responses = pytest.importorskip("starlette.responses")
    assert responses.JSONResponse(payload).body == raw
    assert writer.parse_generate_response(raw).choices[0].completion_ids.tolist() == [1, 2]


def test_the_whole_response_check_refuses_what_fields_alone_pass(writer):
    # Each field is valid alone; together the mask keeps id 9, which the compact row has no
    # candidate logprob for: the reader refuses the response with a head.
    choice = {"token_ids": [1], "compact_logprobs": tokenwire.encode_compact_logprobs([1, 1, 3], [-0.1, -0.1, -2.4], [0, 3], 2),
              "sampling_mask": tokenwire.encode_sampling_mask([1, 9], [2], completion_ids=[1])}
    with pytest.raises(MalformedResponseError, match=r"assembled response is refused by the reader: .*kept id 9"):
        tokenwire.dumps_generate_response({"choices": [choice]}, top_k=1)
    with pytest.raises(MalformedResponseError, match=r"2 token ids but 1 compact logprob rows \(-1\)"):
        tokenwire.dumps_generate_response({"choices": [{**choice, "token_ids": [1, 2]}]})
    assert tokenwire.dumps_generate_response({"choices": [choice]}, check=False)


HEADS = [[(5, -0.5), (7, -1.5), (8, -2.0), (9, -3.0)], [(6, -0.25), (7, -2.0), (8, -3.0), (9, -4.0)]]


@pytest.mark.parametrize("dumps, parse", [
    (tokenwire.dumps_chat_completions_response, "parse_chat_completions_response"),
    (tokenwire.dumps_completions_response, "parse_completions_response"),
])
def test_openai_writers_give_exact_ids_and_logprobs(writer, dumps, parse):
    raw = dumps([{"token_ids": [5, 6], "logprobs": [-0.5, -0.25], "text": "ab", "top_logprobs": HEADS},
                 {"token_ids": [3], "logprobs": [-1.0], "finish_reason": "length"}], prompt_token_ids=[1, 2])
    response = getattr(writer, parse)(raw, top_k=None)
    assert [c.completion_ids.tolist() for c in response.choices] == [[5, 6], [3]]
    assert response.choices[0].completion_logprobs.tolist() == [-0.5, -0.25]
    assert response.choices[1].finish_reason == "length"
    head = getattr(writer, parse)(dumps([{"token_ids": [5, 6], "logprobs": [-0.5, -0.25], "top_logprobs": HEADS}]), top_k=2)
    assert head.choices[0].completion_top_ids.to_lists() == [[5, 7], [6, 7]]
    with pytest.raises(MalformedResponseError, match=r"refused by the reader: .*logprob cannot be positive"):
        dumps([{"token_ids": [5], "logprobs": [0.5]}])
    with pytest.raises(ValueError, match=r"2 token_ids but 1 logprobs \(-1\)"):
        dumps([{"token_ids": [5, 6], "logprobs": [-0.5]}])


@pytest.mark.parametrize("mask", ["csr", "list", "kept"])
def test_samples_build_only_evidence_their_reader_accepts(mask):
    for seed in range(12):
        ev = samples.evidence(48, 8, seed=seed, support=True, filtered=0.3, ties=0.3)
        choice = samples.build_choice(ev, transport="compact", mask=mask)
        tokenwire.parse_generate_response(samples.dumps(samples.response([choice], seed=seed)), top_k=4)
