"""The two extractors are peers: the compiled core's one pass over the raw bytes and the
reference's reading of the parsed document give the same evidence, on every SIMD path."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tokenwire import MalformedResponseError, samples
from tokenwire.base import _table
from tokenwire.base._types import Ragged
from tokenwire.extract import python as python_extract
from tokenwire.kernels import python as python_kernels
from tokenwire.rules import generate as python_rules
from tokenwire.rules import sources as sources_rules

from . import openai_strategies, strategies, test_openai, test_openai_mutated
from .conftest import _NO_CORE, _core

EXAMPLES = 300

if _core is None:
    pytest.skip(_NO_CORE, allow_module_level=True)


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        a, b = np.asarray(a), np.asarray(b)
        return a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b, equal_nan=True)
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, Ragged) and isinstance(b, Ragged):
        return _same(a.offsets, b.offsets) and _same(a.values, b.values)
    if isinstance(a, (python_kernels.NativeEntries, python_kernels.Candidates)):
        return type(a) is type(b) and all(_same(getattr(a, n), getattr(b, n)) for n in vars(a))
    return a == b


# Fields whose reading is where their text is (the compiled extractor's spans): the reference
# has no raw bytes to point into and reads None there.
_SPANS = {f.attr for f in _table.FIELDS if f.kind == _table.VALUE}


def _values(evidence: python_extract.Evidence) -> dict[str, Any]:
    """What an extractor filled, by evidence attribute (spans aside)."""
    return {name: value for name, value in evidence.filled().items() if name not in _SPANS}


def _read(value: Any) -> Any:
    """An array's reading as comparable parts (where its text is aside)."""
    if isinstance(value, python_extract.Read):
        return (value.length, _plain(value.records), value.entries, value.top, _plain(value.numbers),
                value.rows)
    return _plain(value)


def assert_filled(fmt: str, evidence: python_extract.Evidence, top: bool) -> None:
    """An extractor fills every table row of its format: a rule never finds one missing."""
    rows = python_extract.rows_of(fmt, top)
    assert set(evidence.filled()) == {f.attr for f in rows}, (fmt, evidence.index, sorted(evidence.filled()))


def assert_peers(raw: bytes, top_k: int | None) -> None:
    try:
        _, top, choices = python_extract.extract_generate(raw, top_k)
    except MalformedResponseError:
        with pytest.raises(MalformedResponseError):
            _core.extract_generate(raw, top_k)
        return
    _, ctop, cchoices = _core.extract_generate(raw, top_k)
    pairs = [(top, ctop), *zip(choices, cchoices)]
    for python, compiled in pairs:
        for evidence in (python, compiled):
            assert_filled(_table.GENERATE, evidence, evidence.index is None)
        ours, theirs = _values(python), _values(compiled)
        for name in ours:
            assert _same(_read(ours[name]), _read(theirs[name])), (python.index, name)
        assert not python.sent  # the parsed document was not blanked


@pytest.mark.parametrize("name", sorted(samples.SAMPLES))
@pytest.mark.parametrize("top_k", [None, 5])
def test_samples(simd, name, top_k):
    assert_peers(samples.sample(name), top_k)


@pytest.mark.parametrize("name", sorted(samples.WORKLOADS))
def test_workloads(simd, name):
    workload = samples.WORKLOADS[name]
    for raw in workload.responses(2, first_seed=7):
        if workload.parser == "parse_sglang_generate_response":
            assert_openai_peers(raw, workload.top_k, True)
        else:
            assert_peers(raw, workload.top_k)


@settings(max_examples=EXAMPLES)
@given(strategies.cases())
def test_generated_and_mutated_documents(case):
    for path in _core.simd_paths():
        with _core.simd_path_forced(path):
            assert_peers(case.raw, case.top_k)


# --- OpenAI-compatible and SGLang -----------------------------------------------------------------


def assert_openai_peers(raw: bytes, top_k: int | None, sglang: bool) -> None:
    try:
        _, top, choices = python_extract.extract_openai(raw, top_k, sglang)
    except MalformedResponseError:
        with pytest.raises(MalformedResponseError):
            _core.extract_openai(raw, top_k, sglang)
        return
    _, ctop, cchoices = _core.extract_openai(raw, top_k, sglang)
    fmt = _table.SGLANG if sglang else _table.OPENAI
    for python, compiled in [(top, ctop), *zip(choices, cchoices)]:
        for evidence in (python, compiled):
            assert_filled(fmt, evidence, evidence.index is None)
        ours, theirs = _values(python), _values(compiled)
        for name in ours:
            assert _same(_read(ours[name]), _read(theirs[name])), (python.index, name)
        spans = [compiled.filled()[name] for name in _SPANS & compiled.filled().keys()]
        spans += [v.span for v in theirs.values() if isinstance(v, python_extract.Read) and v.span]
        for span in spans:  # the text kept for the result's raw
            if span is not None:
                assert bytes(compiled.source[span[0]:span[1]])[:1] in (b"{", b"[")


