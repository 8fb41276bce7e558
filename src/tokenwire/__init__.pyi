import os
from collections.abc import Iterable, Sequence
from typing import Any, Literal, overload

import numpy as np

from .auditing._audit import Verdict as Verdict
from .base._errors import MalformedResponseError as MalformedResponseError
from .base._types import Batch as Batch
from .base._types import BatchTensors as BatchTensors
from .base._types import GenerateChoice as GenerateChoice
from .base._types import GenerateResponse as GenerateResponse
from .base._types import PayloadSegment as PayloadSegment
from .base._types import Ragged as Ragged
from .base._types import RoutedExperts as RoutedExperts
from .batch._rollout import Trajectory as Trajectory

__version__: str
implementation: Literal["c", "python"]
_impl: Any  # the implementation module in use (the compiled core or the reference)

def parse_generate_response(
    raw: bytes | bytearray | memoryview | str | Any, *, top_k: int | None = ..., require_logprobs: bool = ...,
    require_sampling_mask: bool = ..., prompt_logprob_start: int | None = ..., teacher_logits: bool = ...,
    payload_root: str | os.PathLike[str] | None = ..., num_experts: int | None = ...,
    prompt_tokens: int | None = ...,
) -> GenerateResponse:
    """Parse and validate a vLLM ``/inference/v1/generate`` response body.

    Args:
        raw: the response body as sent (UTF-8 bytes, any bytes-like object, or str); any
            legal JSON spelling of it (whitespace, key order, ``\\/`` escapes) reads alike.
        top_k: with an int ``k``, also select each token's action-independent top-``k`` head
            from the candidates the response carries (``k + 2`` per token are required).
        require_logprobs: when True (the default), every choice must carry its sampled-token
            logprobs (``compact_logprobs``, ``completion_logprobs``, or ``logprobs`` with
            ``content`` records, a ``sampled`` list, or both, which must then agree).
        require_sampling_mask: when True, every choice must carry a sampling mask
            (``sampling_mask`` or ``kept_tokens``); a missing or null one is an error whose
            reason names the server settings that send it (default False: a mask is
            validated when present).
        prompt_logprob_start: the request's ``prompt_logprob_start`` (teacher scoring): the
            rows of ``prompt_token_id_logprobs`` must then be ``prompt_len - 1 - start`` exactly
            (without it, at most ``prompt_len - 1``, when the response has the prompt ids).
        teacher_logits: the server runs a logits ``--logprobs-mode``: the teacher matrix may
            hold positive values (never NaN or +inf).
        payload_root: the directory of prime-rl's by-handle payload files (the server's
            ``payload_dir`` as this process sees it). A choice's ``payload`` segments are
            always validated and returned as ``payload``; with ``payload_root`` their rows are
            also read, from files inside this directory only (a relative path under it, an
            absolute one only if it resolves inside it; no ``..`` or symlink out of it), into
            memory the result owns (not mapped), as ``routed_experts``,
            ``routed_expert_weights``, ``sampling_mask`` and ``sampling_mask_logprobs``.
            Default None: no file is read.
        num_experts: the model's count of routed experts: every expert id of
            ``routed_experts`` must be below it (an id at or above it fails at its row,
            naming the layer and the value). Without it an id must only be non-negative.
        prompt_tokens: the prompt's token count, for a response that carries neither
            ``prompt_token_ids`` nor ``usage.prompt_tokens``: it places the by-handle rows and
            counts the rows of ``routed_experts`` (``prompt_tokens + n - 1 - start``). A
            response whose own count differs from it fails at the field that says it.

    Returns:
        GenerateResponse: one GenerateChoice per entry of ``choices``, with
        ``completion_ids`` (int64), ``completion_logprobs`` (float32 or float64), the heads,
        ``sampling_mask`` (from ``sampling_mask`` or ``kept_tokens``, with
        ``sampling_mask_present``), ``routed_experts`` and ``weight_versions`` (vLLM's spans
        of the weights that sampled each token, as ``(version, start, end)``) when present,
        and ``payload`` (the by-handle segments) when sent; the response's
        ``prompt_token_id_logprobs`` (float32 ``(rows, K)``) when it carries teacher scores.
        In a response that says ``output_mode: "text"`` the ``logprobs.content`` records
        (decoded text) stand for ``token_ids`` by position.

    Raises:
        MalformedResponseError: the response breaks the contract (invalid JSON, a missing or
            misaligned field, a logprob that is not sampling evidence, a head that breaks the
            selection rules); its ``choice``, ``field`` and ``token`` say where.
        ValueError: ``top_k`` is not a positive int or None, or ``num_experts`` not in
            ``[1, 2**31]``.
        TypeError: ``raw`` is neither str nor bytes-like, ``payload_root`` is not a path, or
            ``num_experts`` not an int.

    Example:
        >>> body = (b'{"choices":[{"token_ids":[7,8],"logprobs":{"content":['
        ...         b'{"token":"token_id:7","logprob":-0.5},{"token":"token_id:8","logprob":-1.0}]}}]}')
        >>> choice = tokenwire.parse_generate_response(body).choices[0]
        >>> choice.completion_ids.tolist(), choice.completion_logprobs.tolist()
        ([7, 8], [-0.5, -1.0])
    """
