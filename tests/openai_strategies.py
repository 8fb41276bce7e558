"""Responses of every server shape the OpenAI-compatible and SGLang parsers read, built from
known per-token evidence, with the accessors a test needs to break one rule at a time, and
hypothesis strategies for that evidence and for the JSON spelling."""

from __future__ import annotations

import base64
import io
import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from hypothesis import strategies as st

from tokenwire.rules import openai as openai_rules

# Token texts that need escaping, collide when decoded, or are empty (an EOS).
TEXTS = ["a", " the", "/", "é", '"', "\n", "\\", "🚀", "", "\ufffd"]


@dataclass
class Evidence:
    """What the engine sampled: ids and logprobs (``values``) per token; with a head, every
    token's candidates as ``(id, logprob)`` in the engine's order (the sampled token among
    them) and the head of ``k`` a correct reader must select."""

    ids: list[int]
    values: list[float]
    prompt: list[int]
    candidates: list[list[tuple[int, float]]] | None = None
    k: int | None = None
    head_ids: list[list[int]] | None = None
    head_logprobs: list[list[float]] | None = None
    # Fireworks: the model's own logprob next to the sampler's (``values``).
    model_values: list[float] = field(default_factory=list)
    # SGLang's sampling mask (kept ids per token, the sampled id among them) and the sampled
    # tokens' renormalized logprobs; its flat prompt top-k: the null prefix, then rows of
    # (ids, logprobs), sent as lists or (``prompt_b64``) base64.
    mask: list[list[int]] | None = None
    sampling: list[float] | None = None
    prompt_prefix: int = 0
    prompt_top: list[list[tuple[int, float]]] | None = None
    prompt_b64: bool = False

    def text(self, t: int) -> str:
        return TEXTS[self.ids[t] % len(TEXTS)]


def evidence(ids: list[int], values: list[float], prompt: list[int] | None = None) -> Evidence:
    return Evidence(list(ids), list(values), list(prompt or [7, 8, 9]), model_values=[v - 0.25 for v in values])


def with_head(ev: Evidence, k: int, weights: list[list[int]]) -> Evidence:
    """Give every token ``len(weights[t])`` candidates, the sampled token first; distinct
    weights make distinct probabilities, so the expected head is unambiguous."""
    ev.k, ev.candidates, ev.head_ids, ev.head_logprobs = k, [], [], []
    for t, row in enumerate(weights):
        total = sum(row) + 1  # leaves some mass outside the candidates
        probs = [w / total for w in row]
        others = [(ev.ids[t] + 1 + j) % 2**32 for j in range(len(row) - 1)]
        cands = list(zip([ev.ids[t], *others], [math.log(p) for p in probs]))
        ev.candidates.append(cands)
        ev.values[t] = cands[0][1]
        ev.model_values[t] = cands[0][1]
        ranked = sorted(cands, key=lambda c: (-c[1], c[0]))[:k]
        ev.head_ids.append([i for i, _ in ranked])
        ev.head_logprobs.append([p for _, p in ranked])
    return ev


# --- each server's shape -------------------------------------------------------------------------


def tid(i: int) -> str:
    return f"token_id:{i}"


def _array_logprobs(ev: Evidence, *, as_ids: bool, token_ids: bool) -> dict[str, Any]:
    tokens = [tid(i) if as_ids else ev.text(t) for t, i in enumerate(ev.ids)]
    top = None
    if ev.candidates is not None:
        top = [{(tid(i) if as_ids else TEXTS[i % len(TEXTS)] + str(i)): p for i, p in row} for row in ev.candidates]
    out: dict[str, Any] = {
        "text_offset": list(range(len(ev.ids))),
        "token_logprobs": list(ev.values),
        "tokens": tokens,
        "top_logprobs": top,
    }
    if token_ids:
        out["token_ids"] = list(ev.ids)
    return out


def _content(ev: Evidence, *, as_ids: bool, fireworks: bool) -> list[dict[str, Any]]:
    entries = []
    for t, i in enumerate(ev.ids):
        entry: dict[str, Any] = {"token": tid(i) if as_ids else ev.text(t), "logprob": ev.values[t], "bytes": None}
        cands = ev.candidates[t] if ev.candidates is not None else []
        entry["top_logprobs"] = [
            {"token": tid(c) if as_ids else TEXTS[c % len(TEXTS)], "logprob": p, "bytes": None} for c, p in cands
        ]
        if fireworks:
            entry.update(token_id=i, logprob=ev.model_values[t], sampling_logprob=ev.values[t], text_offset=t)
            for cand, (c, _) in zip(entry["top_logprobs"], cands):
                cand["token_id"] = c
        entries.append(entry)
    return entries


