"""The audit of captured responses on one machine, summarized by defect class: what
``tokenwire check`` runs, and what ``tokenwire.ray`` runs on each unit of work.

The main process reads each file in blocks and hands chunks of complete lines to the
workers (``--jobs``), keeping at most two chunks per worker in flight, so memory stays flat
whatever the input size. Results come back in input order, so examples are the first ones.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections import Counter, deque
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from typing import Any, TextIO

import tokenwire

from . import _capture
from ..base import _json
from ._capture import (
    JSON_SPACE,
    Chunk,
    InputError,
    Reader,
    Source,
    expand_paths,
    json_bytes,
    read_chunks,
)
from ..base._errors import invalid_json
from ..base._options import ParseOptions
from ._formats import CLASSES, FORMATS, Defect, check_record
from ._records import record_row

__all__ = ["Options", "Progress", "Tally", "check_chunk", "json_report", "run"]


@dataclass(frozen=True)
class Options:
    format: str = "auto"
    field: tuple[str, ...] | None = None
    parse: ParseOptions = ParseOptions()  # what the parsers are given for every record
    examples: int = 3
    records: bool = False  # one row per record in the result's "rows" (--records)
    columns: tuple[tuple[str, tuple[str, ...]], ...] = ()  # --column: (name, path in the record)
    max_record: int | None = None  # the largest record held (None: io.MAX_RECORD), in every process


def _new_result() -> dict[str, Any]:
    return {"records": 0, "bytes": 0, "defective": 0, "formats": Counter(), "classes": Counter(),
            "histogram": {}, "examples": {}, "errors": [], "wrapped": Counter()}


def _add(result: dict[str, Any], raw: bytes, options: Options, position: dict[str, Any]) -> None:
    facts: dict[str, Any] | None = {} if options.records else None
    try:
        fmt, defect = check_record(raw, options.format, options.field, options.parse, facts)
    except MemoryError:  # says nothing of the record: the run is incomplete, not the record bad
        result["errors"].append(f"{_position(position)}: out of memory while checking this record "
                                f"({_size(len(raw))}); it is not counted")
        return
    _count(result, len(raw), fmt, defect, options, position, raw, facts)


def _count(result: dict[str, Any], size: int, fmt: str | None, defect: Defect | None, options: Options,
           position: dict[str, Any], raw: bytes | None = None, facts: dict[str, Any] | None = None) -> None:
    if options.records:
        result.setdefault("rows", []).append(
            record_row(size, raw, fmt, defect, facts or {}, position, options.columns))
    result["records"] += 1
    result["bytes"] += size
    if fmt is not None:
        result["formats"][fmt] += 1
    if defect is None:
        return
    result["defective"] += 1
    result["classes"][defect.cls] += 1
    if defect.wrapped is not None:
        result["wrapped"][defect.wrapped] += 1
    if defect.histogram is not None and defect.difference is not None:
        result["histogram"].setdefault(defect.histogram, Counter())[defect.difference] += 1
    shown = result["examples"].setdefault(defect.cls, [])
    if len(shown) < options.examples:
        shown.append({**position, "location": defect.location, "reason": defect.reason})


_OPTIONS = Options()


def _init_worker(options: Options, parent: int) -> None:
    global _OPTIONS
    _OPTIONS = options
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the main process's to handle
    _die_with(parent)


def _die_with(parent: int) -> None:
    """End this worker when the main process ends, however it ends (a SIGKILL included), so
    no worker outlives the run."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(1, signal.SIGKILL, 0, 0, 0) == 0:  # PR_SET_PDEATHSIG (Linux)
            if os.getppid() != parent:  # the parent ended before the request took effect
                os._exit(1)
            return
    except (OSError, AttributeError):  # not Linux
        pass

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(1)

    threading.Thread(target=watch, daemon=True).start()


