"""Audits on a Ray cluster: ``tokenwire check --ray ADDRESS`` and :func:`check`.

The driver lists the inputs and cuts them into work units: a plain JSON-lines file larger
than ``range_bytes`` becomes byte ranges (each widened to whole lines), any other file (gzip,
zstd, a JSON document) one unit. Ray tasks read their unit from the file system and check it
as one machine does (``tokenwire check``'s chunks, formats and classes); the driver merges the
results in input order, so the summary, the examples and the ``--records`` rows are the ones a
single-machine ``check`` of the same files gives. Every node must see the inputs at the same
paths (a shared or network file system). Needs ray (``pip install 'tokenwire[ray]'``).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .base._options import ParseOptions, check_names, with_options
from .auditing._capture import (
    BLOCK,
    InputError,
    Reader,
    Source,
    expand_paths,
    field_path,
    read_chunks,
    sniff,
)
from .auditing._check import Options, Progress, Tally, check_chunk, json_report
from .auditing._records import parse_columns, records_sink
from .base._types import _require

__all__ = ["check", "run"]

RANGE_BYTES = 256 << 20  # a plain JSON-lines file is cut into ranges of about this size


@dataclass(frozen=True)
class _Unit:
    """A whole file (``end`` None) or the lines starting in bytes ``[start, end)`` of one."""

    source: Source
    start: int = 0
    end: int | None = None

    @property
    def size(self) -> int:
        if self.end is None:
            return self.source.size or 0
        return self.end - self.start


def _units(sources: list[Source], input_kind: str, range_bytes: int) -> list[_Unit]:
    units = []
    for source in sources:
        if source.path == "-":
            raise InputError("standard input cannot be checked on Ray: name files that every node can read")
        size = source.size or 0
        if size <= range_bytes or not _splittable(source, input_kind):
            units.append(_Unit(source))
            continue
        units.extend(_Unit(source, start, min(start + range_bytes, size)) for start in range(0, size, range_bytes))
    return units


def _splittable(source: Source, input_kind: str) -> bool:
    """A regular, uncompressed file of JSON lines can be cut into ranges of lines."""
    if input_kind == "json" or not stat.S_ISREG(os.stat(source.path).st_mode):
        return False
    reader = Reader(source)
    try:
        if reader.gzip or reader.zstd:
            return False
        return input_kind == "jsonl" or sniff(reader.read(BLOCK)) == "jsonl"
    finally:
        reader.close()


def _line_start(f: Any, position: int, size: int) -> int:
    """Where the first line starting at or after ``position`` starts (``size`` if none does)."""
    if position <= 0:
        return 0
    f.seek(position - 1)
    while block := f.read(1 << 16):
        cut = block.find(b"\n")
        if cut >= 0:
            return f.tell() - len(block) + cut + 1
    return size


class _Range:
    """The lines starting in ``[start, end)`` of a plain file, read like a :class:`Reader`."""

    def __init__(self, unit: _Unit) -> None:
        self.source = unit.source
        self.file = open(unit.source.path, "rb")
        size = os.fstat(self.file.fileno()).st_size
        first = _line_start(self.file, unit.start, size)
        self.left = max(_line_start(self.file, unit.end or size, size) - first, 0)
        self.file.seek(first)

    def read(self, size: int) -> bytes:
        data = self.file.read(min(size, self.left))
        self.left -= len(data)
        return data

    def close(self) -> None:
        self.file.close()


def check_unit(unit: _Unit, options: Options, input_kind: str) -> tuple[list[dict[str, Any]], int, str | None]:
    """Check one work unit: the chunk results in order, the newlines read (lines in a range
    are numbered from 1; the driver adds the lines of the ranges before) and the error that
    ended the unit early, if one did."""
    results: list[dict[str, Any]] = []
    newlines = 0
    reader: Any = None
    try:
        if unit.end is None:
            reader = Reader(unit.source)
            chunks = read_chunks(reader, input_kind, options.max_record)
        else:
            reader = _Range(unit)
            chunks = read_chunks(reader, "jsonl", options.max_record)
        for chunk in chunks:
            # An oversized line comes without its data: it is one line all the same (its
            # newline is read; at the end of the file nothing follows it to be renumbered).
            newlines += chunk.data.count(b"\n") if chunk.kind != "oversized" else int(chunk.first_line > 0)
            results.append(check_chunk(chunk, options))
    except InputError as exc:
        return results, newlines, str(exc)
    finally:
        if reader is not None:
            reader.close()
    return results, newlines, None


def _renumber(result: dict[str, Any], lines_before: int) -> None:
    if not lines_before:
        return
    for shown in result["examples"].values():
        for example in shown:
            if "line" in example:
                example["line"] += lines_before
    for row in result.get("rows", ()):
        if row["line"] is not None:
            row["line"] += lines_before


def _connect(ray: Any, address: str) -> bool:
    """Connect to Ray unless already connected; whether this call did (and so shuts down)."""
    if ray.is_initialized():
        return False
    if address == "local":
        # A cluster of this machine only, reached on the loopback interface.
        ray.init(include_dashboard=False, configure_logging=False, log_to_driver=False)
    else:
        ray.init(address=address, configure_logging=False, log_to_driver=False)
    return True


def run(
    paths: list[str], options: Options, *, address: str = "local", input_kind: str = "auto",
    progress: bool | None = None, sink: Callable[[list[dict[str, Any]]], None] | None = None,
    range_bytes: int = RANGE_BYTES, rows_file: str | None = None,
) -> Tally:
    """Check ``paths`` on Ray: the same :class:`Tally` (and the same rows, in input order, to
    ``sink``) as ``tokenwire check`` on one machine; ``rows_file`` (where ``sink`` writes) is
    never an input."""
    import sys
    import time

    if address == "local":
        # Ray finds this machine's outward address even for a one-machine cluster; this keeps
        # the cluster it starts on the loopback interface (read when ray is first imported).
        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    ray = _require("ray", "ray")
    sources = expand_paths(paths, rows_file)
    units = _units(sources, input_kind, range_bytes)
    tally = Tally(options, sources, sink=sink)
    show = sys.stderr.isatty() if progress is None else progress
    meter = Progress(show, sum(u.size for u in units))
    started = time.perf_counter()
    owned = _connect(ray, address)
    try:
        task = ray.remote(check_unit)
        window = max(2, 2 * int(ray.cluster_resources().get("CPU", 1)))
        pending: dict[Any, int] = {}  # object ref -> unit number
        finished: dict[int, tuple[list[dict[str, Any]], int, str | None]] = {}
        submitted = merged = done = 0
        lines_before: dict[str, int] = {}
        while merged < len(units):
            while submitted < len(units) and len(pending) < window:
                pending[task.remote(units[submitted], options, input_kind)] = submitted
                submitted += 1
            ready, _ = ray.wait(list(pending), num_returns=1)
            for ref in ready:
                number = pending.pop(ref)
                finished[number] = ray.get(ref)
                done += units[number].size
            while merged in finished:  # merge in input order
                results, newlines, error = finished.pop(merged)
                name = units[merged].source.name
                for result in results:
                    _renumber(result, lines_before.get(name, 0))
                    tally.merge(result)
                lines_before[name] = lines_before.get(name, 0) + newlines
                if error is not None:
                    tally.errors.append(error)
                merged += 1
            meter.update(done, tally.records)
    finally:
        meter.finish()
        if owned:
            ray.shutdown()
    tally.seconds = time.perf_counter() - started
    return tally


@with_options
def check(
    paths: list[str] | str,
    *,
    address: str = "local",
    format: str = "auto",
    field: str | None = None,
    examples: int = 3,
    input_kind: str = "auto",
    records: str | None = None,
    columns: list[str] | None = None,
    progress: bool | None = False,
    range_bytes: int = RANGE_BYTES,
    **options: Any,
) -> dict[str, Any]:
    """Audit captures on a Ray cluster; the summary ``tokenwire check --report json`` prints.
    An input that cannot be read, or an argument of the wrong form, raises ValueError naming
    the argument (``paths``, ``field``, ``columns``, ``records``).

    ``address``: ``"local"`` starts a Ray cluster on this machine for the call, ``"auto"``
    joins the running one, anything else is a cluster address (``"ray://head:10001"``); an
    already connected driver is used as it is. ``records``: a ``.parquet`` or ``.jsonl`` path
    for one row per record, with ``columns`` (``"meta.step"`` or ``"step=meta.step"``) added.
    The other arguments are ``check``'s options of the same names (the parsers' options are the
    audited ones of ``tokenwire.base._options.OPTIONS``).
    """
    check_names("check", options)
    if isinstance(paths, str):
        paths = [paths]
    try:
        chosen = parse_columns(columns)
        checking = Options(format=format, field=field_path(field), parse=ParseOptions.checked(options),
                           examples=examples, records=records is not None, columns=chosen)
        with records_sink(records, chosen) as sink:
            tally = run(paths, checking, address=address, input_kind=input_kind, progress=progress,
                        sink=sink, range_bytes=range_bytes, rows_file=records)
    except InputError as exc:
        raise ValueError(_argument_message(str(exc))) from None
    return json_report(tally)


# The command line's options, by the name check() gives the same argument.
_ARGUMENTS = {"--field": "field", "--column": "columns", "--records": "records"}


def _argument_message(message: str) -> str:
    """An input error as check()'s caller reads it: the argument named as check() names it
    (``field='a..b'``, not ``--field 'a..b'``); a path's error under ``paths``."""
    for flag, argument in _ARGUMENTS.items():
        if message.startswith(flag + " "):
            return f"{argument}={message[len(flag) + 1:]}"
    return f"paths: {message}"
