"""NVIDIA Dynamo's engine channel: ``nvext.engine_data`` beside the choices of a
``/v1/chat/completions`` or ``/v1/completions`` response (the request's
``nvext.extra_fields: ["engine_data"]``), read as the exact-id source and checked against the
choice, on both implementations (``impl``: the reference and the compiled core on every path).

The documents are laid out as Dynamo writes them: ``nvext`` at the top level beside
``choices`` (the frontend's response types flatten the OpenAI response and add ``nvext``),
``engine_data`` holding what the vLLM worker accumulated for the response's one choice
(``completion_token_ids``, ``finished``, ``completion_logprobs`` when as many as the ids,
``prompt_token_ids``, ``routed_experts`` as ``{data, shape, start, dtype}`` with ``data`` the
base64 of the raw array), keys in serde_json's sorted order; the engine's logprobs are the
doubles of vLLM's float32 values, the choice's are float32 as the frontend writes them.
"""

from __future__ import annotations

import base64
import copy
import io
import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tokenwire import MalformedResponseError
from tokenwire.rules import openai as openai_rules

from .conftest import PYTHON, _core
from .openai_strategies import fault_at
from .test_extract import assert_openai_peers

IDS = [791, 4320, 374, 3116, 151645]  # the last one the EOS the engine stopped on
VALUES = [-0.1, -0.7, -0.025, -1.3, -0.002]
PROMPT = [151644, 872, 198, 3838]


def engine_value(v: float) -> float:
    """A logprob as the engine reports it: vLLM's float32, as a double."""
    return float(np.float32(v))


def choice_value(v: float) -> float:
    """The same logprob as Dynamo's choice writes it: the float32's shortest spelling."""
    return float(str(np.float32(v)))


def routing(rows: int, dtype: str = "uint8", start: int = 0) -> tuple[dict, np.ndarray]:
    array = (np.arange(rows * 3 * 2) % 7).astype(dtype).reshape(rows, 3, 2)
    sent = {"data": base64.b64encode(array.tobytes()).decode(), "dtype": dtype, "shape": [rows, 3, 2],
            "start": start}
    return sent, array


def engine_data(ids=IDS, values=VALUES, prompt=PROMPT, routed=None) -> dict:
    data = {"completion_logprobs": [engine_value(v) for v in values], "completion_token_ids": list(ids),
            "finished": True, "prompt_token_ids": list(prompt)}
    if routed is not None:
        data["routed_experts"] = routed
    return data


def usage(n: int) -> dict:
    return {"completion_tokens": n, "prompt_tokens": len(PROMPT), "total_tokens": len(PROMPT) + n}


def chat(ids=IDS, values=VALUES, *, token_ids=False, token_strings=False, data=None) -> dict:
    """Dynamo's chat response: the choice's `logprobs.content` (text tokens, or "token_id:N" with
    `return_tokens_as_token_ids`) and, with `token_ids`, `choices[].token_ids`."""
    content = [{"bytes": [116], "logprob": choice_value(v), "token": f"token_id:{i}" if token_strings else f"t{t}",
                "top_logprobs": []} for t, (i, v) in enumerate(zip(ids, values))]
    choice = {"finish_reason": "stop", "index": 0, "logprobs": {"content": content},
              "message": {"content": "Four.", "role": "assistant"}}
    if token_ids:
        choice["token_ids"] = list(ids)
    return {"choices": [choice], "created": 1, "id": "chatcmpl-1", "model": "m", "object": "chat.completion",
            "usage": usage(len(ids)), "nvext": {"engine_data": engine_data() if data is None else data}}


def completions(ids=IDS, values=VALUES, *, token_strings=True, data=None) -> dict:
    """Dynamo's completions response: `logprobs.{tokens, token_logprobs, text_offset,
    top_logprobs}`, tokens "token_id:N" with `return_tokens_as_token_ids`."""
    tokens = [f"token_id:{i}" if token_strings else f"t{t}" for t, i in enumerate(ids)]
    logprobs = {"text_offset": list(range(len(ids))), "token_logprobs": [choice_value(v) for v in values],
                "tokens": tokens, "top_logprobs": [{tok: choice_value(v)} for tok, v in zip(tokens, values)]}
    choice = {"finish_reason": "stop", "index": 0, "logprobs": logprobs, "text": "Four."}
    return {"choices": [choice], "created": 1, "id": "cmpl-1", "model": "m", "object": "text_completion",
            "usage": usage(len(ids)), "nvext": {"engine_data": engine_data() if data is None else data}}


PARSE = {"chat": "parse_chat_completions_response", "completions": "parse_completions_response"}


def parse(impl, doc, **kw):
    endpoint = "completions" if doc.get("object") == "text_completion" else "chat"
    return getattr(impl, PARSE[endpoint])(json.dumps(doc).encode(), **kw)


def raises(impl, doc, match: str, **kw) -> MalformedResponseError:
    with pytest.raises(MalformedResponseError, match=match) as info:
        parse(impl, doc, **kw)
    return info.value


# --- the engine's ids, as the response's --------------------------------------------------------


@pytest.mark.parametrize("doc", [chat(token_ids=True), chat(token_strings=True), completions()],
                         ids=["chat-token_ids", "chat-token_strings", "completions-token_strings"])
def test_engine_ids_equal_to_the_choices(impl, doc):
    sent, array = routing(len(PROMPT) + len(IDS) - 1)
    doc["nvext"]["engine_data"]["routed_experts"] = sent
    r = parse(impl, doc)
    (c,) = r.choices
    assert c.completion_ids.dtype == np.int64 and c.completion_ids.tolist() == IDS
    # The engine's values, exactly: the choice's float32 spelling only has to agree with them.
    assert c.completion_logprobs.tolist() == [engine_value(v) for v in VALUES]
    assert r.prompt_token_ids.tolist() == PROMPT
    assert c.routed_experts.start == 0 and c.routed_experts.array.dtype == np.uint8
    assert np.array_equal(c.routed_experts.array, array)
    # What was read leaves the payload; the rest of nvext stays as sent.
    assert r.payload["nvext"] == {"engine_data": {"finished": True}}


