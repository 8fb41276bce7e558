"""Exact token ids and logprobs from OpenAI-compatible (vLLM, Fireworks, Together) and SGLang
responses: round trips for every shape and spelling, and every cross-check on every shape (the
compiled core against the reference on mutated documents: tests/test_openai_mutated.py)."""

from __future__ import annotations

import copy
import json
import math
import pickle
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tokenwire import MalformedResponseError
from tokenwire.extract.python import Evidence
from tokenwire.rules import openai as openai_rules
from tokenwire.rules import sources as sources_rules

from .conftest import _core
from .openai_strategies import (
    BY_NAME,
    CHAT,
    FORMATS,
    PARSERS,
    SGL,
    SPELLINGS,
    C,
    Format,
    add_engine_data,
    evidence,
    evidences,
    fireworks_content,
    sglang,
    spell,
    tid,
    vllm_chat,
    vllm_completions,
    with_head,
)

FORMAT_IDS = [f.name for f in FORMATS]


@pytest.fixture(autouse=True, params=["python", "c"])
def implementation(request):
    """Every test runs on the pure-Python parsers and on the compiled core's."""
    if request.param == "c":
        if _core is None:
            pytest.skip("the compiled core is not built")
        PARSERS.module = _core
    yield request.param
    PARSERS.module = openai_rules
HEAD_FORMATS = [f for f in FORMATS if f.heads in ("ids", "dict-ids")]


def dumps(doc) -> bytes:
    return json.dumps(doc).encode()


def base(fmt: Format, n: int = 4):
    ev = evidence(list(range(100, 100 + n)), [-0.5 - t / 10 for t in range(n)])
    return fmt.build([ev]), ev


def raises(fmt: Format, doc, match: str, **kw) -> MalformedResponseError:
    raw = doc if isinstance(doc, bytes) else dumps(doc)
    with pytest.raises(MalformedResponseError, match=match) as info:
        fmt.parse(raw, **kw)
    return info.value


# --- the seed: Fireworks /v1/completions without exact ids -------------------------------------

# A natural stop on the EOS: 7 sampled tokens, the last one decoding to nothing. Without
# `return_token_ids` the choice has no ids; re-encoding "…Four" yields 6 ids, the +1 shift.
SEED_LOGPROBS = [-0.11, -0.52, -0.03, -1.2, -0.4, -0.07, -0.001]
SEED_IDS = [785, 4226, 311, 279, 3405, 13322, 151643]


def seed_response(with_ids: bool) -> dict:
    choice = {
        "index": 0, "text": " The answer is Four", "finish_reason": "stop",
        "logprobs": {"tokens": [" The", " answer", " is", " F", "our", "", ""],
                     "token_logprobs": SEED_LOGPROBS, "top_logprobs": None,
                     "text_offset": [0, 4, 11, 14, 16, 19, 19]},
    }
    if with_ids:
        choice["token_ids"] = SEED_IDS
        choice["prompt_token_ids"] = [1, 2, 3]
    return {"id": "cmpl-7", "object": "text_completion", "choices": [choice],
            "usage": {"prompt_tokens": 3, "completion_tokens": 7, "total_tokens": 10}}


def test_seed_without_exact_ids_raises_and_names_the_flag():
    err = raises(BY_NAME["vllm_completions"], seed_response(False), "no exact completion token ids")
    assert err.choice == 0
    assert "return_token_ids: true" in str(err) and "return_tokens_as_token_ids" in str(err)
    assert "raw_output: true" in str(err) and "its 7 logprobs" in str(err)


def test_seed_ids_shorter_than_logprobs_is_the_plus_one():
    doc = seed_response(True)
    doc["choices"][0]["token_ids"] = SEED_IDS[:-1]  # what re-encoding the text gives
    err = raises(BY_NAME["vllm_completions"], doc, r"completion has 6 token ids but 7 logprobs \(\+1\)")
    assert (err.choice, err.field) == (0, "token_ids")


def test_seed_with_exact_ids_gives_aligned_arrays():
    r = C(dumps(seed_response(True)))
    (c,) = r.choices
    assert c.completion_ids.dtype == np.int64 and c.completion_ids.tolist() == SEED_IDS
    assert c.completion_logprobs.dtype == np.float64 and c.completion_logprobs.tolist() == SEED_LOGPROBS
    assert len(c.completion_ids) == len(c.completion_logprobs)
    assert c.finish_reason == "stop" and r.request_id == "cmpl-7"
    assert r.prompt_token_ids.tolist() == [1, 2, 3]


def test_explicit_false_is_honoured_then_parsing_fails_loudly():
    params = openai_rules.completions_request_params({"model": "m", "prompt": [1, 2, 3], "return_token_ids": False})
    assert params["return_token_ids"] is False and params["logprobs"] == 1
    # The server honours the flag: no ids come back, and the parser refuses the response.
    raises(BY_NAME["vllm_completions"], seed_response(False), "return_token_ids: true")


# --- request helpers -----------------------------------------------------------------------------


