"""Routing rows on vLLM's ``/inference/v1/generate`` counted from the prompt's length: one per
prompt and completion token but the last, from ``start`` on, on both implementations and every
SIMD path (the ``impl`` fixture).

Responses are laid out as prime-rl's handler sends them: its ``serialize_routed_experts`` object
(``{data, shape, start, dtype}``, the C-order array's bytes in base64) in a generate choice
after vLLM's own fields, ``usage`` added at the top level, Starlette's compact separators; or
with newer vLLM's top-level ``prompt_token_ids``; or vLLM's base64 ``.npy`` form."""

from __future__ import annotations

import base64
import io
import json
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import tokenwire
from tokenwire import MalformedResponseError

LAYERS, TOPK = 2, 2


def routing(rows: int) -> np.ndarray:
    return (np.arange(rows * LAYERS * TOPK) % 64).astype(np.uint8).reshape(rows, LAYERS, TOPK)


def serialized(array: np.ndarray, start: int = 0) -> dict[str, Any]:
    """prime-rl's routing object: uint8 unless an id needs uint16, the start it was asked for."""
    return {"data": base64.b64encode(np.ascontiguousarray(array).tobytes()).decode("ascii"),
            "shape": list(array.shape), "start": start, "dtype": array.dtype.name}


def npy(array: np.ndarray) -> str:
    buffer = io.BytesIO()
    np.save(buffer, array)
    return base64.b64encode(buffer.getvalue()).decode()