@pytest.mark.parametrize("build", [chat, completions], ids=["chat", "completions"])
def test_engine_data_without_choice_token_ids(impl, build):
    # Text tokens only in the choice: the engine data is the one id source.
    doc = build(token_strings=False)
    r = parse(impl, doc)
    assert r.choices[0].completion_ids.tolist() == IDS
    # No logprobs in the choice at all: the engine's are the sampled ones.
    doc["choices"][0]["logprobs"] = None
    r = parse(impl, doc)
    assert r.choices[0].completion_logprobs.tolist() == [engine_value(v) for v in VALUES]
    # Neither the engine's nor the choice's logprobs: the ids alone when allowed.
    del doc["nvext"]["engine_data"]["completion_logprobs"]
    assert parse(impl, doc, require_logprobs=False).choices[0].completion_logprobs is None
    raises(impl, doc, "no logprobs in the response")


def test_engine_data_with_the_other_nvext_fields(impl):
    doc = chat()
    doc["nvext"].update(worker_id={"decode_worker_id": 7}, timing={"total_time_ms": 3.5})
    doc["nvext"]["engine_data"]["prompt_logprobs"] = [None]
    r = parse(impl, doc)
    assert r.payload["nvext"] == {"engine_data": {"finished": True, "prompt_logprobs": [None]},
                                  "timing": {"total_time_ms": 3.5}, "worker_id": {"decode_worker_id": 7}}


# --- the engine against the choice -----------------------------------------------------------------


def test_engine_ids_a_trailing_eos_longer_than_the_choices(impl):
    doc = chat(token_ids=True)
    doc["choices"][0]["token_ids"] = IDS[:-1]  # the stop token the choice hides
    err = raises(impl, doc, r"the engine's completion ids and the choice's differ in length: "
                 r"nvext.engine_data.completion_token_ids has 5, token_ids has 4 \(-1\)")
    assert (err.choice, err.field, err.token) == (0, "token_ids", None)
    assert "post-processing" in str(err)


def test_engine_logprobs_a_trailing_eos_longer_than_the_choices(impl):
    """NeMo-Gym's case (PR #1963: 566 engine ids and logprobs, 565 logprobs in the
    post-processed choice): the engine's ids and logprobs are the evidence, the choice's
    logprobs (text tokens, no ids) neither required to be as many nor compared."""
    doc = chat(IDS[:-1], VALUES[:-1])
    doc["nvext"]["engine_data"] = engine_data()
    doc["usage"] = usage(len(IDS))  # the engine's count (the worker's completion_usage)
    r = parse(impl, doc)
    (c,) = r.choices
    assert c.completion_ids.tolist() == IDS
    assert c.completion_logprobs.tolist() == [engine_value(v) for v in VALUES]
    # Not the evidence, the choice's logprobs stay in the choice's payload as sent.
    assert len(c.raw["logprobs"]["content"]) == len(IDS) - 1


def test_engine_ids_longer_than_the_choices_logprobs(impl):
    # Without logprobs of its own the engine's ids are aligned with the choice's.
    doc = chat(IDS[:-1], VALUES[:-1])
    doc["nvext"]["engine_data"] = engine_data()
    del doc["nvext"]["engine_data"]["completion_logprobs"]
    err = raises(impl, doc, r"the engine's completion ids and the choice's logprobs differ in count: "
                 r"nvext.engine_data.completion_token_ids has 5, logprobs.content has 4 \(-1\)")
    assert (err.choice, err.field) == (0, "logprobs.content")


@pytest.mark.parametrize("build", [lambda: chat(token_ids=True), lambda: chat(token_strings=True), completions],
                         ids=["token_ids", "chat-token_strings", "completions-token_strings"])
def test_engine_ids_that_differ_from_the_choices_at_a_token(impl, build):
    doc = build()
    doc["nvext"]["engine_data"]["completion_token_ids"][2] = 99
    err = raises(impl, doc, "the engine's completion ids and the choice's differ at token 2: "
                 "nvext.engine_data.completion_token_ids has 99")
    assert err.token == 2 and err.choice == 0


@pytest.mark.parametrize("build", [chat, lambda: chat(token_strings=True), completions],
                         ids=["chat", "chat-token_strings", "completions-token_strings"])
def test_engine_logprobs_that_differ_from_the_choices(impl, build):
    """NeMo-Gym PR #1784's test: the engine's -0.1 beside a choice's -9.1 gives -0.1; the
    choice's values are not compared, nor held to be evidence (a sentinel or null there is
    no fault), whether or not its records name their ids."""
    doc = build()
    lp = doc["choices"][0]["logprobs"]
    records = lp["content"] if "content" in lp else None
    for value in (-9.1, -9999.0, None):
        if records is not None:
            records[0]["logprob"] = value
        else:
            lp["token_logprobs"][0] = value
        (c,) = parse(impl, doc).choices
        assert c.completion_logprobs.tolist() == [engine_value(v) for v in VALUES]
        assert c.completion_logprobs[0] == engine_value(-0.1)


def test_the_choices_ids_are_still_checked(impl):
    """The ids its records name are the choice's ids: checked against the engine's."""
    doc = chat(IDS[:-1], VALUES[:-1], token_strings=True)
    doc["nvext"]["engine_data"] = engine_data()
    doc["usage"] = usage(len(IDS))
    err = raises(impl, doc, r"the engine's completion ids and the choice's differ in length: "
                 r"nvext.engine_data.completion_token_ids has 5, logprobs.content has 4 \(-1\)")
    assert (err.choice, err.field) == (0, "logprobs.content")
    doc = chat(token_strings=True)
    doc["choices"][0]["logprobs"]["content"][1]["token"] = "token_id:9"
    err = raises(impl, doc, "the engine's completion ids and the choice's differ at token 1: "
                 "nvext.engine_data.completion_token_ids has 4320, logprobs.content has 9")
    assert (err.field, err.token) == ("logprobs.content", 1)


def test_engine_logprobs_not_as_many_as_its_ids(impl):
    doc = chat()
    doc["nvext"]["engine_data"]["completion_logprobs"].pop()
    err = raises(impl, doc, r"nvext.engine_data has 5 completion_token_ids but 4 completion_logprobs \(-1\)")
    assert (err.choice, err.field) == (None, "nvext.engine_data.completion_logprobs")


