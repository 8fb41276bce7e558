"""The pure-Python extractors: the evidence of every choice of a response, read from the
parsed document, for every format (generate, OpenAI-compatible, SGLang).

An :class:`Evidence` record holds what was read of one choice before its rules run; the rules
(:mod:`tokenwire.rules`) read the big values from it. The compiled extractors in
``tokenwire._core`` are this module's peers: they fill the same records in one pass over the
raw bytes. Neither calls the other; the core takes only the record types (and the reader of
objects with repeated keys) from here, and this module never imports the core.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from dataclasses import field as _field
from typing import Any, NoReturn, cast

import numpy as np

from .. import _json
from .._args import check_top_k
from .._errors import MalformedResponseError, invalid_json
from .._types import Ragged
from .._wire import MAX_OFFSET, MAX_TOKEN_ID
from ..kernels import python as python_kernels
from ..kernels.python import (
    Candidates,
    NativeEntries,
    blob,
    int_list,
    is_int,
    logprob_token_id,
    native_entries,
    nested_ints,
    token_string_id,
)


@dataclass(eq=False)
class Evidence:
    """What was read of one choice (``index`` None: the top level) before its rules run.

    ``values`` maps a field's path to what was read there: ``int_list``'s result for an id
    or offset list, ``blob``'s for a base64 string, ``nested_ints``' for a list-form mask,
    :class:`NativeEntries` for ``logprobs.content`` (with ``"logprobs.content:len"`` its
    length), and under ``"PATH:raw"`` the value a blanked field had as sent. An extractor
    fills it: :func:`extract_choice` from the parsed document, or the compiled core in one
    pass over the raw bytes. A path that is not there is read from the parsed value when a
    rule needs it, with ``kernels`` (so a caller holding only a dict, like the writer and
    the renderers drop-in, fills what it has and leaves the rest).
    """

    index: int | None
    values: dict[str, Any] = _field(default_factory=dict)
    kernels: Any = None  # the free functions of the per-token loops; the pure-Python ones when None
    error: Any = MalformedResponseError  # what a broken rule raises (a subclass of it)
    source: Any = None  # the raw bytes that ``PATH:span`` values point into

    def __post_init__(self) -> None:
        if self.kernels is None:
            self.kernels = python_kernels

    def fail(self, reason: str, field: str | None = None, token: int | None = None) -> NoReturn:
        raise self.error(reason, choice=self.index, field=field, token=token)


_MISSING = object()


def ints_at(c: Evidence, value: Any, path: str, high: int) -> tuple[np.ndarray, int, int | None] | None:
    got = c.values.get(path, _MISSING)
    return c.kernels.int_list(value, high) if got is _MISSING else got


def blob_at(c: Evidence, value: Any, path: str) -> np.ndarray | None:
    got = c.values.get(path, _MISSING)
    return c.kernels.blob(value) if got is _MISSING else got


def nested_at(c: Evidence, value: list[Any], path: str) -> tuple[Ragged, int, int | None]:
    got = c.values.get(path, _MISSING)
    return c.kernels.nested_ints(value) if got is _MISSING else got


def native_at(c: Evidence, content: list[Any], ids: np.ndarray, want_top: bool) -> NativeEntries:
    got = c.values.get("logprobs.content", _MISSING)
    return c.kernels.native_entries(content, ids, want_top) if got is _MISSING else got


def length_at(c: Evidence, value: list[Any], path: str) -> int:
    return c.values.get(path + ":len", len(value))


def load_document(raw: Any) -> Any:
    """The parsed JSON of a response given as str or any bytes-like object (subclasses
    included: their characters or buffer, copied once when they are mutable)."""
    raw = _json.document(raw)
    try:
        return _json.loads(raw)
    except _json.JSONDecodeError as exc:
        raise invalid_json(exc, raw) from None


def extract_choice(index: int | None, choice: Any, k: int | None = None) -> Evidence:
    """The pure-Python extractor: the evidence of one parsed choice (``index`` None: the
    top level, ``choice`` the document), as the compiled core's one pass over the raw bytes
    reads it."""
    values: dict[str, Any] = {}
    c = Evidence(index, values)
    if not isinstance(choice, dict):
        return c
    if index is None:
        values["prompt_token_ids"] = int_list(choice.get("prompt_token_ids"), MAX_TOKEN_ID)
        return c
    values["token_ids"] = ids = int_list(choice.get("token_ids"), MAX_TOKEN_ID)
    compact = choice.get("compact_logprobs")
    if isinstance(compact, dict):
        values["compact_logprobs.offsets"] = int_list(compact.get("offsets"), MAX_OFFSET)
        values["compact_logprobs.data"] = blob(compact.get("data"))
    for name, key in (("completion_logprobs", "data"), ("routed_experts", "data"), ("kept_tokens", "ids"),
                      ("kept_tokens", "counts")):
        value = choice.get(name)
        if isinstance(value, dict):
            values[f"{name}.{key}"] = blob(value.get(key))
    mask = choice.get("sampling_mask")
    if isinstance(mask, list):
        values["sampling_mask"] = nested_ints(mask)
    elif isinstance(mask, dict):
        for name in ("ids", "counts"):
            packed = mask.get(name)
            if isinstance(packed, dict):
                values[f"sampling_mask.{name}.data"] = blob(packed.get("data"))
    routed = choice.get("routed_experts")
    if isinstance(routed, str):
        values["routed_experts"] = blob(routed)
    logprobs = choice.get("logprobs")
    content = logprobs.get("content") if isinstance(logprobs, dict) else None
    if isinstance(content, list):
        values["logprobs.content:len"] = len(content)
        # The rules validate the records beside any transport; their head candidates are read
        # when a head comes from them (not from compact rows).
        if ids is not None and ids[2] is None and len(content) == ids[1]:
            values["logprobs.content"] = native_entries(content, ids[0], k is not None and compact is None)
    return c


def extract_generate(raw: Any, top_k: int | None = None) -> tuple[Any, Evidence, list[Evidence]]:
    """The pure-Python extractor of a whole generate response: the parsed document, and the
    :class:`Evidence` of its top level and of each choice (what the compiled core's
    ``extract_generate`` reads in one pass over the raw bytes)."""
    k = check_top_k(top_k)
    document = load_document(raw)
    choices = document.get("choices") if isinstance(document, dict) else None
    read = [extract_choice(i, choice, k) for i, choice in enumerate(choices)] if isinstance(choices, list) else []
    return document, extract_choice(None, document), read


# --- OpenAI-compatible and SGLang: reading big values from the parsed document --------------------


_MAX_FLOAT_INT = 2**1023  # ints beyond this cannot be read as a float64


def is_number(value: Any) -> bool:
    return type(value) is float or (type(value) is int and -_MAX_FLOAT_INT < value < _MAX_FLOAT_INT)


@dataclass
class Numbers:
    """Numbers read in C: the values before the first one that is not a number, its index
    (None: none), and that value as ``json.loads`` gives it (to name it)."""

    values: np.ndarray
    bad: int | None
    example: Any = None


@dataclass
class Records:
    """Logprob records read from a list of objects (``logprobs.content``) or of triples
    (SGLang): per token the id the record names (None: none), and the value it carries."""

    ids: list[int | None] | np.ndarray  # the compiled extractor: int64, -1 for none
    values: list[Any] | Numbers  # the compiled extractor: the values already read
    value_key: str  # which key the values came from, for messages
    bad: int | None = None  # first entry that is not an object / a triple
    mixed: int | None = None  # first entry lacking `sampling_logprob` while others have it


def _candidate_rows(
    rows: list[Any], pairs: Any
) -> tuple[Candidates, tuple[int, str] | None]:
    """Head candidates row by row. ``pairs(row)`` lists a row's ``(token_id, logprob)``
    (None: no row there; an id of None: a candidate naming none); a row's ids are checked
    whole, then its candidates one by one. Every row's candidates before the first row that
    breaks a rule, and ``(index, code)`` of that row (codes as ``NativeEntries.top_err``)."""
    out: list[list[tuple[int, float]]] = []
    for index, row in enumerate(rows):
        listed = pairs(row)
        problem = "missing_top" if listed is None else None
        if listed is not None and any(token_id is None for token_id, _ in listed):
            problem = "top_no_id"
        head: dict[int, float] = {}
        for token_id, logprob in listed if problem is None else ():
            if not is_number(logprob) or not math.isfinite(logprob):
                problem = "top_not_finite"
            elif logprob > 1e-6:
                problem = "top_positive"
            elif token_id in head:
                problem = "top_duplicate"
            else:
                head[token_id] = float(logprob)
                continue
            break
        if problem is not None:
            return Candidates.from_rows(out + [[] for _ in range(len(rows) - len(out))]), (index, problem)
        out.append(list(head.items()))
    return Candidates.from_rows(out), None


def numbers(value: list[Any]) -> tuple[np.ndarray, int | None]:
    """A list of JSON numbers: the values before the first element that is not a number
    (float64), and that element's index (or None)."""
    if {type(x) for x in value} <= {float}:  # how every server writes logprobs
        return np.array(value, dtype=np.float64), None
    for index, x in enumerate(value):
        if not is_number(x):
            return np.array([float(v) for v in value[:index]], dtype=np.float64), index
    return np.array([float(v) for v in value], dtype=np.float64), None


