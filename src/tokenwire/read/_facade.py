"""The facade's parsers: the chosen implementation's (``_select.impl``), given the body of a
response object (``.content``), and refusing a body of another known format with the name of
the parser that reads it (on their error path, or by the OpenAI ``object`` a parsed body names).
``parse_many`` takes its parsers from here too."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from . import _select
from ..base._errors import MalformedResponseError
from ._registry import FORMATS, known_format

__all__ = [
    "body_of",
    "parse_chat_completions_response",
    "parse_completions_response",
    "parse_generate_response",
    "parse_sglang_generate_response",
]


_BODY_TYPES = (bytes, bytearray, memoryview, str)


def body_of(raw: Any, argument: str = "raw") -> Any:
    """The bytes to parse: ``raw`` itself (str or bytes-like), or the ``.content`` bytes of a
    response object (httpx, requests, the OpenAI SDK's ``with_raw_response``); anything else
    is a TypeError saying what to pass."""
    if isinstance(raw, _BODY_TYPES):
        return raw
    content = getattr(raw, "content", None)
    if isinstance(content, (bytes, bytearray, memoryview)):
        return content
    try:
        memoryview(raw)
    except TypeError:
        pass
    else:
        return raw  # a bytes-like object: the implementation checks its layout
    raise TypeError(f"{argument} must be the response body as received, bytes (or str), not "
                    f"{type(raw).__name__}: {_what_to_pass(raw)}")


def _what_to_pass(raw: Any) -> str:
    common = ("pass the bytes the server sent: response.content of an httpx or requests "
              "response (or the response itself), await response.read() with aiohttp")
    if isinstance(raw, (dict, list)):
        return (f"a {type(raw).__name__} is a body already decoded (json.loads, response.json()); "
                f"{common}. tokenwire reads the JSON itself, and a body decoded and encoded again "
                "may not be the one the server sent")
    if hasattr(raw, "model_dump_json"):
        return ("an OpenAI SDK object is a body the SDK already decoded, and its pydantic model "
                "drops the fields it does not declare; ask the SDK for the raw response, "
                "client.chat.completions.with_raw_response.create(...) (or completions'), and pass "
                "it or its .content")
    return common


# The OpenAI ``object`` of each body a parser does not read, and the format that reads it.
_OBJECT_FORMAT = {"text_completion": "completions", "text.completion": "completions", "chat.completion": "chat"}
PARSER_OF = {name: entry.parser for name, entry in FORMATS.items()}


def wrong_format(fmt: str, other: str, description: str, why: Any = None) -> MalformedResponseError:
    """The error of a body of format ``other`` given to ``fmt``'s parser."""
    reason = (f"the body is {description}, which tokenwire.{PARSER_OF[other]}() reads, not "
              f"tokenwire.{PARSER_OF[fmt]}()")
    return MalformedResponseError(reason if why is None else f"{reason} (this parser's objection: {why})")


def _facade(fmt: str) -> Callable[..., Any]:
    name = PARSER_OF[fmt]
    objects = fmt != "sglang"  # an SGLang item has no OpenAI ``object``

    def other_format(raw: Any, exc: MalformedResponseError) -> MalformedResponseError | None:
        """The error for a body ``fmt``'s parser refused (``exc``) that another parser reads."""
        found = known_format(raw)
        return None if found is None or found[0] == fmt else wrong_format(fmt, found[0], found[1], exc)

    def object_error(obj: str) -> MalformedResponseError | None:
        """The error for a parsed body whose OpenAI ``object`` another parser reads."""
        other = _OBJECT_FORMAT.get(obj)
        if other is not None and other != fmt:
            return wrong_format(fmt, other, f"an {FORMATS[other].description} response (object {obj!r})")
        return None

    @functools.wraps(getattr(_select.impl, name))
    def parser(raw: Any, **options: Any) -> Any:
        if type(raw) is not bytes and not isinstance(raw, _BODY_TYPES):
            raw = body_of(raw)
        try:
            response = getattr(_select.impl, name)(raw, **options)  # the implementation in use (tests swap it)
        except MalformedResponseError as exc:
            other = other_format(raw, exc)
            if other is None:
                raise
            raise other from exc
        if objects:
            payload = getattr(response, "payload", None)
            obj = payload.get("object") if isinstance(payload, dict) else None
            if isinstance(obj, str):
                error = object_error(obj)
                if error is not None:
                    raise error
        return response

    # The compiled core's twin of this parser (when the core was chosen): the same steps for
    # a bytes body while the core is the implementation in use, this parser for anything else.
    compiled = getattr(_select.impl, "_facade_parser", None)
    if compiled is None:
        return parser
    return functools.wraps(getattr(_select.impl, name))(
        compiled(fmt, _select, parser, getattr(_select.impl, name), other_format, object_error))


parse_generate_response = _facade("generate")
parse_completions_response = _facade("completions")
parse_chat_completions_response = _facade("chat")
parse_sglang_generate_response = _facade("sglang")
