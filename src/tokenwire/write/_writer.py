"""The server side: encode the packed fields and whole responses, byte-compatible with readers.

Every encoder validates its output with the reader's own rules (the same functions, fed the
arrays instead of base64 text), so a server cannot emit what tokenwire would reject.
"""

from __future__ import annotations

import io
import json
from typing import Any

import numpy as np

from ..base import _json, _table, _types
from ..read import _select
from ..base._args import int_arg, int_array, real_array
from ..base._errors import MalformedResponseError, location
from ..base._table import KEY
from ..base._wire import COMPACT_FORMAT, MAX_MASK_ID, MAX_OFFSET, MAX_TOKEN_ID, VLLM_LOGPROB_SENTINEL
from ..extract.python import LazyEvidence
from ..rules import arrays as _arrays
from ..rules import generate as _rules


class Blob(str):
    """The base64 text of a packed array: a ``str`` (so ``json.dumps``, ``orjson.dumps`` and the
    JSON responses of web frameworks, Starlette's ``JSONResponse`` among them, write it as
    the JSON string it is) that also holds the decoded bytes the writers validated.

    ``Blob(text)`` checks that ``text`` is canonical base64 (``array``, when given, must be
    its decoding); a blob cannot be changed. ``blob.text`` is its ASCII bytes.
    ``dumps_generate_response`` writes a whole response exactly as vLLM's endpoint does.
    """

    __slots__ = ("_array",)

    def __new__(cls, text: bytes | str, array: Any = None) -> Blob:
        refused = "Blob text must be canonical base64 bytes (A-Z a-z 0-9 + /, '=' padding)"
        # One private copy, then the check of that copy, which is what is kept: a buffer that
        # another thread rewrites must not pass the check in one state and be kept in another.
        if isinstance(text, str):
            text = str.__str__(text).encode("ascii", "replace")
        elif type(text) is not bytes:
            try:
                view = memoryview(text)
            except TypeError:
                raise ValueError(refused) from None
            if not view.c_contiguous:
                raise ValueError(refused)
            text = view.tobytes()
        try:
            decoded = _select.kernels.b64decode(text)
        except MalformedResponseError:
            raise ValueError(refused) from None
        if array is not None and not np.array_equal(np.ascontiguousarray(array).reshape(-1).view(np.uint8), decoded):
            raise ValueError("Blob array must be the bytes its text decodes to")
        return cls._encoded(text, decoded)

    @classmethod
    def _encoded(cls, text: bytes, array: np.ndarray) -> Blob:
        """The encoders' own blob: ``text`` is ``b64encode(array)``, no need to check it."""
        blob = str.__new__(cls, text, "ascii")
        blob._array = array
        return blob

    @property
    def text(self) -> bytes:
        """The base64 text as ASCII bytes."""
        return str.encode(self, "ascii")

    @property
    def array(self) -> np.ndarray:
        """The encoded bytes (uint8), for validation with the reader's rules."""
        return self._array

    def __str__(self) -> str:
        return str.__str__(self)

    def __repr__(self) -> str:
        return f"Blob({len(self)} base64 characters)"

    def __reduce__(self) -> Any:
        return (Blob, (str.__str__(self),))


def json_default(value: Any) -> Any:
    """``default=`` for ``orjson.dumps`` or ``json.dumps``. A :class:`Blob` is a str, which both
    write as it is; this is kept for callers that pass it (it writes a Blob as its string)."""
    if isinstance(value, Blob):
        return str.__str__(value)
    raise TypeError(f"Type is not JSON serializable: {type(value).__name__}")


class RefusedValues(MalformedResponseError):
    """The values given to a writer make a field its reader refuses (the reader's own rule
    and reason): the message says it is the arguments, and which row or token of them."""

    def __init__(self, reason: str, *, choice: int | None = None, field: str | None = None,
                 token: int | None = None) -> None:
        super().__init__(reason, choice=choice, field=field, token=token)
        if field is None:  # the whole response: the reason names where
            return
        at = f" at row {token}" if token is not None else ""
        self.args = (f"the values given would write {field or 'a field'} that the reader refuses{at} "
                     f"({location(None, field, token)}): {reason}",)