def b64decode(data: bytes | bytearray | memoryview | str | Any, out: Any = ...) -> np.ndarray:
    """Strictly decode standard base64 (RFC 4648 alphabet, padding required, no whitespace).

    Args:
        data: the base64 text, as str (ASCII) or any bytes-like object.
        out: optionally a writable, C-contiguous uint8 array to decode into; it must hold at
            least the decoded length.

    Returns:
        numpy.ndarray: the decoded bytes as uint8; with ``out``, a view of its first bytes.

    Raises:
        MalformedResponseError: ``data`` is not strict base64 (a ValueError).
        ValueError: ``out`` is too small.
        TypeError: ``data`` is neither str nor bytes-like.

    Example:
        >>> tokenwire.b64decode(b"AQID").tolist()
        [1, 2, 3]
    """
def simd_paths() -> list[str]:
    """The code paths of the C kernels this CPU and build can run, best last (empty without
    the compiled core)."""
def simd_path() -> str | None:
    """The code path every C kernel takes (``TOKENWIRE_SIMD`` forces one), or None without the
    compiled core."""
def parse_completions_response(
    raw: bytes | bytearray | memoryview | str | Any, *, top_k: int | None = ..., require_logprobs: bool = ...,
    check_usage: bool = ..., num_experts: int | None = ..., routed_experts_shape: tuple[int, int] | None = ...,
    routed_experts_start_len: int = ...,
) -> GenerateResponse:
    """Parse and validate an OpenAI-compatible ``/v1/completions`` response body (vLLM,
    Fireworks, Together) into exact completion ids and their aligned logprobs: the ids the
    server sent (``token_ids``, ``"token_id:N"`` tokens), never a re-tokenization of the text.

    Args:
        raw: the response body as sent (UTF-8 bytes, any bytes-like object, or str).
        top_k: with an int ``k``, also select each token's top-``k`` head, by the same rules
            as :func:`parse_generate_response` (``k + 2`` candidates per token required).
        require_logprobs: when True (the default), every choice must carry logprobs; the
            error names the request flag to set when they are missing.
        check_usage: when True (the default), ``usage.completion_tokens`` must agree with
            the number of ids (and ``usage.prompt_tokens`` counts the prompt for the routing's
            rows when the response has no prompt ids). Request the ids with
            :func:`completions_request_params`.
        num_experts: as :func:`parse_generate_response`, for ``routed_experts`` and
            ``prompt_routed_experts`` (and NVIDIA Dynamo's ``nvext`` routing).
        routed_experts_shape, routed_experts_start_len: as
            :func:`parse_sglang_generate_response`, for the routing NVIDIA Dynamo passes on
            from an SGLang worker (``nvext.engine_data.routed_experts``,
            ``nvext.routed_experts``: SGLang's bare base64 int32 string).

    Returns:
        GenerateResponse: ``completion_ids`` int64 and ``completion_logprobs`` float64 per
        choice; with ``top_k``, ``completion_top_ids``/``completion_top_logprobs`` as Ragged.
        vLLM's MoE routing replay, when sent, is ``choice.routed_experts`` (a base64 ``.npy``
        of one row per prompt and completion token but the last; or vLLM 0.21's lists of the
        completion's rows, with the prompt's apart in ``response.prompt_routed_experts``),
        its row count checked against the token counts the response gives.

    Raises:
        MalformedResponseError: as :func:`parse_generate_response`; when the ids or the
            logprobs are missing, the message names the request flag to set.
        ValueError, TypeError: as :func:`parse_generate_response`.

    Example:
        >>> body = (b'{"choices":[{"index":0,"token_ids":[5,6],"logprobs":'
        ...         b'{"tokens":["a","b"],"token_logprobs":[-0.1,-0.2]}}]}')
        >>> tokenwire.parse_completions_response(body).choices[0].completion_ids.tolist()
        [5, 6]
    """
