"""8k-token OpenAI-compatible responses: vLLM ``/v1/completions`` (``logprobs: 1``,
``return_token_ids``), vLLM ``/v1/chat/completions`` and SGLang ``/generate``: exact ids and
aligned logprobs through tokenwire, against ``orjson.loads`` of the same bytes."""

from __future__ import annotations

import numpy as np
import orjson
import pytest

import tokenwire
from tokenwire import samples
from tokenwire.rules import openai as openai_rules

TOKENS = 8192
PROMPT = 512


def completions_response(n: int, *, token_strings: bool, head: int = 1, seed: int = 3) -> bytes:
    """What vLLM sends for ``logprobs: head, return_token_ids: true`` (and, with
    ``token_strings``, ``return_tokens_as_token_ids: true``), serialized as vLLM does: each
    token's ``top_logprobs`` object holds the ``head`` most likely tokens and the sampled one."""
    ev = samples.evidence(n, head, seed=seed)
    rng = np.random.default_rng(seed)
    ids = ev.ids.tolist()
    logprobs = ev.logprobs.astype(np.float64).tolist()
    top_ids = ev.cand_ids[:, :head].tolist()
    top_lps = ev.cand_logprobs[:, :head].astype(np.float64).tolist()

    def token(i: int) -> str:
        return f"token_id:{i}" if token_strings else f" w{i % 7919}"

    tokens = [token(i) for i in ids]
    offsets = np.concatenate([[0], np.cumsum([len(t) for t in tokens])[:-1]]).tolist()
    choice = {
        "index": 0,
        "text": "".join(tokens),
        "logprobs": {
            "text_offset": offsets,
            "token_logprobs": logprobs,
            "tokens": tokens,
            "top_logprobs": [
                {**{token(c): p for c, p in zip(cs, ps)}, token(i): lp}
                for i, lp, cs, ps in zip(ids, logprobs, top_ids, top_lps)
            ],
        },
        "finish_reason": "length",
        "stop_reason": None,
        "token_ids": ids,
        "prompt_logprobs": None,
        "prompt_token_ids": rng.integers(0, samples.VOCAB, PROMPT).tolist(),
    }
    return samples.dumps({
        "id": "cmpl-bench", "object": "text_completion", "created": 1764400000, "model": "Qwen/Qwen3-8B",
        "choices": [choice],
        "usage": {"prompt_tokens": PROMPT, "total_tokens": PROMPT + n, "completion_tokens": n,
                  "prompt_tokens_details": None},
        "system_fingerprint": None, "kv_transfer_params": None,
    })


def chat_response(n: int, *, head: int = 1, seed: int = 4) -> bytes:
    """What vLLM sends to ``/v1/chat/completions`` for ``logprobs: true, top_logprobs: head,
    return_token_ids, return_tokens_as_token_ids``."""
    ev = samples.evidence(n, head, seed=seed)
    ids = ev.ids.tolist()
    logprobs = ev.logprobs.astype(np.float64).tolist()
    rows = zip(ev.cand_ids[:, :head].tolist(), ev.cand_logprobs[:, :head].astype(np.float64).tolist())
    content = [
        {"token": f"token_id:{i}", "logprob": lp, "bytes": [116, 111, 107],
         "top_logprobs": [{"token": f"token_id:{c}", "logprob": p, "bytes": [116]} for c, p in zip(cs, ps)]}
        for i, lp, (cs, ps) in zip(ids, logprobs, rows)
    ]
    choice = {"index": 0, "message": {"role": "assistant", "content": "x" * n, "tool_calls": []},
              "logprobs": {"content": content}, "finish_reason": "length", "stop_reason": None,
              "token_ids": ids}
    return samples.dumps({
        "id": "chatcmpl-bench", "object": "chat.completion", "created": 1764400000, "model": "Qwen/Qwen3-8B",
        "choices": [choice], "usage": {"prompt_tokens": PROMPT, "total_tokens": PROMPT + n, "completion_tokens": n},
        "prompt_token_ids": list(range(PROMPT)), "kv_transfer_params": None,
    })


