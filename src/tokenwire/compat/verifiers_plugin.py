"""pytest plugin: a test session with verifiers' train client patched by
:mod:`tokenwire.compat.verifiers` (and renderers' parsers by :mod:`tokenwire.compat.renderers`).

    python -m pytest -p tokenwire.compat.verifiers_plugin tests/

The patch is applied while pytest loads its initial conftest files and removed when the
session ends; ``--tokenwire-no-patch`` or ``TOKENWIRE_VERIFIERS_PATCH=0`` turns it off. The
header says whether it is in; the terminal summary whether it stayed in for the whole session.
"""

from __future__ import annotations

from ._plugin import hooks

globals().update(hooks("verifiers", "verifiers.v1.clients.train", "TOKENWIRE_VERIFIERS_PATCH", "verifiers_version"))
