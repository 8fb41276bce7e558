"""Result types, shared by the compiled core and the pure-Python reference."""

from __future__ import annotations

import importlib
import operator
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypedDict, overload

import numpy as np

__all__ = ["Batch", "GenerateChoice", "GenerateResponse", "PayloadSegment", "Ragged", "RoutedExperts"]

# The per-token loops in use (the compiled core's or the reference's): they build Ragged rows,
# so they sit above these types, which never import them; the selector hands them over.
_kernels: Any = None


def use_kernels(kernels: Any) -> None:
    """Run ``Ragged.to_lists`` on ``kernels`` (``_select`` calls this once it has chosen)."""
    global _kernels
    _kernels = kernels


class Ragged:
    """Rows of different lengths in CSR form: row ``i`` is ``values[offsets[i]:offsets[i + 1]]``.

    The parsers return heads (``completion_top_ids``/``completion_top_logprobs``) and sampling
    masks this way: one row per completion token. ``offsets`` is int64 with ``len(rows) + 1``
    entries starting at 0; ``values`` holds the rows back to back. Indexing gives a row as an
    array view, iteration yields every row, ``to_lists()`` gives Python lists.

    Example:
        >>> rows = tokenwire.Ragged(np.array([0, 2, 3]), np.array([7, 9, 4], dtype=np.int32))
        >>> len(rows), rows[0].tolist(), rows.to_lists()
        (2, [7, 9], [[7, 9], [4]])
    """

    __slots__ = ("offsets", "values")

    def __init__(self, offsets: np.ndarray, values: np.ndarray) -> None:
        self.offsets = offsets
        self.values = values

    @classmethod
    def from_lists(cls, rows: list[list[Any]], dtype: Any) -> Ragged:
        rows = [list(r) for r in rows]  # one read of each row: the lengths and values agree
        offsets = np.zeros(len(rows) + 1, dtype=np.int64)
        np.cumsum([len(r) for r in rows], out=offsets[1:])
        values = np.fromiter((v for r in rows for v in r), dtype=dtype, count=int(offsets[-1]))
        return cls(offsets, values)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    @overload
    def __getitem__(self, i: int) -> np.ndarray: ...
    @overload
    def __getitem__(self, i: slice) -> Ragged: ...

    def __getitem__(self, i: int | slice) -> np.ndarray | Ragged:
        """Row ``i`` (a view of ``values``), or for a slice the rows it selects as a
        ``Ragged``: a view sharing ``values`` when the step is 1, a copy otherwise."""
        n = len(self)
        if isinstance(i, slice):
            start, stop, step = i.indices(n)
            if step == 1:
                # offsets[start] need not be 0: every consumer reads rows through the offsets.
                return Ragged(self.offsets[start : max(start, stop) + 1], self.values)
            bounds = np.array(self.offsets[: n + 1])  # one read: the offsets agree with the parts
            parts = [self.values[bounds[r] : bounds[r + 1]] for r in range(start, stop, step)]
            offsets = np.zeros(len(parts) + 1, dtype=np.int64)
            np.cumsum([len(p) for p in parts], out=offsets[1:])
            return Ragged(offsets, np.concatenate(parts) if parts else self.values[:0].copy())
        i = operator.index(i)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"row {i} out of range for {n} rows")
        return self.values[self.offsets[i] : self.offsets[i + 1]]

    def __iter__(self) -> Iterator[np.ndarray]:
        for i in range(len(self)):
            yield self[i]

    def lengths(self) -> np.ndarray:
        """Each row's length, int64 ``(rows,)``."""
        return np.diff(self.offsets).astype(np.int64, copy=False)

    def to_lists(self) -> list[list[Any]]:
        """The rows as Python lists (of ints, or of floats), as ``values.tolist()`` has them."""
        rows: list[list[Any]] = _kernels.rows_to_lists(self.offsets, self.values)[0]
        return rows

    def to_padded(self, width: int | None = None, fill: Any = 0) -> tuple[np.ndarray, np.ndarray]:
        """The rows as one ``(rows, width)`` array of ``values``' dtype, each row left-aligned
        and filled with ``fill`` past its end, and the row lengths (int64 ``(rows,)``).

        ``width`` defaults to the longest row; a row longer than ``width`` raises
        ``ValueError`` (nothing is silently cut). For a head of log-probabilities, ``fill=-inf``
        keeps the padding out of a ``logsumexp``.
        """
        bounds = np.array(self.offsets, dtype=np.int64)  # one read: every step below agrees
        lengths = np.diff(bounds)
        longest = int(lengths.max()) if len(lengths) else 0
        if width is None:
            width = longest
        elif width < longest:
            row = int(np.argmax(lengths))
            raise ValueError(f"row {row} has {longest} values, more than width {width}")
        out = np.full((len(lengths), width), fill, dtype=self.values.dtype)
        first = int(bounds[0]) if len(bounds) else 0
        flat = self.values[first : first + int(lengths.sum())]
        rows = np.repeat(np.arange(len(lengths)), lengths)
        columns = np.arange(len(flat)) - np.repeat(bounds[:-1] - first, lengths)
        out[rows, columns] = flat
        return out, lengths

    def _compact(self) -> tuple[np.ndarray, np.ndarray]:
        """Offsets starting at 0 and the values they cover (views when already so)."""
        offsets = np.ascontiguousarray(self.offsets, dtype=np.int64)
        first = int(offsets[0]) if len(offsets) else 0
        values = self.values[first : int(offsets[-1])] if len(offsets) else self.values[:0]
        if first:
            offsets = offsets - first
        return offsets, np.ascontiguousarray(values)

    def to_arrow(self) -> Any:
        """The rows as a ``pyarrow.LargeListArray`` (int64 offsets, like ``Ragged``) whose
        buffers are ``offsets`` and ``values`` themselves: no copy, and the arrays stay alive
        as long as the Arrow array does. Needs pyarrow (``pip install 'tokenwire[arrow]'``)."""
        pa = _require("pyarrow", "arrow")
        offsets = np.ascontiguousarray(self.offsets, dtype=np.int64)
        values = self.values
        if not values.flags.c_contiguous or not values.dtype.isnative:
            values = np.ascontiguousarray(values, dtype=values.dtype.newbyteorder("="))
        return pa.LargeListArray.from_arrays(pa.array(offsets), pa.array(values))

    def __arrow_c_array__(self, requested_schema: Any = None) -> tuple[Any, Any]:
        """The Arrow PyCapsule interface: any Arrow consumer (``pyarrow.array(ragged)``,
        Polars, DuckDB, nanoarrow) takes the rows as ``to_arrow()`` has them."""
        return self.to_arrow().__arrow_c_array__(requested_schema)  # type: ignore[no-any-return]

    def to_torch(self, layout: str = "jagged", *, width: int | None = None, fill: Any = 0) -> Any:
        """The rows as torch tensors. ``layout="jagged"``: a nested tensor with the jagged
        layout (``torch.nested.nested_tensor_from_jagged``) over ``values`` and ``offsets``
        without a copy (offsets not starting at 0, as a slice has them, are shifted: a copy of
        the offsets only). ``layout="padded"``: ``(values (rows, width), lengths)`` as
        :meth:`to_padded` makes them (a copy). Needs torch (``pip install 'tokenwire[torch]'``)."""
        torch = _require("torch", "torch")
        if layout == "padded":
            padded, lengths = self.to_padded(width, fill)
            return torch.from_numpy(padded), torch.from_numpy(lengths)
        if layout != "jagged":
            raise ValueError(f"layout must be 'jagged' or 'padded', not {layout!r}")
        offsets, values = self._compact()
        return torch.nested.nested_tensor_from_jagged(torch.from_numpy(values), torch.from_numpy(offsets))

    def __repr__(self) -> str:
        return f"Ragged(rows={len(self)}, values={len(self.values)}, dtype={self.values.dtype})"


