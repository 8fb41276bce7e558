#!/usr/bin/env python3
"""NeMo-Gym's parse path per response, unpatched and patched with tokenwire.compat.nemo_gym.

Run in a venv with nemo-gym 0.7.0 and tokenwire. One fresh process per (size, mode, workload):

    python benchmarks/nemo_gym_parse.py --tokens 8192 --mode patched --workload moe

A server on 127.0.0.1 answers each POST with a distinct vLLM chat completion of ``--tokens``
tokens (``token_ids``, ``logprobs.content`` with ``"token_id:N"`` names, top-level
``prompt_token_ids``; for ``moe`` NeMo-RL's ``nrlre1`` routing of 48 layers x top-8 int16 on the
message). aiohttp fetches each (its body read before the clock starts); the timed span is
NeMo-Gym's vLLM model server handling it: ``VLLMModel.chat_completions`` (a
``return_token_id_information`` server) called as its FastAPI route calls it, its client's
request answered with that response, so the span runs from the body's bytes to the
``NeMoGymChatCompletion`` it returns: ``get_response_json``, ``_extract_choice_logprobs``,
``_validate_token_bundle`` and the pydantic ``model_validate`` of the message and the
completion (with the request's own small steps before them, the same both ways).
``--mode native`` times tokenwire's own reader of the same bytes
(``tokenwire.parse_chat_completions_response``, the ids and logprobs as lists). Prints the
median, minimum and maximum per response in ms (wall clock; ``NEMO_GYM_BENCH_CLOCK=cpu``: the
thread's CPU time). ``--all`` runs every combination, each in its own process, and prints a
table.
"""

from __future__ import annotations

import base64
import os
import sys
from typing import Any

import numpy as np
import orjson

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _framework_bench import main as run_main  # noqa: E402
from _framework_bench import SIZES, clock, serve, time_rounds  # noqa: E402

PROMPT_LEN = 512
LAYERS, TOPK = 48, 8


def body(seed: int, tokens: int, workload: str) -> bytes:
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, 150_000, tokens).tolist()
    lps = (-rng.exponential(0.8, tokens)).tolist()
    message = {"role": "assistant", "content": "x" * 64, "tool_calls": None}
    if workload == "moe":
        routes = rng.integers(0, 128, (PROMPT_LEN + tokens, LAYERS, TOPK), dtype=np.int16)
        message["routed_experts"] = (f"nrlre1:int16:{PROMPT_LEN + tokens}x{LAYERS}x{TOPK}:"
                                     + base64.b64encode(routes.astype("<i2").tobytes()).decode())
    return orjson.dumps({
        "id": f"chatcmpl-{seed}", "object": "chat.completion", "created": 1, "model": "m",
        "prompt_token_ids": rng.integers(0, 150_000, PROMPT_LEN).tolist(),
        "choices": [{"index": 0, "finish_reason": "length", "message": message, "token_ids": ids,
                     "logprobs": {"content": [{"token": f"token_id:{i}", "logprob": lp, "bytes": None,
                                               "top_logprobs": []} for i, lp in zip(ids, lps)]}}],
        "usage": {"prompt_tokens": PROMPT_LEN, "completion_tokens": tokens, "total_tokens": PROMPT_LEN + tokens},
    })


def measure(tokens: int, mode: str, workload: str, rounds: int) -> list[tuple[float, int]]:
    from unittest.mock import MagicMock

    from starlette.requests import Request

    import nemo_gym.openai_utils as openai_utils
    import nemo_gym.server_utils as server_utils
    from responses_api_models.vllm_model.app import VLLMModel, VLLMModelConfig

    if mode == "patched":
        from tokenwire.compat import nemo_gym as compat

        compat.patch()
    import tokenwire
    bodies = [body(seed, tokens, workload) for seed in range(rounds)]

    server = serve(bodies)
    server_utils.get_global_config_dict = lambda *a, **k: {}  # no Hydra configuration from argv
    config = VLLMModelConfig(host="127.0.0.1", port=8080, entrypoint="", name="vllm_model",
                             base_url="http://127.0.0.1:1/v1", api_key="k", model="m",
                             return_token_id_information=True, uses_reasoning_parser=False,
                             uses_interleaved_reasoning=False)
    model = VLLMModel(config=config, server_client=MagicMock(spec=server_utils.ServerClient, global_config_dict={}))
    fetched: list[object] = []

    async def answer(self: object, **request: object) -> object:  # the client's request: the body fetched
        return fetched.pop()

    openai_utils.NeMoGymAsyncOpenAI._request = answer
    params = openai_utils.NeMoGymChatCompletionCreateParamsNonStreaming(messages=[{"role": "user", "content": "hi"}])

    # the handler's request objects made before the clock starts, one per round
    requests = [Request({"type": "http", "method": "POST", "path": "/v1/chat/completions",
                         "headers": [], "query_string": b"", "session": {"session_id": "s"}})
                for _ in range(rounds)]

    async def parse(resp: Any) -> object:
        if mode == "native":  # tokenwire's reader, the lists NeMo-Gym's bundle holds
            parsed = tokenwire.parse_chat_completions_response(await resp.read())
            choice = parsed.choices[0]
            return parsed, choice, choice.completion_ids.tolist(), choice.completion_logprobs.tolist()
        fetched.append(resp)
        return await model.chat_completions(requests.pop(), params)

    return time_rounds(server, rounds, parse, clock("NEMO_GYM_BENCH_CLOCK"))


def main() -> int:
    return run_main(__doc__, __file__, "NeMo-Gym", measure,
                    {"dense": SIZES, "moe": SIZES[:2]})


if __name__ == "__main__":
    sys.exit(main())
