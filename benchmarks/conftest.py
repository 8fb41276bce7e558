"""Benchmarks: every contender times the same bytes in one run, so ratios are comparable.

Run ``python -m pytest benchmarks --benchmark-json=benchmarks/last.json`` and then
``python benchmarks/report.py benchmarks/last.json`` for the table of ratios."""

import pytest

from tokenwire import samples


@pytest.fixture(params=list(samples.SAMPLES))
def workload(request):
    """One embedded sample: its name, bytes and the head size it is parsed with."""
    spec = samples.SAMPLES[request.param]
    return spec.name, spec.raw, spec.top_k
