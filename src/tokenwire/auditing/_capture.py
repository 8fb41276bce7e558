"""Reading captured responses for an audit (``tokenwire check``, ``tokenwire.ray``): plain, gzip
or zstd files (told apart by their magic bytes), JSON documents or JSON lines, streamed in
blocks so memory stays flat.

A record is handed on as the file holds it, less the JSON whitespace around it (which every
parser skips): a byte order mark or a form feed stays, so the verdict is the library's on the
same bytes. A record larger than ``MAX_RECORD`` is never held: it comes as an ``"oversized"``
chunk that says where it is and how big it was.
"""

from __future__ import annotations

import gzip
import os
import re
import stat
import sys
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, Any

from ..base import _json

__all__ = [
    "BLOCK",
    "JSON_SPACE",
    "MAX_RECORD",
    "Chunk",
    "InputError",
    "Source",
    "expand_paths",
    "first_record",
    "json_bytes",
    "read_chunks",
]

BLOCK = 4 << 20  # bytes read at a time; a chunk is one block cut at its last newline
MAX_RECORD = 1 << 30  # the largest record held in memory (at least BLOCK)
JSON_SPACE = b" \t\n\r"  # what JSON allows around a document
_GZIP_MAGIC = b"\x1f\x8b"
# What a path that is not a regular file is, for the message refusing it.
_KINDS = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISSOCK, "a socket"))
_BOM = b"\xef\xbb\xbf"
_CAPTURE_SUFFIXES = (".json", ".jsonl", ".ndjson")
# Errors a stream raises on a damaged file (BadGzipFile is an OSError).
READ_ERRORS = (OSError, EOFError, zlib.error)
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_COMPRESSED_SUFFIXES = (".gz", ".zst")


class InputError(Exception):
    """An input cannot be read: exit status 2, with this message."""


def field_path(value: str | None) -> tuple[str, ...] | None:
    """A ``--field`` option as its path components (None when not given)."""
    if not value:
        return None
    path = tuple(value.split("."))
    if not all(path):
        raise InputError(f"--field {value!r}: empty path component")
    return path


@dataclass
class Source:
    path: str  # "-" is standard input
    name: str  # as reports show it
    size: int | None  # bytes on disk (None: standard input)
    compressed: bool = False  # gzip or zstd: the size says little of the records'


@dataclass
class Chunk:
    """Complete lines of one file (``kind`` "jsonl"; ``first_line`` numbers the first), a
    whole JSON document (``kind`` "json"), elements of a top-level JSON array (``kind``
    "elements": ``first_line`` numbers the first, 1-based, and element ``i`` is
    ``data[ends[i - 1]:ends[i]]``, from 0), or a record larger than ``MAX_RECORD`` (``kind``
    "oversized": its line, or its element with ``data`` b"element", or 0 for a whole
    document, and its ``size``),
    or the end of a JSON array that is not one (``kind`` "broken": ``data`` the reason)."""

    name: str
    first_line: int
    kind: str
    data: bytes
    size: int = 0
    ends: tuple[int, ...] = ()

    def elements(self) -> list[bytes]:
        """An "elements" chunk's elements, each as the file holds it."""
        return [self.data[a:b] for a, b in zip((0, *self.ends), self.ends)]


def _file_id(path: str) -> tuple[int, int] | None:
    """What tells a file apart whatever path names it (None: no such file)."""
    try:
        info = os.stat(path)
    except (OSError, ValueError):
        return None
    return info.st_dev, info.st_ino


def expand_paths(paths: list[str], rows_file: str | None = None) -> list[Source]:
    """The files to read: each path as given, directories searched recursively for
    ``*.json``, ``*.jsonl`` and ``*.ndjson`` (each optionally ``.gz`` or ``.zst``). Every file is opened
    once here, so an unreadable one stops the run before any work. ``rows_file`` (``--records``)
    is never an input: a directory search passes over it, and naming it is an error."""
    rows_id = _file_id(rows_file) if rows_file is not None else None
    sources: list[Source] = []
    for path in paths:
        if path == "-":
            sources.append(Source("-", "<stdin>", None))
            continue
        if os.path.isdir(path):
            found = []
            for root, dirs, files in os.walk(path):
                dirs.sort()
                for name in sorted(files):
                    stem = name
                    for suffix in _COMPRESSED_SUFFIXES:
                        stem = stem.removesuffix(suffix)
                    found_path = os.path.join(root, name)
                    if stem.endswith(_CAPTURE_SUFFIXES) and (rows_id is None or _file_id(found_path) != rows_id):
                        found.append(found_path)
            if not found:
                raise InputError(f"{path}: directory holds no .json, .jsonl or .ndjson files")
            sources.extend(_source(p) for p in found)
        else:
            if rows_id is not None and _file_id(path) == rows_id:
                raise InputError(f"--records {rows_file}: is the input {path}; write the rows to another file")
            sources.append(_source(path))
    _zstd_readable(sources)
    return sources


