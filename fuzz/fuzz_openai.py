"""Fuzz the OpenAI-compatible and SGLang parsers: the compiled core against the reference.

    python fuzz/fuzz_openai.py [libFuzzer options] [corpus dirs]
    (fuzz/smoke.py runs every target for a bounded time with seeds)
"""

import sys

import atheris

with atheris.instrument_imports():
    from _common import OPENAI_PARSERS, openai_outcome

    from tokenwire import _core
    from tokenwire.rules import openai as openai_rules


def test_one(data: bytes) -> None:
    if not data:
        return
    name = OPENAI_PARSERS[data[0] % 3]
    top_k = (None, None, 1, 2)[(data[0] // 3) % 4]
    raw = data[1:]
    expected = openai_outcome(getattr(openai_rules, name), raw, top_k)
    got = openai_outcome(getattr(_core, name), raw, top_k)
    if got != expected:
        raise AssertionError(f"{name}: core {got!r:.300} != reference {expected!r:.300}")


if __name__ == "__main__":
    atheris.Setup(sys.argv, test_one)
    atheris.Fuzz()
