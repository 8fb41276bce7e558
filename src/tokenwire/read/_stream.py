"""Streamed responses: Server-Sent Events bodies read back into the response they stand for.

A producer that streams sends the evidence of one response in pieces: ``data:`` events, each a
JSON chunk, ended by ``data: [DONE]``. This module has no rules of its own. It reassembles the
chunks into the non-streamed form of the same endpoint (the deltas of each choice concatenated
by its ``index``, the fields a producer sends once taken from the chunk it puts them on) and
hands that document to the parser of the implementation in use, so a stream meets the same
rules, and gives the same result types, as a whole body. What it checks is only what the
reassembly itself needs, each chunk against its own delta:

- the framing: events separated by a blank line, comments (``:``) and keep-alives skipped,
  every ``data:`` payload a JSON object, and ``data: [DONE]`` last (a stream that stops
  before it is truncated);
- the choices: a new ``index`` is the next one (no index jumps), and a chunk's per-token
  records (``logprobs.content``, the completions ``logprobs`` lists) are as many as the
  token ids it adds;
- the once-sent fields: ``prompt_token_ids`` only on a first chunk, the routing, the sampling
  mask and the weight versions only on the choice's last chunk, any other field the same on
  every chunk that repeats it.
- NVIDIA Dynamo's ``nvext`` (chat and completions): ``completion_token_ids`` deltas
  concatenated in event order, ``engine_data`` and the frontend's ``routed_experts`` copy once,
  on the choice's last chunk, any other member the last chunk's (Dynamo's own aggregator,
  ``merge_response_nvext``); a choice that sends no ``token_ids`` (Dynamo's) has its records
  concatenated as sent, for the whole-body rules to count against the engine's ids.
- SGLang ``/generate``: cumulative chunks (the default) each extending the previous one, or
  incremental ones (``--incremental-streaming-output``) whose ids and three logprob lists are
  the chunk's own, as the running ``meta_info.completion_tokens`` says.

Every refusal is a :class:`MalformedResponseError` whose message names the event (its
position among the stream's events, from 0), and whose ``choice`` and ``field`` say where;
an error the parser raises for a token is given the event that token came in.

:class:`StreamReader` reads incrementally: ``feed`` takes bytes as they arrive, split
anywhere; it keeps only the unfinished event and the evidence gathered so far (per choice,
the concatenated lists and where each event's tokens begin), so its memory grows with the
evidence, not with the number of chunks. ``parse_*_stream`` read a whole body the same way.

With the compiled core, the vLLM forms (generate, completions, chat) are read by its
``StreamScan`` (``csrc/wire/tw_sse.c``): the events are split and walked in C, the GIL
released, each choice's ids and records concatenated as JSON text into growing buffers, and
the document written out for the parser without a Python object per event. It follows this
module's account and never refuses: at the first event it is not sure of (anything this module
would refuse, and the valid forms it leaves to it: CR line ends, several data lines, escaped
keys, deep nesting, a once-sent field written otherwise than before) it stops, and this module
takes over from what it read (``_adopt``) and reads the rest. A parser's error on its
document is said again by this module's path, so every refusal, and its message, is this
module's.
"""

from __future__ import annotations

import functools
from bisect import bisect_right
from typing import Any

from ..base import _json
from ..base._errors import MalformedResponseError
from ..base._table import KEY
from . import _select
from ._registry import FORMATS

__all__ = ["StreamReader", "STREAM_FORMATS", "parser_of", "parse_chat_completions_stream", "parse_completions_stream", "parse_stream",
           "parse_generate_stream", "parse_sglang_generate_stream"]


class _Form:
    """How one endpoint streams: which choice fields are deltas, which come once and where."""

    def __init__(self, name: str, parser: str, *, texts: tuple[tuple[str, ...], ...],
                 records: tuple[tuple[str, ...], ...], last: tuple[str, ...], prompt: str, whole: dict[str, Any]):
        self.name = name
        self.parser = parser
        self.texts = texts  # paths of strings concatenated (chat's delta.content, completions' text)
        self.records = records  # paths (under the choice) of per-token lists: as many as the chunk's ids
        self.content = records == (("logprobs", "content"),)
        self.last = last  # fields only the choice's last chunk may carry
        self.prompt = prompt  # "root" or "choice": where prompt_token_ids comes, on the first chunk
        self.whole = whole  # root fields of the non-streamed form


# The choice fields every form reads as deltas or as once-sent values; anything else must repeat unchanged.
_LAST = (KEY.routed_experts, KEY.sampling_mask, KEY.kept_tokens, KEY.weight_versions, KEY.sampling_mask_logprobs)