def response(prompt: int, n: int, routed: Any, *, usage: bool = True, prompt_ids: bool = False,
             choices: int = 1) -> bytes:
    """A generate response of ``choices`` choices of ``n`` tokens after a prompt of ``prompt``."""
    ids = [(5 * t + 3) % 97 for t in range(n)]
    content = [{"token": f"token_id:{t}", "logprob": -0.5, "bytes": None, "top_logprobs": []} for t in ids]
    body: dict[str, Any] = {"request_id": "generate-tokens-1", "choices": [
        {"index": i, "logprobs": {"content": content}, "finish_reason": "stop", "token_ids": ids,
         "routed_experts": routed[i] if isinstance(routed, list) else routed} for i in range(choices)],
        "prompt_logprobs": None, "kv_transfer_params": None}
    if prompt_ids:
        body["prompt_token_ids"] = list(range(prompt))
    if usage:
        body["usage"] = {"prompt_tokens": prompt, "completion_tokens": n * choices, "total_tokens": prompt + n * choices,
                         "prompt_tokens_details": None}
    return json.dumps(body, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode()


def _fails(impl, body: bytes, **kwargs: Any) -> MalformedResponseError:
    with pytest.raises(MalformedResponseError) as err:
        impl.parse_generate_response(body, **kwargs)
    return err.value


def test_rows_as_prime_rl_lays_them_out(impl):
    """Prompt 19, completion 33: 51 rows from the first token, 46 from position 5."""
    full = routing(19 + 33 - 1)
    for sent, start, rows in ((serialized(full), 0, full), (serialized(full[5:], 5), 5, full[5:]), (npy(full), None, full)):
        got = impl.parse_generate_response(response(19, 33, sent)).choices[0].routed_experts
        assert got.start == start and np.array_equal(got.array, rows)


@pytest.mark.parametrize(("rows", "start", "expected"), [
    (3, 0, "routed_experts has 3 rows, not 51: one per token of the prompt (19) and of the completion (33) but the last"),
    (52, 0, "routed_experts has 52 rows, not 51: one per token"),
    (50, 0, "routed_experts has 50 rows, not 51: one per token"),
    (51, 5, "routed_experts has 51 rows, not 46: one per token of the prompt (19) and of the completion (33) but the "
            "last, from position 5 on"),
    (1, 60, "routed_experts has 1 rows, not 0"),
])
def test_a_row_too_many_or_too_few(impl, rows, start, expected):
    err = _fails(impl, response(19, 33, serialized(routing(rows), start)))
    assert (err.choice, err.field, err.token) == (0, "routed_experts", None)
    assert err.reason.startswith(expected)


def test_the_npy_form_counts_from_the_first_token(impl):
    err = _fails(impl, response(19, 33, npy(routing(52))))
    assert (err.field, err.reason.split(":")[0]) == ("routed_experts", "routed_experts has 52 rows, not 51")


def test_the_second_choice_is_counted_too(impl):
    good, bad = serialized(routing(9)), serialized(routing(10))
    assert _fails(impl, response(6, 4, [good, bad], choices=2)).choice == 1


def test_the_prompt_length_from_the_response_or_the_caller(impl):
    """The prompt ids, else usage.prompt_tokens, else prompt_tokens=; with none the rows are not
    counted."""
    sent = serialized(routing(9))
    assert impl.parse_generate_response(response(6, 4, sent, usage=False, prompt_ids=True)).choices[0].routed_experts
    assert impl.parse_generate_response(response(6, 4, sent)).choices[0].routed_experts
    bare = response(6, 4, sent, usage=False)
    assert impl.parse_generate_response(bare, prompt_tokens=6).choices[0].routed_experts.array.shape == (9, 2, 2)
    assert _fails(impl, bare, prompt_tokens=7).field == "routed_experts"
    assert impl.parse_generate_response(bare).choices[0].routed_experts.array.shape == (9, 2, 2)  # not counted
    assert impl.parse_generate_response(response(6, 4, serialized(routing(2)), usage=False)).choices[0].routed_experts


@pytest.mark.parametrize(("usage", "prompt_ids", "field"), [
    (True, False, "usage.prompt_tokens"), (False, True, "prompt_token_ids"), (True, True, "prompt_token_ids"),
])
def test_a_caller_count_the_response_contradicts(impl, usage, prompt_ids, field):
    body = response(6, 4, serialized(routing(9)), usage=usage, prompt_ids=prompt_ids)
    assert impl.parse_generate_response(body, prompt_tokens=6).choices[0].routed_experts
    err = _fails(impl, body, prompt_tokens=5)
    assert (err.choice, err.field) == (None, field)
    assert err.reason == f"the response's prompt has 6 tokens ({field}), not the prompt_tokens=5 the caller gave"


@pytest.mark.parametrize(("value", "error"), [(-1, ValueError), (True, TypeError), ("6", TypeError), (6.0, TypeError)])
def test_prompt_tokens_must_be_a_count(impl, value, error):
    with pytest.raises(error, match="prompt_tokens"):
        impl.parse_generate_response(response(6, 4, None), prompt_tokens=value)


def test_prompt_tokens_through_the_batch_path():
    bare = response(6, 4, serialized(routing(9)), usage=False)
    assert tokenwire.parse_many([bare], format="generate", prompt_tokens=6)[0].choices[0].routed_experts
    with pytest.raises(MalformedResponseError, match="has 9 rows, not 8"):
        tokenwire.parse_many([bare], format="generate", prompt_tokens=5)


@given(prompt=st.integers(1, 40), n=st.integers(0, 40), start=st.integers(0, 45), delta=st.integers(-2, 2),
       form=st.sampled_from(["object", "npy"]), where=st.sampled_from(["usage", "prompt_ids", "option"]))
def test_rows_are_accepted_exactly_when_counted_right(impl, prompt, n, start, delta, form, where):
    """Any prompt, completion and start (past the prompt too): exactly ``max(prompt + n - 1 -
    start, 0)`` rows pass, one fewer or more fails at routed_experts, whichever tells the
    prompt's length."""
    start = 0 if form == "npy" else start
    due = max(prompt + n - 1 - start, 0)
    rows = due + delta
    if rows < 0:
        return
    array = routing(rows)
    sent = npy(array) if form == "npy" else serialized(array, start)
    body = response(prompt, n, sent, usage=where == "usage", prompt_ids=where == "prompt_ids")
    options = {"prompt_tokens": prompt} if where == "option" else {}
    if delta == 0:
        got = impl.parse_generate_response(body, **options).choices[0].routed_experts
        assert np.array_equal(got.array, array)
    else:
        err = _fails(impl, body, **options)
        assert (err.field, err.reason.split(":")[0]) == ("routed_experts", f"routed_experts has {rows} rows, not {due}")


# --- the count on the compiled path: tw_routed_rows (csrc/rules/tw_validate.c) -------------------------

_EDGES = [0, 1, 2, 5, 51, (1 << 31) - 1, 1 << 31, (1 << 61) - 1, 1 << 61, (1 << 61) + 1, 1 << 62, (1 << 63) - 1,
          1 << 63, 1 << 70]


def test_the_count_is_the_cores_on_the_compiled_path(simd, monkeypatch):
    """Every generate choice's routing rows are counted by the compiled kernel (the rules ask
    the choice's kernels), on every form that counts them and whichever field tells the prompt."""
    from tokenwire import _core
    calls = []
    count = _core.routed_row_count
    monkeypatch.setattr(_core, "routed_row_count", lambda *a: calls.append(a) or count(*a))
    full = routing(19 + 33 - 1)
    for sent, options in ((serialized(full[5:], 5), {}), (npy(full), {}), (serialized(full), {"prompt_tokens": 19})):
        body = response(19, 33, sent, usage=not options)
        _core.parse_generate_response(body, **options)
    assert calls == [(33, 19, 5), (33, 19, 0), (33, 19, 0)]
    with pytest.raises(MalformedResponseError, match="has 52 rows, not 51"):
        _core.parse_generate_response(response(19, 33, serialized(routing(52))))


@pytest.mark.parametrize("n", _EDGES)
@pytest.mark.parametrize("prompt", _EDGES)
def test_the_kernels_count_alike(simd, n, prompt):
    from tokenwire import _core, _pycore
    for start in (0, 1, 7, prompt, prompt + n, (1 << 61) + 3):
        assert _core.routed_row_count(n, prompt, start) == _pycore.routed_row_count(n, prompt, start)


@given(n=st.integers(0, 1 << 64), prompt=st.integers(0, 1 << 64), start=st.integers(0, 1 << 64))
def test_the_kernels_count_alike_anywhere(n, prompt, start):
    from tokenwire import _core, _pycore
    assert _core.routed_row_count(n, prompt, start) == _pycore.routed_row_count(n, prompt, start)
