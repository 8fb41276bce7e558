"""renderers 0.1.12's ``generate()`` reading its body through the compiled core (for
:mod:`tokenwire.compat.verifiers`): the document :func:`tokenwire.compat.renderers.
parse_generate_response` hands ``generate()`` made from what the core read of the bytes, the
records held as arrays rather than a dict each, and what the later checks of the same result
need not read again."""

from __future__ import annotations

import threading
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any

import numpy as np

import tokenwire

from ..base import _table
from ..base._errors import MalformedResponseError
from ..base._table import KEY
from ..read import _select
from ..rules import generate as _rules

_IDS_REASON = "token_ids must hold token ids in [0, 2**32)"

# The sampling mask (the object) renderers' _parse_completion_logprobs validated last in this
# thread, and the routing view generate_document made last: a check of the same generate()
# result (tokenwire.compat.verifiers) need not read them again.
checked = threading.local()


# Set while renderers 0.1.12's generate() runs under tokenwire.compat.verifiers' patch: the
# document parse_generate_response hands it is then read by the compiled core from the bytes,
# without a dict per logprob record (see generate_document).
in_generate: ContextVar[bool] = ContextVar("tokenwire_renderers_in_generate", default=False)


class ReadRecords:
    """What stands for ``logprobs.content`` in the document :func:`parse_generate_response`
    hands renderers 0.1.12's ``generate()``: the records, read and validated by the compiled
    core from the bytes, as the ids and logprobs they hold. ``generate()`` passes the choice to
    ``_parse_completion_logprobs`` and reads nothing else of it; that function returns the
    logprobs as renderers' does (a list of floats). :mod:`tokenwire.compat.nemo_gym` hands
    NeMo-Gym's vLLM model server the same on its token path, for its
    ``_extract_choice_logprobs``."""

    __slots__ = ("ids", "logprobs")

    def __init__(self, ids: list[int], logprobs: np.ndarray) -> None:
        self.ids = ids  # the choice's token_ids, the list the document holds
        self.logprobs = logprobs

    def __len__(self) -> int:
        return len(self.ids)

    def __repr__(self) -> str:
        return f"<logprobs.content: {len(self.ids)} records read by tokenwire>"


# The choice fields renderers 0.1.12's generate() reads as sent (the compiled scan leaves
# them as they are), and the evidence fields it reads, which the scan blanks and the rules read.
_GENERATE_READS = frozenset({"index", "finish_reason", KEY.token_ids, KEY.logprobs, KEY.sampling_mask,
                             KEY.routed_experts})
_BLANKED = _table.top_keys(_table.CHOICE, _table.GENERATE)
_ROUTED_PREFIX = b'"routed_experts":{"data":"'


def generate_document(raw: Any, error_type: Callable[[], type[MalformedResponseError]],
                      rows: Callable[..., list[Any]]) -> dict[str, Any] | None:
    """The document renderers 0.1.12's ``generate()`` reads, made from what the compiled core
    read of ``raw``: the same values as :func:`parse_generate_response`'s document where
    ``generate()`` reads them (ids and mask rows as lists, ``routed_experts.data`` as a view of
    ``raw``), ``logprobs.content`` a :class:`ReadRecords`. None whenever the body is anything
    but one choice of those fields, well formed (renderers' path then reads it and gives its
    verdict), so the two paths differ only in how the records are held."""
    if type(raw) is not bytes or _select.implementation != "c" or not in_generate.get():
        return None
    try:
        document, top, read = _select.impl.extract_generate(raw)
    except MalformedResponseError:
        return None
    choices = document.get(KEY.choices) if type(document) is dict else None
    if type(choices) is not list or len(choices) != 1 or len(read) != 1 or type(choices[0]) is not dict:
        return None
    if KEY.prompt_token_id_logprobs in document:
        return None
    choice = choices[0]
    if any(key in _BLANKED and key not in _GENERATE_READS for key in choice):
        return None
    logprobs, mask, routed = choice.get(KEY.logprobs), choice.get(KEY.sampling_mask), choice.get(KEY.routed_experts)
    if type(logprobs) is not dict or set(logprobs) != {"content"} or choice.get(KEY.token_ids) is None:
        return None
    if (mask is not None and type(mask) is not list) or (routed is not None and type(routed) is not dict):
        return None
    c = read[0]
    c.error = error_type()
    if top is not None:
        top.error = c.error
    try:
        ids = _rules.checked_int_list(c, c.token_ids, KEY.token_ids, _IDS_REASON)
        prompt = None
        if document.get(KEY.prompt_token_ids) is not None:
            if top is None:
                return None
            prompt = _rules.checked_int_list(top, top.prompt_token_ids, KEY.prompt_token_ids,
                                             "prompt_token_ids must hold token ids in [0, 2**32)")
        values, _ = _rules.parse_native_logprobs(choice, ids, c)
        mask_rows = _rules.parse_sampling_mask(choice, ids, c) if mask is not None else None
        view = None
        if routed is not None:
            _rules.parse_routed_experts(routed, c)
            view = routed_view(raw, c.routed_experts_data, routed)
            if view is None:
                return None
    except MalformedResponseError:
        return None
    if prompt is not None:
        document[KEY.prompt_token_ids] = prompt.tolist()
    ids_list = ids.tolist()
    choice[KEY.token_ids] = ids_list
    choice[KEY.logprobs] = {"content": ReadRecords(ids_list, values)}
    if mask_rows is not None:
        mask = choice[KEY.sampling_mask] = rows(mask_rows)[0]
        checked.mask = (mask, mask_rows)
    if view is not None:
        routed["data"] = view
        checked.routed = (view, c.routed_experts_data)
    return document


def routed_view(raw: bytes, decoded: Any, routed: dict[str, Any]) -> memoryview | None:
    """``routed_experts.data`` as renderers 0.1.12 hands it back (a view of ``raw`` from its
    first ``"routed_experts":{"data":"``), when that view is exactly the canonical base64 of
    what the core decoded; else None."""
    if set(routed) - {"data", "shape", "start"} or not isinstance(decoded, np.ndarray):
        return None
    start = raw.find(_ROUTED_PREFIX)
    if start < 0:
        return None
    start += len(_ROUTED_PREFIX)
    end = start + 4 * ((decoded.nbytes + 2) // 3)
    if raw[end:end + 1] != b'"':
        return None
    view = memoryview(raw)[start:end]
    try:
        again = tokenwire.b64decode(view)
    except MalformedResponseError:
        return None
    return view if np.array_equal(again.view(np.uint8), decoded.view(np.uint8).reshape(-1)) else None


def decoded_routing(view: Any) -> np.ndarray | None:
    """The bytes the core decoded for ``view`` when it is the ``routed_experts.data`` view of
    the last document :func:`generate_document` made in this thread; else None."""
    last, array = getattr(checked, "routed", (None, None))
    if last is None or last is not view:
        return None
    checked.routed = (None, None)  # read once: the body and its decoding are not kept longer
    return array
