"""Result types, shared by the compiled core and the pure-Python reference."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["GenerateChoice", "GenerateResponse", "Ragged", "RoutedExperts"]


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
        offsets = np.zeros(len(rows) + 1, dtype=np.int64)
        np.cumsum([len(r) for r in rows], out=offsets[1:])
        values = np.fromiter((v for r in rows for v in r), dtype=dtype, count=int(offsets[-1]))
        return cls(offsets, values)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, i: int) -> np.ndarray:
        n = len(self)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"row {i} out of range for {n} rows")
        return self.values[self.offsets[i] : self.offsets[i + 1]]

    def __iter__(self) -> Iterator[np.ndarray]:
        for i in range(len(self)):
            yield self[i]

    def to_lists(self) -> list[list[Any]]:
        """The rows as Python lists (of ints, or of floats), as ``values.tolist()`` has them."""
        import tokenwire

        rows: list[list[Any]] = tokenwire._impl.rows_to_lists(self.offsets, self.values)[0]
        return rows

    def __repr__(self) -> str:
        return f"Ragged(rows={len(self)}, values={len(self.values)}, dtype={self.values.dtype})"


@dataclass(eq=False)
class RoutedExperts:
    """MoE routing replay: ``array`` shaped ``(rows, layers, topk)``; ``start`` the prompt offset.

    ``array`` holds expert ids (uint8, uint16 or int32, as sent) for every routed position:
    the prompt and the completion but its last token. ``start`` is the prompt offset of the
    first row for delta replay, None when the response gave none.

    Example:
        >>> experts = tokenwire.RoutedExperts(np.zeros((4, 2, 8), dtype=np.uint8), start=0)
        >>> experts.array.shape, experts.start
        ((4, 2, 8), 0)
    """

    array: np.ndarray
    start: int | None = None


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
        sampling_mask: the sampler's kept support per token (int32 :class:`Ragged`), if sent.
        routed_experts: MoE routing replay (:class:`RoutedExperts`), if sent.
        finish_reason: as sent (``"stop"``, ``"length"``, ...; SGLang's ``type``).
        raw: the choice's other fields, not validated.

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


@dataclass(eq=False)
class GenerateResponse:
    """A parsed, validated response: what every ``parse_*_response`` function returns.

    Attributes:
        choices: one :class:`GenerateChoice` per choice, in the response's order.
        request_id: the response's ``request_id`` (OpenAI-compatible: ``id``), as sent.
        usage: the response's ``usage``, as sent.
        prompt_token_ids: the prompt's ids (int64) when the response carries them, else None.
        payload: the response's other top-level fields, not validated.

    Example:
        >>> body = b'{"request_id":"r1","choices":[{"token_ids":[5],"logprobs":null}]}'
        >>> response = tokenwire.parse_generate_response(body, require_logprobs=False)
        >>> response.request_id, len(response.choices), response.choices[0].completion_logprobs
        ('r1', 1, None)
    """

    choices: list[GenerateChoice]
    request_id: Any
    usage: Any
    prompt_token_ids: np.ndarray | None
    payload: dict[str, Any]
