"""TRL's vLLM client on tokenwire's readers: a drop-in for ``VLLMClient.generate`` and ``chat``.

TRL 1.16.0's ``VLLMClient`` (``trl/generation/vllm_client.py``) talks to the server
``trl vllm-serve`` starts, which is vLLM's own OpenAI-compatible server
(``trl/scripts/vllm_serve.py`` builds a ``vllm serve`` command): ``generate`` posts to
``/v1/completions`` and ``chat`` to ``/v1/chat/completions``, both with ``return_token_ids``
and ``return_tokens_as_token_ids``, through ``VLLMClient._post`` (a synchronous
``requests.Session``, then ``response.json()``), and the module's ``parse_logprobs`` turns
each choice's logprobs into lists per token (a ``NaN`` logprob into ``None``).

:func:`patch` replaces those two hooks, and TRL's own ``generate``/``chat`` keep doing
everything else (the request, the retries, the ``ThreadPoolExecutor`` of ``chat``, the
result dict):

- ``VLLMClient._post``: for a completions or chat-completions request of ``generate``/``chat``
  (``return_tokens_as_token_ids`` set) it reads the raw body with tokenwire's OpenAI-format
  parsers (``parse_completions_response`` / ``parse_chat_completions_response``: exact
  ids, one finite logprob per id, none vLLM's ``-9999``, ``null`` or ``NaN``) and hands
  TRL's code the ids and logprobs it reads, no dict per token. Other requests (``/health``,
  ``get_sequence_logprobs``' prompt logprobs, weight sync) go through TRL's own ``_post``.
- ``parse_logprobs``: for choices read by tokenwire, the nested lists TRL returns, made from
  tokenwire's arrays; anything else goes to TRL's own function.

On valid responses the result is TRL's: the same dict, lists of Python ints and floats. With
``logprobs=0`` (TRL's default) each token's entry is the sampled token alone, which is what
vLLM sends then; with ``logprobs=N > 0`` the response is validated by tokenwire first, and
the candidates are then merged and sorted by TRL's own ``parse_logprobs`` on the document.

Every refusal raises :data:`MalformedResponseError` (tokenwire's, a ``ValueError``; TRL
itself raises nothing for a malformed body: its ``_post`` raises a bare ``Exception`` for an
HTTP status other than 200 only, and that stays as it is). Where TRL turns a ``NaN`` logprob
into ``None``, the drop-in refuses it: a missing logprob is not evidence. :func:`unpatch` puts
TRL's functions back; :func:`patched` does both around a block.
"""

from __future__ import annotations

import contextlib
import importlib
import sys
import threading
from typing import Any

import numpy as np

import tokenwire

from ..base import _json
from ..read import _select
from ..base._errors import MalformedResponseError
from . import _patching, distribution_version

__all__ = ["MalformedResponseError", "TokenwireChoices", "parse_logprobs", "trl_version", *_patching.API]

SUPPORTED_VERSIONS: tuple[str, ...] = ("1.16.0",)
_MODULE = "trl.generation.vllm_client"

_lock = threading.RLock()
# TRL's own functions while patched: "_post" (VLLMClient's method), "parse_logprobs".
_saved: dict[str, Any] = {}


def trl_version() -> str | None:
    """The installed TRL release (its metadata), None when it is not installed."""
    return distribution_version("trl")


class TokenwireChoices:
    """What the patched ``_post`` hands ``generate``/``chat`` in place of ``response.json()``
    for a body tokenwire read: ``["choices"]`` and ``["prompt_token_ids"]`` as TRL indexes
    them, each choice a dict of ``prompt_token_ids``, ``token_ids`` (lists of ints) and
    ``logprobs`` (a :class:`_Logprobs` for :func:`parse_logprobs`, or None when none were
    asked for); every other key is the document's, read on first use."""

    __slots__ = ("_document", "_raw", "choices", "prompt_token_ids")

    def __init__(self, raw: bytes, choices: list[dict[str, Any]], prompt_token_ids: Any) -> None:
        self._raw, self._document = raw, None
        self.choices, self.prompt_token_ids = choices, prompt_token_ids

    def __getitem__(self, key: str) -> Any:
        if key == "choices":
            return self.choices
        if key == "prompt_token_ids" and self.prompt_token_ids is not None:
            return self.prompt_token_ids
        return self.document()[key]

    def __contains__(self, key: str) -> bool:
        return key == "choices" or (key == "prompt_token_ids" and self.prompt_token_ids is not None) or (
            key in self.document())

    def document(self) -> dict[str, Any]:
        """The whole document, parsed (once) when something asks for more than TRL reads."""
        if self._document is None:
            self._document = _json.loads(self._raw)
        return self._document


class _Logprobs:
    """One choice's sampled ids and logprobs as tokenwire read them; with ``heads`` the
    document's own logprobs object (TRL's ``parse_logprobs`` merges the candidates)."""

    __slots__ = ("ids", "values", "heads")

    def __init__(self, ids: np.ndarray, values: np.ndarray, heads: Any = None) -> None:
        self.ids, self.values, self.heads = ids, values, heads


def _request(kwargs: dict[str, Any]) -> dict[str, Any] | None:
    body = kwargs.get("json")
    return body if isinstance(body, dict) and body.get("return_tokens_as_token_ids") else None


def _heads_wanted(url: str, body: dict[str, Any]) -> bool | None:
    """None: no logprobs asked for; False: the sampled token's alone; True: candidates."""
    if url.endswith("/v1/chat/completions"):
        if not body.get("logprobs"):
            return None
        return bool(body.get("top_logprobs"))
    logprobs = body.get("logprobs")
    return None if logprobs is None else bool(logprobs)