def _plain(value: Any) -> Any:
    """Records as comparable parts: ids as int64 (-1: none), values read as numbers."""
    if isinstance(value, python_extract.Records):
        ids = sources_rules.id_array(value.ids)
        numbers = value.values if isinstance(value.values, python_extract.Numbers) else python_extract.Numbers(
            *python_extract.numbers(value.values))
        if value.bad is not None:  # the rules stop there: what came after is never named
            return (ids, value.bad)
        return (ids, numbers.values, numbers.bad, value.value_key, value.bad, value.mixed)
    if isinstance(value, python_extract.Numbers):
        return (value.values, value.bad, value.example)
    if isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], list):  # token strings
        return (sources_rules.id_array(value[0]), value[1])
    return value


@pytest.mark.parametrize("fmt", openai_strategies.FORMATS, ids=[f.name for f in openai_strategies.FORMATS])
@pytest.mark.parametrize("top_k", [None, 1])
def test_openai_formats(simd, fmt, top_k):
    doc, _ = test_openai.base(fmt)
    assert_openai_peers(test_openai.dumps(doc), top_k, fmt.name.startswith("sglang"))


@pytest.mark.parametrize("form", openai_strategies.ROUTING_FORMS)
def test_openai_routing(simd, form):
    """vLLM's routing replay, the top-level prompt_routed_experts of vLLM 0.21 included."""
    for fmt in (openai_strategies.BY_NAME["vllm_completions"], openai_strategies.BY_NAME["vllm_chat"]):
        evs = [openai_strategies.evidence([5, 6, 7], [-0.5, -0.25, -1.0]), openai_strategies.evidence([9], [-2.0])]
        doc = fmt.build(evs)
        openai_strategies.add_routing(doc, evs, form)
        assert_openai_peers(test_openai.dumps(doc), None, False)


@pytest.mark.parametrize("long", [False, True])
def test_sglang_routing(simd, long):
    for as_list in (False, True):
        evs = [openai_strategies.evidence([5, 6, 7], [-0.5, -0.25, -1.0]), openai_strategies.evidence([9], [-2.0])]
        doc = openai_strategies.sglang(evs, as_list)
        openai_strategies.add_sglang_routing(doc, evs, long)
        assert_openai_peers(test_openai.dumps(doc), None, True)


@settings(max_examples=EXAMPLES)
@given(test_openai_mutated.mutated_openai(), st.sampled_from([None, 1]))
def test_mutated_openai_documents(case, top_k):
    fmt, raw, _ = case
    for path in _core.simd_paths():
        with _core.simd_path_forced(path):
            assert_openai_peers(raw, top_k, fmt.name.startswith("sglang"))


def _beside(transport: str, content: str | None) -> bytes:
    """A choice of three tokens in ``transport`` with a ``logprobs`` object beside it whose
    ``content`` is the JSON text ``content`` (None: the choice's own records, agreeing, with
    escaped strings in them)."""
    ev = samples.evidence(3, 0, seed=1)
    choice = samples.build_choice(ev, transport=transport)
    if content is None:
        records = samples.build_choice(ev, transport="native")["logprobs"]["content"]
        content = json.dumps(records).replace('"bytes"', '"text": "a\\/b\\u00e9", "bytes"', 1)
    raw = samples.dumps(samples.response([choice], prompt_tokens=2))
    return raw.replace(b'"token_ids":', b'"logprobs":{"content":' + content.encode() + b',"n":1},"token_ids":', 1)


@pytest.mark.parametrize("content", [None, "null"])
@pytest.mark.parametrize("transport", ["compact", "packed"])
def test_raw_keeps_logprobs_the_scan_blanked(content, transport):
    """A `logprobs` object beside compact or packed logprobs stays in GenerateChoice.raw as
    sent (the scan blanks an array's elements in the copy orjson parses)."""
    raw = _beside(transport, content)
    expected = python_rules.parse_generate_response(raw).choices[0].raw["logprobs"]
    assert expected["content"] == (None if content else json.loads(raw)["choices"][0]["logprobs"]["content"])
    for path in _core.simd_paths():
        with _core.simd_path_forced(path):
            assert _core.parse_generate_response(raw).choices[0].raw["logprobs"] == expected


@pytest.mark.parametrize("content", ['"abc"', '"a\\/b\\u00e9"', '[{"token": "x", "logprob": -1.0}]', "7"])
@pytest.mark.parametrize("transport", ["compact", "packed"])
def test_logprobs_the_scan_blanked_are_validated_alike(content, transport):
    """Beside compact or packed logprobs, `logprobs.content` is validated from what the scan
    read (the parsed copy is blanked): both implementations refuse it alike."""
    raw = _beside(transport, content)
    with pytest.raises(MalformedResponseError) as expected:
        python_rules.parse_generate_response(raw)
    for path in _core.simd_paths():
        with _core.simd_path_forced(path), pytest.raises(MalformedResponseError) as got:
            _core.parse_generate_response(raw)
        assert str(got.value) == str(expected.value)
        assert (got.value.field, got.value.token) == (expected.value.field, expected.value.token) == ("logprobs.content", None)


@pytest.mark.parametrize("token", [{}, {"token_id:": 1}, [], ["token_id:6"], 6, None, 6.5, True])
def test_token_strings_with_a_token_not_a_string(token):
    """Any JSON value among the tokens is read as no id, never an error of its own (an object's
    ``[:9]`` raises KeyError from Python 3.12 on, where slices hash, TypeError before)."""
    ids, count = python_extract.token_strings([token, "token_id:6", "token_id:7"])
    assert (list(ids), count) == ([None, 6, 7], 2)
