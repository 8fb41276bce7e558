"""SGLang's sampling mask (``return_sampling_mask``), its renormalized logprobs, and the flat
prompt top-k (``return_flat_raw_top_logprobs``, plain and base64), each laid out as SGLang's
tokenizer manager writes it into ``meta_info``, on both implementations and every SIMD path."""

from __future__ import annotations

import base64
import json
import math

import numpy as np
import pytest

from tokenwire import MalformedResponseError

from .openai_strategies import sglang_prompt_top

# The sampler's probabilities of one step (ids 0..4) with a cut-off tie: top_k=2 and top_p=0.45
# both cut at 0.2, so the ties at the cut-off are kept (3 ids for top_k=2).
PROBS = [0.4, 0.2, 0.2, 0.1, 0.1]
KEPT = [0, 1, 2]


def renormalized(token: int, kept: list[int]) -> float:
    return math.log(PROBS[token] / sum(PROBS[i] for i in kept))


def item(ids=(1, 0, 2), masks=None, *, raw=True, top=None, **meta_extra):
    """One /generate item: ``output_ids``, the triples (with ``raw``), the mask rows (the
    kept set of every step, the sampled id among them) and the sampled tokens' renormalized
    logprobs, then the counts, in the order SGLang's ``meta_info`` has them."""
    ids = list(ids)
    masks = [list(KEPT) for _ in ids] if masks is None else masks
    meta = {"id": "rid-1", "finish_reason": {"type": "length", "length": len(ids)}, "prompt_tokens": 3,
            "weight_version": "default"}
    if raw:
        meta["input_token_logprobs"] = [[None, 11, None], [-1.5, 12, None], [-0.25, 13, None]]
        meta["output_token_logprobs"] = [[math.log(PROBS[t]), t, None] for t in ids]
    if top is not None:
        meta["output_top_logprobs"] = top
    meta["output_token_sampling_mask"] = masks
    meta["output_token_sampling_logprobs"] = [renormalized(t, row) for t, row in zip(ids, masks)]
    meta["output_token_sampling_mask_length"] = len(masks)
    meta.update(reasoning_tokens=0, completion_tokens=len(ids), cached_tokens=0)
    meta.update(meta_extra)
    return {"text": "x", "output_ids": ids, "meta_info": meta}


def dumps(doc) -> bytes:
    return json.dumps(doc, separators=(",", ":")).encode()  # no spaces, as orjson writes it


def fails(impl, doc, match: str, **kw) -> MalformedResponseError:
    with pytest.raises(MalformedResponseError, match=match) as info:
        impl.parse_sglang_generate_response(dumps(doc), **kw)
    return info.value


def test_mask_with_ties_kept_at_the_cut_off(impl):
    doc = item()
    choice = impl.parse_sglang_generate_response(dumps(doc)).choices[0]
    assert choice.sampling_mask.values.dtype == np.int32
    assert choice.sampling_mask.to_lists() == [KEPT] * 3
    assert choice.sampling_mask_present.tolist() == [True] * 3
    assert choice.sampling_logprobs.dtype == np.float64
    assert choice.sampling_logprobs.tolist() == [renormalized(t, KEPT) for t in (1, 0, 2)]
    assert choice.completion_logprobs.tolist() == [math.log(PROBS[t]) for t in (1, 0, 2)]
    assert choice.sampling_mask_logprobs is None
    meta = choice.raw["meta_info"]
    assert "output_token_sampling_mask" not in meta and "output_token_sampling_logprobs" not in meta
    assert meta["output_token_sampling_mask_length"] == 3


def test_a_batch_and_a_spaced_spelling(impl):
    docs = [item(), item(ids=[0], masks=[[0]])]
    r = impl.parse_sglang_generate_response(json.dumps(docs, indent=2).encode())
    assert [c.sampling_mask.to_lists() for c in r.choices] == [[KEPT] * 3, [[0]]]
    assert r.choices[1].sampling_logprobs.tolist() == [0.0]


def test_sampling_logprobs_without_raw_ones(impl):
    doc = item(raw=False)
    choice = impl.parse_sglang_generate_response(dumps(doc)).choices[0]
    assert choice.completion_logprobs is None
    assert choice.completion_ids.tolist() == [1, 0, 2]
    assert choice.sampling_logprobs.tolist() == [renormalized(t, KEPT) for t in (1, 0, 2)]
    # A head needs the triples and their candidates.
    fails(impl, doc, "no logprobs in the response", top_k=1)
    del doc["meta_info"]["output_token_sampling_logprobs"]
    fails(impl, doc, "no logprobs in the response")


