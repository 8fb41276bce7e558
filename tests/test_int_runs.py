"""Lists of integers written as JSON text (``prompt_token_ids``, ``token_ids``, compact
``offsets``), read by the scanner a block of 64 bytes at a time on the SIMD paths
(``tws_uint_block_avx2`` on x86-64's AVX2 path, ``tws_uint_block_avx512`` on its AVX-512 one:
every element of 1 to 8 digits read from the block's masks) and one element at a time on the
scalar path: on every path the same ids, or the
same refusal with the same message, as the reference. Lists long enough for several blocks,
elements of 1 to 20 digits (9 or more go the serial way), and an odd element (a leading
zero, a sign, a fraction, an exponent, whitespace, an empty element, a value past 2^64, a
string) at any place, so at every offset of a block."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import tokenwire
from tokenwire import samples
from tokenwire.read import _select

from .conftest import PYTHON, _core

# Elements the block reader stops at (and the reference refuses or reads as it does).
ODD = ["007", "00", "-1", "-0", "1.0", "1e3", "2E1", " 5", "5 ", "", "18446744073709551616", "99999999999999999999",
       '"7"', "null", "true", "+1", "0x10", "1_0", "[1]"]


def _digits(draw: Any) -> str:
    width = draw(st.sampled_from([1, 1, 2, 5, 6, 6, 7, 8, 8, 9, 10, 12, 16, 19, 20]))
    if width == 1:
        return str(draw(st.integers(0, 9)))
    return str(draw(st.integers(10 ** (width - 1), 10**width - 1)))


@st.composite
def int_lists(draw: Any) -> tuple[str, bool]:
    """The text of a list (without the brackets) and whether it holds an odd element."""
    count = draw(st.integers(0, 90))
    elements = [_digits(draw) for _ in range(count)]
    odd = draw(st.booleans()) and count > 0
    if odd:
        elements[draw(st.integers(0, count - 1))] = draw(st.sampled_from(ODD))
    return ",".join(elements), odd


def _body(prompt_text: str) -> bytes:
    raw = samples._one_choice(3, 24, 5, "compact", 4)
    return re.sub(rb'"prompt_token_ids":\[[^\]]*\]', b'"prompt_token_ids":[' + prompt_text.encode() + b"]", raw)


def _outcome(raw: bytes) -> Any:
    try:
        response = tokenwire.parse_generate_response(raw)
    except (tokenwire.MalformedResponseError, ValueError) as exc:
        return type(exc), str(exc)
    return np.asarray(response.prompt_token_ids).tolist()


def _assert_agree(reference: Any, compiled: list[Any], context: Any) -> None:
    """Every compiled path gives the same outcome; the reference the same one, but for the
    wording of a JSON syntax error (its parser's, not the scanner's: both say "invalid JSON")."""
    assert all(got == compiled[0] for got in compiled), (context, compiled)
    if not compiled:
        return
    if isinstance(reference, tuple) and reference[1].startswith("invalid JSON"):
        assert isinstance(compiled[0], tuple) and compiled[0][0] is reference[0], (context, reference, compiled)
        assert compiled[0][1].startswith("invalid JSON"), (context, reference, compiled)
    else:
        assert compiled[0] == reference, (context, reference, compiled)


def _every_path(raw: bytes, monkeypatch: Any) -> list[Any]:
    monkeypatch.setattr(_select, "impl", PYTHON)
    monkeypatch.setattr(_select, "kernels", PYTHON)
    outcomes = [_outcome(raw)]
    if _core is not None:
        monkeypatch.setattr(_select, "impl", _core)
        monkeypatch.setattr(_select, "kernels", _core)
        for path in _core.simd_paths():
            with _core.simd_path_forced(path):
                outcomes.append(_outcome(raw))
    return outcomes


@given(int_lists())
def test_prompt_ids_on_every_path(monkeypatch, case):
    text, odd = case
    raw = _body(text)
    reference, *compiled = _every_path(raw, monkeypatch)
    _assert_agree(reference, compiled, text)
    if not odd and all(len(e) < 20 or int(e) < 2**64 for e in text.split(",") if e):
        wanted = [int(e) for e in text.split(",")] if text else []
        if all(x < 2**63 for x in wanted) and not isinstance(reference, tuple):
            assert reference == wanted


@pytest.mark.parametrize("odd", ODD, ids=repr)
@pytest.mark.parametrize("width", [1, 6, 8, 9])
def test_an_odd_element_at_every_offset_of_a_block(monkeypatch, odd, width):
    """Elements of one width, then the odd one at each place of the first two blocks."""
    element = "1" * width
    count = 140 // (width + 1) + 4  # past two blocks of 64 bytes
    for at in range(count):
        elements = [element] * count
        elements[at] = odd
        raw = _body(",".join(elements))
        reference, *compiled = _every_path(raw, monkeypatch)
        _assert_agree(reference, compiled, at)


@pytest.mark.parametrize("count", [7, 8, 9, 10, 31, 32, 33, 64, 65])
def test_runs_of_every_width(monkeypatch, count):
    """Lists of `count` elements of each width 1 to 9 (and mixed), so the blocks' last comma
    falls at every place of a block."""
    rng = np.random.default_rng(count)
    for width in range(1, 10):
        low = 0 if width == 1 else 10 ** (width - 1)
        for values in (rng.integers(low, 10**width, count), rng.integers(0, 10 ** rng.integers(1, 10, count))):
            text = ",".join(map(str, values.tolist()))
            reference, *compiled = _every_path(_body(text), monkeypatch)
            assert reference == values.tolist()
            _assert_agree(reference, compiled, text)