def test_request_helpers_set_defaults_only():
    given_params = {"model": "m"}
    out = openai_rules.completions_request_params(given_params)
    assert out == {"model": "m", "return_token_ids": True, "logprobs": 1} and given_params == {"model": "m"}
    assert openai_rules.completions_request_params({}, top_k=4) == {
        "return_token_ids": True, "logprobs": 6, "return_tokens_as_token_ids": True}
    assert openai_rules.completions_request_params({"logprobs": 0, "return_tokens_as_token_ids": False}, top_k=2) == {
        "return_token_ids": True, "logprobs": 0, "return_tokens_as_token_ids": False}
    assert openai_rules.chat_completions_request_params({}) == {"return_token_ids": True, "logprobs": True}
    assert openai_rules.chat_completions_request_params({"logprobs": False}, top_k=3) == {
        "return_token_ids": True, "logprobs": False, "top_logprobs": 5, "return_tokens_as_token_ids": True}
    assert openai_rules.sglang_generate_request_params({"text": "x"}) == {"text": "x", "return_logprob": True}
    assert openai_rules.sglang_generate_request_params({"return_logprob": False}, top_k=1) == {
        "return_logprob": False, "top_logprobs_num": 3}
    with pytest.raises(ValueError):
        openai_rules.completions_request_params({}, top_k=0)
    with pytest.raises(TypeError):
        openai_rules.chat_completions_request_params([("logprobs", True)])  # type: ignore[arg-type]


@pytest.mark.parametrize("helper", [openai_rules.completions_request_params,
                                    openai_rules.chat_completions_request_params])
@pytest.mark.parametrize("chosen", [[13, 42], []])
def test_request_helpers_refuse_chosen_candidates_with_a_head(helper, chosen):
    """vLLM's logprob_token_ids replaces the natural top-k candidates: the response would look
    like a top-k response, and a head built from it would be the caller's ids, not the top."""
    given_params = {"model": "m", "logprob_token_ids": chosen}
    with pytest.raises(ValueError, match="logprob_token_ids cannot be combined with top_k") as info:
        helper(given_params, top_k=2)
    assert "not the sampler's" in str(info.value)
    # Without a head the caller's ids are scored as asked, and None is no choice at all.
    assert helper(given_params)["logprob_token_ids"] == chosen
    assert helper({"logprob_token_ids": None}, top_k=2)["return_tokens_as_token_ids"] is True


# --- round trips ---------------------------------------------------------------------------------


def check_choice(fmt: Format, choice, ev) -> None:
    assert choice.completion_ids.dtype == np.int64 and choice.completion_ids.tolist() == ev.ids
    assert choice.completion_logprobs.dtype == np.float64
    assert choice.completion_logprobs.tolist() == ev.values  # bit-exact, `sampling_logprob` on Fireworks
    if not fmt.name.startswith("sglang"):
        return
    if ev.mask is None:
        assert choice.sampling_mask is None and choice.sampling_logprobs is None
    else:
        assert choice.sampling_mask.values.dtype == np.int32 and choice.sampling_mask.to_lists() == ev.mask
        assert choice.sampling_logprobs.dtype == np.float64 and choice.sampling_logprobs.tolist() == ev.sampling
    if ev.prompt_top is None:
        assert choice.prompt_top_ids is None and choice.prompt_top_logprobs is None
    else:
        rows = [[]] * ev.prompt_prefix + ev.prompt_top
        assert choice.prompt_top_ids.values.dtype == np.int64
        assert choice.prompt_top_logprobs.values.dtype == (np.float32 if ev.prompt_b64 else np.float64)
        assert choice.prompt_top_ids.to_lists() == [[i for i, _ in row] for row in rows]
        assert choice.prompt_top_logprobs.to_lists() == [[v for _, v in row] for row in rows]


@pytest.mark.parametrize("fmt", FORMATS, ids=FORMAT_IDS)
@settings(max_examples=25, deadline=None)
@given(evs=st.lists(evidences(), min_size=1, max_size=3), spelling=st.sampled_from(SPELLINGS), engine=st.booleans())
def test_round_trip(fmt, evs, spelling, engine):
    doc = fmt.build(evs)
    if engine and len(evs) == 1 and not fmt.name.startswith("sglang"):
        add_engine_data(doc, evs)  # NVIDIA Dynamo's engine data, agreeing with the choice
    r = fmt.parse(spell(doc, spelling))
    assert len(r.choices) == len(evs)
    for i, (choice, ev) in enumerate(zip(r.choices, evs)):
        assert choice.index == i and choice.completion_top_ids is None
        check_choice(fmt, choice, ev)