def _source(path: str) -> Source:
    try:
        # stat first: opening a FIFO would wait for a writer, and a device may never end.
        mode = os.stat(path).st_mode
        if not stat.S_ISREG(mode):
            kind = next((name for test, name in _KINDS if test(mode)), "not a regular file")
            raise InputError(f"{path}: is {kind}, not a regular file; stream it in as - (standard input)")
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            magic = f.read(4)
            compressed = magic[:2] == _GZIP_MAGIC or magic == _ZSTD_MAGIC
    except OSError as exc:
        raise InputError(f"{path}: cannot read: {exc.strerror or exc}") from None
    return Source(path, path, size, compressed)


class Reader:
    """An open source: ``stream`` yields the decompressed bytes; ``position()`` is how far
    into the file (compressed bytes) reading has got."""

    def __init__(self, source: Source) -> None:
        self.source = source
        self._consumed = 0
        try:
            if source.path == "-":
                self.file: IO[bytes] = sys.stdin.buffer
            else:
                self.file = open(source.path, "rb")
            magic = self.file.peek(4)[:4]  # type: ignore[union-attr]
        except OSError as exc:
            raise InputError(f"{source.name}: cannot read: {exc.strerror or exc}") from None
        self.gzip = magic[:2] == _GZIP_MAGIC
        self.zstd = magic == _ZSTD_MAGIC
        self._errors: tuple[type[BaseException], ...] = READ_ERRORS
        self.stream: Any = self.file
        if self.gzip:
            self.stream = gzip.GzipFile(fileobj=self.file, mode="rb")
        elif self.zstd:
            try:
                self.stream, error = _zstd_stream(self.file, source.name)
            except InputError:
                self.close()
                raise
            self._errors = (*READ_ERRORS, error)

    def read(self, size: int) -> bytes:
        try:
            data = self.stream.read(size)
        except self._errors as exc:
            what = "gzip stream" if self.gzip else "zstd stream" if self.zstd else "file"
            raise InputError(f"{self.source.name}: damaged {what}: {exc}") from None
        self._consumed += len(data)
        return data

    def position(self) -> int:
        try:
            return self.file.tell()
        except OSError:  # a pipe
            return self._consumed

    def close(self) -> None:
        if self.file is not sys.stdin.buffer:
            self.file.close()