def top_triples(rows: list[Any]) -> tuple[Candidates, tuple[int, str] | None]:
    """SGLang's head candidates, a row of ``[logprob, token_id, text]`` per token: every
    row's candidates before the first row that breaks a rule, and ``(index, code)`` of that
    row (codes as :class:`NativeEntries`' ``top_err``). A row's shape (a non-empty list of
    triples naming ids) is checked whole before its logprobs, one by one."""

    def pairs(row: Any) -> list[tuple[int | None, Any]] | None:
        if not isinstance(row, list) or not row:
            return None
        read = triples(row)
        return [(None, None)] if read.bad is not None else list(zip(read.ids, cast(list[Any], read.values)))

    return _candidate_rows(rows, pairs)


def keyed_rows(rows: list[Any]) -> tuple[Candidates, tuple[int, str] | None, tuple[int, str] | None]:
    """Completions' head candidates, a ``{"token_id:N": logprob}`` object per token: as
    :func:`top_triples` (a row's keys are checked whole before its logprobs), and before that
    the first row that repeats a key, with the key (``rows`` must then have been read with
    repeated keys kept, see ``_Repeated``)."""
    for index, row in enumerate(rows):
        if isinstance(row, _Repeated):
            return Candidates.from_rows([[] for _ in rows]), None, (index, row.repeated[0])

    def pairs(row: Any) -> list[tuple[int | None, Any]] | None:
        if not isinstance(row, dict) or not row:
            return None
        return [(token_string_id(key), value) for key, value in row.items()]

    return (*_candidate_rows(rows, pairs), None)