@pytest.mark.parametrize("fmt", HEAD_FORMATS, ids=[f.name for f in HEAD_FORMATS])
@settings(max_examples=20, deadline=None)
@given(data=st.data(), k=st.integers(1, 4), spelling=st.sampled_from(SPELLINGS))
def test_round_trip_with_heads(fmt, data, k, spelling):
    evs = data.draw(st.lists(evidences(max_tokens=6, k=k), min_size=1, max_size=2))
    r = fmt.parse(spell(fmt.build(evs), spelling), top_k=k)
    for choice, ev in zip(r.choices, evs):
        check_choice(fmt, choice, ev)
        assert choice.completion_top_ids.values.dtype == np.int64
        assert choice.completion_top_logprobs.values.dtype == np.float64
        assert choice.completion_top_ids.to_lists() == ev.head_ids
        assert choice.completion_top_logprobs.to_lists() == ev.head_logprobs


@pytest.mark.parametrize("fmt", FORMATS, ids=FORMAT_IDS)
def test_without_logprobs_when_not_required(fmt):
    doc, ev = base(fmt)
    for choice in fmt.choices(doc):
        if fmt.name.startswith("sglang"):
            choice["meta_info"].pop("output_token_logprobs")
        else:
            choice["logprobs"] = None
            choice.get("raw_output", {}).pop("completion_logprobs", None)
    if not fmt.name.startswith("together"):
        r = fmt.parse(dumps(doc), require_logprobs=False)
        assert r.choices[0].completion_ids.tolist() == ev.ids and r.choices[0].completion_logprobs is None
    else:  # Together's only ids are in its logprobs
        raises(fmt, doc, "no exact completion token ids", require_logprobs=False)
    err = raises(fmt, doc, "no (exact completion token ids and no )?logprobs")
    assert ("return_logprob: true" if fmt.name.startswith("sglang") else "logprobs") in str(err)


# --- every cross-check on every shape ------------------------------------------------------------


@pytest.mark.parametrize("fmt", FORMATS, ids=FORMAT_IDS)
def test_missing_exact_ids_names_the_request_flag(fmt):
    doc, _ = base(fmt)
    fmt.strip_ids(fmt.choices(doc)[0])
    err = raises(fmt, doc, "no exact completion token ids")
    flag = "return_logprob: true" if fmt.name.startswith("sglang") else "return_token_ids: true"
    assert flag in str(err) and err.choice == 0


@pytest.mark.parametrize("fmt", FORMATS, ids=FORMAT_IDS)
@pytest.mark.parametrize("delta", [-1, 1])
def test_ids_and_logprobs_of_different_lengths(fmt, delta):
    doc, ev = base(fmt)
    ids = fmt.second_ids(fmt.choices(doc)[0])
    if delta < 0:
        ids.pop()
    else:
        ids.append(5)
    n = len(ev.ids)
    err = raises(fmt, doc, rf"completion has {n + delta} token ids but {n} logprobs \({re.escape(f'{-delta:+d}')}\)")
    assert err.choice == 0


TWO_SOURCES = [f for f in FORMATS if not f.one_source]


@pytest.mark.parametrize("fmt", TWO_SOURCES, ids=[f.name for f in TWO_SOURCES])
def test_id_sources_that_disagree(fmt):
    doc, ev = base(fmt)
    fmt.second_ids(fmt.choices(doc)[0])[2] = 99
    err = raises(fmt, doc, "token id sources disagree at token 2")
    assert err.token == 2 and "99" in str(err) and str(ev.ids[2]) in str(err)


@pytest.mark.parametrize("fmt", [f for f in FORMATS if f.set_record_id], ids=[f.name for f in FORMATS if f.set_record_id])
def test_record_ids_that_disagree_with_token_ids(fmt):
    doc, _ = base(fmt)
    fmt.set_record_id(fmt.choices(doc)[0], 1, 77)
    err = raises(fmt, doc, "token id sources disagree at token 1")
    assert err.token == 1


@pytest.mark.parametrize("fmt", [f for f in FORMATS if f.set_record_id], ids=[f.name for f in FORMATS if f.set_record_id])
def test_a_record_without_an_id_among_records_with_ids(fmt):
    doc, _ = base(fmt)
    bad = None if fmt.name.startswith("sglang") or "fireworks" in fmt.name else "plain text"
    fmt.set_record_id(fmt.choices(doc)[0], 3, bad)
    err = raises(fmt, doc, "(names no token id|is not \"token_id:N\"|token id must be in)")
    assert err.token == 3


def test_id_sources_disagree_in_length_without_logprobs():
    doc, _ = base(BY_NAME["fireworks_completions_content"])
    choice = doc["choices"][0]
    choice["logprobs"] = None
    del choice["raw_output"]["completion_logprobs"]
    choice["token_ids"] = choice["raw_output"]["completion_token_ids"][:-1]
    err = raises(BY_NAME["fireworks_completions_content"], doc, r"disagree in length: token_ids has 3 ids, "
                 r"raw_output.completion_token_ids has 4 \(\+1\)", require_logprobs=False)
    assert err.field == "raw_output.completion_token_ids"


