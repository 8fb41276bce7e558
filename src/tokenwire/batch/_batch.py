"""The batch path: many response bodies parsed on a pool of threads (``parse_many``,
``aparse_many``), and their choices gathered into padded arrays (``collate``).

The parsers release the GIL in every pass of the compiled core over a response's bytes or its
arrays (the scan, base64, the record readers, the row checks, head selection), so threads
parse side by side; the JSON reader on what the scan leaves and the rules' Python hold it.
``collate`` makes one allocation per array and fills it with one kernel call (in C without
the GIL, or with numpy one row at a time in the reference), never a Python object per token.
"""

from __future__ import annotations

import asyncio
import functools
import os
import threading
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from ..read import _facade, _select
from ..read._registry import FORMATS
from ..read._stream import parser_of
from ..base._args import check_input, check_start, check_top_k, int_arg
from ..base._errors import MalformedResponseError
from ..base._types import Batch, GenerateChoice, GenerateResponse, Ragged

__all__ = ["aparse_many", "collate", "parse_batch", "parse_many"]

ERRORS = ("raise", "collect")


# --- parse_many ----------------------------------------------------------------------------------


def available_cores() -> int:
    """The cores this process may run on (its CPU affinity where the system has one)."""
    if hasattr(os, "process_cpu_count"):  # Python 3.13
        return os.process_cpu_count() or 1
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0)) or 1
    return os.cpu_count() or 1


def _prepared(raws: Iterable[Any], format: Any, threads: Any, errors: Any,
              options: dict[str, Any]) -> tuple[list[Any], Any, int, bool]:
    """Every argument checked before any parse: the bodies (a private list), the parser with
    its options bound, the thread count, and whether errors are collected."""
    if not isinstance(format, str) or format not in FORMATS:
        raise ValueError(f"format must be one of {', '.join(map(repr, FORMATS))}, not {format!r}")
    if not isinstance(errors, str) or errors not in ERRORS:
        raise ValueError(f"errors must be 'raise' or 'collect', not {errors!r}")
    count = available_cores() if threads is None else int_arg(threads, "threads", 1)
    entry = FORMATS[format]
    if entry.reads is not None:  # an SSE body, reassembled and read by its whole-body format's parser
        parser = parser_of(format)
    else:
        parser = getattr(_facade, entry.parser)  # refuses a body of another known format
    accepted = entry.options
    unknown = sorted(set(options) - set(accepted))
    if unknown:
        raise TypeError(f"unknown option{'s' * (len(unknown) > 1)} for the {format} parser: {', '.join(unknown)} "
                        f"(it takes {', '.join(accepted)})")
    check_top_k(options.get("top_k"))
    check_start(options.get("prompt_logprob_start"))
    if isinstance(raws, (bytes, bytearray, memoryview, str)):
        raise TypeError("raws must be a sequence of response bodies, not one body")
    # a response's .content; bytes (the common case) are a body as they are
    bodies = [body if type(body) is bytes else _facade.body_of(body, f"raws[{i}]") for i, body in enumerate(raws)]
    for body in bodies:
        if type(body) is not bytes:
            check_input(body)
    return bodies, functools.partial(parser, **options), count, errors == "collect"


def _mark(exc: MalformedResponseError, index: int) -> MalformedResponseError:
    exc.body_index = index
    note = f"in body {index} of the batch"
    if hasattr(exc, "add_note"):  # Python 3.11
        exc.add_note(note)
    else:
        exc.__notes__ = [*getattr(exc, "__notes__", ()), note]
    return exc


def _run(bodies: list[Any], parse: Any, threads: int, collect: bool,
         stop: threading.Event | None = None) -> list[Any]:
    """Parse every body on ``threads`` threads (the calling one among them), each taking the
    next body in order; the results in input order. Without ``collect`` the first failure in
    input order is raised once the bodies being parsed are done, and no body is taken after
    a failure has stopped the batch; ``stop`` (set from outside) also stops the taking of new
    bodies."""
    n = len(bodies)
    results: list[Any] = [None] * n
    failures: dict[int, BaseException] = {}
    stop = stop or threading.Event()
    lock = threading.Lock()
    following = iter(range(n))

    def work() -> None:
        while True:
            with lock:  # a body is taken only while no failure (nor the caller) has stopped the batch
                i = None if stop.is_set() else next(following, None)
            if i is None:
                return
            try:
                results[i] = parse(bodies[i])
            except MalformedResponseError as exc:
                _mark(exc, i)
                if collect:
                    results[i] = exc
                    continue
                failures[i] = exc
                stop.set()
            except BaseException as exc:  # out of memory, an interrupt: the batch stops
                failures[i] = exc
                stop.set()

    workers = [threading.Thread(target=work, name=f"tokenwire-parse-{w}", daemon=True)
               for w in range(min(threads, n) - 1)]
    for worker in workers:
        worker.start()
    try:
        work()
    finally:  # the calling thread is done (or interrupted): no new body, then wait for the rest
        stop.set()
        for worker in workers:
            worker.join()
    if failures:
        raise failures[min(failures)]
    return results