class _ZstdFrames:
    """zstd frames one after another (as ``zstd`` and ``cat a.zst b.zst`` write them, skippable
    frames included), decompressed as they are read. The stream is cut along its frames and
    blocks (``_cut``) and the decompressor is handed a few whole blocks at a time: a block
    decompresses to at most 128 KiB, so no read holds more than ``_BLOCKS`` of them however
    well the input compresses (``decompressobj`` has no bound on its output). A stream that
    ends inside a frame is damaged: ``EOFError``, as gzip raises, where ``zstandard``'s own
    readers would return the part silently."""

    _INPUT = 1 << 17  # compressed bytes read from the file at a time
    _BLOCKS = 16  # whole blocks handed to the decompressor at once: at most 2 MiB out
    _BLOCK_MAX = 128 << 10  # the most a block holds, compressed or not (the format's limit)

    def __init__(self, file: IO[bytes], zstandard: Any) -> None:
        self._file = file
        self._context = zstandard.ZstdDecompressor()
        self._error = zstandard.ZstdError
        self._in = b""  # compressed bytes read from the file; self._pos on are not cut yet
        self._pos = 0
        self._at = 0  # bytes of the file cut so far (for messages)
        self._pieces = self._cut()
        self._frame: Any = None
        self._out = bytearray()

    def read(self, size: int) -> bytes:
        while len(self._out) < size:
            piece = next(self._pieces, None)
            if piece is None:
                break
            starts, data = piece
            if starts:
                self._frame = self._context.decompressobj()
            self._out += self._frame.decompress(data)
        block = bytes(self._out[:size])
        del self._out[:size]
        return block

    def _take(self, n: int, frame_start: bool = False) -> bytes:
        """The next ``n`` bytes of the stream; none at its end where a frame may start,
        ``EOFError`` (truncated) anywhere else."""
        end = self._pos + n
        if end > len(self._in):
            parts = [self._in[self._pos :]]
            held = len(parts[0])
            while held < n:
                data = self._file.read(max(self._INPUT, n - held))
                if not data:
                    if frame_start and not held:
                        return b""
                    raise EOFError("the stream ends inside a frame (truncated)")
                parts.append(data)
                held += len(data)
            self._in, self._pos, end = b"".join(parts), 0, n
        piece = self._in[self._pos : end]
        self._pos = end
        self._at += n
        return piece

    def _cut(self) -> Iterator[tuple[bool, bytes]]:
        """The stream as pieces for the decompressor: ``(True, header)`` starts a frame,
        ``(False, data)`` goes on with whole blocks of it (and, last, its checksum)."""
        while magic := self._take(4, frame_start=True):
            if magic[1:] == b"\x2a\x4d\x18" and magic[0] & 0xF0 == 0x50:  # a skippable frame
                left = int.from_bytes(self._take(4), "little")
                while left:
                    left -= len(self._take(min(left, self._INPUT)))
                continue
            if magic != _ZSTD_MAGIC:
                raise self._error(f"no zstd frame at byte {self._at - 4:,}")
            descriptor = self._take(1)
            flags = descriptor[0]
            single = flags >> 5 & 1  # no window descriptor; a content size of at least one byte
            header = 1 - single + (0, 1, 2, 4)[flags & 3] + (single, 2, 4, 8)[flags >> 6]
            yield True, magic + descriptor + self._take(header)
            last = False
            while not last:
                parts: list[bytes] = []  # each block's header and content
                for _ in range(self._BLOCKS):
                    head = self._take(3)
                    value = int.from_bytes(head, "little")
                    last, kind, size = bool(value & 1), value >> 1 & 3, value >> 3
                    if kind == 3 or size > self._BLOCK_MAX:
                        raise self._error(f"invalid block header at byte {self._at - 3:,}")
                    parts += (head, self._take(1 if kind == 1 else size))  # 1: one byte repeated
                    if last:
                        break
                yield False, b"".join(parts)
            if flags & 4:
                yield False, self._take(4)  # the content checksum
            if not self._frame.eof:
                raise self._error(f"a frame does not end with its last block (byte {self._at:,})")


def _zstd_stream(file: IO[bytes], name: str) -> tuple[Any, type[BaseException]]:
    """A zstd stream over ``file`` and the error its damage raises: the standard library's
    (Python 3.14) or the ``zstandard`` package's."""
    try:
        from compression import zstd  # type: ignore[import-not-found]

        return zstd.ZstdFile(file), zstd.ZstdError
    except ImportError:
        pass
    try:
        import zstandard
    except ImportError:
        raise InputError(
            f"{name}: reading zstd needs the zstandard package, which is not installed: "
            "pip install 'tokenwire[zstd]'"
        ) from None
    return _ZstdFrames(file, zstandard), zstandard.ZstdError


def _zstd_readable(sources: list[Source]) -> None:
    """Stop before any work when a zstd input cannot be decompressed here."""
    for source in sources:
        try:
            # Only a regular file is peeked at: opening a FIFO waits, reading one takes its data.
            if source.path == "-" or not stat.S_ISREG(os.stat(source.path).st_mode):
                continue
            with open(source.path, "rb") as f:
                if f.read(4) == _ZSTD_MAGIC:
                    _zstd_stream(f, source.name)
        except OSError as exc:
            raise InputError(f"{source.name}: cannot read: {exc.strerror or exc}") from None


def sniff(block: bytes) -> str:
    """``"json"`` for a pretty-printed document or a top-level array, else ``"jsonl"``; a
    first line that is a whole array with more lines after it starts JSON lines of arrays
    (SGLang's batch responses, one a line)."""
    text = block.removeprefix(_BOM).lstrip()
    first, newline, rest = text.partition(b"\n")
    line = first.strip()
    if line == b"{" or (line.startswith(b"[") and not (newline and rest.strip() and _whole_value(line))):
        return "json"
    return "jsonl"


def _whole_value(line: bytes) -> bool:
    try:
        _json.loads(line)
    except (ValueError, RecursionError):  # the start of a longer document
        return False
    return True