@pytest.mark.parametrize(("value", "message"), [
    (-9999.0, "logprob is the -9999 sentinel"),
    (-1e30, "logprob is -1e\\+30, Dynamo's stand-in for a non-finite logprob"),
    (None, "logprob is null"),
    ("x", "logprob must be a number"),
    (0.5, "logprob cannot be positive"),
], ids=["sentinel", "clamp", "null", "string", "positive"])
def test_engine_logprobs_that_are_not_evidence(impl, value, message):
    doc = chat()
    doc["choices"][0]["logprobs"] = None  # the engine's values are the only ones
    doc["nvext"]["engine_data"]["completion_logprobs"][3] = value
    err = raises(impl, doc, message)
    # The engine data is beside the choices: its faults are named where it is.
    assert (err.choice, err.field, err.token) == (None, "nvext.engine_data.completion_logprobs", 3)


@pytest.mark.parametrize("literal", ["NaN", "-Infinity", "-1e400"])
def test_non_finite_engine_logprobs_are_invalid_json(impl, literal):
    raw = json.dumps(chat()).replace(json.dumps(engine_value(VALUES[1])), literal, 1).encode()
    with pytest.raises(MalformedResponseError, match="invalid JSON"):
        impl.parse_chat_completions_response(raw)


@pytest.mark.parametrize(("value", "reason"), [
    ("x", r"must hold token ids in \[0, 2\*\*32\): expected a list"), ([1, -1], "must hold token ids"),
    ([2**32], "must hold token ids"), ({"a": 1}, "must hold token ids.*expected a list"),
])
def test_engine_ids_that_are_not_ids(impl, value, reason):
    doc = chat()
    doc["nvext"]["engine_data"]["completion_token_ids"] = value
    err = raises(impl, doc, f"nvext.engine_data.completion_token_ids {reason}")
    assert (err.choice, err.field) == (None, "nvext.engine_data.completion_token_ids")


def test_an_engine_that_did_not_finish(impl):
    doc = chat()
    doc["nvext"]["engine_data"]["finished"] = False
    raises(impl, doc, "nvext.engine_data.finished is false")


@pytest.mark.parametrize("data", [[], "x", 3], ids=["list", "string", "number"])
def test_engine_data_that_is_not_an_object(impl, data):
    doc = chat()
    doc["nvext"]["engine_data"] = data
    err = raises(impl, doc, "nvext.engine_data must be an object")
    assert (err.choice, err.field) == (None, "nvext.engine_data")


def test_engine_data_beside_several_choices(impl):
    doc = chat()
    second = copy.deepcopy(doc["choices"][0])
    second["index"] = 1
    doc["choices"].append(second)
    err = raises(impl, doc, "nvext.engine_data is one per response .* one of 2 choices")
    assert err.choice is None


# --- nvext.completion_token_ids: the engine's ids on their own ---------------------------------------


def nvext_ids(build, ids=IDS, data: bool = False, **kw) -> dict:
    """The response to `nvext.extra_fields: ["completion_token_ids"]` (NeMo-RL's Dynamo backend
    asks for it on /v1/completions): the engine's output ids at nvext's top, the chunks' deltas
    concatenated by the frontend's aggregator; with `data`, the engine data beside them."""
    doc = build(**kw)
    nvext = {"completion_token_ids": list(ids)}
    if data:
        nvext["engine_data"] = doc["nvext"]["engine_data"]
    doc["nvext"] = nvext
    return doc


@pytest.mark.parametrize("build", [chat, completions], ids=["chat", "completions"])
def test_nvext_completion_token_ids_are_the_exact_ids(impl, build):
    doc = nvext_ids(build, token_strings=False)  # text tokens only: nvext's ids are the one source
    r = parse(impl, doc)
    (c,) = r.choices
    assert c.completion_ids.dtype == np.int64 and c.completion_ids.tolist() == IDS
    assert c.completion_logprobs.tolist() == [choice_value(v) for v in VALUES]
    assert r.payload["nvext"] == {}  # what was read leaves the payload
    both = nvext_ids(build, data=True, token_strings=False)
    both["nvext"]["worker_id"] = {"decode_worker_id": 7}
    r = parse(impl, both)
    assert r.choices[0].completion_ids.tolist() == IDS
    assert r.payload["nvext"] == {"engine_data": {"finished": True}, "worker_id": {"decode_worker_id": 7}}


def test_nvext_completion_token_ids_against_the_choice(impl):
    # The stop token the post-processed choice hides: the same error as for the engine data's ids.
    doc = nvext_ids(chat, token_ids=True)
    doc["choices"][0]["token_ids"] = IDS[:-1]
    err = raises(impl, doc, r"the engine's completion ids and the choice's differ in length: "
                 r"nvext.completion_token_ids has 5, token_ids has 4 \(-1\)")
    assert (err.choice, err.field) == (0, "token_ids")
    doc = nvext_ids(completions)  # "token_id:N" tokens
    doc["nvext"]["completion_token_ids"][1] = 17
    err = raises(impl, doc, "the engine's completion ids and the choice's differ at token 1: "
                 "nvext.completion_token_ids has 17")
    assert err.token == 1


def test_nvext_completion_token_ids_against_the_engine_data(impl):
    doc = nvext_ids(chat, data=True)
    doc["nvext"]["completion_token_ids"].append(151645)
    err = raises(impl, doc, r"the engine's completion ids and the ones at nvext's top differ in length: "
                 r"nvext.engine_data.completion_token_ids has 5, nvext.completion_token_ids has 6 \(\+1\)")
    assert (err.choice, err.field) == (None, "nvext.completion_token_ids")
    doc = nvext_ids(chat, data=True)
    doc["nvext"]["completion_token_ids"][0] = 1
    err = raises(impl, doc, "differ at token 0: nvext.engine_data.completion_token_ids has 791, "
                 "nvext.completion_token_ids has 1")
    assert (err.choice, err.field, err.token) == (None, "nvext.completion_token_ids", 0)