def _usage(n: int) -> dict[str, Any]:
    return {"prompt_tokens": 3, "total_tokens": 3 + n, "completion_tokens": n}


def _openai_doc(obj: str, choices: list[dict[str, Any]], evs: list[Evidence], **top: Any) -> dict[str, Any]:
    doc = {"id": "cmpl-1", "object": obj, "created": 1, "model": "m", "choices": choices}
    doc.update(top)
    doc["usage"] = _usage(sum(len(ev.ids) for ev in evs))
    return doc


def vllm_completions(evs: list[Evidence], as_ids: bool) -> dict[str, Any]:
    """vLLM ``/v1/completions`` with ``return_token_ids`` (and, ``as_ids``,
    ``return_tokens_as_token_ids``)."""
    choices = [
        {"index": c, "text": "".join(ev.text(t) for t in range(len(ev.ids))),
         "logprobs": _array_logprobs(ev, as_ids=as_ids, token_ids=False), "finish_reason": "stop",
         "stop_reason": None, "token_ids": list(ev.ids), "prompt_logprobs": None,
         "prompt_token_ids": list(ev.prompt)}
        for c, ev in enumerate(evs)
    ]
    return _openai_doc("text_completion", choices, evs, system_fingerprint=None, kv_transfer_params=None)


def vllm_chat(evs: list[Evidence], as_ids: bool) -> dict[str, Any]:
    choices = [
        {"index": c, "message": {"role": "assistant", "content": "x/y", "tool_calls": []},
         "logprobs": {"content": _content(ev, as_ids=as_ids, fireworks=False)},
         "finish_reason": "stop", "stop_reason": None, "token_ids": list(ev.ids)}
        for c, ev in enumerate(evs)
    ]
    return _openai_doc("chat.completion", choices, evs, prompt_logprobs=None, prompt_token_ids=list(evs[0].prompt))


def npy(array: np.ndarray) -> str:
    """A routing array as vLLM's server sends it: a whole ``.npy`` file, base64."""
    buffer = io.BytesIO()
    np.save(buffer, array)
    return base64.b64encode(buffer.getvalue()).decode()


ROUTING_FORMS = ["npy", "npy_long", "split", "split_npy"]


def add_routing(doc: dict[str, Any], evs: list[Evidence], form: str, experts: int = 8, seed: int = 0) -> None:
    """vLLM's MoE routing replay on a vLLM document (ids below ``experts``): ``npy``, a whole
    ``.npy`` per choice of one row per prompt and completion token but the last (``npy_long``:
    48 layers of top-8, decoded as the scan passes it); ``split``, vLLM 0.21's lists, the
    prompt's rows at the top level and the completion's but the last on each choice
    (``split_npy``: the same as ``.npy`` files)."""
    rng = np.random.default_rng(seed)
    layers, topk = (48, 8) if form == "npy_long" else (2, 2)

    def rows(count: int) -> np.ndarray:
        return rng.integers(0, experts, (max(count, 0), layers, topk)).astype(np.uint8 if experts <= 256 else np.uint16)

    encode = npy if form != "split" else (lambda array: array.tolist())
    for choice, ev in zip(doc["choices"], evs):
        prompt = choice.get("prompt_token_ids", doc.get("prompt_token_ids"))
        count = len(ev.ids) - 1 if form.startswith("split") else len(prompt) + len(ev.ids) - 1
        choice["routed_experts"] = encode(rows(count))
    if form.startswith("split"):
        doc["prompt_routed_experts"] = encode(rows(len(doc["choices"][0].get("prompt_token_ids", doc.get("prompt_token_ids")))))


