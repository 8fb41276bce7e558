"""The generate-endpoint contract, rule by rule, on both implementations."""

from __future__ import annotations

import base64
import copy
import json
import math
import pickle
from typing import Any

import numpy as np
import pytest

from tokenwire import MalformedResponseError, Ragged, samples


def b64(values: Any, dtype: str) -> str:
    return base64.b64encode(np.asarray(values, dtype=dtype).tobytes()).decode()


def compact(rows: list[list[tuple[int, float]]], num_top: int | None = None) -> dict[str, Any]:
    ids = [i for row in rows for i, _ in row]
    vals = [p for row in rows for _, p in row]
    offsets = [0]
    for row in rows:
        offsets.append(offsets[-1] + len(row))
    return {
        "data": base64.b64encode(np.asarray(ids, "<u4").tobytes() + np.asarray(vals, "<f4").tobytes()).decode(),
        "format": "u32-f32-le-v1",
        "offsets": offsets,
        "num_top_logprobs": max((len(r) - 1 for r in rows), default=0) if num_top is None else num_top,
    }


P = {1: 0.6, 2: 0.25, 3: 0.1, 4: 0.04, 5: 0.01}
LP = {i: math.log(p) for i, p in P.items()}


def base() -> dict[str, Any]:
    """Two choices: compact rows with a head, and native JSON with a CSR mask and routing."""
    row = [(2, LP[2])] + [(i, LP[i]) for i in (1, 2, 3, 4)]
    native = [
        {"token": f"token_id:{t}", "logprob": LP[t], "bytes": None,
         "top_logprobs": [{"token": f"token_id:{i}", "logprob": LP[i]} for i in (1, 2, 3, 4, 5)]}
        for t in (1, 3)
    ]
    return {
        "request_id": "r1",
        "choices": [
            {"index": 0, "token_ids": [2, 2], "logprobs": None, "finish_reason": "stop",
             "compact_logprobs": compact([row, row])},
            {"index": 1, "token_ids": [1, 3], "logprobs": {"content": native}, "finish_reason": "length",
             "sampling_mask": {"ids": {"data": b64([1, 2, 3, 4, 5, 3, 1, 2, 4, 5], "<i4"), "shape": [10], "dtype": "int32"},
                               "counts": {"data": b64([5, 5], "<i4"), "shape": [2], "dtype": "int32"}},
             "routed_experts": {"data": b64(np.arange(12), "u1"), "shape": [3, 2, 2], "start": 0, "dtype": "uint8"}},
        ],
        "usage": {"prompt_tokens": 2, "completion_tokens": 4},
        "prompt_token_ids": [10, 11],
    }


def parse(impl, doc: Any, **kw):
    raw = json.dumps(doc).encode() if isinstance(doc, (dict, list)) else doc
    return impl.parse_generate_response(raw, **kw)


def test_base_document_parses(impl):
    r = parse(impl, base(), top_k=2)
    assert r.request_id == "r1" and r.usage == {"prompt_tokens": 2, "completion_tokens": 4}
    assert r.prompt_token_ids.dtype == np.int64 and r.prompt_token_ids.tolist() == [10, 11]
    assert set(r.payload) == {"request_id", "usage"}
    c0, c1 = r.choices
    assert c0.completion_ids.tolist() == [2, 2] and c0.completion_ids.dtype == np.int64
    assert c0.completion_logprobs.dtype == np.float32
    assert c0.completion_logprobs.tolist() == [np.float32(LP[2])] * 2
    assert c0.completion_top_ids.to_lists() == [[1, 2], [1, 2]]
    assert c0.completion_top_logprobs.values.dtype == np.float32
    assert c0.finish_reason == "stop" and c0.raw == {"logprobs": None}
    assert c1.completion_logprobs.dtype == np.float64
    assert c1.completion_logprobs.tolist() == [LP[1], LP[3]]
    # A recorded support makes the head exactly the support (and it must normalize).
    assert c1.sampling_mask.to_lists() == [[1, 2, 3, 4, 5], [3, 1, 2, 4, 5]]
    assert c1.sampling_mask.values.dtype == np.int32
    assert c1.routed_experts.array.shape == (3, 2, 2) and c1.routed_experts.start == 0
    assert c1.routed_experts.array.ravel().tolist() == list(range(12))