def test_nvext_completion_token_ids_against_the_engine_logprobs(impl):
    doc = nvext_ids(chat, data=True)
    del doc["nvext"]["engine_data"]["completion_token_ids"]  # the engine data's logprobs alone
    assert parse(impl, doc).choices[0].completion_logprobs.tolist() == [engine_value(v) for v in VALUES]
    doc["nvext"]["completion_token_ids"].pop()
    err = raises(impl, doc, r"nvext.completion_token_ids has 4 ids but nvext.engine_data has 5 "
                 r"completion_logprobs \(\+1\)")
    assert (err.choice, err.field) == (None, "nvext.engine_data.completion_logprobs")


@pytest.mark.parametrize("value", ["x", [1, -1], [2**32], {"a": 1}, [1.5]])
def test_nvext_completion_token_ids_that_are_not_ids(impl, value):
    doc = nvext_ids(chat)
    doc["nvext"]["completion_token_ids"] = value
    err = raises(impl, doc, "nvext.completion_token_ids must hold token ids")
    assert (err.choice, err.field) == (None, "nvext.completion_token_ids")


def only_routing_copy() -> dict:
    """nvext.routed_experts alone beside a choice's own ids."""
    doc = sglang_worker(sglang_routing()[0], data=False)
    del doc["nvext"]["completion_token_ids"]
    doc["choices"][0]["token_ids"] = list(IDS)
    return doc


@pytest.mark.parametrize(("build", "field"), [(lambda: nvext_ids(chat), "nvext.completion_token_ids"),
                                              (lambda: only_routing_copy(), "nvext.routed_experts")],
                         ids=["completion_token_ids", "routed_experts"])
def test_nvext_fields_beside_several_choices(impl, build, field):
    doc = build()
    second = copy.deepcopy(doc["choices"][0])
    second["index"] = 1
    doc["choices"].append(second)
    err = raises(impl, doc, f"{field} is one per response .* one of 2 choices")
    assert (err.choice, err.field) == (None, field)


# --- the prompt --------------------------------------------------------------------------------------


def test_engine_prompt_ids(impl):
    doc = chat()
    doc["prompt_token_ids"] = list(PROMPT)  # a server that sends both: they agree
    assert parse(impl, doc).prompt_token_ids.tolist() == PROMPT
    doc["prompt_token_ids"][1] = 5
    err = raises(impl, doc, r"the engine's prompt ids \(nvext.engine_data.prompt_token_ids\) and the "
                 r"response's \(prompt_token_ids\) differ at token 1")
    assert (err.choice, err.field, err.token) == (None, "prompt_token_ids", 1)
    doc["prompt_token_ids"] = PROMPT[:-1]
    raises(impl, doc, r"differ in length: 4 ids against 3 \(-1\)")
    doc["nvext"]["engine_data"]["prompt_token_ids"] = [1, "x"]
    raises(impl, doc, "nvext.engine_data.prompt_token_ids must hold token ids")


# --- routing -----------------------------------------------------------------------------------------


def test_routing_one_row_short(impl):
    """The engine's routing rows are counted as the choice's are (vLLM's rule: a row per
    prompt and completion token but the last, which is never fed back)."""
    rows = len(PROMPT) + len(IDS) - 1
    doc = chat()
    doc["nvext"]["engine_data"]["routed_experts"] = routing(rows - 1)[0]
    err = raises(impl, doc, r"nvext.engine_data.routed_experts has 7 rows, not 8: one per token of the prompt "
                 r"\(4\) and of the completion \(5\) but the last$")
    assert (err.choice, err.field) == (None, "nvext.engine_data.routed_experts")


def test_routing_from_a_start(impl):
    """``start`` (vLLM's routed_experts_prompt_start) trims the first rows: rows from it on."""
    rows = len(PROMPT) + len(IDS) - 1
    doc = chat()
    doc["nvext"]["engine_data"]["routed_experts"], array = routing(rows - 3, "int32", start=3)
    routed = parse(impl, doc).choices[0].routed_experts
    assert routed.start == 3 and routed.array.dtype == np.int32 and np.array_equal(routed.array, array)
    doc["nvext"]["engine_data"]["routed_experts"] = routing(rows - 2, start=3)[0]
    raises(impl, doc, r"has 6 rows, not 5: one per token of the prompt \(4\) and of the completion \(5\) but the "
           r"last, from position 3 on")


def test_routing_counted_by_the_usage_or_not_at_all(impl):
    """Without prompt ids the prompt is ``usage.prompt_tokens`` (as for the choice's routing);
    without either the rows cannot be counted, and any number is read."""
    doc = chat()
    del doc["nvext"]["engine_data"]["prompt_token_ids"]
    doc["nvext"]["engine_data"]["routed_experts"] = routing(2)[0]
    raises(impl, doc, r"has 2 rows, not 8: one per token of the prompt \(4\)")
    assert len(parse(impl, doc, check_usage=False).choices[0].routed_experts.array) == 2
    del doc["usage"]["prompt_tokens"]
    assert len(parse(impl, doc).choices[0].routed_experts.array) == 2


@pytest.mark.parametrize(("change", "message", "field"), [
    (lambda r: r.update(dtype="torch.int32"), "Unsupported nvext.engine_data.routed_experts dtype", ".dtype"),
    (lambda r: r.update(data="@@@@"), "Invalid nvext.engine_data.routed_experts base64", ".data"),
    (lambda r: r.update(shape=[7, 3]), r"nvext.engine_data.routed_experts shape must be \[rows, layers, topk\]",
     ".shape"),
    (lambda r: r.update(shape=[8, 3, 3]), "does not match", ".shape"),
    (lambda r: r.update(start=-1), "start must be a non-negative int", ".start"),
], ids=["dtype", "base64", "shape", "bytes", "start"])
def test_routing_that_breaks_the_readers_rules(impl, change, message, field):
    doc = chat()
    sent = routing(len(PROMPT) + len(IDS) - 1)[0]
    change(sent)
    doc["nvext"]["engine_data"]["routed_experts"] = sent
    err = raises(impl, doc, message)
    assert err.field == "nvext.engine_data.routed_experts" + field