def _post(self: Any, url: str, **kwargs: Any) -> Any:
    """``VLLMClient._post``, reading a ``generate``/``chat`` body with tokenwire."""
    body = _request(kwargs)
    chat = url.endswith("/v1/chat/completions")
    if body is None or not (chat or url.endswith("/v1/completions")):
        return _saved["_post"](self, url, **kwargs)
    response = self.session.post(url, **kwargs)
    if response.status_code != 200:
        raise Exception(f"Request failed: {response.status_code}, {response.text}")
    raw = response.content
    wanted = _heads_wanted(url, body)
    parse = tokenwire.parse_chat_completions_response if chat else tokenwire.parse_completions_response
    # usage counts what the server generated, n choices included; the ids decide here as in TRL.
    parsed = parse(raw, require_logprobs=wanted is not None, check_usage=False)
    document = _json.loads(raw) if wanted else None
    choices = []
    for index, choice in enumerate(parsed.choices):
        ids = choice.completion_ids
        item: dict[str, Any] = {"token_ids": ids.tolist()}
        if not chat:
            prompt = choice.raw.get("prompt_token_ids")
            if prompt is None:
                raise MalformedResponseError("prompt_token_ids are missing (the request sets return_token_ids)",
                                             choice=index, field="prompt_token_ids")
            item["prompt_token_ids"] = np.asarray(prompt).tolist()
        if wanted is None:
            item["logprobs"] = None
        else:
            heads = document["choices"][index]["logprobs"] if document is not None else None
            item["logprobs"] = _Logprobs(ids, choice.completion_logprobs, heads)
        choices.append(item)
    prompt = parsed.prompt_token_ids
    if chat and prompt is None:
        raise MalformedResponseError("prompt_token_ids are missing (the request sets return_token_ids)",
                                     field="prompt_token_ids")
    return TokenwireChoices(raw, choices, None if prompt is None else prompt.tolist())


def parse_logprobs(choices_logprobs: list[Any]) -> tuple[list | None, list | None]:
    """TRL's ``parse_logprobs``: ``(logprobs, logprob_token_ids)``, each of shape
    (sequences, tokens, entries), or ``(None, None)``; for choices tokenwire read, made from
    its arrays (``logprobs=0``: ``[[logprob]]`` and ``[[id]]`` per token)."""
    if not choices_logprobs or not any(isinstance(c, _Logprobs) for c in choices_logprobs):
        return _saved.get("parse_logprobs", _their_parse_logprobs())(choices_logprobs)
    if choices_logprobs[0] is None:
        return None, None
    if any(c.heads is not None for c in choices_logprobs):
        # Candidates: validated by tokenwire already, merged and sorted by TRL's own code.
        return _saved["parse_logprobs"]([c.heads for c in choices_logprobs])
    all_logprobs, all_ids = [], []
    rows_to_lists = _select.kernels.rows_to_lists
    for c in choices_logprobs:
        n = len(c.ids)
        offsets = np.arange(n + 1, dtype=np.int64)  # one entry per token
        values, ids = rows_to_lists(offsets, np.ascontiguousarray(c.values, np.float64),
                                    np.ascontiguousarray(c.ids, np.int64))
        all_logprobs.append(values)
        all_ids.append(ids)
    return all_logprobs, all_ids


def _their_parse_logprobs() -> Any:
    return importlib.import_module(_MODULE).parse_logprobs


# --- patching ------------------------------------------------------------------------------------


def _check() -> Any:
    _patching.require_release("trl", "TRL", "trl", trl_version(), SUPPORTED_VERSIONS)
    module = importlib.import_module(_MODULE)
    for name in ("parse_logprobs", "VLLMClient"):
        if not hasattr(module, name):
            raise RuntimeError(f"{_MODULE} has no {name}; not patching")
    if not callable(getattr(module.VLLMClient, "_post", None)):
        raise RuntimeError(f"{_MODULE}.VLLMClient has no _post; not patching")
    return module


def patch() -> None:
    """Replace ``VLLMClient._post`` and ``parse_logprobs`` in ``trl.generation.vllm_client``
    (instances made before the patch use it too). Idempotent; raises ``RuntimeError``
    (patching nothing) for a TRL release not in :data:`SUPPORTED_VERSIONS`."""
    with _lock:
        if _saved:
            return
        module = _check()
        _saved.update(_post=module.VLLMClient.__dict__["_post"], parse_logprobs=module.parse_logprobs)
        module.VLLMClient._post = _post
        module.parse_logprobs = parse_logprobs


def unpatch() -> None:
    """Put TRL's own ``_post`` and ``parse_logprobs`` back (unless replaced since by someone else)."""
    with _lock:
        module = sys.modules.get(_MODULE)
        if module is not None and _saved:
            if module.VLLMClient.__dict__.get("_post") is _post:
                module.VLLMClient._post = _saved["_post"]
            if module.parse_logprobs is parse_logprobs:
                module.parse_logprobs = _saved["parse_logprobs"]
        _saved.clear()


def is_patched() -> bool:
    """Whether TRL's vLLM client currently runs on the replacements."""
    module = sys.modules.get(_MODULE)
    return (module is not None and module.VLLMClient.__dict__.get("_post") is _post
            and module.parse_logprobs is parse_logprobs)


def patched() -> contextlib.AbstractContextManager[Any]:
    """``with patched() as vllm_client:`` runs the block with :func:`patch` in effect
    (``vllm_client`` is ``trl.generation.vllm_client``); afterwards the state is what it was."""
    return _patching.block(_lock, lambda: bool(_saved), patch, unpatch, _MODULE)