def add_sglang_routing(doc: Any, evs: list[Evidence], long: bool = False, seed: int = 0) -> None:
    """SGLang's routing replay on an SGLang document (ids below 8): each item's
    ``meta_info.routed_experts`` (2 layers of top-2; ``long``: 48 of top-8) and
    ``indexer_topk`` (5 a row, -1 among them), base64 of bare int32 rows, one per prompt and
    completion token but the last."""
    rng = np.random.default_rng(seed)
    layers, topk = (48, 8) if long else (2, 2)
    for item, ev in zip(doc if isinstance(doc, list) else [doc], evs):
        rows = max(len(ev.prompt) + len(ev.ids) - 1, 0)
        routed = rng.integers(0, 8, (rows, layers, topk)).astype("<i4")
        indexer = rng.integers(-1, 50, (rows, 5)).astype("<i4")
        item["meta_info"]["routed_experts"] = base64.b64encode(routed.tobytes()).decode()
        item["meta_info"]["indexer_topk"] = base64.b64encode(indexer.tobytes()).decode()


def add_engine_data(doc: dict[str, Any], evs: list[Evidence], routed: bool = False, seed: int = 0,
                    nvext_ids: bool = False, sglang: bool = False, copy: bool = False) -> dict[str, Any]:
    """NVIDIA Dynamo's engine channel (the request's ``nvext.extra_fields: ["engine_data"]``) on a
    chat or completions document, as its vLLM worker and frontend lay it out: ``nvext`` beside
    ``choices``, ``engine_data`` what the worker accumulated for a choice (the last one's, as
    Dynamo keeps the last finished choice's): ``completion_token_ids``, ``finished``,
    ``completion_logprobs``, ``prompt_token_ids`` and, with ``routed``, ``routed_experts`` as
    ``{data, shape, start, dtype}``, ``data`` the base64 of the raw uint8 array (ids below 8,
    2 layers of top-2, a row per prompt and completion token but the last); with ``nvext_ids``,
    the same ids at ``nvext``'s top too (``extra_fields: ["completion_token_ids"]``); with
    ``sglang``, the routing as an SGLang worker passes it on (SGLang's bare base64 int32); with
    ``copy``, the frontend's copy of it at ``nvext.routed_experts``. Returns it."""
    ev = evs[-1]
    choice = doc["choices"][-1]
    prompt = list(choice.get("prompt_token_ids") or doc.get("prompt_token_ids") or ev.prompt)
    data: dict[str, Any] = {"completion_logprobs": list(ev.values), "completion_token_ids": list(ev.ids),
                            "finished": True, "prompt_token_ids": prompt}
    if routed:
        rows = np.random.default_rng(seed).integers(0, 8, (max(len(prompt) + len(ev.ids) - 1, 0), 2, 2))
        array = rows.astype("<i4" if sglang else np.uint8)
        encoded = base64.b64encode(array.tobytes()).decode()
        data["routed_experts"] = encoded if sglang else {"data": encoded, "dtype": "uint8",
                                                         "shape": list(array.shape), "start": 0}
    doc["nvext"] = {"engine_data": data}
    if routed and copy:
        doc["nvext"]["routed_experts"] = data["routed_experts"]
    if nvext_ids:
        doc["nvext"]["completion_token_ids"] = list(ev.ids)
    return data


def _raw_output(ev: Evidence, with_logprobs: bool) -> dict[str, Any]:
    out: dict[str, Any] = {"prompt_fragments": ["p"], "prompt_token_ids": list(ev.prompt),
                           "completion": "c", "completion_token_ids": list(ev.ids)}
    if with_logprobs:
        out["completion_logprobs"] = {"content": _content(ev, as_ids=False, fireworks=True)}
    return out


def fireworks_arrays(evs: list[Evidence]) -> dict[str, Any]:
    """Fireworks ``/v1/completions`` with an int ``logprobs`` (ids in ``logprobs.token_ids``)
    and ``raw_output``."""
    choices = [
        {"index": c, "text": "t", "logprobs": _array_logprobs(ev, as_ids=False, token_ids=True),
         "finish_reason": "stop", "raw_output": _raw_output(ev, False)}
        for c, ev in enumerate(evs)
    ]
    return _openai_doc("text_completion", choices, evs, perf_metrics={})


