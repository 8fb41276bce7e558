"""The compiled core against the reference on mutated OpenAI-compatible and SGLang documents:
every value swapped for an odd one, rows, candidates, masks, engine data and routing mutated
(hypothesis), the outcome compared on every SIMD path. The shapes and spellings themselves:
tests/test_openai.py."""

from __future__ import annotations

import base64
import copy
import io
import math
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tokenwire import MalformedResponseError
from tokenwire.rules import openai as openai_rules

from .conftest import _core
from .openai_strategies import (
    CHAT,
    FORMATS,
    ROUTING_FORMS,
    SGL,
    SPELLINGS,
    add_engine_data,
    add_routing,
    add_sglang_routing,
    evidences,
    npy,
    spell,
)

# --- the compiled core against the reference, on mutated documents ------------------------------

_ODD_VALUES = [None, "x", True, False, [1], {"a": 1}, 0, 5, -5, 1e-7, 10**30, -(10**30), -9999, -9999.0,
               -0.0, 1.5e-300, -1e-320, "token_id:7", "token_id:007", "token_id:4294967295",
               "token_id:4294967296", "token_id:", "token_id:12a", "token_id:-1", " w", ""]
_ARRAYS = ("token_logprobs", "tokens", "token_ids", "text_offset", "top_logprobs")


def _comparable(value):
    if isinstance(value, np.ndarray):
        return ("array", str(value.dtype), value.tolist())
    if isinstance(value, dict):
        return {k: _comparable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_comparable(v) for v in value]
    if hasattr(value, "offsets"):
        return ("ragged", value.offsets.tolist(), str(value.values.dtype), value.values.tolist())
    return value


def openai_outcome(parse, raw, **kw):
    try:
        r = parse(raw, **kw)
    except MalformedResponseError as exc:
        reason = "invalid JSON" if exc.reason.startswith("invalid JSON") else exc.reason
        return ("error", exc.choice, exc.field, exc.token, reason)
    def routing(routed):
        return None if routed is None else (_comparable(routed.array), routed.start)

    return ("ok", r.request_id, _comparable(r.usage), _comparable(r.prompt_token_ids), _comparable(r.payload),
            routing(r.prompt_routed_experts),
            [(c.index, _comparable(c.completion_ids), _comparable(c.completion_logprobs),
              _comparable(c.completion_top_ids), _comparable(c.completion_top_logprobs), c.finish_reason,
              _comparable(c.raw), routing(c.routed_experts), _comparable(c.sampling_mask),
              _comparable(c.sampling_logprobs), _comparable(c.sampling_mask_logprobs), _comparable(c.prompt_top_ids),
              _comparable(c.prompt_top_logprobs), _comparable(c.indexer_topk)) for c in r.choices])


def _mutate_sglang(draw, item):
    meta = item.get("meta_info")
    entries = meta.get("output_token_logprobs") if isinstance(meta, dict) else None
    kind = draw(st.sampled_from(["entry", "entry", "entry", "ids", "meta", "entries", "top", "top", "mask", "mask",
                                 "prompt_top"]))
    if kind == "top" and isinstance(meta, dict):
        _mutate_triple_rows(draw, meta)
    elif kind == "entry" and isinstance(entries, list) and entries:
        at = draw(st.integers(0, len(entries) - 1))
        where = draw(st.sampled_from(["whole", 0, 1, "length"]))
        if where == "whole" or not isinstance(entries[at], list) or len(entries[at]) < 2:
            entries[at] = draw(st.sampled_from([None, [], [1], "x", {"a": 1}]))
        elif where == "length":
            entries[at] = entries[at][:2] if draw(st.booleans()) else [*entries[at], None, 1]
        else:
            entries[at][where] = _fresh(draw, _ODD_VALUES)
    elif kind == "ids":
        item["output_ids"] = draw(st.sampled_from([None, [], "x", [1.5], [-1], [2**32], [True]]))
    elif kind == "meta":
        item["meta_info"] = draw(st.sampled_from([None, [], {}, {"output_token_logprobs": None}]))
    elif kind == "entries" and isinstance(meta, dict):
        meta["output_token_logprobs"] = draw(st.sampled_from([None, "x", [], {}]))
    elif kind == "mask" and isinstance(meta, dict):
        _mutate_sampling_mask(draw, meta)
    elif kind == "prompt_top" and isinstance(meta, dict):
        _mutate_prompt_top(draw, meta)




