"""Shared by the fuzz targets: seeds from the sample workload, and the differential oracle."""

from __future__ import annotations

import json
from pathlib import Path

import _collide

from tokenwire import MalformedResponseError, _core, samples

PATHS = _core.simd_paths()


def write_seeds(directory: Path) -> None:
    """Small valid responses of every transport, plus the adversarial corpus."""
    directory.mkdir(parents=True, exist_ok=True)
    for i, transport in enumerate(("native", "packed", "compact", "top_k")):
        for mask in (None, "list", "csr"):
            ev = samples.evidence(3, 4, seed=i, support=mask is not None)
            routed = samples.routing(3, layers=2, topk=2) if transport == "packed" else None
            choice = samples.build_choice(ev, transport=transport, mask=mask, routed=routed)
            (directory / f"{transport}-{mask}.json").write_bytes(samples.dumps(samples.response([choice], prompt_tokens=2)))
    ids, lps = [7, 8, 1 << 20], [-0.5, -1.25, -2.0]
    tokens = [f"token_id:{i}" for i in ids]
    openai = {
        "completions": {"choices": [{"index": 0, "token_ids": ids, "finish_reason": "stop", "logprobs": {
            "tokens": tokens, "token_logprobs": lps, "text_offset": [0, 1, 2],
            "top_logprobs": [{t: v} for t, v in zip(tokens, lps)]}}], "usage": {"completion_tokens": 3}},
        "chat": {"choices": [{"index": 0, "finish_reason": "stop", "logprobs": {"content": [
            {"token": t, "logprob": v, "top_logprobs": [{"token": t, "logprob": v}]} for t, v in zip(tokens, lps)]},
            "raw_output": {"completion_token_ids": ids}}], "prompt_token_ids": [1, 2]},
        "sglang": [{"output_ids": ids, "meta_info": {"completion_tokens": 3,
                                                     "output_token_logprobs": [[v, i, "t"] for i, v in zip(ids, lps)],
                                                     "output_top_logprobs": [[[v, i, None]] for i, v in zip(ids, lps)]}}],
    }
    for name, doc in openai.items():
        (directory / f"openai-{name}.json").write_bytes(json.dumps(doc).encode())
    write_collision_seeds(directory)
    corpus = Path(__file__).parent.parent / "tests" / "corpus"
    for name in json.loads((corpus / "expected.json").read_text()):
        raw = (corpus / f"{name}.json").read_bytes()
        if len(raw) < 100_000:
            (directory / f"corpus-{name}.json").write_bytes(raw)


def write_collision_seeds(directory: Path, n: int = 512) -> None:
    """Rows of ids and keys that collide under the tables' old fixed hashes (_collide.py), each
    behind the selector byte fuzz_generate.py / fuzz_openai.py read first (generate: top_k 1;
    6, 7, 8: completions, chat, SGLang with top_k 1)."""
    values = _collide.distinct_values(n)
    wide, keys = _collide.ids_top_bits_zero64(n), _collide.keys_low_bits_shared(n)
    seeds = {
        "compact-rows": b"\x00" + _collide.compact(_collide.ids_one_cluster32(n), values, 0, 0),
        "compact-candidates": b"\x01" + _collide.compact(wide, values, wide[0], n),
        "native": b"\x01" + _collide.native(wide, values, wide[0], values[0]),
        "keyed": b"\x06" + _collide.completions(keys, values, keys[0], values[0]),
        "chat": b"\x07" + _collide.chat(wide, values, wide[0], values[0]),
        "sglang": b"\x08" + _collide.sglang(wide, values, wide[0], values[0]),
    }
    for name, raw in seeds.items():
        (directory / f"collide-{name}.json").write_bytes(raw)


def _sampled(c) -> tuple:
    """A choice's ids, logprobs and head, as bytes."""
    top = c.completion_top_ids
    return (c.completion_ids.tobytes(), None if c.completion_logprobs is None else c.completion_logprobs.tobytes(),
            None if top is None else (top.offsets.tobytes(), top.values.tobytes(), c.completion_top_logprobs.values.tobytes()))


def _parsed(parse, raw: bytes, top_k, describe):
    """``describe(response)``, or the error's location and reason; any other exception
    propagates (and is a finding)."""
    try:
        r = parse(raw, top_k=top_k)
    except MalformedResponseError as exc:
        reason = "invalid JSON" if exc.reason.startswith("invalid JSON") else exc.reason
        return ("error", exc.choice, exc.field, exc.token, reason)
    return ("ok", describe(r))


def outcome(impl, raw: bytes, top_k):
    """Everything parse_generate_response returns, or where and why it failed."""
    return _parsed(impl.parse_generate_response, raw, top_k, lambda r: ([
        (*_sampled(c),
         None if c.sampling_mask is None else (c.sampling_mask.offsets.tobytes(), c.sampling_mask.values.tobytes()),
         None if c.routed_experts is None else (c.routed_experts.array.tobytes(), c.routed_experts.array.shape, c.routed_experts.start),
         c.raw)
        for c in r.choices
    ], r.payload))


OPENAI_PARSERS = ("parse_completions_response", "parse_chat_completions_response", "parse_sglang_generate_response")


def openai_outcome(parse, raw: bytes, top_k):
    """The same for the OpenAI-compatible and SGLang parsers."""
    return _parsed(parse, raw, top_k, lambda r: (
        [(*_sampled(c), repr(c.raw), c.finish_reason) for c in r.choices],
        repr(r.payload), repr(r.usage), None if r.prompt_token_ids is None else r.prompt_token_ids.tobytes()))