def fireworks_content(evs: list[Evidence], chat: bool) -> dict[str, Any]:
    """Fireworks with ``logprobs: true``: ``logprobs.content[]`` entries carry ``token_id`` and
    ``sampling_logprob``; ``raw_output`` repeats them."""
    choices = []
    for c, ev in enumerate(evs):
        choice: dict[str, Any] = {"index": c, "finish_reason": "stop",
                                  "logprobs": {"content": _content(ev, as_ids=False, fireworks=True)},
                                  "raw_output": _raw_output(ev, True)}
        choice.update({"message": {"role": "assistant", "content": "m"}} if chat else {"text": "t"})
        choices.append(choice)
    return _openai_doc("chat.completion" if chat else "text_completion", choices, evs)


def fireworks_raw_output(evs: list[Evidence]) -> dict[str, Any]:
    """Fireworks ``/v1/completions`` with only ``raw_output: true``."""
    choices = [{"index": c, "text": "t", "logprobs": None, "finish_reason": "length",
                "raw_output": _raw_output(ev, True)} for c, ev in enumerate(evs)]
    return _openai_doc("text_completion", choices, evs)


def together(evs: list[Evidence], chat: bool) -> dict[str, Any]:
    """Together: ``logprobs = {token_ids, tokens, token_logprobs, top_logprobs}``."""
    choices = []
    for c, ev in enumerate(evs):
        logprobs = _array_logprobs(ev, as_ids=False, token_ids=True)
        del logprobs["text_offset"]
        choice: dict[str, Any] = {"index": c, "seed": 5, "finish_reason": "eos", "logprobs": logprobs}
        choice.update({"message": {"role": "assistant", "content": "m"}} if chat else {"text": "t"})
        choices.append(choice)
    return _openai_doc("chat.completion" if chat else "text.completion", choices, evs, prompt=[])


def sglang(evs: list[Evidence], as_list: bool) -> Any:
    """SGLang ``/generate`` with ``return_logprob`` (and ``top_logprobs_num``)."""
    items = []
    for ev in evs:
        meta: dict[str, Any] = {
            "id": "req-1", "finish_reason": {"type": "stop", "matched": 2}, "prompt_tokens": len(ev.prompt),
            "completion_tokens": len(ev.ids), "cached_tokens": 0,
            "output_token_logprobs": [[v, i, ev.text(t)] for t, (i, v) in enumerate(zip(ev.ids, ev.values))],
            "input_token_logprobs": [[None, ev.prompt[0], None]],
        }
        if ev.candidates is not None:
            meta["output_top_logprobs"] = [[[p, c, None] for c, p in row] for row in ev.candidates]
        if ev.mask is not None:
            meta.update(output_token_sampling_mask=ev.mask, output_token_sampling_logprobs=ev.sampling,
                        output_token_sampling_mask_length=len(ev.mask))
        if ev.prompt_top is not None:
            meta.update(sglang_prompt_top(ev.prompt_prefix, ev.prompt_top, ev.prompt_b64))
            meta["input_token_logprobs"] = [[None, 1, None]] * ev.prompt_prefix + [[-0.5, 1, None]] * len(ev.prompt_top)
        items.append({"text": "t", "output_ids": list(ev.ids), "meta_info": meta})
    return items if as_list or len(items) > 1 else items[0]


def sglang_prompt_top(prefix: int, rows: list[list[tuple[int, float]]], b64: bool) -> dict[str, Any]:
    """SGLang's flat prompt top-k fields (``_build_flat_input_top_logprobs_fields``): the rows
    after the null prefix flattened, ``input_top_logprobs_shape`` their own [rows, k]."""
    k = len(rows[0]) if rows else 0
    ids = [i for row in rows for i, _ in row]
    values = [v for row in rows for _, v in row]
    fields: dict[str, Any] = {}
    if b64:
        fields["input_top_logprobs_val_flat_b64"] = base64.b64encode(np.asarray(values, "<f4").tobytes()).decode()
        fields["input_top_logprobs_idx_flat_b64"] = base64.b64encode(np.asarray(ids, "<i4").tobytes()).decode()
        fields["input_top_logprobs_val_flat_b64_dtype"] = "float32"
        fields["input_top_logprobs_idx_flat_b64_dtype"] = "int32"
    else:
        fields["input_top_logprobs_val_flat"] = values
        fields["input_top_logprobs_idx_flat"] = ids
    fields["input_top_logprobs_shape"] = [len(rows), k]
    fields["input_top_logprobs_null_prefix"] = prefix
    return fields


# --- formats: a builder, its parser, and where each rule's evidence sits -------------------------


