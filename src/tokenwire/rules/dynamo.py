"""NVIDIA Dynamo's engine channel on the OpenAI-compatible endpoints: ``nvext.engine_data``, the
engine's own completion ids, sampled logprobs, prompt ids and MoE routing of a response's one
choice (the request's ``nvext.extra_fields: ["engine_data"]``), ``nvext.completion_token_ids``,
the same ids on their own (``["completion_token_ids"]``), and ``nvext.routed_experts``, the
frontend's copy of the engine data's routing (``["routed_experts"]``).

The engine's ids and logprobs are the evidence: Dynamo writes the choice after its own
post-processing. The choice's ids are checked against the engine's (a difference is an error of
its own, naming both); its logprobs are read only where the engine sent none, or for a head,
whose candidates pair with the engine's tokens only through the ids their records name. The
parsers of :mod:`tokenwire.rules.openai` call these rules.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..base._table import KEY, OPENAI, ROOT, fields
from ..base._types import RoutedExperts
from ..base._wire import DYNAMO_LOGPROB_CLAMP
from ..extract.python import Evidence
from .arrays import NPY_MAGIC, bare_rows, check_experts, check_rows, parse_npy, routed_object, routed_rows
from .sources import IdSource, Logprobs, id_list

ENGINE = "nvext.engine_data"
ENGINE_IDS = f"{ENGINE}.completion_token_ids"
_ENGINE_LOGPROBS = f"{ENGINE}.completion_logprobs"
_ENGINE_PROMPT = f"{ENGINE}.prompt_token_ids"
_ENGINE_ROUTED = f"{ENGINE}.routed_experts"
NVEXT_IDS = f"{KEY.nvext}.{KEY.completion_token_ids}"
NVEXT_ROUTED = f"{KEY.nvext}.{KEY.routed_experts}"
# The members of the engine data its table rows read (they become attributes); the rest stays in
# the payload's nvext.
_ENGINE_CONSUMED = frozenset(
    f.path[2] for f in fields(ROOT, OPENAI) if f.path[:2] == (KEY.nvext, KEY.engine_data)
)
# The members at nvext's top its table rows read (``completion_token_ids``), likewise.
_NVEXT_CONSUMED = frozenset(f.path[1] for f in fields(ROOT, OPENAI) if len(f.path) == 2 and f.path[0] == KEY.nvext)
_POST_PROCESSED = (
    "Dynamo writes the choice after its own post-processing (a stop token it hides, text its "
    "tool-call and reasoning parsers hold back), so the choice cannot be paired with the engine's "
    "tokens position by position"
)


@dataclass
class Dynamo:
    """A response from NVIDIA Dynamo (it carries ``nvext``): its engine data (``data``, None
    when it sent none) and the top level's evidence that read it."""

    top: Evidence
    data: dict[str, Any] | None
    ids: bool = False  # nvext.completion_token_ids was sent
    routed: Any = None  # nvext.routed_experts, the frontend's copy of the engine's routing, as sent


def dynamo_of(document: dict[str, Any], top: Evidence | None, count: int) -> Dynamo | None:
    """The Dynamo side of a response (``top``: its top level's evidence), checked as a whole:
    ``nvext.engine_data`` is an object, and it and ``nvext.completion_token_ids`` only beside
    one choice (Dynamo keeps one per response, the last finished choice's)."""
    nvext = document.get(KEY.nvext)
    if top is None or nvext is None:
        return None
    data = nvext.get(KEY.engine_data) if isinstance(nvext, dict) else None
    ids = isinstance(nvext, dict) and nvext.get(KEY.completion_token_ids) is not None
    routed = nvext.get(KEY.routed_experts) if isinstance(nvext, dict) else None
    if data is not None and not isinstance(data, dict):
        top.fail(f"{ENGINE} must be an object", ENGINE)
    for sent, field in ((data is not None, ENGINE), (ids, NVEXT_IDS), (routed is not None, NVEXT_ROUTED)):
        if sent and count > 1:
            top.fail(f"{field} is one per response (Dynamo keeps the last finished choice's), so it cannot "
                     f"be attributed to one of {count} choices: request one choice (`n: 1`)", field)
    return Dynamo(top, data, ids, routed)


