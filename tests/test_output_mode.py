"""vLLM's ``output_mode: "text"`` on the generate endpoint: records that carry decoded text
are read by position, a head needs records named by id, and records of text in a response
that does not say so get a message that says why. Responses laid out as vLLM's
GenerateTextResponse serializes them; both implementations, every SIMD path."""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tokenwire import MalformedResponseError, samples
from tokenwire import _pycore

try:
    from tokenwire import _core
except ImportError:  # the reference alone
    _core = None

IMPLEMENTATIONS = [_pycore] + ([] if _core is None else [_core])

IDS = [9707, 1879, 0, 151645]
TEXT = ["Hello", " world", "!", ""]
LOGPROBS = [math.log(0.5), math.log(0.25), -0.125, -0.001]
CANDIDATES = [[(9707, "Hello", math.log(0.5)), (13048, "Hi", math.log(0.3)), (40, "I", -3.0), (3, "$", -4.0)],
              [(1879, " world", math.log(0.25)), (11, ",", -1.5), (0, "!", -2.5), (7, "(", -6.0)],
              [(0, "!", -0.125), (13, ".", -3.5), (30, "?", -4.5), (2, "#", -5.0)],
              [(151645, "", -0.001), (198, "\n", -7.0), (271, "\n\n", -8.0), (5, "&", -9.0)]]


def placeholder(token_id: int) -> str:
    return f"token_id:{token_id}"


def records(by_id: bool = False, top: bool = True) -> list[dict[str, Any]]:
    """vLLM's ChatCompletionLogProbsContent records: decoded text and its bytes, or with
    --return-tokens-as-token-ids "token_id:N" placeholders (``by_id``)."""
    out = []
    for t, (text, logprob) in enumerate(zip(TEXT, LOGPROBS)):
        entry: dict[str, Any] = {"token": placeholder(IDS[t]) if by_id else text, "logprob": logprob,
                                 "bytes": list(text.encode())}
        if top:
            entry["top_logprobs"] = [
                {"token": placeholder(i) if by_id else s, "logprob": p, "bytes": list(s.encode())}
                for i, s, p in CANDIDATES[t]
            ]
        out.append(entry)
    return out


def response(content: Any, mode: str | None = "text", **choice_fields: Any) -> bytes:
    """A GenerateTextResponse (``mode`` None: a response that says nothing of its mode)."""
    choice = {"index": 0, "finish_reason": "stop", "token_ids": IDS, "routed_experts": None,
              "sampling_mask": None, "weight_versions": None, "text": "".join(TEXT),
              "logprobs": {"content": content}, **choice_fields}
    document: dict[str, Any] = {"request_id": "generate-tokens-1", "model": "m", "created": 1,
                                "usage": {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7},
                                "prompt_logprobs": None, "prompt_token_ids": None}
    if mode is not None:
        document["output_mode"] = mode
    document["choices"] = [choice]
    return json.dumps(document).encode()


def test_text_records_are_read_by_position(impl):
    choice = impl.parse_generate_response(response(records())).choices[0]
    assert choice.completion_ids.tolist() == IDS
    assert choice.completion_logprobs.tolist() == LOGPROBS
    assert choice.raw["text"] == "Hello world!" and "logprobs" not in choice.raw  # the transport used


def test_records_naming_other_ids_are_read_by_position(impl):
    """In text mode a record's token is not an id: not even a "token_id:N" is compared."""
    content = records(by_id=True, top=False)
    content[2]["token"] = placeholder(5)
    assert impl.parse_generate_response(response(content)).choices[0].completion_logprobs.tolist() == LOGPROBS


@pytest.mark.parametrize("top_k", [1, 2])
def test_head_of_text_candidates_says_to_ask_for_ids(impl, top_k):
    with pytest.raises(MalformedResponseError) as info:
        impl.parse_generate_response(response(records()), top_k=top_k)
    err = info.value
    assert (err.choice, err.field, err.token) == (0, "logprobs.content", 0)
    assert 'output_mode "text"' in err.reason and 'request output_mode "tokens"' in err.reason
    assert "--return-tokens-as-token-ids" in err.reason


