"""The array fields of a generate response read whole: MoE routing replay
(``routed_experts``, prime-rl's object and vLLM's ``.npy``) and vLLM's teacher scores
(``prompt_token_id_logprobs``), with the ``.npy`` reader they share. Part of the rules
(:mod:`tokenwire.rules.generate` applies them; the OpenAI-compatible rules read routing with
them too)."""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from ..base import _json
from ..base._args import MAX_EXPERTS
from ..base._types import RoutedExperts
from ..base._wire import MAX_OFFSET
from ..extract.python import Evidence
from ..kernels import python as python_kernels
from ..kernels.python import is_int

# int16: a captured int16 routing array passes through prime-rl's encoder as it is.
ROUTED_DTYPES: dict[str, np.dtype[Any]] = {"uint8": np.dtype("u1"), "uint16": np.dtype("<u2"),
                                           "int16": np.dtype("<i2"), "int32": np.dtype("<i4")}
NPY_DESCRS = {"|u1": "uint8", "<u1": "uint8", "u1": "uint8", "<u2": "uint16", "<i2": "int16",
              "<i4": "int32"}


def named(table: dict[str, Any], name: Any) -> Any:
    """``table[name]`` for a str ``name`` that is a key, else None (a JSON array or object
    names nothing, and cannot even be looked up)."""
    return table.get(name) if isinstance(name, str) else None


# --- routed experts ------------------------------------------------------------------------------


# numpy's own reader refuses a longer header (np.load's max_header_size): a (rows, layers,
# topk) header is about 100 bytes, and nothing longer is parsed.
NPY_MAX_HEADER = 10000
NPY_MAGIC = b"\x93NUMPY"
# A routing array's layers and topk: what Arrow's fixed-size lists hold (tokenwire.arrow).
MAX_ROUTED_WIDTH = 2**31 - 1


def parse_npy(raw: np.ndarray, c: Evidence, field: str = "routed_experts") -> np.ndarray:
    """Upstream vLLM's form: a whole ``.npy`` file (the decoded bytes of the base64 string at
    ``field``), shaped ``(rows, layers, topk)``. Only the header fields we need are trusted."""
    shape, descr, data = npy_parts(raw, c, field, NPY_DESCRS, "uint8, uint16, int16 or int32")
    return _shaped(data, shape, NPY_DESCRS[descr], c, field)


def npy_parts(raw: np.ndarray, c: Evidence, field: str, descrs: dict[str, Any],
              kinds: str) -> tuple[list[Any], str, np.ndarray]:
    """A whole ``.npy`` file's shape (a list, not checked), its ``descr`` (a key of ``descrs``,
    the dtypes ``kinds`` names) and its data bytes; only those header fields are trusted, C
    order only."""
    if bytes(raw[:6]) != NPY_MAGIC or len(raw) < 10:
        c.fail(f"{field} .npy magic missing", field)
    major = int(raw[6])
    if major == 1:
        size, begin = int.from_bytes(bytes(raw[8:10]), "little"), 10
    elif major in (2, 3):
        size, begin = int.from_bytes(bytes(raw[8:12]), "little"), 12
    else:
        c.fail(f"{field} .npy version {major} is not supported", field)
    if size > NPY_MAX_HEADER:
        c.fail(f"{field} .npy header is longer than {NPY_MAX_HEADER} bytes", field)
    if len(raw) < begin + size:
        c.fail(f"{field} .npy header is truncated", field)
    header = npy_header(bytes(raw[begin : begin + size]).decode("latin-1"))
    if (
        not isinstance(header, dict)
        or header.get("fortran_order") is not False
        or not isinstance(header.get("shape"), tuple)
    ):
        c.fail(f"{field} .npy header is invalid", field)
    if named(descrs, header.get("descr")) is None:
        descr = header.get("descr")
        named_type = repr(descr) if isinstance(descr, str) and len(descr) <= 32 else "of another kind"
        c.fail(f"{field} .npy header is invalid: dtype {named_type} is not {kinds}", field)
    return list(header["shape"]), header["descr"], raw[begin + size :]


# The .npy header's grammar, as numpy writes it (the repr of a dict of str keys): strings
# without escapes, integers, True/False/None, and tuples of integers; one token a match.
_NPY_TOKEN = re.compile(r"""\s*(?:'([^'\\]*)'|"([^"\\]*)"|(-?[0-9]+)|(True|False|None)|([{}():,]))""")
_NPY_WORDS = {"True": True, "False": False, "None": None}