def test_routing_that_is_neither_form(impl):
    doc = chat()
    doc["nvext"]["engine_data"]["routed_experts"] = 7
    err = raises(impl, doc, r"nvext.engine_data.routed_experts must be an object \(vLLM's worker\) or a base64 "
                 r"string of int32 values \(SGLang's\)")
    assert (err.choice, err.field) == (None, "nvext.engine_data.routed_experts")


# --- routing from an SGLang worker, and the frontend's copy at nvext's top ----------------------------

ROWS = len(PROMPT) + len(IDS) - 1  # SGLang routes every position but the last sampled token's


def sglang_routing(rows: int = ROWS, layers: int = 3, topk: int = 2) -> tuple[str, np.ndarray]:
    """SGLang's routing as its tokenizer manager sends it (and Dynamo's SGLang worker passes
    it on as it is): base64 of the bare little-endian int32 array, no shape, no dtype."""
    array = (np.arange(rows * layers * topk) % 11).astype("<i4").reshape(rows, layers, topk)
    return base64.b64encode(array.tobytes()).decode(), array


def sglang_worker(routed, *, data: bool = True, copy: bool = True, build=chat) -> dict:
    """A response through an SGLang worker: its engine data holds the routing alone (the
    worker sends neither ids nor logprobs there), the ids come as nvext.completion_token_ids,
    the choice's logprobs are the sampled ones; with `copy`, the frontend's copy of the
    routing at nvext's top (`extra_fields: ["routed_experts"]`), nvext's members in the order
    of the frontend's response type."""
    doc = build(token_strings=False)
    nvext = {}
    if copy:
        nvext["routed_experts"] = routed
    if data:
        nvext["engine_data"] = {"routed_experts": routed}
    nvext["completion_token_ids"] = list(IDS)
    doc["nvext"] = nvext
    return doc


@pytest.mark.parametrize("build", [chat, completions], ids=["chat", "completions"])
@pytest.mark.parametrize(("data", "copy"), [(True, True), (True, False), (False, True)],
                         ids=["both", "engine_data", "nvext"])
def test_an_sglang_workers_routing(impl, build, data, copy):
    sent, array = sglang_routing()
    doc = sglang_worker(sent, data=data, copy=copy, build=build)
    r = parse(impl, doc, routed_experts_shape=(3, 2))
    (c,) = r.choices
    assert c.completion_ids.tolist() == IDS
    assert c.routed_experts.start == 0 and c.routed_experts.array.dtype == np.int32
    assert np.array_equal(c.routed_experts.array, array)
    # Without the shape, rows of any width: (rows, layers * topk).
    assert np.array_equal(parse(impl, doc).choices[0].routed_experts.array, array.reshape(ROWS, 6))
    assert r.payload["nvext"] == ({"engine_data": {}} if data else {})  # what was read leaves the payload


def test_an_sglang_workers_routing_from_a_start(impl):
    sent, array = sglang_routing(ROWS - 2)
    doc = sglang_worker(sent)
    routed = parse(impl, doc, routed_experts_shape=(3, 2), routed_experts_start_len=2).choices[0].routed_experts
    assert routed.start == 2 and np.array_equal(routed.array, array)
    raises(impl, doc, r"holds 36 int32 values, not rows of 3 layers x 2 for 8 rows", routed_experts_shape=(3, 2))
    raises(impl, doc, r"routed_experts_start_len=9 is past the 8 positions SGLang routes \(the prompt's 4 and 5 "
           r"completion tokens but the last\)", routed_experts_start_len=9)


@pytest.mark.parametrize(("routed", "kw", "message"), [
    ("@@@@", {}, "Invalid nvext.engine_data.routed_experts base64"),
    (base64.b64encode(b"\x01" * 6).decode(), {}, "nvext.engine_data.routed_experts holds 6 bytes, not whole int32"),
    (sglang_routing(ROWS)[0][:-8], {}, None),  # canonical base64 of fewer values: rows cannot share them
    (sglang_routing(ROWS - 1)[0], {"routed_experts_shape": (3, 2)}, "holds 42 int32 values, not rows of 3 layers x 2 "
     "for 8 rows: one per position from routed_experts_start_len=0 to the prompt \\(4\\) and completion \\(5\\) tokens"),
    (sglang_routing(ROWS - 1)[0], {}, "holds 42 int32 values, which 8 rows cannot share evenly"),
    ("", {}, "holds no int32 value for 8 rows"),
    (sglang_routing()[0], {"num_experts": 10}, "nvext.engine_data.routed_experts"),
], ids=["base64", "odd-bytes", "short", "shape", "uneven", "empty", "num_experts"])
def test_an_sglang_workers_routing_broken(impl, routed, kw, message):
    doc = sglang_worker(routed, copy=False)
    if message is None:
        with pytest.raises(MalformedResponseError) as info:
            parse(impl, doc, **kw)
        err = info.value
    else:
        err = raises(impl, doc, message, **kw)
    assert (err.choice, err.field) == (None, "nvext.engine_data.routed_experts")


def npy_string(array: np.ndarray) -> str:
    buffer = io.BytesIO()
    np.save(buffer, array)
    return base64.b64encode(buffer.getvalue()).decode()


def test_a_npy_string_is_vllms_form(impl):
    """Dynamo's vLLM engine-generate adapter sends the routing as vLLM's OpenAI server does, a
    base64 .npy file: read as that (its magic is never SGLang's int32 data: it would open on
    expert id 1,297,436,307), its rows counted as the choice's are."""
    array = routing(ROWS, "int32")[1]
    doc = chat()
    doc["nvext"]["engine_data"]["routed_experts"] = npy_string(array)
    routed = parse(impl, doc, routed_experts_shape=(3, 2)).choices[0].routed_experts
    assert routed.start is None and routed.array.dtype == np.int32 and np.array_equal(routed.array, array)
    doc["nvext"]["engine_data"]["routed_experts"] = npy_string(array[:-1])
    err = raises(impl, doc, r"nvext.engine_data.routed_experts has 7 rows, not 8: one per token of the prompt")
    assert (err.choice, err.field) == (None, "nvext.engine_data.routed_experts")
    doc["nvext"]["engine_data"]["routed_experts"] = npy_string(array.astype(np.float32))
    raises(impl, doc, "nvext.engine_data.routed_experts .npy header is invalid")