def test_head_needs_candidates_without_support(impl):
    doc = base()
    doc["choices"][1]["sampling_mask"] = None
    with pytest.raises(MalformedResponseError, match="fewer top logprobs") as info:
        parse(impl, doc, top_k=3)  # choice 0 has 4 candidates per row, 5 are needed
    assert (info.value.choice, info.value.field, info.value.token) == (0, "compact_logprobs", 0)
    del doc["choices"][0]
    with pytest.raises(MalformedResponseError, match="fewer top logprobs") as info:
        parse(impl, doc, top_k=4)
    assert (info.value.choice, info.value.field, info.value.token) == (0, "logprobs.content", 0)


def test_sampled_only_and_optional_logprobs(impl):
    r = parse(impl, base())
    assert r.choices[0].completion_top_ids is None
    doc = base()
    doc["choices"][1]["logprobs"] = None
    with pytest.raises(MalformedResponseError, match="choice.logprobs must be an object"):
        parse(impl, doc)
    assert parse(impl, doc, require_logprobs=False).choices[1].completion_logprobs is None


@pytest.mark.parametrize("top_k", [0, -1, True, 1.5, "2"])
def test_top_k_argument_is_checked(impl, top_k):
    with pytest.raises(ValueError, match="top_k"):
        parse(impl, base(), top_k=top_k)


def edit(path: str, value: Any):
    def apply(doc):
        *parents, last = path.split(".")
        node = doc
        for part in parents:
            node = node[int(part)] if part.isdigit() else node[part]
        if value is DELETE:
            del node[int(last) if last.isdigit() else last]
        else:
            node[int(last) if last.isdigit() else last] = value
    return apply


DELETE = object()
C0 = "choices.0"
C1 = "choices.1"

