"""AReaL's real request and parse code against a local HTTP server, unpatched and patched (run
by tests/run_areal_suite.py in AReaL's venv; not collected by tokenwire's own suite, which has
no AReaL).

The server on 127.0.0.1 answers ``/v1/completions`` (vLLM, ``"token_id:N"`` names and
``token_logprobs``, as AReaL's vLLM backend asks for), ``/v1/chat/completions`` (vLLM's
``logprobs.content``) and ``/generate`` (SGLang's ``meta_info`` with int32 routing). Each
request goes through AReaL's ``arequest_with_retry`` (aiohttp, ``response.json()``) and the
backend's ``parse_generation_response``, the two calls ``RemoteInfEngine.agenerate`` makes per
round. Each planted defect's outcome both ways is printed as a table row
(``DEFECT backend | name | unpatched | patched``).
"""

from __future__ import annotations

import asyncio
import base64
import json
import struct
from typing import Any

import numpy as np
import pytest

from areal.api.cli_args import GenerationHyperparameters
from areal.api.io_struct import ModelRequest
from areal.engine.sglang_remote import SGLangBackend
from areal.engine.vllm_remote import VLLMBackend
from areal.infra.utils.http import arequest_with_retry
from canned_http import bounded_server  # copied next to this file by run_areal_suite.py
from tokenwire.compat import areal as compat

PROMPT = [11, 12, 13]
N = 64
LAYERS, TOPK = 4, 2


