"""The OpenAI SDK path without SDK objects: the response body as the server sent it, read by
tokenwire.

``client.completions.create(...)`` builds a pydantic object per response, and a
``Logprob`` object (then, with ``model_dump()``, a dict) per token: at 32k tokens that is
most of the time a rollout spends on a response. The functions below send the same request
through the same client (``with_raw_response``: the SDK's retries, timeouts, headers and
``APIStatusError`` subclasses are all kept) and hand the body's bytes to tokenwire's parser,
so no ``Completion``/``ChatCompletion`` object is ever built and every misaligned response is
refused with :class:`tokenwire.MalformedResponseError`::

    from openai import OpenAI
    import tokenwire
    from tokenwire.compat import openai as tw_openai

    client = OpenAI(base_url="http://127.0.0.1:8000/v1", api_key="-")
    params = tokenwire.completions_request_params({"model": m, "prompt": ids, "max_tokens": 512})
    response = tw_openai.completions(client, params)      # a tokenwire.GenerateResponse
    response.choices[0].completion_ids                    # int64, exact

``AsyncOpenAI`` clients go through :func:`acompletions` / :func:`achat_completions`. Any
client with the SDK's shape works the same way (the Fireworks SDK's ``Fireworks`` /
``AsyncFireworks``, whose ``completions`` has the same ``with_raw_response``).

The request helpers set server fields the SDK does not know (``return_token_ids``,
``return_tokens_as_token_ids``, ``nvext``, ...); ``create(**params)`` refuses them
(``TypeError: ... unexpected keyword argument 'return_token_ids'``). :func:`create_kwargs`
splits request params into ``create``'s own keyword arguments and ``extra_body``; the
functions here call it for you. Nothing here imports ``openai``: any client object with the
SDK's shape is accepted.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

import tokenwire

__all__ = [
    "achat_completions",
    "acompletions",
    "body_of",
    "chat_completions",
    "completions",
    "create_kwargs",
]

# The keyword arguments every SDK ``create`` takes beside the endpoint's own fields.
_TRANSPORT = ("extra_headers", "extra_query", "extra_body", "timeout")


def _named_parameters(create: Callable[..., Any]) -> frozenset[str] | None:
    """The keyword arguments ``create`` names (None: it takes ``**kwargs``, so any)."""
    try:
        parameters = inspect.signature(create).parameters.values()
    except (TypeError, ValueError):  # a builtin or an object without a signature
        return None
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        return None
    return frozenset(p.name for p in parameters if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD))


def create_kwargs(params: Mapping[str, Any], create: Callable[..., Any]) -> dict[str, Any]:
    """``params`` (a request body, e.g. from :func:`tokenwire.completions_request_params`) as
    keyword arguments ``create`` accepts: the fields ``create`` names stay keywords, every
    other one goes into ``extra_body`` (merged over the caller's own ``extra_body``, which
    wins on a clash: it is the explicit one). ``create`` is the SDK method the request goes
    to (``client.completions.create``, or its ``with_raw_response.create``).

    >>> def create(*, model, prompt, logprobs=None, extra_body=None, timeout=None): ...
    >>> create_kwargs({"model": "m", "prompt": [1], "logprobs": 1, "return_token_ids": True}, create)
    {'model': 'm', 'prompt': [1], 'logprobs': 1, 'extra_body': {'return_token_ids': True}}
    """
    if not isinstance(params, Mapping):
        raise TypeError(f"params must be a mapping of request fields, not {type(params).__name__}")
    named = _named_parameters(create)
    if named is None:
        return dict(params)
    kwargs: dict[str, Any] = {}
    extra: dict[str, Any] = {}
    for key, value in params.items():
        if not isinstance(key, str):
            raise TypeError(f"request field names must be str, not {type(key).__name__}")
        if key in named and key != "extra_body":
            kwargs[key] = value
        elif key != "extra_body":
            extra[key] = value
    given = params.get("extra_body")
    if given is not None:
        if not isinstance(given, Mapping):
            raise TypeError(f"extra_body must be a mapping, not {type(given).__name__}")
        extra.update(given)
    if extra:
        if "extra_body" not in named:
            raise TypeError(f"{getattr(create, '__qualname__', create)!r} takes no extra_body for "
                            f"the fields it does not name: {sorted(extra)}")
        kwargs["extra_body"] = extra
    return kwargs


def body_of(response: Any) -> bytes:
    """The body of what ``with_raw_response.create(...)`` returned (the SDK's raw response,
    or an ``httpx.Response``), as bytes."""
    http = getattr(response, "http_response", response)
    content = getattr(http, "content", None)
    if not isinstance(content, (bytes, bytearray, memoryview)):
        raise TypeError(f"not a raw SDK response (no bytes content): {type(response).__name__}")
    return bytes(content) if not isinstance(content, bytes) else content


def _raw_create(resource: Any) -> Callable[..., Any]:
    raw = getattr(resource, "with_raw_response", None)
    create = getattr(raw, "create", None)
    if create is None:
        raise TypeError(f"{type(resource).__name__} has no with_raw_response.create: not an OpenAI-SDK-shaped "
                        "client resource (client.completions or client.chat.completions)")
    return create


def _request(params: Mapping[str, Any], options: Mapping[str, Any], create: Callable[..., Any]) -> dict[str, Any]:
    if params.get("stream"):
        raise ValueError("stream=True is not read here: a streamed response has no single body to check; "
                         "leave stream unset")
    kwargs = create_kwargs(params, create)
    for key, value in options.items():
        if key not in _TRANSPORT:
            raise TypeError(f"unexpected keyword argument {key!r}: request fields go in params; "
                            f"only {', '.join(_TRANSPORT)} are taken here")
        if key == "extra_body" and value is not None:
            kwargs["extra_body"] = {**kwargs.get("extra_body", {}), **value}
        else:
            kwargs[key] = value
    return kwargs


def _resources(client: Any, chat: bool) -> Any:
    return client.chat.completions if chat else client.completions


def _parser(chat: bool) -> Callable[..., Any]:
    return tokenwire.parse_chat_completions_response if chat else tokenwire.parse_completions_response


def _call(client: Any, params: Mapping[str, Any], chat: bool, parse: dict[str, Any], options: dict[str, Any]) -> Any:
    create = _raw_create(_resources(client, chat))
    return _parser(chat)(body_of(create(**_request(params, options, create))), **parse)


async def _acall(client: Any, params: Mapping[str, Any], chat: bool, parse: dict[str, Any],
                 options: dict[str, Any]) -> Any:
    create = _raw_create(_resources(client, chat))
    return _parser(chat)(body_of(await create(**_request(params, options, create))), **parse)


def completions(client: Any, params: Mapping[str, Any], *, top_k: int | None = None, require_logprobs: bool = True,
                check_usage: bool = True, num_experts: int | None = None, **options: Any) -> tokenwire.GenerateResponse:
    """``client.completions.create(**params)`` through ``with_raw_response``, the body parsed
    by :func:`tokenwire.parse_completions_response` (``top_k`` ... ``num_experts`` are its
    options). ``options`` are the SDK's own per-request ``extra_headers``, ``extra_query``,
    ``extra_body`` and ``timeout``. The SDK's errors (``openai.APIStatusError`` and its
    subclasses, ``APIConnectionError`` after its retries) pass through unchanged."""
    parse = dict(top_k=top_k, require_logprobs=require_logprobs, check_usage=check_usage, num_experts=num_experts)
    return _call(client, params, False, parse, options)


def chat_completions(client: Any, params: Mapping[str, Any], *, top_k: int | None = None,
                     require_logprobs: bool = True, check_usage: bool = True, num_experts: int | None = None,
                     **options: Any) -> tokenwire.GenerateResponse:
    """:func:`completions` for ``client.chat.completions``, parsed by
    :func:`tokenwire.parse_chat_completions_response`."""
    parse = dict(top_k=top_k, require_logprobs=require_logprobs, check_usage=check_usage, num_experts=num_experts)
    return _call(client, params, True, parse, options)


async def acompletions(client: Any, params: Mapping[str, Any], *, top_k: int | None = None,
                       require_logprobs: bool = True, check_usage: bool = True, num_experts: int | None = None,
                       **options: Any) -> tokenwire.GenerateResponse:
    """:func:`completions` for an ``AsyncOpenAI`` client (awaited)."""
    parse = dict(top_k=top_k, require_logprobs=require_logprobs, check_usage=check_usage, num_experts=num_experts)
    return await _acall(client, params, False, parse, options)


async def achat_completions(client: Any, params: Mapping[str, Any], *, top_k: int | None = None,
                            require_logprobs: bool = True, check_usage: bool = True,
                            num_experts: int | None = None, **options: Any) -> tokenwire.GenerateResponse:
    """:func:`chat_completions` for an ``AsyncOpenAI`` client (awaited)."""
    parse = dict(top_k=top_k, require_logprobs=require_logprobs, check_usage=check_usage, num_experts=num_experts)
    return await _acall(client, params, True, parse, options)
