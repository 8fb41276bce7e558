"""JSON string text shared by the checkers' document generators (records_gen.py, scan_gen.py)."""

from __future__ import annotations

import random

SHORT = {8: "\\b", 9: "\\t", 10: "\\n", 12: "\\f", 13: "\\r"}  # the controls with a short escape


def required_escape(ch: str, rng: random.Random | None = None) -> str | None:
    """The escape JSON requires of ``ch`` (a quote, a backslash, a control character), None
    for a character that may stand as it is. A control character is its short escape when it
    has one, else ``\\u00xx``; with ``rng``, one of its escapes (short, lower or upper hex)
    picked by ``rng``."""
    if ch == '"':
        return '\\"'
    if ch == "\\":
        return "\\\\"
    o = ord(ch)
    if o >= 0x20:
        return None
    if rng is None:
        return SHORT.get(o, f"\\u{o:04x}")
    return rng.choice(([SHORT[o]] if o in SHORT else []) + [f"\\u{o:04x}", f"\\u{o:04X}"])
