"""Whole-response parsing on the embedded sample workload, side by side."""

from __future__ import annotations

import orjson
import pytest

import tokenwire
from tokenwire.rules import generate as python_rules

from ._contenders import base64_spans, renderers_parse

try:
    import renderers.client as renderers_client
except Exception:  # optional
    renderers_client = None
try:
    import pybase64
except ImportError:
    pybase64 = None



def test_tokenwire(benchmark, workload):
    name, raw, k = workload
    benchmark.group = name
    benchmark.extra_info["bytes"] = len(raw)
    result = benchmark(tokenwire.parse_generate_response, raw, top_k=k)
    assert len(result.choices) >= 1


def test_reference(benchmark, workload):
    name, raw, k = workload
    benchmark.group = name
    benchmark.pedantic(python_rules.parse_generate_response, args=(raw,), kwargs={"top_k": k}, rounds=5, iterations=1)


@pytest.mark.skipif(renderers_client is None, reason="renderers is not installed")
def test_renderers(benchmark, workload):
    name, raw, k = workload
    benchmark.group = name
    benchmark.pedantic(renderers_parse, args=(renderers_client, raw, k), rounds=5, iterations=1)


def test_orjson_loads(benchmark, workload):
    name, raw, _ = workload
    benchmark.group = name
    benchmark(orjson.loads, raw)


@pytest.mark.skipif(pybase64 is None, reason="pybase64 is not installed")
def test_pybase64_spans(benchmark, workload):
    name, raw, _ = workload
    benchmark.group = name
    spans = base64_spans(raw)
    if not spans:
        pytest.skip("no base64 payload in this workload")

    def decode_all():
        for span in spans:
            pybase64.b64decode(span, validate=True)

    benchmark(decode_all)
