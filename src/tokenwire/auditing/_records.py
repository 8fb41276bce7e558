"""The rows of an audit (``tokenwire check --records``, ``tokenwire.ray.check(records=...)``):
one row per record (where it is, its verdict, its counts and the columns the user names),
written as Parquet or JSON lines for query engines."""

from __future__ import annotations

import math
import operator
import os
import secrets
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import IO, Any

from ..base import _json
from ._audit import Verdict, verdict
from ._capture import InputError, field_path
from ._formats import Defect, FieldMissing, resolve_field

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


_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


def _fit(kind: str, value: Any, strings: bool = False) -> Any:
    """``value`` as a value of a column of pyarrow type ``kind``: an integer clamped to the
    int64 range (a float only when it is integral), a bool, a string (anything else as its
    text; with ``strings``, lone surrogates escaped as ``\\udXXX`` text); None where there is
    no such value."""
    if value is None:
        return None
    if kind == "int64":
        if isinstance(value, float):
            if not math.isfinite(value) or not value.is_integer():
                return None
            value = int(value)
        try:
            return min(max(operator.index(value), _INT64_MIN), _INT64_MAX)  # a numpy integer too
        except TypeError:
            return None
    if kind == "bool_":
        try:
            return bool(value)
        except Exception:  # an array's truth, say
            return None
    if not isinstance(value, str):
        try:
            value = str(value)
        except Exception:  # an integer too long to write out, or a value that cannot say what it is
            return f"an integer of {value.bit_length()} bits" if isinstance(value, int) else None
    if strings:
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return value.encode("utf-8", "backslashreplace").decode("utf-8")
    return value


_FITS = {"int64": int, "bool_": bool, "string": str}  # the values each kind holds as they are


class RecordsWriter:
    """Rows to ``path``: Parquet for ``*.parquet``, JSON lines for ``*.jsonl``/``*.ndjson``.
    Rows are written in row groups of ``group`` as they come, so memory stays flat, to a new
    file beside ``path`` that replaces it when the run ends (``close``): a run that fails
    leaves ``path`` as it was, and no search of the directory takes the rows for a capture.
    A value a column cannot hold is fitted to it (``_fit``): an integer past int64 is clamped
    (the message keeps its figure), so one record cannot sink the run."""

    def __init__(self, path: str, columns: tuple[tuple[str, tuple[str, ...]], ...] = (), group: int = 65536) -> None:
        self.path = path
        self._kinds = list({**COLUMNS, **{name: "string" for name, _ in columns}}.items())
        self.names = [name for name, _ in self._kinds]
        # The types each column takes as they are, and the int64 columns' values of a row.
        self._names = tuple(self.names)
        self._allowed = [frozenset((_FITS[kind], type(None))) for _, kind in self._kinds]
        self._numbers = operator.itemgetter(*(name for name, kind in self._kinds if kind == "int64"))
        self._shapes: set[tuple[tuple[Any, ...], tuple[Any, ...]]] = set()
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
            self.schema = pa.schema([(name, getattr(pa, kind)()) for name, kind in self._kinds])
        self._temporary: str | None = None
        try:
            self._file = self._create()
            self._out: Any = pq.ParquetWriter(self._file, self.schema, compression="zstd") if self.parquet else self._file
        except BaseException as exc:
            self.discard()
            if isinstance(exc, OSError):
                raise InputError(f"--records {path}: cannot write: {exc.strerror or exc}") from None
            raise

    def _create(self) -> IO[bytes]:
        """A new file beside ``path``, hidden and named unlike any capture (``.part``); its
        mode is the one the umask gives a new file."""
        directory, name = os.path.split(self.path)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
        for _ in range(100):
            temporary = os.path.join(directory, f".{name}.{secrets.token_hex(6)}.part")
            try:
                fd = os.open(temporary, flags, 0o666)
            except FileExistsError:
                continue
            self._temporary = temporary
            return os.fdopen(fd, "wb")
        raise FileExistsError(f"no new file name beside {self.path}")

    def write(self, rows: list[dict[str, Any]]) -> None:
        for row in rows:
            if not self._fits(row):
                row = {name: _fit(kind, row.get(name)) for name, kind in self._kinds}
            self._pending.append(row)
        self.rows += len(rows)
        if len(self._pending) >= self._group:
            self.flush()

    def _fits(self, row: dict[str, Any]) -> bool:
        """Whether ``row`` holds every column, in order, each value one its column holds as it
        is (the shapes of the rows seen, a few, are remembered)."""
        shape = (tuple(row), tuple(map(type, row.values())))
        if shape not in self._shapes:
            if shape[0] != self._names or not all(map(frozenset.__contains__, self._allowed, shape[1])):
                return False
            if len(self._shapes) < 1024:
                self._shapes.add(shape)
        return max(map(abs, filter(None, self._numbers(row))), default=0) <= _INT64_MAX

    def flush(self) -> None:
        if not self._pending:
            return
        try:
            self._write(self._pending)
        except (ValueError, TypeError):  # a lone surrogate, which UTF-8 cannot hold
            self._write([{name: _fit(kind, row[name], strings=True) for name, kind in self._kinds}
                         for row in self._pending])
        self._pending = []

    def _write(self, rows: list[dict[str, Any]]) -> None:
        if self.parquet:
            self._out.write_table(self._pa.Table.from_pylist(rows, schema=self.schema))
        else:
            self._out.write(b"".join(_json.dumps(row) + b"\n" for row in rows))

    def close(self) -> None:
        """Write what is pending and put the file in place of ``path``."""
        try:
            self.flush()
            if self.parquet:
                self._out.close()
            self._file.close()
            os.replace(self._temporary, self.path)  # type: ignore[arg-type]
        except OSError as exc:
            self.discard()
            raise InputError(f"--records {self.path}: cannot write: {exc.strerror or exc}") from None
        self._temporary = None

    def discard(self) -> None:
        """Close and remove the unfinished file (a failed or interrupted run); ``path`` stays
        as it was."""
        try:
            for out in (getattr(self, "_out", None), getattr(self, "_file", None)):
                if out is not None:
                    try:
                        out.close()
                    except Exception:  # what is being discarded may fail to close
                        pass
        finally:
            if self._temporary is not None and os.path.exists(self._temporary):
                os.remove(self._temporary)
            self._temporary = None


@contextmanager
def records_sink(
    path: str | None, columns: tuple[tuple[str, tuple[str, ...]], ...] = ()
) -> Iterator[Callable[[list[dict[str, Any]]], None] | None]:
    """What takes the rows of a run writing to ``path`` (None: no rows wanted); the file is
    in place when the run is complete, and ``path`` is left as it was when the run fails or
    is interrupted."""
    if path is None:
        yield None
        return
    writer = RecordsWriter(path, columns)
    try:
        yield writer.write
        writer.close()
    except BaseException:
        writer.discard()
        raise
