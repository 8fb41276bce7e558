"""pytest plugin: a test session with tokenwire's AReaL drop-in patched in.

    python -m pytest -p tokenwire.compat.areal_plugin tests/

The patch (:func:`tokenwire.compat.areal.patch`) is applied while pytest loads its initial
conftest files and removed when the session ends. Disable it with
``--tokenwire-no-areal-patch`` or ``TOKENWIRE_AREAL_PATCH=0``. The terminal summary says
whether the patch stayed in place for the whole session and which tests reached it.
"""

from __future__ import annotations

from ._plugin import count_calls, exercised, hooks

globals().update(hooks("areal", "AReaL", "TOKENWIRE_AREAL_PATCH", "areal_version",
                       option="--tokenwire-no-areal-patch", label="AReaL",
                       calls=count_calls, report=exercised))
