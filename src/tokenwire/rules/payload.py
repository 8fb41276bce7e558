"""prime-rl's by-handle payloads (``choices[].payload``, ``payload_dir``): the segments
validated without touching a file, and with ``payload_root`` their rows read from the files
into memory the result owns. Part of the rules (:mod:`tokenwire.rules.generate` applies
them)."""

from __future__ import annotations

import errno
import io
import os
import stat
from bisect import bisect_left
from typing import Any, NamedTuple, cast

import numpy as np

from ..base._errors import MalformedResponseError
from ..base._types import PayloadSegment, Ragged, RoutedExperts
from ..base._wire import MAX_OFFSET
from ..extract.python import Evidence
from ..kernels.python import is_int
from .arrays import MAX_ROUTED_WIDTH, ROUTED_DTYPES, named

# --- by-handle payloads (prime-rl's payload_dir) -------------------------------------------------
#
# prime-rl's server can write a choice's big per-token arrays to a file under its
# ``payload_dir`` (fsynced before the response) and send, instead of the arrays, ``payload``:
# segments ``[field, file, offset, pos, rows, dtype, shape]`` (an array-like msgspec struct;
# the object form with those keys is read too). A fixed-width field stores its rows at
# ``offset``; a ragged field (the masks) stores ``rows + 1`` uint32 absolute file offsets there,
# each row's values between two of them. The segments are validated without touching a file;
# with ``payload_root`` their bytes are read into memory the result owns, from files inside
# that directory only, and validated as the inline forms are.


class PayloadField(NamedTuple):
    """What a payload field holds: fixed-width rows of one of ``dtypes`` shaped ``row_form``,
    or (``ragged``) rows of file offsets pointing at values of the one dtype in ``dtypes``;
    ``inline`` the inline fields it stands for (one of them beside it, not null, is an error)."""

    dtypes: dict[str, np.dtype[Any]]
    row_form: str
    inline: tuple[str, ...]
    ragged: bool = False


PAYLOAD_FIELDS: dict[str, PayloadField] = {
    "routed_experts": PayloadField(ROUTED_DTYPES, "[layers, topk]", ("routed_experts",)),
    "routed_expert_weights": PayloadField({"float32": np.dtype("<f4")}, "[layers, topk]",
                                          ("routed_expert_weights",)),
    "sampling_mask": PayloadField({"int32": np.dtype("<i4")}, "[]", ("sampling_mask", "kept_tokens"), True),
    "sampling_mask_logprobs": PayloadField({"float32": np.dtype("<f4")}, "[]", ("sampling_mask_logprobs",), True),
}
# A segment's members, in the order of the array form.
SEGMENT_KEYS = ("field", "file", "offset", "pos", "rows", "dtype", "shape")
# A ragged segment's row is one uint32 file offset: 4 bytes, what prime-rl steps by when it
# clips a segment (row_bytes); its dtype and shape must say so.
OFFSET_ROW_DTYPES = ("uint32", "int32", "float32")
OFFSET_ROW_SHAPES = ([], [1])
# prime-rl's other layout of a mask segment (its server's writer, and its earlier reader): int32
# rows of one shape [width], each row's kept ids then -1 to the width (an all -1 row: no support).
PADDED_MASK_DTYPE = "int32"
MASK_PADDING = -1
_PADDED_TOO = {"sampling_mask": ", or int32 ids padded with -1 to a shape [width]"}
# The longest ``file`` name read (PATH_MAX on Linux: no longer path can be opened whole).
MAX_NAME = 4096


def prompt_length(document: dict[str, Any], prompt: np.ndarray | None) -> int | None:
    """The prompt's token count: the length of ``prompt_token_ids``, else ``usage.prompt_tokens``
    when it is a non-negative int, else None."""
    if prompt is not None:
        return len(prompt)
    usage = document.get("usage")
    count = usage.get("prompt_tokens") if isinstance(usage, dict) else None
    return count if is_int(count) and 0 <= count <= MAX_OFFSET else None