def parse_chat_completions_response(
    raw: bytes | bytearray | memoryview | str | Any, *, top_k: int | None = ..., require_logprobs: bool = ...,
    check_usage: bool = ..., num_experts: int | None = ..., routed_experts_shape: tuple[int, int] | None = ...,
    routed_experts_start_len: int = ...,
) -> GenerateResponse:
    """Parse and validate an OpenAI-compatible ``/v1/chat/completions`` response body
    (vLLM, Fireworks, Together): the ids from ``token_ids`` or each ``logprobs.content``
    record's ``token_id``, with their aligned logprobs.

    Takes, returns and raises as :func:`parse_completions_response`; request the ids with
    :func:`chat_completions_request_params`.

    Example:
        >>> body = (b'{"choices":[{"index":0,"token_ids":[5],"logprobs":{"content":'
        ...         b'[{"token":"a","logprob":-0.1}]}}]}')
        >>> tokenwire.parse_chat_completions_response(body).choices[0].completion_logprobs.tolist()
        [-0.1]
    """
def parse_sglang_generate_response(
    raw: bytes | bytearray | memoryview | str | Any, *, top_k: int | None = ..., require_logprobs: bool = ...,
    check_usage: bool = ..., num_experts: int | None = ..., routed_experts_shape: tuple[int, int] | None = ...,
    routed_experts_start_len: int = ...,
) -> GenerateResponse:
    """Parse and validate an SGLang ``/generate`` response body (one object, or a list for a
    batch or ``n > 1``): ``output_ids`` with ``meta_info.output_token_logprobs``, each
    ``[logprob, token_id, text]``; ``finish_reason`` is ``meta_info.finish_reason.type``;
    ``weight_versions`` is ``meta_info.weight_versions`` as ``(version, start, end)`` spans.

    Takes, returns and raises as :func:`parse_completions_response` (``check_usage``
    compares ``meta_info.completion_tokens``, and lets ``meta_info.prompt_tokens`` count the
    routing's rows); request the ids with :func:`sglang_generate_request_params`.
    ``meta_info.routed_experts`` (bare base64 int32, one row per position from
    ``routed_experts_start_len``, the request's, to the prompt and completion but the last)
    becomes ``choice.routed_experts``: ``(rows, layers, topk)`` with ``routed_experts_shape=(layers,
    topk)``, else ``(rows, width)``; ``meta_info.indexer_topk`` becomes ``choice.indexer_topk``
    the same way, ``(rows, width)``.

    Example:
        >>> body = (b'{"output_ids":[5,6],"meta_info":{"output_token_logprobs":'
        ...         b'[[-0.1,5,null],[-0.2,6,null]]}}')
        >>> tokenwire.parse_sglang_generate_response(body).choices[0].completion_ids.tolist()
        [5, 6]
    """
def generate_request_params(
    params: dict[str, Any], *, top_k: int | None = ..., compact: bool = ..., sampling_mask: bool = ...,
    routed_experts: bool = ..., payload_dir: str | None = ...,
) -> dict[str, Any]:
    """A copy of a vLLM ``/inference/v1/generate`` request body (``token_ids``: the prompt's ids)
    that asks for the evidence :func:`parse_generate_response` reads: ``sampling_params.logprobs``
    (0, or ``top_k + 2`` with a head), and on request ``extra_args.prl_compact_logprobs``
    (``compact``), ``return_sampling_mask``, ``return_routed_experts``, ``extra_args.payload_dir``.
    The caller's values are kept. Send it as it is: ``httpx.post(url, json=params)``."""
def completions_request_params(
    params: dict[str, Any], *, top_k: int | None = ..., engine_data: bool = ..., sdk: bool = ...,
) -> dict[str, Any]:
    """A copy of a ``/v1/completions`` request body that asks for exact ids (vLLM's
    ``return_token_ids``, ``logprobs``; with ``top_k`` ``k + 2`` candidates keyed by id;
    ``engine_data=True``: NVIDIA Dynamo's ``nvext.extra_fields``). ``sdk=True`` gives the OpenAI
    SDK's keyword arguments, the fields it does not name under ``extra_body``:
    ``client.completions.create(**completions_request_params(params, sdk=True))``."""