def _fresh(draw, values):
    """One of ``values``, copied: the lists and dicts among them are shared by every example, and
    a mutation may write a drawn value into itself (``array[0] = array``)."""
    return copy.deepcopy(draw(st.sampled_from(values)))


_MASK_ROWS = [None, [], "x", [1.5], [-1], [2**31], [True], [7, 7], {"a": 1}]


def _mutate_sampling_mask(draw, meta):
    """A fault in SGLang's sampling mask, its logprobs or its length: an odd list or row, a row
    without the sampled id or with an id twice, an odd or positive value, rows of values."""
    masks, values = meta.get("output_token_sampling_mask"), meta.get("output_token_sampling_logprobs")
    fault = draw(st.sampled_from(["mask", "row", "drop", "repeat", "value", "values", "rows", "length", "miles"]))
    if not isinstance(masks, list) or not masks or fault == "mask":
        meta["output_token_sampling_mask"] = draw(st.sampled_from([None, "x", [], {}, [[]], [None], [[1, 2]]]))
        return
    t = draw(st.integers(0, len(masks) - 1))
    if fault == "row":
        masks[t] = _fresh(draw, _MASK_ROWS)
    elif fault == "drop" and isinstance(masks[t], list) and masks[t]:
        del masks[t][draw(st.integers(0, len(masks[t]) - 1))]
    elif fault == "repeat" and isinstance(masks[t], list) and masks[t]:
        masks[t].append(masks[t][0])
    elif fault == "value" and isinstance(values, list) and values:
        values[draw(st.integers(0, len(values) - 1))] = _fresh(draw, _ODD_VALUES + [[-0.1], [0.0]])
    elif fault == "values":
        meta["output_token_sampling_logprobs"] = draw(st.sampled_from([None, "x", [], {}, [[]], [-0.5]]))
    elif fault == "rows":  # sampling_logprobs_mode "support": a row of values per mask row
        rows = [[math.log(1 / len(row))] * len(row) if isinstance(row, list) and row else [] for row in masks]
        if rows and draw(st.booleans()):
            rows[draw(st.integers(0, len(rows) - 1))].append(draw(st.sampled_from([-0.5, 0.5, None])))
        meta["output_token_sampling_logprobs"] = rows
    elif fault == "length":
        meta["output_token_sampling_mask_length"] = draw(st.sampled_from([None, -1, 0, len(masks) + 1, "x", 1.0]))
    elif fault == "miles":
        rows = [[0.0] if isinstance(row, list) and len(row) == 1 else [math.log(0.5)] * 2 for row in masks]
        meta["output_token_sampling_mask_logprobs"] = draw(st.sampled_from([rows, rows[:-1], "x", [None]]))


def _mutate_prompt_top(draw, meta):
    """A fault in SGLang's flat prompt top-k: an odd shape or null prefix, an odd value or id,
    odd base64 or dtype, or both forms at once."""
    fault = draw(st.sampled_from(["shape", "prefix", "value", "id", "b64", "dtype", "both", "positions"]))
    if fault == "shape":
        meta["input_top_logprobs_shape"] = draw(st.sampled_from([None, [1], [1, 2, 3], [-1, 2], [1.0, 2], [9, 1]]))
    elif fault == "prefix":
        meta["input_top_logprobs_null_prefix"] = draw(st.sampled_from([None, -1, 1.5, "x", 10**9]))
    elif fault == "positions":
        meta["input_token_logprobs"] = draw(st.sampled_from([None, [], [[None, 1, None]] * 9]))
    elif fault in ("value", "id") and isinstance(meta.get("input_top_logprobs_val_flat"), list):
        key = "input_top_logprobs_val_flat" if fault == "value" else "input_top_logprobs_idx_flat"
        if not isinstance(meta.get(key), list):  # an earlier fault left only the values
            meta[key] = [_fresh(draw, _ODD_VALUES + [2**32, 0.5])]
        elif meta[key]:
            meta[key][draw(st.integers(0, len(meta[key]) - 1))] = _fresh(draw, _ODD_VALUES + [2**32, 0.5])
        else:
            meta[key].append(1)
    elif fault == "b64" and "input_top_logprobs_val_flat_b64" in meta:
        key = draw(st.sampled_from(["input_top_logprobs_val_flat_b64", "input_top_logprobs_idx_flat_b64"]))
        meta[key] = draw(st.sampled_from(["x", "AAAA", "/////w==", "", 5, "AAAAAAAA"]))
    elif fault == "dtype" and "input_top_logprobs_val_flat_b64" in meta:
        meta["input_top_logprobs_idx_flat_b64_dtype"] = draw(st.sampled_from(["int64", None, "float32"]))
    else:
        meta["input_top_logprobs_val_flat"] = [-0.5]


