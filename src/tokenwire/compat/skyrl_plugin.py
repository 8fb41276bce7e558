"""pytest plugin: a test session with SkyRL's client patched by :mod:`tokenwire.compat.skyrl`
(``python -m pytest -p tokenwire.compat.skyrl_plugin tests/``), from the initial conftest
files to the session's end; ``--tokenwire-no-skyrl-patch`` or ``TOKENWIRE_SKYRL_PATCH=0`` turns
it off. The summary says whether it stayed in place and which tests reached it."""

from __future__ import annotations

from ._plugin import count_calls, exercised, hooks

globals().update(hooks("skyrl", "SkyRL", "TOKENWIRE_SKYRL_PATCH", "skyrl_version",
                       option="--tokenwire-no-skyrl-patch", label="SkyRL",
                       calls=count_calls, report=exercised))
