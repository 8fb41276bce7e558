"""tokenwire.compat.openai: the real ``openai`` package's ``OpenAI`` and ``AsyncOpenAI`` clients
against a local server on 127.0.0.1 (vLLM-shaped bodies), chat and completions: the raw body
read by tokenwire, no ``Completion``/``ChatCompletion`` object built, the SDK's retries and
errors kept, the request helpers' fields sent through ``extra_body``."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import numpy as np
import pytest

import tokenwire
from tokenwire import MalformedResponseError
from tokenwire.compat import openai as tw_openai

from .canned_http import CannedServer, vllm_completion

openai = pytest.importorskip("openai")
from openai._base_client import BaseClient  # noqa: E402 - after the skip


@pytest.fixture(scope="module")
def server():
    with CannedServer(limit=2_000) as running:
        yield running
        client = _SYNC.pop(running.url, None)
        if client is not None:
            client.close()


_SYNC: dict[str, Any] = {}


def _sync_client(server: CannedServer) -> Any:
    """One OpenAI client per server (a client's setup costs more than a small request)."""
    if server.url not in _SYNC:
        _SYNC[server.url] = openai.OpenAI(base_url=f"{server.url}/v1", api_key="test-key", max_retries=2)
    return _SYNC[server.url]


def _async_client(server: CannedServer) -> Any:
    # Bound to the event loop of its first request: one per asyncio.run.
    return openai.AsyncOpenAI(base_url=f"{server.url}/v1", api_key="test-key", max_retries=2)


def _params(chat: bool) -> dict[str, Any]:
    if chat:
        return tokenwire.chat_completions_request_params(
            {"model": "qwen3-8b", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 64})
    return tokenwire.completions_request_params({"model": "qwen3-8b", "prompt": [1, 2, 3], "max_tokens": 64})


def _call(server: CannedServer, chat: bool, asynchronous: bool, params: dict[str, Any] | None = None,
          **options: Any) -> Any:
    params = _params(chat) if params is None else params
    if asynchronous:
        call = tw_openai.achat_completions if chat else tw_openai.acompletions

        async def run() -> Any:
            async_client = _async_client(server)
            try:
                return await call(async_client, params, **options)
            finally:
                await async_client.close()

        return asyncio.run(run())
    return (tw_openai.chat_completions if chat else tw_openai.completions)(_sync_client(server), params, **options)


MODES = [(chat, asynchronous) for chat in (False, True) for asynchronous in (False, True)]
IDS = ["completions-sync", "completions-async", "chat-sync", "chat-async"]


@pytest.fixture
def built(monkeypatch):
    """How many response objects the SDK builds (every one goes through _process_response_data)."""
    count = {"objects": 0}
    theirs = BaseClient._process_response_data

    def counting(self: Any, **kwargs: Any) -> Any:
        count["objects"] += 1
        return theirs(self, **kwargs)

    monkeypatch.setattr(BaseClient, "_process_response_data", counting)
    return count


@pytest.mark.parametrize(("chat", "asynchronous"), MODES, ids=IDS)
def test_the_body_is_read_by_tokenwire_without_sdk_objects(server, built, chat, asynchronous):
    body = vllm_completion(512, seed=4, chat=chat)
    server.push(body)
    response = _call(server, chat, asynchronous)
    assert built["objects"] == 0  # no Completion / ChatCompletion object was built
    parse = tokenwire.parse_chat_completions_response if chat else tokenwire.parse_completions_response
    expected = parse(body)
    choice = response.choices[0]
    assert np.array_equal(choice.completion_ids, expected.choices[0].completion_ids)
    assert np.array_equal(choice.completion_logprobs, expected.choices[0].completion_logprobs)
    # The same values the SDK's own object gives (built here, once, to compare).
    server.push(body)
    sync_client = _sync_client(server)
    resource = sync_client.chat.completions if chat else sync_client.completions
    theirs = resource.create(**tw_openai.create_kwargs(_params(chat), resource.create)).model_dump()
    assert built["objects"] == 1
    their_choice = theirs["choices"][0]
    assert choice.completion_ids.tolist() == their_choice["token_ids"]
    if chat:
        logprobs = [e["logprob"] for e in their_choice["logprobs"]["content"]]
    else:
        logprobs = their_choice["logprobs"]["token_logprobs"]
    assert choice.completion_logprobs.tolist() == logprobs


@pytest.mark.parametrize(("chat", "asynchronous"), MODES, ids=IDS)
def test_the_request_helpers_fields_go_through_extra_body(server, chat, asynchronous):
    server.push(vllm_completion(8, seed=1, chat=chat))
    _call(server, chat, asynchronous, extra_headers={"X-Probe": "1"})
    path, sent = server.requests[-1]
    assert path == ("/v1/chat/completions" if chat else "/v1/completions")
    assert sent["return_token_ids"] is True  # in the JSON body, beside the SDK's own fields
    assert sent["logprobs"] is (True if chat else 1) or sent["logprobs"] == 1
    assert sent["model"] == "qwen3-8b"


def test_create_refuses_the_helpers_params_and_create_kwargs_splits_them(server):
    client = _sync_client(server)
    params = _params(chat=True)
    with pytest.raises(TypeError, match="return_token_ids"):
        client.chat.completions.create(**params)
    kwargs = tw_openai.create_kwargs(params, client.chat.completions.create)
    assert kwargs["extra_body"] == {"return_token_ids": True}
    assert kwargs["logprobs"] is True and kwargs["model"] == "qwen3-8b"
    # The caller's own extra_body is kept, and wins on a clash.
    kwargs = tw_openai.create_kwargs({**params, "extra_body": {"return_token_ids": False, "top_k": 5}},
                                     client.chat.completions.create)
    assert kwargs["extra_body"] == {"return_token_ids": False, "top_k": 5}
    top = tokenwire.completions_request_params({"model": "m", "prompt": [1]}, top_k=4)
    kwargs = tw_openai.create_kwargs(top, client.completions.create)
    assert kwargs["logprobs"] == 6
    assert kwargs["extra_body"] == {"return_token_ids": True, "return_tokens_as_token_ids": True}


def test_create_kwargs_argument_errors():
    def create(*, model: str, extra_body: Any = None) -> None:
        raise AssertionError

    with pytest.raises(TypeError, match="mapping"):
        tw_openai.create_kwargs([("model", "m")], create)
    with pytest.raises(TypeError, match="extra_body must be a mapping"):
        tw_openai.create_kwargs({"model": "m", "extra_body": [1]}, create)

    def closed(*, model: str) -> None:
        raise AssertionError

    with pytest.raises(TypeError, match="no extra_body"):
        tw_openai.create_kwargs({"model": "m", "return_token_ids": True}, closed)
    assert tw_openai.create_kwargs({"model": "m", "x": 1}, lambda **kwargs: None) == {"model": "m", "x": 1}


@pytest.mark.parametrize(("chat", "asynchronous"), MODES, ids=IDS)
@pytest.mark.parametrize("defect", ["n_plus_1", "sentinel", "null_logprob"])
def test_defects_are_refused(server, chat, asynchronous, defect):
    server.push(vllm_completion(64, seed=2, chat=chat, defect=defect))
    with pytest.raises(MalformedResponseError) as info:
        _call(server, chat, asynchronous)
    assert info.value.choice == 0


@pytest.mark.parametrize(("chat", "asynchronous"), MODES, ids=IDS)
def test_sdk_errors_and_retries_are_kept(server, chat, asynchronous):
    server.push(b'{"error": {"message": "bad", "type": "invalid_request_error"}}', 400)
    with pytest.raises(openai.BadRequestError):
        _call(server, chat, asynchronous)
    before = len(server.requests)
    server.push(b'{"error": {"message": "busy"}}', 503)
    server.push(vllm_completion(16, seed=3, chat=chat))
    response = _call(server, chat, asynchronous)
    assert len(server.requests) - before == 2  # the SDK retried the 503
    assert len(response.choices[0].completion_ids) == 16


def test_parse_options_pass_through(server):
    server.push(vllm_completion(16, seed=5, defect="n_plus_1"))
    with pytest.raises(MalformedResponseError, match="16 token ids but 17 logprobs"):
        _call(server, False, False, check_usage=False)
    with pytest.raises(TypeError, match="unexpected keyword argument 'temperature'"):
        _call(server, False, False, temperature=0.5)


def test_stream_is_refused(server):
    params = {**_params(chat=False), "stream": True}
    with pytest.raises(ValueError, match="stream"):
        _call(server, False, False, params=params)


def test_body_of_needs_a_raw_response():
    with pytest.raises(TypeError, match="not a raw SDK response"):
        tw_openai.body_of(object())
    assert tw_openai.body_of(type("R", (), {"content": b"{}"})()) == b"{}"
    with pytest.raises(TypeError, match="with_raw_response"):
        tw_openai.completions(type("C", (), {"completions": object()})(), {"model": "m"})


def test_json_request_body_is_the_helpers(server):
    # What the server receives equals what the helper asked for, field by field.
    server.push(vllm_completion(4, seed=6))
    params = _params(chat=False)
    _call(server, False, False, params=params)
    sent = server.requests[-1][1]
    assert {key: sent[key] for key in params} == json.loads(json.dumps(params))
