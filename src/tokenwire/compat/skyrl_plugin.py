"""pytest plugin: a test session with tokenwire's SkyRL drop-in patched in.

    python -m pytest -p tokenwire.compat.skyrl_plugin tests/

The patch (:func:`tokenwire.compat.skyrl.patch`) is applied while pytest loads its initial
conftest files and removed when the session ends. Disable it with
``--tokenwire-no-skyrl-patch`` or ``TOKENWIRE_SKYRL_PATCH=0``. The terminal summary says
whether the patch stayed in place for the whole session and which tests reached it.
"""

from __future__ import annotations

from ._plugin import count_calls, exercised, hooks

globals().update(hooks("skyrl", "SkyRL", "TOKENWIRE_SKYRL_PATCH", "skyrl_version",
                       option="--tokenwire-no-skyrl-patch", label="SkyRL",
                       calls=count_calls, report=exercised))