FORMS: dict[str, _Form] = {
    "generate": _Form("generate", "parse_generate_response", texts=(),
                      records=(("logprobs", "content"),), last=_LAST, prompt="root", whole={}),
    "completions": _Form("completions", "parse_completions_response", texts=(("text",),),
                         records=(("logprobs", "tokens"), ("logprobs", KEY.token_logprobs),
                                  ("logprobs", KEY.top_logprobs), ("logprobs", KEY.text_offset)),
                         last=_LAST, prompt="choice", whole={"object": "text_completion"}),
    "chat": _Form("chat", "parse_chat_completions_response", texts=(("delta", "content"),),
                  records=(("logprobs", "content"),), last=_LAST, prompt="root", whole={"object": "chat.completion"}),
    "sglang": _Form("sglang", "parse_sglang_generate_response", texts=(), records=(), last=(), prompt="root",
                    whole={}),
}

# The forms the compiled core's StreamScan reads (SGLang's chunks are left to this module).
_SCANNED = ("generate", "completions", "chat")

# parse_many's format names for streams, and the whole-body format each reassembles into.
STREAM_FORMATS = {name: entry.reads for name, entry in FORMATS.items() if entry.reads is not None}
"""The stream formats of the registry: their name and the whole-body format they reassemble into."""

_REPEATABLE = frozenset(("index", "finish_reason", "stop_reason", "delta", "logprobs", "text", KEY.token_ids,
                         KEY.prompt_token_ids))
_ROOT_OWN = frozenset(("choices", "usage", KEY.prompt_token_ids, KEY.nvext))
# Dynamo's nvext members sent once, on the choice's last chunk (the engine data, and the frontend's
# copy of its routing, built from the same chunk's engine output).
_NVEXT_ONCE = (KEY.engine_data, KEY.routed_experts)
_DONE = b"[DONE]"
# SGLang's incremental streaming slices these meta_info lists only (INCREMENTAL_STREAMING_META_INFO_KEYS).
_SLICED = (KEY.output_token_logprobs, KEY.output_top_logprobs, "output_token_ids_logprobs")


def _refuse(event: int, reason: str, choice: int | None = None, field: str | None = None) -> MalformedResponseError:
    return MalformedResponseError(f"event {event}: {reason}", choice=choice, field=field)


class _Choice:
    __slots__ = ("index", "ids", "starts", "events", "texts", "records", "has_records", "once", "first_event",
                 "last_event", "finish_reason", "stop_reason", "role", "prompt", "mode", "lists", "meta", "sends_ids",
                 "sent_ids", "packed")

    def __init__(self, index: int, form: _Form, event: int):
        self.index = index
        self.ids: list[Any] = []
        self.starts: list[int] = []  # where each event's tokens begin in ids ...
        self.events: list[int] = []  # ... and which event it was (only events that added tokens)
        self.texts = ["" for _ in form.texts]
        self.records: list[list[Any]] = [[] for _ in form.records]
        self.has_records: bool | None = None  # None: no chunk with tokens yet
        self.sends_ids: bool | None = None  # None: no chunk with ids or records yet; False: records without ids
        self.sent_ids = False  # a chunk carried token_ids (an array, maybe empty)
        self.packed: _Packed | None = None  # completions: the per-chunk packed top-k blocks so far
        self.once: dict[str, tuple[int, Any]] = {}  # field -> (event, value)
        self.first_event = event
        self.last_event = event
        self.finish_reason = None
        self.stop_reason = None
        self.role = None
        self.prompt = None
        self.mode: str | None = None  # SGLang: "cumulative" or "incremental", once a chunk tells
        self.lists: dict[str, list[Any]] = {}  # SGLang: the sliced meta_info lists so far
        self.meta: dict[str, Any] = {}  # SGLang: the last chunk's meta_info


class _Packed:
    """A completions choice's packed top-k blocks (``logprobs.top_k``), one per chunk with
    tokens, concatenated: their positions, ``k``, and the decoded int32 ids and float32 values."""

    __slots__ = ("k", "event", "positions", "ids", "values")

    def __init__(self, k: int, event: int):
        self.k = k
        self.event = event  # the first event that carried a block
        self.positions = 0
        self.ids = bytearray()
        self.values = bytearray()

    def block(self) -> dict[str, Any]:
        encode = _select.kernels.b64encode
        return {"num_positions": self.positions, "k": self.k, KEY.token_ids: encode(bytes(self.ids)).decode(),
                "logprobs": encode(bytes(self.values)).decode()}