@pytest.mark.parametrize("row, reason", [
    ([0, 2], "does not hold the sampled token id 1"),
    ([0, 1, 0], "repeats token id 0"),
    ([], "row is empty"),
    ([1, 2**31], r"must be a list of token ids in \[0, 2\*\*31\)"),
    ([1, -1], r"must be a list of token ids in \[0, 2\*\*31\)"),
    ([1, 2.0], r"must be a list of token ids in \[0, 2\*\*31\)"),
    (None, r"must be a list of token ids in \[0, 2\*\*31\)"),
])
def test_a_bad_mask_row(impl, row, reason):
    doc = item()
    doc["meta_info"]["output_token_sampling_mask"][0] = row
    err = fails(impl, doc, reason)
    assert (err.choice, err.field, err.token) == (0, "meta_info.output_token_sampling_mask", 0)


def test_the_first_bad_row_wins(impl):
    doc = item()
    masks = doc["meta_info"]["output_token_sampling_mask"]
    masks[1], masks[2] = [1, 2], "x"  # row 1 lacks its sampled id 0, row 2 is not a list
    assert fails(impl, doc, "does not hold the sampled token id 0").token == 1


def test_mask_and_ids_of_different_lengths(impl):
    doc = item()
    doc["meta_info"]["output_token_sampling_mask"].pop()
    doc["meta_info"]["output_token_sampling_mask_length"] = 2
    fails(impl, doc, r"sampling mask has 2 rows but the completion has 3 token ids \(-1\)")


@pytest.mark.parametrize("length, reason", [
    (4, r"output_token_sampling_mask_length is 4 but the sampling mask has 3 rows \(\+1\)"),
    (-1, "must be a non-negative int"),
    (3.0, "must be a non-negative int"),
])
def test_mask_length_disagreeing(impl, length, reason):
    doc = item(output_token_sampling_mask_length=length)
    assert fails(impl, doc, reason).field == "meta_info.output_token_sampling_mask_length"


@pytest.mark.parametrize("value, reason", [
    (0.5, r"sampling logprob cannot be positive \(0.5\)"),
    (None, "sampling logprob is null"),
    ("x", "sampling logprob must be a number, not str"),
    (1e999, "invalid JSON"),
])
def test_sampling_logprobs_that_are_not_evidence(impl, value, reason):
    doc = item()
    doc["meta_info"]["output_token_sampling_logprobs"][1] = value
    err = fails(impl, doc, reason)
    if value != 1e999:
        assert (err.field, err.token) == ("meta_info.output_token_sampling_logprobs", 1)


def test_sampling_logprobs_within_the_tolerance(impl):
    doc = item()
    doc["meta_info"]["output_token_sampling_logprobs"][0] = 1e-7  # float rounding above 0
    assert impl.parse_sglang_generate_response(dumps(doc)).choices[0].sampling_logprobs[0] == 1e-7


def test_sampling_logprobs_count(impl):
    doc = item()
    doc["meta_info"]["output_token_sampling_logprobs"].append(-0.5)
    fails(impl, doc, r"output_token_sampling_logprobs has 4 values but the completion has 3 token ids \(\+1\)")


def test_support_mode_rows(impl):
    """``sampling_logprobs_mode: "support"``: a row per token, aligned with its mask row."""
    doc = item()
    rows = [[renormalized(i, KEPT) for i in KEPT] for _ in range(3)]
    doc["meta_info"]["output_token_sampling_logprobs"] = rows
    choice = impl.parse_sglang_generate_response(dumps(doc)).choices[0]
    assert choice.sampling_logprobs.tolist() == [rows[0][KEPT.index(t)] for t in (1, 0, 2)]
    assert choice.sampling_mask_logprobs.to_lists() == rows
    rows[2] = rows[2][:2]
    err = fails(impl, doc, "row must be a list of 3 logprobs, one per id of its sampling mask row")
    assert err.token == 2
    rows[2] = [math.log(0.5)] * 3
    fails(impl, doc, r"support logprobs must normalize over their sampling mask row \(probabilities sum to 1.5\)")
    rows[2] = [0.0, 0.5, -1.0]
    fails(impl, doc, r"support logprob cannot be positive \(0.5\)")


