"""Parse time grows linearly with adversarial inputs: many choices, many superseded duplicate
keys, deep nesting, long escaped strings. Each input is parsed at size n and 4n; a linear
parser takes about 4x as long, a quadratic one 16x. The bound (8x) is a ratio of two
timings in one process, minimum of three runs each, so load on the machine shifts both;
the sizes keep both inputs out of the CPU caches, and Python's cyclic collector is paused
while timing (its full passes over many new lists are the interpreter's cost, not ours)."""

from __future__ import annotations

import gc
import json
import time

import pytest

import tokenwire


def _many_choices(n: int) -> bytes:
    choice = {"token_ids": [1], "logprobs": {"content": [{"token": "token_id:1", "logprob": -0.5}]}}
    return json.dumps({"choices": [choice] * n}).encode()


def _duplicate_keys(n: int) -> bytes:
    # Every choice repeats "token_ids" many times; the last occurrence wins.
    dup = ",".join(['"token_ids":[1]'] * 50)
    choice = "{" + dup + ',"logprobs":{"content":[{"token":"token_id:1","logprob":-0.5}]}}'
    return ('{"choices":[' + ",".join([choice] * (n // 50)) + "]}").encode()


def _nesting(n: int) -> bytes:
    # Deep-but-legal nesting in a payload value, many times over.
    value = "[" * 100 + "]" * 100
    return json.dumps({"choices": [{"token_ids": [1], "logprobs": {"content": [
        {"token": "token_id:1", "logprob": -0.5}]}}]}).encode()[:-1] + (
        ',"extra":[' + ",".join([value] * (n // 100)) + "]}").encode()


def _escapes(n: int) -> bytes:
    return json.dumps({"choices": [{"token_ids": [1], "logprobs": {"content": [
        {"token": "token_id:1", "logprob": -0.5, "text": "\\\"\u00e9\n" * n}]}}]}).encode()


INPUTS = {"many_choices": (_many_choices, 5000), "duplicate_keys": (_duplicate_keys, 100000),
          "nesting": (_nesting, 200000), "escapes": (_escapes, 1000000)}


def _seconds(parse, raw: bytes) -> float:
    best = float("inf")
    gc.disable()
    try:
        for _ in range(3):
            start = time.perf_counter()
            try:
                parse(raw)
            except tokenwire.MalformedResponseError:
                pass
            best = min(best, time.perf_counter() - start)
    finally:
        gc.enable()
    return best


@pytest.mark.parametrize("name", sorted(INPUTS))
def test_parse_time_grows_linearly(impl, name):
    build, n = INPUTS[name]
    small, large = build(n), build(4 * n)
    _seconds(impl.parse_generate_response, small)  # warm
    ratios = []
    for _ in range(3):  # a load spike on a shared machine inflates one ratio, not three
        ratios.append(_seconds(impl.parse_generate_response, large) / _seconds(impl.parse_generate_response, small))
        if ratios[-1] < 8:
            break
    assert min(ratios) < 8, f"{name}: 4x the input took {min(ratios):.1f}x the time"