def _require(module: str, extra: str) -> Any:
    """An optional dependency, imported when first used."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ImportError(
            f"this needs {module}, which is not installed: pip install 'tokenwire[{extra}]' ({exc})"
        ) from exc


@dataclass(eq=False)
class RoutedExperts:
    """MoE routing replay: ``array`` shaped ``(rows, layers, topk)``; ``start`` the prompt offset.

    ``array`` holds expert ids (uint8, uint16, int16 or int32, as sent; int32 when sent as JSON
    lists) for every routed position: the prompt and the completion but its last token (where
    the response sends the prompt's rows apart, vLLM 0.21's ``prompt_routed_experts``, a
    choice's rows are its completion's). ``start`` is the prompt offset of the first row for
    delta replay, None when the response gave none.

    Example:
        >>> experts = tokenwire.RoutedExperts(np.zeros((4, 2, 8), dtype=np.uint8), start=0)
        >>> experts.array.shape, experts.start
        ((4, 2, 8), 0)
    """

    array: np.ndarray
    start: int | None = None


# prime-rl's ragged payload fields: a segment's rows are uint32 file offsets (CSR), the values
# lie where they point; or, for the mask, its writer's int32 rows of ids padded with -1.
RAGGED_PAYLOAD_FIELDS = ("sampling_mask", "sampling_mask_logprobs")
# The size of one such offset, and the offset after the last row that closes a ragged segment.
PAYLOAD_OFFSET_SIZE = 4


@dataclass(frozen=True)
class PayloadSegment:
    """One by-handle segment of a choice (prime-rl's ``payload``): ``rows`` consecutive rows of
    ``field`` for the token positions ``[pos, pos + rows)``, stored from byte ``offset`` of
    ``file`` (a path, resolved under ``payload_root`` when the rows are read).

    A fixed-width field (``routed_experts``, ``routed_expert_weights``) stores its rows there,
    a C-contiguous ``dtype`` array shaped ``(rows, *shape)``: ``shape`` is one row's. A ragged
    field (``sampling_mask``, ``sampling_mask_logprobs``) stores ``rows + 1`` uint32 absolute
    file offsets there (``dtype`` and ``shape`` make a 4-byte row): row ``i``'s values lie
    between offsets ``i`` and ``i + 1``, elsewhere in the file; or, a mask declared ``int32``
    of shape ``(width,)`` (``width`` 0 or at least 2: ``padded``), fixed-width rows of kept
    ids, each padded with -1 to ``width``.

    Example:
        >>> routing = tokenwire.PayloadSegment("routed_experts", "r1.bin", 0, 0, 6, "uint8", (2, 3))
        >>> routing.row_bytes, routing.nbytes
        (6, 36)
        >>> mask = tokenwire.PayloadSegment("sampling_mask", "r1.bin", 36, 4, 3, "uint32", ())
        >>> mask.ragged, mask.row_bytes, mask.nbytes
        (True, 4, 16)
    """

    field: str
    file: str
    offset: int
    pos: int
    rows: int
    dtype: str
    shape: tuple[int, ...]

    @property
    def padded(self) -> bool:
        """Whether the rows are a mask's int32 kept ids padded with -1 to ``shape[0]`` (a width
        of 0 or at least 2; one id a row would read as file offsets too)."""
        return (self.field == RAGGED_PAYLOAD_FIELDS[0] and self.dtype == "int32" and len(self.shape) == 1
                and self.shape[0] != 1)

    @property
    def ragged(self) -> bool:
        """Whether the rows are file offsets of ragged values (the sampling mask fields, but
        a ``padded`` mask)."""
        return self.field in RAGGED_PAYLOAD_FIELDS and not self.padded

    @property
    def row_bytes(self) -> int:
        """The bytes of one row at ``offset``: the dtype's size times the row shape's product."""
        size = int(np.dtype(self.dtype).itemsize)
        for dim in self.shape:
            size *= dim
        return size

    @property
    def nbytes(self) -> int:
        """The bytes the segment spans from ``offset``: ``rows * row_bytes``, and for a ragged
        field the closing offset's 4 more (its values lie where the offsets point)."""
        return self.rows * self.row_bytes + (PAYLOAD_OFFSET_SIZE if self.ragged else 0)


