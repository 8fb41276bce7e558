"""Response formats an audit can check (``tokenwire.audit``, ``tokenwire check``), and the defect
classes it reports.

A format knows how to recognize a parsed record (``detect``), how to validate raw bytes
(``validate``, raising :class:`MalformedResponseError`) and how to sort a rejection into a
defect class (``classify``). ``FORMATS`` holds the registry's formats
(``tokenwire.read._registry``: the name, the parser and the detector of each) in the order
``--format auto`` tries them, each with its defect classes; a new wire format is an entry of the
registry.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..base import _json
from ._capture import json_bytes
from ..base._errors import MalformedResponseError, invalid_json, location
from ..base._options import ParseOptions
from ..base._table import KEY
from ..base._types import GenerateResponse
from ..read import _registry as registry
from ..read._registry import _OPENAI_OBJECTS
from ..read._stream import StreamReader, parser_of
from ..rules.generate import named

__all__ = ["CLASSES", "FORMATS", "Defect", "FieldMissing", "Format", "ParseOptions", "check_record", "detect",
           "resolve_field"]

# Defect classes, in the order reports list them: key -> label.
CLASSES: dict[str, str] = {
    "length_mismatch": "length mismatch",
    "bad_logprob": "missing, sentinel or non-finite logprob",
    "id_mismatch": "id mismatch",
    "missing_ids": "missing or invalid exact ids",
    "head": "head or sampling-support problem",
    "malformed_packed": "malformed base64/packed field",
    "malformed_json": "malformed JSON",
    "unrecognized": "not a response of a supported format",
    "too_large": "record larger than the size limit",
    "other": "other",
}


@dataclass
class Defect:
    """The first defect of one record. ``location`` is relative to the record (the ``--field``
    path included); ``histogram``/``difference`` are set for length mismatches whose sizes
    are known: ``difference`` is the count in ``histogram`` minus the token count."""

    cls: str
    location: str
    reason: str
    histogram: str | None = None
    difference: int | None = None
    # Where MalformedResponseError put it (None for a record that could not be read).
    choice: int | None = None
    field: str | None = None
    token: int | None = None
    # An unrecognized record that wraps a response: the --field path that reaches it.
    wrapped: str | None = None


@dataclass(frozen=True)
class Format:
    name: str
    description: str
    detect: Callable[[Any], bool]
    validate: Callable[[bytes, ParseOptions], object]  # raises MalformedResponseError
    classify: Callable[[MalformedResponseError, Any], Defect]
    reads: str | None = None  # a stream format: the whole-body format it is reassembled into


# --- the generate format -------------------------------------------------------------------------

# Messages that give both sides of a length mismatch: the token count (``tokens``), the other
# side's (``count``) and the field counted (``field``, or the second entry where the message
# does not name it); for :func:`_length_mismatch`.
_GENERATE_COUNTS: list[tuple[re.Pattern[str], str | None]] = [
    (re.compile(r"completion token count \((?P<tokens>\d+)\) does not match logprob count \((?P<count>\d+)\)"),
     "logprobs.content"),
    (re.compile(r"completion token count \((?P<tokens>\d+)\) does not match logprobs.sampled count "
                r"\((?P<count>\d+)\)"), "logprobs.sampled"),
]
_PACKED_COUNT = re.compile(r"(\d+) values for (\d+) completion tokens")

# Reason prefixes -> class, checked in order; the reasons are the reference's messages.
_BY_REASON: list[tuple[str, str]] = [
    ("invalid JSON", "malformed_json"),
    ("token_ids must hold", "missing_ids"),
    ("prompt_token_ids must hold", "missing_ids"),
    ("Engine response choice.completion_logprobs must be an object", "malformed_packed"),
    ("Engine response choice.logprobs must be an object", "bad_logprob"),
    ("Engine response choice.logprobs.content must be a list", "bad_logprob"),
    # vLLM's sampled list: not a list, a value that is no evidence, or a value the records contradict.
    ("Engine response choice.logprobs.sampled", "bad_logprob"),
    ("Unsupported packed logprob dtype", "malformed_packed"),
    ("Invalid packed logprob", "malformed_packed"),
    ("Packed logprob shape", "malformed_packed"),
    ("Invalid packed sampling mask", "malformed_packed"),
    ("Unsupported compact logprob format", "malformed_packed"),
    ("Invalid compact logprob candidate count", "malformed_packed"),
    ("Invalid compact logprob base64", "malformed_packed"),
    ("Invalid compact logprob buffer length", "malformed_packed"),
    ("Invalid compact logprob values", "bad_logprob"),
    ("Repeated compact logprobs disagree", "head"),
    ("Invalid recorded sampling support", "head"),
    ("Sampler ", "head"),
    ("Missing sampling-support probabilities", "head"),
    ("Invalid sampler head", "head"),
    ("Engine returned fewer top logprobs", "head"),
    ("Missing requested top logprobs", "head"),
    ("Top logprob", "head"),
    ("Duplicate top logprob", "head"),
    ("invalid base64", "malformed_packed"),
]


def _choice_of(document: Any, exc: MalformedResponseError) -> dict[str, Any] | None:
    if exc.choice is None or not isinstance(document, dict):
        return None
    choices = document.get(KEY.choices)
    if isinstance(choices, list) and exc.choice < len(choices) and isinstance(choices[exc.choice], dict):
        return choices[exc.choice]
    return None


def _token_count(choice: dict[str, Any]) -> int | None:
    ids = choice.get(KEY.token_ids)
    return len(ids) if isinstance(ids, list) else None


def _b64_array(value: Any, dtype: str) -> np.ndarray | None:
    try:
        return np.frombuffer(base64.b64decode(value, validate=True), dtype=dtype)
    except (TypeError, ValueError):
        return None


def _mask_rows(choice: dict[str, Any], field: str) -> int | None:
    """Rows of a sampling mask (a list, or the length of a CSR's ``counts``)."""
    mask = choice.get(field)
    if isinstance(mask, list):
        return len(mask)
    if isinstance(mask, dict):
        counts = mask.get("counts")
        data = counts.get("data") if isinstance(counts, dict) else counts
        values = _b64_array(data, "<i4") if isinstance(data, str) and len(data) % 4 == 0 else None
        if values is not None:
            return len(values)
    return None


def _compact_row_has_id(choice: dict[str, Any], token: int) -> bool | None:
    """Whether the compact row of ``token`` holds the sampled id (None: unknown)."""
    packed = choice.get(KEY.compact_logprobs)
    ids = choice.get(KEY.token_ids)
    if not isinstance(packed, dict) or not isinstance(ids, list) or token >= len(ids):
        return None
    offsets, data = packed.get("offsets"), packed.get("data")
    if not isinstance(offsets, list) or token + 1 >= len(offsets) or not isinstance(data, str):
        return None
    raw = _b64_array(data, "u1")
    if raw is None or not isinstance(offsets[-1], int) or len(raw) < offsets[-1] * 4:
        return None
    row = raw[: offsets[-1] * 4].view("<u4")[offsets[token] : offsets[token + 1]]
    return ids[token] in row.tolist()


def _length_mismatch(counts: list[tuple[re.Pattern[str], str | None]], reason: str, where: str) -> Defect | None:
    """The length mismatch of the first of ``counts`` that matches ``reason`` (None: none does)."""
    for pattern, field in counts:
        if (match := pattern.search(reason)) is not None:
            return Defect("length_mismatch", where, reason, field or match["field"],
                          int(match["count"]) - int(match["tokens"]))
    return None


def _classify_generate(exc: MalformedResponseError, document: Any) -> Defect:
    """Sort a generate rejection into a class, reading sizes from the message where it gives
    them and from the parsed record otherwise."""
    reason, field = exc.reason, exc.field or ""
    where = location(exc.choice, exc.field, exc.token)
    choice = _choice_of(document, exc)
    tokens = _token_count(choice) if choice is not None else None

    def length(compared: str, count: int | None, expected: int | None) -> Defect | None:
        if count is None or expected is None or count == expected:
            return None
        return Defect("length_mismatch", where, reason, compared, count - expected)

    if (counted := _length_mismatch(_GENERATE_COUNTS, reason, where)) is not None:
        return counted
    if (match := _PACKED_COUNT.search(reason)) is not None:
        if exc.token is None:
            return Defect("length_mismatch", where, reason, KEY.completion_logprobs, int(match[1]) - int(match[2]))
        return Defect("bad_logprob", where, reason)
    if reason == "Sampling mask token count mismatch":
        rows = _mask_rows(choice, field) if choice is not None else None
        return length(field, rows, tokens) or Defect("malformed_packed", where, reason)
    if reason.startswith("Invalid compact logprob offsets"):
        packed = choice.get(KEY.compact_logprobs) if choice is not None else None
        offsets = packed.get("offsets") if isinstance(packed, dict) else None
        rows = len(offsets) - 1 if isinstance(offsets, list) and exc.token is None else None
        return length(field, rows, tokens) or Defect("malformed_packed", where, reason)
    if reason == "Missing compact sampled-token evidence":
        present = None
        if choice is not None and exc.token is not None:
            present = _compact_row_has_id(choice, exc.token)
        return Defect("bad_logprob" if present else "id_mismatch", where, reason)
    if ".token must be 'token_id:" in reason:
        # A record of decoded text (vLLM's output_mode "text" unsaid) names no id at all.
        return Defect("missing_ids" if "carries decoded text" in reason else "id_mismatch", where, reason)
    if ".logprob must be" in reason or ".logprob does not contain sampling evidence" in reason:
        return Defect("bad_logprob", where, reason)
    if field.startswith(KEY.routed_experts):
        return Defect("malformed_packed", where, reason)
    if reason.endswith(") disagree."):  # two transports name other sampled logprobs
        return Defect("bad_logprob", where, reason)
    for prefix, cls in _BY_REASON:
        if reason.startswith(prefix):
            return Defect(cls, where, reason)
    return Defect("other", where, reason)


# --- OpenAI-compatible and SGLang formats --------------------------------------------------------


# As _GENERATE_COUNTS; these messages name the field counted.
_OPENAI_COUNTS: list[tuple[re.Pattern[str], str | None]] = [
    # "completion has 6 token ids but 7 logprobs (+1): ids from token_ids, logprobs from logprobs.tokens"
    (re.compile(r"completion has (?P<tokens>\d+) token ids but (?P<count>\d+) logprobs .*logprobs from "
                r"(?P<field>[\w.]+)"), None),
    # "usage.completion_tokens is 7 but the completion has 6 token ids (+1)"
    (re.compile(r"^(?P<field>[\w.]+) is (?P<count>\d+) but the completion has (?P<tokens>\d+) token ids"), None),
    # "token id sources disagree in length: token_ids has 6 ids, logprobs.tokens has 7 (+1)"
    (re.compile(r"disagree in length: [\w.]+ has (?P<tokens>\d+) ids, (?P<field>[\w.]+) has (?P<count>\d+)"), None),
]

# Reason fragments -> class, checked in order; the reasons are tokenwire.rules.openai's messages.
_OPENAI_BY_REASON: list[tuple[str, str]] = [
    ("invalid JSON", "malformed_json"),
    # vLLM's packed top-k block (completions' return_top_k_logprobs), before the logprob fragments
    ("Packed top-k", "malformed_packed"),
    ("logprobs.top_k must be", "malformed_packed"),
    ("token id sources disagree", "id_mismatch"),
    ("no exact completion token ids", "missing_ids"),
    ("must hold token ids", "missing_ids"),
    ("names no token id", "missing_ids"),
    ('is not "token_id:N"', "missing_ids"),
    ("Missing requested top logprobs", "head"),
    ("Top logprob", "head"),
    ("Duplicate top logprob", "head"),
    ("top_logprobs", "head"),
    ("Sampler ", "head"),
    ("Invalid sampler head", "head"),
    ("Engine returned fewer top logprobs", "head"),
    ("logprob", "bad_logprob"),
]


def _classify_openai(exc: MalformedResponseError, document: Any) -> Defect:
    """Sort an OpenAI-compatible or SGLang rejection into a class; counts come from the
    message, which names both sides."""
    reason = exc.reason
    where = location(exc.choice, exc.field, exc.token)
    if (counted := _length_mismatch(_OPENAI_COUNTS, reason, where)) is not None:
        return counted
    for fragment, cls in _OPENAI_BY_REASON:
        if fragment in reason:
            return Defect(cls, where, reason)
    return Defect("other", where, reason)


# --- streamed formats ------------------------------------------------------------------------------

# A stream's own refusals name their event first ("event 3: ..."); a chunk's records against
# its own delta ("event 3: 2 records for the chunk's 1 token id") are a length mismatch.
_EVENT = re.compile(r"^event \d+: (?:(\d+) records? for the chunk's (\d+) token ids?)?")
_STREAM_CLASSES = {"the data is not JSON": "malformed_json", "the data must be a JSON object": "malformed_json",
                   "the stream ends": "malformed_json", "an event after data: [DONE]": "malformed_json",
                   "token ids come with": "bad_logprob"}  # (and "come without")


def _classify_stream(whole: Callable[[MalformedResponseError, Any], Defect]) -> Callable[[MalformedResponseError, Any], Defect]:
    """A stream's refusal: the reassembly's own (its message starts with the event) by the
    stream's classes, any other (the parser's, over the reassembled response, which ``document``
    then is) by the whole-body format's."""
    def classify(exc: MalformedResponseError, document: Any) -> Defect:
        match = _EVENT.match(exc.reason)
        if match is None:
            return whole(exc, document)
        where = location(exc.choice, exc.field, exc.token)
        if match[1] is not None:
            return Defect("length_mismatch", where, exc.reason, exc.field, int(match[1]) - int(match[2]))
        rest = exc.reason[match.end():]
        cls = next((c for fragment, c in _STREAM_CLASSES.items() if fragment in rest), "other")
        return Defect(cls, where, exc.reason)

    return classify


def reassembled(fmt: Format, raw: bytes) -> Any:
    """The response a stream stands for (its events reassembled), or None where they are not."""
    reader = StreamReader(fmt.reads)
    try:
        reader.feed(raw)
        return reader.document()
    except MalformedResponseError:
        return None


def _audited(entry: registry.Format, classify: Callable[[MalformedResponseError, Any], Defect]) -> Format:
    def validate(raw: bytes, options: ParseOptions) -> object:
        return parser_of(entry.name)(raw, **options.for_format(entry.reads or entry.name))

    if entry.reads is not None:
        classify = _classify_stream(classify)
    return Format(entry.name, entry.description, entry.detect, validate, classify, entry.reads)


# The registry's formats, each with its defect classes: the generate format's, or the
# OpenAI-compatible family's (every other format); a stream's, its whole-body format's and
# the reassembly's.
_CLASSIFY = {"generate": _classify_generate}
FORMATS: dict[str, Format] = {name: _audited(entry, _CLASSIFY.get(entry.reads or name, _classify_openai))
                              for name, entry in registry.FORMATS.items()}
GENERATE = FORMATS["generate"]


# --- one record ----------------------------------------------------------------------------------


def detect(document: Any) -> Format | None:
    """The format of a parsed record, by its keys: the first of ``FORMATS`` that recognizes it."""
    return next((f for f in FORMATS.values() if f.detect(document)), None)


def _describe(document: Any) -> str:
    """What an unrecognized record looks like, for its message."""
    if isinstance(document, dict):
        kind = named(_OPENAI_OBJECTS, document.get("object"))
        if kind is not None:
            return f"{kind} (object {document['object']!r})"
        if KEY.meta_info in document and "text" in document:
            return "an SGLang /generate response"
        keys = ", ".join(list(document)[:6])
        return f"an object with keys {keys}" if keys else "an empty object"
    return f"a JSON {type(document).__name__.replace('NoneType', 'null')}"


def _wraps(value: Any) -> bool:
    """``value`` is a response of a known format, or a JSON string holding one."""
    if isinstance(value, str) and value[:1] in "{[":
        try:
            value = _json.loads(value)
        except Exception:
            return False
    return detect(value) is not None


def wrapping_path(document: Any, depth: int = 2) -> str | None:
    """The ``--field`` path (dotted, at most ``depth`` keys) at which a record that is not a
    response itself holds one, or None: read for unrecognized records only."""
    if not isinstance(document, dict):
        return None
    for key, value in document.items():
        if _wraps(value):
            return key
    if depth > 1:
        for key, value in document.items():
            inner = wrapping_path(value, depth - 1)
            if inner is not None:
                return f"{key}.{inner}"
    return None


class FieldMissing(Exception):
    """A ``--field`` path that a record does not have."""


def resolve_field(document: Any, path: tuple[str, ...]) -> Any:
    """The value at a dotted ``--field`` path (list elements by index)."""
    value = document
    for i, part in enumerate(path):
        if isinstance(value, dict) and part in value:
            value = value[part]
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            raise FieldMissing(f"no field {'.'.join(path[: i + 1])!r} in the record")
    return value


def _loads(raw: bytes) -> tuple[Any, str | None]:
    try:
        return _json.loads(raw), None
    except _json.JSONDecodeError as exc:
        error = invalid_json(exc, raw)
        if isinstance(error, MemoryError):
            raise error from None
        return None, str(error)


def field_bytes(value: Any) -> bytes:
    """The record a ``--field`` value stands for: a string is a response body stored as a JSON
    string (its text), anything else is serialized again."""
    return value.encode("utf-8", "surrogatepass") if isinstance(value, str) else json_bytes(value)


def check_record(
    raw: bytes, fmt: str, field: tuple[str, ...] | None, options: ParseOptions = ParseOptions(),
    facts: dict[str, Any] | None = None,
) -> tuple[str | None, Defect | None]:
    """Validate one record: ``(format name, None)`` when clean, ``(format or None, defect)``.

    ``fmt`` is a key of ``FORMATS`` or ``"auto"``; ``field`` the ``--field`` path;
    ``options`` the parsers' options (:class:`ParseOptions`). A ``facts``
    dict receives what the response says of itself where it can be read: ``request_id``,
    ``model``, and for a valid one ``choices`` and ``tokens`` (completion tokens).
    """
    prefix = ".".join(field) if field else ""
    document: Any = None
    if field:
        document, invalid = _loads(raw)
        if invalid is not None:
            return None, Defect("malformed_json", "", invalid)
        try:
            resolved = resolve_field(document, field)
        except FieldMissing as exc:
            return None, Defect("unrecognized", prefix, str(exc), wrapped=wrapping_path(document))
        document = resolved
        raw = field_bytes(document)
        if isinstance(document, str):  # a response body stored as a JSON string
            document = None
    tried = FORMATS[fmt] if fmt != "auto" else GENERATE
    try:
        error, parsed = _run(tried, raw, options, facts)
        if error is None and fmt == "auto":
            # A response of another format can read as a generate response: name it by its
            # keys, as the parser read them (escapes decoded, in any order).
            other = detect(_keys(parsed))
            if other is not None and other is not GENERATE:
                tried, (error, _) = other, _run(other, raw, options, facts)
        if error is None:
            return tried.name, None
        if tried.reads is not None:  # a stream: what its rules read is the response it stands for
            document = reassembled(tried, raw)
        elif document is None:
            document, invalid = _loads(raw)
            if invalid is not None:
                return None, _prefixed(Defect("malformed_json", "", invalid), prefix)
        if fmt == "auto" and not tried.detect(document):
            other = detect(document)
            if other is None:
                names = ", ".join(f"{f.name} ({f.description})" for f in FORMATS.values() if f.reads is None)
                reason = f"looks like {_describe(document)}; supported formats: {names}"
                inner = wrapping_path(document)
                wrapped = None if inner is None else f"{prefix}.{inner}" if prefix else inner
                return None, _prefixed(Defect("unrecognized", "", reason, wrapped=wrapped), prefix)
            tried = other
            error, _ = _run(tried, raw, options, facts)
            if error is None:
                return tried.name, None
        if facts is not None:
            _identity(document, facts)
        defect = tried.classify(error, document)
        defect.choice, defect.field, defect.token = error.choice, error.field, error.token
        return tried.name, _prefixed(defect, prefix)
    except MemoryError:  # the run's problem, not the record's: the caller reports it
        raise
    except Exception as exc:  # a bug: reported, never fatal to the run
        return None, _prefixed(Defect("other", "", f"{type(exc).__name__}: {exc}"), prefix)


def _run(
    fmt: Format, raw: bytes, options: ParseOptions, facts: dict[str, Any] | None = None,
) -> tuple[MalformedResponseError | None, Any]:
    """The rejection of ``raw`` by ``fmt``'s parser (None), and what the parser returned."""
    try:
        parsed = fmt.validate(raw, options)
    except MalformedResponseError as exc:
        # Without its traceback the rejected document is freed before the record is reloaded.
        return exc.with_traceback(None), None
    if facts is not None and isinstance(parsed, GenerateResponse):
        facts["choices"] = len(parsed.choices)
        facts["tokens"] = sum(len(c.completion_ids) for c in parsed.choices)
        facts["request_id"] = parsed.request_id
        facts["model"] = parsed.payload.get("model")
    return None, parsed


def _keys(parsed: Any) -> Any:
    """A parsed response as far as ``detect`` reads it: its top-level fields and each choice's
    (the ones the parser does not take apart, whose keys are the ones that tell formats apart)."""
    if not isinstance(parsed, GenerateResponse):
        return None
    return {**parsed.payload, KEY.choices: [choice.raw for choice in parsed.choices]}


def _identity(document: Any, facts: dict[str, Any]) -> None:
    """The request id and model a rejected response names, where it names them."""
    if isinstance(document, list) and document:  # an SGLang batch
        document = document[0]
    if isinstance(document, dict):
        meta = document.get(KEY.meta_info)
        rid = document.get("request_id", document.get("id"))
        if rid is None and isinstance(meta, dict):
            rid = meta.get("id")
        facts["request_id"] = rid
        facts["model"] = document.get("model")


def _prefixed(defect: Defect, prefix: str) -> Defect:
    if prefix:
        defect.location = f"{prefix}.{defect.location}" if defect.location else prefix
    return defect
