"""A choice that carries its sampled-token logprobs in more than one transport: every present
transport is validated, in a fixed order, and transports that carry the sampled logprobs must
agree, on both implementations (the compiled core's plain path never takes such a choice)."""

from __future__ import annotations

import copy
import re
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tokenwire
from tokenwire import MalformedResponseError, samples

from .conftest import PYTHON, _core
from .strategies import Case, spell
from .test_differential import outcome

# The field each transport is sent in.
FIELD = {"compact": "compact_logprobs", "packed": "completion_logprobs", "native": "logprobs",
         "sampled": "logprobs", "native_sampled": "logprobs"}


def choice(used: str, *others: str, n: int = 4, m: int = 5, seed: int = 1, mask: str | None = None) -> dict[str, Any]:
    """A choice whose sampled logprobs are in ``used`` and in each of ``others``, all the same."""
    ev = samples.evidence(n, m, seed=seed, support=mask is not None)
    out = samples.build_choice(ev, transport=used, mask=mask)
    for other in others:
        extra = samples.build_choice(ev, transport=other)
        out[FIELD[other]] = extra[FIELD[other]]
    return out


def raw(*choices: dict[str, Any]) -> bytes:
    return samples.dumps({"choices": list(choices)})


def rejects(impl, document: bytes, field: str, token: int | None, match: str, top_k: int | None = None) -> str:
    with pytest.raises(MalformedResponseError, match=match) as err:
        impl.parse_generate_response(document, top_k=top_k)
    assert (err.value.choice, err.value.field, err.value.token) == (0, field, token), str(err.value)
    return err.value.reason


# --- every present transport is validated --------------------------------------------------------


def _packed_float99(c: dict[str, Any]) -> None:
    c["completion_logprobs"] = {"data": "not base64!", "dtype": "float99", "shape": [4]}


def _packed_minus_seven(c: dict[str, Any]) -> None:
    c["completion_logprobs"] = {"data": samples.b64(np.full(4, -7.0, "<f4").tobytes()), "dtype": "float32",
                                "shape": [4]}


def _native_other_tokens(c: dict[str, Any]) -> None:
    for entry in c["logprobs"]["content"]:
        entry["token"], entry["logprob"] = "token_id:999999", -9999.0


def _native_sentinel(c: dict[str, Any]) -> None:
    c["logprobs"]["content"][2]["logprob"] = -9999.0


def _native_shifted(c: dict[str, Any]) -> None:
    c["logprobs"]["content"][1]["logprob"] -= 0.5


def _sampled_shifted(c: dict[str, Any]) -> None:
    c["logprobs"]["sampled"][3] -= 0.5


def _native_short(c: dict[str, Any]) -> None:
    c["logprobs"]["content"].pop()


def _content_string(c: dict[str, Any]) -> None:
    c["logprobs"] = {"content": "abc"}


def _logprobs_number(c: dict[str, Any]) -> None:
    c["logprobs"] = 7


def _disagree(value: str, reference: str) -> str:
    """The disagreement message naming ``value`` and ``reference`` (each with its number)."""
    return rf"{re.escape(value)} \(-[0-9.]+\) and {re.escape(reference)} \(-[0-9.]+\) disagree\."


_TOKEN = r"logprobs\.content\[0\]\.token must be 'token_id:"
_EVIDENCE = "does not contain sampling evidence"