def _given_choice(name: str = "", field: Any = None) -> Any:
    """The evidence of a field the encoder built: its base64 values are the encoder's own
    blobs (no decoding), checked by the readers' rules with the kernels in use."""
    c = LazyEvidence(None, {name: field} if name else {}, kernels=_select.kernels, error=RefusedValues)

    def collect(path: str, value: Any) -> None:
        if isinstance(value, Blob):
            setattr(c, _table.ATTR_AT[_table.CHOICE, path], value.array)
        elif isinstance(value, dict):
            for key, item in value.items():
                collect(f"{path}.{key}", item)

    if field is not None:
        collect(name, field)
    return c


def _row_firsts(values: np.ndarray, bounds: np.ndarray) -> np.ndarray:
    """The first value of each row, -1 for a row that is empty or out of range (the reader
    then reports that row)."""
    starts, ends = bounds[:-1], bounds[1:]
    ok = (starts >= 0) & (starts < ends) & (starts < len(values))
    firsts = np.full(len(starts), -1, dtype=np.int64)
    firsts[ok] = values[starts[ok]]
    return firsts


def _blob(array: np.ndarray) -> Blob:
    raw = np.ascontiguousarray(array).reshape(-1).view(np.uint8)
    return Blob._encoded(_select.kernels.b64encode(raw), raw)


def _ids(values: Any, name: str, high: int = MAX_TOKEN_ID) -> np.ndarray:
    """Token ids of any shape, flattened to int64, each checked to lie in ``[0, high]``."""
    return int_array(values, name, np.int64, 0, high, flat=True)


def _rows_for(sampled: np.ndarray, rows: int) -> np.ndarray:
    """The sampled ids given for ``rows`` rows: one per row."""
    if len(sampled) != rows:
        raise ValueError(f"{len(sampled)} completion ids for {rows} rows")
    return sampled


_PACKED = {"float32": "<f4", "float64": "<f8", "int32": "<i4"}


def encode_packed(array: Any) -> dict[str, Any]:
    """``{"data", "shape", "dtype"}`` for a 1-D float32/float64 (sampled logprobs: finite and
    above the -9999 sentinel) or int32 (sampling-mask ids or counts: non-negative) array."""
    values = np.asarray(array)
    name = values.dtype.name
    if name not in _PACKED or values.ndim != 1:
        raise TypeError(f"packed arrays are 1-D float32, float64 or int32, not {values.ndim}-D {name}")
    values = np.array(values, dtype=_PACKED[name], order="C")  # what is checked is what is encoded
    field = {"data": _blob(values), "shape": [len(values)], "dtype": name}
    c = _given_choice(KEY.completion_logprobs, field)
    if name == "int32":
        bad = c.kernels.first_bad("negative", values)
        if bad >= 0:
            c.fail("Invalid packed sampling mask", "data", bad)
    else:
        _rules.parse_packed_logprobs(field, len(values), c)
    return field


def _float32(exact: np.ndarray) -> np.ndarray:
    """Logprobs as the float32 the wire holds: a value that only rounds to vLLM's sentinel
    would read as missing, and is refused."""
    values = exact.astype("<f4")
    rounded = np.flatnonzero((values == VLLM_LOGPROB_SENTINEL) & (exact != VLLM_LOGPROB_SENTINEL))
    if len(rounded):
        at = int(rounded[0])
        raise ValueError(f"logprobs[{at}] = {float(exact[at])!r} becomes -9999.0 in float32, vLLM's sentinel for a "
                         "missing or clamped logprob; pass -9999.0 itself for a filtered-out candidate")
    return values


