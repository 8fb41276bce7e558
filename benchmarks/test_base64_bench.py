"""base64 decoding throughput per code path against pybase64, at 1 KB, 64 KB and 16 MB."""

from __future__ import annotations

import base64
import contextlib

import numpy as np
import pytest

try:
    from tokenwire import _core
except ImportError:
    _core = None
try:
    import pybase64
except ImportError:
    pybase64 = None

SIZES = {"1KB": 1 << 10, "64KB": 1 << 16, "16MB": 1 << 24}
PATHS = ("scalar", "avx2", "avx512")


@pytest.fixture(params=list(SIZES), scope="module")
def payload(request):
    raw = np.random.default_rng(0).integers(0, 256, size=SIZES[request.param], dtype=np.uint8).tobytes()
    return request.param, base64.b64encode(raw)


@contextlib.contextmanager
def _tokenwire_path(path):
    """Our base64 path forced for the duration (skips where the CPU lacks it)."""
    if _core is None or path not in _core.simd_paths():
        pytest.skip(f"{path} is not available here")
    previous = _core.set_simd_path(path)
    try:
        yield
    finally:
        _core.set_simd_path(previous)


# pybase64's own path switch (a private function of its C module): its flags for the
# portable code, AVX2 and AVX-512 VBMI, so each of our paths meets its twin.
PYBASE64_FLAGS = {"scalar": 0, "avx2": 64, "avx512": 128}


@contextlib.contextmanager
def _pybase64_path(path):
    """pybase64 forced onto ``path`` for the duration ("default": left alone)."""
    if path == "default":
        yield
        return
    module = pybase64._pybase64
    if not hasattr(module, "_set_simd_path"):
        pytest.skip("this pybase64 cannot force a path")
    previous = module._get_simd_path()
    module._set_simd_path(PYBASE64_FLAGS[path])
    try:
        if path != "scalar" and module._get_simd_path() != PYBASE64_FLAGS[path]:
            pytest.skip(f"pybase64 cannot run {path} here")
        yield
    finally:
        module._set_simd_path(previous)


@pytest.mark.parametrize("path", PATHS)
def test_tokenwire_decode(benchmark, payload, path):
    size, text = payload
    benchmark.group = f"b64decode {size}"
    benchmark.extra_info["bytes"] = len(text)
    out = np.empty(len(text) // 4 * 3, dtype=np.uint8)
    with _tokenwire_path(path):
        benchmark(_core.b64decode, text, out)


@pytest.mark.skipif(pybase64 is None, reason="pybase64 is not installed")
@pytest.mark.parametrize("path", ["default", *PATHS])
def test_pybase64_decode(benchmark, payload, path):
    size, text = payload
    benchmark.group = f"b64decode {size}"
    benchmark.extra_info["bytes"] = len(text)
    with _pybase64_path(path):
        benchmark(pybase64.b64decode, text, validate=True)


def _encode(benchmark, payload, on_path, encoder):
    """Time ``encoder()`` (looked up once on the path: a skip comes first) over the payload's
    bytes, inside ``on_path``."""
    size, text = payload
    raw = base64.b64decode(text)
    benchmark.group = f"b64encode {size}"
    benchmark.extra_info["bytes"] = len(text)
    with on_path:
        benchmark(encoder(), raw)


@pytest.mark.parametrize("path", PATHS)
def test_tokenwire_encode(benchmark, payload, path):
    _encode(benchmark, payload, _tokenwire_path(path), lambda: _core.b64encode)


@pytest.mark.skipif(pybase64 is None, reason="pybase64 is not installed")
@pytest.mark.parametrize("path", ["default", *PATHS])
def test_pybase64_encode(benchmark, payload, path):
    _encode(benchmark, payload, _pybase64_path(path), lambda: pybase64.b64encode)