def npy_header(text: str) -> dict[str, Any] | None:
    """The dict a ``.npy`` header spells (``{'descr': '<u2', 'fortran_order': False,
    'shape': (3, 2, 4), }``), None when it spells anything else. A strict reader of that
    grammar only, in one pass: no Python parser (``ast.literal_eval`` is neither bounded by
    the grammar nor safe on several threads of Python 3.11), no nesting past a tuple in the
    dict; a repeated key's last value counts, as in a dict display."""
    tokens: list[tuple[str, Any]] = []
    at = 0
    while at < len(text):
        if text[at:].isspace():
            break
        match = _NPY_TOKEN.match(text, at)
        if match is None:
            return None
        single, double, number, word, mark = match.groups()
        if mark is not None:
            tokens.append((mark, None))
        elif number is not None:
            try:
                tokens.append(("value", int(number)))
            except ValueError:  # longer than Python converts
                return None
        elif word is not None:
            tokens.append(("value", _NPY_WORDS[word]))
        else:
            tokens.append(("str", single if single is not None else double))
        at = match.end()
    # { (str : value ,)* [str : value] }, a value a str, an int, a word or a tuple of ints.
    if len(tokens) < 2 or tokens[0][0] != "{" or tokens[-1][0] != "}":
        return None
    header: dict[str, Any] = {}
    i, last = 1, len(tokens) - 1
    while i < last:
        if i + 2 >= len(tokens) or tokens[i][0] != "str" or tokens[i + 1][0] != ":":
            return None
        key, i = tokens[i][1], i + 2
        kind, value = tokens[i]
        if kind in ("str", "value"):
            i += 1
        elif kind == "(":
            items: list[int] = []
            i += 1
            while tokens[i][0] != ")":
                if tokens[i][0] != "value" or type(tokens[i][1]) is not int:
                    return None
                items.append(tokens[i][1])
                i += 1
                if tokens[i][0] == ",":
                    i += 1
                elif tokens[i][0] != ")":
                    return None
            if len(items) == 1 and tokens[i - 1][0] != ",":
                return None  # (3) is an int, not a tuple
            value, i = tuple(items), i + 1
        else:
            return None
        header[key] = value
        if tokens[i][0] == ",":
            i += 1
        elif i != last:
            return None
    return header


def _shaped(data: np.ndarray, shape: Any, dtype_name: str, c: Evidence, field: str = "routed_experts") -> np.ndarray:
    # The length and every bound first: nothing is multiplied, formatted or iterated past
    # three dimensions.
    if (
        not isinstance(shape, list)
        or len(shape) != 3
        or not all(is_int(d) and d >= 0 for d in shape)
        or not (1 <= shape[1] <= MAX_ROUTED_WIDTH and 1 <= shape[2] <= MAX_ROUTED_WIDTH)
    ):
        c.fail(f"{field} shape must be [rows, layers, topk]: three non-negative ints, with layers "
               "and topk in [1, 2**31)", field + ".shape")
    rows, layers, topk = shape
    dtype = ROUTED_DTYPES[dtype_name]
    # Python ints of three bounded factors: a declared shape can never overflow, and nothing
    # is allocated from it.
    if rows * layers * topk * dtype.itemsize != len(data):
        c.fail(
            f"{field} shape {shape} x {dtype.itemsize} bytes does not match "
            f"{len(data)} decoded bytes",
            field + ".shape",
        )
    # What numpy can shape even when the bytes match: zero rows make no bytes of the others.
    if max(rows, 1) * layers * topk * dtype.itemsize > MAX_OFFSET:
        c.fail(f"{field} shape {shape} is too big for an array (its non-zero dimensions span "
               "more than 2**63 - 1 bytes)", field + ".shape")
    return data.view(dtype).reshape(shape)


# An expert id this far above any model's expert count is no id: routing that packs more than
# ids (Total Router Recall appends each expert's float32 weight bits to its ids) reads so.
_PACKED_ID = 2**16