def test_support_mode_rows_need_the_mask(impl):
    doc = item()
    meta = doc["meta_info"]
    meta["output_token_sampling_logprobs"] = [[0.0]] * 3
    del meta["output_token_sampling_mask"]
    fails(impl, doc, "no output_token_sampling_mask to align them with")


def test_miles_mask_logprobs_aligned_with_the_rows(impl):
    doc = item()
    rows = [[renormalized(i, KEPT) for i in KEPT] for _ in range(3)]
    doc["meta_info"]["output_token_sampling_mask_logprobs"] = rows
    choice = impl.parse_sglang_generate_response(dumps(doc)).choices[0]
    assert choice.sampling_mask_logprobs.to_lists() == rows
    assert "output_token_sampling_mask_logprobs" not in choice.raw["meta_info"]
    doc["meta_info"]["output_token_sampling_logprobs"][1] -= 0.01
    err = fails(impl, doc, "gives the sampled token .* but output_token_sampling_logprobs is")
    assert (err.field, err.token) == ("meta_info.output_token_sampling_mask_logprobs", 1)
    rows.pop()
    fails(impl, doc, "must be a list of 3 rows, one per sampling mask row")


def _triple_rows(ids, width=5):
    """``output_top_logprobs``: the sampler's top candidates before truncation, best first."""
    order = sorted(range(len(PROBS)), key=lambda i: (-PROBS[i], i))[:width]
    return [[[math.log(PROBS[i]), i, None] for i in order] for _ in ids]


def test_with_a_head_the_mask_is_the_heads_support(impl):
    ids = (1, 0, 2)
    doc = item(ids, top=_triple_rows(ids))
    choice = impl.parse_sglang_generate_response(dumps(doc), top_k=2).choices[0]
    # Exactly the kept set (three ids for a head of 2: the ties at the cut-off), renormalized.
    assert choice.completion_top_ids.to_lists() == [KEPT] * 3
    got = choice.completion_top_logprobs.to_lists()
    assert np.allclose(got, [[renormalized(i, KEPT) for i in KEPT]] * 3, rtol=0, atol=1e-12)
    # Without the mask the head is the top 2 with the tie at the cut-off excluded.
    del doc["meta_info"]["output_token_sampling_mask"]
    del doc["meta_info"]["output_token_sampling_logprobs"]
    del doc["meta_info"]["output_token_sampling_mask_length"]
    assert impl.parse_sglang_generate_response(dumps(doc), top_k=2).choices[0].completion_top_ids.to_lists() == [[0]] * 3


def test_with_a_head_a_kept_id_needs_its_candidate(impl):
    ids = (1, 0, 2)
    doc = item(ids, top=_triple_rows(ids, width=2))  # id 2 is kept but not among the candidates
    err = fails(impl, doc, "Missing sampling-support probabilities", top_k=1)
    assert (err.field, err.token) == ("meta_info.output_top_logprobs", 0)


def test_with_a_head_a_kept_mass_above_one_is_refused(impl):
    ids = (1, 0, 2)
    top = _triple_rows(ids)
    top[1][0][0] = math.log(0.9)  # 0.9 + 0.2 + 0.2 of kept mass
    doc = item(ids, top=top)
    doc["meta_info"]["output_token_logprobs"][1][0] = math.log(0.9)
    err = fails(impl, doc, "Sampler probabilities must normalize over the recorded support", top_k=1)
    assert err.token == 1


# --- the flat prompt top-k ------------------------------------------------------------------------

ROWS = [[(11, -0.5), (22, -2.5)], [(33, -0.25), (44, -1.5)], [(55, -0.125), (66, -4.0)]]


def prompt_item(b64: bool, prefix: int = 1, rows=ROWS):
    doc = item()
    meta = doc["meta_info"]
    meta.update(sglang_prompt_top(prefix, rows, b64))
    meta["input_token_logprobs"] = [[None, 10, None]] * prefix + [[-0.5, 10, None]] * len(rows)
    return doc