def given_prompt_length(document: dict[str, Any], prompt: np.ndarray | None, given: int | None) -> int | None:
    """The prompt's token count (:func:`prompt_length`), else ``given`` (the caller's
    ``prompt_tokens``); a response that says another count than the caller's is an error at
    the field that says it."""
    said = prompt_length(document, prompt)
    if given is None or said is None:
        return given if said is None else said
    if said != given:
        field = "prompt_token_ids" if prompt is not None else "usage.prompt_tokens"
        raise MalformedResponseError(f"the response's prompt has {said} tokens ({field}), not the "
                                     f"prompt_tokens={given} the caller gave", field=field)
    return said


def _segment(item: Any, at: str, c: Evidence) -> PayloadSegment:
    """One segment's members, each of its kind: a known field, a non-empty ``file`` path
    without NUL, non-negative ints (never bools) for the offset, position and rows, the
    field's dtype and row shape. Errors name a member as ``payload[i].<name>`` in both forms."""
    if isinstance(item, list):
        if len(item) != len(SEGMENT_KEYS):
            c.fail(f"payload segment must be an array [{', '.join(SEGMENT_KEYS)}]", at)
        item = dict(zip(SEGMENT_KEYS, item))
    elif not isinstance(item, dict):
        c.fail(f"payload segment must be an array [{', '.join(SEGMENT_KEYS)}] (or an object of those keys)", at)
    field = item.get("field")
    spec = named(PAYLOAD_FIELDS, field)
    if spec is None:
        c.fail(f"Unknown payload field (one of {', '.join(PAYLOAD_FIELDS)})", at + ".field")
    file = item.get("file")
    if not isinstance(file, str) or not file or len(file) > MAX_NAME or "\0" in file:
        c.fail(f"payload file must be a non-empty path of at most {MAX_NAME} characters, without NUL", at + ".file")
    for key in ("offset", "pos", "rows"):
        number = item.get(key)
        if not is_int(number) or not 0 <= number <= MAX_OFFSET:
            c.fail(f"payload {key} must be a non-negative int", f"{at}.{key}")
    dtype, shape = item.get("dtype"), item.get("shape")
    if field == "sampling_mask" and dtype == PADDED_MASK_DTYPE and isinstance(shape, list) and len(shape) == 1:
        if not is_int(shape[0]) or not 0 <= shape[0] <= MAX_ROUTED_WIDTH:
            c.fail("sampling_mask payload rows of int32 ids padded with -1 must be [width]: an int in "
                   "[2, 2**31), or 0", at + ".shape")
        if shape[0] == 1:
            c.fail("sampling_mask payload rows of int32 shape [1] are ambiguous: one uint32 file offset a row "
                   "(CSR) or one kept id a row padded with -1; CSR offsets are sent as uint32 []", at + ".shape")
    elif spec.ragged:
        if not isinstance(dtype, str) or dtype not in OFFSET_ROW_DTYPES:
            c.fail(f"{field} payload rows are uint32 file offsets: dtype {' or '.join(OFFSET_ROW_DTYPES)} "
                   f"(a 4-byte row){_PADDED_TOO.get(field, '')}", at + ".dtype")
        if shape not in OFFSET_ROW_SHAPES or any(not is_int(d) for d in shape):
            c.fail(f"{field} payload rows are uint32 file offsets: shape [] or [1] (a 4-byte row)"
                   f"{_PADDED_TOO.get(field, '')}", at + ".shape")
    else:
        if named(spec.dtypes, dtype) is None:
            c.fail(f"Unsupported {field} payload dtype ({' or '.join(spec.dtypes)})", at + ".dtype")
        if (not isinstance(shape, list) or len(shape) != 2
                or not all(is_int(d) and 1 <= d <= MAX_ROUTED_WIDTH for d in shape)):
            c.fail(f"{field} payload shape must be one row's, {spec.row_form}: ints in [1, 2**31)",
                   at + ".shape")
    segment = PayloadSegment(field, file, item["offset"], item["pos"], item["rows"], dtype, tuple(shape))
    if segment.offset + segment.nbytes > MAX_OFFSET:
        c.fail(f"payload segment bytes past 2**63 - 1 in {segment.file}", at)
    return segment