def planted_logprobs(defect: str | None) -> list[Any]:
    logprobs: list[Any] = [-0.01 * (t + 1) for t in range(N)]
    # json.dumps writes NaN as NaN, as a server's encoder may; AReaL's json.loads reads it
    planted = {"missing logprob (null)": None, "-9999 logprob": -9999.0, "NaN logprob": float("nan")}
    if defect in planted:
        logprobs[N // 2] = planted[defect]
    return logprobs


def vllm_body(defect: str | None, chat: bool) -> bytes:
    ids = [1000 + 7 * t for t in range(N)]
    logprobs = planted_logprobs(defect)
    names = [f"token_id:{i}" for i in ids]
    if chat:
        if defect == "N ids vs N+1 logprobs":
            names, logprobs = names + ["token_id:5"], logprobs + [-0.5]
        block: dict[str, Any] = {"content": [{"token": n, "logprob": lp, "bytes": None, "top_logprobs": []}
                                             for n, lp in zip(names, logprobs)]}
    else:
        if defect == "N ids vs N+1 logprobs":
            logprobs = logprobs + [-0.5]
        block = {"tokens": names, "token_logprobs": logprobs, "top_logprobs": None,
                 "text_offset": list(range(N))}
    body = {"id": "cmpl-1", "object": "text_completion", "created": 1, "model": "m",
            "choices": [{"index": 0, "text": "x", "finish_reason": "stop", "logprobs": block}],
            "usage": {"prompt_tokens": len(PROMPT), "completion_tokens": N, "total_tokens": len(PROMPT) + N}}
    return json.dumps(body).encode()


def sglang_body(defect: str | None, routing: bool = True) -> bytes:
    logprobs = planted_logprobs(defect)
    triples = [[lp, 1000 + 7 * t, None] for t, lp in enumerate(logprobs)]
    if defect == "N ids vs N+1 logprobs":
        triples.append([-0.5, 5, None])
    rows = len(PROMPT) + N - 1
    if defect == "routing one row short":
        rows -= 1
    flat = [(r + k) % 64 for r in range(rows) for k in range(LAYERS * TOPK)]
    meta = {"prompt_tokens": len(PROMPT), "completion_tokens": N, "finish_reason": {"type": "stop"},
            "output_token_logprobs": triples,
            "routed_experts": base64.b64encode(struct.pack(f"<{len(flat)}i", *flat)).decode()}
    if not routing:
        del meta["routed_experts"]
    return json.dumps({"text": "x", "output_ids": [1000 + 7 * t for t in range(N)], "meta_info": meta}).encode()


class _Answer:
    """The server's answer: the body of the test running's backend, with its planted defect."""

    defect: str | None = None
    routing = True

    def __call__(self, path: str, sent: bytes) -> tuple[int, bytes]:
        if path == "/generate":
            return 200, sglang_body(self.defect, self.routing)
        return 200, vllm_body(self.defect, chat=path.endswith("/chat/completions"))


@pytest.fixture(scope="module")
def server():
    answer = _Answer()
    with bounded_server(answer) as addr:
        yield answer, addr


BACKENDS = {"vLLM completions": (VLLMBackend, "/v1/completions"),
            "vLLM chat": (VLLMBackend, "/v1/chat/completions"),
            "SGLang": (SGLangBackend, "/generate"),
            "SGLang without routing": (SGLangBackend, "/generate")}


def serve_one(server: Any, backend: str, defect: str | None, session: bool = False) -> Any:
    """One round of AReaL's generation: ``arequest_with_retry`` (with ``session``, as
    ``RemoteInfEngine.agenerate`` calls it: looked up in ``areal.infra.remote_inf_engine``, on
    an aiohttp session of the caller's), then the backend's ``parse_generation_response``."""
    answer, addr = server
    answer.defect = defect
    answer.routing = backend != "SGLang without routing"
    cls, endpoint = BACKENDS[backend]
    request = ModelRequest(input_ids=list(PROMPT), gconfig=GenerationHyperparameters(max_new_tokens=N))
    http_req = cls().build_generation_request(request, with_lora=False, version=0)

    async def go() -> Any:
        if not session:
            result = await arequest_with_retry(addr=addr, endpoint=endpoint, payload=http_req.payload,
                                               method="POST", max_retries=1, timeout=30)
            return cls().parse_generation_response(result)
        import aiohttp

        from areal.infra import remote_inf_engine

        async with aiohttp.ClientSession() as own:
            result = await remote_inf_engine.arequest_with_retry(
                session=own, addr=addr, endpoint=endpoint, payload=http_req.payload, method="POST",
                max_retries=1, timeout=30)
            assert isinstance(result, dict)  # agenerate's own check
            return cls().parse_generation_response(result)

    try:
        return asyncio.run(go())
    except Exception as exc:
        return exc


def outcome(result: Any) -> str:
    if isinstance(result, BaseException):
        return f"refused ({type(result).__name__}: {str(result)[:80]})"
    shape = "" if result.routed_experts is None else f", routing {result.routed_experts.shape}"
    return f"accepted ({len(result.output_tokens)} ids, {len(result.output_logprobs)} logprobs{shape})"


@pytest.mark.parametrize("session", [False, True], ids=["own session", "engine's session"])
@pytest.mark.parametrize("backend", list(BACKENDS))
def test_valid_response_is_the_same_both_ways(server, backend, session):
    compat.unpatch()
    theirs = serve_one(server, backend, None, session)
    with compat.patched():
        assert compat.is_patched()
        read = compat.calls["parse_generation_response from the reader's arrays"]
        before = sum(compat.calls.values())
        ours = serve_one(server, backend, None, session)
        # on the engine's session the body is read from its bytes (SGLang's with routing aside)
        bytes_path = session and backend != "SGLang"
        assert compat.calls["parse_generation_response from the reader's arrays"] == read + bytes_path
        assert sum(compat.calls.values()) == before + 1 + bytes_path
    assert not isinstance(theirs, BaseException), theirs
    assert not isinstance(ours, BaseException), ours
    assert ours.output_tokens == theirs.output_tokens == [1000 + 7 * t for t in range(N)]
    assert ours.output_logprobs == theirs.output_logprobs
    assert ours.stop_reason == theirs.stop_reason
    if theirs.routed_experts is not None:
        np.testing.assert_array_equal(ours.routed_experts, theirs.routed_experts)
        assert ours.routed_experts.dtype == theirs.routed_experts.dtype


DEFECTS = ["N ids vs N+1 logprobs", "missing logprob (null)", "-9999 logprob", "NaN logprob"]
CASES = [(b, d) for b in BACKENDS for d in DEFECTS] + [("SGLang", "routing one row short")]


@pytest.mark.parametrize("session", [False, True], ids=["own session", "engine's session"])
@pytest.mark.parametrize("backend, defect", CASES)
def test_planted_defect_is_refused_patched(server, backend, defect, monkeypatch, session):
    compat.unpatch()
    before = serve_one(server, backend, defect, session)
    # the routing's width (layers * topk) is the model's; given, a row short never passes
    monkeypatch.setattr(compat, "routing_width", LAYERS * TOPK)
    with compat.patched():
        after = serve_one(server, backend, defect, session)
    print(f"\nDEFECT {backend} | {defect} | {outcome(before)} | {outcome(after)}")
    assert isinstance(after, compat.AReaLResponseError), f"{backend}, {defect}: {outcome(after)}"
    assert isinstance(after, ValueError)
