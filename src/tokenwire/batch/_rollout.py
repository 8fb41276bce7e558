"""Multi-turn rollouts held as growing arrays: ``Trajectory`` appends each turn's evidence
(a parsed choice, ``validate``'s result, or tool and environment tokens without logprobs)
to one sequence, and ``rollout_batch`` hands a step's trajectories to the loss as a
``Batch``, with no Python object per token anywhere.

The arrays grow by doubling their capacity (amortized O(1) per token, at most twice the
memory in use); what is handed out are views of the tokens so far.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from ..base._args import int_array
from ._batch import collate
from ..base._errors import MalformedResponseError
from ..base._types import Batch, GenerateChoice, GenerateResponse, Ragged, RoutedExperts
from ..base._wire import MAX_TOKEN_ID

__all__ = ["Trajectory", "rollout_batch"]


class _Growing:
    """An array that grows along its first axis by doubling its capacity."""

    __slots__ = ("data", "size")

    def __init__(self, dtype: Any, row: tuple[int, ...] = ()) -> None:
        self.data = np.empty((16, *row), dtype=dtype)
        self.size = 0

    def reserve(self, more: int) -> None:
        need = self.size + more
        if need > len(self.data):
            grown = np.empty((max(need, 2 * len(self.data)), *self.data.shape[1:]), dtype=self.data.dtype)
            grown[: self.size] = self.data[: self.size]
            self.data = grown

    def extend(self, values: Any) -> None:
        values = np.asarray(values)
        self.reserve(len(values))
        self.data[self.size : self.size + len(values)] = values
        self.size += len(values)

    def fill(self, count: int, value: Any) -> None:
        self.reserve(count)
        self.data[self.size : self.size + count] = value
        self.size += count

    def view(self) -> np.ndarray:
        return self.data[: self.size]


class Trajectory:
    """One multi-turn rollout: the tokens of every turn back to back (prompt, completion, tool
    output, next prompt's new tokens, completion, ...) as growing arrays.

    Per token: ``ids`` (int64), ``logprobs`` (float32; 0.0 on tokens the model did not
    sample), ``loss_mask`` (bool: the model sampled it), a sampling-mask row (empty where none
    was recorded) with ``sampling_mask_present``. The MoE routing rows of every turn are
    stitched into one ``(rows, layers, topk)`` array: row ``r`` is sequence position
    ``routing_start + r``.

    ``append(turn)`` adds a model turn; its prompt must extend the trajectory (the tokens so
    far are its prefix: the rest of it, the tool output and the chat template's tokens, joins
    as tokens the model did not sample), and its routing rows must begin where the
    trajectory's end (SGLang's ``routed_experts_start_len``, vLLM's ``start``): a turn that
    contradicts the trajectory raises ``MalformedResponseError`` naming the turn, the field
    and the position, and leaves the trajectory as it was.

    Example:
        >>> t = tokenwire.Trajectory([1, 2, 3])
        >>> t.append(tokenwire.validate(completion_ids=[7, 8], completion_logprobs=[-0.5, -0.25]))
        >>> t.append_tokens([40, 41])  # a tool's output
        >>> t.append(tokenwire.validate(completion_ids=[9], completion_logprobs=[-1.0],
        ...                             prompt_token_ids=[1, 2, 3, 7, 8, 40, 41, 50]))
        >>> t.ids.tolist(), t.loss_mask.astype(int).tolist()
        ([1, 2, 3, 7, 8, 40, 41, 50, 9], [0, 0, 0, 1, 1, 0, 0, 0, 1])
        >>> t.prompt_length, t.turns
        (3, 2)
    """

    def __init__(self, prompt_token_ids: Any = None) -> None:
        self._ids = _Growing(np.int64)
        self._logprobs = _Growing(np.float32)
        self._loss = _Growing(np.bool_)
        self._mask_offsets = _Growing(np.int64)
        self._mask_offsets.fill(1, 0)
        self._mask_values = _Growing(np.int32)
        self._mask_present = _Growing(np.bool_)
        self._has_mask = False
        self._routing: _Growing | None = None
        self.routing_start: int | None = None
        self.turns = 0
        self.prompt_length: int | None = None
        if prompt_token_ids is not None:
            self._tokens(_token_ids(prompt_token_ids, "prompt_token_ids"))

    # --- what is held ------------------------------------------------------------------------

    def __len__(self) -> int:
        return self._ids.size

    @property
    def ids(self) -> np.ndarray:
        return self._ids.view()

    @property
    def logprobs(self) -> np.ndarray:
        return self._logprobs.view()

    @property
    def loss_mask(self) -> np.ndarray:
        return self._loss.view()

    @property
    def sampling_mask(self) -> Ragged | None:
        """Each token's kept set (int32 rows, empty where none was recorded), or None when no
        turn recorded one."""
        return Ragged(self._mask_offsets.view(), self._mask_values.view()) if self._has_mask else None

    @property
    def sampling_mask_present(self) -> np.ndarray | None:
        return self._mask_present.view() if self._has_mask else None

    @property
    def routed_experts(self) -> RoutedExperts | None:
        """The routing rows of every turn, stitched: row ``r`` is position ``routing_start + r``."""
        if self._routing is None:
            return None
        return RoutedExperts(self._routing.view(), self.routing_start)

    @property
    def routing_end(self) -> int | None:
        """The position after the last routing row (a next turn's rows begin there)."""
        return None if self._routing is None else int(self.routing_start or 0) + self._routing.size

    # --- appending ------------------------------------------------------------------------------

    def _tokens(self, ids: np.ndarray) -> None:
        n = len(ids)
        self._ids.extend(ids)
        self._logprobs.fill(n, 0.0)
        self._loss.fill(n, False)
        self._mask_offsets.fill(n, self._mask_values.size)
        self._mask_present.fill(n, False)

    def append_tokens(self, token_ids: Any) -> None:
        """Tokens the model did not sample (a tool's output, an environment's reply, a chat
        template's turn markers): no logprob (0.0), out of the loss, no sampling mask."""
        self._tokens(_token_ids(token_ids, "token_ids"))

    def append(self, turn: GenerateChoice | GenerateResponse, *, prompt_token_ids: Any = None) -> None:
        """Append a model turn: a :class:`GenerateChoice` (a parsed response's, or
        ``tokenwire.validate``'s) or a one-choice :class:`GenerateResponse`.

        The turn's prompt (``prompt_token_ids=``, else the choice's ``prompt_token_ids``,
        else the response's; none: the trajectory so far) must start with the trajectory's
        tokens; its other tokens join first, out of the loss. Then the completion: its ids,
        logprobs (required) and sampling-mask rows, in the loss. Its routing rows, when sent,
        must begin at the trajectory's routing end (``start``; the first turn's may begin
        anywhere) and number one per prompt and completion token but the last from there,
        of the same ``(layers, topk)``.

        Raises:
            MalformedResponseError: the turn contradicts the trajectory (``field``
                ``prompt_token_ids`` or ``routed_experts``, ``token`` the sequence position).
            ValueError, TypeError: not a turn, a response of several choices, a turn
                without logprobs.
        """
        choice, prompt = _turn(turn, prompt_token_ids)
        turn_number = self.turns
        held = self._ids.view()
        if prompt is None:
            prompt = held
        context = len(held)
        if len(prompt) < context or not np.array_equal(prompt[:context], held):
            short = min(len(prompt), context)
            differ = np.flatnonzero(prompt[:short] != held[:short])
            at = int(differ[0]) if len(differ) else short
            seen = "ends there" if at >= len(prompt) else f"has {int(prompt[at])}"
            raise MalformedResponseError(
                f"turn {turn_number}'s prompt does not extend the trajectory: at position {at} the trajectory has "
                f"{int(held[at])} and the prompt {seen} (a turn's prompt must start with every token so far)",
                field="prompt_token_ids", token=at)
        ids = np.asarray(choice.completion_ids)
        if choice.completion_logprobs is None:
            raise ValueError(f"turn {turn_number} has no logprobs: a model turn needs them "
                             "(append_tokens adds tokens the model did not sample)")
        logprobs = np.asarray(choice.completion_logprobs)
        if logprobs.shape != ids.shape or ids.ndim != 1:
            raise ValueError(f"turn {turn_number} has {logprobs.shape} logprobs for {ids.shape} ids")
        mask = choice.sampling_mask
        if mask is not None and len(mask) != len(ids):
            raise ValueError(f"turn {turn_number}'s sampling_mask has {len(mask)} rows for {len(ids)} tokens")
        routing = self._routing_rows(choice.routed_experts, len(prompt), len(ids), turn_number)
        # Every check passed: the trajectory changes only now.
        if len(prompt) > context:
            self._tokens(np.asarray(prompt[context:], dtype=np.int64))
        if self.prompt_length is None:
            self.prompt_length = len(self._ids.view())
        self._ids.extend(ids)
        self._logprobs.extend(logprobs)
        self._loss.fill(len(ids), True)
        if mask is None:
            self._mask_offsets.fill(len(ids), self._mask_values.size)
            self._mask_present.fill(len(ids), False)
        else:
            self._has_mask = True
            offsets = np.asarray(mask.offsets, dtype=np.int64)
            first = int(offsets[0]) if len(offsets) else 0
            self._mask_offsets.extend(offsets[1:] - first + self._mask_values.size)
            self._mask_values.extend(np.asarray(mask.values)[first : int(offsets[-1])])
            present = choice.sampling_mask_present
            self._mask_present.extend(np.diff(offsets) > 0 if present is None else present)
        if routing is not None:
            rows, start = routing
            if self._routing is None:
                self._routing = _Growing(rows.dtype, rows.shape[1:])
                self.routing_start = start
            wide = np.result_type(self._routing.data.dtype, rows.dtype)
            if wide != self._routing.data.dtype:  # a turn of a wider dtype: every row held widens
                self._routing.data = self._routing.data.astype(wide)
            self._routing.extend(rows)
        self.turns += 1

    def _routing_rows(self, routed: RoutedExperts | None, prompt: int, n: int,
                      turn: int) -> tuple[np.ndarray, int] | None:
        if routed is None:
            return None
        rows = np.asarray(routed.array)
        start = 0 if routed.start is None else int(routed.start)
        end = self.routing_end
        if end is not None and start != end:
            kind = "a gap: positions" if start > end else "an overlap: positions"
            span = f"{end}..{start - 1} have no row" if start > end else f"{start}..{end - 1} have rows already"
            raise MalformedResponseError(
                f"turn {turn}'s routing rows start at position {start} but the trajectory's end at {end} ({kind} "
                f"{span}); ask the engine for rows from {end} (SGLang's routed_experts_start_len, vLLM's start)",
                field="routed_experts", token=start)
        expected = prompt + n - 1 - start
        if rows.ndim != 3 or rows.shape[0] != expected:
            raise MalformedResponseError(
                f"turn {turn}'s routing has {rows.shape[0] if rows.ndim else 0} rows, not {expected}: one per position "
                f"from {start} to the prompt ({prompt}) and completion ({n}) tokens but the last",
                field="routed_experts", token=start)
        if self._routing is not None and rows.shape[1:] != self._routing.data.shape[1:]:
            raise MalformedResponseError(
                f"turn {turn}'s routing rows are {rows.shape[1:]} (layers, topk), the trajectory's "
                f"{self._routing.data.shape[1:]}", field="routed_experts", token=start)
        return rows, start

    # --- handing out --------------------------------------------------------------------------------

    def choice(self, index: int = 0) -> GenerateChoice:
        """The trajectory as one choice (views, no copy): the first turn's prompt as
        ``prompt_token_ids``, every token after it as the completion (``completion_logprobs``
        0.0 on the tokens the model did not sample; ``loss_mask`` says which it did)."""
        if self.prompt_length is None:
            raise ValueError("the trajectory has no model turn yet")
        p = self.prompt_length
        mask = self.sampling_mask
        present = self.sampling_mask_present
        return GenerateChoice(
            index=index,
            completion_ids=self.ids[p:],
            completion_logprobs=self.logprobs[p:],
            sampling_mask=None if mask is None else mask[p:],
            sampling_mask_present=None if present is None else present[p:],
            routed_experts=self.routed_experts,
            prompt_token_ids=self.ids[:p],
        )


def _token_ids(values: Any, name: str) -> np.ndarray:
    return int_array(values, name, np.int64, 0, MAX_TOKEN_ID)


def _turn(turn: Any, prompt: Any) -> tuple[GenerateChoice, np.ndarray | None]:
    response = None
    if isinstance(turn, GenerateResponse):
        if len(turn.choices) != 1:
            raise ValueError(f"a turn is one choice: this response has {len(turn.choices)} "
                             "(append response.choices[i])")
        response, turn = turn, turn.choices[0]
    if not isinstance(turn, GenerateChoice):
        raise TypeError(f"a turn is a GenerateChoice or a one-choice GenerateResponse, not {type(turn).__name__}")
    if prompt is None:
        prompt = turn.prompt_token_ids if turn.prompt_token_ids is not None else (
            None if response is None else response.prompt_token_ids)
    return turn, None if prompt is None else _token_ids(prompt, "prompt_token_ids")


def rollout_batch(trajectories: Iterable[Trajectory], **collate_options: Any) -> Batch:
    """A step's trajectories as one :class:`Batch`, a row each (``tokenwire.collate`` of
    their :meth:`Trajectory.choice`, with its options), and ``loss_mask`` (bool ``(B, T)``):
    the tokens the model sampled. ``batch.to_torch()`` and ``batch.to_arrow()`` hand it on.

    Example:
        >>> t = tokenwire.Trajectory([1, 2])
        >>> t.append(tokenwire.validate(completion_ids=[7, 8], completion_logprobs=[-0.5, -0.25]))
        >>> t.append_tokens([40])
        >>> batch = tokenwire.rollout_batch([t], pad_id=-1)
        >>> batch.completion_ids.tolist(), batch.loss_mask.tolist()
        ([[7, 8, 40]], [[True, True, False]])
    """
    held = list(trajectories)
    for i, t in enumerate(held):
        if not isinstance(t, Trajectory):
            raise TypeError(f"item {i} is a {type(t).__name__}, not a Trajectory")
    batch = collate([t.choice(i) for i, t in enumerate(held)], **collate_options)
    loss = np.zeros(batch.completion_ids.shape, dtype=np.bool_)
    for b, t in enumerate(held):
        part = t.loss_mask[t.prompt_length or 0 :]
        loss[b, : len(part)] = part
    batch.loss_mask = loss
    return batch
