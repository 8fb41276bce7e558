"""Every function that takes a response (or base64 text) takes it as ``str`` or any bytes-like
object, subclasses included (``numpy.bytes_``, ``numpy.str_``, a caller's own subclass of
str, bytes or bytearray), and reads what the object holds: its characters or its buffer,
never what an overridden method says. Both implementations give the result the plain
``bytes`` give, with orjson and with the standard library's reader; and a JSON reader's
error means out of memory or invalid JSON by its type, never by the words in its message."""

from __future__ import annotations

import numpy as np
import pytest

import tokenwire
from tokenwire import MalformedResponseError, samples
from tokenwire.base import _json
from tokenwire.compat import renderers

from .openai_strategies import evidence, sglang, vllm_chat, vllm_completions


class Text(str):
    """A str subclass whose methods say something else than its characters."""

    def encode(self, *args, **kwargs):
        return b"{}"

    def __str__(self):
        return "{}"

    def isascii(self):
        return True

    def startswith(self, *args, **kwargs):
        return False


class Data(bytes):
    """A bytes subclass whose methods say something else than its buffer."""

    def __bytes__(self):
        return b"{}"

    def decode(self, *args, **kwargs):
        return "{}"

    def find(self, *args, **kwargs):
        return -1

    def strip(self, *args, **kwargs):
        return b"{}"


class Buffer(bytearray):
    def __bytes__(self):
        return b"{}"


# The spellings of one response: each gives what bytes(raw) gives.
SPELLINGS = {
    "numpy.bytes_": np.bytes_,
    "numpy.str_": lambda raw: np.str_(raw.decode()),
    "str subclass": lambda raw: Text(raw.decode()),
    "bytes subclass": Data,
    "bytearray subclass": Buffer,
    "memoryview of a bytes subclass": lambda raw: memoryview(Data(raw)),
}


def _ev(n: int):
    return evidence(list(range(3, 3 + n)), [-0.5 - 0.01 * t for t in range(n)])


DOCUMENTS = {
    "parse_generate_response": samples.dumps(samples.response(
        [samples.build_choice(samples.evidence(12, 4, seed=3), transport="compact")], prompt_tokens=4)),
    "parse_completions_response": _json.dumps(vllm_completions([_ev(5)], True)),
    "parse_chat_completions_response": _json.dumps(vllm_chat([_ev(5)], True)),
    "parse_sglang_generate_response": _json.dumps(sglang([_ev(5)], False)),
}


def _fingerprint(response):
    return [(c.completion_ids.tolist(), None if c.completion_logprobs is None else c.completion_logprobs.tolist(),
             None if c.completion_top_ids is None else c.completion_top_ids.to_lists(), c.finish_reason)
            for c in response.choices], response.payload


@pytest.fixture(params=["orjson", "stdlib"])
def reader(request, monkeypatch):
    """The JSON reader in use: orjson (when installed), or the standard library's."""
    if request.param == "orjson" and _json.backend != "orjson":
        pytest.skip("orjson is not in use")
    if request.param == "stdlib":
        monkeypatch.setattr(_json, "loads", _json.stdlib_loads)
    return request.param


@pytest.mark.parametrize("spelling", sorted(SPELLINGS))
@pytest.mark.parametrize("name", sorted(DOCUMENTS))
def test_parsers_read_str_and_bytes_subclasses(impl, reader, name, spelling):
    raw = DOCUMENTS[name]
    parse = getattr(impl, name)
    top_k = 2 if name == "parse_generate_response" else None
    expected = _fingerprint(parse(raw, top_k=top_k))
    assert _fingerprint(parse(SPELLINGS[spelling](raw), top_k=top_k)) == expected


@pytest.mark.parametrize("spelling", sorted(SPELLINGS))
def test_a_bad_response_as_a_subclass_is_the_same_verdict(impl, reader, spelling):
    raw = DOCUMENTS["parse_generate_response"]
    for bad in (raw[:-1], raw.replace(b'"token_ids":[', b'"token_ids":[-1,', 1)):
        with pytest.raises(MalformedResponseError) as plain:
            impl.parse_generate_response(bad)
        with pytest.raises(MalformedResponseError) as given:
            impl.parse_generate_response(SPELLINGS[spelling](bad))
        assert (given.value.field, given.value.token) == (plain.value.field, plain.value.token)
        assert given.value.reason.startswith("invalid JSON") == plain.value.reason.startswith("invalid JSON")


