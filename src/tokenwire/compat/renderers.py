"""renderers' generate-client parsers on tokenwire's readers: a drop-in replacement.

The functions below have the signatures and return types of their namesakes in
``renderers.client`` of the installed renderers release (:data:`SUPPORTED_VERSIONS`; see
:func:`renderers_version`): lists of Python ints and floats where renderers returns lists,
``None`` where it returns ``None``, numpy arrays where it returns arrays (``completion_logprobs``
as ``float32`` from 0.1.13.dev17 on, handed over without a copy when tokenwire read ``float32``),
and ``parse_generate_response`` returns the parsed document with the base64 ``data`` of
``routed_experts`` and ``compact_logprobs`` as ``memoryview`` objects. They make tokenwire's
decisions, which are renderers' decisions except where tokenwire is deliberately stricter (see
``docs/migrating-from-renderers.md``; with 0.1.12, which reads no sampling mask, a present
mask is validated all the same), with the per-token loops in tokenwire's compiled kernels
when the core is built.

Every rejection raises :data:`MalformedGenerateResponseError`, which is both a
``tokenwire.MalformedResponseError`` and (when renderers is importable) renderers' own
``MalformedGenerateResponseError``. Its message is renderers' text for the same decision;
``field`` and ``token`` say where.

:func:`patch` puts these functions into ``renderers.client`` (and every ``renderers`` module
that re-exports them), so ``renderers.client.generate`` runs on them; :func:`unpatch` puts
renderers' own back; :func:`patched` does both around a block. Each release is patched where it
defines these functions (0.1.12, the stable release, defines ``parse_generate_response`` and
``_parse_completion_logprobs`` alone). A renderers release not in
:data:`SUPPORTED_VERSIONS` is refused: :func:`patch` and the functions raise ``RuntimeError``.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.metadata
import inspect
import math
import re
import sys
import threading
from collections.abc import Callable, Mapping
from itertools import chain, repeat
from typing import Any, NamedTuple

import numpy as np

from ..base import _table
from ..read import _select
from ..base._errors import MalformedResponseError, location
from ..base._table import KEY
from ..base._types import Ragged
from ..base._wire import MAX_MASK_ID, MAX_TOKEN_ID, VLLM_LOGPROB_SENTINEL
from ..extract.python import Evidence, LazyEvidence, Read
from ..kernels import python as _kernels
from ..rules import generate as _rules
from . import _patching, _renderers_generate, _renderers_json

# MalformedGenerateResponseError is made on first use (see __getattr__).
__all__ = [
    "REPLACED",
    "_parse_compact_logprobs",
    "_parse_completion_logprobs",
    "_parse_completion_top_logprobs",
    "_parse_packed_completion_logprobs",
    "_parse_sampling_mask",
    "_select_sampler_head",
    "originals",
    "parse_generate_response",
    "renderers_version",
    *_patching.API,
]

_CLIENT = "renderers.client"
# What patch() replaces in renderers.client, in the order renderers defines them.
REPLACED = (
    "parse_generate_response",
    "_parse_packed_completion_logprobs",
    "_parse_compact_logprobs",
    "_parse_completion_logprobs",
    "_parse_sampling_mask",
    "_select_sampler_head",
    "_parse_completion_top_logprobs",
)
_IDS_REASON = "token_ids must hold token ids in [0, 2**32)"


# --- the renderers release followed --------------------------------------------------------------


def _float_list(values: np.ndarray) -> list[float]:
    return values.tolist()


def _float32_array(values: np.ndarray) -> np.ndarray:
    # tokenwire's own array when it read float32 (compact rows, packed float32): no copy.
    return values if values.dtype == np.float32 else values.astype(np.float32)


class _Release(NamedTuple):
    """What one renderers release's ``renderers/client.py`` defines, reads and returns where
    releases differ (the messages of the decisions they share are the same in every one)."""

    # completion_logprobs (of _parse_packed_completion_logprobs, _parse_compact_logprobs,
    # _parse_completion_logprobs and so of generate()), from tokenwire's array.
    logprobs: Callable[[np.ndarray], Any]
    # The functions of client.py that patch() replaces (the release defines exactly these).
    replaced: tuple[str, ...] = REPLACED
    # Whether _parse_completion_logprobs reads prime-rl's packed ``completion_logprobs``, and
    # a native record's int ``token_id`` (before 0.1.13: neither; only ``"token_id:N"``).
    packed_and_int_ids: bool = True
    # The fields whose base64 ``data`` parse_generate_response hands back as a memoryview.
    views: tuple[str, ...] = (KEY.compact_logprobs, KEY.routed_experts)


_FLOAT_LISTS = _Release(logprobs=_float_list)  # a list of Python floats
_FLOAT32_ARRAYS = _Release(logprobs=_float32_array)  # a float32 numpy array
# 0.1.12, the stable release: client.py parses the document (splicing out routed_experts'
# data alone) and native logprobs.content; no packed or compact logprobs, heads or masks.
_STABLE = _Release(
    logprobs=_float_list,
    replaced=("parse_generate_response", "_parse_completion_logprobs"),
    packed_and_int_ids=False,
    views=(KEY.routed_experts,),
)

# Every renderers release this module follows, oldest first. Releases whose client.py
# returns the same share an entry (0.1.13.dev14 to dev16 changed other modules only).
_RELEASES: dict[str, _Release] = {
    "0.1.12": _STABLE,
    "0.1.13.dev13": _FLOAT_LISTS,
    "0.1.13.dev14": _FLOAT_LISTS,
    "0.1.13.dev15": _FLOAT_LISTS,
    "0.1.13.dev16": _FLOAT_LISTS,
    "0.1.13.dev17": _FLOAT32_ARRAYS,
}
SUPPORTED_VERSIONS: tuple[str, ...] = tuple(_RELEASES)
# (version, release) once known; re-read by patch().
_followed: tuple[str, _Release] | None = None


def _installed_version() -> str | None:
    """The version of the renderers that ``import renderers`` gives: the loaded package's own
    ``__version__`` once it is imported, its installed metadata before; None when absent."""
    found = getattr(sys.modules.get("renderers"), "__version__", None)
    if isinstance(found, str) and found != "0+unknown":  # (a source checkout says so)
        return found
    try:
        return importlib.metadata.version("renderers")
    except importlib.metadata.PackageNotFoundError:
        return None


def _follow(refresh: bool = False) -> _Release:
    """The release these functions follow (see :func:`renderers_version`)."""
    global _followed
    followed = _followed
    if followed is None or refresh:
        installed = _installed_version()
        version = SUPPORTED_VERSIONS[-1] if installed is None else installed
        release = _RELEASES.get(version)
        if release is None:
            raise RuntimeError(
                f"tokenwire.compat.renderers does not support renderers {version}; it follows "
                f"renderers {', '.join(SUPPORTED_VERSIONS)}. Install one of those "
                f"(pip install 'renderers=={SUPPORTED_VERSIONS[-1]}'), or use tokenwire's own "
                "API (tokenwire.parse_generate_response)."
            )
        followed = _followed = (version, release)
    return followed[1]


def renderers_version() -> str:
    """The renderers release whose return types these functions have: the installed one
    (the loaded package's version once ``renderers`` is imported), the newest of
    :data:`SUPPORTED_VERSIONS` when renderers is not installed. Raises ``RuntimeError``
    naming the supported releases when the installed one is not among them."""
    _follow()
    assert _followed is not None
    return _followed[0]


# --- the error -----------------------------------------------------------------------------------


class _CompatibleError(MalformedResponseError):
    """A :class:`tokenwire.MalformedResponseError` whose message is renderers' text alone.

    ``choice``, ``field`` and ``token`` still say where (``location`` renders them), but
    ``str(exc)`` is exactly what renderers says for the same decision, so code that matches
    renderers' messages keeps working.
    """

    terse = True  # the rules add no detail of their own to renderers' text

    def __init__(self, reason: str, **where: Any) -> None:  # choice, field, token
        super().__init__(reason, **where)
        self.args = (reason,)  # str(exc): renderers' message, without the location

    @property
    def location(self) -> str:
        """Where in the response, e.g. ``choices[0].compact_logprobs.offsets[3]`` (may be empty)."""
        return location(self.choice, self.field, self.token)


_error_class: type[_CompatibleError] | None = None
_error_lock = threading.Lock()


def _error_type() -> type[_CompatibleError]:
    """The error class, made on first use: it derives from renderers' own
    ``MalformedGenerateResponseError`` too when renderers is importable."""
    global _error_class
    if _error_class is None:
        with _error_lock:
            if _error_class is None:
                bases: tuple[type, ...] = (_CompatibleError,)
                try:
                    from renderers.client import MalformedGenerateResponseError as theirs
                except Exception:  # not installed, or a broken optional dependency
                    theirs = None
                if theirs is not None:
                    bases += (theirs,)
                _error_class = type(
                    "MalformedGenerateResponseError",
                    bases,
                    {"__module__": __name__, "__qualname__": "MalformedGenerateResponseError",
                     "__doc__": _CompatibleError.__doc__},
                )
    return _error_class


def __getattr__(name: str) -> Any:
    # The error class is made lazily (importing renderers is slow); pickle finds it here too.
    if name == "MalformedGenerateResponseError":
        return _error_type()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# --- reading a choice dict -----------------------------------------------------------------------

_VIEWS = _renderers_json.VIEWS

def _evidence(index: int | None = None, decoded: dict[int, np.ndarray] | None = None,
              choice: Any = None, top: bool = False) -> LazyEvidence:
    """tokenwire's rules over a parsed choice, as renderers' functions receive it: the
    payloads this parse decoded already (by the id of the view they came from) are its
    evidence; everything else is read from the dict by the kernels in use (compiled when
    built), and a broken rule raises renderers' error type."""
    c = LazyEvidence(index, choice, kernels=_select.kernels, error=_error_type(), top=top)
    if decoded and isinstance(choice, dict):
        for name in _VIEWS:
            value = choice.get(name)
            data = value.get("data") if isinstance(value, dict) else None
            if type(data) is memoryview and id(data) in decoded:
                setattr(c, _table.ATTR_AT[_table.CHOICE, f"{name}.data"], decoded[id(data)])
    return c


def _with_mask_rows(c: Evidence) -> Evidence:
    """``c`` with the list form of its choice's ``sampling_mask`` read in whole-list operations
    when every row is a list of ints in ``[0, 2**31)`` (the reader's result, without a Python
    step per id); anything else is left to the reader, which finds the first bad row."""
    choice = c.choice
    mask = choice.get(KEY.sampling_mask) if isinstance(choice, dict) else None
    if type(mask) is not list or (mask and set(map(type, mask)) != {list}):
        return c
    counts = np.fromiter(map(len, mask), dtype=np.int64, count=len(mask))
    flat = list(chain.from_iterable(mask))
    if flat and set(map(type, flat)) != {int}:  # (a bool is not an int here)
        return c
    try:
        values = np.array(flat, dtype=np.int64) if flat else np.zeros(0, np.int64)
    except OverflowError:
        return c
    if values.size and (int(values.min()) < 0 or int(values.max()) > MAX_MASK_ID):
        return c
    offsets = np.zeros(len(mask) + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    setattr(c, _table.ATTR_AT[_table.CHOICE, KEY.sampling_mask], (Ragged(offsets, values.astype(np.int32)), len(mask), None))
    return c


def _with_native(c: Evidence, choice: dict[str, Any], ids: np.ndarray, want_top: bool) -> None:
    """Reads ``logprobs.content`` into ``c`` when it holds one record per token: in whole-list
    operations when the records are well formed, else record by record."""
    logprobs = choice.get(KEY.logprobs)
    content = logprobs.get("content") if isinstance(logprobs, dict) else None
    if isinstance(content, list) and len(content) == len(ids):
        entries = _native_well_formed(content, ids, want_top)
        if entries is None:
            try:
                entries = _kernels.native_entries(content, ids, want_top)
            except OverflowError:
                # An integer logprob beyond float range (json.loads reads them exactly): it
                # is not finite as a float, and the rules say so.
                entries = _kernels.native_entries(_float_range(content), ids, want_top)
        c.logprobs_content = Read(len(content), entries=entries)


_PREFIX = b"token_id:"


def _token_ids(names: list[Any], canonical: bool = False) -> np.ndarray | None:
    """The ids of ``"token_id:N"`` names (N ASCII digits, at most ``2**32 - 1``; with
    ``canonical``, without a leading zero: exactly ``f"token_id:{id}"``) in whole-string
    operations; None when any name is not of that form."""
    try:
        joined = "\n".join(names)
    except TypeError:  # not every name is a string
        return None
    if not joined.isascii():
        return None
    text = joined.encode("ascii")
    count = len(names)
    if not (
        text.startswith(_PREFIX)
        and text.count(b"\n") == count - 1  # no name holds a newline
        and text.count(b"\n" + _PREFIX) == count - 1  # every name starts with the prefix
    ):
        return None
    # Deleting the prefix's characters removes exactly the prefixes (9 per name) only when
    # nothing else holds them; what is left must be digits and the separators.
    digits = text.translate(None, _PREFIX)
    if len(digits) != len(text) - len(_PREFIX) * count:
        return None
    if b"\n\n" in digits or digits.startswith(b"\n") or digits.endswith(b"\n"):
        return None  # a name without digits
    if not digits.translate(None, b"\n").isdigit():
        return None
    if canonical and (digits.startswith(b"0") and digits[1:2].isdigit() or re.search(rb"\n0\d", digits)):
        return None
    # Digits beyond int64 read as its maximum, which is beyond any id too.
    values = np.fromstring(digits, dtype=np.int64, sep="\n")
    if len(values) != count or int(values.max()) > MAX_TOKEN_ID:
        return None
    return values


def _numbers(values: list[Any]) -> np.ndarray | None:
    """``values`` as float64 when every one is an int or a float (not a bool) within float
    range, else None."""
    if not set(map(type, values)) <= {float, int}:
        return None
    try:
        return np.array(values, dtype=np.float64)
    except OverflowError:
        return None


def _native_well_formed(content: list[Any], ids: np.ndarray, want_top: bool) -> Any:
    """Both passes over native records, in whole-list operations, when every record is
    well formed; None as soon as anything is not (the reference's record loop then finds
    the first problem). Accepting exactly what that loop accepts, it returns what it returns.
    """
    n = len(content)
    if n == 0 or n != len(ids):
        return None
    try:  # dict's own methods refuse anything that is not a dict
        if any(map(dict.__contains__, content, repeat("token_id"))):
            return None
        tokens = list(map(dict.get, content, repeat("token")))
        logprobs = list(map(dict.get, content, repeat("logprob")))
        heads: list[Any] = list(map(dict.get, content, repeat("top_logprobs"))) if want_top else []
    except TypeError:
        return None
    named = _token_ids(tokens, canonical=True)  # each exactly f"token_id:{id}"
    if named is None or not np.array_equal(named, ids):
        return None
    sampled = _numbers(logprobs)
    if sampled is None or not bool((np.isfinite(sampled) & (sampled != VLLM_LOGPROB_SENTINEL)).all()):
        return None
    if not want_top:
        empty = _kernels.Candidates(np.zeros(n + 1, np.int64), np.zeros(0, np.int64), np.zeros(0, np.float64))
        return _kernels.NativeEntries(sampled, None, empty, np.zeros(n, np.float64), None)
    if set(map(type, heads)) != {list}:
        return None
    counts = np.fromiter(map(len, heads), dtype=np.int64, count=n)
    if not bool(counts.all()):
        return None
    candidates = list(chain.from_iterable(heads))
    try:
        if any(map(dict.__contains__, candidates, repeat("token_id"))):
            return None
        names = list(map(dict.get, candidates, repeat("token")))
        values = list(map(dict.get, candidates, repeat("logprob")))
    except TypeError:
        return None
    cand_ids = _token_ids(names)
    cand_lps = _numbers(values)
    if (
        cand_ids is None
        or cand_lps is None
        or not bool(np.isfinite(cand_lps).all())
        or bool((cand_lps > 1e-6).any())
    ):
        return None
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    # A repeated candidate within a record: equal (record, id) keys, adjacent once sorted.
    keys = np.sort(np.repeat(np.arange(n, dtype=np.int64) << 32, counts) | cand_ids)
    if bool((keys[1:] == keys[:-1]).any()):
        return None
    return _kernels.NativeEntries(
        sampled, None, _kernels.Candidates(offsets, cand_ids, cand_lps), sampled.copy(), None
    )


def _clamp(value: Any) -> Any:
    if type(value) is int:
        try:
            float(value)
        except OverflowError:
            return math.inf if value > 0 else -math.inf
    return value


def _float_range(content: list[Any]) -> list[Any]:
    """``logprobs.content`` with integer logprobs beyond float range read as infinities."""
    out = []
    for entry in content:
        if isinstance(entry, dict):
            entry = dict(entry)
            if "logprob" in entry:
                entry["logprob"] = _clamp(entry["logprob"])
            top = entry.get("top_logprobs")
            if isinstance(top, list):
                entry["top_logprobs"] = [
                    {**c, "logprob": _clamp(c["logprob"])} if isinstance(c, dict) and "logprob" in c else c
                    for c in top
                ]
        out.append(entry)
    return out


def _plain(value: Any) -> Any:
    """A Mapping that is not a dict as a dict (renderers accepts any Mapping)."""
    return dict(value) if isinstance(value, Mapping) and not isinstance(value, dict) else value


_NESTED = (KEY.compact_logprobs, KEY.completion_logprobs, KEY.logprobs, KEY.sampling_mask, KEY.kept_tokens)


def _choice(c: Evidence, choice: Any) -> dict[str, Any]:
    choice = _plain(choice)
    if not isinstance(choice, dict):
        c.fail("choice must be an object")
    copied = False
    for name in _NESTED:
        value = choice.get(name)
        if value is None or type(value) is dict or not isinstance(value, Mapping):
            continue
        if not copied:
            choice, copied = dict(choice), True
        choice[name] = dict(value)
    if KEY.kept_tokens in choice:
        # renderers reads no kept_tokens (prime-rl's kept sets, with absent rows): neither
        # does the drop-in, so a head is the one renderers selects.
        choice = {key: value for key, value in choice.items() if key != KEY.kept_tokens}
        copied = True
    logprobs = choice.get(KEY.logprobs)
    if isinstance(logprobs, dict) and KEY.sampled in logprobs:
        # Nor does it read vLLM's logprobs.sampled: the logprobs come from content, as there.
        choice = {**choice, KEY.logprobs: {k: v for k, v in logprobs.items() if k != KEY.sampled}}
        copied = True
    mask = choice.get(KEY.sampling_mask)
    if isinstance(mask, dict) and any(
        isinstance(mask.get(n), Mapping) and not isinstance(mask.get(n), dict) for n in ("ids", "counts")
    ):
        if not copied:
            choice = dict(choice)
        choice[KEY.sampling_mask] = {k: _plain(v) for k, v in mask.items()}
    return choice


def _ids(c: Evidence, completion_ids: Any) -> np.ndarray:
    if isinstance(completion_ids, np.ndarray):
        completion_ids = completion_ids.tolist()
    elif not isinstance(completion_ids, list):
        completion_ids = list(completion_ids)
    return _rules.checked_int_list(c, c.kernels.int_list(completion_ids, MAX_TOKEN_ID), KEY.token_ids, _IDS_REASON)


def _check_k(k: Any) -> int | None:
    if k is not None and (type(k) is not int or k < 1):
        raise ValueError(f"k must be a positive int or None, not {k!r}")
    return k


def _rows(*rows: Ragged) -> list[list[list[Any]]]:
    """CSR rows as lists of Python lists (ints or floats); rows cut at the same offsets (a
    head's ids and logprobs) are built in one call."""
    offsets = rows[0].offsets
    if all(r.offsets is offsets or np.array_equal(r.offsets, offsets) for r in rows):
        return _select.kernels.rows_to_lists(offsets, *(r.values for r in rows))
    return [_select.kernels.rows_to_lists(r.offsets, r.values)[0] for r in rows]


# --- generate()'s own read of the body (renderers 0.1.12: compat/_renderers_generate.py) ---------

in_generate = _renderers_generate.in_generate
ReadRecords = _renderers_generate.ReadRecords
decoded_routing = _renderers_generate.decoded_routing


def _generate_document(raw: Any) -> dict[str, Any] | None:
    """:func:`tokenwire.compat._renderers_generate.generate_document` with this module's error
    type and mask rows."""
    return _renderers_generate.generate_document(raw, _error_type, _rows)


# --- the replacements ----------------------------------------------------------------------------


def parse_generate_response(raw: bytes) -> dict[str, Any]:
    """renderers' ``parse_generate_response``: the response document, with the base64
    ``data`` of every choice's ``routed_experts`` and ``compact_logprobs`` as a ``memoryview``.

    Stricter than renderers: the JSON is read as RFC 8259 (a ``NaN``/``Infinity`` literal is
    accepted only as a logprob of ``logprobs.content``, where the logprob rules then reject
    it with renderers' message); the document must be an object with a non-empty
    ``choices`` list of objects; ``prompt_token_ids`` and every choice's ``token_ids`` (when
    present) must hold ids in ``[0, 2**32)``; every choice's ``routed_experts`` (when present)
    must be well formed. ``data`` is found wherever it is in the object and ``\\/`` escapes
    are read, where renderers' byte splice needs ``data`` first and keeps the backslash.
    """
    release = _follow()
    if release is _STABLE:
        document = _generate_document(raw)
        if document is not None:
            return document
    payload, decoded = _loads(raw)
    top = _evidence(None, top=True)
    if not isinstance(payload, dict):
        top.fail("response must be a JSON object")
    choices = payload.get(KEY.choices)
    if not isinstance(choices, list) or not choices:
        top.fail("choices must be a non-empty list", KEY.choices)
    prompt = payload.get(KEY.prompt_token_ids)
    if prompt is not None:
        _rules.checked_int_list(top, top.kernels.int_list(prompt, MAX_TOKEN_ID), KEY.prompt_token_ids,
                                "prompt_token_ids must hold token ids in [0, 2**32)")
    for index, choice in enumerate(choices):
        c = _evidence(index, decoded, choice)
        if not isinstance(choice, dict):
            c.fail("choice must be an object")
        ids = choice.get(KEY.token_ids)
        if ids is not None:
            _rules.checked_int_list(c, c.kernels.int_list(ids, MAX_TOKEN_ID), KEY.token_ids, _IDS_REASON)
        routed = choice.get(KEY.routed_experts)
        if routed is not None:
            _rules.parse_routed_experts(routed, c)
        for name in _VIEWS:
            value = choice.get(name)
            data = value.get("data") if isinstance(value, dict) else None
            if name not in release.views:  # a str in this release (decoded on the way or not)
                if type(data) is memoryview:
                    value["data"] = data.tobytes().decode("ascii")
            elif isinstance(data, str):
                value["data"] = memoryview(data.encode())
    return payload


def _parse_packed_completion_logprobs(
    packed: Mapping[str, Any], completion_ids: list[int]
) -> list[float] | np.ndarray:
    """renderers' ``_parse_packed_completion_logprobs``: one logprob per completion token (a
    list of floats, or from 0.1.13.dev17 a float32 array: the decoded one when sent as float32).

    Stricter: canonical base64, dtype ``float32`` or ``float64``, ``shape == [n]`` when sent.
    """
    release = _follow()
    packed = _plain(packed)
    c = _evidence(choice={KEY.completion_logprobs: packed})
    values = _rules.parse_packed_logprobs(packed, len(completion_ids), c)
    return release.logprobs(values)


def _parse_compact_logprobs(
    choice: Mapping[str, Any], completion_ids: list[int], k: int | None
) -> tuple[list[float] | np.ndarray, list[list[int]] | None, list[list[float]] | None]:
    """renderers' ``_parse_compact_logprobs``: the sampled logprobs (a list of floats, or from
    0.1.13.dev17 tokenwire's float32 array), and with ``k`` the head ids and logprobs of every
    token (lists in every release).

    Stricter: ``completion_ids`` must hold ids in ``[0, 2**32)``, and a sampling mask that
    is present is validated also without ``k`` (``kept_tokens`` is ignored, as there).
    """
    release = _follow()
    c = _evidence()
    ids = _ids(c, completion_ids)
    c.choice = choice = _choice(c, choice)
    k = _check_k(k)
    if choice.get(KEY.compact_logprobs) is None:
        c.fail("Unsupported compact logprob format", "compact_logprobs.format")
    sampled, top_ids, top_logprobs, _ = _rules.parse_compact_logprobs(choice, ids, k, c)
    if top_ids is None or top_logprobs is None:  # no head requested
        return release.logprobs(sampled), None, None
    head_ids, head_logprobs = _rows(top_ids, top_logprobs)
    return release.logprobs(sampled), head_ids, head_logprobs


def _parse_completion_logprobs(
    choice: Mapping[str, Any], completion_ids: list[int]
) -> list[float] | np.ndarray:
    """renderers' ``_parse_completion_logprobs``: packed ``completion_logprobs`` when sent,
    else native ``logprobs.content``; one logprob per completion token (a list of floats, or
    from 0.1.13.dev17 a float32 array, native JSON logprobs rounded to float32 as there).

    Stricter: as :func:`_parse_packed_completion_logprobs`; ``"token_id:N"`` takes ASCII
    digits only; a sampling mask that is present is validated (when ``logprobs.content``
    holds one record per token; otherwise renderers' head call reports that first).
    """
    release = _follow()
    logprobs = choice.get(KEY.logprobs) if type(choice) is dict else None
    records = logprobs.get("content") if type(logprobs) is dict else None
    if type(records) is ReadRecords and (completion_ids is records.ids or completion_ids == records.ids):
        return release.logprobs(records.logprobs)  # read and validated with the document
    c = _evidence()
    ids = _ids(c, completion_ids)
    choice = _choice(c, choice)
    if not release.packed_and_int_ids:
        choice = _string_ids_only(choice)
    c.choice = choice
    packed = choice.get(KEY.completion_logprobs)
    if packed is not None:
        values = _rules.parse_packed_logprobs(packed, len(ids), c)
    else:
        _with_native(c, choice, ids, False)
        values, _ = _rules.parse_native_logprobs(choice, ids, c)
    # A present mask is validated here too, where renderers' head call would validate it
    # next: after its check that logprobs.content holds one record per token (when it does
    # not, that call reports so first, and the mask is left to it).
    logprobs = choice.get(KEY.logprobs)
    content = logprobs.get("content") if isinstance(logprobs, dict) else None
    if isinstance(content, list) and len(content) == len(ids):
        rows = _rules.parse_sampling_mask(choice, ids, _with_mask_rows(c))
        _checked.mask = (choice.get(KEY.sampling_mask), rows)
    return release.logprobs(values)


# The sampling mask (the object) _parse_completion_logprobs validated last in this thread: a
# check of the same generate() result (tokenwire.compat.verifiers) need not read it again.
_checked = _renderers_generate.checked


def validated_mask(mask: Any, completion_ids: Any) -> Ragged | None:
    """The rows of ``mask`` when it is the object the last :func:`_parse_completion_logprobs`
    of this thread validated, for completion ids of the same length; else None."""
    last, rows = getattr(_checked, "mask", (None, None))
    return rows if last is not None and last is mask and len(mask) == len(completion_ids) else None


def _string_ids_only(choice: dict[str, Any]) -> dict[str, Any]:
    """``choice`` as a release before 0.1.13 reads it: no packed ``completion_logprobs``, and
    a native record named by its ``"token_id:N"`` string alone (an int ``token_id`` beside
    it is not read)."""
    if KEY.completion_logprobs in choice:
        choice = {k: v for k, v in choice.items() if k != KEY.completion_logprobs}
    logprobs = choice.get(KEY.logprobs)
    content = logprobs.get("content") if isinstance(logprobs, dict) else None
    if not isinstance(content, list):
        return choice
    try:
        named = any(map(dict.__contains__, content, repeat("token_id")))
    except TypeError:  # not every record is a dict (the rules say so)
        named = any(isinstance(e, dict) and "token_id" in e for e in content)
    if not named:
        return choice
    content = [{k: v for k, v in e.items() if k != "token_id"} if isinstance(e, dict) and "token_id" in e else e
               for e in content]
    return {**choice, KEY.logprobs: {**logprobs, "content": content}}


def _parse_sampling_mask(choice: Mapping[str, Any], completion_ids: list[int]) -> list[list[int]] | None:
    """renderers' ``_parse_sampling_mask``: each token's recorded support, or None.

    Stricter: ids are int32 (``[0, 2**31)``), ``shape`` must be ``[len]`` with an int.
    ``kept_tokens`` is ignored, as renderers ignores it.
    """
    _follow()
    c = _evidence()
    ids = _ids(c, completion_ids)
    c.choice = choice = _choice(c, choice)
    rows = _rules.parse_sampling_mask(choice, ids, _with_mask_rows(c))
    return None if rows is None else _rows(rows)[0]


def _select_sampler_head(
    head: dict[int, float],
    sampled_id: int,
    sampled_logprob: float,
    k: int,
    support: list[int] | None = None,
) -> tuple[list[int], list[float]]:
    """renderers' ``_select_sampler_head`` (tokenwire's ``select_head``): an
    action-independent head of ``k`` candidates, or exactly the recorded support."""
    _follow()
    try:
        return _kernels.select_head(head, sampled_id, sampled_logprob, k, support)
    except MalformedResponseError as exc:
        raise _error_type()(exc.reason) from None


def _parse_completion_top_logprobs(
    choice: Mapping[str, Any], completion_ids: list[int], k: int
) -> tuple[list[list[int]], list[list[float]]]:
    """renderers' ``_parse_completion_top_logprobs``: the head ids and logprobs of every
    token from native ``logprobs.content``.

    Stricter: every entry must be an object with a numeric ``logprob``; ``"token_id:N"``
    takes ASCII digits only.
    """
    _follow()
    c = _evidence()
    ids = _ids(c, completion_ids)
    c.choice = choice = _choice(c, choice)
    head = _check_k(k)
    if head is None:
        raise ValueError("k must be a positive int, not None")
    _with_native(c, choice, ids, True)
    top_ids, top_logprobs, _ = _rules.parse_native_heads(choice, ids, head, c)
    head_ids, head_logprobs = _rows(top_ids, top_logprobs)
    return head_ids, head_logprobs


# --- JSON (compat/_renderers_json.py) -----------------------------------------------------------


def _loads(raw: Any) -> tuple[Any, dict[int, np.ndarray]]:
    """The document, and the payloads decoded on the way (by the id of their view)."""
    return _renderers_json.loads(raw, _error_type)


# --- patching ------------------------------------------------------------------------------------

_OURS: dict[str, Any] = {name: globals()[name] for name in REPLACED}
_patch_lock = threading.RLock()
# (module name, attribute) -> renderers' own function, for every attribute patch() replaced.
_saved: dict[tuple[str, str], Any] = {}


def _renderers_modules() -> list[Any]:
    return [
        module
        for name, module in list(sys.modules.items())
        if module is not None and (name == "renderers" or name.startswith("renderers."))
    ]


def _shape(function: Any) -> list[tuple[str, Any, bool]]:
    return [
        (p.name, p.kind, p.default is inspect.Parameter.empty)
        for p in inspect.signature(function).parameters.values()
    ]


def _replaced() -> tuple[str, ...]:
    """The names :func:`patch` replaces in the release followed (every name of
    :data:`REPLACED` it defines)."""
    return _follow().replaced


def _check_renderers(client: Any) -> None:
    for name in _follow(refresh=True).replaced:  # the release just imported; refused when unknown
        theirs = getattr(client, name, None)
        if theirs is None:
            raise RuntimeError(f"renderers.client has no {name}; not patching")
        if _shape(theirs) != _shape(_OURS[name]):
            raise RuntimeError(
                f"renderers.client.{name}{inspect.signature(theirs)} does not match "
                f"tokenwire's {name}{inspect.signature(_OURS[name])}; not patching"
            )


def patch() -> None:
    """Replace renderers' parsers in ``renderers.client`` and in every loaded ``renderers``
    module that re-exports them. Idempotent; :func:`unpatch` undoes it. Raises
    ``RuntimeError`` (and patches nothing) when the imported renderers is not one of
    :data:`SUPPORTED_VERSIONS`, or its functions' signatures are not the ones replaced.

    Code that already holds renderers' functions (``from renderers.client import ...`` run
    before the patch) keeps them; patch first (the pytest plugin does so before collection).
    """
    with _patch_lock:
        client = importlib.import_module(_CLIENT)
        _error_type()  # with renderers' class among its bases
        if not _saved:
            _check_renderers(client)
        names = _replaced()
        theirs = {}
        for name in names:
            saved = _saved.get((_CLIENT, name))
            theirs[name] = saved if saved is not None else getattr(client, name)
        for module in _renderers_modules():
            namespace = vars(module)
            for name in names:
                if name in namespace and namespace[name] is theirs[name]:
                    _saved[(module.__name__, name)] = theirs[name]
                    setattr(module, name, _OURS[name])


def unpatch() -> None:
    """Put renderers' own functions back wherever :func:`patch` replaced them (attributes
    changed since by someone else are left alone)."""
    with _patch_lock:
        for (module_name, name), original in list(_saved.items()):
            module = sys.modules.get(module_name)
            if module is not None and vars(module).get(name) is _OURS[name]:
                setattr(module, name, original)
        _saved.clear()


def is_patched() -> bool:
    """Whether ``renderers.client`` currently holds every replacement of the release followed."""
    client = sys.modules.get(_CLIENT)
    if client is None:
        return False
    try:
        names = _replaced()
    except RuntimeError:  # a release this module does not follow: never patched
        return False
    return all(getattr(client, n, None) is _OURS[n] for n in names)


def originals() -> dict[str, Any]:
    """renderers' own functions (from before the patch when it is active)."""
    with _patch_lock:
        client = importlib.import_module(_CLIENT)
        return {n: _saved.get((_CLIENT, n), getattr(client, n)) for n in _replaced()}


def patched() -> contextlib.AbstractContextManager[Any]:
    """``with patched() as client:`` runs the block with :func:`patch` in effect (``client`` is
    ``renderers.client``); afterwards the state is what it was before."""
    return _patching.block(_patch_lock, lambda: bool(_saved), patch, unpatch, _CLIENT)
