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


def completions_request_params(
    params: dict[str, Any], *, top_k: int | None = None, engine_data: bool = False
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
    """
    out, k = _asked(params, top_k)
    _own_candidates(out, k)
    _ask_ids(out, engine_data)
    out.setdefault("logprobs", 1 if k is None else k + 2)
    if k is not None:
        out.setdefault("return_tokens_as_token_ids", True)
    return out


def chat_completions_request_params(
    params: dict[str, Any], *, top_k: int | None = None, engine_data: bool = False
) -> dict[str, Any]:
    """A copy of ``/v1/chat/completions`` request ``params`` that asks for exact ids.

    Sets ``return_token_ids=True`` and ``logprobs=True`` (with a head also
    ``top_logprobs=top_k + 2`` and ``return_tokens_as_token_ids=True``) where the caller did
    not; explicit values, ``False`` included, are kept. With ``top_k``, ``logprob_token_ids``
    in ``params`` raises ValueError, as in :func:`completions_request_params`.
    ``engine_data=True`` asks NVIDIA Dynamo for its engine's ids instead of
    ``return_token_ids`` (see :func:`completions_request_params`).
    """
    out, k = _asked(params, top_k)
    _own_candidates(out, k)
    _ask_ids(out, engine_data)
    out.setdefault("logprobs", True)
    if k is not None:
        out.setdefault("top_logprobs", k + 2)
        out.setdefault("return_tokens_as_token_ids", True)
    return out


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