def test_three_sources_token_ids_token_strings_raw_output():
    ev = evidence([5, 6, 7], [-1.0, -2.0, -3.0])
    doc = vllm_completions([ev], True)
    doc["choices"][0]["raw_output"] = {"completion_token_ids": [5, 6, 7]}
    assert C(dumps(doc)).choices[0].completion_ids.tolist() == [5, 6, 7]
    for path, expect in (("token_ids", "logprobs.tokens has 5, token_ids has 8"),
                         ("raw_output", "logprobs.tokens has 5, raw_output.completion_token_ids has 8")):
        broken = copy.deepcopy(doc)
        target = broken["choices"][0][path]
        (target if path == "token_ids" else target["completion_token_ids"])[0] = 8
        raises(BY_NAME["vllm_completions"], broken, expect)


@pytest.mark.parametrize("fmt", FORMATS, ids=FORMAT_IDS)
@pytest.mark.parametrize("delta", [-1, 1])
def test_usage_that_disagrees(fmt, delta):
    doc, ev = base(fmt)
    fmt.set_usage(doc, len(ev.ids) + delta)
    err = raises(fmt, doc, rf"completion_tokens is {len(ev.ids) + delta} but the completion has {len(ev.ids)} token ids \({re.escape(f'{delta:+d}')}\)")
    assert err.field.endswith("completion_tokens")
    fmt.parse(dumps(doc), check_usage=False)


@pytest.mark.parametrize("fmt", FORMATS, ids=FORMAT_IDS)
def test_usage_not_an_int(fmt):
    doc, _ = base(fmt)
    fmt.set_usage(doc, "4")
    raises(fmt, doc, "completion_tokens must be a non-negative int")


def test_usage_of_several_choices_is_not_attributed():
    evs = [evidence([1, 2], [-1.0, -1.0]), evidence([3], [-1.0])]
    doc = vllm_completions(evs, False)
    doc["usage"]["completion_tokens"] = 2  # counts both choices together: not comparable per choice
    assert len(C(dumps(doc)).choices) == 2
    items = sglang(evs, True)
    items[1]["meta_info"]["completion_tokens"] = 2  # SGLang counts per item: attributable
    err = raises(BY_NAME["sglang"], items, "completion_tokens is 2 but the completion has 1")
    assert err.choice == 1


BAD_VALUES = [
    (None, "is null: the token carries no sampling evidence"),
    (-9999.0, "is the -9999 sentinel"),
    (-9999, "is the -9999 sentinel"),
    (0.5, "cannot be positive"),
    ("-0.5", "must be a number, not str"),
    (True, "must be a number, not bool"),
    ([-0.5], "must be a number, not list"),
]


@pytest.mark.parametrize("fmt", FORMATS, ids=FORMAT_IDS)
@pytest.mark.parametrize(("value", "message"), BAD_VALUES, ids=[m.split()[-1] + repr(v) for v, m in BAD_VALUES])
def test_logprobs_that_are_not_evidence(fmt, value, message):
    doc, _ = base(fmt)
    fmt.set_value(fmt.choices(doc)[0], 2, value)
    err = raises(fmt, doc, message)
    assert (err.choice, err.token) == (0, 2)
    assert ("sampling_logprob" if fmt.sampling else "logprob") in err.reason


@pytest.mark.parametrize("fmt", FORMATS, ids=FORMAT_IDS)
@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity", "1e999", "-1e400"])
def test_non_finite_logprobs_are_rejected(fmt, literal):
    doc, _ = base(fmt)
    fmt.set_value(fmt.choices(doc)[0], 1, 0.123456789)
    raw = dumps(doc).replace(b"0.123456789", literal.encode())
    raises(fmt, raw, "invalid JSON")


def test_first_bad_logprob_wins():
    doc, _ = base(BY_NAME["vllm_completions"])
    values = doc["choices"][0]["logprobs"]["token_logprobs"]
    values[3], values[1] = None, -9999.0
    assert raises(BY_NAME["vllm_completions"], doc, "sentinel").token == 1
    values[3], values[1] = -9999.0, None
    assert raises(BY_NAME["vllm_completions"], doc, "null").token == 1


def test_non_finite_values_from_the_evidence_are_rejected():
    c = Evidence(0)
    lp = sources_rules.Logprobs("logprobs.token_logprobs", 2, np.array([-1.0, math.inf]), None, [-1.0, math.inf], "logprob")
    with pytest.raises(MalformedResponseError, match="logprob must be finite") as info:
        sources_rules.check_values(c, lp)
    assert info.value.token == 1


@pytest.mark.parametrize("fmt", [f for f in FORMATS if f.heads != "none"], ids=[f.name for f in FORMATS if f.heads != "none"])
def test_heads_only_from_candidates_named_by_id(fmt):
    ev = with_head(evidence([10, 20, 30], [-1.0] * 3), 2, [[5, 4, 3, 2]] * 3)
    doc = fmt.build([ev])
    if fmt.heads in ("ids", "dict-ids"):
        fmt.text_heads(fmt.choices(doc)[0])
    if fmt.name.startswith("sglang"):
        err = raises(fmt, doc, r"Top logprob must be \[logprob, token_id, text\]", top_k=2)
    else:
        err = raises(fmt, doc, "decoded text, not token ids: unusable for a head", top_k=2)
        assert "return_tokens_as_token_ids: true" in str(err)
    assert (err.choice, err.token) == (0, 0)
    fmt.parse(dumps(doc))  # without a head the same response is fine