BROKEN = [
    # (name, used, other, break the other, field, token, message)
    ("packed_float99", "compact", "packed", _packed_float99, "completion_logprobs.dtype", None, "Unsupported packed logprob dtype"),
    ("packed_minus_seven", "compact", "packed", _packed_minus_seven, "completion_logprobs", 0,
     r"choice\.completion_logprobs\[0\] \(-7\.0\) and compact_logprobs row 0 \(-[0-9.]+\) disagree"),
    ("native_other_tokens", "compact", "native", _native_other_tokens, "logprobs.content", 0, _TOKEN),
    ("native_sentinel", "compact", "native", _native_sentinel, "logprobs.content", 2, _EVIDENCE),
    ("native_disagrees", "compact", "native", _native_shifted, "logprobs.content", 1,
     _disagree("logprobs.content[1].logprob", "compact_logprobs row 1")),
    ("sampled_disagrees", "compact", "sampled", _sampled_shifted, "logprobs.sampled", 3,
     _disagree("logprobs.sampled[3]", "compact_logprobs row 3")),
    ("native_short", "compact", "native", _native_short, "logprobs.content", None, r"count \(4\) does not match logprob count \(3\)"),
    ("content_string", "compact", "native", _content_string, "logprobs.content", None, "logprobs.content must be a list"),
    ("logprobs_number", "compact", "native", _logprobs_number, "logprobs", None, "logprobs must be an object"),
    ("packed_native_other_tokens", "packed", "native", _native_other_tokens, "logprobs.content", 0, _TOKEN),
    ("packed_native_disagrees", "packed", "native", _native_shifted, "logprobs.content", 1,
     _disagree("logprobs.content[1].logprob", "completion_logprobs[1]")),
    ("packed_sampled_disagrees", "packed", "sampled", _sampled_shifted, "logprobs.sampled", 3,
     _disagree("logprobs.sampled[3]", "completion_logprobs[3]")),
    ("packed_native_sentinel", "packed", "native", _native_sentinel, "logprobs.content", 2, _EVIDENCE),
]


@pytest.mark.parametrize("case", BROKEN, ids=lambda case: case[0])
@pytest.mark.parametrize("top_k", [None, 2])
def test_a_second_transport_is_validated(impl, case, top_k):
    _, used, other, breaks, field, token, match = case
    c = choice(used, other)
    breaks(c)
    rejects(impl, raw(c), field, token, match, top_k)


def test_the_sampled_rule_of_native_records_holds_beside_packed_logprobs_with_a_head(impl):
    """With top_k, the head is read from logprobs.content beside packed logprobs: each record's
    own logprob is evidence too (not only its candidates)."""
    c = choice("packed", "native")
    _native_sentinel(c)
    rejects(impl, raw(c), "logprobs.content", 2, "does not contain sampling evidence", top_k=2)


# --- what agrees is accepted ---------------------------------------------------------------------


AGREEING = [("compact", "packed"), ("compact", "native"), ("compact", "sampled"), ("compact", "native_sampled"),
            ("packed", "native"), ("packed", "sampled"), ("packed", "native_sampled"),
            ("compact", "packed", "native"), ("compact", "packed", "native_sampled")]


@pytest.mark.parametrize("transports", AGREEING, ids="+".join)
@pytest.mark.parametrize("top_k", [None, 2])
def test_transports_that_agree_are_accepted(impl, transports, top_k):
    used, *others = transports
    c = choice(used, *others)
    if top_k is not None and used == "packed" and others == ["sampled"]:
        # A head beside packed logprobs is read from logprobs.content.
        rejects(impl, raw(c), "logprobs.content", None, "Missing requested top logprobs", top_k)
        return
    got = impl.parse_generate_response(raw(c), top_k=top_k).choices[0]
    alone = impl.parse_generate_response(raw(choice(used))).choices[0]
    # The transport used gives the logprobs, as without the others.
    assert got.completion_logprobs.dtype == alone.completion_logprobs.dtype
    assert got.completion_logprobs.tolist() == alone.completion_logprobs.tolist()
    if used == "compact" or top_k is None:
        # The others stay in raw, as sent (validated).
        for other in others:
            assert got.raw[FIELD[other]] == c[FIELD[other]]


def test_tolerance_is_the_head_rule_s(impl):
    """numpy.isclose(other, used, rtol=1e-6, atol=1e-5): float32 compact or packed values
    against float64 JSON."""
    c = choice("compact", "native")
    value = c["logprobs"]["content"][0]["logprob"]
    c["logprobs"]["content"][0]["logprob"] = value + 0.9e-5
    PYTHON.parse_generate_response(raw(c))
    impl.parse_generate_response(raw(c))
    c["logprobs"]["content"][0]["logprob"] = value + 2e-5
    rejects(impl, raw(c), "logprobs.content", 0, "disagree")