def engine_prompt(dynamo: Dynamo, prompt: np.ndarray | None, c: Evidence | None = None) -> np.ndarray | None:
    """The response's prompt ids: the top level's, and the engine's, which must be the same;
    with ``c``, a choice's evidence, ``prompt`` is the choice's (vLLM's completions send it per
    choice), which fails there when it is not the engine's."""
    data = dynamo.data
    if data is None or data.get(KEY.prompt_token_ids) is None:
        return prompt
    top = dynamo.top
    engine = id_list(top, top.engine_prompt_ids, _ENGINE_PROMPT).ids
    if prompt is not None and (len(prompt) != len(engine) or not np.array_equal(prompt, engine)):
        differ = np.flatnonzero(prompt[: len(engine)] != engine[: len(prompt)])
        where = (f"at token {int(differ[0])}" if len(differ) else
                 f"in length: {len(engine)} ids against {len(prompt)} ({len(prompt) - len(engine):+d})")
        (top if c is None else c).fail(
            f"the engine's prompt ids ({_ENGINE_PROMPT}) and the {'response' if c is None else 'choice'}'s "
            f"(prompt_token_ids) differ {where}", "prompt_token_ids", int(differ[0]) if len(differ) else None)
    return engine


def engine_sources(dynamo: Dynamo | None) -> tuple[IdSource | None, Logprobs | None]:
    """The engine's completion ids (the engine data's, else ``nvext.completion_token_ids``; the
    two the same when both are sent) and sampled logprobs, each None when not sent. (Their
    faults are the top level's: the engine data is beside the choices, not in one.)"""
    if dynamo is None:
        return None, None
    top = dynamo.top
    alone = id_list(top, top.nvext_token_ids, NVEXT_IDS) if dynamo.ids else None
    data = dynamo.data
    if data is None:
        return alone, None
    if data.get("finished") is False:
        top.fail(f"{ENGINE}.finished is false: the engine ended the generation with an error", f"{ENGINE}.finished")
    ids = id_list(top, top.engine_token_ids, ENGINE_IDS) if data.get(KEY.completion_token_ids) is not None else None
    logprobs = None
    if data.get(KEY.completion_logprobs) is not None:
        read = top.engine_logprobs
        if read is None:
            top.fail(f"{_ENGINE_LOGPROBS} must be a list of numbers", _ENGINE_LOGPROBS)
        sent = read.numbers
        logprobs = Logprobs(_ENGINE_LOGPROBS, read.length, sent.values, sent.bad, sent, "logprob",
                            clamp=DYNAMO_LOGPROB_CLAMP)
    if ids is not None and alone is not None:
        _same_ids(top, ids, alone, "the ones at nvext's top", "")
    return ids if ids is not None else alone, logprobs


def _same_ids(c: Evidence, engine: IdSource, source: IdSource, whose: str, why: str) -> None:
    """``source`` (``whose`` ids) holds the engine's ids: as many, the same at every position."""
    if len(source.ids) != len(engine.ids):
        c.fail(f"the engine's completion ids and {whose} differ in length: {engine.field} has "
               f"{len(engine.ids)}, {source.field} has {len(source.ids)} ({len(source.ids) - len(engine.ids):+d})"
               f"{why}", source.field)
    differ = np.flatnonzero(source.ids != engine.ids)
    if len(differ):
        at = int(differ[0])
        c.fail(f"the engine's completion ids and {whose} differ at token {at}: {engine.field} has "
               f"{int(engine.ids[at])}, {source.field} has {int(source.ids[at])}", source.field, at)


