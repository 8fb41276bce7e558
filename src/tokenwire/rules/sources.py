"""What the OpenAI-compatible rules (and Dynamo's engine data) share about a choice's token ids
and sampled logprobs: an id source, the logprobs with their candidates, and the rules that
hold between them (one id per logprob, every source naming the same ids, every logprob
sampling evidence)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..base._wire import LLAMA_LOGPROB_LOG0, VLLM_LOGPROB_SENTINEL
from ..extract.python import Evidence, Numbers, numbers
from .generate import checked_int_list

IDS_REASON = "must hold token ids in [0, 2**32)"
UNNAMED_RECORD = "logprob entry names no token id in [0, 2**32) while other entries do"


@dataclass
class IdSource:
    field: str
    ids: np.ndarray


@dataclass
class Logprobs:
    """The sampled-token logprobs of a choice: where they are, their values, and the
    candidates each token's head is built from (read only when a head is requested)."""

    field: str  # e.g. "logprobs.token_logprobs"
    count: int
    values: np.ndarray  # float64, the values before ``bad``
    bad: int | None  # first value that is not a number
    raw: list[Any] | Any  # the values as sent, to name a bad one
    key: str  # "logprob", "sampling_logprob", ...
    heads: Any = None  # a callable(c, k, ids, values) -> (top_ids, top_logprobs)
    clamp: float | None = None  # another value the server writes for a non-finite logprob


def id_list(c: Evidence, parsed: tuple[np.ndarray, int, int | None] | None, field: str) -> IdSource:
    """A JSON list of token ids as its evidence read it (the generate endpoint's
    ``token_ids`` rules)."""
    return IdSource(field, checked_int_list(c, parsed, field, f"{field} {IDS_REASON}"))


def numbers_of(values: list[Any] | Numbers) -> tuple[np.ndarray, int | None]:
    """Record values as numbers: read already (the compiled extractor), or now."""
    return (values.values, values.bad) if isinstance(values, Numbers) else numbers(values)


def element(values: list[Any] | Numbers, index: int) -> Any:
    """The value ``index`` as sent (to name a bad one)."""
    return values.example if isinstance(values, Numbers) else values[index]


def id_array(ids: list[int | None] | np.ndarray) -> np.ndarray:
    """Ids named by records as int64, -1 where a record names none (a list holds None)."""
    if isinstance(ids, list):
        return np.array([-1 if token_id is None else token_id for token_id in ids], dtype=np.int64)
    return ids


def ids_from_records(
    c: Evidence, ids: list[int | None] | np.ndarray, field: str, reason: str
) -> IdSource | None:
    """The ids the records name (None or -1: a record naming none): none at all (None), or
    one for every record (else ``reason`` at the first record naming none)."""
    ids = id_array(ids)
    missing = np.flatnonzero(ids < 0)
    if len(missing) == len(ids):
        return None
    if len(missing):
        c.fail(reason, field, int(missing[0]))
    return IdSource(field, ids)


def check_alignment(
    c: Evidence, sources: list[IdSource], logprobs: Logprobs | None, prompt: np.ndarray | None = None
) -> None:
    """Every id source has one id per logprob, and all of them name the same ids."""
    if logprobs is not None:
        for source in sources:
            if len(source.ids) != logprobs.count:
                diff = logprobs.count - len(source.ids)
                echo = ""
                if prompt is not None and len(prompt) and diff == len(prompt):
                    echo = (
                        f"; the {diff} extra logprobs match the prompt's length, as in responses "
                        "to `echo: true` requests, which carry the prompt's logprobs too"
                    )
                c.fail(
                    f"completion has {len(source.ids)} token ids but {logprobs.count} logprobs "
                    f"({diff:+d}): ids from {source.field}, logprobs from {logprobs.field}{echo}",
                    source.field,
                )
    first = sources[0]
    for source in sources[1:]:
        if len(source.ids) != len(first.ids):
            c.fail(
                f"token id sources disagree in length: {first.field} has {len(first.ids)} ids, "
                f"{source.field} has {len(source.ids)} ({len(source.ids) - len(first.ids):+d})",
                source.field,
            )
        differ = np.flatnonzero(source.ids != first.ids)
        if len(differ):
            at = int(differ[0])
            c.fail(
                f"token id sources disagree at token {at}: {first.field} has "
                f"{int(first.ids[at])}, {source.field} has {int(source.ids[at])}",
                source.field,
                at,
            )


def check_values(c: Evidence, logprobs: Logprobs) -> np.ndarray:
    """Every sampled-token logprob is sampling evidence: a finite number, not vLLM's -9999
    sentinel (a missing or clamped value), not llama.cpp's log(0) (-FLT_MAX), not positive. The
    first bad token wins."""
    values = logprobs.values
    unusable = ~np.isfinite(values) | (values == VLLM_LOGPROB_SENTINEL) | (values == LLAMA_LOGPROB_LOG0) | (values > 1e-6)
    if logprobs.clamp is not None:
        unusable |= values == logprobs.clamp
    bad = np.flatnonzero(unusable)
    at = int(bad[0]) if len(bad) else None
    key = logprobs.key
    if at is None and logprobs.bad is not None:
        at = logprobs.bad
        value = element(logprobs.raw, at)
        if value is None:
            c.fail(f"{key} is null: the token carries no sampling evidence", logprobs.field, at)
        c.fail(f"{key} must be a number, not {type(value).__name__}", logprobs.field, at)
    if at is not None:
        value = float(values[at])
        if not math.isfinite(value):
            c.fail(f"{key} must be finite", logprobs.field, at)
        if value == VLLM_LOGPROB_SENTINEL:
            c.fail(
                f"{key} is the -9999 sentinel (missing or clamped): the token carries no "
                "sampling evidence",
                logprobs.field,
                at,
            )
        if value == LLAMA_LOGPROB_LOG0:
            c.fail(f"{key} is {value:g}, the lowest float, which llama.cpp's server writes for log(0): the token "
                   "carries no sampling evidence", logprobs.field, at)
        if value == logprobs.clamp:
            c.fail(f"{key} is {value:g}, Dynamo's stand-in for a non-finite logprob: the token carries no "
                   "sampling evidence", logprobs.field, at)
        c.fail(f"{key} cannot be positive ({value!r})", logprobs.field, at)
    return values