_TOP_K = "logprobs.top_k"



def _chunk_block(event: int, index: int, block: Any, count: int, state: Any) -> None:
    """A chunk's packed top-k block, required once an earlier chunk of the choice had one."""
    if block is None:
        raise _refuse(event, f"missing, where event {state.packed.event}'s chunk had one", choice=index, field=_TOP_K)
    _packed_block(event, index, block, count, state)


def _record_lists(event: int, index: int, form: Any, records: Any, block: Any, count: int,
                  mismatch: Any) -> None:
    """Each of a chunk's record lists an array of ``count`` records (``mismatch(len)`` says
    otherwise); beside a packed block, ``top_logprobs`` may be the packed form's ``[]``."""
    for path, value in zip(form.records, records):
        if type(value) is not list:
            raise _refuse(event, f"must be an array, not {type(value).__name__}", choice=index, field=".".join(path))
        if block is not None and path[-1] == KEY.top_logprobs and not value:
            continue  # the packed form's: top_logprobs [] beside the block
        if len(value) != count:
            raise _refuse(event, mismatch(len(value)), choice=index, field=".".join(path))

def _packed_block(event: int, index: int, block: Any, n: int, state: Any) -> None:
    """One chunk's packed top-k block (vLLM's ``return_top_k_logprobs`` on ``/v1/completions``:
    ``{num_positions, k, token_ids, logprobs}``, ``n x k`` int32 ids and float32 values in
    base64) for the chunk's ``n`` tokens, appended to the choice's; its values are the
    whole-body rules' to judge."""
    if not isinstance(block, dict):
        raise _refuse(event, f"must be an object, not {type(block).__name__}", choice=index, field=_TOP_K)
    positions, k = block.get("num_positions"), block.get("k")
    if type(positions) is not int or positions != n:
        raise _refuse(event, f"{positions!r} positions for the chunk's {n} token id{'s' * (n != 1)}", choice=index,
                      field=f"{_TOP_K}.num_positions")
    if type(k) is not int or k < 0:
        raise _refuse(event, f"must be a non-negative int, not {k!r}", choice=index, field=f"{_TOP_K}.k")
    packed = state.packed
    if packed is None:
        packed = state.packed = _Packed(k, event)
    elif packed.k != k:
        raise _refuse(event, f"k is {k}, event {packed.event}'s {packed.k}: the choice's blocks must agree",
                      choice=index, field=f"{_TOP_K}.k")
    decoded = []
    for key, itemsize in ((KEY.token_ids, 4), ("logprobs", 4)):
        value = block.get(key)
        try:
            raw = _select.kernels.b64decode(value) if isinstance(value, str) else None
        except MalformedResponseError:
            raw = None
        if raw is None:
            raise _refuse(event, f"must be base64 of {n * k} {'int32' if key == KEY.token_ids else 'float32'} values",
                          choice=index, field=f"{_TOP_K}.{key}")
        if len(raw) != n * k * itemsize:
            raise _refuse(event, f"holds {len(raw)} bytes, not the {n * k * itemsize} of {n} x {k} values",
                          choice=index, field=f"{_TOP_K}.{key}")
        decoded.append(raw)
    packed.positions += n
    packed.ids += decoded[0].tobytes()
    packed.values += decoded[1].tobytes()