@pytest.mark.parametrize("fmt", [f for f in FORMATS if f.heads.startswith("dict")], ids=[f.name for f in FORMATS if f.heads.startswith("dict")])
def test_colliding_keys_are_never_merged(fmt):
    ev = with_head(evidence([10, 20], [-1.0] * 2), 1, [[5, 4, 3]] * 2)
    doc = fmt.build([ev])
    rows = fmt.choices(doc)[0]["logprobs"]["top_logprobs"]
    keys = list(rows[1])
    raw = dumps(doc).replace(json.dumps(keys[2]).encode(), json.dumps(keys[1]).encode())
    assert raw.count(json.dumps(keys[1]).encode()) >= 2
    err = raises(fmt, raw, f"repeats the key {keys[1]!r}: candidates sent under one key are never merged", top_k=1)
    assert err.token == 1
    fmt.parse(raw)  # heads are not read without top_k


@pytest.mark.parametrize("fmt", HEAD_FORMATS, ids=[f.name for f in HEAD_FORMATS])
def test_head_rules_are_the_generate_endpoints(fmt):
    ev = with_head(evidence([10, 20], [-1.0] * 2), 2, [[5, 4, 3, 2]] * 2)
    r = fmt.parse(dumps(fmt.build([ev])), top_k=2)
    assert r.choices[0].completion_top_ids.to_lists() == [[10, 11], [20, 21]]
    # k + 2 candidates are required, as for /inference/v1/generate.
    raises(fmt, fmt.build([ev]), "fewer top logprobs than requested", top_k=3)


def test_head_checked_against_the_candidates_own_distribution():
    # Fireworks: candidates and `logprob` are the model's; `sampling_logprob` is the sampler's.
    ev = with_head(evidence([10, 20], [-1.0] * 2), 2, [[5, 4, 3, 2]] * 2)
    doc = fireworks_content([ev], chat=True)
    for entry in doc["choices"][0]["logprobs"]["content"]:
        entry["sampling_logprob"] = -3.5
    r = CHAT(dumps(doc), top_k=2)
    assert r.choices[0].completion_logprobs.tolist() == [-3.5, -3.5]
    doc["choices"][0]["logprobs"]["content"][1]["logprob"] = -3.5
    raises(BY_NAME["fireworks_chat_content"], doc, "Sampler head and sampled-token logprob disagree", top_k=2)


@pytest.mark.parametrize(
    ("fault", "reason"),
    [
        (lambda row: row.__setitem__(1, 7), "Top logprob must be an object"),
        (lambda row: row[1].update(token="w", token_id=None), "decoded text, not token ids"),
        (lambda row: row[1].update(logprob=None), "Top logprob must be finite"),
        (lambda row: row[1].update(logprob=0.5), "Top logprob cannot be positive"),
        (lambda row: row.append(dict(row[0])), "Duplicate top logprob token id"),
        # Candidate by candidate: the first candidate's fault, whichever rule it breaks.
        (lambda row: (row[0].update(logprob="x"), row.__setitem__(2, None)), "Top logprob must be finite"),
        (lambda row: (row[0].update(logprob=1.0), row.__setitem__(1, [])), "Top logprob cannot be positive"),
    ],
    ids=["not-object", "no-id", "not-finite", "positive", "duplicate", "order-finite", "order-positive"],
)
@pytest.mark.parametrize("name", ["vllm_chat_token_strings", "fireworks_chat_content"])
def test_chat_candidate_rules(name, fault, reason):
    fmt = BY_NAME[name]
    ev = with_head(evidence([10, 20, 30], [-1.0] * 3), 2, [[5, 4, 3, 2]] * 3)
    doc = fmt.build([ev])
    content = fmt.choices(doc)[0]["logprobs"]["content"]
    fault(content[1]["top_logprobs"])
    err = raises(fmt, doc, reason, top_k=2)
    assert (err.choice, err.field, err.token) == (0, "logprobs.content", 1)
    assert fmt.parse(dumps(doc)).choices[0].completion_top_ids is None  # no head asked: fine


@pytest.mark.parametrize(
    ("fault", "reason"),
    [
        (lambda row: row.__setitem__(1, 7), r"Top logprob must be \[logprob, token_id, text\]"),
        (lambda row: row[1].__setitem__(1, "7"), r"Top logprob must be \[logprob, token_id, text\]"),
        (lambda row: row.__setitem__(1, row[1][:1]), r"Top logprob must be \[logprob, token_id, text\]"),
        (lambda row: row[1].__setitem__(0, None), "Top logprob must be finite"),
        (lambda row: row[1].__setitem__(0, 0.5), "Top logprob cannot be positive"),
        (lambda row: row.append(list(row[0])), "Duplicate top logprob token id"),
        # The row's shape first, then its candidates one by one.
        (lambda row: (row[0].__setitem__(0, "x"), row[2].__setitem__(1, -1)), r"\[logprob, token_id, text\]"),
        (lambda row: (row[0].__setitem__(0, 1.0), row.append(list(row[1]))), "Top logprob cannot be positive"),
    ],
    ids=["not-triple", "string-id", "short", "not-finite", "positive", "duplicate", "shape-first", "in-order"],
)
def test_sglang_candidate_rules(fault, reason):
    ev = with_head(evidence([10, 20, 30], [-1.0] * 3), 2, [[5, 4, 3, 2]] * 3)
    item = sglang([ev], False)
    fault(item["meta_info"]["output_top_logprobs"][1])
    err = raises(BY_NAME["sglang"], item, reason, top_k=2)
    assert (err.choice, err.field, err.token) == (0, "meta_info.output_top_logprobs", 1)
    assert SGL(dumps(item)).choices[0].completion_top_ids is None  # no head asked: fine


