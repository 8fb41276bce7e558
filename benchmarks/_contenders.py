"""What each benchmark times, for one response."""

from __future__ import annotations

from typing import Any

import orjson


def renderers_parse(client: Any, raw: bytes, k: int | None) -> Any:
    """renderers' generate() path over the response, for every choice."""
    data = client.parse_generate_response(raw)
    out = []
    for choice in data["choices"]:
        ids = choice.get("token_ids") or []
        if choice.get("compact_logprobs") is not None:
            out.append(client._parse_compact_logprobs(choice, ids, k))
        else:
            sampled = client._parse_completion_logprobs(choice, ids)
            top = client._parse_completion_top_logprobs(choice, ids, k) if k is not None else None
            out.append((sampled, top))
    return out


def base64_spans(raw: bytes) -> list[bytes]:
    """Every base64 payload of a response (what a perfect reader must at least decode)."""
    spans: list[bytes] = []

    def visit(value: Any, key: str | None) -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                visit(v, k)
        elif isinstance(value, list):
            for v in value:
                visit(v, None)
        elif isinstance(value, str) and key in ("data", "ids", "counts", "routed_experts") and len(value) >= 4:
            spans.append(value.encode())

    visit(orjson.loads(raw), None)
    return spans


__all__ = ["base64_spans", "renderers_parse"]
