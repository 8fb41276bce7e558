"""Fuzz the compiled core's hash tables with ids and keys that collide under the fixed hashes
they once had (_collide.py): compact rows, native / chat / SGLang candidate lists and keyed
completions rows of such ids, with repeats planted (agreeing or not), the sampled id present
or absent, against the reference on every SIMD path.

    python fuzz/fuzz_collide.py [libFuzzer options] [corpus dirs]
    (fuzz/smoke.py runs every target for a bounded time with seeds)
"""

import sys

import atheris

with atheris.instrument_imports():
    import _collide
    from _common import OPENAI_PARSERS, PATHS, openai_outcome, outcome

    from tokenwire import _core
    from tokenwire.rules import generate as python_rules
    from tokenwire.rules import openai as openai_rules

MAX = 1024  # candidates a row at most
SETS = {"one_cluster32": _collide.ids_one_cluster32(MAX),
        "top_bits_zero64": _collide.ids_top_bits_zero64(MAX),
        "low_bits_shared": _collide.keys_low_bits_shared(MAX)}
# shape: (builder, the id set that collides in its table, parser's name; None: generate)
SHAPES = [
    (_collide.compact, "one_cluster32", None),
    (_collide.compact, "top_bits_zero64", None),
    (_collide.native, "top_bits_zero64", None),
    (_collide.chat, "top_bits_zero64", OPENAI_PARSERS[1]),
    (_collide.sglang, "top_bits_zero64", OPENAI_PARSERS[2]),
    (_collide.completions, "low_bits_shared", OPENAI_PARSERS[0]),
]


def document(fdp) -> tuple:
    build, family, parser = SHAPES[fdp.ConsumeIntInRange(0, len(SHAPES) - 1)]
    n = fdp.ConsumeIntInRange(1, MAX)
    ids = list(SETS[family][:n])
    values = _collide.distinct_values(n)
    for _ in range(fdp.ConsumeIntInRange(0, 3)):  # repeats: the same value, or another
        i, j = fdp.ConsumeIntInRange(0, n - 1), fdp.ConsumeIntInRange(0, n - 1)
        ids[i] = ids[j]
        values[i] = values[j] if fdp.ConsumeBool() else -fdp.ConsumeProbability()
    present = fdp.ConsumeIntInRange(0, 7) != 0
    sampled = ids[fdp.ConsumeIntInRange(0, n - 1)] if present else SETS[family][-1]
    top_k = (None, 1, 3, 20)[fdp.ConsumeIntInRange(0, 3)]
    if build is _collide.compact:
        num_top = (n, 0, 5, 64, 65, 2**40)[fdp.ConsumeIntInRange(0, 5)]
        raw = build(ids, values, sampled, num_top)
    else:
        lp = values[ids.index(sampled)] if sampled in ids else -0.5
        raw = build(ids, values, sampled, lp)
    return raw, parser, top_k


def test_one(data: bytes) -> None:
    raw, parser, top_k = document(atheris.FuzzedDataProvider(data))

    def result(module):
        if parser is None:
            return outcome(module, raw, top_k)
        return openai_outcome(getattr(module, parser), raw, top_k)

    expected = result(python_rules if parser is None else openai_rules)
    for path in PATHS:
        _core.set_simd_path(path)
        got = result(_core)
        if got != expected:
            where = f"{parser or 'generate'}, {path}"
            raise AssertionError(f"{where}: core {got!r:.300} != reference {expected!r:.300}")


if __name__ == "__main__":
    atheris.Setup(sys.argv, test_one)
    atheris.Fuzz()