def chat_completions_request_params(
    params: dict[str, Any], *, top_k: int | None = ..., engine_data: bool = ..., sdk: bool = ...,
) -> dict[str, Any]:
    """A copy of a ``/v1/chat/completions`` request body that asks for exact ids, as
    :func:`completions_request_params` (``logprobs: true``, ``top_logprobs``);
    ``client.chat.completions.create(**chat_completions_request_params(params, sdk=True))``."""
def sglang_generate_request_params(params: dict[str, Any], *, top_k: int | None = ...) -> dict[str, Any]:
    """A copy of an SGLang ``/generate`` request body that asks for exact ids:
    ``return_logprob`` (with ``top_k`` also ``top_logprobs_num = top_k + 2``)."""
def b64encode(data: bytes | bytearray | memoryview | str | Any) -> bytes:
    """Standard base64 with padding, as ASCII bytes.

    Args:
        data: any bytes-like object (a numpy array's raw bytes, say), or str (encoded as UTF-8).

    Returns:
        bytes: the base64 text.

    Raises:
        TypeError: ``data`` is neither str nor bytes-like.

    Example:
        >>> tokenwire.b64encode(bytes([1, 2, 3]))
        b'AQID'
    """
def dumps_generate_response(payload: Any, *, top_k: int | None = ..., check: bool = ...) -> bytes:
    """Serialize a ``/inference/v1/generate`` response as vLLM does (``json.dumps`` with
    ``ensure_ascii=False``, compact separators, UTF-8); with ``check`` (the default) the
    assembled response is first read by :func:`parse_generate_response` (``top_k``: the head a
    trainer will ask for), and a refusal raises :class:`MalformedResponseError`."""
def dumps_chat_completions_response(
    choices: Sequence[dict[str, Any]], *, model: str = ..., request_id: str = ..., created: int = ...,
    prompt_token_ids: Any = ..., top_k: int | None = ..., check: bool = ...,
) -> bytes:
    """A ``/v1/chat/completions`` body as vLLM writes it with exact ids (``return_token_ids``,
    ``return_tokens_as_token_ids``): each choice a dict of ``token_ids``, ``logprobs`` and
    optionally ``text``, ``finish_reason``, ``top_logprobs`` (per token ``(id, logprob)`` pairs);
    checked by :func:`parse_chat_completions_response` unless ``check=False``."""
def dumps_completions_response(
    choices: Sequence[dict[str, Any]], *, model: str = ..., request_id: str = ..., created: int = ...,
    prompt_token_ids: Any = ..., top_k: int | None = ..., check: bool = ...,
) -> bytes:
    """A ``/v1/completions`` body as vLLM writes it, as :func:`dumps_chat_completions_response`."""
def encode_packed(array: Any) -> dict[str, Any]:
    """``{"data", "shape", "dtype"}`` of a 1-D float32/float64 (sampled logprobs) or int32 array,
    checked by the reader's rules."""
def encode_compact_logprobs(ids: Any, logprobs: Any, offsets: Any, num_top_logprobs: int, *, completion_ids: Any = ...) -> dict[str, Any]:
    """prime-rl's ``compact_logprobs`` (``u32-f32-le-v1``): row ``t`` is
    ``ids/logprobs[offsets[t]:offsets[t+1]]``, the sampled token first."""
def encode_sampling_mask(ids: Any, counts: Any, *, completion_ids: Any = ...) -> dict[str, Any]:
    """The packed CSR ``sampling_mask`` ``{"ids", "counts"}``: row ``t`` holds ``counts[t]`` ids
    (with ``completion_ids``, its sampled id among them)."""
def encode_kept_tokens(ids: Any, counts: Any, *, completion_ids: Any = ...) -> dict[str, Any]:
    """prime-rl's ``kept_tokens`` ``{"ids", "counts"}`` (bare base64 int32); a zero count is a
    token without a kept set."""
def encode_routed_experts(array: Any, start: int | None = ...) -> dict[str, Any]:
    """MoE routing replay ``{"data", "shape", "start", "dtype"}`` of a ``(rows, layers, topk)``
    uint8/uint16/int16/int32 array."""
def encode_top_k(token_ids: Any, logprobs: Any) -> dict[str, Any]:
    """vLLM's packed top-k ``logprobs.top_k`` of ``(num_positions, k)`` candidate ids and
    logprobs (``-inf`` for a filtered-out candidate)."""