def test_head_of_placeholder_candidates(impl):
    """With --return-tokens-as-token-ids a text-mode response names every candidate by id."""
    choice = impl.parse_generate_response(response(records(by_id=True)), top_k=1).choices[0]
    assert choice.completion_top_ids.to_lists() == [[9707], [1879], [0], [151645]]
    assert choice.completion_logprobs.tolist() == LOGPROBS


@pytest.mark.parametrize("fault, reason, token", [
    ("sentinel", "does not contain sampling evidence", 1),  # vLLM's default for a token without an entry
    ("str", "must be a number", 1),
    ("count", r"completion token count \(4\) does not match logprob count \(3\)", None),
    ("not_object", "must be an object", 1),
])
def test_text_records_keep_every_other_rule(impl, fault, reason, token):
    content: list[Any] = records()
    if fault == "sentinel":
        content[1]["logprob"] = -9999.0
    elif fault == "str":
        content[1]["logprob"] = "-0.5"
    elif fault == "count":
        content.pop()
    else:
        content[1] = [content[1]]
    with pytest.raises(MalformedResponseError, match=reason) as info:
        impl.parse_generate_response(response(content))
    assert (info.value.field, info.value.token) == ("logprobs.content", token)


def test_text_records_beside_packed_logprobs_must_agree(impl):
    packed = {"data": samples.b64(np.array(LOGPROBS, "<f4").tobytes()), "shape": [4], "dtype": "float32"}
    choice = impl.parse_generate_response(response(records(), completion_logprobs=packed)).choices[0]
    assert choice.completion_logprobs.dtype == np.float32
    content = records()
    content[3]["logprob"] = -2.0
    with pytest.raises(MalformedResponseError, match="disagree") as info:
        impl.parse_generate_response(response(content, completion_logprobs=packed))
    assert (info.value.field, info.value.token) == ("logprobs.content", 3)


@pytest.mark.parametrize("mode", [None, "tokens"])
@pytest.mark.parametrize("top_k", [None, 2])
def test_text_records_without_text_mode_say_why(impl, mode, top_k):
    with pytest.raises(MalformedResponseError) as info:
        impl.parse_generate_response(response(records(), mode), top_k=top_k)
    err = info.value
    assert (err.field, err.token) == ("logprobs.content", 0)
    assert err.reason.startswith("Engine response choice.logprobs.content[0].token must be 'token_id:9707'.")
    assert "carries decoded text ('Hello'), not a token id" in err.reason
    assert 'request output_mode "tokens"' in err.reason and "--return-tokens-as-token-ids" in err.reason


def test_an_id_that_differs_keeps_the_plain_message(impl):
    content = records(by_id=True, top=False)
    content[2]["token"] = placeholder(5)
    with pytest.raises(MalformedResponseError) as info:
        impl.parse_generate_response(response(content, None))
    assert info.value.reason == "Engine response choice.logprobs.content[2].token must be 'token_id:0'."
    assert info.value.token == 2


def test_long_text_is_cut_in_the_message(impl):
    content = records(top=False)
    content[0]["token"] = "x" * 100
    with pytest.raises(MalformedResponseError, match=r"\('x{32}\.\.\.'\)"):
        impl.parse_generate_response(response(content, None))


def test_a_later_choice_in_text_mode(impl):
    """Every choice of a text-mode response is read by position, the first not unlike later ones."""
    document = json.loads(response(records(top=False)))
    second = dict(document["choices"][0], index=1, logprobs={"content": records(top=False)[::-1]},
                  token_ids=IDS[::-1])
    document["choices"].append(second)
    choices = impl.parse_generate_response(json.dumps(document).encode()).choices
    assert [c.completion_logprobs.tolist() for c in choices] == [LOGPROBS, LOGPROBS[::-1]]


