"""Result types, shared by the compiled core and the pure-Python reference."""

from __future__ import annotations

import importlib
import operator
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, overload

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
            picked = np.arange(start, stop, step)
            offsets = np.zeros(len(picked) + 1, dtype=np.int64)
            np.cumsum(np.diff(self.offsets)[picked], out=offsets[1:])
            parts = [self[int(r)] for r in picked]
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
        from . import _select

        rows: list[list[Any]] = _select.kernels.rows_to_lists(self.offsets, self.values)[0]
        return rows

    def to_padded(self, width: int | None = None, fill: Any = 0) -> tuple[np.ndarray, np.ndarray]:
        """The rows as one ``(rows, width)`` array of ``values``' dtype, each row left-aligned
        and filled with ``fill`` past its end, and the row lengths (int64 ``(rows,)``).

        ``width`` defaults to the longest row; a row longer than ``width`` raises
        ``ValueError`` (nothing is silently cut). For a head of log-probabilities, ``fill=-inf``
        keeps the padding out of a ``logsumexp``.
        """
        lengths = self.lengths()
        longest = int(lengths.max()) if len(lengths) else 0
        if width is None:
            width = longest
        elif width < longest:
            row = int(np.argmax(lengths))
            raise ValueError(f"row {row} has {longest} values, more than width {width}")
        out = np.full((len(lengths), width), fill, dtype=self.values.dtype)
        first = int(self.offsets[0]) if len(self.offsets) else 0
        flat = self.values[first : first + int(lengths.sum())]
        rows = np.repeat(np.arange(len(lengths)), lengths)
        columns = np.arange(len(flat)) - np.repeat(self.offsets[:-1] - first, lengths)
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

    def to_arrow(self) -> Any:
        """The choices as a ``pyarrow.RecordBatch``, one row each (``tokenwire.arrow.record_batch``)."""
        from .arrow import record_batch

        return record_batch(self)
