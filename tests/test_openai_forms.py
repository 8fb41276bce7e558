"""Three OpenAI-compatible forms, each built as its producer lays it out, on both implementations
and every SIMD path:

- vLLM's packed top-k on ``/v1/completions`` (``return_top_k_logprobs``,
  ``vllm/entrypoints/openai/completion/packed_logprobs.py``, proposed): ``logprobs.top_k``
  beside ``token_logprobs``, ``top_logprobs: []``; read by the generate endpoint's rule;
- SGLang's ``sglext.routed_experts`` (``SglExt``, ``entrypoints/openai/protocol.py``): one per
  response, the first generation's bare int32 routing;
- llama.cpp's records (``tools/server/server-task.cpp``): ids as ``id``, ``-FLT_MAX`` for
  log(0), and the ``post_sampling_probs`` form refused.
"""

from __future__ import annotations

import base64
import copy
import io
import json
import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tokenwire import MalformedResponseError
from tokenwire.base import _json
from tokenwire.rules import openai as openai_rules

from .conftest import _core
from .openai_strategies import fault_at
from .test_extract import assert_openai_peers

INF = math.inf
FLT_MAX = float(np.finfo(np.float32).max)  # llama.cpp writes -FLT_MAX, as a double, for log(0)


def b64(array: Any, dtype: str) -> str:
    return base64.b64encode(np.asarray(array, dtype).tobytes()).decode("ascii")


def f32(x: float) -> float:
    return float(np.float32(x))


# --- vLLM /v1/completions with return_top_k_logprobs -----------------------------------------------

TOKENS = [5, 6, 7]
PROMPT = [1, 2, 3, 4]
# Engine rows: the sampled slot first, then k = 5 candidates (the sampled id among them with its own
# value, as the engine repeats it); the packed block holds slots 1..k.
ROWS = [[5, 5, 9, 1, 2, 3], [6, 4, 6, 8, 10, 11], [7, 7, 1, 2, 3, 4]]
VALUES = [[math.log(0.5), math.log(0.5), math.log(0.25), math.log(0.125), math.log(0.0625), -INF],
          [math.log(0.3), math.log(0.4), math.log(0.3), math.log(0.2), math.log(0.05), math.log(0.05)],
          [0.0, 0.0, -INF, -INF, -INF, -INF]]