# (id, edit, top_k, (choice, field, token), reason)
RULES = [
    ("json", lambda d: None, None, None, "invalid JSON"),
    ("not_object", edit("choices", []), None, (None, "choices", None), "choices must be a non-empty list"),
    ("choice_not_object", edit(C1, 3), None, (1, None, None), "choice must be an object"),
    ("ids_missing", edit(f"{C0}.token_ids", DELETE), None, (0, "token_ids", None), "token_ids"),
    ("ids_bool", edit(f"{C0}.token_ids.1", False), None, (0, "token_ids", 1), "token_ids"),
    ("ids_float", edit(f"{C0}.token_ids.0", 2.0), None, (0, "token_ids", 0), "token_ids"),
    ("ids_negative", edit(f"{C0}.token_ids.0", -2), None, (0, "token_ids", 0), "token_ids"),
    ("ids_huge", edit(f"{C0}.token_ids.0", 2**32), None, (0, "token_ids", 0), "token_ids"),
    ("prompt_bad", edit("prompt_token_ids", [1, "2"]), None, (None, "prompt_token_ids", 1), "prompt_token_ids"),
    ("compact_format", edit(f"{C0}.compact_logprobs.format", "x"), None, (0, "compact_logprobs.format", None), "Unsupported compact logprob format"),
    ("offsets_len", edit(f"{C0}.compact_logprobs.offsets", [0, 5]), None, (0, "compact_logprobs.offsets", None), "Invalid compact logprob offsets"),
    ("offsets_start", edit(f"{C0}.compact_logprobs.offsets.0", 1), None, (0, "compact_logprobs.offsets", 0), "Invalid compact logprob offsets"),
    ("offsets_flat", edit(f"{C0}.compact_logprobs.offsets.2", 5), None, (0, "compact_logprobs.offsets", 2), "Invalid compact logprob offsets"),
    ("offsets_bool", edit(f"{C0}.compact_logprobs.offsets.0", False), None, (0, "compact_logprobs.offsets", 0), "Invalid compact logprob offsets"),
    ("num_top", edit(f"{C0}.compact_logprobs.num_top_logprobs", -2), None, (0, "compact_logprobs.num_top_logprobs", None), "Invalid compact logprob candidate count"),
    ("compact_b64", edit(f"{C0}.compact_logprobs.data", "AAA"), None, (0, "compact_logprobs.data", None), "Invalid compact logprob base64"),
    ("compact_len", edit(f"{C0}.compact_logprobs.data", "AAAA"), None, (0, "compact_logprobs.data", None), "Invalid compact logprob buffer length"),
    ("compact_positive", edit(f"{C0}.compact_logprobs", compact([[(2, -0.1)], [(2, 0.5)]])), None, (0, "compact_logprobs", 1), "Invalid compact logprob values"),
    ("compact_missing", edit(f"{C0}.compact_logprobs", compact([[(2, -0.1)], [(3, -0.1)]])), None, (0, "compact_logprobs", 1), "Missing compact sampled-token evidence"),
    ("compact_sentinel", edit(f"{C0}.compact_logprobs", compact([[(2, -9999.0)], [(2, -0.1)]])), None, (0, "compact_logprobs", 0), "Missing compact sampled-token evidence"),
    ("compact_repeat", edit(f"{C0}.compact_logprobs", compact([[(2, -0.1), (2, -0.2)], [(2, -0.1)]])), None, (0, "compact_logprobs", 0), "Repeated compact logprobs disagree"),
    ("head_disagree", edit(f"{C0}.compact_logprobs", compact([[(2, LP[2]), (1, LP[1]), (2, LP[2] - 0.1), (3, LP[3]), (4, LP[4])]] * 2)), 2, (0, "compact_logprobs", 0), "Repeated compact logprobs disagree"),
    ("head_mass", edit(f"{C0}.compact_logprobs", compact([[(2, -0.1), (1, -0.1), (2, -0.1), (3, -1.0), (4, -2.0)]] * 2)), 2, (0, "compact_logprobs", 0), "Invalid sampler head probability mass"),
    ("head_few", edit(f"{C0}.compact_logprobs", compact([[(2, LP[2]), (1, LP[1]), (2, LP[2])]] * 2)), 2, (0, "compact_logprobs", 0), "fewer top logprobs"),
    ("packed_dtype", edit(f"{C0}.compact_logprobs", None) , None, None, None),
    ("native_token", edit(f"{C1}.logprobs.content.1.token", "token_id:4"), None, (1, "logprobs.content", 1), "content[1].token must be 'token_id:3'"),
    ("native_number", edit(f"{C1}.logprobs.content.0.logprob", True), None, (1, "logprobs.content", 0), "logprob must be a number"),
    ("native_sentinel", edit(f"{C1}.logprobs.content.0.logprob", -9999.0), None, (1, "logprobs.content", 0), "does not contain sampling evidence"),
    ("native_count", edit(f"{C1}.token_ids", [1]), None, (1, "logprobs.content", None), "does not match logprob count"),
    ("native_entry", edit(f"{C1}.logprobs.content.1", "x"), None, (1, "logprobs.content", 1), "must be an object"),
    ("top_missing", edit(f"{C1}.logprobs.content.1.top_logprobs", []), 2, (1, "logprobs.content", 1), "Missing requested top logprobs"),
    ("top_dup", edit(f"{C1}.logprobs.content.1.top_logprobs.1", {"token": "token_id:1", "logprob": LP[1]}), 2, (1, "logprobs.content", 1), "Duplicate top logprob token id"),
    ("top_positive", edit(f"{C1}.logprobs.content.1.top_logprobs.3.logprob", 0.5), 2, (1, "logprobs.content", 1), "Top logprob cannot be positive"),
    ("top_id", edit(f"{C1}.logprobs.content.1.top_logprobs.3", {"token_id": -4, "logprob": -3.0}), 2, (1, "logprobs.content", 1), "nonnegative token id"),
    ("mask_count", edit(f"{C1}.sampling_mask", [[1, 2]]), None, (1, "sampling_mask", None), "Sampling mask token count mismatch"),
    ("mask_sampled", edit(f"{C1}.sampling_mask", [[1], [1]]), None, (1, "sampling_mask", 1), "Invalid recorded sampling support"),
    ("mask_dup", edit(f"{C1}.sampling_mask", [[1, 1], [3]]), None, (1, "sampling_mask", 0), "Invalid recorded sampling support"),
    ("mask_empty", edit(f"{C1}.sampling_mask", [[1], []]), None, None, None),
    ("mask_dtype", edit(f"{C1}.sampling_mask.ids.dtype", "int64"), None, (1, "sampling_mask.ids", None), "Invalid packed sampling mask"),
    ("mask_shape", edit(f"{C1}.sampling_mask.counts.shape", [3]), None, (1, "sampling_mask.counts.shape", None), "Invalid packed sampling mask"),
    ("mask_normalize", edit(f"{C1}.sampling_mask", [[1, 2], [3, 1]]), 2, (1, "logprobs.content", 0), "must normalize over the recorded support"),
    ("mask_probabilities", edit(f"{C1}.sampling_mask", [[1, 9], [3, 1]]), 2, (1, "logprobs.content", 0), "Missing sampling-support probabilities"),
    ("routed_shape", edit(f"{C1}.routed_experts.shape", [2**40, 2**20, 2**20]), None, (1, "routed_experts.shape", None), "does not match"),
    ("routed_dtype", edit(f"{C1}.routed_experts.dtype", "float32"), None, (1, "routed_experts.dtype", None), "Unsupported routed_experts dtype"),
    ("routed_b64", edit(f"{C1}.routed_experts.data", "AAA="), None, (1, "routed_experts.shape", None), "does not match"),
    ("routed_start", edit(f"{C1}.routed_experts.start", -1), None, (1, "routed_experts.start", None), "start"),
    ("routed_npy", edit(f"{C1}.routed_experts", base64.b64encode(b"\x93NUMPX" + bytes(20)).decode()), None, (1, "routed_experts", None), "magic"),
]


