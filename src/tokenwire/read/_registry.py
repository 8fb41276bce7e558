"""The response formats, one entry each: the name callers pass (``parse_many(format=...)``,
``tokenwire.audit``, ``tokenwire check --format``), what it is, the parser that reads it (a
name of the implementation in use) and its detector, which recognizes a parsed record by its
keys. The options each format's parser takes are the ones ``_options.OPTIONS`` gives it
(``options_of``).

Used by ``parse_many`` and ``aparse_many`` (the formats and their parsers), the audit
(``auditing._formats``: detection in this order, each format's validation and defect classes),
the command line's ``--format`` and the drop-ins. A new format is one entry here (plus its
rules, and its name among the options its parser takes).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..base import _json
from ..base._options import options_of
from ..base._table import KEY
from ..rules.generate import named

__all__ = ["FORMATS", "Format", "WHOLE", "known_format"]


@dataclass(frozen=True)
class Format:
    name: str
    description: str
    parser: str  # the parser's name in the implementation in use (tokenwire.read._select); a stream's: tokenwire's
    # (read._stream.parser_of gives either)
    detect: Callable[[Any], bool]
    reads: str | None = None  # a stream (SSE) format: the whole-body format its events are reassembled into

    @property
    def options(self) -> list[str]:
        """The keyword options its parser takes, in the parser's order (a stream's: its whole-body format's)."""
        return options_of(self.reads or self.name)


# --- detectors -----------------------------------------------------------------------------------

_OPENAI_OBJECTS = {
    "text_completion": "an OpenAI completion",
    "text.completion": "an OpenAI completion (Together's spelling)",
    "chat.completion": "an OpenAI chat completion",
    "chat.completion.chunk": "an OpenAI chat completion chunk",
}


def _detect_generate(document: Any) -> bool:
    """A vLLM ``/inference/v1/generate`` response: an object with ``choices`` or
    ``prompt_token_ids`` and no OpenAI ``object`` type."""
    if not isinstance(document, dict) or named(_OPENAI_OBJECTS, document.get("object")) is not None:
        return False
    if KEY.choices not in document:
        return KEY.prompt_token_ids in document
    choices = document[KEY.choices]
    first = choices[0] if isinstance(choices, list) and choices else None
    return not (isinstance(first, dict) and ("message" in first or "delta" in first))


def _detect_completions(document: Any) -> bool:
    return isinstance(document, dict) and document.get("object") in ("text_completion", "text.completion")


def _detect_chat(document: Any) -> bool:
    return isinstance(document, dict) and document.get("object") == "chat.completion"


def _is_sglang_item(item: Any) -> bool:
    return isinstance(item, dict) and KEY.meta_info in item and (KEY.output_ids in item or "text" in item)


def _detect_stream(document: Any) -> bool:
    """A parsed record is never a stream: an SSE body is not JSON (``--format`` names streams)."""
    return False


def _detect_sglang(document: Any) -> bool:
    """One SGLang ``/generate`` item, or a batch of them."""
    if isinstance(document, list):
        return bool(document) and all(_is_sglang_item(item) for item in document)
    return _is_sglang_item(document)


# --- the registry: in the order --format auto tries them ----------------------------------------

FORMATS: dict[str, Format] = {f.name: f for f in (
    Format("generate", "vLLM /inference/v1/generate", "parse_generate_response", _detect_generate),
    Format("completions", "OpenAI-compatible /v1/completions", "parse_completions_response", _detect_completions),
    Format("chat", "OpenAI-compatible /v1/chat/completions", "parse_chat_completions_response", _detect_chat),
    Format("sglang", "SGLang /generate", "parse_sglang_generate_response", _detect_sglang),
    # Streamed (SSE) bodies: never detected, named by --format; each read by tokenwire.parse_*_stream.
    Format("generate_stream", "vLLM /inference/v1/generate, streamed (SSE)", "parse_generate_stream",
           _detect_stream, reads="generate"),
    Format("completions_stream", "OpenAI-compatible /v1/completions, streamed (SSE)", "parse_completions_stream",
           _detect_stream, reads="completions"),
    Format("chat_stream", "OpenAI-compatible /v1/chat/completions, streamed (SSE)", "parse_chat_completions_stream",
           _detect_stream, reads="chat"),
    Format("sglang_stream", "SGLang /generate, streamed (SSE)", "parse_sglang_generate_stream", _detect_stream,
           reads="sglang"),
)}

WHOLE = {name: entry for name, entry in FORMATS.items() if entry.reads is None}
"""The formats of whole (non-streamed) bodies, the ones detection recognizes."""


# What only a generate body carries: a choice field no OpenAI-compatible server sends.
_GENERATE_ONLY = (KEY.compact_logprobs, KEY.completion_logprobs, KEY.kept_tokens, "payload")


def known_format(raw: Any) -> tuple[str, str] | None:
    """The format (name, description) a body shows positive signs of, or None: an OpenAI
    ``object`` or a chat ``message``, SGLang's ``meta_info``, generate's own fields. Read on a
    parser's error path, to name the parser that reads the body."""
    try:
        document = _json.loads(raw)
    except Exception:
        return None
    if _detect_sglang(document):
        return "sglang", f"an {FORMATS['sglang'].description} response"
    if not isinstance(document, dict):
        return None
    obj = document.get("object")
    choices = document.get(KEY.choices)
    first = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else {}
    if _detect_completions(document):
        return "completions", f"an {FORMATS['completions'].description} response (object {obj!r})"
    if _detect_chat(document) or "message" in first:
        return "chat", f"an {FORMATS['chat'].description} response" + (f" (object {obj!r})" if obj else " (its choices carry message)")
    if obj is None and any(first.get(key) is not None for key in _GENERATE_ONLY):
        carried = next(key for key in _GENERATE_ONLY if first.get(key) is not None)
        return "generate", f"a {FORMATS['generate'].description} response (its choices carry {carried})"
    return None
