#!/usr/bin/env python3
"""SkyRL's generation call per response, unpatched and patched with tokenwire.compat.skyrl.

Run in a venv with skyrl 0.4.0 and tokenwire. One fresh process per (size, mode, workload):

    python benchmarks/skyrl_parse.py --tokens 8192 --mode patched --workload vllm

A server on 127.0.0.1 answers each POST with a distinct response of ``--tokens`` tokens:
``vllm``, what vLLM's ``/inference/v1/generate`` sends SkyRL (``token_ids`` and one
``logprobs.content`` record per token, ``"token_id:N"`` names, ``bytes`` null, no top-k);
``packed``, what SkyRL's own ``/skyrl/v1/generate`` sends when routing is asked for
(``{"logprob": x}`` records and a ``routed_experts`` envelope of uint8 ids, 24 layers of 8 per
prompt and generated token but the last). aiohttp fetches each (its
body read before the clock starts); the timed span is
``RemoteInferenceClient._generate_single`` as the trainer calls it, on a session handing back
that response already read: SkyRL's ``_post`` (its ``orjson.loads`` of the bytes) and
``RemoteGenerateClient.generate``'s reading of the document. ``--mode native`` times
tokenwire's own reader of the same bytes (ids and logprobs as lists); on ``packed``, which
that reader does not read (SkyRL's token-less records), tokenwire's decode of the routing's
base64 alone. Prints the
median, minimum and maximum per response in ms (wall clock; ``SKYRL_BENCH_CLOCK=cpu``: the
thread's CPU time); ``--all`` runs every combination, each in its
own process, and prints a table.
"""

from __future__ import annotations

import os
import sys
import typing
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _framework_bench import main as run_main  # noqa: E402
from _framework_bench import SIZES, Preread, clock, serve, time_rounds  # noqa: E402

PROMPT = list(range(100, 612))
LAYERS, TOPK = 24, 8  # the packed workload's routing rows: 192 expert ids per token


def body(seed: int, tokens: int, workload: str) -> bytes:
    import orjson

    rng = np.random.default_rng(seed)
    ids = rng.integers(0, 150_000, tokens).tolist()
    lps = (-rng.exponential(0.8, tokens)).tolist()
    if workload == "packed":  # SkyRL's /skyrl/v1/generate: token-less records and the routing envelope
        from skyrl.backends.skyrl_train.inference_servers.generate_wire import pack_routed_experts

        routes = rng.integers(0, 128, (len(PROMPT) + tokens - 1, LAYERS, TOPK), dtype=np.uint8)
        return orjson.dumps({"choices": [{"token_ids": ids, "finish_reason": "length",
                                          "logprobs": {"content": [{"logprob": lp} for lp in lps]},
                                          "routed_experts": pack_routed_experts(routes),
                                          "rollout_sample_support": None}]})
    records = [{"token": f"token_id:{i}", "logprob": lp, "bytes": None, "top_logprobs": []}
               for i, lp in zip(ids, lps)]
    return orjson.dumps({"request_id": f"gen-{seed}", "choices": [
        {"index": 0, "logprobs": {"content": records}, "finish_reason": "length", "token_ids": ids}],
        "prompt_logprobs": None, "kv_transfer_params": None})



def measure(tokens: int, mode: str, workload: str, rounds: int) -> list[tuple[float, int]]:
    if sys.version_info < (3, 12):  # SkyRL asks for 3.12; pydantic needs this TypedDict before
        import typing_extensions

        typing.TypedDict = typing_extensions.TypedDict  # type: ignore[misc]
    from skyrl.backends.skyrl_train.inference_servers.remote_inference_client import RemoteInferenceClient

    if mode == "patched":
        from tokenwire.compat import skyrl as compat

        compat.patch()
    import tokenwire

    server = serve([body(seed, tokens, workload) for seed in range(rounds)])
    url = server[1]
    client = RemoteInferenceClient(proxy_url=url, server_urls=[url], data_parallel_size=1,
                                   enable_return_routed_experts=workload == "packed")
    generate_client = client._get_generate_client()

    async def parse(resp: Any) -> object:
        raw = await resp.read()  # read before the clock started: the bytes held
        preread = Preread(resp)

        async def session_of() -> Any:
            return preread

        generate_client._get_session = session_of
        if mode == "native" and workload == "packed":  # the routing's base64 alone
            start_at = raw.index(b'"data":"') + 8
            return tokenwire.b64decode(memoryview(raw)[start_at:raw.index(b'"', start_at)])
        if mode == "native":
            choice = tokenwire.parse_generate_response(raw).choices[0]
            out = choice.completion_ids.tolist(), choice.completion_logprobs.tolist()
        else:
            out = await client._generate_single(prompt_token_ids=PROMPT, sampling_params={"logprobs": 0},
                                                session_id=None, model="m")
        assert len(out[0] if mode == "native" else out["response_logprobs"]) == tokens
        return out

    return time_rounds(server, rounds, parse, clock("SKYRL_BENCH_CLOCK"))


def main() -> int:
    return run_main(__doc__, __file__, "SkyRL", measure, {"vllm": SIZES, "packed": SIZES})


if __name__ == "__main__":
    sys.exit(main())