def _mutate_triple_rows(draw, meta):
    """A fault (or two) in SGLang's ``output_top_logprobs``: an odd list or row, an odd
    triple, an odd logprob or id, a repeated or positive candidate."""
    rows = meta.get("output_top_logprobs")
    if not isinstance(rows, list) or not rows or draw(st.integers(0, 6)) == 0:
        meta["output_top_logprobs"] = draw(st.sampled_from([None, [], "x", {}, [[]], [None]]))
        return
    for _ in range(draw(st.integers(1, 2))):
        r = draw(st.integers(0, len(rows) - 1))
        row = rows[r]
        if not isinstance(row, list) or not row or draw(st.integers(0, 5)) == 0:
            rows[r] = draw(st.sampled_from([None, [], "x", {}, [None], 3]))
            continue
        at = draw(st.integers(0, len(row) - 1))
        fault = draw(st.sampled_from(["odd", "short", "long", "logprob", "id", "repeat", "positive"]))
        triple = row[at]
        if fault == "odd" or not isinstance(triple, list) or len(triple) < 2:
            row[at] = draw(st.sampled_from([None, 1, "x", [], [1], {"a": 1}]))
        elif fault == "short":
            row[at] = triple[:2] if draw(st.booleans()) else triple[:1]
        elif fault == "long":
            row[at] = [*triple[:3], None, None][: draw(st.sampled_from([3, 4]))]
        elif fault == "logprob":
            triple[0] = _fresh(draw, _ODD_VALUES)
        elif fault == "id":
            triple[1] = _fresh(draw, _ODD_VALUES + [2**32, -1, 7.0])
        elif fault == "repeat":
            row.insert(draw(st.integers(0, len(row))), list(triple))
        else:
            triple[0] = draw(st.sampled_from([1e-5, 0.5, 2]))


def _mutate_keyed_rows(draw, rows):
    """A fault (or two) in completions' ``top_logprobs`` objects: an odd row, a text key, a
    key naming an id twice ("token_id:07"), an odd or positive logprob."""
    for _ in range(draw(st.integers(1, 2))):
        r = draw(st.integers(0, len(rows) - 1))
        row = rows[r]
        if not isinstance(row, dict) or not row or draw(st.integers(0, 5)) == 0:
            rows[r] = draw(st.sampled_from([None, {}, [], "x", 3, [["token_id:1", -1.0]]]))
            continue
        key = draw(st.sampled_from(list(row)))
        fault = draw(st.sampled_from(["text", "leading-zero", "logprob", "positive", "odd-key"]))
        if fault == "text":
            row[" w" + key[-1:]] = row.pop(key)
        elif fault == "leading-zero" and key.startswith("token_id:"):
            row["token_id:0" + key[9:]] = row[key]
        elif fault == "odd-key":
            row[draw(st.sampled_from(["token_id:", "token_id:-1", "token_id:4294967296", "token_id:1a", ""]))] = -1.0
        elif fault == "logprob":
            row[key] = _fresh(draw, _ODD_VALUES)
        else:
            row[key] = draw(st.sampled_from([1e-5, 0.5, 2]))


