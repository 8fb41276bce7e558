"""The request helpers of every endpoint: the body each produces, in the forms httpx (``json=``)
and the OpenAI SDK (``create(**kwargs)``, extensions under ``extra_body``) send as they are."""

from __future__ import annotations

import json

import pytest

import tokenwire
from tokenwire.rules import requests as request_rules

httpx = pytest.importorskip("httpx")


def test_generate_request_params_sets_each_flag_where_asked():
    given = {"model": "m", "token_ids": [1, 2, 3], "sampling_params": {"max_tokens": 8}}
    assert tokenwire.generate_request_params(given) == {
        "model": "m", "token_ids": [1, 2, 3], "sampling_params": {"max_tokens": 8, "logprobs": 0}}
    out = tokenwire.generate_request_params(given, top_k=20, compact=True, sampling_mask=True,
                                            routed_experts=True, payload_dir="/shared/payloads")
    assert out == {
        "model": "m",
        "token_ids": [1, 2, 3],
        "sampling_params": {
            "max_tokens": 8,
            "logprobs": 22,
            "extra_args": {"prl_compact_logprobs": True, "payload_dir": "/shared/payloads"},
            "return_sampling_mask": True,
        },
        "return_routed_experts": True,
    }
    assert given == {"model": "m", "token_ids": [1, 2, 3], "sampling_params": {"max_tokens": 8}}  # copied


def test_generate_request_params_keeps_the_callers_values():
    given = {"token_ids": [1], "sampling_params": {"logprobs": 3, "extra_args": {"prl_compact_logprobs": False, "x": 1}}}
    out = tokenwire.generate_request_params(given, top_k=5, compact=True)
    assert out["sampling_params"] == {"logprobs": 3, "extra_args": {"prl_compact_logprobs": False, "x": 1}}
    assert given["sampling_params"]["extra_args"] == {"prl_compact_logprobs": False, "x": 1}


@pytest.mark.parametrize("params, error, match", [
    ({"prompt": "text"}, ValueError, "must hold token_ids"),
    ({"token_ids": [1], "sampling_params": [1]}, TypeError, "sampling_params must be a dict"),
    ({"token_ids": [1], "sampling_params": {"extra_args": 3}}, TypeError, "extra_args must be a dict"),
    ([("token_ids", [1])], TypeError, "params must be a dict"),
])
def test_generate_request_params_refuses_what_it_cannot_extend(params, error, match):
    with pytest.raises(error, match=match):
        tokenwire.generate_request_params(params, compact=True)
    with pytest.raises(ValueError, match="top_k"):
        tokenwire.generate_request_params({"token_ids": [1]}, top_k=0)


def _sent(params):
    """The JSON body httpx sends for ``json=params``."""
    seen = []

    def handler(request):
        seen.append(json.loads(request.content))
        return httpx.Response(200, json={})

    with httpx.Client(transport=httpx.MockTransport(handler)) as client:
        client.post("http://127.0.0.1/inference/v1/generate", json=params)
    return seen[0]


def test_httpx_sends_each_helper_s_body_as_it_is():
    for params in (
        tokenwire.generate_request_params({"token_ids": [1, 2]}, top_k=4, compact=True, sampling_mask=True),
        tokenwire.completions_request_params({"model": "m", "prompt": [1, 2]}, top_k=4),
        tokenwire.chat_completions_request_params({"model": "m", "messages": []}, engine_data=True),
        tokenwire.sglang_generate_request_params({"input_ids": [1, 2]}, top_k=4),
    ):
        assert _sent(params) == params


@pytest.mark.parametrize("helper, known", [
    (tokenwire.completions_request_params, request_rules.SDK_COMPLETIONS),
    (tokenwire.chat_completions_request_params, request_rules.SDK_CHAT),
])
def test_sdk_form_is_the_body_split_into_keywords_and_extra_body(helper, known):
    params = {"model": "m", "temperature": 1.0, "extra_body": {"priority": 2}}
    for kw in ({}, {"top_k": 3}, {"engine_data": True}):
        body = helper(params, **kw)
        sdk = helper(params, sdk=True, **kw)
        extra = sdk.pop("extra_body")
        assert set(sdk) <= known and not set(extra) & (known - {"extra_body"})
        assert {**sdk, **extra} == {**{k: v for k, v in body.items() if k != "extra_body"}, "priority": 2}
    with pytest.raises(TypeError, match="extra_body must be a dict"):
        helper({"extra_body": [1]}, sdk=True)


def _sdk_client(handler):
    openai = pytest.importorskip("openai")
    return openai.OpenAI(base_url="http://127.0.0.1:9/v1", api_key="test", max_retries=0,
                         http_client=httpx.Client(transport=httpx.MockTransport(handler)))


CHAT_BODY = {"id": "c", "object": "chat.completion", "created": 0, "model": "m", "choices": [
    {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "ab"},
     "token_ids": [5, 6], "logprobs": {"content": [
         {"token": "a", "logprob": -0.5, "bytes": None, "top_logprobs": []},
         {"token": "b", "logprob": -0.25, "bytes": None, "top_logprobs": []}]}}],
    "usage": {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3}}
COMPLETION_BODY = {"id": "c", "object": "text_completion", "created": 0, "model": "m", "choices": [
    {"index": 0, "finish_reason": "stop", "text": "ab", "token_ids": [5, 6],
     "logprobs": {"tokens": ["a", "b"], "token_logprobs": [-0.5, -0.25], "top_logprobs": None, "text_offset": [0, 1]}}],
    "usage": {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3}}


def test_the_openai_sdk_takes_the_sdk_form_and_its_raw_response_parses():
    seen = []

    def handler(request):
        seen.append(json.loads(request.content))
        chat = request.url.path.endswith("/chat/completions")
        return httpx.Response(200, json=CHAT_BODY if chat else COMPLETION_BODY)

    client = _sdk_client(handler)
    chat = tokenwire.chat_completions_request_params({"model": "m", "messages": [{"role": "user", "content": "hi"}]},
                                                      top_k=2, sdk=True)
    with pytest.raises(TypeError, match="return_token_ids"):  # the body form is not the SDK's
        client.chat.completions.create(**tokenwire.chat_completions_request_params({"model": "m", "messages": []}))
    raw = client.chat.completions.with_raw_response.create(**chat)
    assert seen[-1] == tokenwire.chat_completions_request_params(
        {"model": "m", "messages": [{"role": "user", "content": "hi"}]}, top_k=2)
    assert tokenwire.parse_chat_completions_response(raw).choices[0].completion_ids.tolist() == [5, 6]
    params = tokenwire.completions_request_params({"model": "m", "prompt": [1, 2]}, engine_data=True, sdk=True)
    raw = client.completions.with_raw_response.create(**params)
    assert seen[-1] == tokenwire.completions_request_params({"model": "m", "prompt": [1, 2]}, engine_data=True)
    assert tokenwire.parse_completions_response(raw.content).choices[0].completion_logprobs.tolist() == [-0.5, -0.25]


def test_the_keywords_kept_apart_are_the_sdk_s_own():
    import inspect

    client = _sdk_client(lambda request: httpx.Response(200, json={}))
    for create, known in ((client.chat.completions.create, request_rules.SDK_CHAT),
                          (client.completions.create, request_rules.SDK_COMPLETIONS)):
        assert known <= set(inspect.signature(create).parameters)