def parse_many(raws: Iterable[Any], *, format: str = "generate", threads: int | None = None,
               errors: str = "raise", **parser_options: Any) -> list[Any]:
    """Parse many response bodies on a pool of threads; the results in input order.

    Args:
        raws: the bodies (each as ``parse_*_response`` takes it: bytes, any bytes-like
            object, or str), read into a list once.
        format: ``"generate"`` (``parse_generate_response``), ``"completions"``, ``"chat"``
            or ``"sglang"``; for streamed (SSE) bodies ``"generate_stream"``,
            ``"completions_stream"``, ``"chat_stream"`` or ``"sglang_stream"`` (read as
            ``parse_*_stream`` reads them: with the compiled core the vLLM forms' events
            are scanned with the GIL released; SGLang's chunks, and every stream on the
            reference, are reassembled in Python, which holds it).
        threads: how many threads parse (the calling one among them; default: the cores
            this process may use). Each takes the next body in order; the compiled core
            releases the GIL in its passes over the bytes and arrays, so they run side by
            side (the JSON of what the scan leaves and the rules' Python hold it).
        errors: ``"raise"``: the first malformed body in input order raises its
            :class:`MalformedResponseError` (no new body is started once one has failed);
            ``"collect"``: a malformed body's error takes its place in the list and the
            others are parsed. Either way the error's ``body_index`` is the body's position
            (also in a note of the traceback). Any other exception (``MemoryError``) stops
            the batch and is raised.
        parser_options: the parser's keywords (``top_k``, ``require_logprobs``, ...).

    Returns:
        list: one ``GenerateResponse`` per body (or its error, with ``errors="collect"``).

    Raises:
        ValueError, TypeError: an unknown format or ``errors``, ``threads`` < 1, an option
            the parser does not take or a bad ``top_k``, a body that is not bytes-like or
            str; before any body is parsed.
        MalformedResponseError: with ``errors="raise"``, as above.

    Example:
        >>> bodies = [b'{"choices":[{"token_ids":[5],"logprobs":{"sampled":[-0.5]}}]}', b'{}']
        >>> good, bad = tokenwire.parse_many(bodies, errors="collect", threads=2)
        >>> good.choices[0].completion_ids.tolist(), bad.body_index, bad.field
        ([5], 1, 'choices')
    """
    bodies, parse, threads, collect = _prepared(raws, format, threads, errors, parser_options)
    return _run(bodies, parse, threads, collect)


async def aparse_many(raws: Iterable[Any], *, format: str = "generate", threads: int | None = None,
                      errors: str = "raise", **parser_options: Any) -> list[Any]:
    """:func:`parse_many` for an event loop: the arguments are checked at once (raising
    before any parse), and the bodies are parsed on threads of their own while the loop runs
    on. Cancelling the awaiting task stops the start of new bodies (the ones being parsed
    finish, and their results are dropped).

    Example:
        >>> body = b'{"choices":[{"token_ids":[5],"logprobs":{"sampled":[-0.5]}}]}'
        >>> [r.choices[0].completion_ids.tolist() for r in asyncio.run(tokenwire.aparse_many([body] * 2))]
        [[5], [5]]
    """
    bodies, parse, threads, collect = _prepared(raws, format, threads, errors, parser_options)
    stop = threading.Event()
    loop = asyncio.get_running_loop()
    done: asyncio.Future[list[Any]] = loop.create_future()

    def deliver(outcome: Any, failed: bool) -> None:
        if not done.done():
            (done.set_exception if failed else done.set_result)(outcome)

    def run() -> None:
        try:
            outcome, failed = _run(bodies, parse, threads, collect, stop), False
        except BaseException as exc:
            outcome, failed = exc, True
        try:
            loop.call_soon_threadsafe(deliver, outcome, failed)
        except RuntimeError:  # the loop closed meanwhile: nobody waits for the outcome
            pass

    threading.Thread(target=run, name="tokenwire-aparse", daemon=True).start()
    try:
        return await done
    finally:
        stop.set()  # cancelled: start no new body (done: changes nothing)


# --- collate -------------------------------------------------------------------------------------


class _Row:
    """One choice of the batch and what it came with."""

    __slots__ = ("choice", "item", "response")

    def __init__(self, choice: GenerateChoice, item: int, response: GenerateResponse | None) -> None:
        self.choice, self.item, self.response = choice, item, response


def _rows(items: Sequence[Any]) -> tuple[list[_Row], list[int]]:
    """Every choice of ``items`` with its item's position, and the positions of the errors
    ``parse_many(errors="collect")`` left in their slots (skipped)."""
    rows, skipped = [], []
    for i, item in enumerate(items):
        if isinstance(item, MalformedResponseError):
            skipped.append(i)
        elif isinstance(item, GenerateResponse):
            rows += [_Row(c, i, item) for c in item.choices]
        elif isinstance(item, GenerateChoice):
            rows.append(_Row(item, i, None))
        else:
            raise TypeError(f"collate takes GenerateResponse and GenerateChoice objects (and skips the errors "
                            f"parse_many collects), not {type(item).__name__} "
                            f"(item {i})")
    for row in rows:
        if not isinstance(row.choice, GenerateChoice):
            raise TypeError(f"item {row.item} holds a choice that is not a GenerateChoice")
    return rows, skipped


def _one_setting(items: Sequence[Any]) -> tuple[str | None, int | None]:
    """The batch's format and top_k: every parsed response (format known) must share them."""
    parsed = [(i, r) for i, r in enumerate(items) if isinstance(r, GenerateResponse) and r.format is not None]
    if not parsed:
        return None, None
    first, head = parsed[0]
    for i, r in parsed[1:]:
        if r.format != head.format:
            raise ValueError(f"the batch mixes formats: item {first} is a {head.format!r} response and item {i} a "
                             f"{r.format!r} one; collate each format on its own")
        if r.top_k != head.top_k:
            raise ValueError(f"item {i} was parsed with top_k={r.top_k} and item {first} with top_k={head.top_k}: "
                             "heads of different widths cannot share one tensor")
    return head.format, head.top_k