@pytest.mark.parametrize("logprobs", [None, {}, {"content": None}, {"content": None, "sampled": None, "n": 1}])
@pytest.mark.parametrize("used", ["compact", "packed"])
def test_a_null_transport_is_absent(impl, used, logprobs):
    """What real servers send beside packed logprobs or compact rows: "logprobs": null
    (prime-rl's compact formatter), or a null packed field; a logprobs object whose members
    are null holds no logprobs either. It stays in raw as sent."""
    c = choice(used)
    c["logprobs"] = logprobs
    c.setdefault("completion_logprobs", None)
    got = impl.parse_generate_response(raw(c)).choices[0]
    assert got.completion_logprobs.tolist() == impl.parse_generate_response(raw(choice(used))).choices[0].completion_logprobs.tolist()
    assert got.raw["logprobs"] == logprobs


# --- the order of the checks ---------------------------------------------------------------------


def test_the_transport_used_is_checked_first_then_packed_then_logprobs(impl):
    c = choice("compact", "packed", "native")
    _native_other_tokens(c)
    _packed_minus_seven(c)
    rejects(impl, raw(c), "completion_logprobs", 0, "disagree")
    c["compact_logprobs"]["num_top_logprobs"] = -2
    rejects(impl, raw(c), "compact_logprobs.num_top_logprobs", None, "Invalid compact logprob candidate count")
    c = choice("packed", "native")
    _native_other_tokens(c)
    c["completion_logprobs"]["dtype"] = "float99"
    rejects(impl, raw(c), "completion_logprobs.dtype", None, "Unsupported packed logprob dtype")


def test_a_compact_head_is_checked_before_the_other_transports(impl):
    """With top_k the compact rows' head and mask are part of the transport used."""
    c = choice("compact", "native", m=0)  # one candidate a row: fewer than top_k + 2
    _native_other_tokens(c)
    rejects(impl, raw(c), "compact_logprobs", 0, "fewer top logprobs", top_k=2)


# --- both implementations, and the plain path ----------------------------------------------------


@pytest.mark.skipif(_core is None, reason="the compiled core is not built")
@pytest.mark.parametrize("transports", AGREEING, ids="+".join)
def test_the_plain_path_hands_two_transports_to_the_rules(transports):
    assert _core._plain_generate_response(raw(choice(*transports))) is None


_BREAKS = [None, _packed_float99, _packed_minus_seven, _native_other_tokens, _native_sentinel, _native_shifted,
           _native_short, _content_string, _logprobs_number]


@st.composite
def two_transports(draw) -> Case:
    transports = draw(st.sampled_from(AGREEING))
    c = choice(*transports, n=draw(st.integers(0, 5)), m=draw(st.integers(0, 4)), seed=draw(st.integers(0, 999)),
               mask=draw(st.sampled_from([None, "list", "csr", "kept"])))
    for breaks in draw(st.lists(st.sampled_from(_BREAKS), max_size=2)):
        try:
            breaks and breaks(c)
        except (KeyError, TypeError, IndexError, AttributeError):
            pass  # that break does not apply to these transports
    if draw(st.booleans()):
        c["logprobs"] = None if draw(st.booleans()) else c.get("logprobs")
    k = draw(st.sampled_from([None, 1, 2]))
    spelling = draw(st.sampled_from(["compact", "shuffled", "escaped_slash"]))
    return Case(spell({"choices": [copy.deepcopy(c)]}, spelling, draw(st.integers(0, 9))), k)


@pytest.mark.skipif(_core is None, reason="the compiled core is not built")
@settings(max_examples=600)
@given(two_transports())
def test_core_matches_reference_with_two_transports(case):
    expected = outcome(PYTHON, case)
    for path in _core.simd_paths():
        with _core.simd_path_forced(path):
            assert outcome(_core, case) == expected, path


@pytest.mark.parametrize("used, other", [("compact", "packed"), ("packed", "native"), ("compact", "native")])
def test_a_disagreement_is_a_logprob_defect_in_the_audit(used, other):
    """``tokenwire check`` and ``tokenwire.audit`` file two transports that name other sampled
    logprobs under bad_logprob, where the token is."""
    c = choice(used, other)
    field = FIELD[other]
    if other == "packed":
        _packed_minus_seven(c)
    else:
        c[field]["content"][2]["logprob"] -= 1.0
    verdict = tokenwire.audit(raw(c))
    assert (verdict.valid, verdict.defect, verdict.token) == (False, "bad_logprob", 0 if other == "packed" else 2), verdict
