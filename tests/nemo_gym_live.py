"""NeMo-Gym's real vLLM model server and client against a local HTTP server, unpatched and
patched (run by tests/run_nemo_gym_suite.py in NeMo-Gym's venv, with the NeMo-Gym sdist on
the path; not collected by tokenwire's own suite, which has no NeMo-Gym).

The server on 127.0.0.1 answers ``/v1/chat/completions`` with a vLLM-shaped response (the
choice's ``token_ids``, ``logprobs.content`` with ``"token_id:N"`` names, top-level
``prompt_token_ids``, NeMo-RL's ``nrlre1`` routing on the message); NeMo-Gym's
``VLLMModel`` (``return_token_id_information=True``) serves a request through its FastAPI
app, its ``NeMoGymAsyncOpenAI`` client fetching over aiohttp. Each planted defect's outcome
both ways is printed as a table row (``DEFECT name | unpatched | patched``).
"""

from __future__ import annotations

import base64
import struct
from typing import Any
from unittest.mock import MagicMock

import orjson
import pytest
from fastapi.testclient import TestClient

import nemo_gym.server_utils
from canned_http import bounded_server  # copied next to this file by run_nemo_gym_suite.py
from nemo_gym.server_utils import ServerClient
from responses_api_models.vllm_model.app import VLLMModel, VLLMModelConfig
from tokenwire.compat import nemo_gym as compat

PROMPT = [11, 12, 13]
N = 64


def envelope(rows: int, layers: int = 4, topk: int = 2, first: int = 0) -> str:
    flat = [(first + r + layer + k) % 64 for r in range(rows) for layer in range(layers) for k in range(topk)]
    raw = struct.pack(f"<{len(flat)}h", *flat)
    return f"nrlre1:int16:{rows}x{layers}x{topk}:{base64.b64encode(raw).decode()}"


def response(defect: str | None = None, shape: str = "inline ids") -> bytes:
    ids = [1000 + 7 * t for t in range(N)]
    records = [{"token": f"token_id:{i}", "logprob": -0.01 * (t + 1), "bytes": None, "top_logprobs": []}
               for t, i in enumerate(ids)]
    routed = envelope(len(PROMPT) + N)
    token_ids = list(ids)
    if defect == "N ids vs N+1 logprobs":
        records.append({"token": "token_id:5", "logprob": -0.5, "bytes": None, "top_logprobs": []})
    elif defect == "missing logprob (null)":
        records[N // 2]["logprob"] = None
    elif defect == "-9999 logprob":
        records[N // 2]["logprob"] = -9999.0
    elif defect == "routing one row short":
        routed = envelope(len(PROMPT) + N - 1)
    body = {
        "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "dummy_model",
        "prompt_token_ids": PROMPT,
        "choices": [{
            "index": 0, "finish_reason": "stop",
            "message": {"role": "assistant", "content": "hi", "tool_calls": None, "routed_experts": routed},
            "token_ids": token_ids, "logprobs": {"content": records},
        }],
        "usage": {"prompt_tokens": len(PROMPT), "completion_tokens": N, "total_tokens": len(PROMPT) + N},
    }
    if shape == "ids from the records, prompt from /tokenize":
        del body["prompt_token_ids"], body["choices"][0]["token_ids"]
    elif shape == "no routing":
        del body["choices"][0]["message"]["routed_experts"]
    raw = orjson.dumps(body)
    if defect == "NaN logprob":
        raw = raw.replace(b'"logprob":-0.32', b'"logprob":NaN', 1)
        assert b"NaN" in raw
    return raw


class _Answer:
    """The server's answer: the body of the test running, the prompt's ids to /tokenize."""

    body = b""

    def __call__(self, path: str, sent: bytes) -> tuple[int, bytes]:
        return 200, orjson.dumps({"tokens": PROMPT}) if path.endswith("/tokenize") else self.body


@pytest.fixture(scope="module")
def server():
    answer = _Answer()
    with bounded_server(answer) as addr:
        # As NeMo-Gym's own tests of the model server do: no Hydra configuration from argv.
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(nemo_gym.server_utils, "get_global_config_dict", lambda *a, **k: {})
            config = VLLMModelConfig(host="127.0.0.1", port=8080, entrypoint="", name="vllm_model",
                                     base_url=f"http://{addr}/v1", api_key="dummy_key", model="dummy_model",
                                     return_token_id_information=True, uses_reasoning_parser=False,
                                     uses_interleaved_reasoning=False)
            model = VLLMModel(config=config, server_client=MagicMock(spec=ServerClient, global_config_dict={}))
            # One client (one event loop) for the module: NeMo-Gym's aiohttp session is global.
            with TestClient(model.setup_webserver()) as client:
                yield answer, client


def serve_one(server: Any, defect: str | None, shape: str = "inline ids") -> Any:
    answer, client = server
    answer.body = response(defect, shape)
    try:
        result = client.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}]})
    except Exception as exc:  # the app's exception, raised through the test client
        return exc
    return result.json() if result.status_code == 200 else RuntimeError(f"HTTP {result.status_code}")


def outcome(result: Any) -> str:
    if isinstance(result, BaseException):
        return f"refused ({type(result).__name__}: {str(result)[:90]})"
    return "accepted"


@pytest.mark.parametrize("shape", ["inline ids", "ids from the records, prompt from /tokenize", "no routing"])
def test_valid_response_is_the_same_both_ways(server, shape):
    compat.unpatch()
    theirs = serve_one(server, None, shape)
    with compat.patched():
        assert compat.is_patched()
        before = compat.calls.copy()
        ours = serve_one(server, None, shape)
        # the model server's token path took the body read from the bytes: no dict per record
        for name in ("chat_completions on the token path", "get_response_json read from the bytes",
                     "_extract_choice_logprobs from the bytes"):
            assert compat.calls[name] == before[name] + 1, name
    assert not isinstance(theirs, BaseException), theirs
    assert ours == theirs
    message = ours["choices"][0]["message"]
    assert message["generation_token_ids"] == [1000 + 7 * t for t in range(N)]
    assert message["prompt_token_ids"] == PROMPT
    assert len(message["generation_log_probs"]) == N


DEFECTS = ["N ids vs N+1 logprobs", "missing logprob (null)", "-9999 logprob", "NaN logprob",
           "routing one row short"]


@pytest.mark.parametrize("defect", DEFECTS)
def test_planted_defect_is_refused_patched(server, defect):
    compat.unpatch()
    before = serve_one(server, defect)
    with compat.patched():
        after = serve_one(server, defect)
    print(f"\nDEFECT {defect} | {outcome(before)} | {outcome(after)}")
    assert isinstance(after, BaseException), f"{defect}: accepted patched"
    if not isinstance(before, BaseException):
        assert isinstance(after, compat.NeMoGymResponseError)
    assert isinstance(after, (RuntimeError, orjson.JSONDecodeError))
