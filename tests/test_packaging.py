"""What an installed copy promises besides parsing: the documentation that help() shows (its
examples run against both implementations), an honest warning when the compiled core is
missing, and the JSON reader without orjson held to orjson's rules."""

from __future__ import annotations

import dataclasses
import doctest
import importlib.util
import inspect
import math
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

import tokenwire
from tokenwire.base import _json

CHOSEN_AT_IMPORT = ("parse_generate_response", "b64decode", "b64encode")
OPENAI_PARSERS = ("parse_completions_response", "parse_chat_completions_response", "parse_sglang_generate_response")
CORPUS = Path(__file__).parent / "corpus"


def _facade(impl):
    """``tokenwire`` as it would be with ``impl`` chosen at import."""
    names = dict(vars(tokenwire))
    for name in CHOSEN_AT_IMPORT:
        names[name] = getattr(impl, name)
    for name in OPENAI_PARSERS:
        names[name] = getattr(impl, name)
    return SimpleNamespace(**names)


def _public():
    return [(name, getattr(tokenwire, name)) for name in tokenwire.__all__ if callable(getattr(tokenwire, name))]


@pytest.mark.parametrize("name", [name for name, _ in _public()])
def test_every_public_function_and_type_is_documented(name):
    obj = getattr(tokenwire, name)
    doc = inspect.getdoc(obj) or ""
    # A dataclass without a docstring gets its signature as one: that says nothing.
    assert doc and not doc.startswith(f"{name}("), f"{name} has no docstring"
    if dataclasses.is_dataclass(obj) or name in CHOSEN_AT_IMPORT + OPENAI_PARSERS:
        assert "Example" in doc, f"{name}'s docstring has no example"


@pytest.mark.parametrize("name", CHOSEN_AT_IMPORT + OPENAI_PARSERS)
def test_docstring_examples_run(impl, name):
    """The examples in help() hold for the compiled core and the reference alike."""
    parser = doctest.DocTestParser()
    test = parser.get_doctest(getattr(tokenwire, name).__doc__, {"tokenwire": _facade(impl)}, name, None, 0)
    assert test.examples, f"{name} has no example"
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    runner.run(test)
    assert runner.summarize(verbose=False).failed == 0


def test_result_type_examples_run():
    for cls in (tokenwire.GenerateResponse, tokenwire.GenerateChoice, tokenwire.Ragged, tokenwire.RoutedExperts,
                tokenwire.PayloadSegment):
        test = doctest.DocTestParser().get_doctest(cls.__doc__, {"tokenwire": tokenwire, "np": __import__("numpy")},
                                                   cls.__name__, None, 0)
        runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
        runner.run(test)
        assert runner.summarize(verbose=False).failed == 0, cls.__name__


def test_missing_core_warning_says_so():
    """Without the compiled module the warning names the cause and the remedy, not Python's
    'circular import' guess."""
    code = ("import sys, warnings; sys.modules['tokenwire._core'] = None; warnings.simplefilter('always'); "
            "import tokenwire; print(tokenwire.implementation)")
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOKENWIRE_")}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "python"
    assert "compiled core is not built/installed" in out.stderr
    assert "C compiler" in out.stderr and "circular" not in out.stderr


# --- the JSON reader without orjson -------------------------------------------------------------

REJECTED = [
    b"NaN", b"[Infinity]", b"-Infinity", b"1e400", b"[-1e999]", b"[1,]", b"{\"a\":1,}", b"1 2",
    b"\xef\xbb\xbf{}", b'"\xff"', b'"\\ud800"', b'["\\udc00x"]', b"[" * 1025 + b"]" * 1025, b"",
    b"'a'", b"[01]", b'"\x01"',
]
ACCEPTED = [
    b"18446744073709551615", b"18446744073709551616", b"-9223372036854775808", b"-9223372036854775809",
    b'{"a":1,"a":2}', b'"\\ud83d\\ude00"', b"[" * 200 + b"]" * 200, b' {"x": [1.5, -0.0, 1E2]} ',
    b'"\\/"', '"\u00e9"'.encode(), b"0.1e-400",
]


@pytest.mark.parametrize("data", REJECTED, ids=range(len(REJECTED)))
def test_stdlib_reader_rejects_what_orjson_rejects(data):
    with pytest.raises(_json.JSONDecodeError):
        _json.stdlib_loads(data)


@pytest.mark.parametrize("data", ACCEPTED, ids=range(len(ACCEPTED)))
def test_stdlib_reader_reads_what_orjson_reads(data):
    value = _json.stdlib_loads(data)
    orjson = _orjson_or_none()
    if orjson is not None:
        assert _same(value, orjson.loads(data))


def test_stdlib_reader_on_the_corpus():
    orjson = _orjson_or_none()
    if orjson is None:
        pytest.skip("orjson is not importable: nothing to compare with")
    for path in sorted(CORPUS.glob("*.json")):
        data = path.read_bytes()
        try:
            want = orjson.loads(data)
        except orjson.JSONDecodeError:
            with pytest.raises(_json.JSONDecodeError):
                _json.stdlib_loads(data)
            continue
        assert _same(_json.stdlib_loads(data), want), path.name


def test_stdlib_reader_takes_str_and_buffers():
    assert _json.stdlib_loads('{"a": [1]}') == {"a": [1]}
    assert _json.stdlib_loads(memoryview(b"[2]")) == [2]
    assert _json.stdlib_loads(bytearray(b"[3]")) == [3]
    with pytest.raises(_json.JSONDecodeError):
        _json.stdlib_loads("\ud800")


def test_dumps_and_fragment_match_either_way():
    value = {"a": [1, "\u00e9"], "b": None}
    assert _json.dumps(value) == b'{"a":[1,"\xc3\xa9"],"b":null}'
    assert _json.dumps({"a": 1}, indent=True) == b'{\n  "a": 1\n}'
    blob = tokenwire.encode_packed(__import__("numpy").zeros(2, "float32"))["data"]
    assert _json.loads(_json.dumps([blob], default=tokenwire.json_default)) == [str(blob)]


def test_orjson_is_not_imported_without_the_gil_or_when_switched_off():
    code = "import sys, tokenwire, tokenwire.base._json as j; print(j.backend, 'orjson' in sys.modules)"
    env = {**os.environ, "TOKENWIRE_NO_ORJSON": "1"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["json", "False"]
    if not getattr(sys, "_is_gil_enabled", lambda: True)():
        assert _json.backend == "json"


def _orjson_or_none():
    if importlib.util.find_spec("orjson") is None if "orjson" not in sys.modules else sys.modules["orjson"] is None:
        return None
    import orjson

    return orjson


def _same(a, b) -> bool:
    """Equal, with floats compared bit for bit (-0.0 included) and NaN never produced."""
    if isinstance(a, float) and isinstance(b, float):
        return math.copysign(1, a) == math.copysign(1, b) and a == b
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b
