"""Result types, shared by the compiled core and the pure-Python reference."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["GenerateChoice", "GenerateResponse", "Ragged", "RoutedExperts"]


class Ragged:
    """Rows of different lengths in CSR form: row ``i`` is ``values[offsets[i]:offsets[i + 1]]``."""

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
        from . import _select

        rows: list[list[Any]] = _select.kernels.rows_to_lists(self.offsets, self.values)[0]
        return rows

    def __repr__(self) -> str:
        return f"Ragged(rows={len(self)}, values={len(self.values)}, dtype={self.values.dtype})"


@dataclass(eq=False)
class RoutedExperts:
    """MoE routing replay: ``array`` shaped ``(rows, layers, topk)``; ``start`` the prompt offset."""

    array: np.ndarray
    start: int | None = None


@dataclass(eq=False)
class GenerateChoice:
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
    choices: list[GenerateChoice]
    request_id: Any
    usage: Any
    prompt_token_ids: np.ndarray | None
    payload: dict[str, Any]