@pytest.mark.parametrize(
    ("fault", "reason"),
    [
        (lambda row: row.update({" w": -1.0}), "keyed by decoded text"),
        (lambda row: row.update({"token_id:020": -1.0}), "Duplicate top logprob token id"),
        (lambda row: row.update({"token_id:9": None}), "Top logprob must be finite"),
        (lambda row: row.update({"token_id:9": 0.5}), "Top logprob cannot be positive"),
        # The row's keys first, then its candidates one by one.
        (lambda row: (row.update({"token_id:21": "x"}), row.update({"text": -1.0})), "keyed by decoded text"),
        (lambda row: (row.update({"token_id:21": 1.0}), row.update({"token_id:020": -1.0})),
         "Top logprob cannot be positive"),
    ],
    ids=["text-key", "same-id", "not-finite", "positive", "keys-first", "in-order"],
)
def test_keyed_candidate_rules(fault, reason):
    fmt = BY_NAME["vllm_completions_token_strings"]
    ev = with_head(evidence([10, 20, 30], [-1.0] * 3), 2, [[5, 4, 3, 2]] * 3)
    doc = fmt.build([ev])
    fault(doc["choices"][0]["logprobs"]["top_logprobs"][1])
    err = raises(fmt, doc, reason, top_k=2)
    assert (err.choice, err.field, err.token) == (0, "logprobs.top_logprobs", 1)
    assert fmt.parse(dumps(doc)).choices[0].completion_top_ids is None  # no head asked: fine


def test_keys_repeated_through_an_escape():
    """Keys are compared as JSON reads them: "token_id:\\u0035" repeats "token_id:5"."""
    fmt = BY_NAME["vllm_completions_token_strings"]
    ev = with_head(evidence([10, 20, 30], [-1.0] * 3), 2, [[5, 4, 3, 2]] * 3)
    raw = dumps(fmt.build([ev]))
    escaped = raw.replace(b'"token_id:21":', b'"token_id:\\u0032\\u0031":', 1)
    assert fmt.parse(escaped, top_k=2).choices[0].completion_top_ids.to_lists()[1] == [20, 21]
    repeated = raw.replace(b'"token_id:21":', b'"token_id:2\\u0030": -1.0, "token_id:20":', 1)
    err = raises(fmt, repeated, "repeats the key 'token_id:20'", top_k=2)
    assert err.token == 1


def test_sglang_heads_before_a_bad_row_come_first():
    ev = with_head(evidence([10, 20, 30], [-1.0] * 3), 2, [[5, 4, 3, 2]] * 3)
    item = sglang([ev], False)
    rows = item["meta_info"]["output_top_logprobs"]
    rows[0] = rows[0][:2]  # too few candidates for a head of 2: token 0
    rows[2] = None  # and a missing row later
    err = raises(BY_NAME["sglang"], item, "fewer top logprobs than requested", top_k=2)
    assert err.token == 0
    rows[0] = rows[1]
    err = raises(BY_NAME["sglang"], item, "Missing requested top logprobs", top_k=2)
    assert err.token == 2


def test_chat_head_without_the_entrys_own_logprob():
    """A Fireworks entry without its own `logprob` has its head checked against the sampled
    value (`sampling_logprob`), the others against their own."""
    ev = with_head(evidence([10, 20], [-1.0] * 2), 2, [[5, 4, 3, 2]] * 2)
    doc = fireworks_content([ev], chat=True)
    content = doc["choices"][0]["logprobs"]["content"]
    own = content[1]["logprob"]
    del content[1]["logprob"]
    content[1]["sampling_logprob"] = own
    r = CHAT(dumps(doc), top_k=2)
    assert r.choices[0].completion_top_ids.to_lists() == [[10, 11], [20, 21]]
    content[1]["sampling_logprob"] = -3.5
    err = raises(BY_NAME["fireworks_chat_content"], doc, "Sampler head and sampled-token logprob disagree",
                 top_k=2)
    assert err.token == 1


def test_sampling_logprob_on_some_entries_only():
    doc, _ = base(BY_NAME["fireworks_chat_content"])
    del doc["choices"][0]["logprobs"]["content"][2]["sampling_logprob"]
    err = raises(BY_NAME["fireworks_chat_content"], doc, "sampling_logprob is missing while other entries carry it")
    assert err.token == 2


