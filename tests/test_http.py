"""End to end over HTTP: uvicorn serves the sample app (examples/serve_samples.py) in a child
process on 127.0.0.1, httpx.AsyncClient fetches every sample 64 requests at a time, plain and
gzip-compressed, whole and chunked, and every body parses to exactly what the sample's own
bytes parse to."""

from __future__ import annotations

import asyncio
import importlib.util
import itertools
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")
httpx = pytest.importorskip("httpx")

import tokenwire  # noqa: E402
from tokenwire import samples  # noqa: E402

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
CONCURRENCY = 64
# Any level exercises the same path; 1 (Starlette's default is 9) keeps the run short.
GZIP_LEVEL = 1


def load(name: str):
    spec = importlib.util.spec_from_file_location(f"tokenwire_examples_{name}", EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


serve_samples = load("serve_samples")
fetch = load("fetch")


@pytest.fixture(scope="module")
def base_url():
    with serve_samples.serve_in_subprocess(gzip_level=GZIP_LEVEL, timeout=60) as url:
        yield url


@pytest.fixture(scope="module")
def expected():
    """Each sample's own bytes, parsed."""
    return {
        name: tokenwire.parse_generate_response(samples.sample(name), top_k=s.top_k)
        for name, s in samples.SAMPLES.items()
    }


def same_ragged(a, b, what):
    assert (a is None) == (b is None), what
    if a is not None:
        np.testing.assert_array_equal(a.offsets, b.offsets, strict=True, err_msg=what)
        np.testing.assert_array_equal(a.values, b.values, strict=True, err_msg=what)


def assert_same(got: tokenwire.GenerateResponse, want: tokenwire.GenerateResponse, name: str) -> None:
    assert got.request_id == want.request_id and got.usage == want.usage, name
    np.testing.assert_array_equal(got.prompt_token_ids, want.prompt_token_ids, strict=True, err_msg=name)
    assert len(got.choices) == len(want.choices), name
    for g, w in zip(got.choices, want.choices):
        what = f"{name} choice {w.index}"
        assert (g.index, g.finish_reason) == (w.index, w.finish_reason), what
        np.testing.assert_array_equal(g.completion_ids, w.completion_ids, strict=True, err_msg=what)
        assert (g.completion_logprobs is None) == (w.completion_logprobs is None), what
        if w.completion_logprobs is not None:
            np.testing.assert_array_equal(g.completion_logprobs, w.completion_logprobs, strict=True, err_msg=what)
        same_ragged(g.completion_top_ids, w.completion_top_ids, f"{what} head ids")
        same_ragged(g.completion_top_logprobs, w.completion_top_logprobs, f"{what} head logprobs")
        same_ragged(g.sampling_mask, w.sampling_mask, f"{what} sampling mask")
        assert (g.routed_experts is None) == (w.routed_experts is None), what
        if w.routed_experts is not None:
            assert g.routed_experts.start == w.routed_experts.start, what
            np.testing.assert_array_equal(g.routed_experts.array, w.routed_experts.array, strict=True, err_msg=what)


def run(coroutine, seconds: float = 120):
    return asyncio.run(asyncio.wait_for(coroutine, seconds))


def test_the_wire_bytes_are_the_servers_serialization(base_url):
    """JSONResponse re-serializes the decoded document to exactly the sample's bytes: the
    samples are byte for byte what vLLM's serializer sends."""

    async def go():
        async with httpx.AsyncClient(base_url=base_url, timeout=60) as client:
            listed = (await client.get("/samples")).json()
            assert {n: v["top_k"] for n, v in listed.items()} == {n: s.top_k for n, s in samples.SAMPLES.items()}
            for name in samples.SAMPLES:
                reply = await client.get(f"/samples/{name}", headers={"Accept-Encoding": "identity"})
                assert reply.status_code == 200 and reply.headers["content-type"] == "application/json"
                assert "render;dur=" in reply.headers["server-timing"]
                assert reply.content == samples.sample(name), name

    run(go())


def test_every_sample_64_concurrent(base_url, expected):
    """64 requests in flight at once: every sample, plain and gzip, whole and chunked."""
    combos = list(itertools.product(samples.SAMPLES, (False, True), (False, True)))
    jobs = list(itertools.islice(itertools.cycle(combos), CONCURRENCY))
    results = run(fetch.fetch_many(base_url, jobs, concurrency=CONCURRENCY))
    assert len(results) == CONCURRENCY and len(set(jobs)) == len(combos)
    for (name, gzip, chunked), result in zip(jobs, results):
        assert result.name == name
        assert result.headers.get("content-encoding") == ("gzip" if gzip else None), name
        if chunked:
            assert result.headers.get("transfer-encoding") == "chunked" and "content-length" not in result.headers
        else:
            assert "transfer-encoding" not in result.headers
            assert int(result.headers["content-length"]) == result.wire_bytes
        if gzip:
            assert result.wire_bytes < len(result.content), name
        else:
            assert result.wire_bytes == len(result.content), name
        # result.response is tokenwire's parse of response.content with the sample's top_k
        assert_same(result.response, expected[name], name)