def sglang_response(n: int, *, head: int = 0, mask: int = 0, seed: int = 5) -> bytes:
    """What SGLang's ``/generate`` sends for ``return_logprob: true`` (and, with ``head``,
    ``top_logprobs_num: head``; with ``mask``, ``return_sampling_mask: true`` and a kept set of
    ``mask`` ids per token)."""
    ev = samples.evidence(n, head, seed=seed)
    ids = ev.ids.tolist()
    logprobs = ev.logprobs.astype(np.float64).tolist()
    meta = {"id": "req-bench", "finish_reason": {"type": "length", "length": n}, "prompt_tokens": PROMPT,
            "completion_tokens": n, "cached_tokens": 0,
            "output_token_logprobs": [[lp, i, None] for i, lp in zip(ids, logprobs)],
            "input_token_logprobs": [[None, 1, None]]}
    if head:
        rows = zip(ev.cand_ids.tolist(), ev.cand_logprobs.astype(np.float64).tolist())
        meta["output_top_logprobs"] = [[[p, c, None] for c, p in zip(cs, ps)] for cs, ps in rows]
    if mask:
        rng = np.random.default_rng(seed)
        # mask - 1 distinct other ids a row, then the sampled id at a random place.
        others = (np.asarray(ids)[:, None] + np.cumsum(rng.integers(1, 1000, (n, mask - 1)), axis=1)) % samples.VOCAB
        sampled_at = np.arange(mask)[None, :] == rng.integers(0, mask, n)[:, None]
        kept = np.empty((n, mask), dtype=np.int64)
        kept[sampled_at], kept[~sampled_at] = ids, others.ravel()
        meta["output_token_sampling_mask"] = kept.tolist()
        meta["output_token_sampling_logprobs"] = (-rng.random(n)).astype(np.float32).astype(np.float64).tolist()
        meta["output_token_sampling_mask_length"] = n
    return samples.dumps({"text": "x" * n, "output_ids": ids, "meta_info": meta})


# name: (bytes, tokenwire's parser[, the head size])
WORKLOADS = {
    "completions_8k": (lambda: completions_response(TOKENS, token_strings=False), "parse_completions_response"),
    "completions_8k_token_strings": (lambda: completions_response(TOKENS, token_strings=True),
                                     "parse_completions_response"),
    "completions_8k_top5": (lambda: completions_response(TOKENS, token_strings=True, head=7),
                            "parse_completions_response", 5),
    "chat_8k": (lambda: chat_response(TOKENS), "parse_chat_completions_response"),
    # A head of 5 from 7 candidates (k + 2, as a head needs).
    "chat_8k_top5": (lambda: chat_response(TOKENS, head=7), "parse_chat_completions_response", 5),
    "sglang_8k": (lambda: sglang_response(TOKENS), "parse_sglang_generate_response"),
    "sglang_8k_top5": (lambda: sglang_response(TOKENS, head=7), "parse_sglang_generate_response", 5),
    # return_sampling_mask: 16k tokens, a kept set of 20 ids each.
    "sglang_16k_mask20": (lambda: sglang_response(2 * TOKENS, mask=20), "parse_sglang_generate_response"),
}


@pytest.fixture(params=list(WORKLOADS), scope="module")
def workload(request):
    build, parser, *head = WORKLOADS[request.param]
    return request.param, build(), parser, head[0] if head else None


def test_tokenwire(benchmark, workload):
    name, raw, parser, k = workload
    benchmark.group = name
    benchmark.extra_info["bytes"] = len(raw)
    result = benchmark(getattr(tokenwire, parser), raw, top_k=k)
    (choice,) = result.choices
    assert len(choice.completion_ids) == len(choice.completion_logprobs) >= TOKENS
    assert k is None or len(choice.completion_top_ids.values) == k * TOKENS


def test_reference(benchmark, workload):
    name, raw, parser, k = workload
    benchmark.group = name
    benchmark.pedantic(getattr(openai_rules, parser), args=(raw,), kwargs={"top_k": k}, rounds=5, iterations=1)


def test_orjson_loads(benchmark, workload):
    name, raw, _, _ = workload
    benchmark.group = name
    benchmark(orjson.loads, raw)