def completions_body(block: Any = "default", *, tokens: Any = None, sampled: Any = None,
                     top_logprobs: Any = (), token_ids: Any = True) -> bytes:
    """vLLM's non-streaming /v1/completions body as its protocol models and Starlette's
    JSONResponse write it: compact separators, the models' field order (CompletionLogProbs:
    text_offset, token_logprobs, tokens, top_logprobs, then top_k), ``tokens`` "token_id:N" (the
    request must set return_tokens_as_token_ids), the sampled slot's float32 value clamped at
    -9999 in ``token_logprobs``, the candidates' raw float32 (``-inf`` kept) in the block."""
    ids = np.array([row[1:] for row in ROWS], dtype="<i4")
    lps = np.array([row[1:] for row in VALUES], dtype="<f4")
    if block == "default":
        block = {"num_positions": len(TOKENS), "k": 5, "token_ids": b64(ids, "<i4"), "logprobs": b64(lps, "<f4")}
    tokens = [f"token_id:{t}" for t in TOKENS] if tokens is None else tokens
    if sampled is None:
        sampled = [max(f32(row[0]), -9999.0) for row in VALUES]
    offsets = list(np.cumsum([0] + [len(t) for t in tokens[:-1]]).tolist())
    logprobs = {"text_offset": offsets, "token_logprobs": sampled, "tokens": tokens, "top_logprobs": list(top_logprobs)}
    if block is not None:
        logprobs["top_k"] = block
    choice = {"index": 0, "text": "abc", "logprobs": logprobs, "finish_reason": "length", "stop_reason": None}
    if token_ids:
        choice["token_ids"] = list(TOKENS)
    choice.update({"prompt_logprobs": None, "prompt_token_ids": list(PROMPT)})
    doc = {"id": "cmpl-1", "object": "text_completion", "created": 1, "model": "m", "choices": [choice],
           "usage": {"prompt_tokens": 4, "total_tokens": 7, "completion_tokens": 3, "prompt_tokens_details": None}}
    return json.dumps(doc, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode()


def fails(impl, parser: str, raw: bytes, **kw) -> MalformedResponseError:
    with pytest.raises(MalformedResponseError) as info:
        getattr(impl, parser)(raw, **kw)
    return info.value


def test_packed_top_k_heads_on_completions(impl):
    choice = impl.parse_completions_response(completions_body(), top_k=2).choices[0]
    assert choice.completion_ids.tolist() == TOKENS
    assert choice.completion_logprobs.tolist() == [f32(row[0]) for row in VALUES]
    # Token 0: 5 and 9; token 1: the third place ties (0.05 twice), the top 2 are clear; token 2:
    # every other candidate at -inf, dropped as the sentinel is.
    assert choice.completion_top_ids.to_lists() == [[5, 9], [4, 6], [7]]
    assert choice.completion_top_logprobs.to_lists() == [
        [f32(math.log(0.5)), f32(math.log(0.25))], [f32(math.log(0.4)), f32(math.log(0.3))], [0.0]]


def test_packed_top_k_before_this_reader(impl):
    """The failure the block fixes: with top_k, the empty top_logprobs alone was all there was."""
    error = fails(impl, "parse_completions_response", completions_body(None), top_k=2)
    assert (error.field, error.reason) == ("logprobs.top_logprobs", "Missing requested top logprobs")


def test_packed_top_k_checked_without_a_head(impl):
    impl.parse_completions_response(completions_body())
    lps = np.array([row[1:] for row in VALUES], dtype="<f4")
    lps[2, 3] = np.nan
    block = {"num_positions": 3, "k": 5, "token_ids": b64([row[1:] for row in ROWS], "<i4"), "logprobs": b64(lps, "<f4")}
    error = fails(impl, "parse_completions_response", completions_body(block))
    assert (error.choice, error.field, error.token) == (0, "logprobs.top_k.logprobs", 2)


def test_packed_top_k_ids_from_tokens_alone(impl):
    """Without return_token_ids the ids are the "token_id:N" tokens the packed request requires."""
    choice = impl.parse_completions_response(completions_body(token_ids=False), top_k=1).choices[0]
    assert choice.completion_ids.tolist() == TOKENS and choice.completion_top_ids.to_lists() == [[5], [4], [7]]


def test_packed_top_k_empty_completion(impl):
    """vLLM's empty block: shape [0, k], empty base64 strings."""
    doc = json.loads(completions_body())
    lp = doc["choices"][0]["logprobs"]
    lp.update(text_offset=[], token_logprobs=[], tokens=[], top_k={"num_positions": 0, "k": 5, "token_ids": "",
                                                                    "logprobs": ""})
    doc["choices"][0]["token_ids"] = []
    doc["usage"]["completion_tokens"] = 0
    choice = impl.parse_completions_response(json.dumps(doc).encode(), top_k=2).choices[0]
    assert choice.completion_ids.tolist() == [] and choice.completion_top_ids.to_lists() == []


def _block(**change: Any) -> dict[str, Any]:
    ids = np.array([row[1:] for row in ROWS], dtype=np.int64)
    lps = np.array([row[1:] for row in VALUES], dtype=np.float64)
    for (row, col), value in change.pop("ids", {}).items():
        ids[row, col] = value
    for (row, col), value in change.pop("lps", {}).items():
        lps[row, col] = value
    block = {"num_positions": 3, "k": 5, "token_ids": b64(ids, "<i4"), "logprobs": b64(lps, "<f4")}
    block.update(change)
    return block


@pytest.mark.parametrize("block, field, token, reason", [
    ("x", "logprobs.top_k", None, "must be an object"),
    (_block(num_positions=2), "logprobs.top_k.num_positions", None, "completion token count (3)"),
    (_block(k=-1), "logprobs.top_k.k", None, "non-negative int"),
    (_block(k=4), "logprobs.top_k.token_ids", None, "base64 of 12 int32"),
    (_block(token_ids="AAAA="), "logprobs.top_k.token_ids", None, "base64 of 15 int32"),
    (_block(logprobs=b64(np.zeros(15), "<f8")), "logprobs.top_k.logprobs", None, "base64 of 15 float32"),
    (_block(ids={(1, 2): -1}), "logprobs.top_k.token_ids", 1, "nonnegative token id"),
    (_block(lps={(0, 4): 0.25}), "logprobs.top_k.logprobs", 0, "NaN or positive"),
    (_block(ids={(2, 4): 1}), "logprobs.top_k.token_ids", 2, "Duplicate top logprob token id"),
    # the sampled token's own candidate disagreeing with token_logprobs
    (_block(lps={(0, 0): math.log(0.4)}), "logprobs.top_k", 0, "Sampler head and sampled-token logprob disagree"),
])
def test_packed_top_k_refused_at_its_field(impl, block, field, token, reason):
    for top_k in (None, 2):
        if top_k is None and "disagree" in reason:
            continue  # a head rule: only with a head
        error = fails(impl, "parse_completions_response", completions_body(block), top_k=top_k)
        assert (error.choice, error.field, error.token) == (0, field, token), top_k
        assert reason in error.reason


def test_packed_top_k_too_few_candidates(impl):
    error = fails(impl, "parse_completions_response", completions_body(), top_k=4)
    assert error.field == "logprobs.top_k" and error.reason.startswith("Engine returned fewer top logprobs")


def test_packed_top_k_sampled_sentinel_refused(impl):
    """A sampled slot at -inf reaches token_logprobs as vLLM's -9999 clamp: no evidence."""
    sampled = [f32(VALUES[0][0]), -9999.0, 0.0]
    error = fails(impl, "parse_completions_response", completions_body(sampled=sampled))
    assert (error.field, error.token) == ("logprobs.token_logprobs", 1) and "-9999 sentinel" in error.reason


# --- SGLang's sglext.routed_experts --------------------------------------------------------------

LAYERS, TOPK = 3, 2
SGL_IDS = [11, 12, 13, 14]
SGL_PROMPT = 5


def sglang_chat(routing: Any = "default", *, n_rows: int | None = None, choices: int = 1, usage: bool = True,
                start: int = 0) -> bytes:
    """SGLang's chat response (``ChatCompletionResponse``: id, object, created, model, choices,
    usage, metadata, sglext; the choice's token_ids with ``return_token_ids``), serialized by
    orjson (compact) as SGLang's server does; ``sglext.routed_experts`` the first generation's
    ``meta_info.routed_experts``: base64 of the int32 routing of positions ``[start, prompt +
    completion - 1)``."""
    rows = SGL_PROMPT + len(SGL_IDS) - 1 - start if n_rows is None else n_rows
    if routing == "default":
        routing = b64((np.arange(rows * LAYERS * TOPK) % 8).reshape(rows, LAYERS, TOPK), "<i4")
    records = [{"token": f"t{i}", "bytes": [116], "logprob": -0.25 * (t + 1), "top_logprobs": []}
               for t, i in enumerate(SGL_IDS)]
    listed = [{"index": i, "message": {"role": "assistant", "content": "x", "reasoning_content": None,
                                       "tool_calls": None},
               "logprobs": {"content": records}, "finish_reason": "stop", "matched_stop": 2,
               "token_ids": list(SGL_IDS)} for i in range(choices)]
    doc: dict[str, Any] = {"id": "c1", "object": "chat.completion", "created": 1, "model": "m", "choices": listed}
    if usage:
        doc["usage"] = {"prompt_tokens": SGL_PROMPT, "total_tokens": SGL_PROMPT + 4 * choices,
                        "completion_tokens": 4 * choices, "prompt_tokens_details": None, "reasoning_tokens": 0}
    doc["metadata"] = {"weight_version": "default"}
    if routing is not None:
        doc["sglext"] = {"routed_experts": routing}
    return _json.dumps(doc)


def test_sglext_routing_is_the_first_choices(impl):
    response = impl.parse_chat_completions_response(sglang_chat())
    routed = response.choices[0].routed_experts
    assert routed.array.dtype == np.int32 and routed.array.shape == (SGL_PROMPT + 3, LAYERS * TOPK)
    assert routed.array.ravel().tolist() == (np.arange(8 * 6) % 8).tolist() and routed.start == 0
    assert response.payload["sglext"] == {}  # read: what is left of sglext stays
    shaped = impl.parse_chat_completions_response(sglang_chat(), routed_experts_shape=(LAYERS, TOPK))
    assert shaped.choices[0].routed_experts.array.shape == (8, LAYERS, TOPK)
    two = impl.parse_chat_completions_response(sglang_chat(choices=2))
    assert two.choices[0].routed_experts is not None and two.choices[1].routed_experts is None


def test_sglext_routing_from_a_start(impl):
    raw = sglang_chat(start=3)
    got = impl.parse_chat_completions_response(raw, routed_experts_start_len=3).choices[0].routed_experts
    assert got.array.shape == (5, LAYERS * TOPK) and got.start == 3
    error = fails(impl, "parse_chat_completions_response", raw)  # rows from 0: 8 due, 5 sent
    assert (error.choice, error.field) == (None, "sglext.routed_experts")
    assert "30 int32 values, which 8 rows cannot share evenly" in error.reason


def test_sglext_routing_without_the_prompts_length(impl):
    raw = sglang_chat(usage=False)
    error = fails(impl, "parse_chat_completions_response", raw)
    assert error.field == "sglext.routed_experts" and "pass routed_experts_shape" in error.reason
    got = impl.parse_chat_completions_response(raw, routed_experts_shape=(LAYERS, TOPK)).choices[0].routed_experts
    assert got.array.shape == (8, LAYERS, TOPK)


@pytest.mark.parametrize("routing, kw, reason", [
    (b64([1], "<i2") + "", {}, "holds 2 bytes, not whole int32 values"),
    (base64.b64encode(b"\x01\x02\x03\x04\x05\x06").decode(), {}, "holds 6 bytes, not whole int32 values"),
    ("AAAA=", {}, "Invalid sglext.routed_experts base64"),
    (7, {}, "must be a base64 string of int32 values"),
    (b64(np.zeros(7 * 6), "<i4"), {}, "which 8 rows cannot share evenly"),
    (b64(np.zeros(9 * 6), "<i4"), {"routed_experts_shape": (LAYERS, TOPK)}, "not rows of 3 layers x 2 for 8 rows"),
    (b64(np.full(8 * 6, -1), "<i4"), {}, "negative expert id"),
    (b64(np.full(8 * 6, 64), "<i4"), {"num_experts": 64}, "not below num_experts=64"),
    (b64(np.zeros(8 * 6), "<i4"), {"routed_experts_start_len": 9}, "routed_experts_start_len=9 is past the 8"),
])
def test_sglext_routing_refused_at_its_field(impl, routing, kw, reason):
    error = fails(impl, "parse_chat_completions_response", sglang_chat(routing), **kw)
    assert (error.choice, error.field) == (None, "sglext.routed_experts")
    assert reason in error.reason


def test_sglext_not_an_object(impl):
    doc = json.loads(sglang_chat())
    doc["sglext"] = ["x"]
    error = fails(impl, "parse_chat_completions_response", json.dumps(doc).encode())
    assert (error.field, error.reason) == ("sglext", "sglext must be an object")


def test_sglext_routing_beside_the_choices_own(impl):
    doc = json.loads(sglang_chat())
    rows = np.zeros((8, 1, 1), np.uint8)
    buffer = io.BytesIO()
    np.save(buffer, rows)
    doc["choices"][0]["routed_experts"] = base64.b64encode(buffer.getvalue()).decode()
    doc["prompt_token_ids"] = list(range(SGL_PROMPT))
    error = fails(impl, "parse_chat_completions_response", json.dumps(doc).encode())
    assert (error.choice, error.field) == (0, "routed_experts") and "one form only" in error.reason


# --- llama.cpp's records -------------------------------------------------------------------------

LLAMA_IDS = [9707, 11, 1879, 151645]
LLAMA_PROBS = [[0.5, 0.25, 0.125, 0.0625, 0.0], [0.75, 0.125, 0.0625, 0.0, 0.0],
               [0.25, 0.25, 0.125, 0.125, 0.0625], [1.0, 0.0, 0.0, 0.0, 0.0]]
LLAMA_CANDIDATES = [[9707, 13, 21, 4, 99], [11, 2, 3, 5, 7], [1879, 40, 41, 42, 43], [151645, 0, 1, 2, 3]]


def llama_log(p: float) -> float:
    """completion_token_output::logarithm: a float's log, the lowest float for 0, as a double."""
    return -FLT_MAX if p == 0.0 else float(np.log(np.float32(p)))


def llama_chat(records: Any = None, *, post_sampling: bool = False, sampled: Any = None) -> bytes:
    """llama.cpp's non-streaming chat body (``to_json_oaicompat_chat``): nlohmann::json objects,
    so every object's keys in sorted order, compact, UTF-8 kept; one choice, no token_ids; each
    record ``{bytes, id, logprob, token, top_logprobs}`` (``probs_vector_to_json``), or with
    ``post_sampling_probs`` ``{bytes, id, prob, token, top_probs}``."""
    if records is None:
        records = []
        for t, (token, probs, cands) in enumerate(zip(LLAMA_IDS, LLAMA_PROBS, LLAMA_CANDIDATES)):
            value = probs[0] if sampled is None else sampled[t]
            key, top = ("prob", "top_probs") if post_sampling else ("logprob", "top_logprobs")
            own = value if post_sampling else llama_log(value) if sampled is None else value
            top_list = [{"bytes": [104], "id": c, key: (p if post_sampling else llama_log(p)), "token": "h"}
                        for c, p in zip(cands, probs)]
            records.append({"bytes": [104], "id": token, key: own, "token": "h", top: top_list})
    doc = {"choices": [{"finish_reason": "stop", "index": 0, "logprobs": {"content": records},
                        "message": {"content": "Hello, world", "role": "assistant"}}],
           "created": 1, "id": "chatcmpl-x", "model": "m", "object": "chat.completion",
           "system_fingerprint": "b1-abc",
           "usage": {"completion_tokens": len(records), "completion_tokens_details": {"reasoning_tokens": 0},
                     "prompt_tokens": 6, "prompt_tokens_details": {"cached_tokens": 0}, "reasoning": 0,
                     "total_tokens": 6 + len(records)}}
    return json.dumps(doc, sort_keys=True, ensure_ascii=False, separators=(",", ":")).encode()


def test_llama_records_give_ids_and_heads(impl):
    raw = llama_chat()
    assert b"-3.4028234663852886e+38" in raw
    choice = impl.parse_chat_completions_response(raw, top_k=2).choices[0]
    assert choice.completion_ids.tolist() == LLAMA_IDS
    assert choice.completion_logprobs.tolist() == [llama_log(p[0]) for p in LLAMA_PROBS]
    # Token 1: 0.0 candidates (-FLT_MAX) are filtered out as the sentinel is; token 2: a tie at the
    # first place takes both (k = 2); token 3: only the sampled id had any probability.
    assert choice.completion_top_ids.to_lists() == [[9707, 13], [11, 2], [40, 1879], [151645]]  # ties: by id


def test_llama_sampled_log_zero_is_no_evidence(impl):
    raw = llama_chat(sampled=[llama_log(0.5), -FLT_MAX, llama_log(0.25), 0.0])
    for top_k in (None, 2):
        error = fails(impl, "parse_chat_completions_response", raw, top_k=top_k)
        assert (error.choice, error.field, error.token) == (0, "logprobs.content", 1)
        assert "lowest float, which llama.cpp's server writes for log(0)" in error.reason


def test_llama_post_sampling_probs_refused(impl):
    raw = llama_chat(post_sampling=True)
    for top_k in (None, 2):
        error = fails(impl, "parse_chat_completions_response", raw, top_k=top_k)
        assert (error.choice, error.field, error.token) == (0, "logprobs.content", 0)
        assert "post_sampling_probs" in error.reason and "probabilities" in error.reason


def test_llama_record_ids_checked(impl):
    records = json.loads(llama_chat())["choices"][0]["logprobs"]["content"]
    bad = copy.deepcopy(records)
    bad[2]["id"] = -5
    error = fails(impl, "parse_chat_completions_response", llama_chat(bad))
    assert (error.field, error.token) == ("logprobs.content", 2) and "names no token id" in error.reason
    bad = copy.deepcopy(records)
    bad[1]["top_logprobs"][3]["id"] = "5"
    error = fails(impl, "parse_chat_completions_response", llama_chat(bad), top_k=2)
    assert (error.field, error.token) == ("logprobs.content", 1)
    # token_id wins over id where both are sent (a record of another server naming both)
    both = copy.deepcopy(records)
    for record in both:
        record["token_id"] = record["id"]
        record["id"] = 0
    assert impl.parse_chat_completions_response(llama_chat(both)).choices[0].completion_ids.tolist() == LLAMA_IDS


# --- the peers on changed documents ---------------------------------------------------------------

_ODD = [None, "x", [], {}, -1, 2**32, 1.5, True, -9999.0, -FLT_MAX, 0.5, [1, 2], "AAAA", "AAAAAAAA"]
_PARSERS = {"completions": "parse_completions_response", "chat": "parse_chat_completions_response"}


def _outcome(parser: Any, raw: bytes, **kw: Any) -> Any:
    try:
        r = parser(raw, **kw)
    except MalformedResponseError as exc:
        return ("error", exc.choice, exc.field, exc.token, exc.reason)
    out = []
    for c in r.choices:
        heads = None if c.completion_top_ids is None else (c.completion_top_ids.to_lists(),
                                                           c.completion_top_logprobs.to_lists())
        routed = None if c.routed_experts is None else (c.routed_experts.array.tolist(), c.routed_experts.start)
        out.append((c.completion_ids.tolist(), None if c.completion_logprobs is None else
                    c.completion_logprobs.tolist(), heads, routed, repr(sorted(c.raw))))
    return ("ok", out, json.dumps(r.payload, sort_keys=True, default=repr))


def _change(draw: Any, target: Any, keys: list[str]) -> None:
    """One fault somewhere in ``target`` (an object): a value replaced, or an element replaced or dropped."""
    key = draw(st.sampled_from(keys))
    fault_at(draw, target, key, copy.deepcopy(draw(st.sampled_from(_ODD))))


@st.composite
def changed_documents(draw):
    form = draw(st.sampled_from(["top_k", "sglext", "llama"]))
    if form == "top_k":
        doc = json.loads(completions_body())
        logprobs = doc["choices"][0]["logprobs"]
        for _ in range(draw(st.integers(0, 3))):
            where = draw(st.sampled_from(["logprobs", "top_k"]))
            target = logprobs if where == "logprobs" else logprobs.get("top_k")
            if isinstance(target, dict):
                _change(draw, target, ["token_logprobs", "tokens", "top_logprobs", "top_k"] if where == "logprobs"
                        else ["num_positions", "k", "token_ids", "logprobs"])
        return "completions", doc
    if form == "sglext":
        meta = draw(st.booleans())  # the routing in sglext, or in the choice's meta_info (return_meta_info)
        doc = json.loads(sglang_meta_chat() if meta else sglang_chat(choices=draw(st.sampled_from([1, 2]))))
        for _ in range(draw(st.integers(0, 3))):
            target = draw(st.sampled_from([doc, doc["usage"], doc.get("sglext"), doc["choices"][0].get("meta_info")]))
            if isinstance(target, dict):
                _change(draw, target, ["sglext", "usage"] if target is doc else ["routed_experts", "prompt_tokens"])
        return "chat", doc
    doc = json.loads(llama_chat(post_sampling=draw(st.booleans())))
    content = doc["choices"][0]["logprobs"]["content"]
    for _ in range(draw(st.integers(0, 3))):
        record = content[draw(st.integers(0, len(content) - 1))]
        if draw(st.booleans()):
            _change(draw, record, ["id", "logprob", "prob", "token_id", "top_logprobs"])
        else:
            # a candidate still an object (an earlier change may have put another value in its place)
            tops = record.get("top_logprobs") or record.get("top_probs")
            tops = [top for top in tops if isinstance(top, dict)] if isinstance(tops, list) else []
            if tops:
                _change(draw, tops[draw(st.integers(0, len(tops) - 1))], ["id", "logprob", "prob"])
    return "chat", doc


@pytest.mark.skipif(_core is None, reason="the compiled core is not built")
@settings(max_examples=300, deadline=None)
@given(case=changed_documents(), k=st.sampled_from([None, None, 1, 2]),
       shape=st.sampled_from([None, (LAYERS, TOPK)]))
def test_core_matches_reference_on_changed_documents(case, k, shape):
    """The outcome (ids, logprobs, heads, routing, payload, or the error and where) and the
    evidence both extractors read are the same on each form with faults anywhere."""
    endpoint, doc = case
    raw = json.dumps(doc).encode()
    kw = {"top_k": k, "routed_experts_shape": shape}
    expected = _outcome(getattr(openai_rules, _PARSERS[endpoint]), raw, **kw)
    for path in _core.simd_paths():
        with _core.simd_path_forced(path):
            assert _outcome(getattr(_core, _PARSERS[endpoint]), raw, **kw) == expected, path
            assert_openai_peers(raw, k, False)


@pytest.mark.parametrize("spelling", ["spaces", "escaped", "reordered"])
def test_any_spelling_of_the_same_documents(impl, spelling):
    """Whitespace, escapes (\\/ in base64, \\u0069d for id) and key order change nothing."""
    for parser, raw, kw in [("parse_completions_response", completions_body(), {"top_k": 2}),
                            ("parse_chat_completions_response", sglang_chat(), {}),
                            ("parse_chat_completions_response", llama_chat(), {"top_k": 2})]:
        want = _outcome(getattr(impl, parser), raw, **kw)
        doc = json.loads(raw)
        if spelling == "spaces":
            text = json.dumps(doc, indent=2)
        elif spelling == "reordered":
            text = json.dumps(json.loads(json.dumps(doc), object_pairs_hook=lambda pairs: dict(reversed(pairs))))
        else:
            text = json.dumps(doc).replace("/", "\\/").replace('"id":', '"\\u0069d":')
        assert _outcome(getattr(impl, parser), text.encode(), **kw) == want, parser


def test_id_names_a_generate_record_too(impl):
    """One id rule for every record reader: the generate endpoint's records (read during the scan,
    which leaves a record named by "id" alone to the reading after it) take "id" as well."""
    records = [{"id": 7, "logprob": -0.5, "top_logprobs": [{"id": 7, "logprob": -0.5}, {"id": 3, "logprob": -1.5},
                                                          {"id": 4, "logprob": -2.5}]},
               {"id": 8, "token": "token_id:9", "logprob": -0.25,
                "top_logprobs": [{"id": 8, "logprob": -0.25}, {"id": 5, "logprob": -2.0}, {"id": 6, "logprob": -3.0}]}]
    raw = json.dumps({"choices": [{"index": 0, "token_ids": [7, 8], "logprobs": {"content": records}}]}).encode()
    choice = impl.parse_generate_response(raw, top_k=1).choices[0]
    assert choice.completion_logprobs.tolist() == [-0.5, -0.25] and choice.completion_top_ids.to_lists() == [[7], [8]]
    records[1]["id"] = 9
    error = fails(impl, "parse_generate_response", json.dumps({"choices": [{"token_ids": [7, 8], "logprobs": {
        "content": records}}]}).encode())
    assert (error.field, error.token) == ("logprobs.content", 1)


def test_audit_classes():
    """``tokenwire check`` sorts the new refusals: a malformed packed block is a packed-field
    defect, llama.cpp's probabilities and log(0) are logprob defects."""
    import tokenwire

    bad_block = completions_body(_block(k=4))
    assert tokenwire.audit(bad_block, "completions").defect == "malformed_packed"
    assert tokenwire.audit(completions_body("x"), "completions").defect == "malformed_packed"
    assert tokenwire.audit(llama_chat(post_sampling=True), "chat").defect == "bad_logprob"
    log_zero = llama_chat(sampled=[llama_log(0.5), -FLT_MAX, llama_log(0.25), 0.0])
    assert tokenwire.audit(log_zero, "chat").defect == "bad_logprob"
    assert tokenwire.audit(llama_chat(), "auto").valid
    assert tokenwire.audit(sglang_chat(), "chat", routed_experts_shape=(LAYERS, TOPK)).valid


def sglang_meta_chat(routing: Any = "default", prompt_tokens: Any = SGL_PROMPT) -> bytes:
    """SGLang's chat with ``return_meta_info`` and ``return_routed_experts``: the choice carries the
    /generate item's ``meta_info`` (``ret_item["meta_info"]``), its routing there and none in
    ``sglext``."""
    doc = json.loads(sglang_chat(None))
    rows = SGL_PROMPT + len(SGL_IDS) - 1
    if routing == "default":
        routing = b64((np.arange(rows * LAYERS * TOPK) % 8).reshape(rows, LAYERS, TOPK), "<i4")
    doc["choices"][0]["meta_info"] = {"id": "c1", "finish_reason": {"type": "stop", "matched": 2},
                                      "prompt_tokens": prompt_tokens, "weight_version": "default",
                                      "completion_tokens": len(SGL_IDS), "cached_tokens": 0,
                                      "routed_experts": routing, "e2e_latency": 0.1}
    return _json.dumps(doc)


def test_meta_info_routing_on_a_chat_choice(impl):
    choice = impl.parse_chat_completions_response(sglang_meta_chat(), routed_experts_shape=(LAYERS, TOPK)).choices[0]
    assert choice.routed_experts.array.shape == (8, LAYERS, TOPK) and choice.routed_experts.start == 0
    assert "routed_experts" not in choice.raw["meta_info"] and choice.raw["meta_info"]["prompt_tokens"] == SGL_PROMPT
    error = fails(impl, "parse_chat_completions_response", sglang_meta_chat(b64(np.zeros(7 * 6), "<i4")))
    assert (error.choice, error.field) == (0, "meta_info.routed_experts") and "8 rows cannot share evenly" in error.reason
    error = fails(impl, "parse_chat_completions_response", sglang_meta_chat(prompt_tokens="5"))
    assert (error.choice, error.field) == (0, "meta_info.prompt_tokens")
    error = fails(impl, "parse_chat_completions_response", sglang_meta_chat("AAA"))
    assert (error.choice, error.field) == (0, "meta_info.routed_experts") and "base64" in error.reason
    doc = json.loads(sglang_meta_chat())
    doc["sglext"] = {"routed_experts": doc["choices"][0]["meta_info"]["routed_experts"]}
    error = fails(impl, "parse_chat_completions_response", json.dumps(doc).encode())
    assert (error.choice, error.field) == (0, "meta_info.routed_experts") and "one form only" in error.reason


def test_sglext_routing_on_completions(impl):
    """SGLang's CompletionResponse carries the same sglext; its choices send their prompt ids with
    return_token_ids, which count the rows (usage too, for one prompt)."""
    rows = SGL_PROMPT + len(SGL_IDS) - 1
    doc = {"id": "c1", "object": "text_completion", "created": 1, "model": "m",
           "choices": [{"index": 0, "text": "abcd",
                        "logprobs": {"text_offset": [0, 1, 2, 3], "token_logprobs": [-0.5, -0.25, -0.125, -1.0],
                                     "tokens": ["a", "b", "c", "d"], "top_logprobs": []},
                        "finish_reason": "length", "matched_stop": None, "token_ids": list(SGL_IDS),
                        "prompt_token_ids": list(range(SGL_PROMPT))}],
           "usage": {"prompt_tokens": SGL_PROMPT, "total_tokens": 9, "completion_tokens": 4},
           "sglext": {"routed_experts": b64(np.arange(rows * 6) % 8, "<i4")}}
    routed = impl.parse_completions_response(_json.dumps(doc)).choices[0].routed_experts
    assert routed.array.shape == (rows, 6)
    doc["choices"][0]["prompt_token_ids"] = list(range(SGL_PROMPT + 1))  # one more prompt token: 9 rows due
    error = fails(impl, "parse_completions_response", _json.dumps(doc))
    assert error.field == "sglext.routed_experts" and "which 9 rows cannot share evenly" in error.reason
