"""``tokenwire inspect``: one response's fields, their wire forms and sizes, and what tokenwire
decodes them to (dtypes, shapes, per-choice token counts)."""

from __future__ import annotations

import os
import sys
from typing import Any, TextIO

import numpy as np

import tokenwire

from ..base import _json
from ..auditing._capture import InputError, expand_paths, field_path, first_record, json_bytes
from ..auditing._formats import CLASSES, FieldMissing, check_record, field_bytes, resolve_field
from ..base._options import ParseOptions, from_args
from ..base._table import KEY

__all__ = ["describe", "main"]


def _wire(value: Any) -> str:
    """A short description of a JSON value's form."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"bool {str(value).lower()}"
    if isinstance(value, (int, float)):
        return f"number {value!r}"
    if isinstance(value, str):
        return f"str, {len(value):,} chars"
    if isinstance(value, list):
        if not value:
            return "list, empty"
        kinds = {type(v).__name__ for v in value[:64]}
        name = {"int": "ints", "float": "numbers", "dict": "objects", "list": "lists", "str": "strs"}
        what = name.get(kinds.pop(), "values") if len(kinds) == 1 else "mixed values"
        return f"list of {len(value):,} {what}"
    if isinstance(value, dict):
        if isinstance(value.get("data"), str) and ("dtype" in value or "format" in value):
            parts = [f"base64 {value.get('dtype') or value.get('format')}"]
            if "shape" in value:
                parts.append(f"shape {value['shape']}")
            if isinstance(value.get("offsets"), list):
                parts.append(f"{len(value['offsets']):,} offsets")
            return "object: " + ", ".join(parts)
        if isinstance(value.get("content"), list):
            return f"object: content, {len(value['content']):,} entries"
        shown = ", ".join(value)
        if len(shown) > 32:
            shown = shown[:29].rsplit(",", 1)[0] + ", ..."
        return f"object {{{shown}}}" if value else "object, empty"
    return type(value).__name__


def _array(a: Any) -> str | None:
    if a is None:
        return None
    if isinstance(a, tokenwire.Ragged):
        return f"Ragged: {len(a):,} rows, {len(a.values):,} {a.values.dtype} values"
    if isinstance(a, np.ndarray):
        return f"{a.dtype} {tuple(a.shape)}"
    return None


def _decoded_choice(choice: dict[str, Any], parsed: tokenwire.GenerateChoice) -> dict[str, list[str]]:
    """Field name -> what tokenwire made of it."""
    out: dict[str, list[str]] = {}

    def put(field: str, attr: str, value: Any, extra: str = "") -> None:
        text = _array(value)
        if text is not None:
            out.setdefault(field, []).append(f"{attr} {text}{extra}")

    put(KEY.token_ids, "completion_ids", parsed.completion_ids)
    if choice.get(KEY.compact_logprobs) is not None:
        source = KEY.compact_logprobs
    elif choice.get(KEY.completion_logprobs) is not None:
        source = KEY.completion_logprobs
    else:
        source = KEY.logprobs
    put(source, "completion_logprobs", parsed.completion_logprobs)
    heads = KEY.compact_logprobs if source == KEY.compact_logprobs else KEY.logprobs
    put(heads, "completion_top_ids", parsed.completion_top_ids)
    put(heads, "completion_top_logprobs", parsed.completion_top_logprobs)
    mask = KEY.sampling_mask if choice.get(KEY.sampling_mask) is not None else KEY.kept_tokens
    put(mask, "sampling_mask", parsed.sampling_mask)
    if parsed.routed_experts is not None:
        start = parsed.routed_experts.start
        put(KEY.routed_experts, "routed_experts", parsed.routed_experts.array,
            f", start {start}" if start is not None else "")
    return out


def _fields(document: dict[str, Any], decoded: dict[str, list[str]], skip: str = "") -> list[dict[str, Any]]:
    return [
        {"field": key, "wire": _wire(value), "bytes": len(json_bytes(value)),
         "decoded": decoded.get(key, [])}
        for key, value in document.items()
        if key != skip
    ]


def describe(raw: bytes, *, fmt: str = "auto", options: ParseOptions = ParseOptions()) -> dict[str, Any]:
    """Everything ``inspect`` shows about one record, as a JSON-ready dict."""
    info: dict[str, Any] = {"bytes": len(raw), "implementation": tokenwire.implementation,
                            "top_k": options.top_k}
    found, defect = check_record(raw, fmt, None, options)
    info["format"] = found
    info["valid"] = defect is None
    info["defect"] = None if defect is None else {
        "class": defect.cls, "label": CLASSES[defect.cls], "location": defect.location,
        "reason": defect.reason,
    }
    try:
        document = _json.loads(raw)
    except _json.JSONDecodeError:
        return info
    parsed = None
    if defect is None and found == "generate":
        parsed = tokenwire.parse_generate_response(raw, **options.for_format("generate"))
    if not isinstance(document, dict):
        info["document"] = _wire(document)
        return info
    top: dict[str, list[str]] = {}
    if parsed is not None and parsed.prompt_token_ids is not None:
        top[KEY.prompt_token_ids] = [f"prompt_token_ids {_array(parsed.prompt_token_ids)}"]
    info["fields"] = _fields(document, top, skip=KEY.choices)
    choices = document.get(KEY.choices)
    if isinstance(choices, list):
        info["choices"] = []
        for i, choice in enumerate(choices):
            if not isinstance(choice, dict):
                info["choices"].append({"index": i, "wire": _wire(choice)})
                continue
            ids = choice.get(KEY.token_ids)
            entry: dict[str, Any] = {
                "index": i,
                "tokens": len(ids) if isinstance(ids, list) else None,
                "finish_reason": choice.get("finish_reason"),
                "bytes": len(json_bytes(choice)),
            }
            decoded = _decoded_choice(choice, parsed.choices[i]) if parsed is not None else {}
            entry["fields"] = _fields(choice, decoded)
            info["choices"].append(entry)
        info["tokens"] = sum(c.get("tokens") or 0 for c in info["choices"])
    return info


def _table(rows: list[dict[str, Any]], out: TextIO, indent: str) -> None:
    width = max([len(r["field"]) for r in rows] + [5])
    wire = max([len(r["wire"]) for r in rows] + [4])
    out.write(f"{indent}{'field':<{width}}  {'wire':<{wire}}  {'bytes':>11}  decoded\n")
    for r in rows:
        decoded = "; ".join(r["decoded"])
        out.write(f"{indent}{r['field']:<{width}}  {r['wire']:<{wire}}  {r['bytes']:>11,}  {decoded}".rstrip() + "\n")


def text(info: dict[str, Any], out: TextIO) -> None:
    where = info["file"] + (f":{info['line']}" if info.get("line") else "")
    fmt = info["format"] or "unrecognized"
    out.write(f"{where}: {info['bytes']:,} bytes, format {fmt}, implementation {info['implementation']}"
              + (f", top_k {info['top_k']}" if info["top_k"] else "") + "\n")
    defect = info["defect"]
    if defect is None:
        out.write("valid\n")
    else:
        at = f"{defect['location']}: " if defect["location"] else ""
        out.write(f"invalid [{defect['label']}]: {at}{defect['reason']}\n")
    if "document" in info:
        out.write(f"document: {info['document']}\n")
    if "fields" in info:
        out.write("\ntop level\n")
        _table(info["fields"], out, "  ")
    for choice in info.get("choices", []):
        if "fields" not in choice:
            out.write(f"\nchoices[{choice['index']}]: {choice['wire']}\n")
            continue
        tokens = "?" if choice["tokens"] is None else f"{choice['tokens']:,}"
        out.write(f"\nchoices[{choice['index']}]: {tokens} tokens, finish_reason "
                  f"{choice['finish_reason']!r}, {choice['bytes']:,} bytes\n")
        _table(choice["fields"], out, "  ")
    if "choices" in info:
        out.write(f"\n{len(info['choices'])} choice{'s' * (len(info['choices']) != 1)}, "
                  f"{info['tokens']:,} completion tokens\n")


def main(args: Any) -> int:
    """Run ``tokenwire inspect`` from parsed arguments; the exit status."""
    path = field_path(args.field)
    if os.path.isdir(args.file):
        raise InputError(f"{args.file}: is a directory; inspect reads one file")
    (source,) = expand_paths([args.file])
    found = first_record(source, args.input, args.line)
    if found is None:
        what = f"no record on line {args.line}" if args.line else "no record"
        raise InputError(f"{source.name}: {what}")
    raw, number, _ = found
    if path is not None:
        try:
            value = resolve_field(_json.loads(raw), path)
        except _json.JSONDecodeError as exc:
            raise InputError(f"{source.name}: the record is not JSON ({exc}), so it has no --field") from None
        except FieldMissing as exc:
            raise InputError(f"{source.name}: {exc}") from None
        raw = field_bytes(value)
    described = describe(raw, fmt=args.format, options=from_args(args))
    info = {"file": source.name, "line": number or None, **described}
    if args.field:
        info["field"] = args.field
    if args.json:
        sys.stdout.write(_json.dumps(info, indent=True).decode() + "\n")
    else:
        text(info, sys.stdout)
    return 0 if info["valid"] else 1