def token_strings(value: list[Any]) -> tuple[list[int | None] | np.ndarray, int]:
    """The ids of ``"token_id:N"`` strings (None for any other token; the compiled extractor
    gives an int64 array with -1 there) and how many there are."""
    try:
        prefixes: set[Any] | None = {token[:9] for token in value}
    except TypeError:  # a token that is not a string: read them one by one
        prefixes = None
    if prefixes is not None and "token_id:" not in prefixes:  # text tokens only
        return [None] * len(value), 0
    if prefixes == {"token_id:"}:
        digits = [token[9:] for token in value]
        joined = "".join(digits)
        if joined.isascii() and joined.isdigit() and all(digits):  # every one is "token_id:N"
            parsed = list(map(int, digits))
            if not parsed or max(parsed) <= MAX_TOKEN_ID:
                return cast("list[int | None]", parsed), len(parsed)
    ids = [token_string_id(token) for token in value]
    return ids, len(ids) - ids.count(None)


def records(value: list[Any]) -> Records:
    """``logprobs.content``-style entries. Fireworks' ``sampling_logprob`` (the value the
    sampler drew with) is read instead of ``logprob`` when the entries carry it."""
    sampling = any(isinstance(e, dict) and "sampling_logprob" in e for e in value)
    key = "sampling_logprob" if sampling else "logprob"
    ids: list[int | None] = []
    values: list[Any] = []
    read = Records(ids, values, key)
    for index, entry in enumerate(value):
        if not isinstance(entry, dict):
            read.bad = index
            break
        if sampling and key not in entry and read.mixed is None:
            read.mixed = index
        ids.append(logprob_token_id(entry))
        values.append(entry.get(key))
    return read


