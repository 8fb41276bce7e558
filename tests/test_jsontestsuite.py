"""JSONTestSuite through every parser: each case embedded as the value of a member tokenwire
skips (at the top level, in a choice, in the objects a format reads its records from), and
as the whole body, on both implementations and every SIMD path (the ``impl`` fixture).

A ``y_`` case leaves the result as it was without the member; an ``n_`` case is refused as
invalid JSON (a ``MalformedResponseError`` whose reason starts "invalid JSON", at no choice
or field); an ``i_`` case is accepted or refused as ``I_DECISIONS`` lists. The cases are
tests/jsontestsuite.py's table (the suite's names and bytes at a pinned commit)."""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path

import numpy as np
import pytest

import tokenwire
from tokenwire import MalformedResponseError, samples

from .jsontestsuite import ACCEPT, I_DECISIONS, IMPLEMENTATION_DEFINED, REFUSE, cases

# The member each case becomes the value of: dumped as "jts":0, then its 0 replaced.
_KEY = "jts"
_MARK = b'"jts":0'


def _dumps(document) -> bytes:
    return json.dumps(document, separators=(",", ":")).encode()


def _with_member(obj: dict) -> dict:
    """``obj`` with the marked member first (the case's bytes are then followed by a comma
    and the rest of the object)."""
    return {_KEY: 0, **obj}


def _generate_bases() -> dict[str, tuple[bytes, dict]]:
    """Generate responses, each with the member in one place: name -> (template, parse
    options). packed: the plain path; compact with a CSR mask: the rules; native: the
    records read during the scan, with a head."""
    out = {}
    ev = samples.evidence(3, 4, seed=1)
    ev_mask = samples.evidence(3, 4, seed=2, support=True)
    packed = samples.build_choice(ev, transport="packed")
    compact = samples.build_choice(ev_mask, transport="compact", mask="csr")
    native = samples.build_choice(ev, transport="native")
    for name, choice, options in (("packed", packed, {}), ("compact", compact, {"top_k": 2}),
                                  ("native", native, {"top_k": 2})):
        out[f"generate-{name}/root"] = (_with_member(samples.response([choice], prompt_tokens=2)), options)
        out[f"generate-{name}/choice"] = (samples.response([_with_member(choice)], prompt_tokens=2), options)
    doc = samples.response([dict(compact, compact_logprobs=_with_member(compact["compact_logprobs"]))], prompt_tokens=2)
    out["generate-compact/compact_logprobs"] = (doc, {"top_k": 2})
    content = native["logprobs"]["content"]
    entry = dict(content[0], top_logprobs=[_with_member(content[0]["top_logprobs"][0])] + content[0]["top_logprobs"][1:])
    for place, first in (("content entry", _with_member(content[0])), ("top_logprobs candidate", entry)):
        choice = dict(native, logprobs={"content": [first] + content[1:]})
        out[f"generate-native/{place}"] = (samples.response([choice], prompt_tokens=2), {"top_k": 2})
    return {name: (_dumps(doc), options) for name, (doc, options) in out.items()}