def check_engine(c: Evidence, dynamo: Dynamo, ids: IdSource | None, logprobs: Logprobs | None,
                 sources: list[IdSource], choice_logprobs: Logprobs | None) -> None:
    """The engine's ids and logprobs agree with each other in count, and every id source of the
    choice holds the engine's ids. The choice's logprobs are the sampled evidence only where the
    engine sent none: then as many as the engine's ids. Beside the engine's own they are
    neither required nor compared: Dynamo wrote them after its post-processing, and the
    engine's are what was sampled (the consumers of the engine data, NeMo-Gym's among them,
    take the engine's and leave the choice's)."""
    if ids is not None and logprobs is not None and logprobs.count != len(ids.ids):
        held = (f"{ENGINE} has {len(ids.ids)} completion_token_ids but" if ids.field == ENGINE_IDS else
                f"{ids.field} has {len(ids.ids)} ids but {ENGINE} has")
        dynamo.top.fail(f"{held} {logprobs.count} completion_logprobs ({logprobs.count - len(ids.ids):+d})",
                        _ENGINE_LOGPROBS)
    for source in sources if ids is not None else ():
        _same_ids(c, ids, source, "the choice's", f"; {_POST_PROCESSED}")
    if logprobs is None and ids is not None and choice_logprobs is not None and choice_logprobs.count != len(ids.ids):
        count = len(ids.ids)
        c.fail(f"the engine's completion ids and the choice's logprobs differ in count: {ids.field} has {count}, "
               f"{choice_logprobs.field} has {choice_logprobs.count} ({choice_logprobs.count - count:+d}); "
               f"{_POST_PROCESSED}", choice_logprobs.field)


def unpaired_head(c: Evidence, choice_logprobs: Logprobs) -> None:
    """A head asked of a response whose sampled logprobs are the engine's: its candidates are
    the choice's, which pair with the engine's tokens only through the ids its records name
    (checked against the engine's, token by token); records of text name none."""
    c.fail(f"Missing requested top logprobs: the sampled logprobs are the engine's ({_ENGINE_LOGPROBS}), and the "
           f"choice's candidates ({choice_logprobs.field}) pair with its tokens only through the ids their records "
           f"name, which these records do not; {_POST_PROCESSED}. For a head, set `return_tokens_as_token_ids: true` "
           "in the request: each record and candidate then names its token (\"token_id:N\"), checked against the "
           "engine's", "logprobs")


def engine_routing(dynamo: Dynamo | None, n: int, prompt: int | None, num_experts: int | None,
                   shape: tuple[int, int] | None = None, start: int = 0) -> RoutedExperts | None:
    """The engine's MoE routing of a choice of ``n`` tokens: ``nvext.engine_data.routed_experts``,
    else the frontend's copy at ``nvext.routed_experts`` (both sent: the same value). Its form is
    the worker's: vLLM's object ``{data, shape, start, dtype}`` (the generate endpoint's object
    reader; with the ``prompt``'s length known, its rows counted by the rule of the choice's
    routing, :func:`~tokenwire.rules.arrays.routed_rows`, from its ``start`` on), or SGLang's
    bare base64 int32 string (SGLang's rules, :func:`~tokenwire.rules.arrays.bare_rows`, with
    the request's ``shape`` and ``start``: ``routed_experts_shape``,
    ``routed_experts_start_len``). Expert ids below ``num_experts`` when given."""
    if dynamo is None:
        return None
    data = dynamo.data
    engine = data.get(KEY.routed_experts) if data is not None else None
    top = dynamo.top
    if engine is not None:
        routed = _routing_of(top, engine, top.engine_routed, top.engine_routed_data, _ENGINE_ROUTED, n, prompt,
                             num_experts, shape, start)
        if dynamo.routed is not None:
            _same_routing(top, engine, dynamo.routed)
        return routed
    if dynamo.routed is not None:
        return _routing_of(top, dynamo.routed, top.nvext_routed, top.nvext_routed_data, NVEXT_ROUTED, n, prompt,
                           num_experts, shape, start)
    return None


