"""The checks of a response's ids and logprobs that more than one drop-in makes: the ids as
their framework read them (a list), the logprobs as it read them (a list) or as a reader made
them (a float array); each refusal raised as that drop-in's own error class (a
``tokenwire.MalformedResponseError`` subclass), the ids' at choice 0, the logprobs' at the
``choice`` given (0 unless said; None names none)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..base._errors import MalformedResponseError
from ..base._wire import VLLM_LOGPROB_SENTINEL
from .renderers import _numbers

ID_LIMIT = 2**32


def check_ids(ids: Any, field: str, error: type[MalformedResponseError]) -> int:
    """How many ids ``ids`` holds; refused unless a list of ints in ``[0, 2**32)``."""
    if not isinstance(ids, list):
        raise error("must be a list of token ids", choice=0, field=field)
    if not set(map(type, ids)) <= {int} or (ids and (min(ids) < 0 or max(ids) >= ID_LIMIT)):
        t = next(t for t, i in enumerate(ids) if type(i) is not int or not 0 <= i < ID_LIMIT)
        raise error(f"token id {ids[t]!r} is not an int in [0, 2**32)", choice=0, field=field, token=t)
    return len(ids)


def check_logprobs(values: Any, field: str, error: type[MalformedResponseError], *, sentinel: bool,
                   choice: int | None = 0) -> np.ndarray:
    """``values`` (a list, or a float array a reader already made) as float64, refused unless
    each is a finite number (and, with ``sentinel``, none vLLM's -9999 for a missing or
    clamped logprob)."""
    if isinstance(values, np.ndarray) and values.dtype.kind == "f":
        array = values.astype(np.float64, copy=False)
    elif not isinstance(values, list):
        raise error("must be a list of numbers", choice=choice, field=field)
    else:
        array = _numbers(values)
    if array is None:
        numbers = [type(value) in (int, float) for value in values]
        if all(numbers):  # ints beyond float range
            raise error("a logprob is beyond float range", choice=choice, field=field)
        t = numbers.index(False)
        what = "missing (null)" if values[t] is None else f"{values[t]!r}, not a number"
        raise error(f"the sampled token's logprob is {what}", choice=choice, field=field, token=t)
    bad = ~np.isfinite(array)
    if sentinel:
        bad |= array == VLLM_LOGPROB_SENTINEL
    if bad.any():
        t = int(np.argmax(bad))
        value = float(array[t])
        what = "the sentinel -9999 (missing or clamped)" if value == VLLM_LOGPROB_SENTINEL else f"{value!r}, not finite"
        raise error(f"the sampled token's logprob is {what}", choice=choice, field=field, token=t)
    return array