@dataclass
class Format:
    name: str
    build: Callable[[list[Evidence]], Any]
    parse: Callable[..., Any]
    heads: str  # "ids": a head is readable; "text": keyed by text (unusable); "dict-ids"/"dict-text": legacy objects
    # accessors on one choice (or SGLang item)
    set_value: Callable[[dict[str, Any], int, Any], None]
    second_ids: Callable[[dict[str, Any]], list[int]]  # an id list besides the records' ids
    strip_ids: Callable[[dict[str, Any]], None]
    set_record_id: Callable[[dict[str, Any], int, Any], None] | None
    text_heads: Callable[[dict[str, Any]], None]
    sampling: bool = False  # logprobs are read from `sampling_logprob`
    one_source: bool = False  # ids in one place only: no second source to disagree with

    def choices(self, doc: Any) -> list[dict[str, Any]]:
        if isinstance(doc, list):
            return doc
        return doc["choices"] if "choices" in doc else [doc]

    def set_usage(self, doc: Any, value: Any) -> None:
        if self.name.startswith("sglang"):
            self.choices(doc)[0]["meta_info"]["completion_tokens"] = value
        else:
            doc["usage"]["completion_tokens"] = value


def _arrays_value(choice: dict[str, Any], t: int, v: Any) -> None:
    choice["logprobs"]["token_logprobs"][t] = v


def _content_value(key: str, where: str = "logprobs") -> Callable[[dict[str, Any], int, Any], None]:
    def setter(choice: dict[str, Any], t: int, v: Any) -> None:
        holder = choice["logprobs"] if where == "logprobs" else choice["raw_output"]["completion_logprobs"]
        holder["content"][t][key] = v
    return setter


def _strip(*paths: str) -> Callable[[dict[str, Any]], None]:
    def strip(choice: dict[str, Any]) -> None:
        for path in paths:
            *parents, last = path.split(".")
            node: Any = choice
            for p in parents:
                node = node.get(p) if isinstance(node, dict) else None
            if isinstance(node, dict):
                node.pop(last, None)
    return strip


def _strip_content_ids(*holders: str) -> Callable[[dict[str, Any]], None]:
    def strip(choice: dict[str, Any]) -> None:
        for holder in holders:
            node: Any = choice
            for p in holder.split("."):
                node = node.get(p) if isinstance(node, dict) else None
            for entry in node or []:
                entry.pop("token_id", None)
    return strip


def _both(*fns: Callable[[dict[str, Any]], None]) -> Callable[[dict[str, Any]], None]:
    def run(choice: dict[str, Any]) -> None:
        for fn in fns:
            fn(choice)
    return run


def _tokens_id(choice: dict[str, Any], t: int, v: Any) -> None:
    choice["logprobs"]["tokens"][t] = tid(v) if isinstance(v, int) else v


def _content_token(choice: dict[str, Any], t: int, v: Any) -> None:
    choice["logprobs"]["content"][t]["token"] = tid(v) if isinstance(v, int) else v


def _content_token_id(where: str) -> Callable[[dict[str, Any], int, Any], None]:
    def setter(choice: dict[str, Any], t: int, v: Any) -> None:
        node: Any = choice
        for p in where.split("."):
            node = node[p]
        node[t]["token_id"] = v
    return setter


def _texts_in_dicts(choice: dict[str, Any]) -> None:
    rows = choice["logprobs"]["top_logprobs"]
    choice["logprobs"]["top_logprobs"] = [{f"w{j}": p for j, p in enumerate(row.values())} for row in rows]


def _texts_in_content(choice: dict[str, Any]) -> None:
    for entry in choice["logprobs"]["content"]:
        for j, cand in enumerate(entry["top_logprobs"]):
            cand["token"] = f"w{j}"
            cand.pop("token_id", None)


def _sglang_value(item: dict[str, Any], t: int, v: Any) -> None:
    item["meta_info"]["output_token_logprobs"][t][0] = v


def _sglang_record(item: dict[str, Any], t: int, v: Any) -> None:
    item["meta_info"]["output_token_logprobs"][t][1] = v


def _sglang_text_heads(item: dict[str, Any]) -> None:
    for row in item["meta_info"]["output_top_logprobs"]:
        for cand in row:
            cand[1] = None  # a candidate named only by its text


