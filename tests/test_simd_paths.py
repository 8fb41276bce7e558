"""One switch forces the code path of every C kernel (the structural scanner, the record
readers, head selection, row validation, base64): ``TOKENWIRE_SIMD``, ``_core.set_simd_path``
and ``_core.simd_path_forced``. Every path gives the same result and the same error (message
and byte offset included) on documents long enough for the vector loops: the embedded samples,
the adversarial corpus, every OpenAI-compatible and SGLang format, and cut copies of them.

The C programs check the same kernels path by path at the C level (``make -C tests/c
scan-test records-test heads-test validate-test``: every test there runs on each path this CPU has;
``.ci/aarch64`` runs them on aarch64 under emulation, NEON and scalar)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tokenwire import MalformedResponseError, samples

from . import strategies
from .conftest import PYTHON, _core
from .openai_strategies import FORMATS, PARSERS, evidence, with_head
from .test_differential import outcome
from .test_openai_mutated import openai_outcome

pytestmark = pytest.mark.skipif(_core is None, reason="the compiled core is not built")

CORPUS = Path(__file__).parent / "corpus"


def generate_documents() -> list[tuple[str, bytes, int | None]]:
    docs = [(name, samples.sample(name), s.top_k) for name, s in samples.SAMPLES.items()]
    for name in json.loads((CORPUS / "expected.json").read_text()):
        docs.append((name, (CORPUS / f"{name}.json").read_bytes(), 3))
    return docs


def message(parse, raw: bytes, **kw) -> str | None:
    try:
        parse(raw, **kw)
    except MalformedResponseError as exc:
        return str(exc)
    return None


def on_every_path(run) -> dict[str, object]:
    results = {}
    for path in _core.simd_paths():
        with _core.simd_path_forced(path):
            results[path] = run()
    return results


@pytest.mark.parametrize("name, raw, top_k", generate_documents(), ids=lambda v: v if isinstance(v, str) else "")
def test_generate_documents_agree_on_every_path(name, raw, top_k):
    for cut in sorted({len(raw), len(raw) - 1, len(raw) // 2, len(raw) // 3}):
        case = strategies.Case(raw=raw[:cut], top_k=top_k)
        results = on_every_path(lambda: (outcome(_core, case), message(_core.parse_generate_response,
                                                                        case.raw, top_k=top_k)))
        first = next(iter(results.values()))
        assert all(r == first for r in results.values()), f"{name} cut at {cut}: the paths differ"
        if cut == len(raw):
            assert first[0] == outcome(PYTHON, case), name


def openai_documents():
    for fmt in FORMATS:
        n = 300  # long records, strings and number runs: every vector loop runs
        ev = evidence([1000 + 7 * t for t in range(n)], [-0.5 - t / 1000 for t in range(n)])
        k = None
        if fmt.heads in ("ids", "dict-ids"):
            k = 3
            with_head(ev, k, [[10 + (t + j) % 7 * 100 + j for j in range(6)] for t in range(n)])
        doc = fmt.build([ev])
        yield pytest.param(fmt, json.dumps(doc).encode(), k, id=fmt.name)
        fmt.set_value(fmt.choices(doc)[0], n - 5, "x")  # a bad value near the end
        yield pytest.param(fmt, json.dumps(doc).encode(), k, id=f"{fmt.name}-bad")


@pytest.mark.parametrize("fmt, raw, k", list(openai_documents()))
def test_openai_formats_agree_on_every_path(fmt, raw, k):
    previous, PARSERS.module = PARSERS.module, _core
    try:
        for cut in (len(raw), len(raw) * 2 // 3):
            results = on_every_path(lambda: (openai_outcome(fmt.parse, raw[:cut], top_k=k),
                                             message(fmt.parse, raw[:cut], top_k=k)))
            first = next(iter(results.values()))
            assert all(r == first for r in results.values()), f"cut at {cut}: the paths differ"
    finally:
        PARSERS.module = previous


def test_forced_path_is_restored():
    before = _core.simd_path()
    for path in _core.simd_paths():
        with pytest.raises(RuntimeError):
            with _core.simd_path_forced(path) as name:
                assert name == path and _core.simd_path() == path
                raise RuntimeError
        assert _core.simd_path() == before
    with pytest.raises(ValueError, match="unknown SIMD path"):
        with _core.simd_path_forced("sse9"):
            pass
    assert _core.simd_path() == before


def test_environment_switch_reaches_the_core():
    code = ("from tokenwire import _core, samples; import tokenwire; "
            "r = tokenwire.parse_generate_response(samples.sample('native_2k_top20'), top_k=20); "
            "print(_core.simd_path(), len(r.choices[0].completion_ids))")
    for path in _core.simd_paths():
        env = {**os.environ, "TOKENWIRE_SIMD": path}
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
        assert out.stdout.split()[0] == path
