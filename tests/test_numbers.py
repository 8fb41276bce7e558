"""Numbers in native JSON records are read as Python's float() reads them, on every path."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from tokenwire import MalformedResponseError

DECIMAL = r"-?(0|[1-9][0-9]{0,24})(\.[0-9]{1,24})?([eE][+-]?[0-9]{1,3})?"


def document(literal: str) -> bytes:
    entry = '{"token":"token_id:5","logprob":' + literal + ',"bytes":null,"top_logprobs":[]}'
    return ('{"choices":[{"token_ids":[5],"logprobs":{"content":[' + entry + "]}}]}").encode()


@given(st.from_regex(DECIMAL, fullmatch=True) | st.floats(allow_nan=False, allow_infinity=False).map(repr)
       | st.floats(min_value=0, max_value=1e-300).map(lambda x: f"{x:.17e}"))
def test_logprob_literals_read_as_python_floats(impl, literal):
    expected = float(literal)
    if "." not in literal and "e" not in literal.lower():
        expected = float(int(literal))  # an integer literal is an int to JSON readers
    try:
        value = impl.parse_generate_response(document(literal)).choices[0].completion_logprobs[0]
    except MalformedResponseError as exc:
        # Out of double range is invalid JSON; the sentinel carries no evidence.
        assert math.isinf(expected) or expected == -9999.0, (literal, exc)
        return
    assert value == expected and math.copysign(1, value) == math.copysign(1, expected), literal