def _mutate_candidates(draw, entry):
    """One fault (or two) in a logprob record's ``top_logprobs``, whose rules apply candidate
    by candidate: an odd row, an odd candidate, an odd key of one, a repeated or positive
    candidate."""
    if not isinstance(entry, dict):
        return
    row = entry.get("top_logprobs")
    if not isinstance(row, list) or not row or draw(st.integers(0, 5)) == 0:
        entry["top_logprobs"] = draw(st.sampled_from([None, [], "x", {}, [None], 3]))
        return
    for _ in range(draw(st.integers(1, 2))):
        at = draw(st.integers(0, len(row) - 1))
        fault = draw(st.sampled_from(["odd", "key", "drop", "repeat", "positive"]))
        if fault == "odd":
            row[at] = draw(st.sampled_from([None, 1, "x", [], [1, 2]]))
        elif not isinstance(row[at], dict):
            continue
        elif fault == "key":
            row[at][draw(st.sampled_from(["logprob", "token", "token_id"]))] = _fresh(draw, _ODD_VALUES)
        elif fault == "drop":
            row[at].pop(draw(st.sampled_from(["logprob", "token", "token_id"])), None)
        elif fault == "repeat":
            row.insert(draw(st.integers(0, len(row))), copy.deepcopy(row[at]))
        else:
            row[at]["logprob"] = draw(st.sampled_from([1e-5, 0.5, 2]))


def _mutate_engine_data(draw, doc, data) -> None:
    """One fault in Dynamo's engine data: an element changed, dropped or added, a member odd or
    gone, Dynamo's -1e30 stand-in, an unfinished engine, routing that breaks its reader's rules,
    the object itself not one."""
    key = draw(st.sampled_from(["completion_token_ids", "completion_logprobs", "prompt_token_ids", "finished",
                                "routed_experts", "engine_data", "nvext", "nvext_ids", "nvext_routed"]))
    odd = draw(st.sampled_from([None, "x", [], {}, -1, 2**32, 1.5, True, -9999.0, -1e30, 0.5, [1, 2], "AAAA"]))
    value = data.get(key)
    if key == "nvext_ids":  # nvext.completion_token_ids: one changed, one more (an EOS), or odd
        ids = doc["nvext"].get("completion_token_ids") if isinstance(doc["nvext"], dict) else None
        if isinstance(ids, list) and ids and draw(st.booleans()):
            if draw(st.booleans()):
                ids[draw(st.integers(0, len(ids) - 1))] = odd
            else:
                ids.append(151645)
        elif isinstance(doc["nvext"], dict):
            doc["nvext"]["completion_token_ids"] = odd
    elif key == "nvext_routed":  # the frontend's copy of the routing: another value, or odd
        if isinstance(doc["nvext"], dict):
            sent = doc["nvext"].get("routed_experts")
            doc["nvext"]["routed_experts"] = (sent[:-4] if isinstance(sent, str) and draw(st.booleans()) else
                                              dict(sent, start=1) if isinstance(sent, dict) else odd)
    elif isinstance(value, str) and draw(st.booleans()):  # an SGLang worker's routing string, cut or grown
        data[key] = draw(st.sampled_from([value[:-4], value + "AAAAAA==", value[:-1]]))
    elif key == "engine_data":
        if isinstance(doc["nvext"], dict):  # an earlier fault may have replaced nvext
            doc["nvext"]["engine_data"] = odd
    elif key == "nvext":
        doc["nvext"] = odd
    elif key == "finished":
        data[key] = draw(st.sampled_from([False, None, "yes"]))
    elif isinstance(value, list) and value and draw(st.booleans()):
        at = draw(st.integers(0, len(value) - 1))
        change = draw(st.sampled_from(["set", "drop", "append"]))
        if change == "set":
            changed = value[at] + 1 if type(value[at]) is int else odd  # an earlier fault may have set it odd
            value[at] = odd if draw(st.booleans()) else (changed if key != "completion_logprobs" else -1e30)
        elif change == "drop":
            del value[at]
        else:
            value.append(151645 if key != "completion_logprobs" else -0.5)  # a trailing EOS the choice lacks
    elif isinstance(value, dict) and draw(st.booleans()):
        member = draw(st.sampled_from(["data", "shape", "start", "dtype"]))
        value[member] = draw(st.sampled_from([odd, "int32", "torch.int32", [1, 2, 2], 3, "AAAA"]))
    elif draw(st.booleans()):
        data.pop(key, None)
    else:
        data[key] = odd


