"""``tokenwire.audit``: the verdict on one captured record, as ``tokenwire check`` reaches it."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from ..base import _json
from ..base._options import ParseOptions, check_names, with_options
from ._formats import CLASSES, FORMATS, Defect, check_record

__all__ = ["Verdict", "audit", "verdict"]


@dataclass(frozen=True)
class Verdict:
    """What one record is: valid, or its first defect sorted into a class of
    ``tokenwire check`` (``docs/cli.md``, "Defect classes").

    ``defect`` is the class key (``"length_mismatch"``, ``"bad_logprob"``, ...) and ``label``
    its words; ``choice``, ``field`` and ``token`` are where ``MalformedResponseError`` put the
    defect, ``location`` the same as one path (relative to the record, the ``field`` path
    included) and ``message`` its reason. For a length mismatch whose sizes are known,
    ``length_field`` names what was counted against the token ids and ``length_difference`` is
    its count minus the token count (+1: one logprob more than ids). ``request_id`` and
    ``model`` are the response's own where it names them; ``choices`` and ``tokens``
    (completion tokens, every choice) are known for a valid response.

    Example::

        >>> verdict = tokenwire.audit(b'{"choices":[{"token_ids":[7],"logprobs":null}]}')
        >>> verdict.defect, verdict.choice, verdict.field
        ('bad_logprob', 0, 'logprobs')
    """

    valid: bool
    format: str | None
    defect: str | None = None
    label: str | None = None
    location: str | None = None
    message: str | None = None
    choice: int | None = None
    field: str | None = None
    token: int | None = None
    length_field: str | None = None
    length_difference: int | None = None
    bytes: int = 0
    choices: int | None = None
    tokens: int | None = None
    request_id: str | None = None
    model: str | None = None

    def as_dict(self) -> dict[str, Any]:
        # Not dataclasses.asdict, which deep-copies every value: this runs once per record.
        return {name: getattr(self, name) for name in _FIELDS}


_FIELDS = tuple(f.name for f in fields(Verdict))


def _text(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    return str(value)


@with_options
def audit(
    raw: bytes | bytearray | memoryview | str,
    format: str = "auto",
    *,
    field: str | tuple[str, ...] | None = None,
    **options: Any,
) -> Verdict:
    """Validate one captured record and say what it is, never raising for a bad record.

    ``format`` is ``"auto"`` (decided per record, as ``tokenwire check`` does) or one of
    ``"generate"``, ``"completions"``, ``"chat"``, ``"sglang"``, or a streamed (SSE) body's:
    ``"generate_stream"``, ``"completions_stream"``, ``"chat_stream"``, ``"sglang_stream"``
    (never chosen by ``"auto"``); ``field`` a dotted path to
    the response inside the record (``"sample.response"``); ``top_k`` also validates top-K
    heads; ``num_experts`` bounds the expert ids of MoE routing and ``routed_experts_shape``
    ``(layers, topk)`` shapes SGLang's routing rows (``meta_info.routed_experts``, and
    ``sglext.routed_experts`` on its chat and completions; the parsers' arguments; the generate
    format's routing carries its own shape, so it leaves it out). The options are the audited ones of
    ``tokenwire.base._options.OPTIONS``.
    """
    check_names("audit", options)
    if format != "auto" and format not in FORMATS:
        raise ValueError(f"format must be 'auto' or one of {', '.join(FORMATS)}, not {format!r}")
    if isinstance(field, str):
        field = tuple(field.split(".")) if field else None
    raw = _json.document(raw)  # a private copy of a mutable buffer; a subclass's contents
    if isinstance(raw, str):
        raw = raw.encode("utf-8", "surrogatepass")
    facts: dict[str, Any] = {}
    fmt, defect = check_record(raw, format, field, ParseOptions.checked(options), facts)
    return verdict(len(raw), fmt, defect, facts)


def verdict(size: int, fmt: str | None, defect: Defect | None, facts: dict[str, Any]) -> Verdict:
    """The verdict on a record of ``size`` bytes from what ``check_record`` found."""
    common: dict[str, Any] = {
        "format": fmt,
        "bytes": size,
        "request_id": _text(facts.get("request_id")),
        "model": _text(facts.get("model")),
    }
    if defect is None:
        return Verdict(valid=True, choices=facts.get("choices"), tokens=facts.get("tokens"), **common)
    return Verdict(
        valid=False,
        defect=defect.cls,
        label=CLASSES[defect.cls],
        location=defect.location,
        message=defect.reason,
        choice=defect.choice,
        field=defect.field,
        token=defect.token,
        length_field=defect.histogram,
        length_difference=defect.difference,
        **common,
    )
