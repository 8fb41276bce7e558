#!/usr/bin/env python3
"""AReaL's parse path per response, unpatched and patched with tokenwire.compat.areal.

Run in a venv with areal 1.0.4 and tokenwire. One fresh process per (size, mode, workload):

    python benchmarks/areal_parse.py --tokens 8192 --mode patched --workload vllm

A server on 127.0.0.1 answers each POST with a distinct response of ``--tokens`` tokens:
``vllm``, the completions body AReaL's vLLM backend asks for (``return_tokens_as_token_ids``,
``logprobs=0``: ``"token_id:N"`` names and ``token_logprobs``); ``sglang``, SGLang's
``/generate`` body (``output_token_logprobs`` triples, ``output_ids``). aiohttp fetches each
(its body read before the clock starts); the timed span is what AReaL does with it per round of
``RemoteInfEngine.agenerate``: ``arequest_with_retry`` as the engine looks it up (on a session
handing back that response, already read: its ``response.json()``) and the backend's
``parse_generation_response``. ``--mode native`` times tokenwire's own reader of
the same bytes (the ids and logprobs as lists). Prints the median, minimum and maximum per
response in ms; ``--all`` runs every combination, each in its own process, and prints a table.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _framework_bench import main as run_main  # noqa: E402
from _framework_bench import SIZES, Preread, serve, time_rounds  # noqa: E402

PROMPT_LEN = 512


def body(seed: int, tokens: int, workload: str) -> bytes:
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, 150_000, tokens).tolist()
    lps = (-rng.exponential(0.8, tokens)).tolist()
    if workload == "vllm":
        doc = {"id": f"cmpl-{seed}", "object": "text_completion", "created": 1, "model": "m",
               "choices": [{"index": 0, "text": "x" * 64, "finish_reason": "length",
                            "logprobs": {"tokens": [f"token_id:{i}" for i in ids], "token_logprobs": lps,
                                         "top_logprobs": None, "text_offset": list(range(tokens))}}],
               "usage": {"prompt_tokens": PROMPT_LEN, "completion_tokens": tokens,
                         "total_tokens": PROMPT_LEN + tokens}}
    else:
        doc = {"text": "x" * 64, "output_ids": ids,
               "meta_info": {"id": f"g{seed}", "prompt_tokens": PROMPT_LEN, "completion_tokens": tokens,
                             "finish_reason": {"type": "length", "length": tokens},
                             "output_token_logprobs": [[lp, i, None] for i, lp in zip(ids, lps)]}}
    return json.dumps(doc).encode()



def measure(tokens: int, mode: str, workload: str, rounds: int) -> list[tuple[float, int]]:
    from areal.engine.sglang_remote import SGLangBackend
    from areal.engine.vllm_remote import VLLMBackend
    from areal.infra import remote_inf_engine

    if mode == "patched":
        from tokenwire.compat import areal as compat

        compat.patch()
    import tokenwire

    backend = VLLMBackend() if workload == "vllm" else SGLangBackend()
    endpoint = "/v1/completions" if workload == "vllm" else "/generate"
    reader = tokenwire.parse_completions_response if workload == "vllm" else tokenwire.parse_sglang_generate_response
    server = serve([body(seed, tokens, workload) for seed in range(rounds)])
    url = server[1]

    async def parse(resp: Any) -> object:
        if mode == "native":
            parsed = reader(await resp.read())
            choice = parsed.choices[0]
            return parsed, choice.completion_ids.tolist(), choice.completion_logprobs.tolist()
        # one round of agenerate: its request call (as it looks it up), then the parse
        result = await remote_inf_engine.arequest_with_retry(
            session=Preread(resp), addr=url.removeprefix("http://"), endpoint=endpoint,
            payload={}, method="POST", max_retries=1, timeout=30)
        return backend.parse_generation_response(result)

    return time_rounds(server, rounds, parse)


def main() -> int:
    return run_main(__doc__, __file__, "AReaL", measure, {"vllm": SIZES, "sglang": SIZES})


if __name__ == "__main__":
    sys.exit(main())