def triples(value: list[Any]) -> Records:
    """SGLang's ``[logprob, token_id, text]`` entries (the text may be absent or null);
    ids as in :func:`records`."""
    ids: list[int | None] = []
    values: list[Any] = []
    read = Records(ids, values, "logprob")
    for index, entry in enumerate(value):
        if not isinstance(entry, list) or not 2 <= len(entry) <= 3:
            read.bad = index
            break
        token_id = entry[1]
        valid = is_int(token_id) and 0 <= token_id <= MAX_TOKEN_ID
        ids.append(token_id if valid else None)
        values.append(entry[0])
    return read


class _Repeated(dict):
    """A JSON object that repeated a key; ``repeated`` holds those keys. orjson keeps the
    last value of a repeated key, so a head is read from a re-parse that keeps them all."""

    repeated: list[str]


def _keep_repeats(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) == len(pairs):
        return out
    marked = _Repeated(out)
    marked.repeated = []
    seen: set[str] = set()
    for key, _ in pairs:
        if key in seen:
            marked.repeated.append(key)
        seen.add(key)
    return marked


def load_keeping_repeats(raw: Any) -> Any:
    """The document again, with every object that repeats a key marked (see _Repeated).
    Only called after orjson accepted ``raw``, so the text is valid JSON."""
    return _json.loads_keeping(_json.document(raw), _keep_repeats)


def _has_keyed_heads(document: Any) -> bool:
    """Whether a head would be read from ``logprobs.top_logprobs`` objects (whose repeated
    keys orjson would merge)."""
    choices = document.get("choices") if isinstance(document, dict) else None
    for choice in choices if isinstance(choices, list) else ():
        logprobs = choice.get("logprobs") if isinstance(choice, dict) else None
        if isinstance(logprobs, dict) and logprobs.get("content") is None and logprobs.get(
            "top_logprobs"
        ):
            return True
    return False


def load_openai_document(raw: Any, k: int | None) -> Any:
    document = load_document(raw)
    if k is not None and _has_keyed_heads(document):
        document = load_keeping_repeats(raw)
    return document


# --- a choice's evidence: what the rules read, by path -------------------------------------------
#
# Keys of ``Evidence.values`` here: PATH (an id list: ``int_list``'s result), PATH:records
# (:func:`records` or :func:`triples`), PATH:numbers (:func:`numbers` with the first bad
# value as sent), PATH:tokens (:func:`token_strings`), PATH:len (an array's length), PATH:top
# (the head candidates of logprob records), PATH:rows (:func:`keyed_rows` or
# :func:`top_triples`), PATH:span (where the value's JSON text is in ``Evidence.source``).
# A path that is not there is read from the parsed value by the functions above.


def records_at(c: Evidence, value: list[Any], field: str, sglang: bool = False) -> Records:
    got = c.values.get(field + ":records")
    return got if got is not None else (triples(value) if sglang else records(value))


def numbers_at(c: Evidence, value: Any, field: str) -> tuple[np.ndarray, int | None]:
    if isinstance(value, Numbers):
        return value.values, value.bad
    got = c.values.get(field + ":numbers")
    return (got.values, got.bad) if got is not None else numbers(value)


def element_at(c: Evidence, value: Any, field: str, index: int) -> Any:
    """The element ``index`` as sent (to name a bad value)."""
    if isinstance(value, Numbers):
        return value.example
    got = c.values.get(field + ":numbers")
    return got.example if got is not None else value[index]


def tokens_at(c: Evidence, value: list[Any], field: str) -> tuple[list[int | None] | np.ndarray, int]:
    got = c.values.get(field + ":tokens")
    return got if got is not None else token_strings(value)


def top_at(c: Evidence, content: list[Any], field: str, ids: np.ndarray) -> NativeEntries:
    """The head candidates of ``[{token, logprob, top_logprobs}]`` entries (one per id), read
    by the rules of vLLM's native records."""
    got = c.values.get(field + ":top")
    return got if got is not None else native_entries(content, ids, True)


def rows_at(c: Evidence, rows: list[Any], field: str, sglang: bool = False) -> Any:
    got = c.values.get(field + ":rows")
    if got is None:
        got = top_triples(rows) if sglang else keyed_rows(rows)
    return got


def full_at(c: Evidence, value: Any, field: str) -> Any:
    """The value as the document holds it (the compiled extractor left big arrays empty in
    the parsed copy; their text is in ``Evidence.source``)."""
    span = c.values.get(field + ":span")
    return value if span is None else _json.loads(bytes(c.source[span[0]:span[1]]))