def encode_compact_logprobs(
    ids: Any,
    logprobs: Any,
    offsets: Any,
    num_top_logprobs: int,
    *,
    completion_ids: Any = None,
) -> dict[str, Any]:
    """``compact_logprobs`` (``u32-f32-le-v1``): row ``t`` is ``ids/logprobs[offsets[t]:offsets[t+1]]``.

    ``completion_ids`` are the sampled ids the rows must hold; by default the first id of each
    row, where the engine's flat storage puts the sampled token.
    """
    row_ids = _ids(ids, "ids")
    exact = real_array(logprobs, "logprobs", np.float64, flat=True)
    if len(exact) != len(row_ids):
        raise ValueError(f"{len(row_ids)} ids but {len(exact)} logprobs")
    values = _float32(exact)
    bounds = int_array(offsets, "offsets", np.int64, 0, MAX_OFFSET, flat=True)
    if not len(bounds) or bounds[0] != 0 or bounds[-1] != len(row_ids) or (np.diff(bounds) <= 0).any():
        raise ValueError(f"offsets must start at 0, rise at every row (the sampled token opens it) and end "
                         f"at {len(row_ids)}, the number of ids")
    top = int_arg(num_top_logprobs, "num_top_logprobs", -1)
    data = np.concatenate([row_ids.astype("<u4").view(np.uint8), values.view(np.uint8)])
    field = {
        "data": _blob(data),
        "format": COMPACT_FORMAT,
        "offsets": bounds.tolist(),
        "num_top_logprobs": top,
    }
    n = len(bounds) - 1
    if completion_ids is None:
        sampled = _row_firsts(row_ids, bounds)
    else:
        sampled = _rows_for(_ids(completion_ids, "completion_ids"), n)
    _rules.parse_compact_logprobs({KEY.compact_logprobs: field}, np.asarray(sampled, np.int64), None,
                                  _given_choice(KEY.compact_logprobs, field))
    return field


def encode_top_k(token_ids: Any, logprobs: Any) -> dict[str, Any]:
    """vLLM's packed top-k ``logprobs.top_k`` (``return_top_k_logprobs``): ``token_ids`` and
    ``logprobs`` are ``(num_positions, k)`` arrays, row ``t`` the candidates of token ``t`` in
    engine order; ids distinct within a row and below 2**31 (int32), logprobs float32, at most
    1e-6 or ``-inf`` (a candidate the sampler filtered out)."""
    ids = np.asarray(token_ids)
    if ids.ndim != 2:
        raise ValueError(f"token_ids must be a (num_positions, k) array, not shape {ids.shape}")
    top = int_array(ids, "token_ids", np.int64, 0, MAX_MASK_ID, flat=True)
    exact = real_array(logprobs, "logprobs", np.float64, flat=True)
    if np.shape(logprobs) != ids.shape:
        raise ValueError(f"logprobs must have token_ids' shape {ids.shape}, not {np.shape(logprobs)}")
    n, width = ids.shape
    field = {"num_positions": n, "k": width, KEY.token_ids: _blob(top.astype("<i4")),
             KEY.logprobs: _blob(_float32(exact))}
    _rules.parse_packed_top_k(field, np.zeros(n, dtype=np.int64), _given_choice("logprobs.top_k", field))
    return field


def _counted(counts: Any, total: int, what: str) -> tuple[np.ndarray, np.ndarray]:
    """CSR ``counts`` that add up to ``total`` ``what``, and the rows' offsets (int64)."""
    sizes = _ids(counts, "counts", MAX_MASK_ID)
    offsets = np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)])
    if int(offsets[-1]) != total:
        raise ValueError(f"counts add up to {int(offsets[-1])} but there are {total} {what}")
    return sizes, offsets