@pytest.mark.parametrize("spelling", sorted(SPELLINGS))
def test_base64_and_blob_read_subclasses(impl, spelling):
    text = tokenwire.b64encode(b"\x00\x01tokenwire\xff")
    assert impl.b64decode(SPELLINGS[spelling](text)).tobytes() == b"\x00\x01tokenwire\xff"
    if spelling not in ("numpy.str_", "str subclass"):  # b64encode's str is UTF-8 text
        assert impl.b64encode(SPELLINGS[spelling](b"\x00\x01tokenwire")) == impl.b64encode(b"\x00\x01tokenwire")
    assert tokenwire.Blob(SPELLINGS[spelling](text)).text == text
    assert type(tokenwire.Blob(SPELLINGS[spelling](text)).text) is bytes


@pytest.mark.parametrize("spelling", sorted(SPELLINGS))
def test_audit_and_the_renderers_drop_in_read_subclasses(reader, spelling):
    raw = DOCUMENTS["parse_generate_response"]
    expected = tokenwire.audit(raw)
    assert expected.valid and tokenwire.audit(SPELLINGS[spelling](raw)) == expected
    plain = renderers.parse_generate_response(raw)
    given = renderers.parse_generate_response(SPELLINGS[spelling](raw))
    assert given["choices"][0]["token_ids"] == plain["choices"][0]["token_ids"]


@pytest.mark.parametrize("name", sorted(DOCUMENTS))
def test_a_reader_error_means_invalid_json_by_its_type(impl, name, monkeypatch):
    """A decode error whose message happens to say "memory" (as "memoryview" does) about a
    document that is not JSON is invalid JSON; a MemoryError is out of memory."""
    real = _json.loads

    def says_memoryview(raw):
        real(raw)  # the reader's verdict, with another message
        raise AssertionError("not reached")

    def worded(raw):
        try:
            return says_memoryview(raw)
        except _json.JSONDecodeError:
            raise _json.JSONDecodeError("Input must be bytes, bytearray, memoryview, or str", "", 0) from None

    def exhausted(raw):
        raise MemoryError

    parse = getattr(impl, name)
    bad = DOCUMENTS[name] + b"x"
    monkeypatch.setattr(_json, "loads", worded)
    with pytest.raises(MalformedResponseError, match="invalid JSON"):
        parse(bad)
    with pytest.raises(MalformedResponseError, match="invalid JSON"):
        renderers.parse_generate_response(bad)
    monkeypatch.setattr(_json, "loads", exhausted)
    with pytest.raises(MemoryError):
        parse(DOCUMENTS[name])


def test_invalid_json_maps_errors_by_type(monkeypatch):
    from tokenwire.base._errors import invalid_json

    # The first reader stands for orjson whether or not orjson is installed: an error of the
    # standard library's reader itself is never read again (last assertion).
    monkeypatch.setattr(_json, "loads", lambda raw: _json.stdlib_loads(raw))
    worded = _json.JSONDecodeError("Input must be bytes, bytearray, memoryview, or str", "", 0)
    assert isinstance(invalid_json(worded, b'{"a": memoryview}'), MalformedResponseError)
    assert isinstance(invalid_json(worded, b'{"a": 1}'), MemoryError)  # JSON the reader refused
    assert isinstance(invalid_json(MemoryError(), b'{"a": 1}'), MemoryError)
    stdlib = _json.JSONDecodeError("out of memory, says the text", "", 0)
    assert isinstance(invalid_json(stdlib), MalformedResponseError)
    monkeypatch.setattr(_json, "loads", _json.stdlib_loads)
    assert isinstance(invalid_json(worded, b'{"a": 1}'), MalformedResponseError)
