"""Parsed responses as Arrow record batches, one row per choice (one rollout).

``record_batch(responses)`` gathers every choice of every response into one
``pyarrow.RecordBatch`` whose columns trainers and query engines read directly:

=========================== =================================================================
column                      Arrow type
=========================== =================================================================
``request_id``              string (the response's ``request_id`` or ``id``)
``choice``                  int64 (the choice's ``index``)
``finish_reason``           string (JSON text when the server sent an object)
``prompt_token_ids``        large_list<int64>
``completion_ids``          large_list<int64>
``completion_logprobs``     large_list<float32 | float64> (as parsed)
``completion_top_ids``      large_list<large_list<...>>: row ``t`` is token ``t``'s head
``completion_top_logprobs`` large_list<large_list<float32 | float64>>
``sampling_mask``           large_list<large_list<int32>>
``routed_experts``          large_list<fixed_size_list<fixed_size_list<uint8 | uint16 | int16 | int32,
                            topk>, layers>>: one ``(layers, topk)`` entry per routed row
``routed_experts_start``    int64
=========================== =================================================================

A field a choice lacks (no ``top_k``, no mask, no routing) is null in its row. Arrow's
offsets are int64 like ``Ragged``'s, so a batch of one choice wraps the parsed arrays without
a copy; a batch of several choices copies each column once, into one contiguous Arrow buffer
(Arrow's layout holds a column in one buffer). ``table(responses)`` copies nothing: a
``pyarrow.Table`` whose chunks are one-choice batches. Needs pyarrow
(``pip install 'tokenwire[arrow]'``).

``batch_record_batch(batch)`` (``Batch.to_arrow()``) stores a :class:`tokenwire.Batch`: one row
per choice, each padded array as nested ``large_list`` levels over the batch's own values
(no copy of them; bool flags are packed into bits).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from .base._types import Batch, GenerateChoice, GenerateResponse, Ragged, _require

__all__ = ["SCHEMA_FIELDS", "batch_record_batch", "record_batch", "table"]

SCHEMA_FIELDS = (
    "request_id",
    "choice",
    "finish_reason",
    "prompt_token_ids",
    "completion_ids",
    "completion_logprobs",
    "completion_top_ids",
    "completion_top_logprobs",
    "sampling_mask",
    "routed_experts",
    "routed_experts_start",
)


def _pa() -> Any:
    return _require("pyarrow", "arrow")


def _native(array: np.ndarray) -> np.ndarray:
    if array.flags.c_contiguous and array.dtype.isnative:
        return array
    return np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("="))


def _mask(present: list[bool]) -> Any:
    if all(present):
        return None
    return _pa().array([not p for p in present], type=_pa().bool_())


def _joined(parts: list[np.ndarray], dtype: Any) -> np.ndarray:
    """One flat array of ``parts``: the part itself when there is one (no copy)."""
    if len(parts) == 1:
        return _native(parts[0])
    if not parts:
        return np.zeros(0, dtype=dtype)
    return np.concatenate(parts)


def _lengths_to_offsets(lengths: list[int]) -> np.ndarray:
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return offsets


def list_column(arrays: Sequence[np.ndarray | None], dtype: Any) -> Any:
    """A ``large_list`` column, one row per array (null for None); ``dtype`` when all are None."""
    pa = _pa()
    parts = [a for a in arrays if a is not None]
    offsets = _lengths_to_offsets([0 if a is None else len(a) for a in arrays])
    values = _joined(parts, dtype)
    return pa.LargeListArray.from_arrays(
        pa.array(offsets), pa.array(values), mask=_mask([a is not None for a in arrays])
    )


def ragged_column(raggeds: Sequence[Ragged | None], dtype: Any) -> Any:
    """A ``large_list<large_list>`` column, one row per ``Ragged`` (null for None)."""
    pa = _pa()
    present = [r for r in raggeds if r is not None]
    if len(present) == 1 and len(raggeds) == 1:
        inner = present[0].to_arrow()
    else:
        bases, parts, inner_offsets = 0, [], [np.zeros(1, dtype=np.int64)]
        for r in present:
            offsets, values = r._compact()
            inner_offsets.append(offsets[1:] + bases)
            parts.append(values)
            bases += len(values)
        inner = pa.LargeListArray.from_arrays(
            pa.array(np.concatenate(inner_offsets)), pa.array(_joined(parts, dtype))
        )
    outer = _lengths_to_offsets([0 if r is None else len(r) for r in raggeds])
    return pa.LargeListArray.from_arrays(pa.array(outer), inner, mask=_mask([r is not None for r in raggeds]))


def _routing_entry(present: Sequence[np.ndarray]) -> tuple[int, int]:
    """The ``(layers, topk)`` every routing array in ``present`` shares ((1, 1) for none), or
    ValueError naming the field."""
    for a in present:
        if a.ndim != 3 or not (1 <= a.shape[1] < 2**31 and 1 <= a.shape[2] < 2**31):
            raise ValueError(f"routed_experts of shape {a.shape} cannot be exported: a routing array is "
                             "(rows, layers, topk) with layers and topk in [1, 2**31)")
    shapes = {a.shape[1:] for a in present}
    if len(shapes) > 1:
        raise ValueError(f"routed_experts of different (layers, topk) in one batch: {sorted(shapes)}")
    return shapes.pop() if shapes else (1, 1)


def routing_column(arrays: Sequence[np.ndarray | None]) -> Any:
    """``(rows, layers, topk)`` routing arrays as lists of fixed-size ``(layers, topk)``
    entries; every choice must have the same layers and top-k. The readers accept no other
    routing; a response built by hand with another shape is refused here, naming the field
    (Arrow's fixed-size lists hold 1 to 2**31 - 1 values)."""
    pa = _pa()
    present = [a for a in arrays if a is not None]
    layers, topk = _routing_entry(present)
    flat = _joined([a.reshape(-1) for a in present], np.uint8)
    entries = pa.FixedSizeListArray.from_arrays(pa.FixedSizeListArray.from_arrays(pa.array(flat), topk), layers)
    offsets = _lengths_to_offsets([0 if a is None else a.shape[0] for a in arrays])
    return pa.LargeListArray.from_arrays(pa.array(offsets), entries, mask=_mask([a is not None for a in arrays]))


def _text(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _request_id(response: GenerateResponse) -> str | None:
    rid = response.request_id
    if rid is None and isinstance(response.payload, dict):
        rid = response.payload.get("id")
    return _text(rid)


def record_batch(responses: GenerateResponse | Iterable[GenerateResponse]) -> Any:
    """Every choice of ``responses`` (parsed by any ``tokenwire.parse_*``) as one row of a
    ``pyarrow.RecordBatch``; the columns are listed in this module's docstring."""
    pa = _pa()
    if isinstance(responses, GenerateResponse):
        responses = [responses]
    rows: list[tuple[GenerateResponse, GenerateChoice]] = [(r, c) for r in responses for c in r.choices]
    choices = [c for _, c in rows]
    routed = [c.routed_experts for c in choices]
    columns = {
        "request_id": pa.array([_request_id(r) for r, _ in rows], type=pa.string()),
        "choice": pa.array([c.index for c in choices], type=pa.int64()),
        "finish_reason": pa.array([_text(c.finish_reason) for c in choices], type=pa.string()),
        "prompt_token_ids": list_column([r.prompt_token_ids for r, _ in rows], np.int64),
        "completion_ids": list_column([c.completion_ids for c in choices], np.int64),
        "completion_logprobs": list_column([c.completion_logprobs for c in choices], np.float32),
        "completion_top_ids": ragged_column([c.completion_top_ids for c in choices], np.int64),
        "completion_top_logprobs": ragged_column([c.completion_top_logprobs for c in choices], np.float32),
        "sampling_mask": ragged_column([c.sampling_mask for c in choices], np.int32),
        "routed_experts": routing_column([None if r is None else r.array for r in routed]),
        "routed_experts_start": pa.array([None if r is None else r.start for r in routed], type=pa.int64()),
    }
    return pa.RecordBatch.from_arrays(list(columns.values()), names=list(columns))


def table(responses: GenerateResponse | Iterable[GenerateResponse]) -> Any:
    """The rows ``record_batch`` makes, as a ``pyarrow.Table`` of one-choice chunks that wrap
    the parsed arrays without a copy (``combine_chunks()`` makes it one batch). A column whose
    type differs between choices (float32 and float64 logprobs) is widened where needed: a copy
    of those chunks only."""
    pa = _pa()
    if isinstance(responses, GenerateResponse):
        responses = [responses]
    responses = list(responses)
    # One (layers, topk) for the whole table, as record_batch has: chunks of another entry
    # shape would not share the column's type.
    _routing_entry([c.routed_experts.array for r in responses for c in r.choices if c.routed_experts is not None])
    batches = [
        record_batch(GenerateResponse(choices=[choice], request_id=r.request_id, usage=r.usage,
                                      prompt_token_ids=r.prompt_token_ids, payload=r.payload))
        for r in responses
        for choice in r.choices
    ]
    if not batches:
        return pa.Table.from_batches([], schema=record_batch([]).schema)
    schema = _common_schema(pa, batches)
    return pa.Table.from_batches([_conformed(pa, b, schema) for b in batches], schema=schema)


def _common_schema(pa: Any, batches: list[Any]) -> Any:
    """Each column's type where some choice has it (a column null in a chunk takes it)."""
    fields = []
    for i, name in enumerate(batches[0].schema.names):
        present = [b.schema.field(i) for b in batches if b.column(i).null_count < b.num_rows]
        if not present:
            fields.append(batches[0].schema.field(i))
            continue
        unified = pa.unify_schemas([pa.schema([f]) for f in present], promote_options="permissive")
        fields.append(unified.field(name))
    return pa.schema(fields)


def _conformed(pa: Any, batch: Any, schema: Any) -> Any:
    columns = []
    for column, wanted in zip(batch.columns, schema):
        if column.type != wanted.type:
            if column.null_count == batch.num_rows:
                column = pa.nulls(batch.num_rows, wanted.type)
            else:
                column = column.cast(wanted.type)
        columns.append(column)
    return pa.RecordBatch.from_arrays(columns, schema=schema)


# --- a padded Batch ------------------------------------------------------------------------------

# Batch arrays stored as they are; the mask is left out (it is arange(T) < lengths).
_BATCH_COLUMNS = (
    ("lengths", None), ("completion_ids", None), ("completion_logprobs", "logprobs_present"),
    ("completion_top_ids", "heads_present"), ("completion_top_logprobs", "heads_present"),
    ("completion_top_lengths", "heads_present"), ("completion_top_truncated", "heads_present"),
    ("sampling_mask_present", None), ("routed_experts", "routed_experts_present"), ("routed_experts_lengths", None),
    ("routed_experts_start", None), ("completion_routed_experts", "routed_experts_present"),
    ("completion_routed_present", None), ("prompt_token_ids", "prompt_present"), ("prompt_lengths", None),
    ("loss_mask", None),
)


def _nested(array: np.ndarray, present: np.ndarray | None) -> Any:
    """A ``(B, d1, ..., dk)`` array as B rows of k nested ``large_list`` levels over its values
    (null where ``present`` is False)."""
    pa = _pa()
    mask = None if present is None or present.all() else pa.array(~present)
    level = pa.array(_native(array).reshape(-1))
    if array.ndim == 1:
        return level if mask is None else pa.array(array, mask=~present)
    for depth in range(array.ndim - 1, 0, -1):
        lists = int(np.prod(array.shape[:depth]))
        offsets = np.arange(lists + 1, dtype=np.int64) * array.shape[depth]
        level = pa.LargeListArray.from_arrays(pa.array(offsets), level, mask=mask if depth == 1 else None)
    return level


def batch_record_batch(batch: Batch) -> Any:
    """``batch`` as a ``pyarrow.RecordBatch``, one row per choice: ``response``, ``choice``,
    ``finish_reason``, then every array of the batch but ``mask`` (``arange(T) < lengths``),
    each padded row as nested ``large_list`` levels over the batch's values (no copy), null
    where the choice lacks the field; the sampling mask as ``large_list<large_list<int32>>``
    (T kept sets a row). The schema's ``tokenwire.batch`` metadata holds the widths, the
    format, ``top_k`` and ``pad_id``."""
    pa = _pa()
    columns: dict[str, Any] = {
        "response": pa.array(batch.response),
        "choice": pa.array(batch.choice),
        "finish_reason": pa.array([_text(r) for r in batch.finish_reason], type=pa.string()),
    }
    tokens = batch.completion_ids.shape[1]
    for name, flag in _BATCH_COLUMNS:
        array = getattr(batch, name)
        if array is not None:
            columns[name] = _nested(array, None if flag is None else getattr(batch, flag))
        if name == "completion_top_lengths" and batch.sampling_mask is not None:
            offsets, values = batch.sampling_mask._compact()
            inner = pa.LargeListArray.from_arrays(pa.array(offsets), pa.array(values))
            outer = np.arange(len(batch) + 1, dtype=np.int64) * tokens
            columns["sampling_mask"] = pa.LargeListArray.from_arrays(pa.array(outer), inner)
    widths = {name: getattr(batch, name).shape[1] for name in
              ("completion_ids", "completion_top_ids", "routed_experts", "prompt_token_ids")
              if getattr(batch, name) is not None}
    metadata = {"format": batch.format, "top_k": batch.top_k, "pad_id": batch.pad_id, "widths": widths,
                "skipped": batch.skipped.tolist()}
    if batch.completion_top_ids is not None:
        widths["head"] = batch.completion_top_ids.shape[2]
    routing = batch.routed_experts if batch.routed_experts is not None else batch.completion_routed_experts
    if routing is not None:
        metadata["routing_entry"] = list(routing.shape[2:])
        metadata["routing_dtype"] = str(routing.dtype)
    schema = pa.schema([pa.field(name, column.type) for name, column in columns.items()],
                       metadata={"tokenwire.batch": json.dumps(metadata)})
    return pa.RecordBatch.from_arrays(list(columns.values()), schema=schema)