def read_chunks(reader: Reader, kind: str = "auto", max_record: int | None = None) -> Iterator[Chunk]:
    """The chunks of one source; ``kind``: ``"auto"`` (sniffed), ``"json"`` or ``"jsonl"``;
    ``max_record``: the largest record held (None: ``MAX_RECORD``; at least ``BLOCK``)."""
    name = reader.source.name
    limit = max_record or MAX_RECORD
    first = reader.read(BLOCK)
    if kind == "auto":
        kind = sniff(first)
    if kind == "json" and first.lstrip(JSON_SPACE).startswith(b"["):
        yield from _array(reader, name, first, limit)
        return
    if kind == "json":
        parts: list[bytes] | None = [first]
        size = len(first)
        while block := reader.read(BLOCK):
            size += len(block)
            if size > limit:
                parts = None  # counted to the end, never held
            elif parts is not None:
                parts.append(block)
        yield Chunk(name, 1, "json", b"".join(parts)) if parts is not None else Chunk(name, 0, "oversized", b"", size)
        return
    yield from _lines(reader, name, first, limit)


# What cuts an array into elements: a bracket, a comma or a string's quote; a string's
# content up to its closing quote (or the end of what is read: a backslash there waits).
_STRUCTURE = re.compile(rb'["\[\]{},]')
_NESTED = re.compile(rb'["\[\]{}]')  # inside an element, whose commas are its own
_STRING_BODY = re.compile(rb'[^"\\]*(?:\\.[^"\\]*)*', re.S)


def _array(reader: Reader, name: str, block: bytes, limit: int) -> Iterator[Chunk]:
    """A top-level JSON array's elements as the file holds them, read a block at a time and
    cut at the commas between them (brackets and strings followed, nothing parsed): chunks
    of kind "elements" of about a block each, so memory holds the largest element and a
    block, never the whole array nor its Python objects. An element longer than ``limit`` is
    an "oversized" chunk (counted to its end, never held). An empty element after a comma is
    one the record's parser refuses; a file that ends inside the array, or goes on after its
    closing bracket, ends in a "broken" chunk (``data`` says which, at element
    ``first_line``)."""
    buffer = block.lstrip(JSON_SPACE)[1:]  # past the "["
    position = start = depth = 0  # the scan; the element's first byte; brackets open in it
    in_string, comma = False, False
    skipped: int | None = None  # bytes dropped so far of an element over the limit
    number = 1  # the element's, 1-based
    parts: list[bytes] = []
    ends: list[int] = []

    def flush() -> Iterator[Chunk]:
        if parts:
            yield Chunk(name, number - len(parts), "elements", b"".join(parts), ends=tuple(ends))
            parts.clear()
            ends.clear()

    def element(data: bytes) -> Iterator[Chunk]:
        nonlocal number
        if skipped is not None or len(data) > limit:
            yield from flush()
            yield Chunk(name, number, "oversized", b"element", (skipped or 0) + len(data))
        else:
            parts.append(data)
            ends.append((ends[-1] if ends else 0) + len(data))
            if ends[-1] >= BLOCK:
                number += 1
                yield from flush()
                return
        number += 1

    while True:
        if in_string:
            position = _STRING_BODY.match(buffer, position).end()  # type: ignore[union-attr]
            if position < len(buffer) and buffer[position] == 0x22:
                position, in_string = position + 1, False
                continue
        else:
            match = (_NESTED if depth else _STRUCTURE).search(buffer, position)
            if match is not None:
                char, position = match.group(), match.end()
                if char == b'"':
                    in_string = True
                elif char in b"[{":
                    depth += 1
                elif depth:  # inside an element: its commas are its own
                    if char in b"]}":
                        depth -= 1
                elif char == b",":
                    yield from element(buffer[start : match.start()])
                    start, comma, skipped = position, True, None
                elif char == b"]":  # the array's end: its last element, then only whitespace
                    data = buffer[start : match.start()]
                    if data.strip(JSON_SPACE) or comma or skipped is not None:
                        yield from element(data)
                    skipped, rest = None, buffer[position:]
                    while not rest.strip(JSON_SPACE):
                        rest = reader.read(BLOCK)
                        if not rest:
                            yield from flush()
                            return
                    yield from flush()
                    yield Chunk(name, number, "broken", b"content after the array's closing bracket", len(rest))
                    return
                continue  # a "}" closing the array is the element's, which the parser refuses
            position = len(buffer)
        more = reader.read(BLOCK)
        if not more:  # the file ends inside the array
            yield from flush()
            yield Chunk(name, number, "broken", b"the file ends inside the array", (skipped or 0) + len(buffer) - start)
            return
        if skipped is None and len(buffer) - start > limit:
            skipped = 0
        if skipped is not None:  # over the limit: counted, not held
            skipped += position - start
            start = position
        buffer, position, start = buffer[start:] + more, position - start, 0


