"""How to ask each server for what a parser needs: the request parameters of the
OpenAI-compatible endpoints and of SGLang's ``/generate``, and what each endpoint's errors say
to request (every error that blames a missing field names the request flag that produces
it). Part of the rules (:mod:`tokenwire.rules.openai` applies them)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..base._args import check_top_k

# --- how to ask each server for what a parser needs (every error that blames a missing field
# --- says which request flag produces it) --------------------------------------------------------


@dataclass(frozen=True)
class _Endpoint:
    name: str
    format: str  # GenerateResponse.format
    ids_advice: str
    logprobs_advice: str
    heads_advice: str
    dynamo_advice: str = ""  # the ids advice for a response from NVIDIA Dynamo


def _dynamo_advice(helper: str) -> str:
    return (
        "the response comes from NVIDIA Dynamo (it carries `nvext`), whose exact ids are the "
        "engine's own: set `nvext: {\"extra_fields\": [\"engine_data\"]}` in the request, which "
        "adds `nvext.engine_data.completion_token_ids` (and, with `logprobs` set, "
        f"`completion_logprobs`). tokenwire.{helper}(params, engine_data=True) sets it"
    )


_COMPLETIONS = _Endpoint(
    name="/v1/completions",
    format="completions",
    ids_advice=(
        "set `return_token_ids: true` in the request (vLLM; Fireworks too), which adds "
        "`choices[].token_ids`; or, with `logprobs`, vLLM's `return_tokens_as_token_ids: true` "
        "(tokens become \"token_id:N\"); on Fireworks `raw_output: true` adds "
        "`raw_output.completion_token_ids` and `logprobs: true` gives `logprobs.content[]` "
        "entries with `token_id`; Together sends `logprobs.token_ids` whenever `logprobs` is "
        "set; NVIDIA Dynamo sends the engine's ids with `nvext: {\"extra_fields\": "
        "[\"engine_data\"]}`. tokenwire.completions_request_params() sets vLLM's flags "
        "(`engine_data=True`: Dynamo's)"
    ),
    logprobs_advice="set `logprobs` in the request (an int, e.g. 1)",
    heads_advice=(
        "set `return_tokens_as_token_ids: true` (vLLM) so `top_logprobs` is keyed by "
        "\"token_id:N\", or use Fireworks' `logprobs: true` with `top_logprobs` (candidates "
        "carry `token_id`)"
    ),
    dynamo_advice=_dynamo_advice("completions_request_params"),
)


_CHAT = _Endpoint(
    name="/v1/chat/completions",
    format="chat",
    ids_advice=(
        "set `return_token_ids: true` in the request (vLLM; Fireworks too), which adds "
        "`choices[].token_ids`; or vLLM's `return_tokens_as_token_ids: true` with "
        "`logprobs: true` (`logprobs.content[].token` becomes \"token_id:N\"); on Fireworks "
        "`raw_output: true` adds `raw_output.completion_token_ids`, and `logprobs: true` gives "
        "`logprobs.content[]` entries with `token_id`; Together sends `logprobs.token_ids` "
        "whenever `logprobs` is set; NVIDIA Dynamo sends the engine's ids with `nvext: "
        "{\"extra_fields\": [\"engine_data\"]}`. tokenwire.chat_completions_request_params() "
        "sets vLLM's flags (`engine_data=True`: Dynamo's)"
    ),
    logprobs_advice="set `logprobs: true` in the request",
    heads_advice=(
        "set `return_tokens_as_token_ids: true` (vLLM) so candidates are \"token_id:N\"; "
        "Fireworks candidates carry `token_id`"
    ),
    dynamo_advice=_dynamo_advice("chat_completions_request_params"),
)


_SGLANG = _Endpoint(
    name="/generate",
    format="sglang",
    ids_advice=(
        "set `return_logprob: true` in the request: `meta_info.output_token_logprobs` then "
        "holds a [logprob, token_id, text] triple per token. "
        "tokenwire.sglang_generate_request_params() sets it"
    ),
    logprobs_advice="set `return_logprob: true` in the request",
    heads_advice="set `top_logprobs_num` in the request (k + 2 for a head of k)",
)


def _asked(params: Any, top_k: int | None) -> tuple[dict[str, Any], int | None]:
    if not isinstance(params, dict):
        raise TypeError(f"params must be a dict, not {type(params).__name__}")
    return dict(params), check_top_k(top_k)


def _own_candidates(params: dict[str, Any], k: int | None) -> None:
    """vLLM's ``logprob_token_ids`` (the candidate ids the caller chose, which take precedence
    over the natural top-k) cannot be asked for beside a head: the response would look like
    a top-k response, but its candidates would be the caller's, not the sampler's top, and
    a head built from them would be wrong."""
    if k is not None and params.get("logprob_token_ids") is not None:
        raise ValueError(
            "logprob_token_ids cannot be combined with top_k: vLLM then returns the logprobs of "
            "the ids you chose in place of the natural top-k candidates, so the response looks "
            "like a top-k response but a head built from it is not the sampler's; drop "
            "logprob_token_ids to get a head, or top_k to score your own ids"
        )


def _ask_ids(out: dict[str, Any], engine_data: bool) -> None:
    """vLLM's ``return_token_ids``, or NVIDIA Dynamo's engine data: ``"engine_data"`` joins
    ``nvext.extra_fields`` (the caller's ``nvext`` is copied, never changed)."""
    if not engine_data:
        out.setdefault("return_token_ids", True)
        return
    nvext = out.get("nvext")
    nvext = {} if nvext is None else nvext
    fields = nvext.get("extra_fields") if isinstance(nvext, dict) else None
    fields = [] if fields is None else fields
    if not isinstance(nvext, dict) or not isinstance(fields, list):
        raise TypeError("params' nvext must be a dict, and its extra_fields a list")
    out["nvext"] = {**nvext, "extra_fields": fields if "engine_data" in fields else [*fields, "engine_data"]}


# The keyword arguments the OpenAI SDK's ``create`` takes by name (its request fields, long
# stable across releases); every other request field (vLLM's and Dynamo's extensions) goes in
# ``extra_body``, which the SDK merges into the JSON body it sends.
_SDK_COMMON = frozenset({
    "model", "frequency_penalty", "logit_bias", "logprobs", "max_tokens", "n", "presence_penalty",
    "seed", "stop", "stream", "stream_options", "temperature", "top_p", "user",
    "extra_headers", "extra_query", "extra_body", "timeout",
})
SDK_COMPLETIONS = _SDK_COMMON | {"prompt", "best_of", "echo", "suffix"}
SDK_CHAT = _SDK_COMMON | {
    "messages", "audio", "function_call", "functions", "max_completion_tokens", "metadata",
    "modalities", "parallel_tool_calls", "prediction", "reasoning_effort", "response_format",
    "service_tier", "store", "tool_choice", "tools", "top_logprobs",
}


def _for_sdk(body: dict[str, Any], known: frozenset[str]) -> dict[str, Any]:
    """``body`` as the OpenAI SDK's ``create(**kwargs)`` takes it: its own fields as keyword
    arguments, the others under ``extra_body`` (merged with the caller's, which wins)."""
    kwargs = {key: value for key, value in body.items() if key in known}
    extra = {key: value for key, value in body.items() if key not in known}
    given = kwargs.pop("extra_body", None)
    if given is not None and not isinstance(given, dict):
        raise TypeError(f"params' extra_body must be a dict, not {type(given).__name__}")
    extra.update(given or {})
    if extra:
        kwargs["extra_body"] = extra
    return kwargs


def completions_request_params(
    params: dict[str, Any], *, top_k: int | None = None, engine_data: bool = False, sdk: bool = False
) -> dict[str, Any]:
    """A copy of ``/v1/completions`` request ``params`` that asks for exact ids.

    Sets ``return_token_ids=True`` and ``logprobs=1`` (``top_k + 2`` with a head, plus
    ``return_tokens_as_token_ids=True`` so candidates are keyed by id) only where the caller
    did not: an explicit ``False`` is kept, and parsing the response then fails loudly.
    These are vLLM's names; Fireworks accepts ``return_token_ids`` as well. With ``top_k``,
    ``logprob_token_ids`` in ``params`` raises ValueError (the candidates would be the
    caller's, not the sampler's top-k). With ``engine_data=True`` (NVIDIA Dynamo) the ids are
    asked of the engine instead: ``"engine_data"`` joins ``nvext.extra_fields`` (the caller's
    ``nvext`` is copied, not changed) and ``return_token_ids`` is not set.

    The result is the JSON body (``httpx.post(url, json=...)``); with ``sdk=True`` it is the
    OpenAI SDK's keyword arguments, the fields the SDK does not name under ``extra_body``
    (``client.completions.create(**completions_request_params(params, sdk=True))``)::

        >>> completions_request_params({"model": "m", "prompt": [1, 2]})
        {'model': 'm', 'prompt': [1, 2], 'return_token_ids': True, 'logprobs': 1}
        >>> completions_request_params({"model": "m", "prompt": [1, 2]}, sdk=True)
        {'model': 'm', 'prompt': [1, 2], 'logprobs': 1, 'extra_body': {'return_token_ids': True}}
    """
    out, k = _asked(params, top_k)
    _own_candidates(out, k)
    _ask_ids(out, engine_data)
    out.setdefault("logprobs", 1 if k is None else k + 2)
    if k is not None:
        out.setdefault("return_tokens_as_token_ids", True)
    return _for_sdk(out, SDK_COMPLETIONS) if sdk else out


def chat_completions_request_params(
    params: dict[str, Any], *, top_k: int | None = None, engine_data: bool = False, sdk: bool = False
) -> dict[str, Any]:
    """A copy of ``/v1/chat/completions`` request ``params`` that asks for exact ids.

    Sets ``return_token_ids=True`` and ``logprobs=True`` (with a head also
    ``top_logprobs=top_k + 2`` and ``return_tokens_as_token_ids=True``) where the caller did
    not; explicit values, ``False`` included, are kept. With ``top_k``, ``logprob_token_ids``
    in ``params`` raises ValueError, as in :func:`completions_request_params`.
    ``engine_data=True`` asks NVIDIA Dynamo for its engine's ids instead of
    ``return_token_ids`` (see :func:`completions_request_params`). ``sdk=True`` gives the
    OpenAI SDK's keyword arguments (``client.chat.completions.create(**...)``), the fields it
    does not name under ``extra_body``::

        >>> chat_completions_request_params({"model": "m", "messages": []}, top_k=4, sdk=True)
        {'model': 'm', 'messages': [], 'logprobs': True, 'top_logprobs': 6, 'extra_body': {'return_token_ids': True, 'return_tokens_as_token_ids': True}}
    """
    out, k = _asked(params, top_k)
    _own_candidates(out, k)
    _ask_ids(out, engine_data)
    out.setdefault("logprobs", True)
    if k is not None:
        out.setdefault("top_logprobs", k + 2)
        out.setdefault("return_tokens_as_token_ids", True)
    return _for_sdk(out, SDK_CHAT) if sdk else out


def sglang_generate_request_params(
    params: dict[str, Any], *, top_k: int | None = None
) -> dict[str, Any]:
    """A copy of SGLang ``/generate`` request ``params`` that asks for exact ids:
    ``return_logprob=True`` (with a head also ``top_logprobs_num=top_k + 2``) where the
    caller did not set them."""
    out, k = _asked(params, top_k)
    out.setdefault("return_logprob", True)
    if k is not None:
        out.setdefault("top_logprobs_num", k + 2)
    return out


def _nested(out: dict[str, Any], key: str, where: str) -> dict[str, Any]:
    """A copy of the dict ``out[key]`` (empty when absent), put back in ``out``."""
    value = out.get(key)
    if value is None:
        value = {}
    if not isinstance(value, dict):
        raise TypeError(f"{where} must be a dict, not {type(value).__name__}")
    out[key] = value = dict(value)
    return value


def generate_request_params(
    params: dict[str, Any],
    *,
    top_k: int | None = None,
    compact: bool = False,
    sampling_mask: bool = False,
    routed_experts: bool = False,
    payload_dir: str | None = None,
) -> dict[str, Any]:
    """A copy of vLLM ``/inference/v1/generate`` request ``params`` (prime-rl's server too)
    that asks for the evidence :func:`tokenwire.parse_generate_response` reads.

    ``params`` holds the prompt's ids as ``token_ids`` (the endpoint takes ids, not text) and
    may hold ``sampling_params`` (copied, never changed). Set where the caller did not:

    - ``sampling_params.logprobs``: ``0`` (the sampled token's logprob alone), ``top_k + 2``
      with a head (the head rule needs two candidates beyond ``k``);
    - ``compact=True``: ``sampling_params.extra_args.prl_compact_logprobs = true`` (prime-rl's
      ``compact_logprobs`` rows, binary: the fastest transport to read);
    - ``sampling_mask=True``: ``sampling_params.return_sampling_mask = true`` (the sampler's
      kept set per token; the server must run with its mask flag, see docs/formats.md);
    - ``routed_experts=True``: ``return_routed_experts = true`` (MoE routing replay);
    - ``payload_dir=PATH``: ``sampling_params.extra_args.payload_dir`` (prime-rl's by-handle
      payloads: the big arrays in files under ``PATH``; parse with ``payload_root=``).

    The result is the JSON body as it is (``httpx.post(url, json=...)``)::

        >>> generate_request_params({"model": "m", "token_ids": [1, 2]}, top_k=20, compact=True)
        {'model': 'm', 'token_ids': [1, 2], 'sampling_params': {'logprobs': 22, 'extra_args': {'prl_compact_logprobs': True}}}
    """
    out, k = _asked(params, top_k)
    if "token_ids" not in out:
        raise ValueError("params must hold token_ids, the prompt's token ids: /inference/v1/generate "
                         "takes ids, not text")
    sampling = _nested(out, "sampling_params", "params' sampling_params")
    sampling.setdefault("logprobs", 0 if k is None else k + 2)
    if compact or payload_dir is not None:
        extra = _nested(sampling, "extra_args", "params' sampling_params.extra_args")
        if compact:
            extra.setdefault("prl_compact_logprobs", True)
        if payload_dir is not None:
            if not isinstance(payload_dir, str):
                raise TypeError(f"payload_dir must be a str, not {type(payload_dir).__name__}")
            extra.setdefault("payload_dir", payload_dir)
    if sampling_mask:
        sampling.setdefault("return_sampling_mask", True)
    if routed_experts:
        out.setdefault("return_routed_experts", True)
    return out