def _mutate_routing(draw, doc, choice) -> None:
    """One fault in vLLM's routing replay: a row short or extra, an id out of range, an array
    of another rank or dtype, lists that are ragged or not ints, base64 that is not."""
    where, field = draw(st.sampled_from([(choice, "routed_experts"), (doc, "prompt_routed_experts")]))
    value = where.get(field)
    fault = draw(st.sampled_from(["rows", "id", "rank", "dtype", "odd"]))
    if isinstance(value, str) and fault != "odd":
        array = np.load(io.BytesIO(base64.b64decode(value)))
        if fault == "rows":
            array = array[:-1] if draw(st.booleans()) and len(array) else np.concatenate([array, array[:1]])
        elif fault == "id" and array.size:
            array = array.astype(np.int32)
            array.reshape(-1)[draw(st.integers(0, array.size - 1))] = draw(st.sampled_from([-1, 8, 2**30]))
        elif fault == "rank":
            array = array.reshape(array.shape[0], array.shape[1] * array.shape[2])
        elif fault == "dtype":
            array = array.astype(draw(st.sampled_from([np.float32, np.int64, np.int16])))
        where[field] = npy(array)
    elif isinstance(value, list) and fault != "odd":
        if fault == "rows" and value and draw(st.booleans()):
            value.append(value[0])
        elif fault == "rows" and value:
            value.pop()
        elif fault == "id" and value:
            value[draw(st.integers(0, len(value) - 1))][0][0] = draw(st.sampled_from([-1, 8, 2**31, 2**64, True, 1.5, "1"]))
        elif fault in ("rank", "dtype") and value:
            value[draw(st.integers(0, len(value) - 1))] = draw(st.sampled_from([[1, 2], [[1]], 3, None]))
    else:
        where[field] = draw(st.sampled_from([None, 3, "x", "AAAA", "!!==", {}, [], [[[]]], [[1]]]))