def _width(name: str, given: Any, longest: int, what: str, where: Any) -> int:
    """``given`` (checked to hold ``longest``), or ``longest``."""
    if given is None:
        return longest
    width = int_arg(given, name, 0)
    if width < longest:
        raise ValueError(f"{where()} has {longest} {what}, more than {name}={width} (nothing is cut)")
    return width


def _vector(value: Any, dtype: Any, kinds: str, name: str, b: int) -> np.ndarray:
    """``value`` as a 1-D C-contiguous array of ``dtype`` (itself when it is one already)."""
    array = np.asarray(value)
    if array.ndim != 1 or (array.dtype.kind not in kinds and array.size):
        what = "floats" if kinds == "f" else "integers"
        raise TypeError(f"choice {b}'s {name} must be a 1-D array of {what}, not {array.ndim}-D {array.dtype}")
    return np.ascontiguousarray(array, dtype=dtype)


# An array is filled on several threads from this many bytes (below, starting them costs more).
_SPLIT_BYTES = 1 << 20


# The arrays of ``out`` that collate writes again (``sampling_mask.values``: the Ragged's).
_REUSED = ("completion_ids", "mask", "completion_logprobs", "completion_top_ids", "completion_top_logprobs",
           "completion_top_lengths", "sampling_mask.offsets", "sampling_mask.values", "sampling_mask_present",
           "routed_experts", "prompt_token_ids")