def _put_array(values: dict[str, Any], path: str, content: list[Any], k: int | None) -> None:
    values[path + ":records"] = records(content)
    values[path + ":len"] = len(content)
    if k is not None:
        values[path + ":top"] = native_entries(content, np.zeros(len(content), dtype=np.int64), True)


def extract_openai_choice(index: int | None, choice: Any, k: int | None = None) -> Evidence:
    """The pure-Python extractor: the evidence of one parsed OpenAI-compatible choice (index
    None: the top level, ``choice`` the document), as the compiled core reads it from the raw
    bytes."""
    values: dict[str, Any] = {}
    if not isinstance(choice, dict):
        return Evidence(index, values)
    ids = ("prompt_token_ids",) if index is None else ("token_ids", "prompt_token_ids")
    for path in ids:
        if choice.get(path) is not None:
            values[path] = int_list(choice[path], MAX_TOKEN_ID)
    if index is None:
        return Evidence(index, values)
    logprobs = choice.get("logprobs")
    if isinstance(logprobs, dict):
        if isinstance(logprobs.get("content"), list):
            _put_array(values, "logprobs.content", logprobs["content"], k)
        sent = logprobs.get("token_logprobs")
        if isinstance(sent, list):
            read, bad = numbers(sent)
            values["logprobs.token_logprobs:numbers"] = Numbers(read, bad, None if bad is None else sent[bad])
            values["logprobs.token_logprobs:len"] = len(sent)
        if logprobs.get("token_ids") is not None:
            values["logprobs.token_ids"] = int_list(logprobs["token_ids"], MAX_TOKEN_ID)
        if isinstance(logprobs.get("tokens"), list):
            values["logprobs.tokens:tokens"] = token_strings(logprobs["tokens"])
        rows = logprobs.get("top_logprobs")
        if isinstance(rows, list):
            values["logprobs.top_logprobs:len"] = len(rows)
            if k is not None:
                values["logprobs.top_logprobs:rows"] = keyed_rows(rows)
    raw_output = choice.get("raw_output")
    if isinstance(raw_output, dict):
        if raw_output.get("completion_token_ids") is not None:
            values["raw_output.completion_token_ids"] = int_list(raw_output["completion_token_ids"], MAX_TOKEN_ID)
        completion = raw_output.get("completion_logprobs")
        content = completion.get("content") if isinstance(completion, dict) else None
        if isinstance(content, list):
            _put_array(values, "raw_output.completion_logprobs.content", content, k)
    return Evidence(index, values)


def extract_sglang_item(index: int | None, item: Any, k: int | None = None) -> Evidence:
    """The pure-Python extractor of one SGLang item (see :func:`extract_openai_choice`)."""
    values: dict[str, Any] = {}
    if index is None or not isinstance(item, dict):
        return Evidence(index, values)
    if item.get("output_ids") is not None:
        values["output_ids"] = int_list(item["output_ids"], MAX_TOKEN_ID)
    meta = item.get("meta_info")
    if not isinstance(meta, dict):
        return Evidence(index, values)
    entries = meta.get("output_token_logprobs")
    if isinstance(entries, list):
        values["meta_info.output_token_logprobs:records"] = triples(entries)
        values["meta_info.output_token_logprobs:len"] = len(entries)
    rows = meta.get("output_top_logprobs")
    if isinstance(rows, list):
        values["meta_info.output_top_logprobs:len"] = len(rows)
        if k is not None:
            values["meta_info.output_top_logprobs:rows"] = top_triples(rows)
    return Evidence(index, values)


def extract_openai(raw: Any, top_k: int | None = None, sglang: bool = False) -> tuple[Any, Evidence, list[Evidence]]:
    """The pure-Python extractor of a whole OpenAI-compatible (or SGLang) response: the parsed
    document, and the evidence of its top level and of each choice (what the compiled core's
    ``extract_openai`` reads in one pass over the raw bytes)."""
    k = check_top_k(top_k)
    if sglang:
        document = load_document(raw)
        items = document if isinstance(document, list) else [document]
        return document, Evidence(None), [extract_sglang_item(i, item, k) for i, item in enumerate(items)]
    document = load_openai_document(raw, k)
    choices = document.get("choices") if isinstance(document, dict) else None
    read = [extract_openai_choice(i, c, k) for i, c in enumerate(choices)] if isinstance(choices, list) else []
    return document, extract_openai_choice(None, document, k), read