def _lines(reader: Reader, name: str, block: bytes, limit: int) -> Iterator[Chunk]:
    """JSON lines from ``block`` on: chunks of whole lines, and each line longer than
    ``limit`` as an "oversized" chunk (read to its newline, never held)."""
    line = 1
    pending: list[bytes] = []  # the start of a line longer than a block
    held = 0  # bytes in pending
    skipped: int | None = None  # bytes so far of an oversized line
    while block:
        if skipped is None:
            end = block.find(b"\n")
            if end >= 0 and held + end <= limit:
                cut = block.rfind(b"\n")
                data = b"".join([*pending, block[: cut + 1]]) if pending else block[: cut + 1]
                rest = block[cut + 1 :]
                pending, held = ([rest], len(rest)) if rest else ([], 0)
                yield Chunk(name, line, "jsonl", data)
                line += data.count(b"\n")
                block = reader.read(BLOCK)
                continue
            if end < 0 and held + len(block) <= limit:
                pending.append(block)
                held += len(block)
                block = reader.read(BLOCK)
                continue
            skipped, pending, held = held, [], 0  # over the limit: counted from here on
        end = block.find(b"\n")
        if end < 0:
            skipped += len(block)
            block = reader.read(BLOCK)
            continue
        yield Chunk(name, line, "oversized", b"", skipped + end)
        line, skipped = line + 1, None
        block = block[end + 1 :] or reader.read(BLOCK)
    if skipped is not None:
        yield Chunk(name, line, "oversized", b"", skipped)
    elif pending:
        yield Chunk(name, line, "jsonl", b"".join(pending))


def json_bytes(value: Any) -> bytes:
    """A parsed JSON value as compact JSON again (orjson's, or the standard library's for a
    value nested deeper than orjson writes)."""
    try:
        return _json.dumps(value)
    except (TypeError, RecursionError):  # orjson writes at most 254 levels
        return _json.dumps_deep(value)


def first_record(source: Source, kind: str = "auto", line: int | None = None) -> tuple[bytes, int, str] | None:
    """The first record of a source (or the one on ``line``): its bytes, its line (JSONL) or
    element number (JSON array, 1-based; 0 for a single document), and the kind read.
    None when there is no such record."""
    reader = Reader(source)
    try:
        for chunk in read_chunks(reader, kind):
            if chunk.kind == "oversized":
                if line is None or chunk.first_line in (0, line):
                    raise InputError(f"{source.name}: the record is {chunk.size:,} bytes, more than the "
                                     f"{MAX_RECORD:,}-byte limit")
                continue
            if chunk.kind == "elements":  # a JSON array's, read one at a time
                for number, element in enumerate(chunk.elements(), chunk.first_line):
                    if line is None or number == line:
                        return element.strip(JSON_SPACE), number, "json"
                continue
            if chunk.kind == "broken":  # where the array stops being one: a malformed record
                if line is None or chunk.first_line == line:
                    return b"", chunk.first_line, "json"
                return None
            if chunk.kind == "json":
                text = chunk.data.strip(JSON_SPACE)
                if not text.startswith(b"["):
                    return (text, 0, "json") if text and line in (None, 1) else None
                try:
                    items = _json.loads(text)
                except _json.JSONDecodeError:
                    return text, 0, "json"  # the malformed document itself
                wanted = (line or 1) - 1
                if not isinstance(items, list) or wanted >= len(items):
                    return None
                return json_bytes(items[wanted]), wanted + 1, "json"
            lines = chunk.data.split(b"\n")
            if chunk.data.endswith(b"\n"):
                lines.pop()  # what follows the last newline is the next chunk's
            for offset, record in enumerate(lines):
                number = chunk.first_line + offset
                record = record.strip(JSON_SPACE)
                if (line is None and record) or number == line:
                    return (record, number, "jsonl") if record else None
                if line is not None and number > line:
                    return None
        return None
    finally:
        reader.close()