def test_missing_heads_are_reported():
    ev = with_head(evidence([10, 20], [-1.0] * 2), 1, [[5, 4, 3]] * 2)
    doc = vllm_completions([ev], True)
    doc["choices"][0]["logprobs"]["top_logprobs"][1] = None
    raises(BY_NAME["vllm_completions_token_strings"], doc, "Missing requested top logprobs", top_k=1)
    doc["choices"][0]["logprobs"]["top_logprobs"] = None
    raises(BY_NAME["vllm_completions_token_strings"], doc, "Missing requested top logprobs", top_k=1)
    items = sglang([ev], False)
    del items["meta_info"]["output_top_logprobs"]
    raises(BY_NAME["sglang"], items, "Missing requested top logprobs", top_k=1)


# --- prompts, raw fields, the document ----------------------------------------------------------


def test_completions_prompt_ids_per_choice_and_on_the_response():
    evs = [evidence([1], [-1.0], [4, 5]), evidence([2], [-1.0], [4, 5])]
    r = C(dumps(vllm_completions(evs, False)))
    assert r.prompt_token_ids.dtype == np.int64 and r.prompt_token_ids.tolist() == [4, 5]
    assert all(c.raw["prompt_token_ids"].tolist() == [4, 5] for c in r.choices)
    assert set(r.choices[0].raw) == {"text", "stop_reason", "prompt_logprobs", "prompt_token_ids"}
    evs[1].prompt = [4, 6]  # a batch of two prompts: no single prompt for the response
    r = C(dumps(vllm_completions(evs, False)))
    assert r.prompt_token_ids is None and r.choices[1].raw["prompt_token_ids"].tolist() == [4, 6]
    doc = vllm_completions(evs, False)
    doc["choices"][1]["prompt_token_ids"] = [4, -6]
    err = raises(BY_NAME["vllm_completions"], doc, r"prompt_token_ids must hold token ids in \[0, 2\*\*32\)")
    assert (err.choice, err.field, err.token) == (1, "prompt_token_ids", 1)


def test_chat_prompt_ids_at_the_top_level():
    doc = vllm_chat([evidence([1, 2], [-1.0, -2.0], [9, 8, 7])], False)
    r = CHAT(dumps(doc))
    assert r.prompt_token_ids.tolist() == [9, 8, 7]
    assert set(r.payload) == {"id", "object", "created", "model", "choices", "usage", "prompt_logprobs"} - {"choices"}
    assert set(r.choices[0].raw) == {"message", "stop_reason"}
    doc["prompt_token_ids"] = [9, True]
    assert raises(BY_NAME["vllm_chat"], doc, "prompt_token_ids").field == "prompt_token_ids"


def test_raw_output_stays_in_raw():
    doc = fireworks_content([evidence([1, 2], [-1.0, -2.0])], chat=False)
    c = C(dumps(doc)).choices[0]
    assert set(c.raw) == {"text", "raw_output"} and c.raw["raw_output"]["completion"] == "c"


def test_sglang_single_and_list():
    ev = evidence([3, 4], [-1.0, -2.0])
    r = SGL(dumps(sglang([ev], False)))
    (c,) = r.choices
    assert r.request_id == "req-1" and c.finish_reason == "stop"
    assert c.raw["meta_info"]["finish_reason"] == {"type": "stop", "matched": 2}
    assert "output_token_logprobs" not in c.raw["meta_info"] and "output_ids" not in c.raw
    r = SGL(dumps(sglang([ev, ev], True)))
    assert len(r.choices) == 2 and r.request_id is None and r.choices[1].index == 1
    with pytest.raises(MalformedResponseError, match="non-empty list"):
        SGL(b"[]")
    with pytest.raises(MalformedResponseError, match="meta_info must be an object"):
        SGL(b'{"output_ids": [1]}')
    items = sglang([ev], False)
    items["meta_info"]["output_token_logprobs"][1] = [-1.0]
    assert raises(BY_NAME["sglang"], items, r"entry must be \[logprob, token_id, text\]").token == 1


@pytest.mark.parametrize("parse", [C, CHAT])
def test_document_shape(parse):
    for raw, message in ((b"[]", "must be a JSON object"), (b'{"choices": []}', "non-empty list"),
                         (b'{"choices": [3]}', "choice must be an object"), (b"{", "invalid JSON"),
                         (b'{"choices": [{"token_ids": [1], "logprobs": 3}]}', "logprobs must be an object"),
                         (b'{"choices": [{"token_ids": [1], "logprobs": {"content": 3}}]}', "content must be a list"),
                         (b'{"choices": [{"token_ids": [1], "raw_output": 3}]}', "raw_output must be an object"),
                         (b'{"choices": [{"token_ids": [1], "logprobs": {"token_logprobs": 3}}]}', "must be a list"),
                         (b'{"choices": [{"token_ids": [1.0], "logprobs": null}]}', "token_ids must hold")):
        with pytest.raises(MalformedResponseError, match=message):
            parse(raw)
    with pytest.raises(ValueError, match="top_k"):
        parse(b"{}", top_k=0)
    with pytest.raises(TypeError):
        parse(12)


