"""Fuzz parse_generate_response: the compiled core on every SIMD path against the reference.

    python fuzz/fuzz_generate.py [libFuzzer options] [corpus dirs]
    (fuzz/smoke.py runs every target for a bounded time with seeds)
"""

import sys

import atheris

with atheris.instrument_imports():
    from _common import PATHS, outcome

    from tokenwire import _core
    from tokenwire.rules import generate as python_rules


def test_one(data: bytes) -> None:
    if not data:
        return
    top_k = (None, 1, 2, 3, 20)[data[0] % 5]
    raw = data[1:]
    expected = outcome(python_rules, raw, top_k)
    for path in PATHS:
        _core.set_simd_path(path)
        got = outcome(_core, raw, top_k)
        if got != expected:
            raise AssertionError(f"{path}: core {got!r:.300} != reference {expected!r:.300}")


if __name__ == "__main__":
    atheris.Setup(sys.argv, test_one)
    atheris.Fuzz()
