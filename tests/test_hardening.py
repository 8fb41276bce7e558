"""Adversarial inputs, threads and memory: every input ends in a correct result or a
MalformedResponseError, the same on every implementation and path."""

from __future__ import annotations

import json
import os
import resource
import threading
from pathlib import Path

import pytest

import tokenwire
from tokenwire import MalformedResponseError, samples

CORPUS = Path(__file__).parent / "corpus"
EXPECTED = json.loads((CORPUS / "expected.json").read_text())


def outcome(impl, raw, top_k=None, parser="parse_generate_response", **kw):
    try:
        getattr(impl, parser)(raw, top_k=top_k, **kw)
    except MalformedResponseError as exc:
        return exc.reason
    return "ok"


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_adversarial_corpus(impl, name):
    """Each case with its parser and options, as tests/corpus/make_corpus.py names them."""
    raw = (CORPUS / f"{name}.json").read_bytes()
    parser = {"chat": "parse_chat_completions_response", "completions": "parse_completions_response"}.get(
        name.split("_")[0], "parse_generate_response")
    got = outcome(impl, raw, top_k=3 if name.endswith("_with_head") else None, parser=parser,
                  **({"num_experts": 64} if name.endswith("_with_experts") else {}))
    assert got.startswith(EXPECTED[name]), got


def test_large_truncations(impl):
    raw = samples.sample("moe_16k")
    for cut in (1, 100, len(raw) // 3, len(raw) // 2, len(raw) - 2, len(raw) - 1):
        assert outcome(impl, raw[:cut]).startswith("invalid JSON")


def mixed_responses() -> list[tuple[bytes, int | None]]:
    small = samples.dumps(samples.response([samples.build_choice(samples.evidence(64, 6, seed=1), transport="compact")], prompt_tokens=16))
    good = [(samples.sample(name), None) for name in ("compact_8k_top20", "moe_16k", "multi_choice")]
    good += [(small, 4), (small, None)]
    bad = [((CORPUS / f"{name}.json").read_bytes(), None) for name in sorted(EXPECTED) if EXPECTED[name] != "ok"]
    return good + bad


def fingerprint(raw: bytes, top_k: int | None) -> object:
    try:
        r = tokenwire.parse_generate_response(raw, top_k=top_k)
    except MalformedResponseError as exc:
        return str(exc)
    return [
        (c.completion_ids.tobytes(), c.completion_logprobs.tobytes(),
         None if c.completion_top_ids is None else c.completion_top_ids.values.tobytes())
        for c in r.choices
    ]


def test_threads_agree_with_one_thread():
    work = mixed_responses()
    expected = [fingerprint(raw, k) for raw, k in work]
    parses = int(os.environ.get("TOKENWIRE_THREAD_PARSES", "1000"))
    failures: list[str] = []

    def run(seed: int) -> None:
        for i in range(parses):
            j = (i * 7 + seed) % len(work)
            if fingerprint(*work[j]) != expected[j]:
                failures.append(f"thread {seed}, response {j}")

    threads = [threading.Thread(target=run, args=(seed,)) for seed in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="needs /proc")
def test_no_leak_over_many_parses():
    work = [(raw, k) for raw, k in mixed_responses() if len(raw) < 100_000]
    count = int(os.environ.get("TOKENWIRE_LEAK_PARSES", "20000"))
    for raw, k in work * 50:  # warm up allocator pools and caches
        fingerprint(raw, k)
    before = _rss()
    for i in range(count):
        fingerprint(*work[i % len(work)])
    grown = _rss() - before
    assert grown < 5 * 2**20, f"RSS grew {grown / 2**20:.1f} MiB over {count} parses"
