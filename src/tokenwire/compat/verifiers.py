"""verifiers' train client on tokenwire's readers: a drop-in for its parse path.

verifiers 0.4.0's ``TrainClient.get_response`` (``verifiers/v1/clients/train.py``) calls
renderers' ``generate()`` (renderers 0.1.12, the stable release, is what it installs), then
``response_from_generate(result, ...)`` to make its typed ``Response``. :func:`patch` does two
things:

- it patches renderers' parsers with :mod:`tokenwire.compat.renderers` (the response body is
  read by tokenwire, and a present sampling mask is validated against the completion's ids);
- it replaces ``response_from_generate`` in ``verifiers.v1.clients.train`` (``get_response``
  looks it up there at each call) with :func:`response_from_generate`, which checks the
  generate result's evidence against itself before handing it to verifiers' own function:
  one finite logprob per completion token, none missing or vLLM's ``-9999``; every
  sampling-mask row holding its sampled id; the routing array one row per prompt and
  completion token but the last (from its ``start``). On a valid result it returns exactly
  what verifiers' function returns (it *is* verifiers' function, called after the checks).

Every refusal raises :data:`MalformedGenerateResponseError` (from
:mod:`tokenwire.compat.renderers`): both ``tokenwire.MalformedResponseError`` and renderers'
``MalformedGenerateResponseError``, the class renderers' ``generate()`` already raises inside
``get_response`` (verifiers catches neither, so its callers see what they saw before).
:func:`unpatch` puts verifiers' and renderers' own functions back; :func:`patched` does both
around a block. A verifiers release other than :data:`SUPPORTED_VERSIONS` is refused
(``RuntimeError``).
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import inspect
import sys
import threading
from typing import Any

import numpy as np

import tokenwire

from ..base._errors import MalformedResponseError
from . import _patching, distribution_version
from ..base._table import KEY
from ..base._types import Ragged
from ..base._wire import VLLM_LOGPROB_SENTINEL
from ..rules import arrays as _arrays
from ..rules import generate as _rules
from . import renderers as _renderers

__all__ = ["check_generate_result", "original", "response_from_generate", "verifiers_version", *_patching.API]

SUPPORTED_VERSIONS: tuple[str, ...] = ("0.4.0",)
_MODULE = "verifiers.v1.clients.train"
_NAME = "response_from_generate"

_lock = threading.RLock()
_GENERATE = "renderers.client"
# verifiers' own response_from_generate while patched; whether patch() patched renderers too;
# renderers' generate() where patch() put _in_generate's wrapper around it.
_state: dict[str, Any] = {"theirs": None, "renderers": False, "generate": None}


def verifiers_version() -> str | None:
    """The installed verifiers release (its metadata), None when it is not installed."""
    return distribution_version("verifiers")


def _error(reason: str, field: str | None = None, token: int | None = None) -> Exception:
    return _renderers.MalformedGenerateResponseError(reason, choice=0, field=field, token=token)


# --- the checks ----------------------------------------------------------------------------------


def _logprobs(values: Any, n: int) -> None:
    """One finite logprob per completion token, none vLLM's -9999 (renderers' messages)."""
    if values is None:
        raise _error("Engine response choice.logprobs must be an object.", "completion_logprobs")
    count = len(values)
    if count != n:
        raise _error(f"Engine response completion token count ({n}) does not match logprob count ({count}).",
                     "completion_logprobs")
    if isinstance(values, np.ndarray):
        array = values.astype(np.float64, copy=False) if values.dtype.kind == "f" else None
    else:
        array = _renderers._numbers(list(values))
    if array is None or array.ndim != 1:
        index = next((i for i, v in enumerate(values)
                      if isinstance(v, bool) or not isinstance(v, (int, float, np.floating))), 0)
        raise _error(f"Engine response choice.logprobs.content[{index}].logprob must be a number.",
                     "completion_logprobs", index)
    bad = np.flatnonzero(~np.isfinite(array) | (array == VLLM_LOGPROB_SENTINEL))
    if len(bad):
        index = int(bad[0])
        what = "must be finite" if not np.isfinite(array[index]) else "does not contain sampling evidence"
        raise _error(f"Engine response choice.logprobs.content[{index}].logprob {what}.",
                     "completion_logprobs", index)


def check_generate_result(result: Any) -> Ragged | None:
    """Checks a renderers ``generate()`` result's evidence against itself (see the module's
    docstring); raises :data:`MalformedGenerateResponseError` at the first misalignment.
    Returns the sampling mask's rows (None without a mask)."""
    if not isinstance(result, dict):
        raise TypeError(f"a generate() result is a dict, not {type(result).__name__}")
    completion = result.get("completion_ids") or []
    c = _renderers._evidence(0)
    ids = _renderers._ids(c, completion)
    _logprobs(result.get("completion_logprobs"), len(ids))
    choice: dict[str, Any] = {}
    mask = result.get("sampling_mask")
    if mask:  # verifiers reads a mask that is not empty
        choice[KEY.sampling_mask] = mask
    routed = result.get("routed_experts")
    decoded: dict[int, np.ndarray] = {}
    if routed is not None:
        if isinstance(routed, dict) and type(routed.get("data")) is memoryview:
            array = _renderers.decoded_routing(routed["data"])  # decoded with the document
            try:
                decoded[id(routed["data"])] = tokenwire.b64decode(routed["data"]) if array is None else array
            except MalformedResponseError:
                raise _error("Invalid routed_experts base64", "routed_experts.data") from None
        choice[KEY.routed_experts] = routed
    if not choice:
        return None
    c = _renderers._evidence(0, decoded, _renderers._choice(c, choice))
    rows = _renderers.validated_mask(mask, ids) if mask else None
    if mask and rows is None:
        rows = _rules.parse_sampling_mask(c.choice, ids, _renderers._with_mask_rows(c))
    if routed is not None:
        routing = _rules.parse_routed_experts(routed, c)
        prompt = result.get("prompt_ids")
        expected, counted = _arrays.routed_rows(len(ids), len(prompt) if isinstance(prompt, list) else None,
                                            start=routing.start or 0)
        _arrays.check_rows(c, routing.array, KEY.routed_experts, expected, counted)
    return rows