def _at(value: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        if not isinstance(value, dict):
            return None
        value = value.get(key)
    return value


class StreamReader:
    """Reads one streamed response as its bytes arrive.

    ``StreamReader("generate", top_k=5)``: ``feed(chunk)`` with each piece of the body (bytes,
    split anywhere), then ``result()`` for the response (a :class:`GenerateResponse`, as the
    format's parser returns it). ``format`` is ``"generate"`` (vLLM ``/inference/v1/generate``
    with ``stream=true``), ``"completions"`` or ``"chat"`` (vLLM's ``/v1/completions`` and
    ``/v1/chat/completions`` with ``return_token_ids``) or ``"sglang"`` (SGLang ``/generate``);
    the options are the format's parser's.
    """

    def __init__(self, format: str = "generate", **options: Any):
        if not isinstance(format, str) or format not in FORMS:
            raise ValueError(f"format must be one of {', '.join(map(repr, FORMS))}, not {format!r}")
        unknown = sorted(set(options) - set(FORMATS[format].options))
        if unknown:
            raise TypeError(f"unknown option{'s' * (len(unknown) > 1)} for the {format} parser: {', '.join(unknown)}")
        self._form = FORMS[format]
        self._options = options
        self._pending = bytearray()
        self._cr = False  # the last piece ended with a CR
        self._scanned = 0  # how far _pending was searched for an event's end
        self._event = 0  # the next event's position
        self._choices: list[_Choice] = []
        self._root: dict[str, Any] = {}
        self._prompt: tuple[int, Any] | None = None
        self._usage: Any = None
        self._nvext: dict[str, Any] | None = None  # Dynamo's nvext, merged as its aggregator does
        self._nvext_once: dict[str, int] = {}  # its once-sent members -> the event that carried them
        self._done = False
        self._failed: MalformedResponseError | None = None
        scan = getattr(_select.impl, "StreamScan", None)
        self._scan = scan(format) if scan is not None and format in _SCANNED else None

    # --- framing -------------------------------------------------------------------------------

    def feed(self, data: Any) -> None:
        """Take the next piece of the body (bytes-like or str), split anywhere."""
        if self._failed is not None:
            raise self._failed
        if isinstance(data, str):
            data = data.encode()
        elif type(data) is not bytes:
            try:
                data = bytes(memoryview(data))  # a private copy: no other thread rewrites it
            except TypeError:
                raise TypeError(f"feed takes bytes or str, not {type(data).__name__}") from None
        if self._scan is not None:
            if self._scan.feed(data):
                return
            # declined: a piece with a CR was not taken at all; otherwise what is left of it is pending
            taken = b"\r" not in data
            self._adopt()
            if taken:
                data = b""
        if self._cr and data.startswith(b"\n"):  # the LF of a CRLF split between two pieces
            data = data[1:]
        if b"\r" in data:  # CRLF or CR line ends: the event boundary is still a blank line
            self._cr = data.endswith(b"\r")
            data = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        elif data:
            self._cr = False
        self._pending += data
        try:
            self._split()
        except MalformedResponseError as exc:
            self._failed = exc
            raise

    def _split(self) -> None:
        pending = self._pending
        if b"\n\n" not in pending[max(self._scanned - 1, 0):]:
            self._scanned = len(pending)
            return
        *events, rest = pending.split(b"\n\n")
        for block in events:
            self._event_bytes(block)
        pending[:] = rest
        self._scanned = len(pending)

    def _event_bytes(self, block: bytes | bytearray) -> None:
        if block.startswith(b"data: ") and b"\n" not in block:  # the common case: one data line
            data = block[6:]
        else:
            datas = []
            for line in bytes(block).split(b"\n"):
                if not line or line.startswith(b":"):
                    continue  # a comment or keep-alive
                name, _, value = line.partition(b":")
                if value.startswith(b" "):
                    value = value[1:]
                if name == b"data":
                    datas.append(value)
                # event:, id:, retry: carry nothing of the response
            if not datas:
                return
            data = b"\n".join(datas)
        event = self._event
        self._event += 1
        if self._done:
            raise _refuse(event, "an event after data: [DONE]")
        if data.strip() == _DONE:
            self._done = True
            return
        try:
            chunk = _json.loads(data)
        except _json.JSONDecodeError as exc:
            raise _refuse(event, f"the data is not JSON ({exc})") from None
        if not isinstance(chunk, dict):
            raise _refuse(event, f"the data must be a JSON object, not {type(chunk).__name__}")
        self._chunk(event, chunk)

    # --- reassembly ------------------------------------------------------------------------------

    def _chunk(self, event: int, chunk: dict[str, Any]) -> None:
        if "choices" not in chunk and ("error" in chunk or chunk.get("object") == "error"):
            # vLLM's streamed error ({"error": {...}}, or {"object": "error", "message": ...} before), SGLang's
            sent = chunk.get("error", chunk.get("message"))
            raise _refuse(event, f"the server sent an error: {repr(sent)[:300]}", field="error")
        form = self._form
        if form.name == "sglang":
            self._sglang_chunk(event, chunk)
            return
        usage = chunk.get("usage")
        if usage is not None:
            self._usage = usage
        prompt = chunk.get(KEY.prompt_token_ids)
        if prompt is not None:
            if form.prompt != "root":
                self._root.setdefault(KEY.prompt_token_ids, prompt)  # not this form's place: the rules judge it
            elif self._prompt is not None or self._choices:
                raise _refuse(event, "prompt_token_ids comes on the first chunk only", field=KEY.prompt_token_ids)
            else:
                self._prompt = (event, prompt)
        for key in chunk.keys() - self._root.keys() - _ROOT_OWN:  # other root fields: the first value
            self._root[key] = chunk[key]
        nvext = chunk.get(KEY.nvext)
        if nvext is not None:
            self._nvext_chunk(event, nvext)
        choices = chunk.get("choices")
        if choices is None:
            return
        if not isinstance(choices, list):
            raise _refuse(event, f"must be an array, not {type(choices).__name__}", field="choices")
        for position, choice in enumerate(choices):
            self._choice(event, position, choice)

    def _nvext_chunk(self, event: int, nvext: Any) -> None:
        """NVIDIA Dynamo's ``nvext`` of one chunk, merged as Dynamo's non-streaming aggregator
        merges it (``merge_response_nvext``): the engine's ``completion_token_ids`` deltas
        concatenated, ``engine_data`` and ``routed_experts`` once (the frontend builds them from
        the engine's last output of the choice), any other member the last chunk's."""
        if not isinstance(nvext, dict):
            raise _refuse(event, f"must be an object, not {type(nvext).__name__}", field=KEY.nvext)
        merged = self._nvext
        if merged is None:
            merged = self._nvext = {}
        for key, value in nvext.items():
            if value is None:
                continue
            if key == KEY.completion_token_ids:
                if not isinstance(value, list):
                    raise _refuse(event, f"must be an array, not {type(value).__name__}",
                                  field=f"{KEY.nvext}.{KEY.completion_token_ids}")
                merged.setdefault(key, []).extend(value)
                continue
            if key in _NVEXT_ONCE:
                seen = self._nvext_once.get(key)
                if seen is not None:
                    raise _refuse(event, f"comes once, on the choice's last chunk (event {seen} had it)",
                                  field=f"{KEY.nvext}.{key}")
                self._nvext_once[key] = event
            merged[key] = value

    def _choice(self, event: int, position: int, choice: Any) -> None:
        form = self._form
        if not isinstance(choice, dict):
            raise _refuse(event, f"choices[{position}] must be an object", field="choices")
        index = choice.get("index")
        if type(index) is not int:
            raise _refuse(event, f"choices[{position}].index must be an integer, not {index!r}", field="index")
        known = self._choices
        if index == len(known):
            state = _Choice(index, form, event)
            known.append(state)
        elif 0 <= index < len(known):
            state = known[index]
        else:
            raise _refuse(event, f"choice index {index} jumps: the stream has had {len(known)} choice"
                          f"{'s' * (len(known) != 1)} so far", choice=index, field="index")
        state.last_event = event
        ids = choice.get(KEY.token_ids)
        if ids is None:
            ids = ()
        elif not isinstance(ids, list):
            raise _refuse(event, f"must be an array, not {type(ids).__name__}", choice=index, field=KEY.token_ids)
        else:
            state.sent_ids = True
        n = len(ids)
        if form.content:  # one list of records, logprobs.content
            logprobs = choice.get("logprobs")
            records = [logprobs.get("content") if type(logprobs) is dict else None]
        else:
            records = [_at(choice, path) for path in form.records]
        has = records[0] is not None or any(r is not None for r in records)
        block = _at(choice, ("logprobs", "top_k")) if form.name == "completions" else None
        has = has or block is not None
        idless = has and choice.get(KEY.token_ids) is None and type(records[0]) is list and len(records[0]) > 0
        if n or idless:  # the first chunk adding ids or records decides whether the choice sends ids
            if state.sends_ids is None:
                state.sends_ids = not idless
            elif state.sends_ids == idless:
                raise _refuse(event, f"this chunk's records come {'without' if idless else 'with'} token_ids, the "
                              f"choice's earlier ones {'with' if idless else 'without'}", choice=index,
                              field=KEY.token_ids)
        if idless:  # the ids are the engine's (Dynamo's nvext) or the tokens': the records as sent, counted whole
            if block is not None or state.packed is not None:
                _chunk_block(event, index, block, len(records[0]), state)
            _record_lists(event, index, form, records, block, len(records[0]),
                          lambda got: f"{got} records beside {len(records[0])} in {'.'.join(form.records[0])}")
            if records[0]:
                state.starts.append(len(state.records[0]))
                state.events.append(event)
            state.has_records = True
            for acc, value in zip(state.records, records):
                acc += value
            has = False  # nothing more of this chunk's records below
        elif has:
            if block is not None or (state.packed is not None and n):
                _chunk_block(event, index, block, n, state)
            _record_lists(event, index, form, records, block, n,
                          lambda got: f"{got} record{'s' * (got != 1)} for the chunk's {n} token id{'s' * (n != 1)}")
        if n:
            if state.has_records is None:
                state.has_records = has
            elif state.has_records != has:
                field = ".".join(form.records[0])
                raise _refuse(event, f"this chunk's {n} token ids come {'with' if has else 'without'} logprobs, "
                              f"the choice's earlier ones {'without' if has else 'with'}", choice=index, field=field)
            state.starts.append(len(state.ids))
            state.events.append(event)
            state.ids += ids
            if has:
                for acc, value in zip(state.records, records):
                    acc += value
        for i, path in enumerate(form.texts):  # none for generate
            text = _at(choice, path)
            if text is not None:
                if not isinstance(text, str):
                    raise _refuse(event, "must be a string", choice=index, field=".".join(path))
                state.texts[i] += text
        for key in choice.keys() - _REPEATABLE:
            value = choice[key]
            if value is None:
                continue
            seen = state.once.get(key)
            if seen is not None and seen[1] != value:
                raise _refuse(event, f"differs from event {seen[0]}'s: a field sent once cannot change",
                              choice=index, field=key)
            state.once[key] = (event, value)
        if form.prompt == "choice":
            prompt = choice.get(KEY.prompt_token_ids)
            if prompt is not None:
                if state.prompt is not None or state.first_event != event:
                    raise _refuse(event, "comes on the choice's first chunk only", choice=index,
                                  field=KEY.prompt_token_ids)
                state.prompt = prompt
        delta = choice.get("delta")
        if isinstance(delta, dict) and delta.get("role") is not None and state.role is None:
            state.role = delta["role"]
        if choice.get("finish_reason") is not None:
            state.finish_reason = choice["finish_reason"]
        if choice.get("stop_reason") is not None:
            state.stop_reason = choice["stop_reason"]


    def _sglang_chunk(self, event: int, chunk: dict[str, Any]) -> None:
        """One SGLang ``/generate`` chunk: cumulative (each carries everything so far, and must
        extend the previous one) or, with ``--incremental-streaming-output``, a delta whose
        ``output_ids``, text and three logprob lists are sliced (every other ``meta_info``
        value is the running one). The running ``meta_info.completion_tokens`` tells them apart."""
        index = chunk.get("index", 0)
        known = self._choices
        if type(index) is not int:
            raise _refuse(event, f"index must be an integer, not {index!r}", field="index")
        if index == len(known):
            known.append(_Choice(index, self._form, event))
        elif not 0 <= index < len(known):
            raise _refuse(event, f"item index {index} jumps: the stream has had {len(known)} item"
                          f"{'s' * (len(known) != 1)} so far", choice=index, field="index")
        state = known[index]
        state.last_event = event
        ids = chunk.get(KEY.output_ids)
        meta = chunk.get(KEY.meta_info)
        if not isinstance(ids, list):
            raise _refuse(event, f"must be an array, not {type(ids).__name__}", choice=index, field=KEY.output_ids)
        if not isinstance(meta, dict):
            raise _refuse(event, f"must be an object, not {type(meta).__name__}", choice=index, field=KEY.meta_info)
        total = meta.get("completion_tokens")
        if type(total) is not int:
            raise _refuse(event, f"must be an integer, not {total!r}", choice=index, field="meta_info.completion_tokens")
        n, held = len(ids), len(state.ids)
        mode = state.mode
        if mode is None and held:
            if n == total and ids[:held] == state.ids:
                mode = "cumulative"
            elif n == total - held:
                mode = "incremental"
            elif n == total:
                raise _refuse(event, f"the chunk's {n} ids do not extend the previous chunk's {held}",
                              choice=index, field=KEY.output_ids)
            else:
                raise _refuse(event, f"{n} ids agree with neither form: completion_tokens is {total} and "
                              f"{held} came before", choice=index, field="meta_info.completion_tokens")
            state.mode = mode
        if mode == "incremental":
            if n != total - held:
                raise _refuse(event, f"{n} new ids, but completion_tokens goes from {held} to {total}",
                              choice=index, field="meta_info.completion_tokens")
            for key in _SLICED:
                value = meta.get(key)
                if value is None:
                    continue
                if type(value) is not list or len(value) != n:
                    raise _refuse(event, f"{len(value) if type(value) is list else type(value).__name__} "
                                  f"entries for the chunk's {n} new ids", choice=index, field=f"meta_info.{key}")
                state.lists.setdefault(key, []).extend(value)
            if n:
                state.starts.append(held)
                state.events.append(event)
                state.ids += ids
            text = chunk.get("text")
            if isinstance(text, str):
                state.texts = [(state.texts[0] if state.texts else "") + text]
        else:  # cumulative, or the first chunk with ids (the two forms agree there)
            if n != total:
                raise _refuse(event, f"{n} ids, but completion_tokens is {total}", choice=index,
                              field="meta_info.completion_tokens")
            if n < held or ids[:held] != state.ids:
                raise _refuse(event, f"the chunk's {n} ids do not extend the previous chunk's {held}",
                              choice=index, field=KEY.output_ids)
            for key in _SLICED:
                value = meta.get(key)
                old = state.lists.get(key)
                if value is None:
                    if old:
                        raise _refuse(event, "missing, where the previous chunk had it", choice=index,
                                      field=f"meta_info.{key}")
                    continue
                if type(value) is not list or old is not None and value[:len(old)] != old:
                    raise _refuse(event, "does not extend the previous chunk's", choice=index,
                                  field=f"meta_info.{key}")
                state.lists[key] = value
            if n > held:
                state.starts.append(held)
                state.events.append(event)
                state.ids = ids
            text = chunk.get("text")
            if isinstance(text, str):
                state.texts = [text]
        state.meta = meta
        for key, value in chunk.items():
            if key not in ("index", "text", KEY.output_ids, KEY.meta_info):
                state.once[key] = (event, value)

    def _sglang_document(self) -> Any:
        items = []
        for state in self._choices:
            meta = dict(state.meta)
            meta.update(state.lists)
            item: dict[str, Any] = {}
            if state.texts:
                item["text"] = state.texts[0]
            item[KEY.output_ids] = state.ids
            item[KEY.meta_info] = meta
            for key, (_, value) in state.once.items():
                item[key] = value
            items.append(item)
        return items[0] if len(items) == 1 else items

    # --- the result ------------------------------------------------------------------------------

    def _adopt(self) -> None:
        """Take over from the compiled scan: its reading, as this module keeps it, and its
        pending bytes, from which this module goes on."""
        scan, self._scan = self._scan, None
        state = scan.export()
        loads = _json.loads
        form = self._form
        self._event = state["event"]
        self._done = state["done"]
        self._pending = bytearray(state["pending"])
        self._scanned = 0
        for key, _, value in state["root"]:
            self._root[key] = loads(value)
        if state["prompt"] is not None:
            self._prompt = (state["prompt"][0], loads(state["prompt"][1]))
        if state["usage"]:
            self._usage = loads(state["usage"])
        for c in state["choices"]:
            choice = _Choice(c["index"], form, c["first_event"])
            choice.last_event = c["last_event"]
            choice.ids = loads(b"[" + c["ids"] + b"]")
            choice.starts = c["starts"]
            choice.events = c["events"]
            choice.has_records = c["has_records"]
            choice.sends_ids = True if c["starts"] else None  # the scan takes only chunks adding ids
            choice.sent_ids = c["sent_ids"]
            if choice.has_records:
                choice.records = [loads(b"[" + r + b"]") for r in c["records"][:len(form.records)]]
            if form.texts:
                choice.texts = [loads(b'"' + c["text"] + b'"')]
            for key, event, value in c["once"]:
                choice.once[key] = (event, loads(value))
            for attr in ("finish", "stop", "role", "prompt"):
                if c[attr]:
                    setattr(choice, {"finish": "finish_reason", "stop": "stop_reason"}.get(attr, attr), loads(c[attr]))
            self._choices.append(choice)

    def document(self) -> Any:
        """The non-streamed response the stream stands for (after the whole body was fed)."""
        if self._scan is not None:
            self._adopt()
        if self._failed is not None:
            raise self._failed
        if self._pending.strip():
            if self._pending.strip() == b"data: " + _DONE:
                self._event_bytes(self._pending.strip())  # [DONE] without its blank line: the body's end
                self._pending.clear()
            else:
                raise _refuse(self._event, "the stream ends inside an event (truncated)")
        if not self._done:
            raise _refuse(self._event, "the stream ends without data: [DONE] (truncated)")
        form = self._form
        if form.name == "sglang":
            return self._sglang_document()
        document: dict[str, Any] = dict(form.whole)
        for key, value in self._root.items():
            if key not in ("object", "choices", "usage"):
                document[key] = value
        if self._prompt is not None:
            document[KEY.prompt_token_ids] = self._prompt[1]
        choices = []
        for state in self._choices:
            for key in form.last:
                seen = state.once.get(key)
                if seen is not None and seen[0] != state.last_event:
                    raise _refuse(seen[0], f"comes on the choice's last chunk only (event {state.last_event})",
                                  choice=state.index, field=key)
            choice: dict[str, Any] = {"index": state.index}
            if form.name == "chat":
                choice["message"] = {"role": state.role or "assistant", "content": state.texts[0]}
            elif form.name == "completions":
                choice["text"] = state.texts[0]
            if state.has_records:
                if form.name == "completions":
                    choice["logprobs"] = {path[-1]: acc for path, acc in zip(form.records, state.records)}
                    if state.packed is not None:
                        choice["logprobs"]["top_k"] = state.packed.block()
                else:
                    choice["logprobs"] = {"content": state.records[0]}
            else:
                choice["logprobs"] = None
            choice["finish_reason"] = state.finish_reason
            if state.stop_reason is not None:
                choice["stop_reason"] = state.stop_reason
            if state.sent_ids:  # none sent, none written: the parser asks for ids, as of a body without them
                choice[KEY.token_ids] = state.ids
            if state.prompt is not None:
                choice[KEY.prompt_token_ids] = state.prompt
            for key, (_, value) in state.once.items():
                choice[key] = value
            choices.append(choice)
        document["choices"] = choices
        if self._usage is not None:
            document["usage"] = self._usage
        if self._nvext is not None:
            for key, event in self._nvext_once.items():
                for state in self._choices:
                    if state.last_event > event:
                        raise _refuse(event, f"comes on the choice's last chunk only (event {state.last_event})",
                                      choice=state.index, field=f"{KEY.nvext}.{key}")
            document[KEY.nvext] = self._nvext
        return document

    def result(self) -> Any:
        """The parsed response: the format's parser over the reassembled document."""
        parser = getattr(_select.impl, self._form.parser)
        if self._scan is not None:
            whole = self._scan.document()
            if whole is not None:
                try:
                    return parser(whole, **self._options)
                except MalformedResponseError:
                    pass  # refused: said again below, by this module's path, with the event
        document = self.document()
        try:
            return parser(_json.dumps(document), **self._options)
        except MalformedResponseError as exc:
            raise self._placed(exc) from None

    def _placed(self, exc: MalformedResponseError) -> MalformedResponseError:
        """The parser's error, with the event its token came in."""
        if exc.choice is None or exc.token is None or not 0 <= exc.choice < len(self._choices):
            return exc
        state = self._choices[exc.choice]
        at = bisect_right(state.starts, exc.token) - 1
        if at < 0:
            return exc
        placed = MalformedResponseError(f"{exc.reason} (event {state.events[at]})", choice=exc.choice,
                                        field=exc.field, token=exc.token)
        placed.__cause__ = exc
        return placed


def parser_of(name: str) -> Any:
    """The parser of the registry's format ``name`` in the implementation in use: a whole
    body's, or this module's reader of a stream format."""
    entry = FORMATS[name]
    if entry.reads is not None:
        return functools.partial(parse_stream, entry.reads)
    return getattr(_select.impl, entry.parser)


def parse_stream(format: str, raw: Any, **options: Any) -> Any:
    """A whole SSE body of ``format`` (a key of :data:`FORMS`), with its parser's options."""
    reader = StreamReader(format, **options)
    if isinstance(raw, str):
        raw = raw.encode()
    reader.feed(raw)
    return reader.result()


def parse_generate_stream(raw: Any, **options: Any) -> Any:
    """Parse and validate a vLLM ``/inference/v1/generate`` stream (``stream=true``): the whole
    SSE body. Takes ``parse_generate_response``'s options and returns what it returns."""
    return parse_stream("generate", raw, **options)


def parse_completions_stream(raw: Any, **options: Any) -> Any:
    """Parse and validate a vLLM ``/v1/completions`` stream with ``return_token_ids``: the whole
    SSE body. Takes ``parse_completions_response``'s options and returns what it returns."""
    return parse_stream("completions", raw, **options)


def parse_sglang_generate_stream(raw: Any, **options: Any) -> Any:
    """Parse and validate an SGLang ``/generate`` stream (``"stream": true``), cumulative or
    incremental (``--incremental-streaming-output``): the whole SSE body. Takes
    ``parse_sglang_generate_response``'s options and returns what it returns."""
    return parse_stream("sglang", raw, **options)


def parse_chat_completions_stream(raw: Any, **options: Any) -> Any:
    """Parse and validate a vLLM ``/v1/chat/completions`` stream with ``return_token_ids``: the
    whole SSE body. Takes ``parse_chat_completions_response``'s options and returns what it
    returns."""
    return parse_stream("chat", raw, **options)