def check_experts(routing: np.ndarray, num_experts: int | None, c: Evidence, field: str) -> None:
    """Every expert id of a ``(rows, layers, topk)`` (or ``(rows, width)``) routing array names an expert: not
    negative (a signed dtype allows it) and, given the model's ``num_experts``, below it; ids
    read from JSON (int64) also below 2**31, as the widest routing dtype holds them. One pass
    over the array (``first_out_of_range``); the first bad id fails at its row."""
    limit = num_experts if num_experts is not None or routing.dtype.itemsize <= 4 else MAX_EXPERTS
    flat = routing.reshape(-1)
    bad = c.kernels.first_out_of_range(flat, limit) if flat.size else -1
    if bad < 0:
        return
    row, value = bad // (flat.size // routing.shape[0]), int(flat[bad])
    at = f" at layer {bad // routing.shape[2] % routing.shape[1]}" if routing.ndim == 3 else ""
    if value < 0:
        c.fail(f"{field} holds a negative expert id ({value}){at}", field, row)
    bound = "2**31 (an int32)" if num_experts is None else f"num_experts={num_experts}"
    packed = (" (no model has that many: routing that packs more than ids, such as expert "
              "weights' float32 bits after them, reads so)") if value >= _PACKED_ID else ""
    c.fail(f"{field} holds expert id {value}{at}, not below {bound}{packed}", field, row)


def explained(c: Evidence, reason: str, detail: str) -> str:
    """``reason`` followed by ``detail`` (the counts, the id, the flag to set), except for an
    error that keeps another library's wording (the renderers drop-in's: ``terse``)."""
    if getattr(c.error, "terse", False):
        return reason
    return f"{reason} {detail[0].upper()}{detail[1:]}" if reason.endswith(".") else f"{reason}: {detail}"


_B64 = re.compile(rb"[^A-Za-z0-9+/=]")


def base64_fault(text: Any) -> str:
    """Where the text of a base64 field stops being canonical base64, for the message (read
    on the error path only); empty when the text is not at hand."""
    if isinstance(text, str):
        text = text.encode("utf-8", "surrogatepass")
    if not isinstance(text, bytes) or not text:
        return ""
    bad = _B64.search(text)
    if bad is not None:
        char = bad[0].decode("latin-1")
        safe = " ('-' and '_' belong to the URL-safe alphabet, which is not accepted)" if char in "-_" else ""
        return (f"character {char!r} at position {bad.start()} is not in the standard base64 "
                f"alphabet (A-Z a-z 0-9 + / and '=' padding){safe}")
    if len(text) % 4:
        return f"{len(text)} characters, not a multiple of 4 (padding with '=' is required)"
    pad = text.find(b"=")
    if pad >= 0 and (pad < len(text) - 2 or text[pad:].strip(b"=")):
        return f"'=' padding at position {pad}, before the end"
    return "the last character's unused bits are not zero (not the canonical encoding)"


def _sent_text(c: Evidence, path: tuple[str, ...]) -> Any:
    """The text at ``path`` in the choice (the top level: ``c.index`` None) as sent (the
    compiled scan left the base64 fields empty in its parsed copy): read again from the raw
    bytes, on the error path only."""
    try:
        document = _json.loads(bytes(c.source))
        if c.index is not None and isinstance(document, dict) and "choices" in document:
            document = document["choices"][c.index]
        elif c.index is not None and isinstance(document, list):
            document = document[c.index]
        for key in path:
            document = document[key]
        return document
    except Exception:
        return None


def fail_base64(c: Evidence, reason: str, field: str, text: Any) -> None:
    """``reason`` at ``field``, with the position of the first fault of ``text`` (the field's
    text as sent, read again when the compiled scan left it empty)."""
    fault = base64_fault(text)
    if not fault and getattr(c, "source", None) is not None:
        fault = base64_fault(_sent_text(c, tuple(field.split("."))))
    c.fail(explained(c, reason, fault) if fault else reason, field)


def parse_routed_experts(value: Any, c: Evidence, num_experts: int | None = None, n: int | None = None,
                        prompt: int | None = None) -> RoutedExperts:
    """A generate choice's ``routed_experts``: prime-rl's object or vLLM's base64 ``.npy``; with
    the completion's length ``n`` and the ``prompt``'s length known, its rows counted as vLLM
    lays them out (:func:`routed_rows`: every prompt and completion token but the last, from
    the object's ``start`` on; the ``.npy`` form says no start: from the first token)."""
    field = "routed_experts"
    if isinstance(value, str):
        raw = c.routed_experts
        if raw is None:
            fail_base64(c, "Invalid routed_experts base64", field, value)
        routing = parse_npy(raw, c)
        if n is not None:
            check_rows(c, routing, field, *routed_rows(n, prompt, kernels=c.kernels))
        check_experts(routing, num_experts, c, field)
        return RoutedExperts(routing, None)
    if not isinstance(value, dict):
        c.fail("routed_experts must be an object or a base64 .npy string", field)
    return routed_object(value, c.routed_experts_data, c, field, num_experts, n, prompt)


