"""A mutable input rewritten by another thread while it is parsed (a reused receive buffer)
must never make the compiled core write past what it allocated, nor crash the process:
the parse reads one private snapshot of a mutable buffer, so a pass that counts elements
and the pass that writes them see the same bytes.

Each case runs in a child process (a crash must fail the test, not the run), a bounded
number of rounds, with a thread flipping a bytearray between two documents of equal length
whose per-token arrays have different element counts."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

import tokenwire
from tokenwire import samples

from .openai_strategies import evidence, sglang, vllm_chat, vllm_completions

pytestmark = pytest.mark.skipif(tokenwire.implementation != "c", reason="the compiled core's walkers")


def _generate_mask(n: int) -> dict:
    return {"choices": [{"token_ids": list(range(1, n + 1)), "logprobs": None,
                         "sampling_mask": [[t, t + 1] for t in range(1, n + 1)]}]}


def _ev(n: int):
    return evidence(list(range(3, 3 + n)), [-0.5 - 0.01 * t for t in range(n)])


def _generate_packed(n: int) -> dict:
    return {"choices": [{"token_ids": list(range(1, n + 1)),
                         "completion_logprobs": {"data": samples.b64(b"\0" * 4 * n), "dtype": "float32"}}],
            "prompt_token_ids": [1, 2, 3]}


CASES = {
    # builder of a document for n tokens, the key of the walked array, a short element,
    # the parser and its keyword arguments
    "generate_list_mask": (_generate_mask, "sampling_mask", "[1]", "parse_generate_response",
                           {"require_logprobs": False}),
    "completions_token_logprobs": (lambda n: vllm_completions([_ev(n)], True), "token_logprobs", "-1",
                                   "parse_completions_response", {}),
    "completions_tokens": (lambda n: vllm_completions([_ev(n)], False), "tokens", '"a"',
                           "parse_completions_response", {}),
    "chat_content": (lambda n: vllm_chat([_ev(n)], True), "content", "{}",
                     "parse_chat_completions_response", {}),
    "sglang_triples": (lambda n: sglang([_ev(n)], False), "output_token_logprobs", '[-1,1,"a"]',
                       "parse_sglang_generate_response", {}),
    # the same buffer in three slots of parse_batch, its rows written from each slot's scan
    "batch_packed": (_generate_packed, "token_ids", "7", "parse_batch", {}),
}


def _parser(name: str):
    """The parser of a case: parse_batch takes the body three times (two threads), errors collected."""
    if name == "parse_batch":
        return lambda raw, **kwargs: tokenwire.parse_batch([raw] * 3, errors="collect", threads=2, **kwargs)
    return getattr(tokenwire, name)


def _pair(build, key: str, element: str) -> tuple[bytes, bytes]:
    """The document, and the same document with the walked array holding many more short
    elements in the same bytes (padded with spaces): equal lengths, different counts."""
    text = json.dumps(build(24), separators=(",", ":"))
    start = text.index(f'"{key}":[') + len(key) + 4
    depth, end = 1, start
    while depth:  # the matching bracket (no brackets inside the strings used here)
        depth += {"[": 1, "]": -1}.get(text[end], 0)
        end += 1
    width = end - 1 - start
    count = (width + 1) // (len(element) + 1)
    inner = ",".join([element] * count)
    many = text[:start] + inner.ljust(width) + text[end - 1 :]
    assert len(many) == len(text) and count > 24
    return text.encode(), many.encode()


CHILD = textwrap.dedent("""
    import sys, threading, tokenwire
    sys.setswitchinterval(1e-6)  # hand the GIL over as often as possible
    few, many, parser, kwargs = sys.argv[1].encode(), sys.argv[2].encode(), sys.argv[3], eval(sys.argv[4])
    readonly = sys.argv[5] == "readonly"
    parse = getattr(tokenwire, parser)
    if parser == "parse_batch":
        parse = lambda raw, **kwargs: tokenwire.parse_batch([raw] * 3, errors="collect", threads=2, **kwargs)
    buf = bytearray(many)
    stop = False
    def writer():
        while not stop:
            buf[:] = few
            buf[:] = many
    t = threading.Thread(target=writer)
    t.start()
    outcomes = set()
    try:
        for _ in range(1500):
            try:
                parse(memoryview(buf).toreadonly() if readonly else buf, **kwargs)
                outcomes.add("ok")
            except tokenwire.MalformedResponseError:
                outcomes.add("malformed")
    finally:
        stop = True
        t.join()
    print(sorted(outcomes))
""")


@pytest.mark.parametrize("view", ["bytearray", "readonly"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_rewritten_bytearray_never_crashes(name, view):
    """Also through a read-only view: read-only says nothing of what the owner does."""
    build, key, element, parser, kwargs = CASES[name]
    few, many = _pair(build, key, element)
    _parser(parser)(few, **kwargs)  # a valid response
    result = subprocess.run(
        [sys.executable, "-c", CHILD, few.decode(), many.decode(), parser, repr(kwargs), view],
        capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "ok" in result.stdout or "malformed" in result.stdout


def test_mutable_input_is_read_from_a_snapshot():
    """The arrays a parse returns never alias a mutable input, and rewriting the input after
    the parse changes nothing in them."""
    raw = bytearray(json.dumps(_generate_mask(6)).encode())
    response = tokenwire.parse_generate_response(raw, require_logprobs=False)
    ids = response.choices[0].completion_ids.copy()
    raw[:] = b" " * len(raw)
    assert (response.choices[0].completion_ids == ids).all()
