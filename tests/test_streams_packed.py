"""vLLM's packed top-k (``return_top_k_logprobs``) on a streamed ``/v1/completions``: each chunk's
``logprobs.top_k`` block holds its own tokens' candidates, and the stream reader concatenates
the blocks (positions summed, ids and values appended) into the whole body's one block, held to
the whole-body parse on both implementations and every path.

The chunks are laid out as vLLM's completion stream generator writes them with the packed
block (``CompletionLogProbs``: ``text_offset``, ``token_logprobs``, ``tokens`` as "token_id:N",
``top_logprobs: []``, then ``top_k = {num_positions, k, token_ids, logprobs}``, base64 of the
chunk's ``n x k`` int32 ids and float32 values), ``token_ids`` with ``return_token_ids``.
"""

from __future__ import annotations

import base64
import copy
import json
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tokenwire
from tokenwire import MalformedResponseError
from tokenwire.read import _select

from .test_streams import _outcome, assert_same, assert_same_outcome, dumps, incremental, sse, use  # noqa: F401 (a fixture)
from .test_streams import refused as _refused

K = 4


def b64(values: Any, dtype: str) -> str:
    return base64.b64encode(np.ascontiguousarray(values, dtype=dtype).tobytes()).decode()


class Packed:
    """One choice of ``n`` tokens with ``K`` candidates each, the sampled token first among them."""

    def __init__(self, n: int = 10, seed: int = 0, *, token_ids: bool = True):
        rng = np.random.default_rng(seed)
        self.ids = rng.integers(0, 150_000, size=n).tolist()
        self.token_ids = token_ids
        self.cand = np.empty((n, K), dtype=np.int32)
        self.vals = np.empty((n, K), dtype=np.float32)
        for t, token in enumerate(self.ids):
            others = rng.choice(np.setdiff1d(np.arange(150_000, 150_100), [token]), K - 1, replace=False)
            self.cand[t] = [token, *others]
            mass = np.sort(rng.dirichlet(np.ones(K + 1)))[::-1][:K]  # a head's share of a distribution
            self.vals[t] = np.log(mass).astype(np.float32)
        self.prompt = [1, 2, 3, 4]

    def lists(self, a: int, b: int) -> dict[str, Any]:
        return {"text_offset": list(range(a, b)), "token_logprobs": [float(v) for v in self.vals[a:b, 0]],
                "tokens": [f"token_id:{t}" for t in self.ids[a:b]], "top_logprobs": [],
                "top_k": {"num_positions": b - a, "k": K, "token_ids": b64(self.cand[a:b], "<i4"),
                          "logprobs": b64(self.vals[a:b], "<f4")}}

    def choice(self, a: int, b: int, last: bool, first: bool) -> dict[str, Any]:
        choice = {"index": 0, "text": "x" * (b - a), "logprobs": self.lists(a, b),
                  "finish_reason": "length" if last else None, "stop_reason": None,
                  "prompt_token_ids": self.prompt if first else None}
        if self.token_ids:
            choice["token_ids"] = self.ids[a:b]
        return choice

    def chunks(self, per: int) -> list[dict[str, Any]]:
        n = len(self.ids)
        chunks = [{"id": "cmpl-1", "object": "text_completion", "created": 1, "model": "m",
                   "choices": [self.choice(a, min(a + per, n), a + per >= n, a == 0)], "usage": None}
                  for a in range(0, n, per)]
        chunks.append({"id": "cmpl-1", "object": "text_completion", "created": 1, "model": "m", "choices": [],
                       "usage": self.usage()})
        return chunks

    def usage(self) -> dict[str, Any]:
        return {"prompt_tokens": 4, "total_tokens": 4 + len(self.ids), "completion_tokens": len(self.ids)}

    def whole(self) -> bytes:
        n = len(self.ids)
        choice = self.choice(0, n, True, True)
        return dumps({"id": "cmpl-1", "object": "text_completion", "created": 1, "model": "m", "choices": [choice],
                      "usage": self.usage()}).encode()




def refused(body: bytes, **options: Any) -> MalformedResponseError:
    return _refused(body, "completions", **options)


@pytest.mark.parametrize("token_ids", [True, False], ids=["token_ids", "tokens alone"])
@pytest.mark.parametrize("per", [1, 3, 64])
@pytest.mark.parametrize("top_k", [None, 2])
def test_per_chunk_blocks_are_the_whole_bodys(use, per, top_k, token_ids):
    p = Packed(n=11, seed=per, token_ids=token_ids)
    want = use.parse_completions_response(p.whole(), top_k=top_k)
    got = tokenwire.parse_completions_stream(sse(p.chunks(per)), top_k=top_k)
    assert_same(got, want)
    assert got.choices[0].completion_ids.tolist() == p.ids
    if top_k:
        assert got.choices[0].completion_top_ids.to_lists() == p.cand[:, :top_k].tolist()