def parse_payload(choice: dict[str, Any], n: int, prompt_len: int | None,
                  c: Evidence) -> tuple[PayloadSegment, ...] | None:
    """The choice's by-handle segments, validated without reading a file (None without
    ``payload``): each segment's members (:func:`_segment`); a field's segments, in the order
    sent, tile its positions (each starts where the one before it ends, fixed-width ones of one
    row shape); routing rows end at ``prompt_len + n - 1`` (the last completion token is not
    routed), the weights cover the routing's positions in its row shape, mask rows are one per
    completion token from ``prompt_len``, the mask logprobs beside a mask; no inline form of a
    field beside its segments."""
    value = choice.get("payload")
    if value is None:
        return None
    if not isinstance(value, list):
        c.fail("payload must be a list of segments", "payload")
    segments = tuple(_segment(item, f"payload[{i}]", c) for i, item in enumerate(value))
    by_field: dict[str, list[int]] = {}
    for i, segment in enumerate(segments):
        before = by_field.setdefault(segment.field, [])
        if before:
            last = segments[before[-1]]
            if segment.pos != last.pos + last.rows:
                c.fail(f"{segment.field} payload segments must tile its positions: payload[{i}] must start at "
                       f"{last.pos + last.rows}, where payload[{before[-1]}] ends, not {segment.pos}", f"payload[{i}].pos")
            if segment.shape != last.shape and not PAYLOAD_FIELDS[segment.field].ragged:
                c.fail(f"{segment.field} payload segments must share one row shape ({list(last.shape)} in "
                       f"payload[{before[-1]}])", f"payload[{i}].shape")
        before.append(i)
    for field, indices in by_field.items():
        first, last = segments[indices[0]], segments[indices[-1]]
        at_first, at_last = f"payload[{indices[0]}]", f"payload[{indices[-1]}]"
        if prompt_len is None:
            c.fail("payload rows are placed by the prompt length: the response needs prompt_token_ids "
                   "or usage.prompt_tokens", at_first + ".pos")
        if field == "routed_experts":
            start, end = first.pos, prompt_len + n - 1
        elif field == "routed_expert_weights":
            routing = by_field.get("routed_experts")
            if routing is None:
                c.fail("routed_expert_weights payload needs a routed_experts payload beside it", at_first + ".field")
            routed = [segments[j] for j in routing]
            start, end = routed[0].pos, routed[-1].pos + routed[-1].rows
            if first.shape != routed[0].shape:
                c.fail(f"routed_expert_weights payload rows must be shaped as the routing's {list(routed[0].shape)}",
                       at_first + ".shape")
        else:
            start, end = prompt_len, prompt_len + n
            if field == "sampling_mask_logprobs" and "sampling_mask" not in by_field:
                c.fail("sampling_mask_logprobs payload needs a sampling_mask payload beside it", at_first + ".field")
        if last.pos + last.rows != end:
            c.fail(f"{field} payload rows must end at {end}, not {last.pos + last.rows} ({_SPANS[field]})",
                   at_last + ".rows")
        if first.pos != start:
            c.fail(f"{field} payload rows must start at {start}, not {first.pos} ({_SPANS[field]})", at_first + ".pos")
        for inline in PAYLOAD_FIELDS[field].inline:
            if choice.get(inline) is not None:
                c.fail(f"{field} sent both by handle ({at_first}) and inline ({inline})", inline)
    return segments


# What rows each field's segments cover, for the errors.
_SPANS = {
    "routed_experts": "routing rows end at prompt length + completion length - 1",
    "routed_expert_weights": "the weights cover the routing's rows",
    "sampling_mask": "one row per completion token from the prompt length",
    "sampling_mask_logprobs": "one row per completion token from the prompt length",
}


# A byte range of a payload file and its owner: (file key, start, end, choice, segment index,
# the file's name). The key is the file's identity (device, inode) once it is opened (a hard
# link or a rename gives one file two names), its name as sent before.
Span = tuple[Any, int, int, int, int, str]


def check_payload_overlap(spans: list[Span]) -> None:
    """No two byte ranges of one file share a byte; each range names its choice and its
    segment's index in the choice's ``payload``. Sorted by file and start, each range is
    compared with the furthest end before it."""
    spans = sorted((s for s in spans if s[2] > s[1]), key=lambda s: (s[0], s[1], s[3], s[4]))
    file, end, owner = None, 0, (0, 0)
    for key, lo, hi, choice, index, name in spans:
        if key == file and lo < end:
            raise MalformedResponseError(
                f"payload segment bytes [{lo}, {hi}) of {name} overlap choices[{owner[0]}].payload[{owner[1]}]",
                choice=choice, field=f"payload[{index}]")
        if key != file or hi > end:
            file, end, owner = key, hi, (choice, index)


