"""The pure-Python extractors: the evidence of every choice of a response, read from the
parsed document, for every format (generate, OpenAI-compatible, SGLang).

An :class:`Evidence` record holds what was read of one choice before its rules run: one
attribute per row of the wire table (:mod:`tokenwire.base._table`), named by the row's ``attr``,
holding what the row's kind reads there (see :func:`read_field`). The rules read them as
attributes (``c.sampling_mask_ids``); an attribute an extractor did not fill is not there, so
a rule that reads it fails at once (AttributeError), never falling back on the document.

Both extractors fill a record as a loop over the table's rows of their format: this module
from the parsed document, the compiled core (``tokenwire._core``) from the spans its scan
recorded in the raw bytes. Neither calls the other; the core takes the record types (and the
reader of objects with repeated keys) from here, and this module never imports the core.
Code that holds a choice as a dict rather than a response (the writer, the renderers
drop-in) takes a :class:`LazyEvidence`, which reads each field from that dict when a rule
first asks for it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, NoReturn, cast

import numpy as np

from ..base import _json, _table
from ..base._args import check_top_k
from ..base._errors import MalformedResponseError, invalid_json
from ..base._table import KEY
from ..base._wire import MAX_OFFSET, MAX_TOKEN_ID
from ..kernels import python as python_kernels
from ..kernels.python import (
    Candidates,
    NativeEntries,
    is_int,
    logprob_token_id,
    native_entries,
    nested_ints,
    token_string_id,
)

# Every evidence attribute of the table, once (a root and a choice field may share one).
ATTRS: tuple[str, ...] = tuple(dict.fromkeys(f.attr for f in _table.FIELDS))


class Evidence:
    """What was read of one choice (``index`` None: the top level) before its rules run.

    One attribute per wire-table row of the choice's format (``ATTRS``), filled by an
    extractor: None where the field is absent or not of its kind's JSON type, else what the
    kind reads (see :func:`read_field`). ``sent`` maps ``"logprobs"`` and
    ``"completion_logprobs"`` to the value as sent where the compiled scan blanked part of it
    (the result's ``raw`` keeps it); ``source`` holds the raw bytes that spans point into.
    ``by_position``: the choice's native records stand for its tokens by position
    (:func:`records_by_position`), and were read without their ids.
    """

    __slots__ = ("index", "kernels", "error", "source", "sent", "by_position", *ATTRS)

    def __init__(self, index: int | None, kernels: Any = None, error: Any = MalformedResponseError,
                 source: Any = None, by_position: bool = False) -> None:
        self.index = index
        self.kernels = python_kernels if kernels is None else kernels  # the per-token loops
        self.error = error  # what a broken rule raises (a subclass of MalformedResponseError)
        self.source = source
        self.sent: dict[str, Any] = {}
        self.by_position = by_position

    def fail(self, reason: str, field: str | None = None, token: int | None = None) -> NoReturn:
        raise self.error(reason, choice=self.index, field=field, token=token)

    def filled(self) -> dict[str, Any]:
        """The attributes an extractor filled, by name."""
        return {name: getattr(self, name) for name in ATTRS if hasattr(self, name)}


@dataclass(eq=False)
class Read:
    """What was read of an array of per-token values (a RECORDS, NUMBERS or ROWS field): its
    length, and as the kind and format ask, its records, the native entries (generate's
    ``logprobs.content``, None when the ids already failed), the head candidates, the
    numbers, the candidate rows, and where its text is in ``Evidence.source``."""

    length: int
    records: Any = None  # Records: OpenAI-compatible and SGLang logprob records
    entries: NativeEntries | None = None  # generate: both passes over native records
    top: NativeEntries | None = None  # OpenAI records with a head: their candidates
    numbers: Any = None  # Numbers: token_logprobs as read
    rows: Any = None  # keyed_rows / top_triples, with a head
    span: tuple[int, int] | None = None  # the compiled extractor: the array's text


class LazyEvidence(Evidence):
    """Evidence of a choice held as a dict (``choice``): a field no one filled is read from
    the dict the first time a rule asks for it, by the same :func:`read_field` the extractor
    runs, with the kernels given. The writer and the renderers drop-in fill what they
    decoded already."""

    __slots__ = ("choice", "fmt", "k", "top")

    def __init__(self, index: int | None, choice: Any, fmt: str = _table.GENERATE, k: int | None = None,
                 kernels: Any = None, error: Any = MalformedResponseError, top: bool = False,
                 by_position: bool = False) -> None:
        super().__init__(index, kernels, error, by_position=by_position)
        self.choice, self.fmt, self.k, self.top = choice, fmt, k, top

    def __getattr__(self, name: str) -> Any:
        if name in LazyEvidence.__slots__:  # not set yet: no field of that name
            raise AttributeError(name)
        field = _BY_ATTR.get((self.fmt, self.top, name))
        if field is None:
            raise AttributeError(f"no {name!r} among the evidence of a {self.fmt} "
                                 f"{'response' if self.top else 'choice'}")
        value = read_field(self, field, self.choice if isinstance(self.choice, dict) else {}, self.fmt, self.k)
        setattr(self, name, value)
        return value


def records_by_position(document: Any) -> bool:
    """Whether a generate response says its native records carry decoded text: vLLM's
    ``output_mode: "text"`` (a top-level field; ``"tokens"``, the default, and older servers
    that do not send it name each record's id). Record ``t`` then stands for
    ``token_ids[t]`` by position, and its ``token`` is not read as an id."""
    return isinstance(document, dict) and document.get("output_mode") == "text"


def load_document(raw: Any) -> Any:
    """The parsed JSON of a response given as str or any bytes-like object (subclasses
    included: their characters or buffer, copied once when they are mutable)."""
    raw = _json.document(raw)
    try:
        return _json.loads(raw)
    except _json.JSONDecodeError as exc:
        raise invalid_json(exc, raw) from None


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
    if set(map(type, value)) <= {float}:  # how every server writes logprobs
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
    except (TypeError, KeyError):  # a token that is not a string: read them one by one (an
        prefixes = None             # object's [:9] is a KeyError from Python 3.12 on: slices hash)
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
    choices = document.get(KEY.choices) if isinstance(document, dict) else None
    for choice in choices if isinstance(choices, list) else ():
        logprobs = choice.get(KEY.logprobs) if isinstance(choice, dict) else None
        if isinstance(logprobs, dict) and logprobs.get(KEY.content) is None and logprobs.get(KEY.top_logprobs):
            return True
    return False




def load_openai_document(raw: Any, k: int | None) -> Any:
    document = load_document(raw)
    if k is not None and _has_keyed_heads(document):
        document = load_keeping_repeats(raw)
    return document


# --- a choice's evidence: a loop over the wire table ----------------------------------------------

_ROOT, _CHOICE = _table.ROOT, _table.CHOICE
_HIGH = {_table.TOKEN_ID: MAX_TOKEN_ID, _table.OFFSET: MAX_OFFSET}
_MISSING = object()


def rows_of(fmt: str, top: bool) -> tuple[_table.Field, ...]:
    """The table rows an extractor fills for a format: the root's (``top``) or a choice's
    (an SGLang item's)."""
    if top:
        return _table.fields(_ROOT, fmt)
    return _table.fields(_table.ITEM if fmt == _table.SGLANG else _CHOICE, fmt)


_ROWS: dict[tuple[str, bool], tuple[_table.Field, ...]] = {
    (fmt, top): rows_of(fmt, top) for fmt in (_table.GENERATE, _table.OPENAI, _table.SGLANG) for top in (True, False)
}
_BY_ATTR: dict[tuple[str, bool, str], _table.Field] = {
    (fmt, top, f.attr): f for (fmt, top), rows in _ROWS.items() for f in rows
}


def _at(value: Any, path: tuple[str, ...]) -> Any:
    """The value at ``path``, followed through objects only (as the scan records it)."""
    for key in path:
        if not isinstance(value, dict) or key not in value:
            return _MISSING
        value = value[key]
    return value


def read_field(c: Evidence, field: _table.Field, choice: Any, fmt: str, k: int | None) -> Any:
    """What the table row ``field`` reads in the parsed ``choice`` (an object) for the rules of
    ``fmt`` with head size ``k``; ``c`` holds the fields read before it (in table order)."""
    value = _at(choice, field.path)
    kind = field.kind
    if kind == _table.IDS:
        return None if value is _MISSING else c.kernels.int_list(value, _HIGH[cast(str, field.high)])
    if kind == _table.BLOB:
        if value is _MISSING or (len(field.path) == 1 and not isinstance(value, str)):
            return None  # a field that is a string or an object: the object's rows read it
        return c.kernels.blob(value)
    if kind == _table.VALUE:
        return None  # where its text is: the compiled extractor's spans
    if not isinstance(value, list):
        return None
    if kind == _table.MASK:
        return nested_ints(value)
    if kind == _table.TOKENS:
        return token_strings(value)
    if kind == _table.NUMBERS:
        read, bad = numbers(value)
        return Read(len(value), numbers=Numbers(read, bad, None if bad is None else value[bad]))
    if kind == _table.ROWS:
        rows = None
        if k is not None:
            rows = top_triples(value) if fmt == _table.SGLANG else keyed_rows(value)
        return Read(len(value), rows=rows)
    assert kind == _table.RECORDS, field
    if fmt == _table.SGLANG:
        return Read(len(value), records=triples(value))
    if fmt == _table.OPENAI:
        top = native_entries(value, np.zeros(len(value), dtype=np.int64), True) if k is not None else None
        return Read(len(value), records=records(value), top=top)
    # generate: both passes over the records, when they can be aligned with the ids (the
    # rules read them beside any transport; their head candidates when a head comes from
    # them, not from compact rows).
    ids = c.token_ids
    entries = None
    if ids is not None and ids[2] is None and len(value) == ids[1]:
        entries = native_entries(value, None if c.by_position else ids[0],
                                 k is not None and choice.get(KEY.compact_logprobs) is None)
    return Read(len(value), entries=entries)


def extract_fields(index: int | None, choice: Any, fmt: str, k: int | None = None,
                   kernels: Any = None, by_position: bool = False) -> Evidence:
    """The pure-Python extractor: the evidence of one parsed choice (``index`` None: the top
    level, ``choice`` the document) for the rules of ``fmt``, every table row of the format
    read by :func:`read_field` (the compiled core reads the same from the raw bytes);
    ``by_position``: as :func:`records_by_position` says of the document."""
    c = Evidence(index, kernels, by_position=by_position)
    is_object = isinstance(choice, dict)
    for field in _ROWS[fmt, index is None]:
        setattr(c, field.attr, read_field(c, field, choice, fmt, k) if is_object else None)
    return c


def extract_choice(index: int | None, choice: Any, k: int | None = None, by_position: bool = False) -> Evidence:
    """The evidence of one parsed generate choice (``index`` None: the top level)."""
    return extract_fields(index, choice, _table.GENERATE, k, by_position=by_position)


def extract_openai_choice(index: int | None, choice: Any, k: int | None = None) -> Evidence:
    """The evidence of one parsed OpenAI-compatible choice (``index`` None: the top level)."""
    return extract_fields(index, choice, _table.OPENAI, k)


def extract_sglang_item(index: int | None, item: Any, k: int | None = None) -> Evidence:
    """The evidence of one SGLang item (the top level of an SGLang response reads nothing)."""
    return extract_fields(index, item, _table.SGLANG, k)


def extract_generate(raw: Any, top_k: int | None = None) -> tuple[Any, Evidence, list[Evidence]]:
    """The pure-Python extractor of a whole generate response: the parsed document, and the
    :class:`Evidence` of its top level and of each choice (what the compiled core's
    ``extract_generate`` reads in one pass over the raw bytes)."""
    k = check_top_k(top_k)
    document = load_document(raw)
    choices = document.get(KEY.choices) if isinstance(document, dict) else None
    by_position = records_by_position(document)
    read = ([extract_choice(i, choice, k, by_position) for i, choice in enumerate(choices)]
            if isinstance(choices, list) else [])
    return document, extract_choice(None, document), read


def full_at(c: Evidence, value: Any, span: tuple[int, int] | None) -> Any:
    """The value as the document holds it (the compiled extractor left big arrays empty in
    the parsed copy; their text is in ``Evidence.source`` at ``span``)."""
    return value if span is None else _json.loads(bytes(c.source[span[0]:span[1]]))


def extract_openai(raw: Any, top_k: int | None = None, sglang: bool = False) -> tuple[Any, Evidence, list[Evidence]]:
    """The pure-Python extractor of a whole OpenAI-compatible (or SGLang) response: the parsed
    document, and the evidence of its top level and of each choice (what the compiled core's
    ``extract_openai`` reads in one pass over the raw bytes)."""
    k = check_top_k(top_k)
    if sglang:
        document = load_document(raw)
        items = document if isinstance(document, list) else [document]
        return document, extract_sglang_item(None, None), [extract_sglang_item(i, item, k) for i, item in enumerate(items)]
    document = load_openai_document(raw, k)
    choices = document.get(KEY.choices) if isinstance(document, dict) else None
    read = [extract_openai_choice(i, c, k) for i, c in enumerate(choices)] if isinstance(choices, list) else []
    return document, extract_openai_choice(None, document, k), read
