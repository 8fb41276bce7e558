"""pytest plugin: a test session with eval-protocol's Fireworks completions client on tokenwire.

    python -m pytest -p tokenwire.compat.eval_protocol_plugin tests/

The patch (:func:`tokenwire.compat.eval_protocol.patch`) is applied while pytest loads its
initial conftest files, before any test module imports eval-protocol's client, and removed
when the session ends. Disable it with ``--tokenwire-no-eval-protocol-patch`` or
``TOKENWIRE_EVAL_PROTOCOL_PATCH=0``. The header says whether the patch is active; the
terminal summary says whether it was still in place at the end, how many calls went
through the patched method, and which tests made them.
"""

from __future__ import annotations

from typing import Any

from ._plugin import hooks

CALLERS = "tokenwire: tests that ran the patched method:"


def _report(compat: Any, reached: list[tuple[str, int]]) -> list[str]:
    return [f"{CALLERS} {len(reached)}" + "".join(f"\n  {nodeid} ({n})" for nodeid, n in reached)]


globals().update(hooks("eval_protocol", "eval-protocol's client", "TOKENWIRE_EVAL_PROTOCOL_PATCH",
                       "eval_protocol_version", option="--tokenwire-no-eval-protocol-patch",
                       label="eval-protocol", header="eval-protocol's FireworksV1CompletionsClient",
                       calls=lambda compat: compat.calls, report=_report,
                       detail=lambda compat: f"; {compat.calls} calls of the patched method"))