def _start(span: Span) -> tuple[Any, int]:
    return span[0], span[1]


class ByteRanges:
    """The byte ranges a response's segments read so far, none sharing a byte with another of
    the same file, added a choice at a time: each new range is checked against the ones
    before it without sorting them again. They are kept as sorted runs whose sizes at least
    double from the newest to the oldest (a new run is merged with the runs not larger than
    it, as a binary counter carries), so n ranges take O(n log n) to add, and a range is
    checked by one binary search a run: since the ranges kept are disjoint, only the one that
    starts last before the new range ends can overlap it."""

    def __init__(self) -> None:
        self.runs: list[list[Span]] = []

    def add(self, spans: list[Span]) -> None:
        """Check ``spans`` against the ranges so far and each other (:func:`check_payload_overlap`),
        then keep them."""
        spans = sorted((s for s in spans if s[2] > s[1]), key=lambda s: (s[0], s[1], s[3], s[4]))
        for key, lo, hi, choice, index, name in spans:
            for run in self.runs:
                before = bisect_left(run, (key, hi), key=_start) - 1
                if before >= 0 and run[before][0] == key and run[before][2] > lo:
                    owner = run[before]
                    raise MalformedResponseError(
                        f"payload segment bytes [{lo}, {hi}) of {name} overlap choices[{owner[3]}].payload[{owner[4]}]",
                        choice=choice, field=f"payload[{index}]")
        check_payload_overlap(spans)
        while self.runs and len(self.runs[-1]) <= len(spans):
            spans = sorted(self.runs.pop() + spans, key=_start)  # two sorted runs: one linear merge
        if spans:
            self.runs.append(spans)


def segment_spans(choice: int, segments: tuple[PayloadSegment, ...] | None) -> list[Span]:
    """The bytes each segment spans from its offset, by its ``file`` as sent (a ragged
    segment's values are known only once its offsets are read)."""
    return [(s.file, s.offset, s.offset + s.nbytes, choice, i, s.file) for i, s in enumerate(segments or ())]


# Opened without following a last-component symlink (one swapped in after the check fails to
# open) and without blocking (a FIFO would wait for a writer; it is refused as no regular file).
_OPEN_FLAGS = (os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
               | getattr(os, "O_BINARY", 0) | getattr(os, "O_NONBLOCK", 0))
_DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


class _File(NamedTuple):
    path: str  # resolved, inside the root
    size: int  # at open
    reader: io.FileIO
    identity: tuple[int, int]  # (st_dev, st_ino): the file, whatever its name