@dataclass(eq=False)
class GenerateChoice:
    """One choice of a parsed response: the validated per-token evidence of one completion.

    Attributes:
        index: the choice's position in the response's ``choices``.
        completion_ids: the sampled token ids, int64, shape ``(n,)``.
        completion_logprobs: each sampled token's logprob, shape ``(n,)``: float32 from the
            packed or compact transports, float64 from JSON; None only when the parser was
            called with ``require_logprobs=False`` and the choice has none.
        completion_top_ids: with ``top_k``, each token's head ids (int64) as :class:`Ragged`,
            one row per token; else None.
        completion_top_logprobs: the head's logprobs (float32 from the compact transport,
            float64 from JSON), aligned with ``completion_top_ids``.
        sampling_mask: the sampler's kept support per token (int32 :class:`Ragged`), if sent
            (``sampling_mask``, or prime-rl's ``kept_tokens``). A ``kept_tokens`` token with a
            zero count has no kept set: its row is empty, and a head falls back to the
            unmasked rule there. A kept set is never empty (it holds the sampled id).
        sampling_mask_present: with ``sampling_mask``, whether each token has a kept set
            (bool, shape ``(n,)``; every one for ``sampling_mask``, the non-zero counts for
            ``kept_tokens``); else None.
        routed_experts: MoE routing replay (:class:`RoutedExperts`), if sent (inline, or by
            handle when the parser was given ``payload_root``; SGLang's ``meta_info.routed_experts``).
        indexer_topk: SGLang's sparse-attention indexer top-k replay
            (``meta_info.indexer_topk``), int32 ``(rows, width)``, if sent; else None.
        routed_expert_weights: the router's weight of each routed expert (float32, shaped
            and positioned as ``routed_experts.array``), when read by handle; else None.
        sampling_logprobs: SGLang's ``output_token_sampling_logprobs``: each sampled token's
            logprob under the sampler's truncated distribution renormalized over its kept set
            (float64, ``(n,)``), if sent; else None.
        sampling_mask_logprobs: the logprob of every kept id of ``sampling_mask``, renormalized
            over its row (:class:`Ragged` aligned with ``sampling_mask``): float64 when SGLang
            sends them (``sampling_logprobs_mode: "support"``, or
            ``output_token_sampling_mask_logprobs``), float32 from prime-rl (its
            ``sampling_mask_logprobs``, inline or by handle); else None.
        prompt_top_ids: SGLang's flat prompt top-k (``input_top_logprobs_*_flat``): each
            covered prompt position's top ids (int64 :class:`Ragged`, the null prefix as empty
            rows), if sent; else None.
        prompt_top_logprobs: their logprobs, aligned with ``prompt_top_ids`` (float64 from
            JSON, float32 from base64).
        finish_reason: as sent (``"stop"``, ``"length"``, ...; SGLang's ``type``).
        raw: the choice's other fields, not validated.
        payload: the choice's by-handle segments (prime-rl's ``payload``), validated, as a
            tuple of :class:`PayloadSegment`; None when the choice has none.
        weight_versions: which weights sampled which tokens, if sent (vLLM's
            ``weight_versions``, SGLang's ``meta_info.weight_versions``): a tuple of
            ``(version, start, end)``, the tokens ``completion_ids[start:end]`` sampled by the
            weights labelled ``version`` (a str), in order, covering every token; else None.
        prompt_token_ids: the prompt's ids (int64) when ``tokenwire.validate`` (or an engine
            adapter) was given them; None from the parsers, which keep them on the response.

    Example:
        >>> body = (b'{"choices":[{"token_ids":[3],"completion_logprobs":null,"logprobs":'
        ...         b'{"content":[{"token":"token_id:3","logprob":-0.25}]},"finish_reason":"stop"}]}')
        >>> choice = tokenwire.parse_generate_response(body).choices[0]
        >>> choice.completion_ids.tolist(), choice.completion_logprobs.tolist(), choice.finish_reason
        ([3], [-0.25], 'stop')
    """

    index: int
    completion_ids: np.ndarray
    completion_logprobs: np.ndarray | None
    completion_top_ids: Ragged | None = None
    completion_top_logprobs: Ragged | None = None
    sampling_mask: Ragged | None = None
    routed_experts: RoutedExperts | None = None
    finish_reason: Any = None
    raw: dict[str, Any] = field(default_factory=dict)
    sampling_mask_present: np.ndarray | None = None
    payload: tuple[PayloadSegment, ...] | None = None
    sampling_mask_logprobs: Ragged | None = None
    routed_expert_weights: np.ndarray | None = None
    sampling_logprobs: np.ndarray | None = None
    prompt_top_ids: Ragged | None = None
    prompt_top_logprobs: Ragged | None = None
    weight_versions: tuple[tuple[str, int, int], ...] | None = None
    indexer_topk: np.ndarray | None = None
    prompt_token_ids: np.ndarray | None = None