def _ranges(rows: int, parts: int, call: Any, name: str) -> list[tuple[int, Any]]:
    """``call(i, a, b)`` for each range ``i`` of ``parts`` contiguous ranges ``[a, b)`` of
    ``rows``, each on a thread of its own (the calling thread takes the first): ``(a, its
    result)`` per range, in order; the first failure is raised once every range is done."""
    bounds = [rows * i // parts for i in range(parts + 1)]
    results: list[Any] = [None] * parts
    failures: list[BaseException] = []

    def run(i: int) -> None:
        try:
            results[i] = call(i, bounds[i], bounds[i + 1])
        except BaseException as exc:  # raised by the calling thread
            failures.append(exc)

    workers = [threading.Thread(target=run, args=(i,), name=f"{name}-{i}") for i in range(1, parts)]
    for worker in workers:
        worker.start()
    run(0)
    for worker in workers:
        worker.join()
    if failures:
        raise failures[0]
    return list(zip(bounds, results))


class _Blocks:
    """Where collate's arrays come from, and the kernels that fill them: a new array each, or
    the array of that name of ``out`` (a Batch collate returned) when it has the shape and
    dtype wanted, written again in place; a large array is filled by ``threads`` threads, each
    a contiguous range of its rows (the C kernels run without the GIL).

    ``out``'s arrays are written only, never read back by a kernel: what bounds a kernel's
    reads (the head lengths, the mask offsets) is computed into private arrays and copied into
    ``out`` last, so a thread rewriting ``out`` meanwhile changes what the batch holds, never
    what is read. Arrays of ``out`` that share memory are refused before anything is written."""

    def __init__(self, kernels: Any, out: Batch | None, threads: int) -> None:
        self.kernels, self.out, self.threads = kernels, out, threads
        if out is not None:
            reused = [(name, a) for name in _REUSED if (a := self._previous(name)) is not None and a.size]
            for i, (name, a) in enumerate(reused):
                for other, b in reused[i + 1:]:
                    if np.may_share_memory(a, b):
                        raise ValueError(f"out's {name} and {other} share memory")

    def each(self, rows: int, nbytes: int, call: Any) -> list[tuple[int, Any]]:
        """``call(a, b)`` over ``rows`` cut into one range per thread (one range for a small
        array): ``(a, its result)`` per range, in order."""
        parts = max(1, min(self.threads, rows)) if nbytes >= _SPLIT_BYTES else 1
        return _ranges(rows, parts, lambda i, a, b: call(a, b), "tokenwire-collate")

    def fill(self, rows: list[np.ndarray], out: np.ndarray, fill: Any) -> np.ndarray:
        """``pad_rows`` into ``out``."""
        done = self.each(len(rows), out.nbytes, lambda a, b: self.kernels.pad_rows(rows[a:b], out[a:b], fill))
        if any(bad >= 0 for _, bad in done):
            raise ValueError("a row changed its length while it was being copied")  # lengths are checked first
        return out

    def _previous(self, name: str) -> np.ndarray | None:
        """``out``'s array of that name, if collate may write it again."""
        previous: Any = self.out
        for part in name.split("."):  # "sampling_mask.values": the Ragged's arrays
            previous = getattr(previous, part, None)
        if type(previous) is np.ndarray and previous.flags.c_contiguous and previous.flags.writeable:
            return previous
        return None

    def empty(self, name: str | None, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
        previous = self._previous(name) if self.out is not None and name else None
        if previous is not None and previous.shape == shape and previous.dtype == dtype:
            return previous
        return np.empty(shape, dtype=dtype)

    def copy(self, name: str, private: np.ndarray) -> np.ndarray:
        """``private`` (which the kernels read), or ``out``'s array of that name holding a copy."""
        block = self.empty(name, private.shape, private.dtype)
        if block is not private:
            np.copyto(block, private)
        return block

    def padded(self, name: str, rows: list[np.ndarray], width: int, dtype: Any, fill: Any) -> np.ndarray:
        return self.fill(rows, self.empty(name, (len(rows), width), dtype), fill)


def _flags(values: list[Any]) -> np.ndarray:
    return np.fromiter((v is not None for v in values), dtype=np.bool_, count=len(values))


def _ragged_lengths(blocks: _Blocks, raggeds: list[Ragged | None], counts: list[int], tokens: int,
                    name: str) -> tuple[np.ndarray, np.ndarray, int]:
    """The token lengths of each choice's rows of ``name`` (an empty row where None):
    ``(first, lengths (B, tokens), longest)``, the lengths a private array (they bound the
    copies' reads); ValueError naming the choice and token where the rows do not fit their values."""
    empty = np.zeros(1, dtype=np.int64)
    offsets, sizes, owned = [], [], []
    for b, (r, n) in enumerate(zip(raggeds, counts)):
        if r is None:
            offsets.append(empty)
            sizes.append(0)
            owned.append(0)
            continue
        offs = np.ascontiguousarray(r.offsets, dtype=np.int64)
        if offs.ndim != 1 or len(offs) != n + 1:
            raise ValueError(f"choice {b}'s {name} has {len(offs) - 1} rows for {n} tokens")
        offsets.append(offs)
        sizes.append(len(r.values))
        owned.append(n)
    lengths = np.empty((len(raggeds), tokens), dtype=np.int64)
    done = blocks.each(len(raggeds), lengths.nbytes, lambda a, b: blocks.kernels.ragged_lengths(
        offsets[a:b], owned[a:b], sizes[a:b], lengths[a:b]))
    for a, (_, _, bad) in done:
        if bad is not None:
            raise ValueError(f"choice {a + bad[1]}'s {name} offsets do not fit its values (offset {bad[2]})")
    first = np.concatenate([part[0] for _, part in done])
    return first, lengths, max(part[1] for _, part in done)


def _heads(blocks: _Blocks, rows: list[_Row], counts: list[int], tokens: int, top_k: int | None,
           head_width: Any, pad_id: int) -> dict[str, Any]:
    ids = [row.choice.completion_top_ids for row in rows]
    lps = [row.choice.completion_top_logprobs for row in rows]
    if all(r is None for r in ids) and all(r is None for r in lps):
        return {}
    for b, (i, lp) in enumerate(zip(ids, lps)):
        if (i is None) != (lp is None):
            raise ValueError(f"choice {b} has {'head ids' if lp is None else 'head logprobs'} only")
    first_ids, lengths, longest = _ragged_lengths(blocks, ids, counts, tokens, "completion_top_ids")
    first_lps, lengths_lps, _ = _ragged_lengths(blocks, lps, counts, tokens, "completion_top_logprobs")
    if not np.array_equal(lengths, lengths_lps):
        b, t = (int(x[0]) for x in np.nonzero(lengths != lengths_lps))
        raise ValueError(f"choice {b}'s completion_top_ids and completion_top_logprobs differ in length at token {t}")

    if head_width is not None:
        width = int_arg(head_width, "head_width", 0)
    else:
        width = longest if top_k is None else top_k
    truncated = lengths > width
    present = _flags(ids)
    id_rows = [_vector(r.values, np.int64, "iu", "completion_top_ids", b) if r is not None else _NO_INT
               for b, r in enumerate(ids)]
    lp_rows = [_vector(r.values, np.float32, "f", "completion_top_logprobs", b) if r is not None else _NO_FLOAT
               for b, r in enumerate(lps)]
    if truncated.any():  # the K best of each wider head (the first K: heads come ranked)
        for b in np.flatnonzero(truncated.any(axis=1)).tolist():
            keep = _first_entries(lengths[b], width)
            total = len(keep)
            id_rows[b] = id_rows[b][first_ids[b] : first_ids[b] + total][keep]
            lp_rows[b] = lp_rows[b][first_lps[b] : first_lps[b] + total][keep]
            first_ids[b] = first_lps[b] = 0
        np.minimum(lengths, width, out=lengths)
    top_ids = blocks.empty("completion_top_ids", (len(rows), tokens, width), np.int64)
    top_lps = blocks.empty("completion_top_logprobs", (len(rows), tokens, width), np.float32)
    for values, first, out, fill in ((id_rows, first_ids, top_ids, pad_id), (lp_rows, first_lps, top_lps, -np.inf)):
        done = blocks.each(len(rows), out.nbytes, lambda a, b, values=values, first=first, out=out, fill=fill:
                           blocks.kernels.pad_ragged(values[a:b], first[a:b], lengths[a:b], out[a:b], fill))
        if any(bad >= 0 for _, bad in done):
            raise ValueError("a head is wider than the head width")  # the width holds the longest
    return {"completion_top_ids": top_ids, "completion_top_logprobs": top_lps,
            "completion_top_lengths": blocks.copy("completion_top_lengths", lengths), "heads_present": present,
            "completion_top_truncated": blocks.copy("completion_top_truncated", truncated)}


def _first_entries(lengths: np.ndarray, width: int) -> np.ndarray:
    """Over rows of ``lengths`` entries back to back, whether each entry is among its row's
    first ``width``."""
    starts = np.cumsum(lengths) - lengths
    return np.arange(int(lengths.sum())) - np.repeat(starts, lengths) < width


_NO_INT = np.zeros(0, dtype=np.int64)
_NO_FLOAT = np.zeros(0, dtype=np.float32)


def _sampling_mask(blocks: _Blocks, rows: list[_Row], counts: list[int], tokens: int) -> dict[str, Any]:
    masks = [row.choice.sampling_mask for row in rows]
    if all(m is None for m in masks):
        return {}
    first, lengths, _ = _ragged_lengths(blocks, masks, counts, tokens, "sampling_mask")
    totals = lengths.sum(axis=1)
    parts = []
    for b, m in enumerate(masks):
        if m is not None:
            values = _vector(m.values, np.int32, "iu", "sampling_mask", b)
            parts.append(values[first[b] : first[b] + totals[b]])
    offsets = np.empty(len(rows) * tokens + 1, dtype=np.int64)
    offsets[0] = 0
    np.cumsum(lengths.reshape(-1), out=offsets[1:])
    values = blocks.empty("sampling_mask.values", (int(offsets[-1]),), np.int32)
    if parts:
        np.concatenate(parts, out=values)
    present_rows = []
    for b, (row, m) in enumerate(zip(rows, masks)):
        flags = row.choice.sampling_mask_present
        if m is None:
            present_rows.append(np.zeros(0, dtype=np.bool_))
        elif flags is None:  # a choice built by hand: a token has a kept set where its row has ids
            present_rows.append(lengths[b, : counts[b]] > 0)
        else:
            flags = np.ascontiguousarray(flags, dtype=np.bool_)
            if flags.shape != (counts[b],):
                raise ValueError(f"choice {b}'s sampling_mask_present has {len(flags)} entries for {counts[b]} tokens")
            present_rows.append(flags)
    return {"sampling_mask": Ragged(blocks.copy("sampling_mask.offsets", offsets), values),
            "sampling_mask_present": blocks.padded("sampling_mask_present", present_rows, tokens, np.bool_, False)}


# collate's layouts of the routing: as sent, aligned to the completion tokens, or both.
_ROUTING_LAYOUTS = ("rows", "tokens", "both")
# The routing fill: no expert id is negative (the rules refuse one), so -1 names none.
ROUTING_FILL = -1


def _routing(blocks: _Blocks, rows: list[_Row], routing_width: Any, layout: str = "rows",
             counts: list[int] | None = None, tokens: int = 0, fill: int = ROUTING_FILL) -> dict[str, Any]:
    routed = [row.choice.routed_experts for row in rows]
    arrays = [None if r is None else np.asarray(r.array) for r in routed]
    present = [a for a in arrays if a is not None]
    if not present:
        return {}
    for b, a in enumerate(arrays):
        if a is not None and (a.ndim != 3 or a.dtype.kind not in "iu"):
            raise ValueError(f"choice {b}'s routed_experts must be (rows, layers, topk) integers, not {a.shape} {a.dtype}")
    shapes = {a.shape[1:] for a in present}
    if len(shapes) > 1:
        raise ValueError(f"routed_experts of different (layers, topk) in one batch: {sorted(shapes)}")
    layers, topk = shapes.pop()
    # A dtype that holds every id and the fill: with -1, uint8 routing widens to int16, uint16 to int32.
    dtype = np.result_type(*{a.dtype for a in present}, np.min_scalar_type(fill))
    row_counts = [0 if a is None else a.shape[0] for a in arrays]
    starts = [-1 if r is None or r.start is None else int(r.start) for r in routed]
    fields: dict[str, Any] = {"routed_experts_lengths": np.array(row_counts, dtype=np.int64),
                              "routed_experts_start": np.array(starts, dtype=np.int64),
                              "routed_experts_present": _flags(arrays)}
    if layout != "tokens":
        longest = max(row_counts)
        width = _width("routing_width", routing_width, longest, "routing rows",
                       lambda: f"choice {row_counts.index(longest)}'s routing")
        out = blocks.empty("routed_experts", (len(rows), width, layers, topk), dtype)
        if all(a is None or a.dtype == dtype for a in arrays):
            flat = [_NO_ROUTING.astype(dtype) if a is None else np.ascontiguousarray(a).reshape(-1) for a in arrays]
            blocks.fill(flat, out.reshape(len(rows), width * layers * topk), fill)
        else:  # widened for the fill: numpy casts each choice's rows into the block, no copy between
            for b, a in enumerate(arrays):
                count = 0 if a is None else a.shape[0]
                if count:
                    out[b, :count] = a
                out[b, count:] = fill
        fields["routed_experts"] = out
    if layout != "rows":
        fields.update(_token_routing(blocks, rows, arrays, counts or [], tokens, (layers, topk), dtype, fill))
    return fields


def _prompt_of(row: _Row) -> np.ndarray | None:
    """A row's prompt ids: its response's, else its choice's own (``validate``'s, a
    trajectory's), else None."""
    if row.response is not None and row.response.prompt_token_ids is not None:
        return row.response.prompt_token_ids
    return row.choice.prompt_token_ids


def _routing_offset(row: _Row) -> int | None:
    """The routing row of a choice's first completion token (token ``t``'s is this plus
    ``t``), or None when it is not known. Rows cover sequence positions from the routing's
    ``start`` (0 when not sent); the completion starts after the prompt, and where the
    response sends the prompt's rows apart (vLLM 0.21's ``prompt_routed_experts``) the
    choice's rows are its completion's."""
    choice, response = row.choice, row.response
    if response is not None and response.prompt_routed_experts is not None:
        return 0
    prompt = _prompt_of(row)
    if prompt is None:
        return None
    start = choice.routed_experts.start if choice.routed_experts is not None else None
    return len(prompt) - (start or 0)


def _token_routing(blocks: _Blocks, rows: list[_Row], arrays: list[np.ndarray | None], counts: list[int],
                   tokens: int, entry: tuple[int, int], dtype: Any, fill: int) -> dict[str, Any]:
    """The routing of each completion token: ``(B, T, layers, topk)``, token ``t`` of choice
    ``b`` at its row ``offset + t``; -1 where there is none (the last token, which is never
    forwarded, tokens before ``start``, choices whose prompt length is unknown)."""
    out = blocks.empty("completion_routed_experts", (len(rows), tokens, *entry), dtype)
    out.fill(fill)
    present = blocks.empty("completion_routed_present", (len(rows), tokens), np.bool_)
    present.fill(False)
    for b, (row, array) in enumerate(zip(rows, arrays)):
        offset = None if array is None else _routing_offset(row)
        if offset is None:
            continue
        first = max(0, -offset)  # tokens before the routing's start have no row
        last = min(counts[b], array.shape[0] - offset)
        if last > first:
            out[b, first:last] = array[offset + first : offset + last]
            present[b, first:last] = True
    return {"completion_routed_experts": out, "completion_routed_present": present}


_NO_ROUTING = np.zeros(0, dtype=np.uint8)


def _prompts(blocks: _Blocks, rows: list[_Row], prompt_width: Any, pad_id: int) -> dict[str, Any]:
    prompts = [_prompt_of(row) for row in rows]
    if all(p is None for p in prompts):
        return {}
    owned: dict[int, np.ndarray] = {}  # one array per response, not per choice
    vectors = []
    for b, p in enumerate(prompts):
        if p is None:
            vectors.append(_NO_INT)
            continue
        if id(p) not in owned:
            owned[id(p)] = _vector(p, np.int64, "iu", "prompt_token_ids", b)
        vectors.append(owned[id(p)])
    lengths = np.array([len(v) for v in vectors], dtype=np.int64)
    longest = int(lengths.max())
    width = _width("prompt_width", prompt_width, longest, "prompt ids",
                   lambda: f"choice {int(np.argmax(lengths))}'s prompt")
    return {"prompt_token_ids": blocks.padded("prompt_token_ids", vectors, width, np.int64, pad_id),
            "prompt_lengths": lengths, "prompt_present": _flags(prompts)}


def collate(items: Sequence[Any] | Iterable[Any], *, width: int | None = None, pad_id: int = 0,
            head_width: int | None = None, prompt_width: int | None = None,
            routing_width: int | None = None, routing: str = "rows", routing_fill: int = ROUTING_FILL,
            out: Batch | None = None,
            threads: int | None = None) -> Batch:
    """Every choice of ``items`` (parsed responses, their choices in order, or choices) as one
    row of padded arrays: a :class:`Batch`.

    Args:
        items: ``GenerateResponse`` and ``GenerateChoice`` objects, as ``parse_*`` and
            :func:`parse_many` return them; the errors ``parse_many(errors="collect")``
            leaves in their slots are skipped (``Batch.skipped`` lists their positions, and
            each row's ``response`` is its item's position in ``items``, errors counted).
        width: the completion width ``T`` (default: the longest completion). A completion
            longer than ``width`` raises ``ValueError``: nothing is cut.
        pad_id: the id past each row of ``completion_ids``, ``completion_top_ids`` and
            ``prompt_token_ids``.
        head_width: the heads' width ``K`` (default: the ``top_k`` the responses were parsed
            with; without one, the widest head). A head wider than ``K`` (the head of a
            recorded support is the whole support, which can be wider than ``top_k``) keeps
            its first ``K`` entries, its ``K`` best (the parsers rank heads best first), and
            is flagged in ``completion_top_truncated``: ``K`` never depends on the data.
        prompt_width, routing_width: the widths of the prompt ids and the routing rows
            (default: the longest); a longer one raises ``ValueError``.
        routing: ``"rows"`` (the routing rows as sent: ``routed_experts``), ``"tokens"``
            (aligned to the completion tokens: ``completion_routed_experts``, row ``t`` the
            routing of completion token ``t``, with ``completion_routed_present``) or
            ``"both"``.
        routing_fill: the routing past each choice's rows (and on tokens without one): -1 by
            default, never an expert id, in a signed dtype (uint8 routing becomes int16,
            uint16 int32). A value the routing's dtype holds keeps it (``routing_fill=255``
            keeps uint8 routing at one byte an entry); it must then be no expert id of the
            model (at least its ``num_experts``).
        out: a Batch an earlier call returned, whose arrays are written again where one has
            the shape and dtype wanted (fixed widths give every step the same shapes): no new
            memory to fault in. Those arrays, and the tensors ``to_torch`` made of them, then
            hold the new batch; the others are new. ``out`` is written, never read: arrays of it
            that share memory raise ``ValueError`` before anything is written.
        threads: how many threads fill each large array (default: the cores this process may
            use), each a contiguous range of the rows; the kernels run without the GIL.

    Returns:
        Batch: ``B`` rows, one per choice (see :class:`Batch` for each array, its fill and
        its ``*_present`` flags).

    Raises:
        ValueError: responses of different formats, or parsed with different ``top_k``; an
            unknown ``routing`` layout;
            routing of different ``(layers, topk)``; a width shorter than what it must hold;
            a choice whose arrays do not fit together (a choice built by hand); arrays of
            ``out`` that share memory.
        TypeError: an item that is neither a response nor a choice.

    Example:
        >>> body = b'{"choices":[{"token_ids":[5,6],"logprobs":{"sampled":[-0.5,-1.0]}}]}'
        >>> batch = tokenwire.collate(tokenwire.parse_many([body, body]), width=3)
        >>> batch.completion_ids.tolist(), batch.lengths.tolist()
        ([[5, 6, 0], [5, 6, 0]], [2, 2])
    """
    if isinstance(items, (GenerateResponse, GenerateChoice)):
        items = [items]
    items = list(items)
    pad_id = int_arg(pad_id, "pad_id", -(2**63))
    if out is not None and not isinstance(out, Batch):
        raise TypeError(f"out must be a Batch, not {type(out).__name__}")
    blocks = _Blocks(_select.kernels, out, available_cores() if threads is None else int_arg(threads, "threads", 1))
    routing_fill = int_arg(routing_fill, "routing_fill", -(2**31), 2**31 - 1)
    if routing not in _ROUTING_LAYOUTS:
        raise ValueError(f"routing must be one of {', '.join(map(repr, _ROUTING_LAYOUTS))}, not {routing!r}")
    rows, skipped = _rows(items)
    format, top_k = _one_setting(items)
    ids = [_vector(row.choice.completion_ids, np.int64, "iu", "completion_ids", b) for b, row in enumerate(rows)]
    counts = [len(a) for a in ids]
    longest = max(counts, default=0)
    tokens = _width("width", width, longest, "tokens", lambda: f"choice {counts.index(longest)}")
    lengths = np.array(counts, dtype=np.int64)
    fields: dict[str, Any] = {
        "completion_ids": blocks.padded("completion_ids", ids, tokens, np.int64, pad_id),
        "lengths": lengths,
        "mask": np.less(np.arange(tokens), lengths[:, None], out=blocks.empty("mask", (len(rows), tokens), np.bool_)),
    }
    logprobs = [row.choice.completion_logprobs for row in rows]
    if any(lp is not None for lp in logprobs):
        vectors = []
        for b, lp in enumerate(logprobs):
            vector = _NO_FLOAT if lp is None else _vector(lp, np.float32, "f", "completion_logprobs", b)
            if lp is not None and len(vector) != counts[b]:
                raise ValueError(f"choice {b} has {len(vector)} logprobs for {counts[b]} tokens")
            vectors.append(vector)
        fields["completion_logprobs"] = blocks.padded("completion_logprobs", vectors, tokens, np.float32, 0.0)
        fields["logprobs_present"] = _flags(logprobs)
    fields.update(_heads(blocks, rows, counts, tokens, top_k, head_width, pad_id))
    fields.update(_sampling_mask(blocks, rows, counts, tokens))
    fields.update(_routing(blocks, rows, routing_width, routing, counts, tokens, routing_fill))
    fields.update(_prompts(blocks, rows, prompt_width, pad_id))
    return Batch(
        **fields,
        skipped=np.array(skipped, dtype=np.int64),
        response=np.array([row.item for row in rows], dtype=np.int64),
        choice=np.array([row.choice.index for row in rows], dtype=np.int64),
        finish_reason=[row.choice.finish_reason for row in rows],
        format=format,
        top_k=top_k,
        pad_id=pad_id,
        errors=[items[i] for i in skipped],
    )


# --- parse_batch: bodies straight into a Batch -------------------------------------------------

# The generate parser's options and the values with which its plain path still takes a body
# (parse_generate_response: no head, no mask asked for, no prompt length of the caller's; the
# options checked by the parser itself left at their defaults). Any other value: the bodies are
# parsed and collated.
_DIRECT_OPTIONS = {"top_k": (None,), "require_logprobs": (True, False), "require_sampling_mask": (False,),
                   "prompt_logprob_start": (None,), "teacher_logits": (False,), "payload_root": (None,),
                   "num_experts": (None,), "prompt_tokens": (None,)}


def _direct_options(options: dict[str, Any]) -> bool:
    return all(any(value is allowed for allowed in _DIRECT_OPTIONS.get(name, ())) for name, value in options.items())


def parse_batch(raws: Iterable[Any], *, format: str = "generate", threads: int | None = None,
                errors: str = "raise", width: int | None = None, pad_id: int = 0, head_width: int | None = None,
                prompt_width: int | None = None, routing_width: int | None = None, routing: str = "rows",
                routing_fill: int = ROUTING_FILL, out: Batch | None = None, **parser_options: Any) -> Batch:
    """Many response bodies straight into one :class:`Batch`: what
    ``collate(parse_many(raws, ...), ...)`` returns (the same arrays, verdicts and messages),
    without a result object per response where none is needed.

    A generate body whose choices hold only token ids and packed logprobs or compact rows
    (with no ``top_k``, mask or caller's prompt length asked for: the parsers' plain path) is
    scanned once and its ids, logprobs and prompt ids are written from the scan into their rows
    of the batch's arrays, checked by the same rules and C kernels as
    ``parse_generate_response``; any other body (another format, heads, masks, routing, a body
    the plain path doubts, a malformed one) is parsed by its format's parser, and a batch
    holding such a response is collated from the parsed responses.

    Args:
        raws, format, threads, errors, parser_options: as :func:`parse_many` (``threads``
            split the bodies into as many ranges, each read without the GIL, and the rows
            are written on as many threads).
        width, pad_id, head_width, prompt_width, routing_width, routing, routing_fill, out:
            as :func:`collate`.

    Returns:
        Batch: as :func:`collate` of :func:`parse_many`'s list; with ``errors="collect"``,
        ``skipped`` holds the positions of the malformed bodies and ``errors`` their
        :class:`MalformedResponseError` (each with its ``body_index``).

    Raises:
        ValueError, TypeError: as :func:`parse_many` and :func:`collate`, before any body is
            parsed (a width too narrow: once the bodies are read).
        MalformedResponseError: with ``errors="raise"``, the first malformed body in input
            order (every body is read first).

    Example:
        >>> body = b'{"choices":[{"token_ids":[5,6],"completion_logprobs":{"data":"AAAAvwAAgL8=","dtype":"float32"}}]}'
        >>> batch = tokenwire.parse_batch([body, b'{}'], errors="collect", width=3)
        >>> batch.completion_ids.tolist(), batch.completion_logprobs.tolist(), batch.skipped.tolist()
        ([[5, 6, 0]], [[-0.5, -1.0, 0.0]], [1])
    """
    bodies, parse, count, collect = _prepared(raws, format, threads, errors, parser_options)
    settings = dict(width=width, pad_id=pad_id, head_width=head_width, prompt_width=prompt_width,
                    routing_width=routing_width, routing=routing, routing_fill=routing_fill, out=out, threads=threads)
    # collate's checks of its own arguments, before any body is read
    pad_id = int_arg(pad_id, "pad_id", -(2**63))
    if out is not None and not isinstance(out, Batch):
        raise TypeError(f"out must be a Batch, not {type(out).__name__}")
    int_arg(routing_fill, "routing_fill", -(2**31), 2**31 - 1)
    if routing not in _ROUTING_LAYOUTS:
        raise ValueError(f"routing must be one of {', '.join(map(repr, _ROUTING_LAYOUTS))}, not {routing!r}")
    if threads is not None:
        int_arg(threads, "threads", 1)
    for name, value in (("width", width), ("head_width", head_width), ("prompt_width", prompt_width),
                        ("routing_width", routing_width)):
        if value is not None:
            int_arg(value, name, 0)
    direct = getattr(_select.impl, "_direct_generate", None)
    if direct is None or format != "generate" or not _direct_options(parser_options):
        return collate(_run(bodies, parse, count, collect), **settings)

    return _direct_batch(_select.impl, bodies, parse, count, collect, settings, pad_id, out)


def _settled(i: int, body: Any, parse: Any) -> Any:
    """Body ``i`` parsed by the rules: its response, or its error (marked)."""
    try:
        return parse(body)
    except MalformedResponseError as exc:
        return _mark(exc, i)


def _collated(items: list[Any], collect: bool, settings: dict[str, Any]) -> Batch:
    """The batch of ``items`` made by collate, each body read by the plain path made a response."""
    items = [item if isinstance(item, (GenerateResponse, MalformedResponseError)) else item.response()
             for item in items]
    _raise_first(items, collect)
    return collate(items, **settings)


def _raise_first(items: list[Any], collect: bool) -> None:
    if not collect:
        for item in items:
            if isinstance(item, MalformedResponseError):
                raise item


def _direct_parts(impl: Any, bodies: list[Any], threads: int) -> list[Any]:
    """The bodies read by the core's loop without the GIL (``_DirectPart``), one contiguous
    range of them per thread, in order."""
    parts = [impl._DirectPart() for _ in range(max(1, min(threads, len(bodies))))]
    _ranges(len(bodies), len(parts), lambda i, a, b: parts[i].read(bodies, a, b), "tokenwire-parse")
    return parts


def _direct_batch(impl: Any, bodies: list[Any], parse: Any, threads: int, collect: bool,
                  settings: dict[str, Any], pad_id: int, out: Batch | None) -> Batch:
    """The batch of ``bodies``: the plain ones written from the core's arenas into the padded
    blocks; the others (doubted by the loop) read one by one, by the plain path (a _Direct) or
    the rules (a response, or the error, left in place); collated when a body needed the
    rules' response."""
    parts = _direct_parts(impl, bodies, threads)
    doubted = [i for part in parts for i in part.doubted]

    def settle(i: int) -> Any:
        return impl._direct_generate(bodies[i]) or _settled(i, bodies[i], parse)

    settled = (_run(doubted, settle, threads, True) if threads > 1 and len(doubted) > 1
               else [settle(i) for i in doubted])
    late = dict(zip(doubted, settled))
    if any(isinstance(item, GenerateResponse) for item in settled):
        items = [None] * len(bodies)
        for part in parts:
            for i, d in part.directs().items():
                items[i] = d
        for i, item in late.items():
            items[i] = item
        return _collated(items, collect, settings)
    skipped = [i for i, item in late.items() if isinstance(item, MalformedResponseError)]
    errors = [late[i] for i in skipped]
    _raise_first(errors, collect)
    rows = impl._DirectRows(parts, {i: item for i, item in late.items() if not isinstance(item, MalformedResponseError)})
    if not rows.count:  # no body, or every body malformed
        return collate(errors, **settings)
    blocks = _Blocks(_select.kernels, out, threads)
    counts = rows.lengths
    longest = int(counts.max())
    tokens = _width("width", settings["width"], longest, "tokens", lambda: f"choice {int(np.argmax(counts))}")
    shape = (rows.count, tokens)
    fields: dict[str, Any] = {
        "completion_ids": blocks.empty("completion_ids", shape, np.int64),
        "lengths": counts,
        "mask": blocks.empty("mask", shape, np.bool_),
        "completion_logprobs": blocks.empty("completion_logprobs", shape, np.float32),
        "logprobs_present": np.ones(rows.count, dtype=np.bool_),
    }
    prompts = None
    if rows.any_prompt:
        plengths = rows.prompt_lengths
        pwidth = _width("prompt_width", settings["prompt_width"], int(plengths.max()), "prompt ids",
                        lambda: f"choice {int(np.argmax(plengths))}'s prompt")
        prompts = blocks.empty("prompt_token_ids", (rows.count, pwidth), np.int64)
        fields.update(prompt_token_ids=prompts, prompt_lengths=plengths, prompt_present=rows.prompt_present)
    nbytes = sum(fields[name].nbytes for name in ("completion_ids", "mask", "completion_logprobs"))
    done = blocks.each(rows.count, nbytes, lambda a, b: rows.fill(a, b, fields["completion_ids"],
                                                                   fields["completion_logprobs"], fields["mask"],
                                                                   prompts, pad_id))
    if not all(fits for _, fits in done):
        raise ValueError("a row does not fit its padded block")  # the widths are checked first
    return Batch(
        **fields,
        skipped=np.array(skipped, dtype=np.int64),
        response=rows.response,
        choice=rows.choice,
        finish_reason=rows.finish_reasons,
        format="generate",
        top_k=None,
        pad_id=pad_id,
        errors=errors,
    )