def test_an_sglang_workers_routing_without_a_row_count(impl):
    """No prompt ids and no usage.prompt_tokens: the rows cannot be counted; the shape reads them."""
    sent, array = sglang_routing()
    doc = sglang_worker(sent, copy=False)
    del doc["usage"]["prompt_tokens"]
    raises(impl, doc, r"nvext.engine_data.routed_experts has no row count: the prompt's length is not known .*; "
           r"pass routed_experts_shape=\(layers, topk\)")
    assert np.array_equal(parse(impl, doc, routed_experts_shape=(3, 2)).choices[0].routed_experts.array, array)
    doc["usage"]["prompt_tokens"] = len(PROMPT)
    raises(impl, doc, "has no row count", check_usage=False)


@pytest.mark.parametrize("form", ["sglang", "vllm"])
def test_the_frontends_copy_must_be_the_engines(impl, form):
    """Dynamo's frontend clones engine_data.routed_experts into nvext.routed_experts: both sent,
    they are the same value (the same form, bytes, shape, start and dtype)."""
    if form == "sglang":
        sent, array = sglang_routing()
        doc = sglang_worker(sent)
    else:
        sent, array = routing(ROWS)
        doc = chat()
        doc["nvext"] = {"routed_experts": sent, "engine_data": dict(engine_data(), routed_experts=sent)}
    assert np.array_equal(parse(impl, doc, routed_experts_shape=(3, 2)).choices[0].routed_experts.array, array)

    def copy_is(value, why):
        doc["nvext"]["routed_experts"] = value
        err = raises(impl, doc, "nvext.routed_experts differs from nvext.engine_data.routed_experts, of which "
                     f"Dynamo's frontend sends a copy: {why}$")
        assert (err.choice, err.field) == (None, "nvext.routed_experts")

    changed = array.copy()
    changed[1, 0, 1] += 1  # the 8th id: byte 7 of uint8 rows, 28 of int32
    data = base64.b64encode(changed.tobytes()).decode()
    copy_is(data if form == "sglang" else dict(sent, data=data), f"first at byte {7 * array.itemsize}")
    fewer = base64.b64encode(array[:-1].tobytes()).decode()
    copy_is(fewer if form == "sglang" else dict(sent, data=fewer), f"{array.nbytes} bytes against {array[:-1].nbytes}")
    if form == "vllm":
        copy_is(dict(sent, start=1), "start 0 against 1")
        copy_is(dict(sent, start=False), "start 0 against False")  # equal in Python, not in JSON
        copy_is(dict(sent, shape=[float(d) for d in sent["shape"]]), r"shape \[8, 3, 2\] against \[8.0, 3.0, 2.0\]")
        copy_is(dict(sent, dtype="int16"), "dtype 'uint8' against 'int16'")
        copy_is({key: v for key, v in sent.items() if key != "data"}, "one has data, the other none")
        copy_is(sglang_routing()[0], "one is dict, the other str")
        copy_is(dict(sent, data=sent["data"][:-1]), "its base64 is not canonical")
    else:
        copy_is({"data": sent}, "one is str, the other dict")
        copy_is(sent[:-1], "its base64 is not canonical")


def test_the_frontends_copy_alone(impl):
    """nvext.routed_experts without the engine data (only `extra_fields: ["routed_experts"]`):
    read by the same rules, vLLM's object as SGLang's string."""
    doc = chat(token_ids=True)
    doc["prompt_token_ids"] = list(PROMPT)
    sent, array = routing(ROWS)
    doc["nvext"] = {"routed_experts": sent}
    routed = parse(impl, doc).choices[0].routed_experts
    assert routed.array.dtype == np.uint8 and np.array_equal(routed.array, array)
    doc["nvext"]["routed_experts"] = routing(ROWS - 1)[0]
    err = raises(impl, doc, r"nvext.routed_experts has 7 rows, not 8")
    assert (err.choice, err.field) == (None, "nvext.routed_experts")
    doc["nvext"]["routed_experts"] = dict(sent, data="@@@@")
    err = raises(impl, doc, "Invalid nvext.routed_experts base64")
    assert err.field == "nvext.routed_experts.data"


def test_the_frontends_copy_beside_the_choices_routing(impl):
    sent, _ = routing(ROWS)
    doc = chat(token_ids=True)
    doc["nvext"] = {"routed_experts": sent, "completion_token_ids": list(IDS)}
    doc["choices"][0]["routed_experts"] = npy_string(routing(ROWS)[1])
    err = raises(impl, doc, "routed_experts is sent on the choice and in nvext: one form only")
    assert (err.choice, err.field) == (0, "routed_experts")


# --- heads, advice, request helpers ------------------------------------------------------------------


def with_candidates(doc: dict, sampled=None) -> dict:
    """Three candidates per record (the sampled token first), each named "token_id:N"."""
    for entry, token_id in zip(doc["choices"][0]["logprobs"]["content"], IDS):
        own = entry["logprob"] if sampled is None else sampled
        entry["top_logprobs"] = [{"token": f"token_id:{token_id}", "logprob": own, "bytes": None},
                                 {"token": f"token_id:{token_id + 1}", "logprob": -3.0, "bytes": None},
                                 {"token": f"token_id:{token_id + 2}", "logprob": -4.0, "bytes": None}]
    return doc


def test_a_head_comes_from_the_choices_candidates(impl):
    """The choice's records name their ids ("token_id:N"), checked against the engine's token
    by token: its candidates are paired with the engine's tokens, and the head takes them."""
    doc = with_candidates(chat(token_strings=True))
    r = parse(impl, doc, top_k=1)
    (c,) = r.choices
    assert c.completion_top_ids.to_lists() == [[i] for i in IDS]
    assert c.completion_logprobs.tolist() == [engine_value(v) for v in VALUES]
    doc["choices"][0]["logprobs"] = None
    raises(impl, doc, "Missing requested top logprobs: nvext.engine_data carries the sampled logprobs only",
           top_k=1)