def _sglang_strip(item: dict[str, Any]) -> None:
    item.pop("output_ids")
    item["meta_info"].pop("output_token_logprobs")


class _Parsers:
    """Whose parse functions the formats call: the pure-Python rules (``tokenwire.rules.openai``) or the
    compiled core (``_core``); tests set ``module``."""

    module: Any = openai_rules


PARSERS = _Parsers()


def C(raw: Any, **kw: Any) -> Any:
    return PARSERS.module.parse_completions_response(raw, **kw)


def CHAT(raw: Any, **kw: Any) -> Any:
    return PARSERS.module.parse_chat_completions_response(raw, **kw)


def SGL(raw: Any, **kw: Any) -> Any:
    return PARSERS.module.parse_sglang_generate_response(raw, **kw)


FORMATS = [
    Format("vllm_completions", lambda e: vllm_completions(e, False), C, "dict-text", _arrays_value,
           lambda c: c["token_ids"], _strip("token_ids"), None, _texts_in_dicts, one_source=True),
    Format("vllm_completions_token_strings", lambda e: vllm_completions(e, True), C, "dict-ids", _arrays_value,
           lambda c: c["token_ids"], _both(_strip("token_ids"), lambda c: c["logprobs"].update(tokens=["x"] * len(c["logprobs"]["tokens"]))),
           _tokens_id, _texts_in_dicts),
    Format("vllm_chat", lambda e: vllm_chat(e, False), CHAT, "text", _content_value("logprob"),
           lambda c: c["token_ids"], _strip("token_ids"), None, _texts_in_content, one_source=True),
    Format("vllm_chat_token_strings", lambda e: vllm_chat(e, True), CHAT, "ids", _content_value("logprob"),
           lambda c: c["token_ids"], _both(_strip("token_ids"), lambda c: [e.update(token="x") for e in c["logprobs"]["content"]]),
           _content_token, _texts_in_content),
    Format("fireworks_completions_arrays", fireworks_arrays, C, "dict-text", _arrays_value,
           lambda c: c["raw_output"]["completion_token_ids"],
           _strip("logprobs.token_ids", "raw_output.completion_token_ids"), None, _texts_in_dicts),
    Format("fireworks_completions_content", lambda e: fireworks_content(e, False), C, "ids",
           _content_value("sampling_logprob"), lambda c: c["raw_output"]["completion_token_ids"],
           _both(_strip("raw_output.completion_token_ids"), _strip_content_ids("logprobs.content", "raw_output.completion_logprobs.content")),
           _content_token_id("logprobs.content"), _texts_in_content, sampling=True),
    Format("fireworks_chat_content", lambda e: fireworks_content(e, True), CHAT, "ids",
           _content_value("sampling_logprob"), lambda c: c["raw_output"]["completion_token_ids"],
           _both(_strip("raw_output.completion_token_ids"), _strip_content_ids("logprobs.content", "raw_output.completion_logprobs.content")),
           _content_token_id("logprobs.content"), _texts_in_content, sampling=True),
    Format("fireworks_raw_output", fireworks_raw_output, C, "none",
           _content_value("sampling_logprob", "raw_output"), lambda c: c["raw_output"]["completion_token_ids"],
           _both(_strip("raw_output.completion_token_ids"), _strip_content_ids("raw_output.completion_logprobs.content")),
           _content_token_id("raw_output.completion_logprobs.content"), lambda c: None, sampling=True),
    Format("together_completions", lambda e: together(e, False), C, "dict-text", _arrays_value,
           lambda c: c["logprobs"]["token_ids"], _strip("logprobs.token_ids"), None, _texts_in_dicts, one_source=True),
    Format("together_chat", lambda e: together(e, True), CHAT, "dict-text", _arrays_value,
           lambda c: c["logprobs"]["token_ids"], _strip("logprobs.token_ids"), None, _texts_in_dicts, one_source=True),
    Format("sglang", lambda e: sglang(e, False), SGL, "ids", _sglang_value,
           lambda c: c["output_ids"], _sglang_strip, _sglang_record, _sglang_text_heads),
    Format("sglang_list", lambda e: sglang(e, True), SGL, "ids", _sglang_value,
           lambda c: c["output_ids"], _sglang_strip, _sglang_record, _sglang_text_heads),
]
BY_NAME = {f.name: f for f in FORMATS}