@dataclass(eq=False)
class GenerateResponse:
    """A parsed, validated response: what every ``parse_*_response`` function returns.

    Attributes:
        choices: one :class:`GenerateChoice` per choice, in the response's order.
        request_id: the response's ``request_id`` (OpenAI-compatible: ``id``), as sent.
        usage: the response's ``usage``, as sent.
        prompt_token_ids: the prompt's ids (int64) when the response carries them, else None.
        payload: the response's other top-level fields, not validated.
        prompt_token_id_logprobs: vLLM's teacher scores (``prompt_token_id_logprobs``), a
            float32 ``(rows, K)`` matrix, when the response carries them, else None.
        prompt_routed_experts: the prompt's MoE routing (:class:`RoutedExperts`, one row per
            prompt token) when the response sends it apart from the choices' (vLLM 0.21's
            OpenAI-compatible ``prompt_routed_experts``), else None.
        format: the parser that read it: ``"generate"``, ``"completions"``, ``"chat"`` or
            ``"sglang"`` (None for a response built by hand). ``tokenwire.collate`` refuses a
            batch that mixes formats.
        top_k: the ``top_k`` it was parsed with (None: no heads were asked for).
            ``tokenwire.collate`` refuses a batch whose heads were asked for with different
            ``top_k``.

    Example:
        >>> body = b'{"request_id":"r1","choices":[{"token_ids":[5],"logprobs":null}]}'
        >>> response = tokenwire.parse_generate_response(body, require_logprobs=False)
        >>> response.request_id, len(response.choices), response.choices[0].completion_logprobs
        ('r1', 1, None)
        >>> response.format, response.top_k
        ('generate', None)
    """

    choices: list[GenerateChoice]
    request_id: Any
    usage: Any
    prompt_token_ids: np.ndarray | None
    payload: dict[str, Any]
    prompt_token_id_logprobs: np.ndarray | None = None
    format: str | None = None
    top_k: int | None = None
    prompt_routed_experts: RoutedExperts | None = None

    def to_arrow(self) -> Any:
        """The choices as a ``pyarrow.RecordBatch``, one row each (``tokenwire.arrow.record_batch``)."""
        from ..arrow import record_batch

        return record_batch(self)