def test_tokens_and_token_logprobs_of_different_lengths():
    doc, _ = base(BY_NAME["together_completions"])
    doc["choices"][0]["logprobs"]["tokens"].append("x")
    raises(BY_NAME["together_completions"], doc, r"logprobs.tokens has 5 entries but logprobs.token_logprobs has 4 \(-1\)")


def test_echo_is_named_when_the_extra_logprobs_are_the_prompt():
    ev = evidence([5, 6], [-1.0, -2.0], [1, 2, 3])
    doc = vllm_completions([ev], False)
    lp = doc["choices"][0]["logprobs"]
    lp["token_logprobs"] = [-0.5, -0.5, -0.5, *lp["token_logprobs"]]
    lp["tokens"] = ["p", "p", "p", *lp["tokens"]]
    err = raises(BY_NAME["vllm_completions"], doc, r"2 token ids but 5 logprobs \(\+3\).*`echo: true`")
    assert err.field == "token_ids"


def test_inputs_other_than_bytes():
    raw = dumps(vllm_chat([evidence([1], [-1.0])], True))
    for value in (raw, raw.decode(), bytearray(raw), memoryview(raw)):
        assert CHAT(value).choices[0].completion_ids.tolist() == [1]


def test_errors_pickle_with_their_location():
    doc, _ = base(BY_NAME["vllm_chat"])
    doc["choices"][0]["logprobs"]["content"][1]["logprob"] = None
    err = raises(BY_NAME["vllm_chat"], doc, "null")
    again = pickle.loads(pickle.dumps(err))
    assert (again.choice, again.field, again.token, str(again)) == (0, "logprobs.content", 1, str(err))


def test_token_id_strings_follow_the_generate_rules():
    ev = evidence([1, 2], [-1.0, -2.0])
    doc = vllm_chat([ev], True)
    for bad in ("token_id:+2", "token_id:٢", f"token_id:{2**32}", "token_id:"):
        doc["choices"][0]["logprobs"]["content"][1]["token"] = bad
        assert raises(BY_NAME["vllm_chat_token_strings"], doc, "names no token id").token == 1
    doc["choices"][0]["logprobs"]["content"][1]["token"] = tid(2)
    assert CHAT(dumps(doc)).choices[0].completion_ids.tolist() == [1, 2]


def test_records_that_name_ids_win_over_text_only_logprobs():
    # Fireworks with an int `logprobs` (text tokens, no ids) and `raw_output: true`.
    ev = evidence([4, 5, 6], [-1.0, -2.0, -3.0])
    doc = fireworks_content([ev], chat=False)
    choice = doc["choices"][0]
    choice["logprobs"] = {"tokens": ["a", "b", "c"], "token_logprobs": [-1.25, -2.25, -3.25], "top_logprobs": None}
    del choice["raw_output"]["completion_token_ids"]
    c = C(dumps(doc)).choices[0]
    assert c.completion_ids.tolist() == [4, 5, 6] and c.completion_logprobs.tolist() == [-1.0, -2.0, -3.0]
    assert c.raw["logprobs"]["tokens"] == ["a", "b", "c"]  # not read: left as sent


def test_token_strings_among_tokens_that_are_not_strings():
    doc = vllm_completions([evidence([1, 2, 3], [-1.0, -2.0, -3.0])], True)
    doc["choices"][0]["logprobs"]["tokens"][2] = None
    err = raises(BY_NAME["vllm_completions_token_strings"], doc, 'token is not "token_id:N" while other tokens are')
    assert (err.field, err.token) == ("logprobs.tokens", 2)


@pytest.mark.parametrize("raw", [b"9 ", b'"x"', b"null", b"true", b"[1]", b'[{"output_ids": [1]}, 2]'])
def test_sglang_roots_and_items_that_are_not_objects(raw):
    with pytest.raises(MalformedResponseError, match="must be an object") as info:
        SGL(raw)
    assert info.value.choice in (0, 1)


@pytest.mark.parametrize("fmt", FORMATS, ids=FORMAT_IDS)
def test_neither_ids_nor_logprobs_names_every_flag_at_once(fmt):
    """One run tells the user every request flag to set, not the logprobs flag first and
    the ids flag on the next run."""
    doc, _ = base(fmt)
    for choice in fmt.choices(doc):
        fmt.strip_ids(choice)
        if fmt.name.startswith("sglang"):
            choice["meta_info"].pop("output_token_logprobs", None)
        else:
            choice["logprobs"] = None
            choice.get("raw_output", {}).pop("completion_logprobs", None)
    err = raises(fmt, doc, "no exact completion token ids and no logprobs")
    text = str(err)
    if fmt.name.startswith("sglang"):
        assert "return_logprob: true" in text
    else:
        assert "return_token_ids: true" in text and "for the logprobs, set `logprobs" in text