class PayloadFiles:
    """The payload files of one response, under one root directory: each opened once (on the
    first segment that names it, by resolved path) and kept open until :meth:`close`; every byte range read
    into memory the result owns (a file changed later changes nothing read). A file must
    resolve (symlinks followed) to a regular file inside the root, and is opened one
    component at a time from the root without following a symlink. ``spans`` holds the
    byte ranges read, by file identity (:class:`ByteRanges`)."""

    def __init__(self, root: str) -> None:
        self.root = os.path.realpath(root)
        self.files: dict[str, _File] = {}
        self.names: dict[str, _File] = {}
        self.spans = ByteRanges()

    def close(self) -> None:
        for file in self.files.values():
            file.reader.close()
        self.files.clear()

    def open(self, name: str, c: Evidence, at: str) -> _File:
        """The file ``name`` (a path, relative to the root or absolute) names, opened on first
        use: by resolved path, so two names of one file share it; each name resolved once."""
        file = self.names.get(name)
        if file is not None:
            return file
        at += ".file"
        if not os.path.isdir(self.root):
            c.fail(f"payload_root {self.root} is not a directory", at)
        # A relative path is under the root; an absolute one must resolve inside it.
        try:
            real = _resolve(self.root, name)
        except OSError as exc:  # a directory swapped for a link meanwhile, a loop of links
            c.fail(f"payload file {name} cannot be resolved: {exc.strerror}", at)
        if real == self.root or os.path.commonpath([self.root, real]) != self.root:
            c.fail(f"payload file {name} resolves outside payload_root", at)
        file = self.files.get(real)
        if file is None:
            file = self.files[real] = self._open(name, real, c, at)
        self.names[name] = file
        return file

    def _open(self, name: str, real: str, c: Evidence, at: str) -> _File:
        try:
            fd = _open_beneath(self.root, os.path.relpath(real, self.root))
        except OSError as exc:
            c.fail(f"payload file {name} cannot be opened: {exc.strerror}", at)
        try:
            info = os.fstat(fd)
        except OSError as exc:
            os.close(fd)
            c.fail(f"payload file {name} cannot be opened: {exc.strerror}", at)
        if not stat.S_ISREG(info.st_mode):
            os.close(fd)
            c.fail(f"payload file {name} is not a regular file", at)
        return _File(real, info.st_size, io.FileIO(fd, "rb", closefd=True), (info.st_dev, info.st_ino))

    def read(self, file: _File, ranges: list[tuple[int, int]], c: Evidence, at: list[str]) -> list[np.ndarray]:
        """The bytes of each ``[start, end)`` of ``file`` (uint8, owned), one read per run of
        contiguous ranges; ``at[i]`` is where range ``i`` fails when the file is shorter."""
        out: list[np.ndarray] = [np.empty(0, dtype=np.uint8)] * len(ranges)
        order = sorted((r for r in range(len(ranges)) if ranges[r][1] > ranges[r][0]), key=lambda r: ranges[r][0])
        run: list[int] = []
        for i in order + [-1]:
            if run and (i < 0 or ranges[i][0] != ranges[run[-1]][1]):
                lo, hi = ranges[run[0]][0], ranges[run[-1]][1]
                data = self._read_run(file, lo, hi, c, [at[r] for r in run], [ranges[r] for r in run])
                for r in run:
                    out[r] = data[ranges[r][0] - lo : ranges[r][1] - lo]
                run = []
            run.append(i)
        return out

    def _read_run(self, file: _File, lo: int, hi: int, c: Evidence, at: list[str],
                  ranges: list[tuple[int, int]]) -> np.ndarray:
        buffer = np.empty(hi - lo, dtype=np.uint8)
        view, done = memoryview(buffer), 0
        try:
            file.reader.seek(lo)
            while done < hi - lo:
                got = file.reader.readinto(view[done:])
                if not got:
                    break  # the end of the file: it shrank since it was opened
                done += got
        except OSError as exc:
            c.fail(f"payload file {file.path} cannot be read: {exc.strerror}", at[0])
        if done < hi - lo:
            r = next(j for j, (_, end) in enumerate(ranges) if end > lo + done)
            c.fail(f"payload segment bytes [{ranges[r][0]}, {ranges[r][1]}) are past the end of {file.path} "
                   f"({lo + done} bytes)", at[r])
        return buffer


# How many symbolic links one name may pass through (Linux's limit for one path).
_MAX_LINKS = 40


def _resolve(root: str, name: str) -> str:
    """``os.path.realpath(os.path.join(root, name))`` in time linear in the name: each
    component is looked up once, from a descriptor of the directory before it (realpath
    looks up every prefix of the path again, quadratic in its components). As realpath, a
    component that does not exist, or is no directory, is kept as written and what follows
    it is joined as text (``..`` dropping the component before it); OSError for a loop of
    links, or a directory that changes to something else while it is walked."""
    if os.open not in os.supports_dir_fd or os.readlink not in os.supports_dir_fd:
        return os.path.realpath(os.path.join(root, name))
    pending = name.split(os.sep)[::-1]
    start = os.sep if os.path.isabs(name) else root
    parts = [p for p in start.split(os.sep) if p]
    directory = os.open(start, _DIR_FLAGS)
    written = 0  # components at the end of parts kept as text (past the directory open)
    links = 0
    try:
        while pending:
            part = pending.pop()
            if part in ("", "."):
                continue
            if part == "..":
                if written:
                    written -= 1
                elif parts:  # at the top, the top's parent is itself
                    below = os.open("..", _DIR_FLAGS, dir_fd=directory)
                    os.close(directory)
                    directory = below
                if parts:
                    parts.pop()
                continue
            if written:
                parts.append(part)
                written += 1
                continue
            try:
                info = os.stat(part, dir_fd=directory, follow_symlinks=False)
            except OSError:
                info = None
            if info is not None and stat.S_ISLNK(info.st_mode):
                links += 1
                if links > _MAX_LINKS:
                    raise OSError(errno.ELOOP, os.strerror(errno.ELOOP))
                target = os.readlink(part, dir_fd=directory)
                if target.startswith(os.sep):
                    below = os.open(os.sep, _DIR_FLAGS)
                    os.close(directory)
                    directory, parts = below, []
                pending += target.split(os.sep)[::-1]
                continue
            parts.append(part)
            if info is not None and stat.S_ISDIR(info.st_mode):
                below = os.open(part, _DIR_FLAGS, dir_fd=directory)
                os.close(directory)
                directory = below
            else:
                written = 1
    finally:
        os.close(directory)
    return os.sep + os.sep.join(parts)


