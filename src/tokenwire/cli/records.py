"""``tokenwire check --records``: one row per record (where it is, its verdict, its counts and
the columns the user names), written as Parquet or JSON lines for query engines."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from .. import _json
from .._audit import Verdict, verdict
from .formats import Defect, FieldMissing, resolve_field
from .io import InputError, field_path

__all__ = ["COLUMNS", "RecordsWriter", "parse_columns", "record_row", "records_sink"]

# The fixed columns, in order, with the pyarrow factories of their types; user columns
# (``--column``) follow as strings.
COLUMNS: dict[str, str] = {
    "file": "string",
    "line": "int64",
    "element": "int64",
    "valid": "bool_",
    "format": "string",
    "defect": "string",
    "label": "string",
    "location": "string",
    "message": "string",
    "choice": "int64",
    "field": "string",
    "token": "int64",
    "length_field": "string",
    "length_difference": "int64",
    "bytes": "int64",
    "choices": "int64",
    "tokens": "int64",
    "request_id": "string",
    "model": "string",
}


def parse_columns(values: list[str] | None) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """``--column PATH`` or ``--column NAME=PATH`` options as (name, path) pairs."""
    columns: list[tuple[str, tuple[str, ...]]] = []
    for value in values or []:
        name, _, path = value.rpartition("=")
        name = name or path
        if not path:
            raise InputError(f"--column {value!r}: empty path")
        if name in COLUMNS or name in (c for c, _ in columns):
            raise InputError(f"--column {value!r}: column {name!r} already exists (name it: --column NAME={path})")
        columns.append((name, field_path(path) or ()))
    return tuple(columns)


def _column_value(document: Any, path: tuple[str, ...]) -> str | None:
    try:
        value = resolve_field(document, path)
    except FieldMissing:
        return None
    if value is None or isinstance(value, str):
        return value
    return _json.dumps(value).decode()


def record_row(
    size: int, raw: bytes | None, fmt: str | None, defect: Defect | None, facts: dict[str, Any],
    position: dict[str, Any], columns: tuple[tuple[str, tuple[str, ...]], ...],
) -> dict[str, Any]:
    """The row of one record of ``size`` bytes: its position, its verdict and the ``columns``
    read from ``raw`` (null without it: a record that was not held)."""
    judged: Verdict = verdict(size, fmt, defect, facts)
    row = {"file": position["file"], "line": position.get("line"), "element": position.get("element")}
    row.update(judged.as_dict())  # the verdict's fields are the columns after the position
    if columns:
        try:
            document = _json.loads(raw) if raw is not None else None
        except _json.JSONDecodeError:
            document = None
        for name, path in columns:
            row[name] = _column_value(document, path)
    return row


class RecordsWriter:
    """Rows to ``path``: Parquet for ``*.parquet``, JSON lines for ``*.jsonl``/``*.ndjson``.
    Rows are written in row groups of ``group`` as they come, so memory stays flat."""

    def __init__(self, path: str, columns: tuple[tuple[str, tuple[str, ...]], ...] = (), group: int = 65536) -> None:
        self.path = path
        self.names = [*COLUMNS, *(name for name, _ in columns)]
        self.rows = 0
        self._pending: list[dict[str, Any]] = []
        self._group = group
        lower = path.lower()
        self.parquet = lower.endswith(".parquet")
        if not self.parquet and not lower.endswith((".jsonl", ".ndjson")):
            raise InputError(f"--records {path}: name a .parquet, .jsonl or .ndjson file")
        if self.parquet:
            try:
                import pyarrow as pa
                import pyarrow.parquet as pq
            except ImportError:
                raise InputError(
                    "--records to Parquet needs pyarrow, which is not installed: pip install 'tokenwire[arrow]' "
                    "(or write JSON lines: --records out.jsonl)"
                ) from None
            self._pa = pa
            types = {**COLUMNS, **{name: "string" for name, _ in columns}}
            self.schema = pa.schema([(name, getattr(pa, types[name])()) for name in self.names])
        try:
            if self.parquet:
                self._out: Any = pq.ParquetWriter(path, self.schema, compression="zstd")
            else:
                self._out = open(path, "wb")
        except OSError as exc:
            raise InputError(f"--records {path}: cannot write: {exc.strerror or exc}") from None

    def write(self, rows: list[dict[str, Any]]) -> None:
        self._pending.extend(rows)
        self.rows += len(rows)
        if len(self._pending) >= self._group:
            self.flush()

    def flush(self) -> None:
        if not self._pending:
            return
        if self.parquet:
            table = self._pa.Table.from_pylist(self._pending, schema=self.schema)
            self._out.write_table(table)
        else:
            self._out.write(b"".join(_json.dumps(row) + b"\n" for row in self._pending))
        self._pending = []

    def close(self) -> None:
        self.flush()
        self._out.close()

    def discard(self) -> None:
        """Close and remove a file left incomplete (an interrupted run)."""
        try:
            self._out.close()
        finally:
            if os.path.exists(self.path):
                os.remove(self.path)


@contextmanager
def records_sink(
    path: str | None, columns: tuple[tuple[str, tuple[str, ...]], ...] = ()
) -> Iterator[Callable[[list[dict[str, Any]]], None] | None]:
    """What takes the rows of a run writing to ``path`` (None: no rows wanted); the file is
    complete when the run is, and removed when the run fails or is interrupted."""
    if path is None:
        yield None
        return
    writer = RecordsWriter(path, columns)
    try:
        yield writer.write
    except BaseException:
        writer.discard()
        raise
    writer.close()