@pytest.mark.parametrize("rule", [r for r in RULES if r[4] is not None], ids=lambda r: r[0])
def test_every_rule_rejects(impl, rule):
    name, mutate, top_k, where, reason = rule
    if name == "json":
        raw = json.dumps(base()).encode()[:-1]
    else:
        doc = base()
        mutate(doc)
        raw = json.dumps(doc).encode()
    with pytest.raises(MalformedResponseError) as info:
        impl.parse_generate_response(raw, top_k=top_k)
    exc = info.value
    assert reason in str(exc)
    if where is not None:
        assert (exc.choice, exc.field, exc.token) == where
    assert isinstance(exc, ValueError)


def test_packed_logprobs(impl):
    doc = base()
    doc["choices"][0] = {"token_ids": [5, 6], "completion_logprobs": {"data": b64([-0.5, -1.5], "<f4"), "shape": [2], "dtype": "float32"}}
    assert parse(impl, doc).choices[0].completion_logprobs.tolist() == [-0.5, -1.5]
    doc["choices"][0]["completion_logprobs"] = {"data": b64([-0.5, -1.5], "<f8"), "shape": [2], "dtype": "float64"}
    assert parse(impl, doc).choices[0].completion_logprobs.dtype == np.float64
    for values, token in (([-0.5, np.nan], 1), ([-9999.0, -1.0], 0), ([-0.5], None)):
        doc["choices"][0]["completion_logprobs"] = {"data": b64(values, "<f4"), "shape": [len(values)], "dtype": "float32"}
        with pytest.raises(MalformedResponseError, match="completion tokens, or a non-finite") as info:
            parse(impl, doc)
        assert info.value.token == token
    doc["choices"][0]["completion_logprobs"] = {"data": "AAAAAAA=", "shape": [1], "dtype": "float32"}
    with pytest.raises(MalformedResponseError, match="buffer length"):
        parse(impl, doc)
    doc["choices"][0]["completion_logprobs"] = {"data": b64([-0.5, -1.5], "<f4"), "shape": [2], "dtype": "float16"}
    with pytest.raises(MalformedResponseError, match="dtype"):
        parse(impl, doc)


def test_routed_experts_npy_and_kept_tokens(impl):
    routing = samples.routing(3, layers=3, topk=2, experts=300)  # prompt 2 + completion 2 - 1
    doc = base()
    doc["choices"][1]["routed_experts"] = base64.b64encode(samples.npy_bytes(routing)).decode()
    doc["choices"][1]["kept_tokens"] = {"ids": b64([1, 3], "<i4"), "counts": b64([1, 1], "<i4")}
    del doc["choices"][1]["sampling_mask"]
    c1 = parse(impl, doc).choices[1]
    assert c1.routed_experts.array.dtype == np.uint16
    assert np.array_equal(c1.routed_experts.array, routing) and c1.routed_experts.start is None
    assert c1.sampling_mask.to_lists() == [[1], [3]]


def test_any_spelling_reads_the_same(impl):
    doc = base()
    expected = parse(impl, doc, top_k=2)
    spellings = [
        json.dumps(doc, indent=3).encode(),
        json.dumps(doc, separators=(" , ", " : ")).encode(),
        json.dumps(doc).replace("/", "\\/").encode(),
        json.dumps(dict(reversed(list(doc.items())))).encode(),
    ]
    for raw in spellings:
        got = impl.parse_generate_response(raw, top_k=2)
        for a, b in zip(got.choices, expected.choices):
            assert np.array_equal(a.completion_logprobs, b.completion_logprobs)
            assert a.completion_top_ids.to_lists() == b.completion_top_ids.to_lists()