def encode_sampling_mask_logprobs(logprobs: Any, counts: Any) -> list[list[float]]:
    """prime-rl's ``sampling_mask_logprobs``: one row of ``counts[t]`` renormalized logprobs
    per token, aligned with a sampling mask of the same counts."""
def encode_teacher_scores(scores: Any, *, logits: bool = ...) -> Blob:
    """vLLM's teacher scores ``prompt_token_id_logprobs``: the base64 ``.npy`` of a float32
    ``(rows, K)`` matrix."""
def json_default(value: Any) -> Any:
    """``default=`` for ``json.dumps``/``orjson.dumps`` (a :class:`Blob` is a str already; kept
    for callers that pass it)."""

class Blob(str):
    """The base64 text of an encoded array: a ``str`` that JSON serializers write as it is,
    holding the decoded bytes the writers validated (``array``) and its ASCII ``text``."""
    def __new__(cls, text: bytes | str, array: Any = ...) -> Blob: ...
    @property
    def text(self) -> bytes: ...
    @property
    def array(self) -> np.ndarray: ...
_Format = Literal["generate", "completions", "chat", "sglang", "generate_stream", "completions_stream", "chat_stream",
                  "sglang_stream"]

def select_heads(
    candidate_ids: Any, candidate_logprobs: Any, candidate_offsets: Any, sampled_ids: Any,
    sampled_logprobs: Any, k: int, *, num_top: int | None = ..., support_ids: Any = ..., support_offsets: Any = ...,
) -> tuple[Ragged, Ragged]:
    """The action-independent top-``k`` heads of arrays an in-process engine holds, by the
    parsers' rules: ``(head_ids, head_logprobs)`` as :class:`Ragged`."""
def audit(
    raw: bytes | bytearray | memoryview | str, format: Literal["auto"] | _Format = ...,
    *, field: str | tuple[str, ...] | None = ..., top_k: int | None = ..., num_experts: int | None = ...,
    routed_experts_shape: tuple[int, int] | None = ...,
) -> Verdict:
    """The verdict ``tokenwire check`` reaches for one record: its format, and its defect class,
    location and message when it is defective."""
@overload
def parse_many(
    raws: Iterable[bytes | bytearray | memoryview | str | Any], *, format: _Format = ..., threads: int | None = ...,
    errors: Literal["raise"] = ..., **parser_options: Any,
) -> list[GenerateResponse]: ...
@overload
def parse_many(
    raws: Iterable[bytes | bytearray | memoryview | str | Any], *, format: _Format = ..., threads: int | None = ...,
    errors: Literal["collect"], **parser_options: Any,
) -> list[GenerateResponse | MalformedResponseError]:
    """Parse many bodies (or response objects with ``.content``) on a pool of threads, in input
    order, with ``format``'s parser and its options; ``errors="collect"`` puts each malformed
    body's error in its place instead of raising the first."""
@overload
async def aparse_many(
    raws: Iterable[bytes | bytearray | memoryview | str | Any], *, format: _Format = ..., threads: int | None = ...,
    errors: Literal["raise"] = ..., **parser_options: Any,
) -> list[GenerateResponse]: ...
@overload
async def aparse_many(
    raws: Iterable[bytes | bytearray | memoryview | str | Any], *, format: _Format = ..., threads: int | None = ...,
    errors: Literal["collect"], **parser_options: Any,
) -> list[GenerateResponse | MalformedResponseError]:
    """:func:`parse_many` off the event loop (awaitable)."""
def collate(
    items: Iterable[GenerateResponse | GenerateChoice | MalformedResponseError] | GenerateResponse | GenerateChoice, *, width: int | None = ...,
    pad_id: int = ..., head_width: int | None = ..., prompt_width: int | None = ..., routing_width: int | None = ...,
    routing: str = ..., routing_fill: int = ..., out: Batch | None = ..., threads: int | None = ...,
) -> Batch:
    """Every choice of ``items`` in one row of padded arrays (a :class:`Batch`);
    ``batch.to_torch()`` gives the tensors (:class:`BatchTensors`)."""
def parse_batch(
    raws: Iterable[bytes | bytearray | memoryview | str | Any], *, format: _Format = ..., threads: int | None = ...,
    errors: Literal["raise", "collect"] = ..., width: int | None = ..., pad_id: int = ..., head_width: int | None = ...,
    prompt_width: int | None = ..., routing_width: int | None = ..., routing: str = ..., routing_fill: int = ...,
    out: Batch | None = ..., **parser_options: Any,
) -> Batch:
    """Many bodies straight into one :class:`Batch`: ``collate(parse_many(raws, ...), ...)``'s
    arrays, verdicts and messages, the plain generate bodies' ids, logprobs and prompt ids
    written from the scan into their rows without a result object; with ``errors="collect"``
    the malformed bodies' positions in ``skipped`` and their errors in ``errors``."""