@st.composite
def mutated_openai(draw):
    fmt = draw(st.sampled_from(FORMATS))
    with_heads = draw(st.sampled_from([None, 1]))  # candidates for a head of 1 (and 2 more)
    evs = draw(st.lists(evidences(max_tokens=8, k=with_heads), min_size=1, max_size=3))
    doc = fmt.build(evs)
    routed = (fmt.name.startswith("vllm") or fmt.name.startswith("sglang")) and draw(st.booleans())
    if routed and fmt.name.startswith("sglang"):
        add_sglang_routing(doc, evs, draw(st.booleans()), seed=draw(st.integers(0, 9)))
        if draw(st.booleans()):
            meta = draw(st.sampled_from(fmt.choices(doc)))["meta_info"]
            key = draw(st.sampled_from(["routed_experts", "indexer_topk"]))
            meta[key] = draw(st.sampled_from([meta[key][:-4], meta[key] + "AAAAAA==", "AAA=", "!!", 3, None,
                                              base64.b64encode(b"\xff\xff\xff\xff" * 12).decode()]))
    elif routed:
        add_routing(doc, evs, draw(st.sampled_from(ROUTING_FORMS)), seed=draw(st.integers(0, 9)))
        if draw(st.booleans()):
            _mutate_routing(draw, doc, draw(st.sampled_from(doc["choices"])))
    if not fmt.name.startswith("sglang") and draw(st.integers(0, 2)) == 0:
        # NVIDIA Dynamo's engine data (its own routing, the choices' being vLLM's), faults and all.
        engine_routed = not routed and draw(st.booleans())
        data = add_engine_data(doc, evs, engine_routed, seed=draw(st.integers(0, 9)), nvext_ids=draw(st.booleans()),
                               sglang=draw(st.booleans()), copy=draw(st.booleans()))
        routed = routed or engine_routed
        for _ in range(draw(st.integers(0, 2))):
            _mutate_engine_data(draw, doc, data)
    for _ in range(draw(st.integers(0, 3))):
        choice = draw(st.sampled_from(fmt.choices(doc)))
        if fmt.name.startswith("sglang"):
            _mutate_sglang(draw, choice)
            continue
        logprobs = choice.get("logprobs")
        kind = draw(st.sampled_from(["value", "drop", "replace_array", "logprobs", "top", "ids", "entry",
                                     "entry", "candidate", "candidate"]))
        content = logprobs.get("content") if isinstance(logprobs, dict) else None
        raw_output = choice.get("raw_output")
        if isinstance(raw_output, dict) and draw(st.booleans()):
            if isinstance(raw_output.get("completion_logprobs"), dict):
                content = raw_output["completion_logprobs"].get("content")
            if kind == "ids":
                raw_output["completion_token_ids"] = draw(st.sampled_from([None, [], "x", [1.5], [-1], [2**32]]))
                continue
        if kind == "entry" and isinstance(content, list) and content:
            at = draw(st.integers(0, len(content) - 1))
            entry = content[at]
            key = draw(st.sampled_from(["logprob", "sampling_logprob", "token", "token_id", None]))
            if key is None:
                content[at] = draw(st.sampled_from([None, 1, "x", []]))
            elif isinstance(entry, dict) and draw(st.booleans()):
                entry.pop(key, None)
            elif isinstance(entry, dict):
                entry[key] = _fresh(draw, _ODD_VALUES)
        elif kind == "candidate" and isinstance(content, list) and content:
            _mutate_candidates(draw, content[draw(st.integers(0, len(content) - 1))])
        elif kind == "candidate" and isinstance(logprobs, dict) and isinstance(logprobs.get("top_logprobs"), list) \
                and logprobs["top_logprobs"]:
            _mutate_keyed_rows(draw, logprobs["top_logprobs"])
        elif kind in ("value", "drop", "replace_array") and isinstance(logprobs, dict):
            name = draw(st.sampled_from([a for a in _ARRAYS if isinstance(logprobs.get(a), list)] or ["tokens"]))
            array = logprobs.get(name)
            if kind == "replace_array" or not isinstance(array, list):
                logprobs[name] = draw(st.sampled_from([None, "x", 3, {}, []]))
            elif array and kind == "value":
                array[draw(st.integers(0, len(array) - 1))] = _fresh(draw, _ODD_VALUES)
            elif array:
                del array[draw(st.integers(0, len(array) - 1))]
        elif kind == "logprobs":
            choice["logprobs"] = draw(st.sampled_from([None, [], "x", {}]))
        elif kind == "top":
            choice["top_logprobs_extra"] = {"token_ids": [1, 2]}  # same names at another path
        elif kind == "ids":
            value = draw(st.sampled_from([None, [], "x", [1.5], [-1], [2**32], [True]]))
            choice[draw(st.sampled_from(["token_ids", "prompt_token_ids"]))] = value
    raw = spell(doc, draw(st.sampled_from(SPELLINGS)))
    if draw(st.booleans()):  # a repeated key: the last one wins in both
        raw = raw.replace(b'"logprobs":', b'"logprobs": {"tokens": [1], "token_logprobs": [null]}, "logprobs":', 1)
    if draw(st.booleans()):
        raw = raw.replace(b'"logprob":', b'"logprob": "x", "token_id": 1, "logprob":', 1)
    if draw(st.integers(0, 3)) == 0:  # a keyed head row that repeats its first key
        raw = re.sub(rb'\{\s*("token_id:[0-9]+")\s*:\s*([^,}]+)', rb"{\1: \2, \1: \2", raw, count=1)
    return fmt, raw, draw(st.sampled_from([None, 8, 9])) if routed else None


@pytest.mark.skipif(_core is None, reason="the compiled core is not built")
@settings(max_examples=600, deadline=None)
@given(case=mutated_openai(), k=st.sampled_from([None, 1, 1]), draw_shape=st.booleans())
def test_core_matches_reference_on_mutated_documents(case, k, draw_shape):
    """Both implementations in one run (no ``impl`` fixture): the outcomes must be equal."""
    fmt, raw, num_experts = case
    name = {CHAT: "parse_chat_completions_response", SGL: "parse_sglang_generate_response"}.get(
        fmt.parse, "parse_completions_response")
    kw = {"top_k": k} if num_experts is None else {"top_k": k, "num_experts": num_experts}
    if draw_shape:  # SGLang's rows, and Dynamo's from an SGLang worker: (2, 2) as the strategies write them
        kw["routed_experts_shape"] = (2, 2)
    expected = openai_outcome(getattr(openai_rules, name), raw, **kw)
    for path in _core.simd_paths():  # scanner, record readers and heads on every path
        with _core.simd_path_forced(path):
            assert openai_outcome(getattr(_core, name), raw, **kw) == expected, path