@dataclass(eq=False, repr=False)
class Batch:
    """The choices of many responses as padded arrays, one row per choice: what
    ``tokenwire.collate`` returns. ``B`` is the number of choices (each response's in order),
    ``T`` the width (the longest completion, or ``width=``). Every array is C-contiguous and
    its own allocation; ``to_torch()`` shares them with torch, ``to_arrow()`` with Arrow.

    A field no choice has is None; when some choices have it, every row is there and the
    rows without it hold the fill, flagged False in the field's ``*_present`` array.

    Attributes:
        completion_ids: int64 ``(B, T)``, ``pad_id`` past each completion.
        lengths: int64 ``(B,)``, each completion's token count.
        mask: bool ``(B, T)``, True on the completion's tokens (``t < lengths[b]``).
        completion_logprobs: float32 ``(B, T)`` (float64 transports rounded), 0.0 past the
            completion and on rows without logprobs.
        logprobs_present: bool ``(B,)``: the choice has logprobs.
        completion_top_ids: int64 ``(B, T, K)``: token ``t``'s head left-aligned, ``pad_id``
            after it. ``K`` is ``head_width=``, else the ``top_k`` the responses were parsed
            with (without one, the widest head): a wider head (a sampling mask's support can
            be) keeps its ``K`` best entries, flagged in ``completion_top_truncated``.
        completion_top_logprobs: float32 ``(B, T, K)``, ``-inf`` past each head.
        completion_top_lengths: int64 ``(B, T)``: each head's entries in the tensor (at most
            ``K``; 0 past the completion).
        completion_top_truncated: bool ``(B, T)``: token ``t``'s head had more than ``K``
            entries and holds its ``K`` best (their probabilities no longer sum to the head's).
        heads_present: bool ``(B,)``: the choice has heads.
        sampling_mask: :class:`Ragged` of int32 with ``B * T`` rows, row ``b * T + t`` token
            ``t``'s kept set (empty past the completion and where the choice has no mask):
            CSR over the batch, not padded, as kept sets range from one id to thousands.
        sampling_mask_present: bool ``(B, T)``: token ``t`` has a kept set.
        routed_experts: ``(B, R, layers, topk)``, rows as sent (row ``r`` is sequence
            position ``start + r``, prompt included), -1 after them (no expert id is
            negative); ``R`` the most rows. Signed: int16 for uint8 and int16 routing, int32
            for uint16 and int32 (a uint8 id can be 255, so the fill needs the sign).
            ``collate(routing="tokens")`` leaves it out.
        completion_routed_experts: with ``collate(routing="tokens"|"both")``, ``(B, T, layers,
            topk)`` of the same dtype: completion token ``t``'s routing (its sequence position
            ``prompt + t`` less ``start``), -1 where it has none.
        completion_routed_present: bool ``(B, T)``: token ``t`` has a routing row (never the
            last token, which the engine does not forward; nowhere on a choice whose prompt
            length is unknown, as its rows cannot be placed).
        routed_experts_lengths: int64 ``(B,)``: each choice's routing rows.
        routed_experts_start: int64 ``(B,)``: each routing's ``start``, -1 where the
            response gave none (the ``.npy`` form) or the choice has no routing.
        routed_experts_present: bool ``(B,)``: the choice has routing.
        prompt_token_ids: int64 ``(B, P)``: the choice's response's prompt (a bare choice's
            own ``prompt_token_ids``, as ``validate`` and a trajectory give them), ``pad_id`` after it.
        prompt_lengths: int64 ``(B,)``.
        prompt_present: bool ``(B,)``: the prompt ids are known (a response that carries them).
        response: int64 ``(B,)``: the position in ``collate``'s input the row comes from
            (errors ``parse_many(errors="collect")`` left in the input counted).
        skipped: int64: the positions of the errors ``collate`` skipped in its input.
        errors: the errors ``collate`` skipped (``skipped``'s items, in order), each a
            :class:`MalformedResponseError` with its ``body_index``; ``parse_batch``'s
            malformed bodies with ``errors="collect"``.
        loss_mask: bool ``(B, T)``: the tokens the model sampled, from ``tokenwire.rollout_batch``
            (a multi-turn rollout's tool and environment tokens are False); None from ``collate``,
            where every completion token is the model's (``mask``).
        choice: int64 ``(B,)``: the choice's ``index``.
        finish_reason: each choice's ``finish_reason``, as sent.
        format: the responses' format (None when unknown).
        top_k: the ``top_k`` the responses were parsed with (None when unknown or none).
        pad_id: the id that pads ``completion_ids``, ``completion_top_ids`` and
            ``prompt_token_ids``.

    Example:
        >>> body = b'{"choices":[{"token_ids":[5,6],"logprobs":{"sampled":[-0.5,-1.0]}},{"token_ids":[7],"logprobs":{"sampled":[-2.0]}}]}'
        >>> batch = tokenwire.collate([tokenwire.parse_generate_response(body)], pad_id=-1)
        >>> batch.completion_ids.tolist(), batch.lengths.tolist(), batch.mask.tolist()
        ([[5, 6], [7, -1]], [2, 1], [[True, True], [True, False]])
        >>> batch.completion_logprobs.tolist(), batch.completion_top_ids
        ([[-0.5, -1.0], [-2.0, 0.0]], None)
    """

    completion_ids: np.ndarray
    lengths: np.ndarray
    mask: np.ndarray
    completion_logprobs: np.ndarray | None = None
    logprobs_present: np.ndarray | None = None
    completion_top_ids: np.ndarray | None = None
    completion_top_logprobs: np.ndarray | None = None
    completion_top_lengths: np.ndarray | None = None
    heads_present: np.ndarray | None = None
    completion_top_truncated: np.ndarray | None = None
    sampling_mask: Ragged | None = None
    sampling_mask_present: np.ndarray | None = None
    routed_experts: np.ndarray | None = None
    routed_experts_lengths: np.ndarray | None = None
    routed_experts_start: np.ndarray | None = None
    routed_experts_present: np.ndarray | None = None
    prompt_token_ids: np.ndarray | None = None
    prompt_lengths: np.ndarray | None = None
    prompt_present: np.ndarray | None = None
    response: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    choice: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    completion_routed_experts: np.ndarray | None = None
    completion_routed_present: np.ndarray | None = None
    skipped: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    loss_mask: np.ndarray | None = None
    finish_reason: list[Any] = field(default_factory=list)
    format: str | None = None
    top_k: int | None = None
    pad_id: int = 0
    errors: list[Any] = field(default_factory=list)

    def __len__(self) -> int:
        return int(self.completion_ids.shape[0])

    def arrays(self) -> dict[str, np.ndarray]:
        """Every array of the batch by name, None fields left out; the sampling mask as
        ``sampling_mask_values`` and ``sampling_mask_offsets`` (its CSR)."""
        out: dict[str, np.ndarray] = {}
        for name in _BATCH_ARRAYS:
            value = getattr(self, name)
            if isinstance(value, Ragged):
                out[f"{name}_values"], out[f"{name}_offsets"] = value.values, value.offsets
            elif value is not None:
                out[name] = value
        return out

    def to_torch(self, pin_memory: bool = False) -> BatchTensors:
        """Every array of the batch as a torch tensor over the same memory
        (``torch.from_numpy``: no copy), by name, and None for each field the batch lacks:
        the keys are the same for every batch (the sampling mask as ``sampling_mask_values``
        and ``sampling_mask_offsets``). ``pin_memory=True`` copies each into page-locked
        memory instead, for ``tensor.to("cuda", non_blocking=True)`` (torch needs CUDA for
        that). Needs torch (``pip install 'tokenwire[torch]'``)."""
        torch = _require("torch", "torch")
        arrays = self.arrays()
        tensors = {name: None if name not in arrays else torch.from_numpy(arrays[name]) for name in _torch_names()}
        if pin_memory:
            tensors = {name: None if t is None else t.pin_memory() for name, t in tensors.items()}
        return tensors  # type: ignore[return-value]

    def to_arrow(self) -> Any:
        """The batch as a ``pyarrow.RecordBatch``, one row per choice, for storage
        (``tokenwire.arrow.batch_record_batch``: the padded rows as lists over the same
        values, no copy of them)."""
        from ..arrow import batch_record_batch

        return batch_record_batch(self)

    def __repr__(self) -> str:
        shapes = ", ".join(f"{name}={tuple(array.shape)}" for name, array in self.arrays().items()
                           if name in ("completion_ids", "completion_top_ids", "routed_experts", "prompt_token_ids"))
        return f"Batch(choices={len(self)}, {shapes}, format={self.format!r}, top_k={self.top_k})"


