"""tokenwire.compat.eval_protocol's reading of Fireworks responses, without eval-protocol
installed: over every implementation (the reference and each SIMD path of the core), from the
body's bytes and from a dumped dict, the ids and sampling logprobs of ``content[]`` exactly,
and a refusal, with the same message everywhere, for each planted defect. (The tests that drive
eval-protocol's own client are in test_compat_eval_protocol.py.)"""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tokenwire.compat import eval_protocol as compat

from .canned_http import DEFECTS, fireworks_completion


@pytest.fixture
def use(impl, monkeypatch):
    """The drop-in reading with ``impl`` (the fixture's implementation)."""
    monkeypatch.setattr(compat._select, "impl", impl)
    return impl


def _read(sent: Any) -> tuple[list[int], list[float]]:
    def view() -> Any:
        return sent if isinstance(sent, dict) else json.loads(sent)

    response, first = compat._read(sent, view)
    compat._check_their_shape(response, first, view)
    choice = response.choices[0]
    return choice.completion_ids.tolist(), choice.completion_logprobs.tolist()


def _expected(body: bytes) -> tuple[list[int], list[float]]:
    entries = json.loads(body)["choices"][0]["logprobs"]["content"]
    return [e["token_id"] for e in entries], [float(e["sampling_logprob"]) for e in entries]


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 300), seed=st.integers(0, 10**6), prompt_ids=st.booleans(), token_ids=st.booleans(),
       raw_output=st.booleans(), usage=st.booleans(), as_dict=st.booleans())
def test_valid_responses_read_content_exactly(use, n, seed, prompt_ids, token_ids, raw_output, usage, as_dict):
    body = fireworks_completion(n, seed, prompt_ids=prompt_ids, token_ids=token_ids, raw_output=raw_output,
                                usage=usage)
    assert _read(json.loads(body) if as_dict else body) == _expected(body)


def _refusal(sent: Any) -> compat.MalformedFireworksResponseError:
    with pytest.raises(compat.MalformedFireworksResponseError) as info:
        _read(sent)
    return info.value


@pytest.mark.parametrize("defect", DEFECTS)
def test_each_defect_is_refused_alike_everywhere(use, defect):
    body = fireworks_completion(256, seed=7, defect=defect)
    error = _refusal(body)
    assert isinstance(error, RuntimeError) and isinstance(error, ValueError)
    assert error.field
    if defect in ("missing_sampling_logprob", "null_logprob", "no_token_id", "no_content"):
        assert str(error).startswith("Fireworks /v1/completions ")  # eval-protocol's own message
        assert error.tokenwire_reason is not None or defect == "no_content"
    else:
        assert error.choice in (0, None) and not str(error).startswith("Fireworks")
    # A dumped dict (a client object of its own) is refused too; the same message but for NaN,
    # which a dict holds as a float and a body as a literal that is not JSON.
    dumped = _refusal(json.loads(body))
    if defect != "nan":
        assert str(dumped) == str(error)


def test_the_messages_name_the_fault(use):
    messages = {d: str(_refusal(fireworks_completion(64, seed=2, defect=d))) for d in DEFECTS}
    assert messages["n_plus_1"] == ("usage.completion_tokens: usage.completion_tokens is 64 but the completion "
                                    "has 65 token ids (-1)")
    assert messages["ids_short"].startswith("choices[0].token_ids: completion has 63 token ids but 64 logprobs (+1)")
    assert messages["sentinel"].startswith("choices[0].logprobs.content[32]: sampling_logprob is the -9999 sentinel")
    assert messages["nan"].startswith("choices[0].logprobs.content[32]: sampling_logprob is nan")
    assert messages["positive"] == "choices[0].logprobs.content[32]: sampling_logprob cannot be positive (0.25)"
    assert "missing sampling_logprob at index 32" in messages["missing_sampling_logprob"]
    assert "missing sampling_logprob at index 32" in messages["null_logprob"]
    assert "missing token_id at index 32" in messages["no_token_id"]
    assert "no content[] logprobs entries" in messages["no_content"]


def test_content_without_sampling_logprob_is_theirs(use):
    # Entries with only `logprob`: tokenwire alone would read those; eval-protocol refuses.
    document = json.loads(fireworks_completion(16, seed=3))
    for entry in document["choices"][0]["logprobs"]["content"]:
        del entry["sampling_logprob"]
    error = _refusal(json.dumps(document).encode())
    assert "missing sampling_logprob at index 0" in str(error)


def test_ids_only_in_token_ids_are_theirs(use):
    # Exact ids in token_ids but content[] entries without token_id: eval-protocol refuses.
    document = json.loads(fireworks_completion(16, seed=4, token_ids=True))
    for entry in document["choices"][0]["logprobs"]["content"]:
        del entry["token_id"]
    error = _refusal(json.dumps(document).encode())
    assert "missing token_id at index 0" in str(error)


def test_non_finite_in_a_dict():
    document = json.loads(fireworks_completion(8, seed=5))
    document["choices"][0]["logprobs"]["content"][3]["sampling_logprob"] = -math.inf
    error = _refusal(document)
    assert error.token == 3 and "finite" in str(error)