def _openai_bases() -> dict[str, tuple[bytes, dict]]:
    ids, lps = [7, 8, 1 << 20], [-0.5, -1.25, -2.0]
    tokens = [f"token_id:{i}" for i in ids]
    # Each head: the sampled token and two below it (a head of 1 needs 3 candidates).
    heads = [[(i, v), (100 + i, v - 1), (200 + i, v - 2)] for i, v in zip(ids, lps)]
    logprobs = {"tokens": tokens, "token_logprobs": lps, "text_offset": [0, 1, 2],
                "top_logprobs": [{f"token_id:{i}": v for i, v in head} for head in heads]}
    completions_choice = {"index": 0, "text": "xyz", "token_ids": ids, "finish_reason": "stop", "logprobs": logprobs}
    entries = [{"token": t, "logprob": v, "top_logprobs": [{"token": f"token_id:{i}", "logprob": w} for i, w in head]}
               for t, v, head in zip(tokens, lps, heads)]
    chat_choice = {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "xyz"},
                   "logprobs": {"content": entries}, "raw_output": {"completion_token_ids": ids}}
    meta = {"completion_tokens": 3, "output_token_logprobs": [[v, i, "t"] for i, v in zip(ids, lps)],
            "output_top_logprobs": [[[w, i, None] for i, w in head] for head in heads]}
    item = {"text": "xyz", "output_ids": ids, "meta_info": meta}

    def completions(choice, root=False):
        doc = {"object": "text_completion", "choices": [choice], "usage": {"completion_tokens": 3}}
        return _with_member(doc) if root else doc

    def chat(choice, root=False):
        doc = {"object": "chat.completion", "choices": [choice], "prompt_token_ids": [1, 2]}
        return _with_member(doc) if root else doc

    chat_entry = dict(entries[0], top_logprobs=[_with_member(entries[0]["top_logprobs"][0])] + entries[0]["top_logprobs"][1:])
    docs = {
        "completions/root": completions(completions_choice, root=True),
        "completions/choice": completions(_with_member(completions_choice)),
        "completions/logprobs": completions(dict(completions_choice, logprobs=_with_member(logprobs))),
        "chat/root": chat(chat_choice, root=True),
        "chat/choice": chat(_with_member(chat_choice)),
        "chat/content entry": chat(dict(chat_choice, logprobs={"content": [_with_member(entries[0])] + entries[1:]})),
        "chat/top_logprobs candidate": chat(dict(chat_choice, logprobs={"content": [chat_entry] + entries[1:]})),
        "sglang/item": _with_member(item),
        "sglang/batch item": [item, _with_member(item)],
        "sglang/meta_info": dict(item, meta_info=_with_member(meta)),
    }
    return {name: (_dumps(doc), {"top_k": 1}) for name, doc in docs.items()}


_PARSERS = {"generate": "parse_generate_response", "completions": "parse_completions_response",
            "chat": "parse_chat_completions_response", "sglang": "parse_sglang_generate_response"}


@functools.cache
def _bases() -> dict[str, tuple[bytes, dict]]:
    bases = {**_generate_bases(), **_openai_bases()}
    for name, (template, _) in bases.items():
        assert template.count(_MARK) == 1, name
    return bases


def _parser(impl, place: str):
    return getattr(impl, _PARSERS[place.split("/")[0].split("-")[0]])


def _summary(response) -> list:
    """What a result holds, comparable with ==."""
    def ragged(r):
        return None if r is None else (r.offsets.tolist(), r.values.tolist())

    return [(c.completion_ids.tolist(), None if c.completion_logprobs is None else c.completion_logprobs.tolist(),
             ragged(c.completion_top_ids), ragged(c.completion_top_logprobs), ragged(c.sampling_mask))
            for c in response.choices]


def _embedded(place: str, case: bytes) -> bytes:
    template, _ = _bases()[place]
    return template.replace(_MARK, b'"jts":' + case, 1)


def _outcome(impl, place: str, raw: bytes):
    """The parse's summary, or the error it raised."""
    options = _bases()[place][1]
    try:
        return _summary(_parser(impl, place)(raw, **options))
    except MalformedResponseError as exc:
        return exc


_expected: dict[tuple, dict] = {}


def _base_outcomes(impl) -> dict:
    """Each place's outcome without a case (for this implementation and path: once)."""
    key = (impl.__name__, impl.simd_path() if impl.__name__.endswith("_core") else None)
    if key not in _expected:
        _expected[key] = {place: _outcome(impl, place, template) for place, (template, _) in _bases().items()}
    return _expected[key]


_SCANNER_ERROR = re.compile(r"invalid JSON: .*? at byte (\d+)(?:$|: the body is truncated)")