# Batch's array fields, in order (the Ragged one exported as its values and offsets).
if TYPE_CHECKING:
    import torch


class _BatchTensorsAlways(TypedDict):
    completion_ids: torch.Tensor  # int64 [B, T], pad_id past each completion
    lengths: torch.Tensor  # int64 [B]
    mask: torch.Tensor  # bool [B, T]
    response: torch.Tensor  # int64 [B]: the position in collate's input
    choice: torch.Tensor  # int64 [B]: the choice's index


class BatchTensors(_BatchTensorsAlways, total=False):
    """What :meth:`Batch.to_torch` returns: a tensor per array of the batch (a field no choice
    has is left out; the sampling mask as its CSR values and offsets)."""

    completion_logprobs: torch.Tensor  # float32 [B, T]
    logprobs_present: torch.Tensor  # bool [B]
    completion_top_ids: torch.Tensor  # int64 [B, T, K]
    completion_top_logprobs: torch.Tensor  # float32 [B, T, K]
    completion_top_lengths: torch.Tensor  # int64 [B, T]
    heads_present: torch.Tensor  # bool [B]
    sampling_mask_values: torch.Tensor  # int32, the kept ids of the B * T rows
    sampling_mask_offsets: torch.Tensor  # int64 [B * T + 1]
    sampling_mask_present: torch.Tensor  # bool [B, T]
    routed_experts: torch.Tensor  # [B, R, layers, topk]
    routed_experts_lengths: torch.Tensor  # int64 [B]
    routed_experts_start: torch.Tensor  # int64 [B]
    routed_experts_present: torch.Tensor  # bool [B]
    prompt_token_ids: torch.Tensor  # int64 [B, P]
    prompt_lengths: torch.Tensor  # int64 [B]
    prompt_present: torch.Tensor  # bool [B]


_BATCH_ARRAYS = (
    "completion_ids", "lengths", "mask", "completion_logprobs", "logprobs_present",
    "completion_top_ids", "completion_top_logprobs", "completion_top_lengths", "heads_present",
    "sampling_mask", "sampling_mask_present", "routed_experts", "routed_experts_lengths",
    "routed_experts_start", "routed_experts_present", "prompt_token_ids", "prompt_lengths",
    "prompt_present", "response", "choice", "completion_top_truncated", "completion_routed_experts",
    "completion_routed_present", "skipped", "loss_mask",
)


def _torch_names() -> list[str]:
    """``to_torch``'s keys: every array field, the Ragged one as its values and offsets."""
    return [part for name in _BATCH_ARRAYS
            for part in ((f"{name}_values", f"{name}_offsets") if name == "sampling_mask" else (name,))]