def test_the_renderers_drop_in_keeps_renderers_message():
    """The drop-in raises renderers' error with renderers' words; tokenwire's parsers add why."""
    from tokenwire.compat import renderers as compat

    choice = json.loads(response(records(top=False), None))["choices"][0]
    with pytest.raises(compat.MalformedGenerateResponseError) as info:
        compat._parse_completion_logprobs(choice, IDS)
    assert str(info.value) == "Engine response choice.logprobs.content[0].token must be 'token_id:9707'."


# SkyRL 0.4.0's server writes its records with no token at all: {"logprob": x}, read by position.
def tokenless(values: list[Any]) -> bytes:
    """A text-mode response whose records carry no token, compact as orjson writes them."""
    return response([{"logprob": v} for v in values]).replace(b", ", b",").replace(b": ", b":")


@given(st.lists(st.floats(-1e6, 0.0).filter(lambda v: v != -9999.0), min_size=len(IDS), max_size=len(IDS)))
def test_records_without_a_token_are_read_by_position(values):
    raw = tokenless(values)
    for kernels in IMPLEMENTATIONS:
        choice = kernels.parse_generate_response(raw).choices[0]
        assert choice.completion_ids.tolist() == IDS and choice.completion_logprobs.tolist() == values


@given(st.lists(st.one_of(st.floats(-50, 0), st.just(-9999.0), st.none(), st.just("x"), st.just({})),
                min_size=0, max_size=len(IDS) + 1), st.sampled_from(["text", "tokens", None]))
def test_records_without_a_token_differential(values, mode):
    """The compiled core and the reference agree on token-less records, in text mode or not:
    the same logprobs, or the same refusal (choice, field, token, reason)."""
    content = [v if isinstance(v, dict) else {"logprob": v} for v in values]
    raw = response(content, mode)
    outcomes = []
    for kernels in IMPLEMENTATIONS:
        try:
            outcomes.append(kernels.parse_generate_response(raw).choices[0].completion_logprobs.tolist())
        except MalformedResponseError as exc:
            outcomes.append((exc.choice, exc.field, exc.token, exc.reason))
    assert all(outcome == outcomes[0] for outcome in outcomes), outcomes


@pytest.mark.parametrize("fault, reason, token", [
    ("null", "must be a number", 1),
    ("sentinel", "does not contain sampling evidence", 1),
    ("empty", "must be a number", 1),  # a record without its logprob
    ("count", r"completion token count \(4\) does not match logprob count \(5\)", None),
    ("not_object", "must be an object", 1),
])
def test_records_without_a_token_keep_every_rule(impl, fault, reason, token):
    content: list[Any] = [{"logprob": v} for v in LOGPROBS]
    if fault == "null":
        content[1]["logprob"] = None
    elif fault == "sentinel":
        content[1]["logprob"] = -9999.0
    elif fault == "empty":
        content[1] = {}
    elif fault == "count":
        content.append({"logprob": -0.5})
    else:
        content[1] = -0.5
    with pytest.raises(MalformedResponseError, match=reason) as info:
        impl.parse_generate_response(response(content))
    assert (info.value.field, info.value.token) == ("logprobs.content", token)


@pytest.mark.parametrize("mode", [None, "tokens"])
def test_records_without_a_token_outside_text_mode_are_refused(impl, mode):
    with pytest.raises(MalformedResponseError) as info:
        impl.parse_generate_response(tokenless(LOGPROBS).replace(b'"output_mode":"text",', b"")
                                     if mode is None else response([{"logprob": v} for v in LOGPROBS], mode))
    err = info.value
    assert (err.field, err.token) == ("logprobs.content", 0)
    assert err.reason == "Engine response choice.logprobs.content[0].token must be 'token_id:9707'."