@pytest.mark.parametrize("build", [chat, lambda **kw: completions(token_strings=False, **kw)],
                         ids=["chat", "completions"])
def test_a_head_from_unpaired_candidates_is_refused(impl, build):
    """Records of text name no ids: the post-processed choice's candidates cannot be paired
    with the engine's tokens, so no head is built from them (the sampled ones alone are read)."""
    doc = build()
    assert len(parse(impl, doc).choices[0].completion_ids) == len(IDS)
    err = raises(impl, doc, r"Missing requested top logprobs: the sampled logprobs are the engine's "
                 r"\(nvext.engine_data.completion_logprobs\), and the choice's candidates \(logprobs\.\w+\) pair with "
                 r"its tokens only through the ids their records name, which these records do not", top_k=1)
    assert (err.choice, err.field) == (0, "logprobs")
    assert "return_tokens_as_token_ids" in str(err) and "post-processing" in str(err)


def test_a_paired_head_whose_sampled_candidate_is_not_the_engines(impl):
    """Paired by id, the head's sampled candidate must carry the engine's sampled logprob."""
    doc = with_candidates(chat(token_strings=True), sampled=-2.5)
    with pytest.raises(MalformedResponseError) as info:
        parse(impl, doc, top_k=1)
    assert (info.value.choice, info.value.field, info.value.token) == (0, "logprobs.content", 0)
    assert parse(impl, doc).choices[0].completion_logprobs[0] == engine_value(-0.1)  # no head asked: no fault


def test_missing_ids_name_the_engine_data_request(impl):
    doc = chat()
    doc["nvext"] = {"worker_id": {"decode_worker_id": 7}}  # Dynamo, without the engine data
    err = raises(impl, doc, "no exact completion token ids in the response "
                 r"\(no `nvext.engine_data.completion_token_ids`")
    text = str(err)
    assert 'nvext: {"extra_fields": ["engine_data"]}' in text and "return_token_ids" not in text
    assert "chat_completions_request_params(params, engine_data=True)" in text
    doc["choices"][0]["logprobs"] = None
    text = str(raises(impl, doc, "no exact completion token ids and no logprobs"))
    assert "for the logprobs, set `logprobs: true`" in text and '"engine_data"' in text
    doc = completions(token_strings=False)
    doc["nvext"] = {}
    assert "completions_request_params(params, engine_data=True)" in str(raises(impl, doc, "no exact"))


def test_request_helpers_ask_for_the_engine_data():
    nvext = {"extra_fields": ["timing"], "token_data": [1, 2]}
    given_params = {"model": "m", "nvext": nvext}
    out = openai_rules.chat_completions_request_params(given_params, engine_data=True)
    assert out == {"model": "m", "logprobs": True,
                   "nvext": {"extra_fields": ["timing", "engine_data"], "token_data": [1, 2]}}
    assert nvext == {"extra_fields": ["timing"], "token_data": [1, 2]}  # the caller's, unchanged
    assert openai_rules.completions_request_params({}, top_k=2, engine_data=True) == {
        "nvext": {"extra_fields": ["engine_data"]}, "logprobs": 4, "return_tokens_as_token_ids": True}
    asked = {"nvext": {"extra_fields": ["engine_data"]}}
    assert openai_rules.completions_request_params(asked, engine_data=True)["nvext"] == asked["nvext"]
    for bad in ({"nvext": []}, {"nvext": {"extra_fields": "engine_data"}}):
        with pytest.raises(TypeError):
            openai_rules.completions_request_params(bad, engine_data=True)


# --- both implementations on changed documents ---------------------------------------------------------


def outcome(parse_fn, raw: bytes, **kw):
    try:
        r = parse_fn(raw, **kw)
    except MalformedResponseError as exc:
        return ("error", exc.choice, exc.field, exc.token, exc.reason[:12] if "invalid JSON" in exc.reason else exc.reason)
    routed = [None if c.routed_experts is None else (c.routed_experts.start, c.routed_experts.array.tolist())
              for c in r.choices]
    return ("ok", r.prompt_token_ids.tolist() if r.prompt_token_ids is not None else None, repr(r.payload),
            [(c.completion_ids.tolist(), None if c.completion_logprobs is None else c.completion_logprobs.tolist())
             for c in r.choices], routed)


_ODD = [None, "x", [], {}, -1, 2**32, 1.5, True, -9999.0, -1e30, 0.5, [1, 2], "AAAA"]


@st.composite
def changed_documents(draw):
    build = draw(st.sampled_from([lambda: chat(token_ids=True), lambda: chat(token_strings=True), chat, completions]))
    doc = build()
    data = doc["nvext"]["engine_data"]
    rows = draw(st.sampled_from([7, 8, 9]))
    # vLLM's worker's object, an SGLang worker's bare int32 string, the engine-generate adapter's
    # .npy string; the frontend's copy beside it.
    data["routed_experts"] = draw(st.sampled_from([routing(rows)[0], sglang_routing(rows)[0],
                                                   npy_string(routing(rows)[1])]))
    if draw(st.booleans()):
        doc["nvext"]["routed_experts"] = copy.deepcopy(data["routed_experts"])
    if draw(st.booleans()):  # nvext.completion_token_ids, beside the engine data or instead of it
        doc["nvext"]["completion_token_ids"] = list(IDS)
        if draw(st.booleans()):
            del doc["nvext"]["engine_data"]
            data = doc["nvext"]  # the faults then land at nvext's top
    for _ in range(draw(st.integers(0, 3))):
        key = draw(st.sampled_from(["completion_token_ids", "completion_logprobs", "prompt_token_ids",
                                    "routed_experts", "finished", "engine_data", "nvext", "choice", "copy"]))
        value = copy.deepcopy(draw(st.sampled_from(_ODD)))
        if key == "engine_data":
            if isinstance(doc["nvext"], dict):
                doc["nvext"]["engine_data"] = value
        elif key == "nvext":
            doc["nvext"] = value
        elif key == "copy":  # the frontend's copy of the routing at nvext's top
            if isinstance(doc["nvext"], dict):
                doc["nvext"]["routed_experts"] = value
        elif key == "choice":
            doc["choices"][0][draw(st.sampled_from(["token_ids", "logprobs"]))] = value
        elif not isinstance(data, dict):
            continue
        elif isinstance(data.get(key), dict) and draw(st.booleans()):
            data[key][draw(st.sampled_from(["data", "shape", "start", "dtype"]))] = value
        else:
            fault_at(draw, data, key, value)
    return doc


