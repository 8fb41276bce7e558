"""The one exception every rejection raises."""

from __future__ import annotations

from typing import Any

__all__ = ["MalformedResponseError", "invalid_json", "location"]


def location(choice: int | None, field: str | None, token: int | None) -> str:
    """Render a place in a response the way error messages name it.

    ``location(0, "compact_logprobs.offsets", 3)`` is ``choices[0].compact_logprobs.offsets[3]``.
    A field given without a choice is a top-level field.
    """
    parts = []
    if choice is not None:
        parts.append(f"choices[{choice}]")
    if field:
        parts.append(field)
    text = ".".join(parts)
    if token is not None:
        text += f"[{token}]"
    return text


class MalformedResponseError(ValueError):
    """A response does not meet the contract: nothing from it may reach training.

    ``choice``, ``field`` and ``token`` say where (each may be None); ``reason`` is the
    message without the location. ``body_index`` is the body's position in the batch when
    ``tokenwire.parse_many`` parsed it (else None).
    """

    body_index: int | None = None

    def __init__(
        self,
        reason: str,
        *,
        choice: int | None = None,
        field: str | None = None,
        token: int | None = None,
    ) -> None:
        self.reason = reason
        self.choice = choice
        self.field = field
        self.token = token
        where = location(choice, field, token)
        super().__init__(f"{where}: {reason}" if where else reason)

    def __reduce__(self):  # keep the location through pickling (multiprocessing), and the notes
        return (_rebuild, (type(self), self.reason, self.choice, self.field, self.token), self.__dict__)


def _rebuild(cls, reason, choice, field, token):
    return cls(reason, choice=choice, field=field, token=token)


def truncated(size: int) -> str:
    """The one wording of a body that stops before its JSON document does (the parsers, the
    audit and the command line alike)."""
    return (f"invalid JSON: unexpected end of data at byte {size}: the body is truncated (a partial "
            "read, a size limit or a dropped connection)")


def _invalid(exc: BaseException) -> str:
    """The message of a JSON reader's error: :func:`truncated` when the standard library's
    reader ran out of text (the error at the end of the document, or a string never closed)."""
    doc, pos = getattr(exc, "doc", None), getattr(exc, "pos", None)
    if isinstance(doc, str) and isinstance(pos, int):
        text = doc.rstrip(" \t\r\n")
        if text and (pos >= len(text) or str(exc).startswith("Unterminated string")):
            return truncated(len(doc.encode("utf-8", "surrogatepass")))
    return f"invalid JSON: {exc}"


def invalid_json(exc: BaseException, raw: Any = None) -> Exception:
    """What a JSON reader's error on ``raw`` means, decided by types, never by the words of
    a message. A MemoryError is out of memory. orjson raises the same ``JSONDecodeError``
    when it runs out of memory as for a document that is not JSON (and also refuses some
    that are not JSON with "failed to allocate memory": an array left open deep down), so
    given ``raw`` the standard library's reader (held to orjson's rules) reads it again and
    decides: its ``JSONDecodeError`` makes the document invalid JSON, its success (the first
    reader refused JSON) or its MemoryError means out of memory. An error of the standard
    library's reader itself (``_json.loads`` is it) is not read again."""
    from . import _json

    if isinstance(exc, MemoryError):
        return MemoryError(f"out of memory while parsing JSON: {exc}")
    if raw is None or _json.loads is _json.stdlib_loads:
        return MalformedResponseError(_invalid(exc))
    try:
        _json.stdlib_loads(raw)
    except _json.JSONDecodeError as again:
        return MalformedResponseError(_invalid(again))
    except MemoryError:
        pass
    return MemoryError(f"out of memory while parsing JSON: {exc}")