def check_chunk(chunk: Chunk, options: Options | None = None) -> dict[str, Any]:
    """Check every record of a chunk; the counts and the first examples per class."""
    options = options or _OPTIONS
    result = _new_result()
    result["file"] = chunk.name
    if chunk.kind == "oversized":
        where = "element" if chunk.data == b"element" else "line"  # a JSON array's element, or a line
        position = {"file": chunk.name, **({where: chunk.first_line} if chunk.first_line else {})}
        limit = options.max_record or _capture.MAX_RECORD
        reason = f"{chunk.size:,} bytes, more than the {limit:,}-byte limit on one record"
        _count(result, chunk.size, None, Defect("too_large", "", reason), options, position)
        return result
    if chunk.kind == "jsonl":
        # The line as it is, less the JSON whitespace around it: what the parsers skip too.
        for offset, line in enumerate(chunk.data.split(b"\n")):
            record = line.strip(JSON_SPACE)
            if record:
                _add(result, record, options, {"file": chunk.name, "line": chunk.first_line + offset})
        return result
    if chunk.kind == "broken":  # the array's own syntax, where its elements end
        _count(result, chunk.size, None, Defect("malformed_json", "", f"invalid JSON: {chunk.data.decode()}"),
               options, {"file": chunk.name, "element": chunk.first_line})
        return result
    if chunk.kind == "elements":  # a JSON array's, each checked as the file holds it
        for number, element in enumerate(chunk.elements(), chunk.first_line):
            _add(result, element.strip(JSON_SPACE), options, {"file": chunk.name, "element": number})
        return result
    text = chunk.data.strip(JSON_SPACE)
    if not text:
        return result
    if not text.startswith(b"["):
        _add(result, text, options, {"file": chunk.name})
        return result
    try:
        items = _json.loads(text)
    except _json.JSONDecodeError as exc:
        error = invalid_json(exc, text)
        if isinstance(error, MemoryError):
            result["errors"].append(f"{chunk.name}: out of memory while reading the array of responses")
        else:  # "[" starts an array: only invalid JSON makes it something else
            _count(result, len(text), None, Defect("malformed_json", "", str(error)), options,
                   {"file": chunk.name}, text)
        return result
    for number, item in enumerate(items, 1):
        _add(result, json_bytes(item), options, {"file": chunk.name, "element": number})
    return result


@dataclass
class Tally:
    """Everything a run found, merged in input order."""

    options: Options
    sources: list[Source]
    records: int = 0
    bytes: int = 0
    defective: int = 0
    formats: Counter = field(default_factory=Counter)
    classes: Counter = field(default_factory=Counter)
    histogram: dict[str, Counter] = field(default_factory=dict)
    examples: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    wrapped: Counter = field(default_factory=Counter)  # --field paths unrecognized records wrap a response at
    per_file: dict[str, list[int]] = field(default_factory=dict)  # name -> [records, defective]
    seconds: float = 0.0
    errors: list[str] = field(default_factory=list)  # inputs that failed midway
    sink: Any = None  # called with each result's rows, in input order (--records)

    def merge(self, result: dict[str, Any]) -> None:
        self.records += result["records"]
        self.bytes += result["bytes"]
        self.defective += result["defective"]
        self.formats.update(result["formats"])
        self.classes.update(result["classes"])
        self.wrapped.update(result.get("wrapped", ()))
        for key, counts in result["histogram"].items():
            self.histogram.setdefault(key, Counter()).update(counts)
        for cls, shown in result["examples"].items():
            mine = self.examples.setdefault(cls, [])
            mine.extend(shown[: self.options.examples - len(mine)])
        self.errors.extend(result["errors"])
        counts = self.per_file.setdefault(result["file"], [0, 0])
        counts[0] += result["records"]
        counts[1] += result["defective"]
        if self.sink is not None and result.get("rows"):
            self.sink(result["rows"])

    @property
    def field_hint(self) -> str | None:
        """When every record was unrecognized, each wrapping a response at one path: what to
        pass (``--field PATH``), else None."""
        if not self.records or self.classes.get("unrecognized", 0) != self.records or len(self.wrapped) != 1:
            return None
        path, count = next(iter(self.wrapped.items()))
        if count != self.records:
            return None
        given = self.options.field
        was = f" (not --field {'.'.join(given)})" if given else ""
        return (f"every record holds a response under {path!r}: check them with --field {path}{was}")

    @property
    def status(self) -> int:
        if self.errors:
            return 2
        return 1 if self.defective else 0


class Progress:
    """Bytes read out of the total and records per second, on stderr: redrawn in place on a
    terminal, a line every few seconds otherwise."""

    def __init__(self, enabled: bool, total: int | None, stream: TextIO | None = None) -> None:
        self.enabled = enabled
        self.total = total
        self.stream = sys.stderr if stream is None else stream  # the stderr of the call, not of the import
        self.tty = self.stream.isatty()
        self.started = time.perf_counter()
        self.last = self.started
        self.drawn = False

    def update(self, done: int, records: int) -> None:
        if not self.enabled:
            return
        now = time.perf_counter()
        if now - self.last < (0.25 if self.tty else 2.0):
            return
        self.last = now
        elapsed = max(now - self.started, 1e-9)
        text = f"{_size(done)}"
        if self.total:
            text += f" / {_size(self.total)} ({min(done / self.total, 1):.0%})"
        text += f", {records:,} records, {records / elapsed:,.0f} records/s, {done / elapsed / 1e6:,.0f} MB/s"
        if self.total and 0 < done < self.total:
            text += f", ETA {_duration((self.total - done) * elapsed / done)}"
        if self.tty:
            self.stream.write(f"\r\x1b[K{text}")
            self.drawn = True
        else:
            self.stream.write(text + "\n")
        self.stream.flush()

    def finish(self) -> None:
        if self.drawn:
            self.stream.write("\r\x1b[K")
            self.stream.flush()