@pytest.mark.skipif(_core is None, reason="the compiled core is not built")
@settings(max_examples=300, deadline=None)
@given(doc=changed_documents(), k=st.sampled_from([None, None, 1]), shape=st.sampled_from([None, (3, 2)]))
def test_core_matches_reference_on_changed_documents(doc, k, shape):
    """The rules' outcome (values, routing, payload, or the error and where) and the evidence
    both extractors read are the same on Dynamo documents with faults anywhere."""
    raw = json.dumps(doc).encode()
    name = PARSE["completions" if doc["object"] == "text_completion" else "chat"]
    expected = outcome(getattr(openai_rules, name), raw, top_k=k, routed_experts_shape=shape)
    for path in _core.simd_paths():
        with _core.simd_path_forced(path):
            assert outcome(getattr(_core, name), raw, top_k=k, routed_experts_shape=shape) == expected, path
            assert_openai_peers(raw, k, False)  # the same evidence, the engine rows included


# --- a superseded duplicate member: the last one counts, on every path ---------------------------


def _outcome(impl, raw: bytes):
    try:
        r = impl.parse_chat_completions_response(raw)
    except MalformedResponseError as exc:
        return ("error", exc.field, exc.reason)
    routed = r.choices[0].routed_experts
    prompt = r.prompt_token_ids
    return ("ok", None if routed is None else routed.array.tolist(), None if prompt is None else prompt.tolist())


@pytest.mark.parametrize("level", ["routed_experts", "engine_data", "nvext"])
def test_a_superseded_duplicate_is_not_decoded(impl, level):
    """A member of the engine channel given twice, the last one without the routing's data
    (``routed_experts``, ``engine_data`` or ``nvext`` itself): the scan used to keep the first
    object's base64 under the 4-deep path and decode it; the last member counts, as the
    reference's JSON reader says, on every SIMD path."""
    sent, _ = routing(len(PROMPT) + len(IDS) - 1)
    doc = chat(token_ids=True)
    engine = dict(doc.pop("nvext")["engine_data"], routed_experts=sent)
    no_data = {key: v for key, v in sent.items() if key != "data"}
    no_routing = {key: v for key, v in engine.items() if key != "routed_experts"}
    nvext = {
        "routed_experts": '{"engine_data": %s, "routed_experts": %s}}' % (json.dumps(engine)[:-1], json.dumps(no_data)),
        "engine_data": '{"engine_data": %s, "engine_data": %s}' % (json.dumps(engine), json.dumps(no_routing)),
        "nvext": '%s}, "nvext": {"finished": true}' % json.dumps({"engine_data": engine})[:-1],
    }[level]
    text = '%s, "nvext": %s}' % (json.dumps(doc)[:-1], nvext)
    raw = text.encode()
    json.loads(raw)  # valid JSON, the member given twice
    want = _outcome(PYTHON, raw)
    assert _outcome(impl, raw) == want
    if level == "routed_experts":
        assert want[0] == "error" and want[1] == "nvext.engine_data.routed_experts.data"


def test_a_choice_prompt_that_is_not_the_engines(impl):
    """vLLM's completions send prompt_token_ids on the choice: the engine's prompt ids must be
    the same (they were never compared, and the routing rows were counted by the choice's)."""
    sent, _ = routing(len(PROMPT) + len(IDS) - 1)
    doc = completions()
    doc["nvext"]["engine_data"]["routed_experts"] = sent
    doc["choices"][0]["prompt_token_ids"] = list(PROMPT)
    assert parse(impl, doc).choices[0].routed_experts.array.shape[0] == len(PROMPT) + len(IDS) - 1
    doc["choices"][0]["prompt_token_ids"] = PROMPT + [13]  # one more prompt token: one more routing row
    err = raises(impl, doc, r"the engine's prompt ids \(nvext.engine_data.prompt_token_ids\) and the choice's "
                            r"\(prompt_token_ids\) differ in length")
    assert (err.choice, err.field) == (0, "prompt_token_ids")
    doc["choices"][0]["prompt_token_ids"] = [PROMPT[0] + 1] + PROMPT[1:]
    err = raises(impl, doc, "differ at token 0")
    assert (err.choice, err.field, err.token) == (0, "prompt_token_ids", 0)


@pytest.mark.parametrize("level", ["engine_data", "nvext"])
@pytest.mark.parametrize("order", ["string-then-object", "object-then-string", "string-then-string"])
def test_a_superseded_routing_string_is_not_read(impl, level, order):
    """The routing given twice at one path in its two forms (the string, SGLang's; the object,
    vLLM's): the last member counts, on every SIMD path as in the reference, whichever form
    each is."""
    string, _ = sglang_routing()
    short, _ = sglang_routing(ROWS - 1)
    obj = {key: v for key, v in routing(ROWS)[0].items() if key != "data"}  # no data: refused if read
    first, last = {"string-then-object": (string, obj), "object-then-string": (routing(ROWS)[0], short),
                   "string-then-string": (string, short)}[order]
    doc = chat(token_ids=True)
    doc["nvext"] = {"engine_data": {"completion_token_ids": list(IDS)}} if level == "nvext" else {}
    holder = '{"routed_experts": %s, "routed_experts": %s}' % (json.dumps(first), json.dumps(last))
    nvext = ('{"engine_data": %s}' % holder if level == "engine_data"
             else '{"engine_data": {"completion_token_ids": %s}, %s' % (json.dumps(IDS), holder[1:]))
    raw = ('%s, "nvext": %s}' % (json.dumps({k: v for k, v in doc.items() if k != "nvext"})[:-1], nvext)).encode()
    json.loads(raw)
    want = _outcome(PYTHON, raw)
    assert want[0] == "error"  # the last member is the faulty one: read, it is refused
    assert _outcome(impl, raw) == want