def _open_beneath(root: str, relative: str) -> int:
    """A read-only descriptor of ``relative`` (a resolved path, no ``..``) under ``root``,
    each directory opened from the one before it without following a symlink, where the
    platform allows (else the joined path, its last component not followed)."""
    if os.open not in os.supports_dir_fd:
        return os.open(os.path.join(root, relative), _OPEN_FLAGS)
    *directories, name = relative.split(os.sep)
    directory = os.open(root, _DIR_FLAGS)
    try:
        for part in directories:
            below = os.open(part, _DIR_FLAGS, dir_fd=directory)
            os.close(directory)
            directory = below
        return os.open(name, _OPEN_FLAGS, dir_fd=directory)
    finally:
        os.close(directory)


def _aligned(data: np.ndarray, dtype: np.dtype[Any]) -> np.ndarray:
    """``data`` (uint8) as ``dtype``: a view, or a copy when the view would be misaligned."""
    values = data.view(dtype)
    return values if values.flags.aligned else values.copy()


def read_payload(segments: tuple[PayloadSegment, ...], ids: np.ndarray, files: PayloadFiles,
                 prompt_len: int, c: Evidence) -> dict[str, Any]:
    """The arrays of the segments, by field (``routed_experts``: :class:`RoutedExperts`;
    ``routed_expert_weights``: float32 rows shaped as the routing's; ``sampling_mask``: int32
    :class:`Ragged`, an empty row an absent support; ``sampling_mask_logprobs``: float32
    :class:`Ragged` on the mask's rows), each validated by the rules of its inline form.

    The segments' own bytes are read first (rows, or a ragged field's offsets), then the
    values the offsets point at, once the offsets are checked: non-decreasing, each row a
    whole number of 4-byte values, inside the file, and the values' bytes overlapping no other
    segment's bytes of the response."""
    at = [f"payload[{i}]" for i in range(len(segments))]
    opened = [files.open(s.file, c, at[i]) for i, s in enumerate(segments)]
    for i, (segment, file) in enumerate(zip(segments, opened)):
        if segment.offset + segment.nbytes > file.size:
            c.fail(f"payload segment bytes [{segment.offset}, {segment.offset + segment.nbytes}) are past the "
                   f"end of {segment.file} ({file.size} bytes)", at[i])
    choice = cast(int, c.index)
    files.spans.add([(f.identity, s.offset, s.offset + s.nbytes, choice, i, f.path)
                     for i, (s, f) in enumerate(zip(segments, opened))])
    own = _read_grouped(files, opened, [(s.offset, s.offset + s.nbytes) for s in segments], c, at)
    # A ragged segment's offsets: where its values are.
    starts: dict[int, np.ndarray] = {}
    values_at: list[tuple[int, int]] = [(0, 0)] * len(segments)
    for i, segment in enumerate(segments):
        if not segment.ragged:
            continue
        bounds = own[i].view("<u4").astype(np.int64)
        steps = np.diff(bounds)
        bad = np.flatnonzero((steps < 0) | (steps % 4 != 0))
        if len(bad):
            row = int(bad[0])
            reason = "decrease" if steps[row] < 0 else "are not a whole number of 4-byte values apart"
            c.fail(f"{segment.field} payload offsets {int(bounds[row])} and {int(bounds[row + 1])} of row {row} {reason}",
                   at[i], segment.pos + row - prompt_len)
        if int(bounds[-1]) > opened[i].size:
            if not segment.rows:  # no row: its one offset is past the end
                c.fail(f"{segment.field} payload offset {int(bounds[0])} is past the end of {segment.file} "
                       f"({opened[i].size} bytes)", at[i])
            row = int(np.flatnonzero(bounds[1:] > opened[i].size)[0])
            c.fail(f"{segment.field} payload row {row} ends at byte {int(bounds[row + 1])}, past the end of "
                   f"{segment.file} ({opened[i].size} bytes)", at[i], segment.pos + row - prompt_len)
        starts[i] = bounds
        values_at[i] = (int(bounds[0]), int(bounds[-1]))
    if starts:
        files.spans.add([(opened[i].identity, *values_at[i], choice, i, opened[i].path) for i in starts])
    values = _read_grouped(files, opened, values_at, c, at) if starts else []
    out: dict[str, Any] = {}
    fields = {}
    for i, segment in enumerate(segments):
        fields.setdefault(segment.field, []).append(i)
    if "routed_experts" in fields:
        out["routed_experts"] = RoutedExperts(_fixed_rows(segments, fields["routed_experts"], own, c, at),
                                              segments[fields["routed_experts"][0]].pos)
    if "routed_expert_weights" in fields:
        out["routed_expert_weights"] = _fixed_rows(segments, fields["routed_expert_weights"], own, c, at)
    if "sampling_mask" in fields:
        rows = [_padded_rows(segments[i], own[i], c, at[i], prompt_len) if segments[i].padded
                else _csr_rows(starts[i], values[i], "<i4") for i in fields["sampling_mask"]]
        out["sampling_mask"] = _mask_rows(segments, fields["sampling_mask"], rows, ids, c, at)
    if "sampling_mask_logprobs" in fields:
        rows = [_csr_rows(starts[i], values[i], "<f4") for i in fields["sampling_mask_logprobs"]]
        out["sampling_mask_logprobs"] = _mask_logprob_rows(segments, fields["sampling_mask_logprobs"], rows,
                                                           out["sampling_mask"], c, at)
    return out