@pytest.mark.parametrize("b64", [False, True], ids=["lists", "base64"])
def test_flat_prompt_top_k_with_a_null_prefix(impl, b64):
    choice = impl.parse_sglang_generate_response(dumps(prompt_item(b64))).choices[0]
    assert choice.prompt_top_ids.values.dtype == np.int64
    assert choice.prompt_top_logprobs.values.dtype == (np.float32 if b64 else np.float64)
    assert choice.prompt_top_ids.to_lists() == [[], [11, 22], [33, 44], [55, 66]]
    assert choice.prompt_top_logprobs.to_lists() == [[], [-0.5, -2.5], [-0.25, -1.5], [-0.125, -4.0]]
    meta = choice.raw["meta_info"]
    assert meta["input_top_logprobs_shape"] == [3, 2] and meta["input_top_logprobs_null_prefix"] == 1
    assert not any(key.startswith("input_top_logprobs_") and ("flat" in key and "dtype" not in key) for key in meta)


@pytest.mark.parametrize("b64", [False, True], ids=["lists", "base64"])
def test_flat_prompt_top_k_all_null(impl, b64):
    choice = impl.parse_sglang_generate_response(dumps(prompt_item(b64, rows=[]))).choices[0]
    assert choice.prompt_top_ids.to_lists() == [[]]


@pytest.mark.parametrize("b64", [False, True], ids=["lists", "base64"])
def test_flat_prompt_top_k_shape_counting_the_null_prefix(impl, b64):
    """An earlier revision of SGLang's fixture counted the null prefix in shape[0]: the arrays
    then hold fewer values than the shape gives, and the message says so."""
    doc = prompt_item(b64)
    doc["meta_info"]["input_top_logprobs_shape"] = [4, 2]
    doc["meta_info"]["input_token_logprobs"].append([-0.5, 10, None])
    fails(impl, doc, r"holds 6 values but input_top_logprobs_shape \[4, 2\] gives 8; it matches rows "
                     r"counting the null prefix")


@pytest.mark.parametrize("b64", [False, True], ids=["lists", "base64"])
@pytest.mark.parametrize("fault, reason, token", [
    ("prefix", "input_top_logprobs_null_prefix must be a non-negative int", None),
    ("shape", r"input_top_logprobs_shape must be \[rows, k\]", None),
    ("positions", r"cover 4 prompt positions but meta_info.input_token_logprobs, which lists them, has 3", None),
    ("repeat", "Duplicate top logprob token id", 2),
    ("positive", r"Top logprob must be a number at most 1e-6 or -inf", 3),
])
def test_flat_prompt_top_k_faults(impl, b64, fault, reason, token):
    rows = [list(r) for r in ROWS]
    if fault == "repeat":
        rows[1][1] = (33, -1.5)
    if fault == "positive":
        rows[2][0] = (55, 0.5)
    doc = prompt_item(b64, rows=rows)
    meta = doc["meta_info"]
    if fault == "prefix":
        meta["input_top_logprobs_null_prefix"] = -1
    elif fault == "shape":
        meta["input_top_logprobs_shape"] = [3, 2, 1]
    elif fault == "positions":
        meta["input_token_logprobs"].pop()
    assert fails(impl, doc, reason).token == token


def test_flat_prompt_top_k_base64_faults(impl):
    doc = prompt_item(True)
    meta = doc["meta_info"]
    meta["input_top_logprobs_idx_flat_b64_dtype"] = "int64"
    fails(impl, doc, "input_top_logprobs_idx_flat_b64_dtype must be 'int32'")
    meta["input_top_logprobs_idx_flat_b64_dtype"] = "int32"
    meta["input_top_logprobs_idx_flat_b64"] = base64.b64encode(np.array([11, -22, 33, 44, 55, 66], "<i4").tobytes()).decode()
    assert fails(impl, doc, "Top logprob must identify a nonnegative token id").token == 1
    meta["input_top_logprobs_val_flat_b64"] = "AAAA="
    fails(impl, doc, "input_top_logprobs_val_flat_b64 must be canonical base64")


def test_flat_prompt_top_k_in_both_forms(impl):
    doc = prompt_item(True)
    doc["meta_info"].update(sglang_prompt_top(1, ROWS, False))
    fails(impl, doc, "sent both as lists and as base64")


def test_flat_prompt_top_k_plain_faults(impl):
    doc = prompt_item(False)
    meta = doc["meta_info"]
    meta["input_top_logprobs_idx_flat"][3] = 2**32
    assert fails(impl, doc, r"input_top_logprobs_idx_flat must hold token ids in \[0, 2\*\*32\)").token == 2
    meta["input_top_logprobs_idx_flat"].pop()
    fails(impl, doc, r"input_top_logprobs_idx_flat holds 5 values but input_top_logprobs_shape \[3, 2\] gives 6")
    meta["input_top_logprobs_val_flat"][0] = "x"
    assert fails(impl, doc, "input_top_logprobs_val_flat must hold numbers").token == 1