def _routing_of(top: Evidence, value: Any, string: np.ndarray | None, data: np.ndarray | None, field: str, n: int,
                prompt: int | None, num_experts: int | None, shape: tuple[int, int] | None,
                start: int) -> RoutedExperts:
    """One copy of the engine's routing at ``field`` (``string``, ``data``: the decoded bytes
    of the string form, of the object form's ``data``)."""
    if isinstance(value, str) and string is not None and bytes(string[:6]) == NPY_MAGIC:
        # vLLM's engine-generate adapter: a whole .npy file, as on choices[].routed_experts (a
        # bare int32 array starting so would open on expert id 1,297,436,307: no routing does)
        array = parse_npy(string, top, field)
        rows, counted = routed_rows(n, prompt)
        check_rows(top, array, field, rows, counted)
        check_experts(array, num_experts, top, field)
        return RoutedExperts(array, None)
    if isinstance(value, str):  # SGLang's worker passes SGLang's own routing on as it is
        array = bare_rows(top, value, string, field, n, prompt, start, shape, "the prompt's",
                          "the prompt's length is not known (no prompt ids, no usage.prompt_tokens, or check_usage "
                          "is off)")
        check_experts(array, num_experts, top, field)
        return RoutedExperts(array, start)
    if not isinstance(value, dict):
        top.fail(f"{field} must be an object (vLLM's worker) or a base64 string of int32 values (SGLang's)", field)
    routed = routed_object(value, data, top, field, num_experts)
    rows, counted = routed_rows(n, prompt, start=routed.start or 0)
    check_rows(top, routed.array, field, rows, counted)
    return routed


def _same_routing(top: Evidence, engine: Any, copy: Any) -> None:
    """The frontend's copy (``nvext.routed_experts``) is the engine data's value, cloned:
    the same form, the same decoded bytes, the same shape, start and dtype."""
    why = None
    if isinstance(engine, str) != isinstance(copy, str) or isinstance(engine, dict) != isinstance(copy, dict):
        why = f"one is {type(engine).__name__}, the other {type(copy).__name__}"
    elif isinstance(engine, str):
        why = _bytes_differ(top.engine_routed, top.nvext_routed)
    else:
        keys = sorted(set(engine) | set(copy), key=str)
        differ = [key for key in keys if key != "data" and _spelled(engine.get(key)) != _spelled(copy.get(key))]
        if differ:
            why = f"{differ[0]} {engine.get(differ[0])!r} against {copy.get(differ[0])!r}"
        elif (engine.get("data") is None) != (copy.get("data") is None):
            why = "one has data, the other none"
        else:
            why = _bytes_differ(top.engine_routed_data, top.nvext_routed_data)
    if why is not None:
        top.fail(f"{NVEXT_ROUTED} differs from {_ENGINE_ROUTED}, of which Dynamo's frontend sends a copy: {why}",
                 NVEXT_ROUTED)


def _spelled(value: Any) -> str:
    """A parsed JSON value as JSON: ``1`` and ``true``, ``8`` and ``8.0``, are not the same member."""
    return json.dumps(value, sort_keys=True)


def _bytes_differ(engine: np.ndarray | None, copy: np.ndarray | None) -> str | None:
    """How two decoded base64 values differ (None: they do not; a value that is no canonical
    base64 decodes to None)."""
    if copy is None and engine is not None:
        return "its base64 is not canonical"
    if engine is None or copy is None:
        return None  # the engine's own fault, reported by its reader
    if len(engine) != len(copy):
        return f"{len(engine)} bytes against {len(copy)}"
    at = np.flatnonzero(engine != copy)
    return f"first at byte {int(at[0])}" if len(at) else None


def engine_payload(document: dict[str, Any], dynamo: Dynamo | None, payload: dict[str, Any]) -> None:
    """What was read leaves the response's payload: ``nvext.engine_data`` keeps the rest, and
    ``nvext`` loses ``completion_token_ids`` and ``routed_experts``."""
    if dynamo is None or (dynamo.data is None and not dynamo.ids and dynamo.routed is None):
        return
    nvext = {key: value for key, value in document[KEY.nvext].items()
             if value is None or key not in _NVEXT_CONSUMED}
    if dynamo.data is not None:
        nvext[KEY.engine_data] = {key: value for key, value in dynamo.data.items() if key not in _ENGINE_CONSUMED}
    payload[KEY.nvext] = nvext