def _csr_mask(ids: Any, counts: Any, completion_ids: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A CSR mask's ids and counts (int32), and the sampled id of each row: ``completion_ids``,
    or each row's first id (-1 for an empty row)."""
    support = _ids(ids, "ids", MAX_MASK_ID).astype(np.int32)
    sizes, bounds = _counted(counts, len(support), "ids")
    if completion_ids is None:
        # Without the sampled ids, every other rule still holds: take each row's first id.
        sampled = _row_firsts(support.astype(np.int64), bounds)
    else:
        sampled = _rows_for(_ids(completion_ids, "completion_ids"), len(sizes))
    return support, sizes.astype(np.int32), np.asarray(sampled, np.int64)


def encode_sampling_mask(ids: Any, counts: Any, *, completion_ids: Any = None) -> dict[str, Any]:
    """The packed CSR sampling mask ``{"ids", "counts"}`` (int32): row ``t`` holds ``counts[t]``
    ids. With ``completion_ids``, every row must also hold its sampled id."""
    support, sizes, sampled = _csr_mask(ids, counts, completion_ids)
    field = {"ids": encode_packed(support), "counts": encode_packed(sizes)}
    _rules.parse_sampling_mask({KEY.sampling_mask: field}, sampled, _given_choice(KEY.sampling_mask, field))
    return field


def encode_kept_tokens(ids: Any, counts: Any, *, completion_ids: Any = None) -> dict[str, Any]:
    """prime-rl's ``kept_tokens`` ``{"ids", "counts"}``: bare base64 of int32 arrays, row ``t``
    holding ``counts[t]`` ids; a zero count is a token without a kept set (a stop-trimmed
    tail is zero rows). With ``completion_ids``, every kept set must hold its sampled id."""
    support, sizes, sampled = _csr_mask(ids, counts, completion_ids)
    field = {"ids": _blob(support.astype("<i4")), "counts": _blob(sizes.astype("<i4"))}
    _rules.parse_sampling_mask({KEY.kept_tokens: field}, sampled, _given_choice(KEY.kept_tokens, field))
    return field


def encode_sampling_mask_logprobs(logprobs: Any, counts: Any) -> list[list[float]]:
    """prime-rl's ``sampling_mask_logprobs``: the sampler's logprob of each kept id, renormalized
    over its row, as one list of ``counts[t]`` floats per token (the float32 values, as JSON
    numbers), aligned with a sampling mask of the same counts; a row the server did not
    capture is -9999 throughout, an absent row (a zero count) empty. Each row must hold
    finite values at most 1e-6 whose probabilities sum to 1 (within 1e-4)."""
    values = real_array(logprobs, "logprobs", np.float32, flat=True)
    _, offsets = _counted(counts, len(values), "logprobs")
    flat = values.tolist()
    rows = [flat[a:b] for a, b in zip(offsets[:-1].tolist(), offsets[1:].tolist())]
    mask = _types.Ragged(offsets, np.zeros(len(values), dtype=np.int32))
    _rules.mask_logprob_values(_given_choice(), rows, mask, KEY.sampling_mask_logprobs, VLLM_LOGPROB_SENTINEL)
    return rows


def encode_teacher_scores(scores: Any, *, logits: bool = False) -> Blob:
    """vLLM's teacher scores ``prompt_token_id_logprobs``: a base64 ``.npy`` of a float32
    ``(rows, K)`` matrix, row ``i`` scoring prompt token ``start + i + 1`` (``-inf`` for a
    padded candidate). No value may be NaN or ``+inf``, nor positive unless ``logits``."""
    matrix = np.asarray(scores)
    if matrix.ndim != 2 or matrix.dtype.kind not in "fiu":
        raise TypeError(f"teacher scores are a (rows, K) array of real numbers, not a {matrix.ndim}-D "
                        f"{matrix.dtype.name} array")
    matrix = np.ascontiguousarray(matrix, dtype="<f4")
    buffer = io.BytesIO()
    np.save(buffer, matrix)
    blob = _blob(np.frombuffer(buffer.getvalue(), dtype=np.uint8))
    top = _given_choice()
    top.prompt_token_id_logprobs = blob.array
    _arrays.parse_teacher_scores(top, None, None, logits)
    return blob


_ROUTED = {"uint8": "u1", "uint16": "<u2", "int16": "<i2", "int32": "<i4"}


def encode_routed_experts(array: Any, start: int | None = 0) -> dict[str, Any]:
    """MoE routing replay ``{"data", "shape", "start", "dtype"}``: uint8, uint16, int16 or int32
    (expert ids: never negative), shaped ``(rows, layers, topk)`` with at least one layer and
    one expert per token; ``start`` is the prompt offset for delta replay."""
    routing = np.asarray(array)
    name = routing.dtype.name
    if name not in _ROUTED or routing.ndim != 3:
        raise TypeError(f"routed experts are (rows, layers, topk) arrays of uint8, uint16, int16 or int32, "
                        f"not a {routing.ndim}-D {name} array")
    if not (1 <= routing.shape[1] <= _arrays.MAX_ROUTED_WIDTH and 1 <= routing.shape[2] <= _arrays.MAX_ROUTED_WIDTH):
        raise ValueError(f"routed experts need layers and topk in [1, 2**31), not {routing.shape[1]} and "
                         f"{routing.shape[2]}")
    if start is not None:
        start = int_arg(start, "start", 0)
    routing = np.array(routing, dtype=_ROUTED[name], order="C")  # what is checked is what is encoded
    field = {"data": _blob(routing), "shape": list(routing.shape), "start": start, "dtype": name}
    _rules.parse_routed_experts(field, _given_choice(KEY.routed_experts, field))
    return field


def _checked(raw: bytes, parser: str, what: str, top_k: int | None) -> bytes:
    """``raw`` once the reader accepts it as a whole (the rules across fields: counts, the
    mask against the candidates, routing rows against the tokens), else a refusal that says
    it is the assembled response."""
    try:
        getattr(_select.kernels, parser)(raw, top_k=top_k, require_logprobs=False)
    except MalformedResponseError as exc:
        raise RefusedValues(f"the assembled {what} is refused by the reader: {exc} (check=False writes "
                            "a document that is not a whole response)") from None
    return raw


def _dumps(payload: Any) -> bytes:
    return json.dumps(payload, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode("utf-8")


def dumps_generate_response(payload: Any, *, top_k: int | None = None, check: bool = True) -> bytes:
    """Serialize a response exactly as vLLM's endpoint does: ``json.dumps(payload,
    ensure_ascii=False, allow_nan=False, separators=(",", ":"))`` encoded as UTF-8 (a
    :class:`Blob` is a str: its base64 text).

    With ``check`` (the default) the assembled response is read by
    :func:`tokenwire.parse_generate_response` first (with ``top_k``, the head a trainer will
    ask for; logprobs not required), so what a field-by-field encoder cannot see (a mask
    whose kept ids have no candidate logprob, routing rows that do not fit the tokens) is
    refused here, not by the trainer; ``check=False`` writes any JSON document."""
    raw = _dumps(payload)
    return _checked(raw, "parse_generate_response", "response", top_k) if check else raw


def _openai_choice(index: int, given: Any, chat: bool) -> tuple[dict[str, Any], int]:
    """One OpenAI-compatible choice from ``given`` (``token_ids``, ``logprobs``, optional
    ``text``, ``finish_reason`` and ``top_logprobs``: per token ``(id, logprob)`` pairs), as
    vLLM writes it with ``return_token_ids`` and ``return_tokens_as_token_ids``."""
    if not isinstance(given, dict):
        raise TypeError(f"choices[{index}] must be a dict, not {type(given).__name__}")
    if "token_ids" not in given or "logprobs" not in given:
        raise ValueError(f"choices[{index}] needs token_ids and logprobs")
    ids = _ids(given["token_ids"], f"choices[{index}].token_ids").tolist()
    values = real_array(given["logprobs"], f"choices[{index}].logprobs", np.float64, flat=True).tolist()
    if len(values) != len(ids):
        raise ValueError(f"choices[{index}] has {len(ids)} token_ids but {len(values)} logprobs "
                         f"({len(values) - len(ids):+d})")
    heads = given.get("top_logprobs")
    if heads is not None and len(heads) != len(ids):
        raise ValueError(f"choices[{index}] has {len(ids)} token_ids but {len(heads)} top_logprobs rows")
    text = given.get("text", "")
    tokens = [f"token_id:{i}" for i in ids]
    tops = [[(f"token_id:{int(i)}", float(v)) for i, v in row] for row in heads] if heads is not None else None
    out: dict[str, Any] = {"index": index}
    if chat:
        content = [{"token": t, "logprob": v, "bytes": None,
                    KEY.top_logprobs: [] if tops is None else [{"token": a, "logprob": b, "bytes": None} for a, b in tops[n]]}
                   for n, (t, v) in enumerate(zip(tokens, values))]
        out.update(message={"role": "assistant", "content": text}, logprobs={"content": content})
    else:
        out.update(text=text, logprobs={KEY.text_offset: list(range(len(ids))), KEY.token_logprobs: values, "tokens": tokens,
                                        KEY.top_logprobs: None if tops is None else [dict(row) for row in tops]})
    out.update({"finish_reason": given.get("finish_reason", "stop"), "stop_reason": None, KEY.token_ids: ids})
    return out, len(ids)


def _dumps_openai(choices: Any, chat: bool, model: str, request_id: str, created: int,
                  prompt_token_ids: Any, top_k: int | None, check: bool) -> bytes:
    if isinstance(choices, dict) or not isinstance(choices, (list, tuple)):
        raise TypeError(f"choices must be a list of dicts, not {type(choices).__name__}")
    written = [_openai_choice(i, c, chat) for i, c in enumerate(choices)]
    prompt = None if prompt_token_ids is None else _ids(prompt_token_ids, "prompt_token_ids").tolist()
    completion = sum(n for _, n in written)
    body = {"id": request_id, "object": "chat.completion" if chat else "text_completion", "created": created,
            "model": model, "choices": [c for c, _ in written],
            "usage": {"prompt_tokens": len(prompt or ()), "completion_tokens": completion,
                      "total_tokens": len(prompt or ()) + completion},
            KEY.prompt_token_ids: prompt}
    raw = _dumps(body)
    if not check:
        return raw
    parser = "parse_chat_completions_response" if chat else "parse_completions_response"
    return _checked(raw, parser, "chat completion" if chat else "completion", top_k)


def dumps_chat_completions_response(choices: Any, *, model: str = "model", request_id: str = "chatcmpl-0",
                                    created: int = 0, prompt_token_ids: Any = None, top_k: int | None = None,
                                    check: bool = True) -> bytes:
    """A ``/v1/chat/completions`` body as vLLM writes it with ``return_token_ids`` and
    ``return_tokens_as_token_ids``, for test servers and proxies: each of ``choices`` a dict
    of ``token_ids``, ``logprobs`` (one per id), and optionally ``text``, ``finish_reason``
    and ``top_logprobs`` (per token, ``(id, logprob)`` candidate pairs). Checked whole by
    :func:`tokenwire.parse_chat_completions_response` (with ``top_k`` the head) unless
    ``check=False``."""
    return _dumps_openai(choices, True, model, request_id, created, prompt_token_ids, top_k, check)


def dumps_completions_response(choices: Any, *, model: str = "model", request_id: str = "cmpl-0",
                               created: int = 0, prompt_token_ids: Any = None, top_k: int | None = None,
                               check: bool = True) -> bytes:
    """A ``/v1/completions`` body as vLLM writes it, as
    :func:`dumps_chat_completions_response` (``top_logprobs`` become vLLM's dicts keyed
    ``"token_id:N"``)."""
    return _dumps_openai(choices, False, model, request_id, created, prompt_token_ids, top_k, check)