def response_from_generate(result: dict, model: str, bridged_turn: Any = None,
                           mm_token_type_id_map: dict[int, int] | None = None) -> Any:
    """verifiers' ``response_from_generate``, after :func:`check_generate_result`: the same
    ``Response`` on a valid result (verifiers' own function makes it)."""
    rows = check_generate_result(result)
    if rows is None or type(result.get("sampling_mask")) is not list:
        return original()(result, model, bridged_turn, mm_token_type_id_map)
    # verifiers' SamplingMask.from_sampling_mask makes its int32 ids and counts with a Python
    # step per row; they are the rows tokenwire read, so the mask is made from those.
    response = original()({**result, "sampling_mask": None}, model, bridged_turn, mm_token_type_id_map)
    if response.tokens is not None:
        from verifiers.v1.types import SamplingMask

        counts = np.diff(rows.offsets).astype(np.int32)
        response.tokens.sampling_mask = SamplingMask(ids=np.ascontiguousarray(rows.values, np.int32), counts=counts)
    return response


# --- patching ------------------------------------------------------------------------------------


def _in_generate(theirs: Any) -> Any:
    """renderers' ``generate()`` run with :data:`tokenwire.compat.renderers.in_generate` set:
    the document its ``parse_generate_response`` call makes is then read by the compiled core
    from the bytes (renderers 0.1.12; no dict per logprob record), and ``generate()`` returns
    what it returns unpatched."""

    @functools.wraps(theirs)
    async def generate(*args: Any, **kwargs: Any) -> Any:
        token = _renderers.in_generate.set(True)
        try:
            return await theirs(*args, **kwargs)
        finally:
            _renderers.in_generate.reset(token)

    generate.tokenwire_in_generate = True  # type: ignore[attr-defined]
    return generate


def original() -> Any:
    """verifiers' own ``response_from_generate`` (from before the patch when it is active)."""
    with _lock:
        theirs = _state["theirs"]
        return theirs if theirs is not None else getattr(importlib.import_module(_MODULE), _NAME)


def _check(module: Any) -> None:
    _patching.require_release("verifiers", "verifiers", "verifiers", verifiers_version(), SUPPORTED_VERSIONS)
    theirs = getattr(module, _NAME, None)
    if theirs is None:
        raise RuntimeError(f"{_MODULE} has no {_NAME}; not patching")
    ours, shape = inspect.signature(response_from_generate), inspect.signature(theirs)
    if list(ours.parameters) != list(shape.parameters):
        raise RuntimeError(f"{_MODULE}.{_NAME}{shape} does not match tokenwire's {_NAME}{ours}; not patching")


def patch() -> None:
    """Patch renderers' parsers (:func:`tokenwire.compat.renderers.patch`) and replace
    ``response_from_generate`` in ``verifiers.v1.clients.train``. Idempotent; raises
    ``RuntimeError`` (patching nothing) for a verifiers or renderers release not followed."""
    with _lock:
        if _state["theirs"] is not None:
            return
        module = importlib.import_module(_MODULE)
        _check(module)
        patched_renderers = not _renderers._saved
        _renderers.patch()
        _state["renderers"] = patched_renderers
        _state["theirs"] = getattr(module, _NAME)
        setattr(module, _NAME, response_from_generate)
        client = sys.modules.get(_GENERATE)
        theirs = getattr(client, "generate", None)
        if (_renderers.renderers_version() == "0.1.12" and inspect.iscoroutinefunction(theirs)
                and not getattr(theirs, "tokenwire_in_generate", False)):
            _state["generate"] = theirs
            client.generate = _in_generate(theirs)


def unpatch() -> None:
    """Put verifiers' ``response_from_generate`` back (unless someone replaced it since), and
    renderers' parsers when :func:`patch` patched them."""
    with _lock:
        theirs = _state["theirs"]
        if theirs is None:
            return
        module = sys.modules.get(_MODULE)
        if module is not None and getattr(module, _NAME, None) is response_from_generate:
            setattr(module, _NAME, theirs)
        if _state["renderers"]:
            _renderers.unpatch()
        client = sys.modules.get(_GENERATE)
        wrapped = getattr(client, "generate", None)
        if _state["generate"] is not None and getattr(wrapped, "__wrapped__", None) is _state["generate"]:
            client.generate = _state["generate"]
        _state.update(theirs=None, renderers=False, generate=None)


def is_patched() -> bool:
    """Whether verifiers' train client and renderers' parsers are both patched."""
    module = sys.modules.get(_MODULE)
    return (module is not None and getattr(module, _NAME, None) is response_from_generate
            and _renderers.is_patched())


def patched() -> contextlib.AbstractContextManager[Any]:
    """``with patched() as train:`` runs the block with :func:`patch` in effect (``train`` is
    ``verifiers.v1.clients.train``); afterwards the state is what it was before."""
    return _patching.block(_lock, lambda: _state["theirs"] is not None, patch, unpatch, _MODULE)