# --- JSON spellings ------------------------------------------------------------------------------

_KEYS = ["token_ids", "logprobs", "token_logprobs", "tokens", "content", "token_id", "sampling_logprob",
         "top_logprobs", "output_ids", "meta_info", "output_token_logprobs", "completion_token_ids", "choices",
         "output_token_sampling_mask", "output_token_sampling_logprobs", "input_top_logprobs_val_flat",
         "input_top_logprobs_idx_flat_b64", "nvext", "engine_data", "completion_logprobs"]


def spell(document: Any, spelling: str) -> bytes:
    """One document in one of several legal JSON spellings."""
    if spelling == "spaced":
        return json.dumps(document, separators=(" , ", " : ")).encode()
    if spelling == "indented":
        return json.dumps(document, indent=3).encode()
    if spelling == "escaped":
        # ASCII-only, "\/" for every slash, and keys and "token_id:N" strings with a \u escape.
        text = json.dumps(document, ensure_ascii=True).replace("/", "\\/")
        for key in _KEYS:
            text = re.sub(f'"{key}"(\\s*):', lambda m, key=key: f'"\\u{ord(key[0]):04x}{key[1:]}"{m.group(1)}:', text)
        text = text.replace('"token_id:', '"\\u0074oken_id:')
        return text.encode()
    return json.dumps(document, ensure_ascii=False, separators=(",", ":")).encode()


SPELLINGS = ["compact", "spaced", "indented", "escaped"]

# --- hypothesis ----------------------------------------------------------------------------------

token_ids = st.integers(0, 2**32 - 1) | st.integers(0, 40)
logprobs = st.floats(min_value=-60.0, max_value=0.0, allow_nan=False, allow_infinity=False)


@st.composite
def evidences(draw, *, max_tokens: int = 12, k: int | None = None) -> Evidence:
    n = draw(st.integers(0 if k is None else 1, max_tokens))
    ev = evidence(draw(st.lists(token_ids, min_size=n, max_size=n)), draw(st.lists(logprobs, min_size=n, max_size=n)),
                  draw(st.lists(token_ids, min_size=1, max_size=4)))
    if k is not None:
        width = k + 2 + draw(st.integers(0, 2))
        weights = [draw(st.lists(st.integers(1, 10**6), min_size=width, max_size=width, unique=True)) for _ in range(n)]
        with_head(ev, k, weights)
    elif max(ev.ids, default=0) < 2**31 and draw(st.booleans()):
        with_sampling_mask(ev, [draw(st.lists(mask_ids, max_size=3)) for _ in ev.ids],
                           draw(st.lists(logprobs, min_size=n, max_size=n)))
    if draw(st.integers(0, 2)) == 0:
        k_top = draw(st.integers(1, 3))
        rows = [draw(st.lists(token_ids.filter(lambda i: i < 2**31), min_size=k_top, max_size=k_top, unique=True))
                for _ in range(draw(st.integers(0, 4)))]
        ev.prompt_top = [[(i, -float(j)) for j, i in enumerate(row)] for row in rows]
        ev.prompt_prefix, ev.prompt_b64 = draw(st.integers(0, 2)), draw(st.booleans())
    return ev


mask_ids = st.integers(0, 2**31 - 1) | st.integers(0, 40)


def with_sampling_mask(ev: Evidence, others: list[list[int]], sampling: list[float]) -> Evidence:
    """Give every token a kept set: its sampled id among ``others`` (repeats dropped), and a
    renormalized sampling logprob."""
    ev.mask = []
    for t, extra in enumerate(others):
        row = list(dict.fromkeys(i for i in extra if i != ev.ids[t]))
        row.insert(len(row) // 2, ev.ids[t])
        ev.mask.append(row)
    ev.sampling = list(sampling)
    return ev


def fault_at(draw: Any, target: dict[str, Any], key: str, value: Any) -> None:
    """A fault at ``target[key]``: when it is a non-empty list (and a draw says so), one element
    replaced by ``value`` or dropped; otherwise the value itself replaced by ``value``."""
    if isinstance(target.get(key), list) and target[key] and draw(st.booleans()):
        at = draw(st.integers(0, len(target[key]) - 1))
        if draw(st.booleans()):
            target[key][at] = value
        else:
            del target[key][at]
    else:
        target[key] = value
