"""An 8k-token vLLM ``/v1/completions`` response (``logprobs: 1``, ``return_token_ids``): exact
ids and aligned logprobs through tokenwire, against ``orjson.loads`` of the same bytes."""

from __future__ import annotations

import numpy as np
import orjson
import pytest

import tokenwire
from tokenwire import _openai, samples

TOKENS = 8192
PROMPT = 512


def completions_response(n: int, *, token_strings: bool, seed: int = 3) -> bytes:
    """What vLLM sends for ``logprobs: 1, return_token_ids: true`` (and, with
    ``token_strings``, ``return_tokens_as_token_ids: true``), serialized as vLLM does."""
    ev = samples.evidence(n, 1, seed=seed)
    rng = np.random.default_rng(seed)
    ids = ev.ids.tolist()
    logprobs = ev.logprobs.astype(np.float64).tolist()
    top_ids = ev.cand_ids[:, 0].tolist()
    top_lps = ev.cand_logprobs[:, 0].astype(np.float64).tolist()

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
                {token(c): p, token(i): lp} for i, lp, c, p in zip(ids, logprobs, top_ids, top_lps)
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


WORKLOADS = {
    "completions_8k": lambda: completions_response(TOKENS, token_strings=False),
    "completions_8k_token_strings": lambda: completions_response(TOKENS, token_strings=True),
}
# The facade's parser once it is exported (and compiled), else the reference.
parse = getattr(tokenwire, "parse_completions_response", _openai.parse_completions_response)


@pytest.fixture(params=list(WORKLOADS), scope="module")
def workload(request):
    return request.param, WORKLOADS[request.param]()


def test_tokenwire(benchmark, workload):
    name, raw = workload
    benchmark.group = name
    benchmark.extra_info["bytes"] = len(raw)
    result = benchmark(parse, raw)
    (choice,) = result.choices
    assert len(choice.completion_ids) == len(choice.completion_logprobs) == TOKENS


def test_reference(benchmark, workload):
    name, raw = workload
    benchmark.group = name
    benchmark.pedantic(_openai.parse_completions_response, args=(raw,), rounds=5, iterations=1)


def test_orjson_loads(benchmark, workload):
    name, raw = workload
    benchmark.group = name
    benchmark(orjson.loads, raw)