def validate(
    *, completion_ids: Any, completion_logprobs: Any = ..., completion_top_ids: Any = ...,
    completion_top_logprobs: Any = ..., top_k: int | None = ..., sampling_mask: Any = ..., routed_experts: Any = ...,
    routed_experts_start: int | None = ..., prompt_token_ids: Any = ..., num_experts: int | None = ...,
    weight_versions: Any = ..., finish_reason: Any = ..., index: int = ..., require_logprobs: bool = ...,
    require_sampling_mask: bool = ...,
) -> GenerateChoice:
    """Evidence handed over in process (lists, numpy or torch), checked by the parsers' rules:
    the same :class:`GenerateChoice`, or the same :class:`MalformedResponseError` naming the
    keyword at fault and the token."""
def validate_vllm_output(
    output: Any, *, top_k: int | None = ..., num_logprobs: int | None = ..., prompt_token_ids: Any = ...,
    num_experts: int | None = ..., routed_experts_start: int | None = ..., require_logprobs: bool = ...,
) -> Any:
    """vLLM's in-process ``RequestOutput`` or ``CompletionOutput`` (read by its attributes, vLLM
    never imported) checked by :func:`validate`'s rules."""
def validate_sglang_meta_info(
    meta_info: Any, *, output_ids: Any = ..., top_k: int | None = ..., require_logprobs: bool = ...,
    check_usage: bool = ..., num_experts: int | None = ..., routed_experts_shape: tuple[int, int] | None = ...,
    routed_experts_start_len: int = ..., index: int = ...,
) -> GenerateChoice:
    """SGLang's in-process ``meta_info`` (with its ``output_ids``) checked by the SGLang parser's
    rules."""
def rollout_batch(
    trajectories: Iterable[Trajectory], *, width: int | None = ..., pad_id: int = ..., head_width: int | None = ...,
    prompt_width: int | None = ..., routing_width: int | None = ..., routing: str = ..., routing_fill: int = ...,
    out: Batch | None = ..., threads: int | None = ...,
) -> Batch:
    """The step's trajectories as one :class:`Batch` (each trajectory a row, its loss mask beside
    its ids), with :func:`collate`'s options."""


class StreamReader:
    """Reads one streamed response (Server-Sent Events) as its bytes arrive.

    ``format`` is ``"generate"`` (vLLM ``/inference/v1/generate`` with ``stream=true``),
    ``"completions"`` or ``"chat"`` (vLLM ``/v1/completions``, ``/v1/chat/completions`` with
    ``return_token_ids``); the options are the format's parser's. ``feed`` each piece (split
    anywhere), then ``result()``: the chunks reassembled into the whole-body form and parsed
    by that parser. Errors name the event, the choice and the field.
    """

    def __init__(self, format: str = ..., **options: Any) -> None: ...
    def feed(self, data: bytes | bytearray | memoryview | str) -> None: ...
    def document(self) -> dict[str, Any]: ...
    def result(self) -> GenerateResponse: ...

def parse_generate_stream(raw: bytes | bytearray | memoryview | str | Any, **options: Any) -> GenerateResponse:
    """A whole vLLM ``/inference/v1/generate`` SSE body (``stream=true``); the options and result of
    ``parse_generate_response``."""

def parse_completions_stream(raw: bytes | bytearray | memoryview | str | Any, **options: Any) -> GenerateResponse:
    """A whole vLLM ``/v1/completions`` SSE body with ``return_token_ids``; the options and result of
    ``parse_completions_response``."""

def parse_chat_completions_stream(raw: bytes | bytearray | memoryview | str | Any, **options: Any) -> GenerateResponse:
    """A whole vLLM ``/v1/chat/completions`` SSE body with ``return_token_ids``; the options and
    result of ``parse_chat_completions_response``."""

def parse_sglang_generate_stream(raw: bytes | bytearray | memoryview | str | Any, **options: Any) -> GenerateResponse:
    """A whole SGLang ``/generate`` SSE body (``"stream": true``), cumulative chunks (the default) or
    incremental ones (``--incremental-streaming-output``); the options and result of
    ``parse_sglang_generate_response``."""