# --- the chat endpoint: meta_info on the choice (return_meta_info) -------------------------------


def chat(meta, ids=(1, 0, 2), **choice_extra):
    """SGLang's /v1/chat/completions response of one choice with ``return_token_ids`` and
    ``return_meta_info``: the generate item's ``meta_info`` on the choice, beside its OpenAI
    fields (SGLang's ChatCompletionResponseChoice)."""
    ids = list(ids)
    choice = {"index": 0, "message": {"role": "assistant", "content": "x"},
              "logprobs": {"content": [{"token": "x", "bytes": [120], "logprob": math.log(PROBS[t]), "top_logprobs": []}
                                       for t in ids]},
              "finish_reason": "length", "matched_stop": None, "token_ids": ids, "meta_info": meta, **choice_extra}
    return dumps({"id": "c1", "object": "chat.completion", "created": 0, "model": "m", "choices": [choice],
                  "usage": {"prompt_tokens": 3, "total_tokens": 3 + len(ids), "completion_tokens": len(ids)}})


def test_chat_meta_info_reads_the_mask_and_sampling_logprobs(impl, simd):
    meta = item()["meta_info"]
    choice = impl.parse_chat_completions_response(chat(meta)).choices[0]
    assert choice.sampling_mask.to_lists() == [KEPT] * 3
    assert choice.sampling_mask_present.tolist() == [True] * 3
    assert choice.sampling_logprobs.tolist() == [renormalized(t, KEPT) for t in (1, 0, 2)]
    assert choice.completion_logprobs.tolist() == pytest.approx([math.log(PROBS[t]) for t in (1, 0, 2)])
    rest = choice.raw["meta_info"]
    assert "output_token_sampling_mask" not in rest and "output_token_sampling_logprobs" not in rest
    assert rest["output_token_sampling_mask_length"] == 3 and rest["output_token_logprobs"] == meta["output_token_logprobs"]


def test_chat_meta_info_without_the_sampling_fields_is_left_as_sent(impl):
    meta = {"id": "rid-1", "weight_version": "default", "completion_tokens": 3}
    choice = impl.parse_chat_completions_response(chat(meta)).choices[0]
    assert choice.sampling_mask is None and choice.sampling_logprobs is None
    assert choice.raw["meta_info"] == meta


def test_chat_support_rows(impl):
    meta = item()["meta_info"]
    meta["output_token_sampling_mask_logprobs"] = [[renormalized(i, KEPT) for i in KEPT] for _ in range(3)]
    choice = impl.parse_chat_completions_response(chat(meta)).choices[0]
    assert choice.sampling_mask_logprobs.to_lists() == meta["output_token_sampling_mask_logprobs"]


CHAT_BROKEN = [
    pytest.param({"output_token_sampling_mask": [[5, 6], KEPT, KEPT]}, "sampling mask row does not hold the sampled token id 1",
                 "meta_info.output_token_sampling_mask", 0, id="sampled_missing"),
    pytest.param({"output_token_sampling_mask": [KEPT, [0, 0], KEPT]}, "sampling mask row repeats token id 0",
                 "meta_info.output_token_sampling_mask", 1, id="repeat"),
    pytest.param({"output_token_sampling_mask": [KEPT, KEPT]}, "sampling mask has 2 rows but the completion has 3",
                 "meta_info.output_token_sampling_mask", None, id="row_short"),
    pytest.param({"output_token_sampling_mask_length": 4}, "output_token_sampling_mask_length is 4",
                 "meta_info.output_token_sampling_mask_length", None, id="length"),
    pytest.param({"output_token_sampling_logprobs": [0.5, -0.1, -0.1]}, r"sampling logprob cannot be positive \(0.5\)",
                 "meta_info.output_token_sampling_logprobs", 0, id="positive"),
]


@pytest.mark.parametrize("edit, match, field, token", CHAT_BROKEN)
def test_chat_meta_info_rules(impl, simd, edit, match, field, token):
    meta = dict(item()["meta_info"], **edit)
    with pytest.raises(MalformedResponseError, match=match) as info:
        impl.parse_chat_completions_response(chat(meta))
    assert (info.value.choice, info.value.field, info.value.token) == (0, field, token)