def _read_grouped(files: PayloadFiles, opened: list[_File], ranges: list[tuple[int, int]], c: Evidence,
                  at: list[str]) -> list[np.ndarray]:
    """Each of ``ranges`` of the file of the same index, read file by file."""
    out: list[np.ndarray] = [np.empty(0, dtype=np.uint8)] * len(ranges)
    by_file: dict[tuple[int, int], list[int]] = {}
    for i, file in enumerate(opened):
        by_file.setdefault(file.identity, []).append(i)
    for indices in by_file.values():
        got = files.read(opened[indices[0]], [ranges[i] for i in indices], c, [at[i] for i in indices])
        for i, data in zip(indices, got):
            out[i] = data
    return out


def _fixed_rows(segments: tuple[PayloadSegment, ...], indices: list[int], own: list[np.ndarray], c: Evidence,
                at: list[str]) -> np.ndarray:
    """A fixed-width field's rows, its segments concatenated in position order (numpy's
    promotion when their dtypes differ): expert ids never negative, weights finite."""
    parts, row = [], 0
    for i in indices:
        segment = segments[i]
        dtype = PAYLOAD_FIELDS[segment.field].dtypes[segment.dtype]
        array = _aligned(own[i], dtype).reshape(segment.rows, *segment.shape)
        if dtype.kind == "f" and array.size:
            bad = np.flatnonzero(~np.isfinite(array.reshape(segment.rows, -1)).all(axis=1))
            if len(bad):
                c.fail(f"{segment.field} holds a weight that is not finite", at[i], row + int(bad[0]))
        elif dtype.kind == "i" and array.size:
            bad = c.kernels.first_bad("negative", array.reshape(-1))
            if bad >= 0:
                c.fail("routed_experts holds a negative expert id", at[i], row + bad // (array.size // segment.rows))
        parts.append(array)
        row += segment.rows
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


# One segment's ragged rows: the values of each row, and all the values in row order.
Rows = tuple[np.ndarray, np.ndarray]


def _csr_rows(starts: np.ndarray, values: np.ndarray, dtype: str) -> Rows:
    """A CSR segment's rows: its checked offsets and the values they point at."""
    return np.diff(starts) // 4, _aligned(values, np.dtype(dtype))


def _padded_rows(segment: PayloadSegment, data: np.ndarray, c: Evidence, at: str, prompt_len: int) -> Rows:
    """A -1-padded mask segment's rows: each row's kept ids, then -1 to its end (a row of -1
    only: no support recorded); a value below -1, or an id after the padding began, fails at
    the segment and the row's completion token."""
    rows = _aligned(data, np.dtype("<i4")).reshape(segment.rows, segment.shape[0])
    pad = rows == MASK_PADDING
    bad = rows < MASK_PADDING
    bad[:, 1:] |= pad[:, :-1] & ~pad[:, 1:]  # an id right after a -1
    broken = np.flatnonzero(bad.any(axis=1))
    if len(broken):
        row = int(broken[0])
        value = int(rows[row, int(np.flatnonzero(bad[row])[0])])
        reason = "a value below the -1 padding" if value < MASK_PADDING else "an id after its -1 padding"
        c.fail(f"sampling_mask payload row {row} holds {value}, {reason}: a padded row is its kept ids, then -1 "
               "to its end", at, segment.pos + row - prompt_len)
    return segment.shape[0] - pad.sum(axis=1), rows[~pad]


def _ragged_rows(segments: tuple[PayloadSegment, ...], indices: list[int], rows: list[Rows]) -> tuple[Ragged, list[int]]:
    """A ragged field's rows from its segments' rows, and the first row of each segment
    (then the row count)."""
    offsets = np.zeros(sum(len(k) for k, _ in rows) + 1, dtype=np.int64)
    np.cumsum(np.concatenate([k for k, _ in rows]), out=offsets[1:])
    flat = rows[0][1] if len(rows) == 1 else np.concatenate([v for _, v in rows])
    firsts = np.cumsum([0] + [segments[i].rows for i in indices]).tolist()
    return Ragged(offsets, flat), firsts


def _where(indices: list[int], firsts: list[int], row: int, at: list[str]) -> str:
    """The segment that holds ``row`` of a field."""
    return at[indices[int(np.searchsorted(firsts, row, side="right")) - 1]]


def _mask_rows(segments: tuple[PayloadSegment, ...], indices: list[int], parts: list[Rows], ids: np.ndarray,
               c: Evidence, at: list[str]) -> Ragged:
    """The mask's int32 rows, under the inline masks' rules: ids never negative, and each
    non-empty row a support of its token (``first_bad_support``); an empty row is an absent
    support, as a zero count inline."""
    rows, firsts = _ragged_rows(segments, indices, parts)
    negative = c.kernels.first_bad("negative", rows.values)
    limit = len(ids) if negative < 0 else int(np.searchsorted(rows.offsets, negative, side="right")) - 1
    bad = c.kernels.first_bad_support(ids, rows, limit, absent_ok=True)
    if bad < 0 and negative >= 0:
        bad = limit
    if bad >= 0:
        c.fail("Invalid recorded sampling support", _where(indices, firsts, bad, at), bad)
    return rows


def _mask_logprob_rows(segments: tuple[PayloadSegment, ...], indices: list[int], parts: list[Rows], mask: Ragged,
                       c: Evidence, at: list[str]) -> Ragged:
    """The mask logprobs' float32 rows: as wide as the mask's, each finite and at most 1e-6."""
    rows, firsts = _ragged_rows(segments, indices, parts)
    differ = np.flatnonzero(np.diff(rows.offsets) != np.diff(mask.offsets))
    if len(differ):
        row = int(differ[0])
        c.fail(f"sampling_mask_logprobs row {row} holds {len(rows[row])} values for {len(mask[row])} mask ids",
               _where(indices, firsts, row, at), row)
    bad = c.kernels.first_bad("compact", rows.values)
    if bad >= 0:
        row = int(np.searchsorted(rows.offsets, bad, side="right")) - 1
        c.fail("sampling_mask_logprobs must be finite and at most 1e-6 at each kept id",
               _where(indices, firsts, row, at), row)
    return rows