def routed_object(value: dict[str, Any], raw: np.ndarray | None, c: Evidence, field: str,
                  num_experts: int | None = None, n: int | None = None, prompt: int | None = None) -> RoutedExperts:
    """The object form of a routing array at ``field`` (prime-rl's, and NVIDIA Dynamo's in its
    engine data): ``{data, shape: [rows, layers, topk], start, dtype}``, ``data`` the base64 of
    the C-order array, whose decoded bytes are ``raw`` (None: not canonical base64); with ``n``
    given, its rows counted from ``start`` (:func:`routed_rows`, when the prompt is known)."""
    dtype_name = value.get("dtype", "uint8")
    if named(ROUTED_DTYPES, dtype_name) is None:
        c.fail(f"Unsupported {field} dtype (uint8, uint16, int16 or int32)", field + ".dtype")
    start = value.get("start")
    if start is not None and (not is_int(start) or start < 0):
        c.fail(f"{field} start must be a non-negative int", field + ".start")
    if raw is None:
        fail_base64(c, f"Invalid {field} base64", field + ".data", value.get("data"))
    routing = _shaped(raw, value.get("shape"), dtype_name, c, field)
    if n is not None:
        check_rows(c, routing, field, *routed_rows(n, prompt, start=start or 0, kernels=c.kernels))
    check_experts(routing, num_experts, c, field)
    return RoutedExperts(routing, start)


def routed_rows(n: int, prompt: int | None, split: bool = False, start: int = 0,
                kernels: Any = None) -> tuple[tuple[int, ...] | None, str]:
    """The row counts a routing array of a choice of ``n`` tokens may have on the
    OpenAI-compatible endpoints, and what they count (None: the prompt's length is not known).
    vLLM routes every token it forwards, the last sampled one never: one row per prompt and
    completion token but the last, from position ``start`` on (``split``: vLLM 0.21's rows of
    the completion alone, its last token's included when speculative decoding captured it).
    ``kernels`` (a choice's, ``c.kernels``): the count is theirs, in C on the compiled path."""
    if split:
        return (n - 1, n) if n else (0,), (f"the completion's {n} tokens but the last (or all of them), the "
                                           "prompt's routing being prompt_routed_experts")
    if prompt is None:
        return None, ""
    since = f", from position {start} on" if start else ""
    counted = f"one per token of the prompt ({prompt}) and of the completion ({n}) but the last{since}"
    return ((kernels or python_kernels).routed_row_count(n, prompt, start),), counted


def check_rows(c: Evidence, routing: np.ndarray, field: str, rows: tuple[int, ...] | None, counted: str) -> None:
    """A routing array has one of ``rows`` rows, when known (``counted`` says of what)."""
    if rows is not None and routing.shape[0] not in rows:
        expected = " or ".join(str(r) for r in rows)
        c.fail(f"{field} has {routing.shape[0]} rows, not {expected}: {counted}", field)


def bare_values(c: Evidence, value: Any, raw: np.ndarray | None, field: str) -> np.ndarray:
    """The int32 values of SGLang's bare base64 array ``value`` (``raw``: its decoded bytes)."""
    if not isinstance(value, str):
        c.fail(f"{field} must be a base64 string of int32 values", field)
    if raw is None:
        fail_base64(c, f"Invalid {field} base64", field, value)
    if len(raw) % 4:
        c.fail(f"{field} holds {len(raw)} bytes, not whole int32 values", field)
    return raw.view("<i4")