def test_duplicate_keys_last_wins(impl):
    raw = json.dumps(base()).encode().replace(b'"token_ids": [2, 2]', b'"token_ids": [9], "token_ids": [2, 2]')
    assert parse(impl, raw).choices[0].completion_ids.tolist() == [2, 2]


def test_every_bytes_like_input(impl):
    raw = json.dumps(base()).encode()
    for data in (raw, bytearray(raw), memoryview(raw), raw.decode(), np.frombuffer(raw, np.uint8)):
        assert parse(impl, data).choices[1].completion_ids.tolist() == [1, 3]
    with pytest.raises(TypeError):
        impl.parse_generate_response(12)


def test_samples_parse(impl):
    for spec in samples.SAMPLES.values():
        r = impl.parse_generate_response(spec.raw, top_k=spec.top_k)
        for choice in r.choices:
            assert len(choice.completion_logprobs) == len(choice.completion_ids)
            if spec.top_k:
                assert len(choice.completion_top_ids) == len(choice.completion_ids)
                assert all(len(row) <= spec.top_k or choice.sampling_mask is not None for row in choice.completion_top_ids)


def test_error_is_located_and_picklable():
    exc = MalformedResponseError("bad", choice=2, field="compact_logprobs.offsets", token=3)
    assert str(exc) == "choices[2].compact_logprobs.offsets[3]: bad"
    back = pickle.loads(pickle.dumps(exc))
    assert (back.choice, back.field, back.token, back.reason, str(back)) == (2, "compact_logprobs.offsets", 3, "bad", str(exc))


def test_ragged():
    r = Ragged.from_lists([[1, 2], [], [3]], np.int32)
    assert len(r) == 3 and r[0].tolist() == [1, 2] and r[-1].tolist() == [3] and r[1].size == 0
    assert r.to_lists() == [[1, 2], [], [3]] and [x.tolist() for x in r] == [[1, 2], [], [3]]
    with pytest.raises(IndexError):
        r[3]
    assert copy.deepcopy(r).to_lists() == r.to_lists()


def test_unused_packed_logprobs_pass_through_whole(impl):
    """compact_logprobs wins over completion_logprobs; the packed object stays in ``raw`` as
    the server sent it, its base64 included (the compiled core's scan blanks that string)."""
    rows = [[(7, -0.5)], [(8, -0.25)]]
    packed = {"data": b64([-0.5, -0.25], "<f4"), "dtype": "float32", "shape": [2]}
    choice = {"token_ids": [7, 8], "compact_logprobs": compact(rows), "completion_logprobs": packed}
    raw = json.dumps({"choices": [choice]}).replace("/", "\\/")
    parsed = impl.parse_generate_response(raw).choices[0]
    assert parsed.raw["completion_logprobs"] == packed
    assert parsed.completion_logprobs.tolist() == [-0.5, -0.25]


@pytest.mark.parametrize("form", ["dict", "npy"])
def test_int16_routing_passes_and_negative_expert_ids_are_refused(impl, form):
    """prime-rl's encoder passes a captured int16 routing array through as "int16"; expert
    ids are indices, so a negative one is an error at its row, for int16 and int32 alike."""
    for dtype in (np.int16, np.int32):
        routing = np.arange(24, dtype=dtype).reshape(3, 4, 2)
        doc = json.loads(json.dumps(base()))
        if form == "dict":
            value = {"data": b64(routing, routing.dtype.newbyteorder("<").str), "shape": [3, 4, 2],
                     "start": 0, "dtype": np.dtype(dtype).name}
        else:
            value = base64.b64encode(samples.npy_bytes(routing.astype(np.dtype(dtype).newbyteorder("<")))).decode()
        doc["choices"][0]["routed_experts"] = value
        got = impl.parse_generate_response(json.dumps(doc)).choices[0].routed_experts.array
        assert got.dtype == np.dtype(dtype) and got.tolist() == routing.tolist()
        routing[2, 1, 0] = -3
        if form == "dict":
            value["data"] = b64(routing, routing.dtype.newbyteorder("<").str)
        else:
            doc["choices"][0]["routed_experts"] = base64.b64encode(samples.npy_bytes(routing)).decode()
        with pytest.raises(MalformedResponseError, match="negative expert id") as err:
            impl.parse_generate_response(json.dumps(doc))
        assert (err.value.choice, err.value.field, err.value.token) == (0, "routed_experts", 2)