def _duration(seconds: float) -> str:
    minutes, secs = divmod(int(seconds + 0.5), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


def _size(n: float) -> str:
    for unit in ("B", "KB", "MB"):
        if n < 1000:
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1000
    return f"{n:,.1f} GB"


def run(paths: list[str], options: Options, *, jobs: int = 1, input_kind: str = "auto",
        progress: bool | None = None, sink: Any = None, rows_file: str | None = None) -> Tally:
    """Check every record of ``paths``. Raises :class:`InputError` before any work when an
    input cannot be opened (or is ``rows_file``, where ``sink`` writes); a file that fails
    midway is reported in ``Tally.errors`` and the run goes on with the next one."""
    sources = expand_paths(paths, rows_file)
    if input_kind == "auto" and options.field is None and getattr(FORMATS.get(options.format), "reads", None):
        input_kind = "json"  # a streamed (SSE) body is no JSON: each file is one record
    jobs = min(jobs, _cpus(), _chunks(sources))
    tally = Tally(options, sources)
    tally.sink = sink
    sizes = [s.size for s in sources]
    total = None if None in sizes else sum(sizes)  # type: ignore[arg-type]
    show = sys.stderr.isatty() if progress is None else progress
    meter = Progress(show, total)
    started = time.perf_counter()
    done_before = 0
    reader: Reader | None = None

    def chunks():
        nonlocal done_before, reader
        for source in sources:
            try:
                reader = Reader(source)
                yield from read_chunks(reader, input_kind, options.max_record)
            except InputError as exc:
                tally.errors.append(str(exc))
            finally:
                if reader is not None:
                    done_before += reader.position()
                    reader.close()
                reader = None

    def done() -> int:
        return done_before + (reader.position() if reader is not None else 0)

    try:
        if jobs <= 1:
            for chunk in chunks():
                tally.merge(check_chunk(chunk, options))
                meter.update(done(), tally.records)
        else:
            with ProcessPoolExecutor(jobs, initializer=_init_worker, initargs=(options, os.getpid())) as pool:
                pending: deque = deque()
                for chunk in chunks():
                    pending.append(pool.submit(check_chunk, chunk))
                    while len(pending) >= 2 * jobs:  # at most two chunks per worker in flight
                        tally.merge(pending.popleft().result())
                        meter.update(done(), tally.records)
                while pending:
                    tally.merge(pending.popleft().result())
                    meter.update(done(), tally.records)
    except BrokenProcessPool:
        tally.errors.append("a worker process died (out of memory?); the counts are incomplete")
    finally:
        meter.finish()
    tally.seconds = time.perf_counter() - started
    return tally


# --- reports -------------------------------------------------------------------------------------


def _position(example: dict[str, Any]) -> str:
    if "line" in example:
        return f"{example['file']}:{example['line']}"
    if "element" in example:
        return f"{example['file']}#{example['element']}"
    return example["file"]


def json_report(tally: Tally) -> dict[str, Any]:
    classes = {}
    for cls, label in CLASSES.items():
        entry: dict[str, Any] = {"label": label, "count": tally.classes[cls],
                                 "examples": tally.examples.get(cls, [])}
        if cls == "length_mismatch":
            entry["histogram"] = {
                key: {f"{d:+d}": n for d, n in counts.most_common()}
                for key, counts in sorted(tally.histogram.items())
            }
        classes[cls] = entry
    return {
        "tokenwire": tokenwire.__version__,
        "implementation": tokenwire.implementation,
        "format": tally.options.format,
        "field": ".".join(tally.options.field) if tally.options.field else None,
        "hint": tally.field_hint,
        **tally.options.parse.report(),
        "files": [
            {"path": s.name, "bytes": s.size, "records": tally.per_file.get(s.name, [0, 0])[0],
             "defective": tally.per_file.get(s.name, [0, 0])[1]}
            for s in tally.sources
        ],
        "records": tally.records,
        "bytes": tally.bytes,
        "clean": tally.records - tally.defective,
        "defective": tally.defective,
        "seconds": round(tally.seconds, 3),
        "formats": dict(tally.formats.most_common()),
        "classes": classes,
        "errors": tally.errors,
        "status": tally.status,
    }


def _cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def _chunks(sources: list[Source]) -> int:
    """How many chunks the sources can make at most (a worker more would have nothing to do);
    a stream or a compressed file sets no bound."""
    if any(s.size is None or s.compressed for s in sources):
        return sys.maxsize
    return max(sum(-(-s.size // _capture.BLOCK) for s in sources), 1)  # type: ignore[operator, misc]