def _is_invalid_json(outcome, impl, start: int = 0) -> bool:
    """A refusal as invalid JSON; by the compiled core, one its scanner made at or after
    ``start`` (not left to the JSON reader of the stripped copy, which would hide a
    scanner that let the member through)."""
    if not (isinstance(outcome, MalformedResponseError) and outcome.reason.startswith("invalid JSON")
            and outcome.choice is None and outcome.field is None):
        return False
    if impl.__name__.endswith("_core"):
        scanned = _SCANNER_ERROR.match(outcome.reason)
        return scanned is not None and int(scanned.group(1)) >= start
    return True


CASES = cases()


def test_the_table_is_the_suite():
    """The counts of the pinned commit's test_parsing/ (tests/check_jsontestsuite.py compares
    every byte against a checkout)."""
    assert (len(ACCEPT), len(REFUSE), len(IMPLEMENTATION_DEFINED)) == (95, 188, 35)
    assert len({name for name, _, _ in CASES}) == 318
    assert sorted(I_DECISIONS) == sorted(IMPLEMENTATION_DEFINED)


def test_every_place_parses_without_a_case(impl):
    """Each template with a plain 0 in the member parses, and as the same response without
    the member: the places are ones tokenwire skips."""
    for place, (template, _) in _bases().items():
        got = _outcome(impl, place, template)
        assert not isinstance(got, Exception), f"{place}: {got}"
        assert got == _outcome(impl, place, template.replace(_MARK + b",", b"", 1)), place


@pytest.mark.parametrize("name, case, accepted", CASES, ids=[name for name, _, _ in CASES])
def test_embedded(impl, name, case, accepted):
    """The case as a skipped member's value in every format and place."""
    for place, expected in _base_outcomes(impl).items():
        got = _outcome(impl, place, _embedded(place, case))
        if accepted:
            assert got == expected, f"{place}: {got!r:.300}"
        else:
            assert _is_invalid_json(got, impl, _bases()[place][0].index(_MARK)), f"{place}: {got!r:.300}"


@pytest.mark.parametrize("name, case, accepted", CASES, ids=[name for name, _, _ in CASES])
def test_whole_body(impl, name, case, accepted):
    """The case as the whole body: what is JSON but no response is refused for what it
    lacks, never as invalid JSON; what is not JSON is refused as invalid JSON."""
    for parser in _PARSERS.values():
        try:
            getattr(impl, parser)(case)
        except MalformedResponseError as exc:
            assert _is_invalid_json(exc, impl) != accepted, f"{parser}: {exc!r:.300}"
        else:
            assert accepted, parser


def test_audit():
    """tokenwire.audit (and so ``tokenwire check``) gives every refused case the
    malformed_json class, and no accepted one."""
    for name, case, accepted in CASES:
        verdict = tokenwire.audit(case)
        assert (verdict.defect == "malformed_json") != accepted, f"{name}: {verdict.message}"


def test_decisions_follow_the_rules():
    """I_DECISIONS against what the numbers and strings are (a check of the table itself)."""
    for name, (accepted, _) in I_DECISIONS.items():
        raw = IMPLEMENTATION_DEFINED[name]
        if name.startswith("number"):
            text = raw.decode()[1:-1]
            assert accepted == bool(np.isfinite(float(text))), name


def test_the_docs_list_every_decision():
    """docs/security.md's table of the i_ decisions is I_DECISIONS."""
    text = (Path(__file__).parent.parent / "docs" / "security.md").read_text()
    rows = re.findall(r"^\| `i_(\S+)` \| (accepted|refused) \| (.+) \|$", text, re.M)
    assert {name: (verdict == "accepted", why) for name, verdict, why in rows} == I_DECISIONS
    accepted = sum(a for a, _ in I_DECISIONS.values())
    assert f"| {len(IMPLEMENTATION_DEFINED)} | {accepted} accepted, {len(I_DECISIONS) - accepted} refused" in text
    assert f"| {len(ACCEPT)} | {len(ACCEPT)} accepted |" in text and f"| {len(REFUSE)} | {len(REFUSE)} refused" in text