def bare_rows(c: Evidence, value: Any, raw: np.ndarray | None, field: str, n: int, prompt: int | None,
              start: int, shape: tuple[int, int] | None, prompt_label: str, uncounted: str) -> np.ndarray:
    """A routing (or indexer) array as SGLang sends it (``meta_info.routed_experts``; NVIDIA
    Dynamo's SGLang worker passes it on as it is): base64 of a bare little-endian int32 array,
    no dtype, no shape (``raw``: its decoded bytes, None when not canonical base64). SGLang
    covers positions ``[start, prompt + completion - 1)`` (``routed_experts_start_len``; the
    last sampled token is never forwarded): that many rows when the ``prompt``'s token count is
    known (``prompt_label`` names where it was read; ``uncounted`` says why it is not); each row
    ``layers * topk`` values with ``shape`` (an array ``(rows, layers, topk)``), else a whole
    number of values (``(rows, width)``)."""
    values = bare_values(c, value, raw, field)
    rows = None
    if prompt is not None:
        rows = prompt + n - 1 - start
        if rows < 0:
            c.fail(f"routed_experts_start_len={start} is past the {prompt + n - 1} positions SGLang routes "
                   f"({prompt_label} {prompt} and {n} completion tokens but the last)", field)
    counted = ("" if rows is None else
               f"one per position from routed_experts_start_len={start} to the prompt ({prompt}) and "
               f"completion ({n}) tokens but the last")
    if shape is not None:
        width = shape[0] * shape[1]
        if rows is None and len(values) % width == 0:
            rows = len(values) // width
        if rows is None or len(values) != rows * width:
            c.fail(f"{field} holds {len(values)} int32 values, not rows of {shape[0]} layers x {shape[1]}"
                   + (f" for {rows} rows: {counted}" if rows is not None else ""), field)
        return values.reshape(rows, *shape)
    if rows is None:
        c.fail(f"{field} has no row count: {uncounted}; pass routed_experts_shape=(layers, topk)", field)
    if (len(values) % rows if rows else len(values)):
        c.fail(f"{field} holds {len(values)} int32 values, which {rows} rows cannot share evenly: {counted}", field)
    if rows and not len(values):  # rows of no id: nothing routed them
        c.fail(f"{field} holds no int32 value for {rows} rows: {counted}", field)
    return values.reshape(rows, len(values) // rows if rows else 0)


# --- teacher scores: prompt_token_id_logprobs -----------------------------------------------------

_TEACHER = "prompt_token_id_logprobs"
_TEACHER_DESCRS = {"<f4": "float32"}


def parse_teacher_scores(top: Evidence, prompt: np.ndarray | None, start: int | None, logits: bool) -> np.ndarray:
    """vLLM's teacher scores (``prompt_logprob_token_ids`` + ``prompt_logprob_start``): a base64
    ``.npy`` float32 ``(rows, K)`` matrix, row ``i`` scoring prompt token ``start + i + 1``;
    ``rows = max(prompt_len - 1 - start, 0)``, checked when the prompt is known (with the
    request's ``start``, exactly; without it, at most ``prompt_len - 1``). A ``-1`` candidate
    of a padded row scores ``-inf``; NaN and ``+inf`` are never scores, and log probabilities
    (unless the server sends logits) are at most 1e-6."""
    raw = top.prompt_token_id_logprobs
    if raw is None:
        top.fail(f"{_TEACHER} must be a base64 .npy string", _TEACHER)
    shape, _, data = npy_parts(raw, top, _TEACHER, _TEACHER_DESCRS, "float32")
    if (len(shape) != 2 or not all(is_int(d) and d >= 0 for d in shape) or shape[1] > MAX_ROUTED_WIDTH
            or shape[0] * shape[1] * 4 != len(data)
            # what numpy can shape: zero columns make no bytes of any number of rows
            or max(shape[0], 1) * max(shape[1], 1) * 4 > MAX_OFFSET):
        top.fail(f"{_TEACHER} must be a (rows, K) float32 matrix of its {len(data)} bytes, not shape {shape}",
                 _TEACHER)
    rows = shape[0]
    if prompt is not None:
        allowed = max(len(prompt) - 1 - (0 if start is None else start), 0)
        if rows != allowed if start is not None else rows > allowed:
            top.fail(f"{_TEACHER} has {rows} rows for a prompt of {len(prompt)} tokens"
                     + (f" scored from {start}: expected {allowed}" if start is not None else f": at most {allowed}"),
                     _TEACHER)
    scores = data.view("<f4").reshape(shape)
    flat = scores.reshape(-1)
    bad = np.flatnonzero(np.isnan(flat) | (flat == np.inf) | (False if logits else flat > 1e-6))
    if len(bad):
        top.fail(f"{_TEACHER} holds NaN, +inf" + ("" if logits else " or a positive log probability")
                 + " (a padded candidate scores -inf)", _TEACHER, int(bad[0]) // max(shape[1], 1))
    return scores