def _edit(chunks: list[dict[str, Any]], at: int) -> dict[str, Any]:
    return chunks[at]["choices"][0]["logprobs"]["top_k"]


@pytest.mark.parametrize("change, field, reason", [
    (lambda b: b.update(num_positions=2), "logprobs.top_k.num_positions", "2 positions for the chunk's 3 token ids"),
    (lambda b: b.update(k=3), "logprobs.top_k.k", "k is 3, event 0's 4"),
    (lambda b: b.update(k=-1), "logprobs.top_k.k", "must be a non-negative int"),
    (lambda b: b.update(token_ids="AAAA="), "logprobs.top_k.token_ids", "must be base64 of 12 int32 values"),
    (lambda b: b.update(logprobs=b64(np.zeros(12), "<f8")), "logprobs.top_k.logprobs", "holds 96 bytes, not the 48"),
    (lambda b: b.update(token_ids=7), "logprobs.top_k.token_ids", "must be base64"),
])
def test_a_broken_block_at_its_event(use, change, field, reason):
    chunks = Packed(n=9, seed=1).chunks(3)
    change(_edit(chunks, 1))
    err = refused(sse(chunks))
    assert (err.choice, err.field) == (0, field) and err.reason.startswith("event 1: " + reason), err.reason


def test_a_block_not_an_object(use):
    chunks = Packed(n=9, seed=1).chunks(3)
    chunks[2]["choices"][0]["logprobs"]["top_k"] = "x"
    err = refused(sse(chunks))
    assert (err.choice, err.field) == (0, "logprobs.top_k") and err.reason.startswith("event 2: must be an object")


def test_a_block_missing_from_a_later_chunk(use):
    chunks = Packed(n=9, seed=1).chunks(3)
    del chunks[2]["choices"][0]["logprobs"]["top_k"]
    err = refused(sse(chunks))
    assert (err.choice, err.field) == (0, "logprobs.top_k")
    assert err.reason.startswith("event 2: missing, where event 0's chunk had one")


def test_a_bad_candidate_is_placed_in_its_event(use):
    p = Packed(n=9, seed=2)
    p.cand[7, 2] = -1  # token 7, in event 2
    err = refused(sse(p.chunks(3)))
    assert (err.choice, err.field, err.token) == (0, "logprobs.top_k.token_ids", 7) and "(event 2)" in str(err)


def test_both_implementations_agree(simd, monkeypatch):
    from tokenwire import _core, _pycore
    for seed in range(4):
        p = Packed(n=3 + seed * 4, seed=seed, token_ids=seed % 2 == 0)
        bodies = [sse(p.chunks(1 + seed))]
        chunks = p.chunks(2)
        for at in (0, len(chunks) - 2):
            for change in (lambda b: b.update(k=K + 1), lambda b: b.update(num_positions=0),
                           lambda b: b.update(logprobs="")):
                edited = copy.deepcopy(chunks)
                change(_edit(edited, at))
                bodies.append(sse(edited))
        for body in bodies:
            outcomes = []
            for impl in (_core, _pycore):
                monkeypatch.setattr(_select, "impl", impl)
                for top_k in (None, 2):
                    outcomes.append([_outcome("completions", body, [], True, top_k=top_k),
                                     _outcome("completions", body, list(range(0, len(body), 13)), True, top_k=top_k),
                                     _outcome("completions", body, [], False, top_k=top_k)])
            for group in (outcomes[0::2], outcomes[1::2]):  # by top_k
                flat = [o for os in group for o in os]
                for o in flat[1:]:
                    assert_same_outcome(o, flat[0])


@st.composite
def split_packed_streams(draw):
    p = Packed(n=draw(st.integers(1, 16)), seed=draw(st.integers(0, 500)), token_ids=draw(st.booleans()))
    body = sse(p.chunks(draw(st.integers(1, 5))))
    return p, body, draw(st.lists(st.integers(0, len(body)), max_size=20))


@settings(max_examples=40, deadline=None)
@given(split_packed_streams())
def test_random_splits_give_the_whole_body_result(stream):
    p, body, cuts = stream
    want = _select.impl.parse_completions_response(p.whole(), top_k=2)
    assert_same(incremental("completions", body, cuts, top_k=2), want)
