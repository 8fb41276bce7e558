"""Weight-version spans: vLLM's ``choices[].weight_versions`` on the generate endpoint and
SGLang's ``meta_info.weight_versions`` (with the single ``weight_version``), laid out as the
servers write them, on both implementations and every SIMD path."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tokenwire import MalformedResponseError, samples


def span(version: Any, start: Any, end: Any) -> dict[str, Any]:
    """One span as vLLM's WeightVersionSpan and SGLang's add_weight_versions_to_meta_info
    serialize it."""
    return {"version": version, "start": start, "end": end}


def generate(spans: Any, n: int = 4, transport: str = "native", **absent: Any) -> bytes:
    """A generate response of one choice of ``n`` tokens whose ``weight_versions`` is
    ``spans`` (``absent`` drops the key)."""
    choice = samples.build_choice(samples.evidence(n, 3, seed=n), transport=transport)
    if not absent:
        choice["weight_versions"] = spans
    return samples.dumps(samples.response([choice], prompt_tokens=2))


def sglang(meta: dict[str, Any], n: int = 4) -> bytes:
    """An SGLang /generate item of ``n`` tokens with ``meta`` added to its meta_info."""
    ids = list(range(100, 100 + n))
    info = {"id": "r1", "finish_reason": {"type": "length", "length": n}, "completion_tokens": n,
            "output_token_logprobs": [[-0.25 - t / 8, i, None] for t, i in enumerate(ids)], **meta}
    return json.dumps({"text": "x" * n, "output_ids": ids, "meta_info": info}).encode()


VALID = [
    pytest.param([span("step-7", 0, 4)], 4, id="one"),
    pytest.param([span("7", 0, 1), span("8", 1, 3), span("9", 3, 4)], 4, id="three"),
    pytest.param([span("default", 0, 1), span("default", 1, 4)], 4, id="same_label_twice"),
    pytest.param([], 0, id="empty_completion_vllm"),
    pytest.param([span("7", 0, 0)], 0, id="empty_completion_sglang"),
]


@pytest.mark.parametrize("spans, n", VALID)
def test_spans_as_sent(impl, spans, n):
    choice = impl.parse_generate_response(generate(spans, n)).choices[0]
    assert choice.weight_versions == tuple((s["version"], s["start"], s["end"]) for s in spans)
    assert "weight_versions" not in choice.raw


@pytest.mark.parametrize("spans, n", VALID)
def test_sglang_spans_as_sent(impl, spans, n):
    meta = {"weight_versions": spans, **({"weight_version": spans[-1]["version"]} if spans else {})}
    item = impl.parse_sglang_generate_response(sglang(meta, n)).choices[0]
    assert item.weight_versions == tuple((s["version"], s["start"], s["end"]) for s in spans)
    assert "weight_versions" not in item.raw["meta_info"]


@pytest.mark.parametrize("transport", ["packed", "compact", "native", "sampled"])
def test_every_transport_reads_them(impl, transport):
    """The plain path takes no choice with spans: it hands them to the rules."""
    spans = [span("a", 0, 2), span("b", 2, 3)]
    assert impl.parse_generate_response(generate(spans, 3, transport)).choices[0].weight_versions == (
        ("a", 0, 2), ("b", 2, 3))
    for raw in (generate(None, 3, transport), generate(None, 3, transport, absent=True)):
        choice = impl.parse_generate_response(raw).choices[0]
        assert choice.weight_versions is None and "weight_versions" not in choice.raw


# Malformed spans of a 4-token completion: (spans, span index at fault or None, reason).
MALFORMED = [
    pytest.param([span("a", 0, 2), span("b", 3, 4)], 1, "a gap: span 1 starts at 3 but span 0 ends at 2", id="gap"),
    pytest.param([span("a", 0, 3), span("b", 2, 4)], 1, "an overlap: span 1 starts at 2 but span 0 ends at 3",
                 id="overlap"),
    pytest.param([span("a", 0, 5)], 0, r"span 0 \[0, 5\) ends past the 4 output tokens", id="past_end"),
    pytest.param([span("a", 0, 2), span("b", 2, 6)], 1, r"span 1 \[2, 6\) ends past", id="last_past_end"),
    pytest.param([span("a", 1, 4)], 0, "the first span must start at output token 0, not 1", id="not_from_zero"),
    pytest.param([span("a", 0, 2), span("b", 2, 2), span("c", 2, 4)], 1, r"span 1 \[2, 2\) is empty",
                 id="start_equals_end"),
    pytest.param([span("a", 0, 4), span("b", 4, 4)], 1, r"span 1 \[4, 4\) is empty", id="empty_at_the_end"),
    pytest.param([span("a", 0, 3), span("b", 3, 1)], 1, r"span 1 \[3, 1\) is empty or reversed", id="reversed"),
    pytest.param([span("a", 0, 2), span("b", 1, 2)], 1, "an overlap", id="repeated_tail"),
    pytest.param([span("a", 0, 3)], None, "must cover all 4 output tokens: its spans end at output token 3",
                 id="short"),
    pytest.param([], None, "must cover all 4 output tokens: it holds no span", id="empty_list"),
    pytest.param([span("a", False, 4)], 0, "start must be an int .*not bool", id="bool_start"),
    pytest.param([span("a", 0, True), span("b", 1, 4)], 0, "end must be an int .*not bool", id="bool_end"),
    pytest.param([span("a", 0.0, 4)], 0, "start must be an int .*not float", id="float_start"),
    pytest.param([span("a", 0, 4.0)], 0, "end must be an int .*not float", id="float_end"),
    pytest.param([span("a", "0", 4)], 0, "start must be an int .*not str", id="str_start"),
    pytest.param([{"version": "a", "end": 4}], 0, "start must be an int .*not NoneType", id="no_start"),
    pytest.param([span(7, 0, 4)], 0, "version must be a string .*not int", id="int_version"),
    pytest.param([span(None, 0, 4)], 0, "version must be a string .*not NoneType", id="null_version"),
    pytest.param([["a", 0, 4]], 0, "span 0 is list", id="array_span"),
    pytest.param({"version": "a", "start": 0, "end": 4}, None, "must be a list .*not dict", id="object"),
    pytest.param("a", None, "must be a list .*not str", id="string"),
]


@pytest.mark.parametrize("spans, token, reason", MALFORMED)
def test_malformed_spans(impl, spans, token, reason):
    with pytest.raises(MalformedResponseError, match=reason) as info:
        impl.parse_generate_response(generate(spans))
    err = info.value
    assert (err.choice, err.field, err.token) == (0, "weight_versions", token)
    assert str(err).startswith("choices[0].weight_versions" + ("" if token is None else f"[{token}]"))


@pytest.mark.parametrize("spans, token, reason", MALFORMED)
def test_malformed_sglang_spans(impl, spans, token, reason):
    with pytest.raises(MalformedResponseError, match=reason) as info:
        impl.parse_sglang_generate_response(sglang({"weight_versions": spans, "weight_version": "a"}))
    err = info.value
    assert (err.choice, err.field, err.token) == (0, "meta_info.weight_versions", token)


@pytest.mark.parametrize("spans", [[span("a", 0, 0), span("b", 0, 0)], [span("a", 0, 1)]])
def test_empty_completion_has_at_most_one_empty_span(impl, spans):
    with pytest.raises(MalformedResponseError) as info:
        impl.parse_generate_response(generate(spans, 0))
    assert info.value.field == "weight_versions"


def test_one_bad_choice_among_several(impl):
    ev = samples.evidence(3, 3, seed=3)
    good = samples.build_choice(ev, transport="packed")
    bad = samples.build_choice(ev, transport="packed", index=1)
    good["weight_versions"] = [span("a", 0, 3)]
    bad["weight_versions"] = [span("a", 0, 2), span("b", 3, 3)]
    with pytest.raises(MalformedResponseError, match="a gap") as info:
        impl.parse_generate_response(samples.dumps(samples.response([good, bad])))
    assert (info.value.choice, info.value.token) == (1, 1)


def test_sglang_single_version_alone_is_no_span(impl):
    """Older SGLang sends only the version loaded when the response was built: it is kept in
    raw, not read as a span over every token."""
    item = impl.parse_sglang_generate_response(sglang({"weight_version": "12"})).choices[0]
    assert item.weight_versions is None
    assert item.raw["meta_info"]["weight_version"] == "12"


def test_sglang_single_version_names_the_last_span(impl):
    spans = [span("3", 0, 1), span("4", 1, 4)]
    item = impl.parse_sglang_generate_response(sglang({"weight_versions": spans, "weight_version": "4"})).choices[0]
    assert item.weight_versions == (("3", 0, 1), ("4", 1, 4)) and item.raw["meta_info"]["weight_version"] == "4"
    with pytest.raises(MalformedResponseError, match=r"weight_version \('3'\) is not the version of the last") as info:
        impl.parse_sglang_generate_response(sglang({"weight_versions": spans, "weight_version": "3"}))
    assert (info.value.field, info.value.token) == ("meta_info.weight_version", None)


def test_sglang_batch_items_each_have_their_spans(impl):
    first = json.loads(sglang({"weight_versions": [span("1", 0, 4)], "weight_version": "1"}))
    second = json.loads(sglang({"weight_versions": [span("1", 0, 2), span("2", 2, 3)], "weight_version": "2"}, 3))
    items = impl.parse_sglang_generate_response(json.dumps([first, second]).encode()).choices
    assert [i.weight_versions for i in items] == [(("1", 0, 4),), (("1", 0, 2), ("2", 2, 3))]
